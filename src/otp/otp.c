/*
 * otp: issue, verify, cancel and status, one call per API request, on the
 * HTTP worker threads, and the service's life (new, reload, free, the
 * pacer's start). Each issue costs one Redis round trip and, when
 * accepted, one ledger commit (shared with whatever else commits in that
 * batch); each verify one Redis round trip. Refusals are recorded without
 * waiting. What refuses before any limit is otp_gate.c's; the counters and
 * /metrics are otp_metrics.c's; /readyz is otp_ready.c's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/wipe.h"
#include "../pacer/schedule.h"
#include "otp_int.h"

/* A release whose outcome is unknown is tried this often, this far apart. */
#define OTP_RELEASE_TRIES 3
#define OTP_RELEASE_GAP_MS 100

struct otp *otp_new(const struct otp_deps *d)
{
    struct otp *o = calloc(1, sizeof(*o));

    if (o == NULL)
        return NULL;
    o->d = *d;
    if ((o->idem = idem_new(d->store, d->keys)) == NULL ||
        (o->report = report_new(d->cfg.provider, d->keys, d->ledger, d->lanes)) == NULL) {
        idem_free(o->idem);
        free(o);
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    otp_metrics_seed(o);
    pthread_mutex_init(&o->live_mu, NULL);
    otp_reload(o, d->cfg.otp);
    return o;
}

void otp_reload(struct otp *o, const struct otp_conf *c)
{
    pthread_mutex_lock(&o->live_mu);
    o->ttl_ms = c->ttl_ms;
    snprintf(o->tmpl, sizeof(o->tmpl), "%s", c->tmpl);
    memcpy(o->templates, c->templates, c->n_templates * sizeof(c->templates[0]));
    o->n_templates = c->n_templates;
    pthread_mutex_unlock(&o->live_mu);
}

void otp_free(struct otp *o)
{
    if (o == NULL)
        return;
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->live_mu);
    idem_free(o->idem);
    report_free(o->report);
    free(o);
}

struct idem *otp_idem(struct otp *o)
{
    return o->idem;
}

int otp_code_length(const struct otp *o)
{
    return o->d.cfg.otp->length;
}

struct admin *otp_admin(struct otp *o)
{
    return o->d.admin;
}

void otp_admin_changed(struct otp *o)
{
    limits_cache_clear(o->d.limits);
}

void otp_answer_set(struct otp_answer *out, enum otp_outcome outcome, const char *fmt, ...)
{
    va_list ap;

    out->outcome = outcome;
    out->rc = otp_outcome_row(outcome)->rc;
    va_start(ap, fmt);
    vsnprintf(out->detail, sizeof(out->detail), fmt, ap);
    va_end(ap);
}

/* The caller may retry once the breaker lets a probe through, not before. */
void otp_store_down(struct otp *o, struct otp_answer *out, const char *op, const char *err)
{
    log_event(LOG_WARN, "store.unavailable", LOG_FIELDS(LOG_STR("op", op), LOG_STR("outcome", "store_unavailable")),
              "%s refused, store unavailable: %s", op, err);
    otp_answer_set(out, OUT_STORE_UNAVAILABLE, "the rate-limit store is unavailable");
    out->retry_after_s = otp_retry_s(store_breaker_left_ms(o->d.store));
}

/* The purpose of rq: "default" when the request named none. */
static const char *purpose_of(const struct otp_req *rq)
{
    return rq->purpose ? rq->purpose : "default";
}

/* The values of rq that rules are keyed on, into lr (no HMAC: the refusal
 * cache's lookup needs only these); ip_key is limits_ip_key's, or NULL. */
static void keys_fill(const struct otp_req *rq, const char *ip_key, struct limits_request *lr)
{
    lr->phone = rq->phone;
    lr->device_id = rq->device_id;
    lr->api_key = rq->api_key;
    lr->purpose = purpose_of(rq);
    lr->ip_key = ip_key;
    memcpy(lr->region, rq->region, sizeof(lr->region));
    lr->type = rq->type;
    lr->extra = rq->extra;
    lr->n_extra = rq->n_extra;
}

