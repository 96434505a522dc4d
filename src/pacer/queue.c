/*
 * queue: argument building and reply reading around queue.lua and
 * slot.lua. Each function is one script run; nothing here waits or loops.
 */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.lua.h"
#include "slot.lua.h"

#define QUEUE_CLAIM_MAX 16
#define QUEUE_TOUCH_MAX 64

/* queue.lua's claim reply: these three, then QUEUE_PER_ENTRY values per
 * entry in the order of enum queue_claim_field. */
enum queue_claim_head { QC_DEPTH, QC_CURSOR, QC_COUNT, QC_HEAD };
enum queue_claim_field {
    QC_EID, QC_ID, QC_VID, QC_TO, QC_EXPIRES, QC_SCOPE, QC_PRICE, QC_COST_MS, QC_CAPS, QC_PHONE_KEY, QC_STYLE,
    QC_MOVED_R, QC_TRIED, QC_DELIVERIES,
    QUEUE_PER_ENTRY
};

/* slot.lua's reply to take and arm (see its header): verdict, slot, now, attempt. */
enum queue_slot_reply { QS_VERDICT, QS_SLOT_US, QS_NOW_US, QS_ATTEMPT, QS_N };

/* slot.lua's verdicts, the words of its replies, named once: by enum queue_verdict. */
static const char *const queue_verdicts[] = {
    [QUEUE_SEND] = "ok",          [QUEUE_DONE] = "done", [QUEUE_ENDED] = "ended",       [QUEUE_LOST] = "lost",
    [QUEUE_GONE] = "gone",        [QUEUE_EXPIRED] = "expired", [QUEUE_WAS_SENDING] = "sending",
};
#define QUEUE_VERDICTS (sizeof(queue_verdicts) / sizeof(queue_verdicts[0]))

struct queue {
    struct store *store;
    int h_queue, h_slot;
    char consumer[QUEUE_NAME_MAX];
    char stream[QUEUE_KEY_MAX], slot[QUEUE_KEY_MAX]; /* the lane's (queue_new) */
};

static enum otp_rc queue_on_msg(struct queue *q, const char *op, const char *id, const char *const *extra,
                                int n_extra, int64_t *result, char *err);

struct queue *queue_new(struct store *s, const char *consumer, const char *lane)
{
    struct queue *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    q->store = s;
    q->h_queue = store_script(s, pacer_queue_lua);
    q->h_slot = store_script(s, pacer_slot_lua);
    snprintf(q->consumer, sizeof(q->consumer), "%s", consumer);
    queue_lane_key(STORE_QUEUE_KEY, lane, q->stream, sizeof(q->stream));
    queue_lane_key(STORE_SLOT_KEY, lane, q->slot, sizeof(q->slot));
    return q;
}

void queue_lane_key(const char *base, const char *lane, char *out, size_t cap)
{
    if (lane == NULL || strcmp(lane, "default") == 0)
        snprintf(out, cap, "%s", base);
    else
        snprintf(out, cap, "%s:%s", base, lane);
}

const char *queue_stream(const struct queue *q)
{
    return q->stream;
}

void queue_free(struct queue *q)
{
    free(q);
}

static const char *queue_str(const struct store_reply *r, size_t i)
{
    return i < r->n && r->strs[i] ? r->strs[i] : "";
}

static int64_t queue_int(const struct store_reply *r, size_t i)
{
    if (i >= r->n)
        return 0;
    return r->strs[i] ? strtoll(r->strs[i], NULL, 10) : r->ints[i];
}

/* Reply i as a message's state: "" is MSG_NONE (Redis does not know it);
 * any other word must be one of msgstate's, else OTP_ESTORE with detail in
 * err (a script and this build disagree). */
static enum otp_rc queue_state(const struct store_reply *r, size_t i, enum msg_state *out, char *err)
{
    const char *word = queue_str(r, i);

    *out = MSG_NONE;
    if (word[0] == '\0' || msg_state_parse(word, out) == 0)
        return OTP_OK;
    snprintf(err, OTP_ERR_LEN, "queue: unknown message state '%.16s'", word);
    return OTP_ESTORE;
}

