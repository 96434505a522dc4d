/*
 * limits_issue: one issue's decision, one EVALSHA of issue.lua per request
 * (the rules, the cost caps, the queue and the verification in one atomic
 * step): the call, with its retry and abandon, and the reading of its
 * reply into the decision a caller sees. The reply readers here serve
 * verify too (the RateLimit fields, an Idempotency-Key's refusal).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/unittest.h"
#include "issue.lua.h"
#include "limits_int.h"

void limits_header_set(struct limits_header *h, const struct cfg_rule *r, int64_t remaining, int64_t reset_ms)
{
    snprintf(h->name, sizeof(h->name), "%s", r->name);
    h->quota = r->limit;
    h->window_s = limits_ceil_s(r->window_ms);
    h->remaining = remaining < 0 ? 0 : remaining;
    h->reset_s = limits_ceil_s(reset_ms);
}

void limits_name_append(char *list, size_t cap, const char *name)
{
    size_t n = strlen(list);

    snprintf(list + n, cap - n, "%s%s", n ? "," : "", name);
}

int limits_idem_stopped(const struct store_reply *rep, int *taken, enum otp_rc *rc, char *reason,
                        int64_t *retry_ms)
{
    const char *st = rep->n >= 1 ? rep->strs[0] : NULL;
    long long v = rep->n >= 1 && st == NULL ? rep->ints[0] : 0;

    if ((st != NULL && strcmp(st, "taken") == 0) || (st == NULL && v == IR_IDEM_TAKEN)) {
        *taken = 1;
        *rc = OTP_EINVAL;
        return 1;
    }
    if ((st != NULL && strcmp(st, "keys") == 0 && rep->n >= VR_COUNT) ||
        (st == NULL && v == IR_IDEM_FULL && rep->n > IR_IDEM_WAIT)) {
        *rc = OTP_ELIMITED;
        snprintf(reason, CFG_NAME_MAX, "%s", LIMITS_IDEM_REASON);
        *retry_ms = st != NULL ? rep->ints[VR_WINDOW_LEFT] : rep->ints[IR_IDEM_WAIT];
        return 1;
    }
    return 0;
}

/* Reads issue.lua's reply into out. A refusal names the lock if there is
 * one, else the enforced rule that refuses longest; its Retry-After is the
 * longest wait of every refusal, cost caps included, so it is never early. */
UNITTEST void issue_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                         struct limits_issue *out)
{
    const struct cfg_rule *lock = NULL, *limit = NULL;
    int64_t best_remaining = INT64_MAX, best_reset = -1, lock_reset = 0, limit_reset = -1;
    int64_t wait_ms = rep->ints[IR_COST_RETRY];
    size_t i;

    const long long *pump = rep->ints + rep->n - IR_PUMP_N;

    out->now_ms = rep->ints[IR_NOW];
    out->pump = (enum limits_pump)pump[IR_PUMP_STATE];
    out->pump_sent = pump[IR_PUMP_SENT];
    out->pump_verified = pump[IR_PUMP_VERIFIED];
    out->pump_left_ms = pump[IR_PUMP_RETRY];
    if (out->pump == LIMITS_PUMP_HELD || out->pump == LIMITS_PUMP_STARTED) {
        /* Checked before the rules: they were not run, nothing was taken,
         * and no rule's RateLimit fields apply. */
        out->rc = OTP_EPUMPING;
        out->retry_ms = pump[IR_PUMP_RETRY];
        return;
    }
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[IR_VID] ? rep->strs[IR_VID] : "");
    out->expires_in_ms = rep->ints[IR_EXPIRES];
    out->resend_after_ms = rep->ints[IR_NEXT];
    /* IR_IS_NEW says whether vid is the proposed id; the ledger does not
     * need it (the verification row is inserted or kept with every message). */
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        const long long *v = rep->ints + IR_RULES + i * IR_PER_RULE;
        int ok = v[IR_RULE_OK] == 1;
        int64_t remaining = v[IR_RULE_REMAINING], reset = v[IR_RULE_RESET];
        if (!ok && r->shadow) {
            limits_name_append(out->shadow, sizeof(out->shadow), r->name);
        } else if (!ok) {
            if (reset > wait_ms)
                wait_ms = reset;
            if (r->algo == CFG_ALGO_WRONG_GUESS_CAP)
                lock = r, lock_reset = reset;
            else if (reset > limit_reset)
                limit = r, limit_reset = reset;
        } else if (!r->shadow) {
            if (remaining < best_remaining || (remaining == best_remaining && reset > best_reset)) {
                best_remaining = remaining;
                best_reset = reset;
                limits_header_set(&out->header, r, remaining, reset);
            }
        }
    }
    if (rep->ints[IR_ALLOWED] == 1) {
        out->rc = OTP_OK;
        return;
    }
    out->retry_ms = wait_ms;
    out->depth = rep->ints[IR_FULL];
    if (out->depth >= 0 && lock == NULL && limit == NULL && wait_ms == 0) {
        out->rc = OTP_EFULL;
        if (rep->ints[IR_IS_NEW] == 1)
            snprintf(out->reason, sizeof(out->reason), "share_per_key");
        memset(&out->header, 0, sizeof(out->header)); /* a 503, like cost_cap: no RateLimit headers */
        return;
    }
    if (lock != NULL || limit != NULL) {
        const struct cfg_rule *why = lock ? lock : limit;
        out->rc = lock ? OTP_ELOCKED : OTP_ELIMITED;
        snprintf(out->reason, sizeof(out->reason), "%s", why->name);
        limits_header_set(&out->header, why, 0, lock ? lock_reset : limit_reset);
    } else {
        out->rc = OTP_ECOST;
    }
}