/* The parts of a limits request that name rq's verification (phone,
 * caller, purpose) and its keys (lr->ip_key kept); scope holds
 * CODE_SCOPE_LEN + 1 bytes. */
static void scope_fill(struct otp *o, const struct otp_req *rq, struct limits_request *lr, char *scope)
{
    code_scope(o->d.keys, rq->api_key, purpose_of(rq), scope);
    keys_fill(rq, lr->ip_key, lr);
    lr->scope = scope;
}

static struct ledger_request request_row(const struct otp_req *rq, const char *kind, const char *decision,
                                         const char *rule, const char *shadow, const char *vid, const char *mid,
                                         int status)
{
    struct ledger_request r = {
        .ts_ms = clock_wall_ms(),
        .kind = kind,
        .api_key = rq->api_key,
        .phone = rq->phone,
        .device_id = rq->device_id,
        .client_ip = rq->client_ip,
        .decision = decision,
        .rule = rule && rule[0] ? rule : NULL,
        .shadow = shadow && shadow[0] ? shadow : NULL,
        .verification_id = vid && vid[0] ? vid : NULL,
        .message_id = mid && mid[0] ? mid : NULL,
        .http_status = status,
        .purpose = purpose_of(rq),
    };

    return r;
}

/* Every ledger submission's status goes through here: a failure (out of
 * memory, or the ledger closing) is logged and counted, never dropped
 * silently. Submissions only fail before anything was queued, so the
 * caller may retry once. Returns rc. */
static enum otp_rc ledger_checked(struct otp *o, enum otp_rc rc, const char *what, const char *id)
{
    if (rc == OTP_OK)
        return rc;
    log_msg(LOG_ERROR, "ledger: %s failed for %s: %s", what, id && id[0] ? id : "-", otp_rc_str(rc));
    pthread_mutex_lock(&o->mu);
    o->ledger_errors++;
    pthread_mutex_unlock(&o->mu);
    return rc;
}

void otp_record(struct otp *o, const struct otp_req *rq, const char *kind, const struct otp_answer *a,
                const char *shadow, const char *vid)
{
    const struct otp_outcome_row *row = otp_outcome_row(a->outcome);
    struct ledger_request r = request_row(rq, kind, row->error, a->reason, shadow, vid, NULL, row->http_status);
    enum otp_rc rc = ledger_request(o->d.ledger, &r);

    if (rc != OTP_OK)
        rc = ledger_request(o->d.ledger, &r);
    ledger_checked(o, rc, kind, vid);
}

/* A verification's new state after a guess; retried once, then counted. */
static void verification_update(struct otp *o, const char *vid, const char *status, int wrong_delta)
{
    enum otp_rc rc = ledger_verification_update(o->d.ledger, vid, status, wrong_delta, clock_wall_ms());

    if (rc != OTP_OK)
        rc = ledger_verification_update(o->d.ledger, vid, status, wrong_delta, clock_wall_ms());
    ledger_checked(o, rc, "verification update", vid);
}

/* Releases an accepted issue's message to the senders (limits_commit),
 * with answer (or NULL) stored for its Idempotency-Key in the same step.
 * The commit is idempotent, so a failure whose outcome is unknown is tried
 * again a few times (Redis blips are short): the answer, 202 or 503, should
 * rest on a known outcome. OTP_OK once released. */
static enum otp_rc release(struct otp *o, const struct limits_undo *u, const char *answer, char *err)
{
    enum otp_rc rc = OTP_ESTORE;
    int tries;

    for (tries = 0; tries < OTP_RELEASE_TRIES &&
                    (rc = limits_commit(o->d.limits, u, answer, IDEM_KEEP_MS, err)) == OTP_ESTORE;
         tries++)
        nanosleep(&(struct timespec){0, OTP_RELEASE_GAP_MS * 1000000L}, NULL);
    return rc;
}