/* Runs queue.lua's op with the stream and key2, then extra arguments. */
static enum otp_rc queue_run(struct queue *q, const char *op, const char *key2, const char *const *extra, int n_extra,
                             struct store_reply **rep, char *err)
{
    const char *args[5 + QUEUE_TOUCH_MAX + 8];
    int n = 0, i, nkeys = 2;

    args[n++] = q->stream;
    args[n++] = key2;
    if (strcmp(op, "end") == 0) /* an end also leaves its caller's share */
        args[n++] = STORE_SHARE_KEY, nkeys = 3;
    args[n++] = op;
    args[n++] = q->consumer;
    for (i = 0; i < n_extra; i++)
        args[n++] = extra[i];
    return store_eval(q->store, q->h_queue, nkeys, n, args, rep, err);
}

enum otp_rc queue_claim(struct queue *q, enum queue_mode mode, int want, int64_t takeover_ms, char *cursor,
                        struct queue_entry *out, int *n, int64_t *depth, char *err)
{
    static const char *const modes[] = {[QUEUE_OWN] = "own", [QUEUE_TAKEOVER] = "takeover", [QUEUE_NEW] = "new"};
    char want_s[16], takeover_s[24];
    const char *extra[4] = {want_s, takeover_s, modes[mode], cursor};
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    int64_t got, i;

    *n = 0;
    snprintf(want_s, sizeof(want_s), "%d", want < QUEUE_CLAIM_MAX ? want : QUEUE_CLAIM_MAX);
    snprintf(takeover_s, sizeof(takeover_s), "%lld", (long long)takeover_ms);
    if ((rc = queue_run(q, "claim", STORE_HOLDS_KEY, extra, 4, &rep, err)) != OTP_OK)
        return rc;
    got = queue_int(rep, QC_COUNT);
    if (rep->n < QC_HEAD || got < 0 || got > QUEUE_CLAIM_MAX || rep->n != QC_HEAD + (size_t)got * QUEUE_PER_ENTRY) {
        snprintf(err, OTP_ERR_LEN, "queue: claim gave %zu values", rep->n);
        store_reply_free(rep);
        return OTP_ESTORE;
    }
    *depth = queue_int(rep, QC_DEPTH);
    if (mode != QUEUE_NEW) {
        const char *next = queue_str(rep, QC_CURSOR);
        snprintf(cursor, QUEUE_EID_MAX, "%s", next[0] ? next : "0-0");
    }
    for (i = 0; i < got; i++) {
        size_t b = QC_HEAD + (size_t)i * QUEUE_PER_ENTRY;
        struct queue_entry *e = &out[*n];
        memset(e, 0, sizeof(*e));
        snprintf(e->eid, sizeof(e->eid), "%s", queue_str(rep, b + QC_EID));
        snprintf(e->id, sizeof(e->id), "%s", queue_str(rep, b + QC_ID));
        snprintf(e->vid, sizeof(e->vid), "%s", queue_str(rep, b + QC_VID));
        snprintf(e->to, sizeof(e->to), "%s", queue_str(rep, b + QC_TO));
        e->expires_ms = queue_int(rep, b + QC_EXPIRES);
        snprintf(e->scope, sizeof(e->scope), "%s", queue_str(rep, b + QC_SCOPE));
        e->price_minor = queue_int(rep, b + QC_PRICE);
        e->cost_ms = queue_int(rep, b + QC_COST_MS);
        snprintf(e->caps, sizeof(e->caps), "%s", queue_str(rep, b + QC_CAPS));
        snprintf(e->phone_key, sizeof(e->phone_key), "%s", queue_str(rep, b + QC_PHONE_KEY));
        snprintf(e->style, sizeof(e->style), "%s", queue_str(rep, b + QC_STYLE));
        e->moved_r = (int)queue_int(rep, b + QC_MOVED_R);
        snprintf(e->tried, sizeof(e->tried), "%s", queue_str(rep, b + QC_TRIED));
        e->deliveries = (int)queue_int(rep, b + QC_DELIVERIES);
        if (e->phone_key[0] == '\0') /* imported: no verification to check; any key will do */
            store_msg_key(e->id, e->phone_key, sizeof(e->phone_key));
        if (e->id[0] && e->vid[0])
            (*n)++;
    }
    store_reply_free(rep);
    return OTP_OK;
}