/* 1 when rep has issue.lua's layout for n_used rules: the fixed values,
 * the rules' verdicts and the pumping guard's values; or, for a refusal by
 * the guard (checked before the rules), no verdicts. */
static int issue_reply_ok(const struct store_reply *rep, size_t n_used)
{
    long long state;

    if (rep->n < IR_RULES + IR_PUMP_N || rep->strs[IR_ALLOWED] != NULL || rep->ints[IR_ALLOWED] < 0)
        return 0;
    state = rep->ints[rep->n - IR_PUMP_N + IR_PUMP_STATE];
    if (rep->n == IR_RULES + IR_PUMP_N && (state == LIMITS_PUMP_HELD || state == LIMITS_PUMP_STARTED))
        return 1;
    return rep->n == IR_RULES + n_used * IR_PER_RULE + IR_PUMP_N;
}

enum otp_rc limits_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out, char *err)
{
    struct limits_call *c = calloc(1, sizeof(*c));
    struct limits_rules *rs;
    struct store_reply *rep = NULL;
    struct limits_undo *u = &out->undo;
    enum otp_rc rc = OTP_ENOMEM;
    int maybe_ran = 0;
    uint64_t gen;
    int64_t t0;

    memset(out, 0, sizeof(*out));
    limits_flush_first(l);
    /* Before the rules: a reload or an override swaps them, then clears,
     * so a refusal under rules it retired can never be stored after its
     * clear (read after the snapshot, the generation could be the new one). */
    gen = rcache_gen(l->rc);
    rs = limits_rules_get(l);
    if (c == NULL) {
        snprintf(err, OTP_ERR_LEN, "limits: out of memory");
        goto out;
    }
    limits_issue_args(rs, rq, &l->fleet, out, c);
    if (c->overflow) {
        /* Fail closed: an issue never runs without a rule it brought. */
        snprintf(err, OTP_ERR_LEN, "limits: the request's own rules do not fit one call with the config's");
        u->nkeys = 0;
        rc = OTP_ESTORE;
        goto out;
    }
    t0 = limits_mono_ms(); /* before the call: Redis decides after this (rcache_deadline_ms) */
    rc = store_eval_idem(l->store, l->h_issue, c->args.nkeys, c->args.n, c->args.v, &rep, &maybe_ran, err);
    if (rc != OTP_OK) {
        if (maybe_ran)
            limits_undo_queue(l, u);
        goto out;
    }
    if (limits_idem_stopped(rep, &out->idem_taken, &out->rc, out->reason, &out->retry_ms))
        goto out;
    if (!issue_reply_ok(rep, c->n_used)) {
        snprintf(err, OTP_ERR_LEN, "limits: issue script gave %zu values (want %zu) or was abandoned", rep->n,
                 IR_RULES + c->n_used * IR_PER_RULE + IR_PUMP_N);
        limits_undo_queue(l, u);
        rc = OTP_ESTORE;
        goto out;
    }
    issue_read(c->used, c->n_used, rep, out);
    /* Not on a replay clock (otpctl simulate): the deadlines are on ours. */
    if (l->rc != NULL && rq->at_ms == 0 && (out->rc == OTP_ELIMITED || out->rc == OTP_ELOCKED))
        limits_cache_verdicts(l, gen, RCACHE_ISSUE, c, u->keys, rep->ints + IR_RULES, t0, limits_mono_ms());
out:
    if (rc != OTP_OK || out->rc != OTP_OK)
        u->nkeys = 0; /* nothing taken that the caller could abandon */
    store_reply_free(rep);
    free(c);
    limits_rules_put(l, rs);
    return rc;
}
