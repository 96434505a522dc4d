/*
 * limits_verify: one guess's decision, one EVALSHA of verify.lua per
 * request (the verify rules, the wrong-guess lock, the attempt count and
 * the code's check in one atomic step), and a second call only when the
 * guess changed something to commit; and a cancel, one call. The reply is
 * read here into the decision a caller sees.
 */
#include <stdio.h>
#include <string.h>

#include "../base/unittest.h"
#include "limits_int.h"
#include "verify.lua.h"

/* Reads verify.lua's reply into out (zeroed by the caller); wrong is the
 * wrong-guess rule, or NULL. OTP_ESTORE with detail in err when the reply
 * is not the script's, or is an abandoned call's. */
UNITTEST enum otp_rc verify_read(const struct cfg_rule *wrong, const struct store_reply *rep,
                                 struct limits_verify *out, char *err)
{
    const char *status;

    if (rep->n < VR_COUNT || (status = rep->strs[VR_STATUS]) == NULL || strcmp(status, "abandoned") == 0) {
        snprintf(err, OTP_ERR_LEN, "limits: verify script gave a bad reply");
        return OTP_ESTORE;
    }
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[VR_VID] ? rep->strs[VR_VID] : "");
    out->attempts_left = (int)rep->ints[VR_ATTEMPTS_LEFT];
    out->retry_ms = rep->ints[VR_WINDOW_LEFT];
    out->shadow_lock = rep->ints[VR_SHADOW_LOCK] == 1;
    if (strcmp(status, "ok") == 0)
        out->rc = OTP_OK;
    else if (strcmp(status, "wrong") == 0)
        out->rc = OTP_EBADCODE;
    else if (strcmp(status, "locked") == 0)
        out->rc = OTP_ELOCKED;
    else if (strcmp(status, "limited") == 0)
        out->rc = OTP_ELIMITED;
    else
        out->rc = OTP_ENOTFOUND;
    if (wrong != NULL && !wrong->shadow) {
        limits_header_set(&out->header, wrong, wrong->limit - rep->ints[VR_WRONG], out->retry_ms);
        if (out->rc == OTP_ELOCKED)
            snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    }
    if (wrong != NULL && out->shadow_lock)
        snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    return OTP_OK;
}

/* Reads the verdicts of the verify rules (used, in the script's order)
 * after verify.lua's fixed values. A refusal names the enforced rule that
 * refuses longest, and its Retry-After is the longest wait; without a
 * wrong-guess rule, an answer's RateLimit fields are the tightest rule's. */
static void verify_rules_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                              struct limits_verify *out)
{
    const struct cfg_rule *why = NULL;
    int64_t why_reset = -1, best_remaining = INT64_MAX;
    size_t i;

    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        const long long *v = rep->ints + VR_COUNT + i * IR_PER_RULE;
        if (v[IR_RULE_OK] != 1 && r->shadow) {
            limits_name_append(out->shadow, sizeof(out->shadow), r->name);
        } else if (v[IR_RULE_OK] != 1) {
            if (v[IR_RULE_RESET] > why_reset)
                why = r, why_reset = v[IR_RULE_RESET];
        } else if (!r->shadow && out->rc != OTP_ELIMITED && v[IR_RULE_REMAINING] < best_remaining &&
                   (best_remaining != INT64_MAX || out->header.name[0] == '\0')) {
            best_remaining = v[IR_RULE_REMAINING];
            limits_header_set(&out->header, r, v[IR_RULE_REMAINING], v[IR_RULE_RESET]);
        }
    }
    if (out->rc == OTP_ELIMITED && why != NULL) {
        snprintf(out->reason, sizeof(out->reason), "%s", why->name);
        out->retry_ms = why_reset;
        limits_header_set(&out->header, why, 0, why_reset);
    }
}

/*
 * Whether the verify.lua run read into out (verify_read) left an undo
 * record that limits_commit must delete. The script writes one (its
 * done()) exactly when the guess changed something: it met a live
 * verification (its id is in the reply: 'ok', 'wrong', or a 'locked' that
 * counted this guess), or a verify rule took (a verdict of 1 in the reply)
 * without the reply being 'limited' (a refusal takes nothing). 'none' and
 * an early 'locked' that took nothing write no record: nothing to abandon
 * and nothing to commit, so such a verify is one EVALSHA, not two. A
 * verdict of 1 that took nothing (no counter kind) errs on the side of a
 * commit. A replay of a recorded run returns its recorded reply, which
 * says the same.
 */
static int verify_recorded(const struct limits_verify *out, const struct store_reply *rep, size_t n_used)
{
    size_t i;

    if (out->rc == OTP_ELIMITED)
        return 0;
    if (out->vid[0] != '\0')
        return 1;
    for (i = 0; i < n_used; i++)
        if (rep->ints[VR_COUNT + i * IR_PER_RULE + IR_RULE_OK] == 1)
            return 1;
    return 0;
}

/* Reads a whole verify.lua reply for call c into out: its fixed values
 * and the verify rules' verdicts. OTP_ESTORE with detail in err when the
 * reply is not the script's, or is an abandoned call's. */
static enum otp_rc verify_reply_read(const struct limits_call *c, const struct store_reply *rep,
                                     struct limits_verify *out, char *err)
{
    enum otp_rc rc = verify_read(c->wrong, rep, out, err);