/* Runs slot.lua's op (take or arm) for e. */
static enum otp_rc queue_check(struct queue *q, const char *op, const struct queue_entry *e, int64_t min_life_ms,
                               int64_t period_us, int fail_if_sending, int new_attempt, int64_t wire_ms,
                               struct queue_slot *out, char *err)
{
    char msg[QUEUE_KEY_MAX], exp_s[24], life_s[24], period_s[24], wire_s[24];
    const char *args[15] = {q->slot, msg,    e->phone_key, q->stream, op,
                            e->vid,         e->scope, exp_s,     life_s,          period_s,
                            fail_if_sending ? "1" : "0", e->eid, q->consumer, new_attempt ? "1" : "0", wire_s};
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    size_t v;

    store_msg_key(e->id, msg, sizeof(msg));
    snprintf(exp_s, sizeof(exp_s), "%lld", (long long)e->expires_ms);
    snprintf(life_s, sizeof(life_s), "%lld", (long long)min_life_ms);
    snprintf(period_s, sizeof(period_s), "%lld", (long long)period_us);
    snprintf(wire_s, sizeof(wire_s), "%lld", (long long)wire_ms);
    if ((rc = store_eval(q->store, q->h_slot, 4, 15, args, &rep, err)) != OTP_OK)
        return rc;
    for (v = 0; v < QUEUE_VERDICTS; v++)
        if (strcmp(queue_str(rep, QS_VERDICT), queue_verdicts[v]) == 0)
            break;
    if (rep->n != QS_N || v == QUEUE_VERDICTS) {
        snprintf(err, OTP_ERR_LEN, "queue: slot.lua gave a bad reply");
        store_reply_free(rep);
        return OTP_ESTORE;
    }
    out->verdict = (enum queue_verdict)v;
    out->slot_us = queue_int(rep, QS_SLOT_US);
    out->now_us = queue_int(rep, QS_NOW_US);
    out->attempt = (int)queue_int(rep, QS_ATTEMPT);
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_import(struct queue *q, const struct queue_entry *e, const char *api_key, int *added, char *err)
{
    char exp_s[24], price_s[24], cost_s[24];
    const char *extra[8] = {e->id, e->vid, e->to, exp_s, api_key, price_s, cost_s, e->caps};
    int64_t r = 0;
    enum otp_rc rc;

    snprintf(exp_s, sizeof(exp_s), "%lld", (long long)e->expires_ms);
    snprintf(price_s, sizeof(price_s), "%lld", (long long)e->price_minor);
    snprintf(cost_s, sizeof(cost_s), "%lld", (long long)e->cost_ms);
    rc = queue_on_msg(q, "import", e->id, extra, 8, &r, err);
    *added = r == 1;
    return rc;
}

enum otp_rc queue_depth(struct queue *q, int64_t *depth, char *err)
{
    struct store_reply *rep = NULL;
    enum otp_rc rc = queue_run(q, "depth", STORE_HOLDS_KEY, NULL, 0, &rep, err);