/* The Idempotency-Key's part of lr (none without one), in li. */
static void idem_fill(struct otp *o, const struct otp_req *rq, struct limits_idem *li,
                      struct limits_request *lr)
{
    if (rq->idem == NULL)
        return;
    li->key = rq->idem->claim->rkey;
    li->count = rq->idem->claim->ckey;
    li->hash = rq->idem->claim->hash;
    li->claim_ms = IDEM_PENDING_MS;
    li->max_keys = o->d.cfg.otp->idem_keys;
    lr->idem = li;
}

/* rq's Idempotency-Key is another request's, or this request's claim on it
 * lapsed before its commit (its decision is given back): nothing of this
 * attempt stands, so it is neither recorded nor counted, and the HTTP
 * layer looks the key up again. */
static void idem_again(struct otp_answer *out)
{
    memset(out, 0, sizeof(*out));
    otp_answer_set(out, OUT_IDEM_IN_USE, "a request with this Idempotency-Key is still being decided");
    out->retry_after_s = 1;
}

/* An accepted message that will never be released: its ledger row ends
 * 'failed' with why. */
static void unreleased(struct otp *o, const char *id, const char *why)
{
    ledger_checked(o,
                   ledger_message_state(o->d.ledger, id, MSG_FAILED, MSG_BIT(MSG_QUEUED), NULL, why, -1,
                                        clock_wall_ms()),
                   "release failure", id);
}

/* What one issue's script call names and carries; lr points into it. */
struct issue_call {
    char ip_key[LIMITS_IP_KEY_MAX], vid[CODE_ID_LEN + 1], vhash[CODE_HASH_LEN + 1];
    char rid[CODE_ID_LEN + 1], scope[CODE_SCOPE_LEN + 1];
    char style[SMS_STYLE_MAX + 1]; /* the message's (otp_style) */
    struct limits_request lr;
    struct limits_idem lid;
};

/* The rest of x->lr for an issue no remembered refusal answered: a new
 * verification (its id and the keyed hash of its code, which is wiped at
 * once), the ids of the script call and of the message (into mid,
 * CODE_ID_LEN + 1 bytes), the code's life and the Idempotency-Key. */
static void issue_call_fill(struct otp *o, const struct otp_req *rq, struct issue_call *x, char *mid)
{
    char code[CODE_MAX_DIGITS + 1];

    code_new_id(x->vid);
    code_derive(o->d.keys, x->vid, o->d.cfg.otp->length, code);
    code_hash(o->d.keys, rq->phone, code, x->vhash);
    wipe(code, sizeof(code));
    scope_fill(o, rq, &x->lr, x->scope);
    code_new_id(x->rid); /* names this request's script call, for its retry and its abandon */
    x->lr.rid = x->rid;
    code_new_id(mid); /* the message an accepted issue queues */
    x->lr.mid = mid;
    x->lr.vid = x->vid;
    x->lr.vhash = x->vhash;
    pthread_mutex_lock(&o->live_mu);
    x->lr.ttl_ms = o->ttl_ms;
    pthread_mutex_unlock(&o->live_mu);
    x->lr.max_attempts = o->d.cfg.otp->max_attempts;
    x->lr.style = x->style;
    idem_fill(o, rq, &x->lid, &x->lr);
}

