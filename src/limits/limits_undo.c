/*
 * limits_undo: what gives back a decision's takes. The abandon of a call
 * whose answer could not be given (now, or queued until Redis answers),
 * the commit of an accepted issue once its ledger rows are durable, and
 * the drop of holds whose instance never committed them. Rare next to
 * decisions: an abandon follows a 503; the commit is one call per
 * accepted issue; the holds sweep runs on a tick.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "limits_int.h"

/* Reads one JSON string of a key name at p (past its opening quote) into
 * out, undoing the escapes Redis's cjson writes: a key may hold a caller's
 * bytes (a device_id's '/', '"' or '\\' are printable ASCII). Returns the
 * byte after the closing quote, or NULL when it is not such a string or
 * does not fit. */
static const char *undo_key_read(const char *p, char *out, size_t cap)
{
    static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
    size_t n = 0;

    for (; *p != '"'; p++) {
        char c = *p;
        const char *e;
        unsigned v = 0;
        if (c == '\0' || (unsigned char)c < 0x20)
            return NULL;
        if (c == '\\' && *++p == 'u') {
            /* cjson writes a control byte as \u00XX; nothing of ours is
             * outside ASCII. */
            if (strspn(p + 1, "0123456789abcdefABCDEF") < 4 || sscanf(p + 1, "%4x", &v) != 1 || v == 0 ||
                v > 0x7f)
                return NULL;
            c = (char)v;
            p += 4;
        } else if (c == '\\') {
            if (*p == '\0' || (e = strchr(esc, *p)) == NULL)
                return NULL;
            c = val[e - esc];
        }
        if (n + 1 >= cap)
            return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return p + 1;
}

/* Reads the JSON list of key names op 'k' returns into u's keys; returns
 * how many, 0 when it is not such a list. */
static int undo_keys_read(const char *json, struct limits_undo *u)
{
    const char *p = json;
    int n = 0;

    if (*p++ != '[')
        return 0;
    while (*p == '"' && n <= LIMITS_KEYS_MAX) {
        if ((p = undo_key_read(p + 1, u->keys[n], sizeof(u->keys[n]))) == NULL)
            return 0;
        n++;
        if (*p == ',')
            p++;
    }
    return *p == ']' && n >= IK_TAIL ? n : 0; /* at least issue.lua's last IK_TAIL */
}

/* Runs one abandon (op 'a' of issue.lua or verify.lua; or op 'd', the
 * drop of a lapsed hold) for u. */
static enum otp_rc undo_op(struct limits *l, const struct limits_undo *u, const char *op, long long *result,
                           char *err)
{
    struct limits_args a;
    struct store_reply *rep = NULL;
    int i, k, maybe_ran, ttl_at = u->verify ? VA_UNDO_TTL : IA_UNDO_TTL;
    enum otp_rc rc;

    limits_args_keys(&a, u);
    limits_argv_str(&a, IA_OP, op);
    limits_argv_str(&a, IA_HOLD, u->hold); /* VA_GUESS for verify.lua, which reads only its op and ttl */
    for (i = IA_HOLD + 1; i < ttl_at; i++)
        limits_argv_str(&a, i, "");
    limits_argv_int(&a, ttl_at, LIMITS_UNDO_TTL_MS);
    rc = store_eval_idem(l->store, u->verify ? l->h_verify : l->h_issue, a.nkeys, a.n, a.v, &rep, &maybe_ran,
                         err);
    if (rc == OTP_OK && result != NULL)
        *result = rep->n == 1 && rep->strs[0] == NULL ? rep->ints[0] : -1;
    store_reply_free(rep);
    if (rc == OTP_OK) {
        /* It gave takes back: a refusal cached on any of its keys may have
         * ended with them. (An abandon run by another instance cannot reach
         * here: README, "The refusal cache".) */
        for (k = 0; k < u->nkeys; k++)
            rcache_clear_key(l->rc, u->keys[k]);
        pthread_mutex_lock(&l->pmu);
        l->stats.abandoned++;
        pthread_mutex_unlock(&l->pmu);
    }
    return rc;
}

void limits_undo_queue(struct limits *l, const struct limits_undo *u)
{
    struct limits_undo *c = malloc(sizeof(*c));
    int queued = 0;

    if (c != NULL)
        *c = *u;
    pthread_mutex_lock(&l->pmu);
    if (c != NULL && l->n_pending < LIMITS_PENDING_MAX) {
        l->pending[l->n_pending++] = c;
        queued = 1;
    } else {
        l->stats.dropped++;
    }
    pthread_mutex_unlock(&l->pmu);
    if (!queued) {
        free(c);
        log_msg(LOG_ERROR, "limits: abandon queue full; a 503'd request may keep its takes for %d s",
                LIMITS_UNDO_TTL_MS / 1000);
    }
}

size_t limits_flush(struct limits *l)
{
    char err[OTP_ERR_LEN];
    size_t left;

    for (;;) {
        struct limits_undo *u = NULL;
        pthread_mutex_lock(&l->pmu);
        if (l->n_pending > 0)
            u = l->pending[--l->n_pending];
        pthread_mutex_unlock(&l->pmu);
        if (u == NULL)
            break;
        if (undo_op(l, u, "a", NULL, err) != OTP_OK) {
            limits_undo_queue(l, u); /* Redis still away: try again on the next flush */
            free(u);
            break;
        }
        free(u);
    }
    pthread_mutex_lock(&l->pmu);
    left = l->n_pending;
    pthread_mutex_unlock(&l->pmu);
    return left;
}

void limits_abandon(struct limits *l, const struct limits_undo *u)
{
    char err[OTP_ERR_LEN];

    if (u->nkeys == 0)
        return;
    if (undo_op(l, u, "a", NULL, err) != OTP_OK) {
        log_msg(LOG_WARN, "limits: abandon deferred until Redis answers: %s", err);
        limits_undo_queue(l, u);
    }
}

enum otp_rc limits_commit(struct limits *l, const struct limits_undo *u, const char *answer, int64_t keep_ms,
                          char *err)
{
    struct store_reply *rep = NULL;
    struct limits_args a;
    int k, maybe_ran = 0, idem = u->idem_at > 0 && answer != NULL;
    enum otp_rc rc;

    if (u->nkeys == 0)
        return OTP_OK;
    /* An Idempotency-Key's hash and count first; then verify.lua's record
     * is its undo key alone; an issue's commit names the stream, the holds
     * and the message too (issue.lua's last IK_TAIL), and releases its hold. */
    limits_args_init(&a);
    if (idem) {
        limits_args_key(&a, u->keys[u->idem_at - 1]);
        limits_args_key(&a, u->keys[u->idem_at]);
    }
    for (k = u->verify ? u->nkeys - 1 : u->nkeys - IK_TAIL; k < u->nkeys; k++)
        limits_args_key(&a, u->keys[k]);
    limits_argv_str(&a, IA_OP, idem ? "C" : "c");
    limits_argv_str(&a, IA_HOLD, u->hold);
    if (idem) {
        limits_argv_str(&a, IA_ANSWER, answer);
        limits_argv_int(&a, IA_KEEP, keep_ms);
    }
    /* A commit that already ran finds the message queued and says so again. */
    rc = store_eval_idem(l->store, l->h_issue, a.nkeys, a.n, a.v, &rep, &maybe_ran, err);
    if (rc == OTP_OK && (rep->n != 1 || rep->strs[0] != NULL || rep->ints[0] != 1)) {
        snprintf(err, OTP_ERR_LEN, "%s lapsed before the commit",
                 rep->n == 1 && rep->strs[0] == NULL && rep->ints[0] == -1 ? "its Idempotency-Key's claim"
                                                                           : "its hold");
        rc = OTP_ENOTFOUND;
    }
    store_reply_free(rep);
    return rc;
}

/* The abandon of lapsed hold member ("<mid>:<rid>") into u (zeroed by the
 * caller) and its message id into mid (LIMITS_ID_MAX): the KEYS its issue
 * ran with (op 'k'), or, when its record expired, what the hold, the held
 * message and its share need (the shares, then issue.lua's last IK_TAIL).
 * 0 when member is not a hold's. */
static int hold_undo(struct limits *l, const char *member, struct limits_undo *u, char *mid, char *err,
                     enum otp_rc *rc)
{
    const char *colon = member ? strchr(member, ':') : NULL, *args[2];
    struct store_reply *keys = NULL;

    *rc = OTP_OK;
    if (colon == NULL || colon - member >= LIMITS_ID_MAX)
        return 0;
    memcpy(mid, member, (size_t)(colon - member));
    mid[colon - member] = '\0';
    /* Op 'k': KEYS the undo key alone (so ARGV[i] is args[i]), ARGV the op alone. */
    limits_undo_key(colon + 1, u->keys[0], sizeof(u->keys[0]));
    args[0] = u->keys[0];
    args[IA_OP] = "k";
    if ((*rc = store_eval(l->store, l->h_issue, 1, 1 + IA_OP, args, &keys, err)) != OTP_OK)
        return 0;
    if (keys->n == 1 && keys->strs[0] != NULL)
        u->nkeys = undo_keys_read(keys->strs[0], u);
    store_reply_free(keys);
    if (u->nkeys == 0) {
        snprintf(u->keys[0], sizeof(u->keys[0]), "%s", STORE_SHARE_KEY);
        snprintf(u->keys[1 + IK_TAIL - 1 - IK_QUEUE], sizeof(u->keys[0]), "%s", STORE_QUEUE_KEY);
        snprintf(u->keys[1 + IK_TAIL - 1 - IK_HOLDS], sizeof(u->keys[0]), "%s", STORE_HOLDS_KEY);
        store_msg_key(mid, u->keys[1 + IK_TAIL - 1 - IK_MSG], sizeof(u->keys[0]));
        limits_undo_key(colon + 1, u->keys[1 + IK_TAIL - 1 - IK_UNDO], sizeof(u->keys[0]));
        u->nkeys = 1 + IK_TAIL;
    }
    snprintf(u->hold, sizeof(u->hold), "%s", member);
    return 1;
}

enum otp_rc limits_holds(struct limits *l, size_t *dropped, char *err)
{
    struct store_reply *rep = NULL;
    const char *args[1 + IA_HOLDS_MAX];
    long long result = 0;
    enum otp_rc rc;
    size_t i;

    *dropped = 0;
    /* Op 'h': KEYS the holds alone (so ARGV[i] is args[i]); 16 lapsed at most. */
    args[0] = STORE_HOLDS_KEY;
    args[IA_OP] = "h";
    args[IA_HOLDS_MAX] = "16";
    if ((rc = store_eval(l->store, l->h_issue, 1, 1 + IA_HOLDS_MAX, args, &rep, err)) != OTP_OK)
        return rc;
    for (i = 0; i < rep->n && rc == OTP_OK; i++) {
        struct limits_undo u = {0};
        char mid[LIMITS_ID_MAX];
        if (!hold_undo(l, rep->strs[i], &u, mid, err, &rc))
            continue;
        if ((rc = undo_op(l, &u, "d", &result, err)) == OTP_OK && result == 1) {
            (*dropped)++;
            pthread_mutex_lock(&l->pmu);
            l->stats.holds_dropped++;
            pthread_mutex_unlock(&l->pmu);
            log_msg(LOG_WARN, "limits: dropped message %s: its hold lapsed before its instance committed it", mid);
        }
    }
    store_reply_free(rep);
    return rc;
}

void limits_flush_first(struct limits *l)
{
    size_t n;

    pthread_mutex_lock(&l->pmu);
    n = l->n_pending;
    pthread_mutex_unlock(&l->pmu);
    if (n > 0)
        limits_flush(l);
}