    if (rc == OTP_OK)
        *depth = queue_int(rep, 0);
    store_reply_free(rep);
    return rc;
}

enum otp_rc queue_slot(struct queue *q, const struct queue_entry *e, int64_t min_life_ms, int64_t period_us,
                       int fail_if_sending, struct queue_slot *out, char *err)
{
    return queue_check(q, "take", e, min_life_ms, period_us, fail_if_sending, 0, 0, out, err);
}

enum otp_rc queue_arm(struct queue *q, const struct queue_entry *e, int64_t min_life_ms, int fail_if_sending,
                      int new_attempt, int64_t wire_ms, struct queue_slot *out, char *err)
{
    return queue_check(q, "arm", e, min_life_ms, 0, fail_if_sending, new_attempt, wire_ms, out, err);
}

enum otp_rc queue_pause(struct queue *q, int64_t pause_us, char *err)
{
    char pause_s[24];
    /* slot.lua names four keys; pause uses only the first. */
    const char *args[6] = {q->slot, q->slot, q->slot, q->slot, "pause", pause_s};
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    snprintf(pause_s, sizeof(pause_s), "%lld", (long long)pause_us);
    rc = store_eval(q->store, q->h_slot, 4, 6, args, &rep, err);
    store_reply_free(rep);
    return rc;
}

/* Runs op on message id's hash; *result is its integer reply. */
static enum otp_rc queue_on_msg(struct queue *q, const char *op, const char *id, const char *const *extra,
                                int n_extra, int64_t *result, char *err)
{
    char msg[QUEUE_KEY_MAX];
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    store_msg_key(id, msg, sizeof(msg));
    if ((rc = queue_run(q, op, msg, extra, n_extra, &rep, err)) != OTP_OK)
        return rc;
    *result = queue_int(rep, 0);
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_end(struct queue *q, const struct queue_entry *e, enum msg_state state, const char *detail,
                      const char *provider_id, const char *attempt, enum queue_end_result *res, char *err)
{
    char d[65];
    const char *extra[5] = {e->eid, msg_state_name(state), d, provider_id ? provider_id : "", attempt ? attempt : ""};
    int64_t r = -1;
    enum otp_rc rc;

    /* A day in Redis per message: the detail is cut short there (the ledger keeps it whole). */
    snprintf(d, sizeof(d), "%s", detail ? detail : "");
    rc = queue_on_msg(q, "end", e->id, extra, 5, &r, err);
    *res = r == 1 ? QUEUE_END_MOVED : r == 0 ? QUEUE_END_ALREADY : QUEUE_END_LOST;
    return rc;
}

enum otp_rc queue_retry(struct queue *q, const struct queue_entry *e, const char *detail, const char *attempt,
                        int *owned, char *err)
{
    const char *extra[3] = {e->eid, detail ? detail : "", attempt ? attempt : ""};
    int64_t r = 0;
    enum otp_rc rc = queue_on_msg(q, "retry", e->id, extra, 3, &r, err);

    *owned = r == 1;
    return rc;
}

enum otp_rc queue_own(struct queue *q, const struct queue_entry *e, int *owned, int64_t *wait_ms, char *err)
{
    const char *extra[1] = {e->eid};
    char msg[QUEUE_KEY_MAX];
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    store_msg_key(e->id, msg, sizeof(msg));
    if ((rc = queue_run(q, "own", msg, extra, 1, &rep, err)) != OTP_OK)
        return rc;
    *owned = queue_int(rep, 0) != 0;
    *wait_ms = queue_int(rep, 0) == 3 ? queue_int(rep, 1) : 0;
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_move(struct queue *q, const struct queue_entry *e, const char *to_stream, const char *to_lane,
                       int64_t to_capacity, int moved_r, const char *tried, const char *detail, const char *attempt,
                       enum queue_move_result *res, int64_t *wait_ms, char *err)
{
    char msg[QUEUE_KEY_MAX], exp_s[24], price_s[24], cost_s[24], r_s[16], d[65], cap_s[24];
    const char *args[] = {q->stream, msg, to_stream, STORE_SHARE_KEY, "move", q->consumer, e->eid, e->id, e->vid,
                          e->to, exp_s,
                          e->scope, price_s, cost_s, e->caps, e->phone_key, e->style, r_s, tried, d, to_lane,
                          attempt ? attempt : "", cap_s};
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    int64_t r;

    store_msg_key(e->id, msg, sizeof(msg));
    snprintf(exp_s, sizeof(exp_s), "%lld", (long long)e->expires_ms);
    snprintf(price_s, sizeof(price_s), "%lld", (long long)e->price_minor);
    snprintf(cost_s, sizeof(cost_s), "%lld", (long long)e->cost_ms);
    snprintf(r_s, sizeof(r_s), "%d", moved_r);
    snprintf(cap_s, sizeof(cap_s), "%lld", (long long)to_capacity);
    snprintf(d, sizeof(d), "%s", detail ? detail : "");
    if ((rc = store_eval(q->store, q->h_queue, 4, (int)(sizeof(args) / sizeof(args[0])), args, &rep, err)) != OTP_OK)
        return rc;
    r = queue_int(rep, 0);
    *res = r == 1   ? QUEUE_MOVE_MOVED
           : r == 2 ? QUEUE_MOVE_ENDED
           : r == 3 ? QUEUE_MOVE_WAIT
           : r == 4 ? QUEUE_MOVE_FULL
                    : QUEUE_MOVE_LOST;
    *wait_ms = r == 3 ? queue_int(rep, 1) : 0;
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_orphans(struct queue *q, const char *const *streams, int n, char (*out)[QUEUE_KEY_MAX], int cap,
                          int *n_out, char *err)
{
    const char *args[4 + QUEUE_LANES_MAX];
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    int i, k = 0;
    size_t j;

    *n_out = 0;
    if (n > QUEUE_LANES_MAX)
        n = QUEUE_LANES_MAX;
    args[k++] = QUEUE_LANES_KEY;
    args[k++] = QUEUE_LANES_KEY; /* queue.lua names a second key; lanes reads none */
    args[k++] = "lanes";
    args[k++] = q->consumer;
    for (i = 0; i < n; i++)
        args[k++] = streams[i];
    if ((rc = store_eval(q->store, q->h_queue, 2, k, args, &rep, err)) != OTP_OK)
        return rc;
    for (j = 0; j < rep->n && *n_out < cap; j++)
        if (rep->strs[j] != NULL)
            snprintf(out[(*n_out)++], QUEUE_KEY_MAX, "%s", rep->strs[j]);
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_peek(const struct queue *q, const char *stream, char *cursor, struct queue_entry *out, int *n,
                       char *err)
{
    const char *args[5] = {stream, stream, "peek", q->consumer, cursor};
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    size_t j;

    *n = 0;
    if ((rc = store_eval(q->store, q->h_queue, 2, 5, args, &rep, err)) != OTP_OK)
        return rc;
    for (j = 0; j + 2 < rep->n && *n < QUEUE_PEEK_MAX; j += 3) {
        struct queue_entry *e = &out[(*n)++];
        memset(e, 0, sizeof(*e));
        snprintf(e->eid, sizeof(e->eid), "%s", queue_str(rep, j));
        snprintf(e->id, sizeof(e->id), "%s", queue_str(rep, j + 1));
        snprintf(e->to, sizeof(e->to), "%s", queue_str(rep, j + 2));
        snprintf(cursor, QUEUE_EID_MAX, "%s", e->eid);
    }
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_adopt(const struct queue *q, const char *stream, const struct queue_entry *e, const char *to_stream,
                        const char *to_lane, int64_t takeover_ms, int *result, char *err)
{
    char msg[QUEUE_KEY_MAX], takeover_s[24];
    const char *args[9] = {stream, msg, to_stream, STORE_SHARE_KEY, "adopt", q->consumer, e->eid, takeover_s, to_lane};
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    store_msg_key(e->id, msg, sizeof(msg));
    snprintf(takeover_s, sizeof(takeover_s), "%lld", (long long)takeover_ms);
    if ((rc = store_eval(q->store, q->h_queue, 4, 9, args, &rep, err)) != OTP_OK)
        return rc;
    *result = (int)queue_int(rep, 0);
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_touch(struct queue *q, const char *const *eids, int n, int *lost, char *err)
{
    struct store_reply *rep = NULL;
    enum otp_rc rc = OTP_OK;
    int done, i;
    size_t k;

    for (done = 0; done < n && rc == OTP_OK; done += QUEUE_TOUCH_MAX) {
        int batch = n - done < QUEUE_TOUCH_MAX ? n - done : QUEUE_TOUCH_MAX;
        if ((rc = queue_run(q, "touch", STORE_HOLDS_KEY, eids + done, batch, &rep, err)) != OTP_OK)
            break;
        for (i = 0; i < batch; i++) {
            lost[done + i] = 0;
            for (k = 0; k < rep->n; k++)
                if (strcmp(queue_str(rep, k), eids[done + i]) == 0)
                    lost[done + i] = 1;
        }
        store_reply_free(rep);
        rep = NULL;
    }
    return rc;
}

enum otp_rc queue_get(struct queue *q, const char *id, char *api_key, size_t key_cap, enum msg_state *state,
                      struct queue_view *view, char *err)
{
    char msg[QUEUE_KEY_MAX];
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    *state = MSG_NONE;
    store_msg_key(id, msg, sizeof(msg));
    if ((rc = queue_run(q, "get", msg, NULL, 0, &rep, err)) != OTP_OK)
        return rc;
    snprintf(api_key, key_cap, "%s", queue_str(rep, 0));
    rc = queue_state(rep, 1, state, err);
    snprintf(view->provider, sizeof(view->provider), "%s", queue_str(rep, 2));
    snprintf(view->attempts, sizeof(view->attempts), "%s", queue_str(rep, 3));
    store_reply_free(rep);
    return rc;
}

enum otp_rc queue_report(struct queue *q, const char *id, enum msg_state state, int64_t min_life_ms,
                         struct queue_report_out *out, char *err)
{
    char msg[QUEUE_KEY_MAX], life_s[24];
    const char *extra[2] = {msg_state_name(state), life_s};
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    memset(out, 0, sizeof(*out));
    store_msg_key(id, msg, sizeof(msg));
    snprintf(life_s, sizeof(life_s), "%lld", (long long)min_life_ms);
    if ((rc = queue_run(q, "report", msg, extra, min_life_ms >= 0 ? 2 : 1, &rep, err)) != OTP_OK)
        return rc;
    out->moved = (int)queue_int(rep, 0);
    snprintf(out->provider, sizeof(out->provider), "%s", queue_str(rep, 1));
    snprintf(out->to, sizeof(out->to), "%s", queue_str(rep, 2));
    snprintf(out->tried, sizeof(out->tried), "%s", queue_str(rep, 3));
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc queue_again(struct queue *q, const char *id, const char *lane, const char *attempt, const char *detail,
                        int *queued, char *err)
{
    char d[65];
    const char *extra[3] = {lane, attempt, d};
    int64_t r = 0;
    enum otp_rc rc;

    snprintf(d, sizeof(d), "%s", detail);
    rc = queue_on_msg(q, "again", id, extra, 3, &r, err);
    *queued = r == 1;
    return rc;
}

enum otp_rc queue_states(struct queue *q, const char *const *ids, int n,
                         void (*put)(void *ctx, int i, enum msg_state state, const char *detail), void *ctx,
                         char *err)
{
    char keys[QUEUE_STATES_MAX][QUEUE_KEY_MAX];
    const char *args[QUEUE_STATES_MAX + 3];
    enum msg_state states[QUEUE_STATES_MAX];
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    int i, k = 0;

    if (n <= 0 || n > QUEUE_STATES_MAX) {
        snprintf(err, OTP_ERR_LEN, "queue: %d states asked at once", n);
        return OTP_EINVAL;
    }
    args[k++] = q->stream;
    for (i = 0; i < n; i++) {
        store_msg_key(ids[i], keys[i], sizeof(keys[i]));
        args[k++] = keys[i];
    }
    args[k++] = "states";
    args[k++] = q->consumer;
    if ((rc = store_eval(q->store, q->h_queue, 1 + n, k, args, &rep, err)) != OTP_OK)
        return rc;
    /* Every word is read before any put: a reply this build cannot read is
     * no answer at all. */
    for (i = 0; i < n && rc == OTP_OK; i++)
        rc = queue_state(rep, 2 * (size_t)i, &states[i], err);
    for (i = 0; i < n && rc == OTP_OK; i++)
        put(ctx, i, states[i], queue_str(rep, 2 * (size_t)i + 1));
    store_reply_free(rep);
    return rc;
}