/* The answer to an issue that issue.lua (or the refusal cache) refused. */
static void issue_refusal(const struct lanes_pick *pk, const struct limits_issue *li, struct otp_answer *out)
{
    out->retry_after_s = otp_retry_s(li->retry_ms);
    snprintf(out->reason, sizeof(out->reason), "%s", li->reason);
    if (li->rc == OTP_EFULL) {
        otp_answer_set(out, OUT_QUEUE_FULL, "the send queue is full");
        out->retry_after_s = sched_full_retry_s(li->depth, pk->lane->pacer.rate);
    } else if (li->rc == OTP_ECOST) {
        otp_answer_set(out, OUT_COST_CAP, "the SMS budget is spent for now");
    } else if (li->rc == OTP_ELOCKED) {
        otp_answer_set(out, OUT_LOCKED, "too many wrong codes for this phone");
    } else if (li->rc == OTP_EPUMPING) {
        otp_answer_set(out, OUT_SUSPECTED_PUMPING,
                       "codes to numbers starting %s are paused: too few of them are verified "
                       "(suspected SMS pumping)", li->pump_prefix);
        snprintf(out->reason, sizeof(out->reason), "pumping");
    } else if (strcmp(li->reason, LIMITS_IDEM_REASON) == 0) {
        otp_answer_set(out, OUT_RATE_LIMITED, "this caller holds otp.idempotency_keys Idempotency-Keys already");
    } else {
        otp_answer_set(out, OUT_RATE_LIMITED, "limit %s reached", li->reason);
    }
}

/* How an accepted issue ended: its message released (202 in out), its key
 * found another's (idem_again's answer in out, everything given back), or
 * our own failure (in out) whose takes the caller gives back. */
enum issue_end { ISSUE_RELEASED, ISSUE_AGAIN, ISSUE_UNDO };

/* Accepted: the message is held in Redis (issue.lua, "Holds") until its
 * rows are durable here; only then does the commit make it visible to the
 * fleet's senders, and only then is it 202. Its expiry is on Redis's
 * clock, as the senders check it. */
static enum issue_end issue_accept(struct otp *o, const struct otp_req *rq, const struct limits_issue *li,
                                   const struct lanes_pick *pk, struct otp_answer *out)
{
    const struct otp_outcome_row *ok = otp_outcome_row(OUT_ACCEPTED);
    int64_t exp_ms = li->now_ms + li->expires_in_ms;
    struct ledger_message lm = {.id = out->id,
                                .verification_id = li->vid,
                                .api_key = rq->api_key,
                                .phone = rq->phone,
                                .state = MSG_QUEUED,
                                .created_ms = li->now_ms,
                                .expires_ms = exp_ms,
                                .price_minor = li->price_minor,
                                .cost_ms = li->now_ms,
                                .cost_caps = li->cost_caps};
    struct ledger_request row =
        request_row(rq, "issue", ok->error, NULL, li->shadow, li->vid, out->id, ok->http_status);
    char err[OTP_ERR_LEN] = "", *packed = NULL;
    enum otp_rc rc;

    /* The verification, message and request rows commit together before the 202. */
    if (ledger_accept(o->d.ledger, &lm, exp_ms, &row) != OTP_OK) {
        log_msg(LOG_ERROR, "ledger commit failed; issue refused");
        otp_answer_set(out, OUT_LEDGER_UNAVAILABLE, "the audit ledger cannot commit");
        return ISSUE_UNDO;
    }
    otp_answer_set(out, OUT_ACCEPTED, "accepted");
    snprintf(out->verification_id, sizeof(out->verification_id), "%s", li->vid);
    out->expires_in_s = li->expires_in_ms / 1000;
    out->resend_after_s = otp_ceil_s(li->resend_after_ms);
    /* With an Idempotency-Key, this 202 is stored with the release. */
    if (rq->idem != NULL && (packed = rq->idem->pack(rq->idem->ctx, out)) == NULL) {
        unreleased(o, out->id, "never released: out of memory for its answer");
        otp_answer_set(out, OUT_INTERNAL, "out of memory");
        return ISSUE_UNDO;
    }
    rc = release(o, &li->undo, packed, err);
    free(packed);
    if (rc == OTP_ENOTFOUND && rq->idem != NULL) {
        /* Fenced: our claim lapsed (this instance stalled) and the key may
         * be another request's by now; ours is given back, unsent. */
        log_msg(LOG_WARN, "message %s not released: %s", out->id, err);
        unreleased(o, out->id, "never released: its Idempotency-Key's claim lapsed first");
        limits_abandon(o->d.limits, &li->undo);
        idem_again(out);
        return ISSUE_AGAIN;
    }
    if (rc != OTP_OK) {
        /* Not visible to the senders; or, if a commit ran after all and its
         * answers were lost, ended unsent by the caller's abandon unless a
         * sender started it in between (docs/architecture.md, "The pacer and the fleet"). */
        log_msg(LOG_ERROR, "cannot release message %s to the senders: %s", out->id, err);
        unreleased(o, out->id, "never released to the senders: answered 503");
        otp_answer_set(out, OUT_STORE_UNAVAILABLE, "the store did not confirm the message");
        return ISSUE_UNDO;
    }
    pacer_wake(pk->pacer);
    return ISSUE_RELEASED;
}