    if (rc == OTP_OK && rep->n != VR_COUNT + c->n_used * IR_PER_RULE) {
        snprintf(err, OTP_ERR_LEN, "limits: verify script gave %zu values (want %zu)", rep->n,
                 VR_COUNT + c->n_used * IR_PER_RULE);
        rc = OTP_ESTORE;
    }
    if (rc == OTP_OK)
        verify_rules_read(c->used, c->n_used, rep, out);
    return rc;
}

/* Remembers the enforced refusals of a verify read into out (call c on
 * keys, begun at t0) in the refusal cache. */
static void verify_cache(struct limits *l, uint64_t gen, const struct limits_call *c, char (*keys)[LIMITS_KEY_LEN],
                         const struct store_reply *rep, const struct limits_verify *out, int64_t t0)
{
    if (out->rc == OTP_ELIMITED)
        limits_cache_verdicts(l, gen, RCACHE_VERIFY, c, keys, rep->ints + VR_COUNT, t0, limits_mono_ms());
    /* A lock: verify.lua counts no penalty for it. */
    if (out->rc == OTP_ELOCKED && c->wrong != NULL && rcache_cacheable(c->wrong))
        limits_cache_put(l, gen, RCACHE_VERIFY, c->wrong, 1, c->wkey, c->wfield, t0, t0, out->retry_ms, 0, 0);
}

enum otp_rc limits_verify(struct limits *l, const struct limits_request *rq, const char *guess_hash,
                          int max_attempts, struct limits_verify *out, char *err)
{
    struct limits_rules *rs;
    /* On the stack and not cleared (the frame is about 33 KB; an HTTP
     * worker's stack is the default 8 MB): each is read only as far as it
     * was written (limits_verify_args). Calloc'd, they cost every verify
     * 27 KB of clearing, and the worker arenas' heaps grew and shrank
     * around them (mprotect). */
    struct limits_call c;
    struct limits_undo ub, *u = &ub;
    struct store_reply *rep = NULL;
    char cerr[OTP_ERR_LEN];
    int maybe_ran = 0;
    enum otp_rc rc;
    uint64_t gen;
    int64_t t0;

    memset(out, 0, sizeof(*out));
    if (rq->idem != NULL)
        u = &out->undo; /* the caller commits it, with its answer */
    limits_flush_first(l);
    gen = rcache_gen(l->rc); /* before the rules, as in limits_issue */
    rs = limits_rules_get(l);
    limits_verify_args(rs, rq, guess_hash, max_attempts, u, &c);
    t0 = limits_mono_ms(); /* before the call (rcache_deadline_ms) */
    rc = store_eval_idem(l->store, l->h_verify, c.args.nkeys, c.args.n, c.args.v, &rep, &maybe_ran, err);
    if (rc != OTP_OK) {
        if (maybe_ran)
            limits_undo_queue(l, u);
        goto out;
    }
    if (limits_idem_stopped(rep, &out->idem_taken, &out->rc, out->reason, &out->retry_ms))
        goto out;
    if ((rc = verify_reply_read(&c, rep, out, err)) != OTP_OK) {
        rc = OTP_ESTORE;
        limits_undo_queue(l, u);
        goto out;
    }
    if (l->rc != NULL && rq->at_ms == 0)
        verify_cache(l, gen, &c, u->keys, rep, out, t0);
    /* Answered: nobody will abandon it; a lost commit's record expires.
     * With an Idempotency-Key, the caller commits it with its answer. */
    if (!verify_recorded(out, rep, c.n_used))
        u->nkeys = 0;
    else if (rq->idem == NULL)
        limits_commit(l, u, NULL, 0, cerr);
out:
    if (rq->idem != NULL && (rc != OTP_OK || out->idem_taken || out->rc == OTP_ELIMITED))
        u->nkeys = 0; /* nothing claimed: nothing to commit or abandon */
    store_reply_free(rep);
    limits_rules_put(l, rs);
    return rc;
}

enum otp_rc limits_cancel(struct limits *l, const struct limits_request *rq, char *vid, char *err)
{
    struct store_reply *rep = NULL;
    char phone[LIMITS_KEY_LEN], undo[LIMITS_KEY_LEN];
    struct limits_args a;
    enum otp_rc rc;
    int i;

    vid[0] = '\0';
    limits_flush_first(l);
    limits_phone_key(rq, phone, sizeof(phone));
    limits_undo_key(rq->rid, undo, sizeof(undo));
    limits_args_init(&a);
    limits_args_key(&a, phone); /* VK_PHONE */
    limits_args_key(&a, undo);  /* the undo key, the last */
    /* verify.lua's op 'k' reads VA_OP and VA_SCOPE only. */
    limits_argv_str(&a, VA_OP, "k");
    for (i = VA_OP + 1; i < VA_SCOPE; i++)
        limits_argv_str(&a, i, "");
    limits_argv_str(&a, VA_SCOPE, rq->scope);
    rc = store_eval(l->store, l->h_verify, a.nkeys, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != 1 || rep->strs[0] == NULL || strlen(rep->strs[0]) >= LIMITS_ID_MAX) {
        snprintf(err, OTP_ERR_LEN, "limits: cancel gave a bad reply");
        rc = OTP_ESTORE;
        goto out;
    }
    snprintf(vid, LIMITS_ID_MAX, "%s", rep->strs[0]);
    rc = vid[0] ? OTP_OK : OTP_ENOTFOUND;
out:
    store_reply_free(rep);
    return rc;
}