void otp_issue(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    struct issue_call x = {0};
    struct limits_issue li;
    struct lanes_pick pk;
    struct limits_lane lane;
    char err[OTP_ERR_LEN] = "";

    memset(out, 0, sizeof(*out));
    memset(&li, 0, sizeof(li));
    /* otp_issue_screen refused a bad client_ip and a message too long already. */
    if (rq->client_ip && limits_ip_key(rq->client_ip, x.ip_key, sizeof(x.ip_key)) != OTP_OK) {
        otp_answer_set(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        return;
    }
    if (otp_style(o, rq, x.style, sizeof(x.style), out) < 0)
        return;
    /* The provider it goes to (otp_issue_screen refused a phone no route covers). */
    if (otp_lane(o, rq, &pk, out) != 0)
        goto refused;
    lane = (struct limits_lane){pacer_stream(pk.pacer), pk.lane->pacer.capacity, pk.lane->prices, pk.lane->n_prices};
    x.lr.lane = &lane;
    /* A refusal remembered from Redis: answered before any code work. */
    keys_fill(rq, rq->client_ip ? x.ip_key : NULL, &x.lr);
    if ((out->cached = limits_cached_issue(o->d.limits, &x.lr, &li)) == 0) {
        issue_call_fill(o, rq, &x, out->id);
        if (limits_issue(o->d.limits, &x.lr, &li, err) != OTP_OK) {
            otp_store_down(o, out, "issue", err);
            goto refused;
        }
        if (li.idem_taken) {
            idem_again(out);
            return;
        }
    }
    out->header = li.header;
    otp_pump_note(o, rq, &li);
    if (li.shadow[0])
        otp_count_shadow(o, li.shadow, "issue");
    if (li.rc != OTP_OK) {
        issue_refusal(&pk, &li, out);
        goto refused;
    }
    switch (issue_accept(o, rq, &li, &pk, out)) {
    case ISSUE_RELEASED:
        otp_count(o, OTP_OP_ISSUE, out);
        return;
    case ISSUE_AGAIN:
        return;
    case ISSUE_UNDO:
        break;
    }
    /* Our own failure after the limits were taken: no SMS, and everything
     * the script took (quota, cost, the verification it started, the
     * message's hold, the Idempotency-Key's claim) goes back through its
     * undo record. */
    limits_abandon(o->d.limits, &li.undo);
    out->retry_after_s = 1;
refused:
    otp_record(o, rq, "issue", out, li.shadow, NULL);
    otp_count(o, OTP_OP_ISSUE, out);
}

/* The answer to a guess, from what verify.lua said of it. */
static void verify_answer(const struct limits_verify *lv, struct otp_answer *out)
{
    out->header = lv->header;
    out->attempts_left = lv->attempts_left;
    switch (lv->rc) {
    case OTP_OK:
        otp_answer_set(out, OUT_VERIFIED, "verified");
        snprintf(out->verification_id, sizeof(out->verification_id), "%s", lv->vid);
        break;
    case OTP_EBADCODE:
        otp_answer_set(out, OUT_INVALID_CODE, "the code is wrong");
        snprintf(out->verification_id, sizeof(out->verification_id), "%s", lv->vid);
        break;
    case OTP_ELOCKED:
        otp_answer_set(out, OUT_LOCKED, "too many wrong codes for this phone");
        snprintf(out->reason, sizeof(out->reason), "%s", lv->reason);
        out->retry_after_s = otp_retry_s(lv->retry_ms);
        break;
    case OTP_ELIMITED:
        if (strcmp(lv->reason, LIMITS_IDEM_REASON) == 0)
            otp_answer_set(out, OUT_RATE_LIMITED, "this caller holds otp.idempotency_keys Idempotency-Keys already");
        else
            otp_answer_set(out, OUT_RATE_LIMITED, "limit %s reached", lv->reason);
        snprintf(out->reason, sizeof(out->reason), "%s", lv->reason);
        out->retry_after_s = otp_retry_s(lv->retry_ms);
        break;
    default:
        otp_answer_set(out, OUT_NO_ACTIVE_CODE, "no live code for this phone");
        break;
    }
}

/* The verification's ledger row after a guess that stands. */
static void verify_note(struct otp *o, const struct limits_verify *lv)
{
    if (lv->rc == OTP_OK)
        verification_update(o, lv->vid, "verified", 0);
    else if (lv->rc == OTP_EBADCODE || (lv->rc == OTP_ELOCKED && lv->vid[0]))
        verification_update(o, lv->vid, lv->attempts_left > 0 ? "pending" : "exhausted", 1);
}

/* Commits a guess that claimed rq's Idempotency-Key, with its answer out.
 * Returns 1 when it stands; else the guess is given back and out says
 * why: idem_again (the claim lapsed first) or a 503. */
static int verify_commit(struct otp *o, const struct otp_req *rq, const struct limits_verify *lv,
                         struct otp_answer *out)
{
    char err[OTP_ERR_LEN] = "out of memory", *packed = rq->idem->pack(rq->idem->ctx, out);
    enum otp_rc rc = packed ? limits_commit(o->d.limits, &lv->undo, packed, IDEM_KEEP_MS, err) : OTP_ENOMEM;

    free(packed);
    if (rc == OTP_OK)
        return 1;
    limits_abandon(o->d.limits, &lv->undo);
    memset(out, 0, sizeof(*out));
    if (rc == OTP_ENOTFOUND)
        idem_again(out);
    else
        otp_store_down(o, out, "verify", err);
    return 0;
}

void otp_verify(struct otp *o, const struct otp_req *rq, const char *guess, struct otp_answer *out)
{
    const struct otp_sections *c = &o->d.cfg;
    char hash[CODE_HASH_LEN + 1], ip_key[LIMITS_IP_KEY_MAX], err[OTP_ERR_LEN] = "", rid[CODE_ID_LEN + 1];
    char scope[CODE_SCOPE_LEN + 1];
    struct limits_request lr = {0};
    struct limits_idem lid = {0};
    struct limits_verify lv;

    memset(out, 0, sizeof(*out));
    memset(&lv, 0, sizeof(lv));
    /* otp_verify_screen refused a bad client_ip already. */
    if (rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK) {
        otp_answer_set(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        return;
    }
    keys_fill(rq, rq->client_ip ? ip_key : NULL, &lr);
    if (!(out->cached = limits_cached_verify(o->d.limits, &lr, &lv))) {
        code_hash(o->d.keys, rq->phone, guess, hash);
        code_new_id(rid);
        scope_fill(o, rq, &lr, scope);
        lr.rid = rid;
        idem_fill(o, rq, &lid, &lr);
        if (limits_verify(o->d.limits, &lr, hash, c->otp->max_attempts, &lv, err) != OTP_OK) {
            otp_store_down(o, out, "verify", err);
            goto done;
        }
        if (lv.idem_taken) {
            idem_again(out);
            return;
        }
    }
    verify_answer(&lv, out);
    /* With an Idempotency-Key, a guess that changed something stands only
     * once its answer is stored. */
    if (lv.undo.nkeys > 0 && !verify_commit(o, rq, &lv, out)) {
        if (out->outcome == OUT_IDEM_IN_USE)
            return;
        goto done;
    }
    if (lv.shadow_lock)
        otp_count_shadow(o, lv.reason, "verify");
    if (lv.shadow[0])
        otp_count_shadow(o, lv.shadow, "verify");
    verify_note(o, &lv);
done:
    otp_record(o, rq, "verify", out, lv.shadow_lock ? lv.reason : NULL, lv.vid);
    otp_count(o, OTP_OP_VERIFY, out);
}

void otp_cancel(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    char err[OTP_ERR_LEN] = "", rid[CODE_ID_LEN + 1], scope[CODE_SCOPE_LEN + 1], vid[LIMITS_ID_MAX];
    struct limits_request lr = {0};
    int stopped;

    memset(out, 0, sizeof(*out));
    code_new_id(rid);
    scope_fill(o, rq, &lr, scope);
    lr.rid = rid;
    switch (limits_cancel(o->d.limits, &lr, vid, err)) {
    case OTP_OK:
        break;
    case OTP_ENOTFOUND:
        otp_answer_set(out, OUT_NO_ACTIVE_CODE, "no live code for this phone, caller and purpose");
        otp_count(o, OTP_OP_CANCEL, out);
        return;
    default:
        otp_store_down(o, out, "cancel", err);
        otp_count(o, OTP_OP_CANCEL, out);
        return;
    }
    /* The verification is gone, so no code of it verifies any more; its
     * messages still queued end unsent and give their reservation back. */
    stopped = lanes_cancel(o->d.lanes, vid);
    log_msg(LOG_INFO, "verification %s cancelled by %s; %d queued messages stopped", vid, rq->api_key, stopped);
    otp_answer_set(out, OUT_CANCELLED, "cancelled");
    snprintf(out->verification_id, sizeof(out->verification_id), "%s", vid);
    otp_count(o, OTP_OP_CANCEL, out);
}

enum otp_rc otp_status(struct otp *o, const char *api_key, const char *id, struct pacer_view *out)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc = pacer_status(lanes_pacer(o->d.lanes, 0), api_key, id, out, err);

    if (rc == OTP_ESTORE)
        log_msg(LOG_WARN, "status of message %s: %s", id, err);
    return rc;
}

struct import_ctx {
    struct otp *o;
    int64_t now_ms;
    int added, failed;
    char err[OTP_ERR_LEN];
};

/* One message this ledger holds queued or sending. Those of the fleet are
 * in Redis already (their hash lives a day, longer than any code); a
 * ledger from before the fleet holds its queue alone. Dead codes stay. */
static void import_one(void *arg, const struct ledger_message *m)
{
    struct import_ctx *x = arg;
    int added = 0;

    if (m->expires_ms - x->now_ms < sched_min_life_ms(x->o->d.cfg.otp->ttl_ms))
        return;
    if (pacer_import(lanes_pacer(x->o->d.lanes, 0), m, &added, x->err) != OTP_OK)
        x->failed++;
    x->added += added;
}

enum otp_rc otp_start_pacer(struct otp *o, char *err)
{
    struct pacer_render r = {otp_render_msg, o};
    struct import_ctx x = {o, clock_wall_ms(), 0, 0, ""};

    if (ledger_pending(o->d.ledger, import_one, &x, err) != OTP_OK)
        return OTP_EIO;
    if (x.failed > 0)
        log_msg(LOG_WARN, "%d queued messages of this ledger could not be checked against Redis (%s): the next "
                "start tries again", x.failed, x.err);
    if (x.added > 0)
        log_msg(LOG_INFO, "%d queued messages of a ledger from before the fleet joined the fleet's queue", x.added);
    return lanes_start(o->d.lanes, &r, err);
}

enum report_verdict otp_delivery(struct otp *o, const struct report_in *in)
{
    return report_handle(o->report, in);
}
