/*
 * idem: runs on the HTTP worker threads, only for requests that carry an
 * Idempotency-Key: one script call to claim or look the key up and one to
 * store the answer. Duplicates in flight poll Redis with a growing pause
 * (2 ms up to 50 ms) for at most IDEM_WAIT_MS; the first request decides in
 * milliseconds, so they rarely poll more than a few times.
 */
#include "idem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "code.h"

/*
 * Claim: KEYS[1] the (caller, key) hash; ARGV[1] the request's hash,
 * ARGV[2] a fresh owner token, ARGV[3] IDEM_PENDING_MS.
 * Replies {"new"}, {"mismatch"}, {"busy"} or {"done", answer}.
 */
static const char idem_claim_lua[] = "local h = redis.call('HGET', KEYS[1], 'h')\n"
                                     "if not h then\n"
                                     "  redis.call('HSET', KEYS[1], 'h', ARGV[1], 'o', ARGV[2])\n"
                                     "  redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
                                     "  return {'new'}\n"
                                     "end\n"
                                     "if h ~= ARGV[1] then return {'mismatch'} end\n"
                                     "local a = redis.call('HGET', KEYS[1], 'a')\n"
                                     "if a then return {'done', a} end\n"
                                     "return {'busy'}\n";

/* The reply's elements, in the order the claim script returns them. */
enum { IDEM_R_STATE, IDEM_R_ANSWER };

/*
 * End: KEYS[1]; ARGV[1] the owner token, ARGV[2] the answer ("" gives the
 * key up), ARGV[3] IDEM_KEEP_MS. Only the claim's owner may end it: a claim
 * that expired and was taken again belongs to the new owner. Replies 1 when
 * done, 0 when the claim was no longer ours.
 */
static const char idem_end_lua[] = "if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end\n"
                                   "if ARGV[2] == '' then\n"
                                   "  redis.call('DEL', KEYS[1])\n"
                                   "  return 1\n"
                                   "end\n"
                                   "redis.call('HSET', KEYS[1], 'a', ARGV[2])\n"
                                   "redis.call('HDEL', KEYS[1], 'o')\n"
                                   "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
                                   "return 1\n";

struct idem {
    struct store *store;
    const struct code_keys *keys;
    int h_claim, h_end;
    pthread_mutex_t mu; /* guards stats */
    struct idem_stats stats;
};

struct idem *idem_new(struct store *s, const struct code_keys *k)
{
    struct idem *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->store = s;
    m->keys = k;
    m->h_claim = store_script(s, idem_claim_lua);
    m->h_end = store_script(s, idem_end_lua);
    if (m->h_claim < 0 || m->h_end < 0) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void idem_free(struct idem *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int idem_key_ok(const char *key)
{
    size_t n;

    for (n = 0; key[n]; n++)
        if ((unsigned char)key[n] < 0x20 || (unsigned char)key[n] > 0x7e || n == IDEM_KEY_MAX)
            return 0;
    return n >= 1;
}

static void idem_count(struct idem *m, uint64_t *counter)
{
    pthread_mutex_lock(&m->mu);
    (*counter)++;
    pthread_mutex_unlock(&m->mu);
}

/* A keyed hash of the request (CODE_TAG_LEN hex and NUL; NULL when out of
 * memory). Keyed because a verify's body holds the guess, usually the live
 * code: Redis holds only keyed hashes of codes. The "idem:" prefix keeps
 * these apart from delivery-report tags, whose input is a message id. */
static char *idem_hash(const struct idem *m, const char *request)
{
    char *in = NULL, *out = malloc(CODE_TAG_LEN + 1);

    if (out == NULL || asprintf(&in, "idem:%s", request) < 0) {
        free(out);
        return NULL;
    }
    code_tag(m->keys, in, out);
    free(in);
    return out;
}

static void idem_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

enum otp_rc idem_begin(struct idem *m, const char *caller, const char *key, const char *request,
                       struct idem_claim *cl, enum idem_state *state, char **answer, int64_t *retry_ms,
                       char *err)
{
    char *hash = NULL, pending[24];
    const char *args[4];
    struct store_reply *rep = NULL;
    uint64_t deadline_ns = clock_mono_ns() + (uint64_t)IDEM_WAIT_MS * 1000000u;
    uint64_t now_ns;
    int64_t pause_ms = 2, left_ms;
    enum otp_rc rc;

    memset(cl, 0, sizeof(*cl));
    *answer = NULL;
    *retry_ms = 0;
    /* The caller's name is length-prefixed, so no (caller, key) pair can
     * spell another's Redis key. */
    snprintf(cl->rkey, sizeof(cl->rkey), "otpd:idem:%zu:%s:%s", strlen(caller), caller, key);
    if ((hash = idem_hash(m, request)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "idem: out of memory");
        rc = OTP_ENOMEM;
        goto out;
    }
    snprintf(pending, sizeof(pending), "%d", IDEM_PENDING_MS);
    for (;;) {
        const char *st;
        code_new_id(cl->token);
        args[0] = cl->rkey;
        args[1] = hash;
        args[2] = cl->token;
        args[3] = pending;
        if ((rc = store_eval(m->store, m->h_claim, 1, 4, args, &rep, err)) != OTP_OK)
            goto out;
        st = rep->n > IDEM_R_STATE ? rep->strs[IDEM_R_STATE] : NULL;
        if (st == NULL) {
            snprintf(err, OTP_ERR_LEN, "idem: unexpected reply from the claim script");
            rc = OTP_ESTORE;
            goto out;
        }
        if (strcmp(st, "new") == 0) {
            *state = IDEM_NEW;
            idem_count(m, &m->stats.decided);
            break;
        }
        cl->token[0] = '\0';
        if (strcmp(st, "mismatch") == 0) {
            *state = IDEM_MISMATCH;
            idem_count(m, &m->stats.mismatched);
            break;
        }
        if (strcmp(st, "done") == 0 && rep->n > IDEM_R_ANSWER && rep->strs[IDEM_R_ANSWER] != NULL) {
            /* Taken from the reply, which frees the rest. */
            *answer = rep->strs[IDEM_R_ANSWER];
            rep->strs[IDEM_R_ANSWER] = NULL;
            *state = IDEM_REPLAY;
            idem_count(m, &m->stats.replayed);
            break;
        }
        /* Busy: the first request with this key is deciding. */
        store_reply_free(rep);
        rep = NULL;
        now_ns = clock_mono_ns();
        if (now_ns >= deadline_ns) {
            *state = IDEM_BUSY;
            idem_count(m, &m->stats.busy);
            break;
        }
        /* The last pause ends at the deadline, for one last look. */
        left_ms = (int64_t)((deadline_ns - now_ns + 999999u) / 1000000u);
        idem_sleep_ms(pause_ms < left_ms ? pause_ms : left_ms);
        pause_ms = pause_ms * 2 > 50 ? 50 : pause_ms * 2;
    }
    rc = OTP_OK;
out:
    store_reply_free(rep);
    free(hash);
    if (rc != OTP_OK) {
        cl->token[0] = '\0';
        if (rc == OTP_ESTORE)
            *retry_ms = store_breaker_left_ms(m->store);
    }
    return rc;
}

void idem_end(struct idem *m, struct idem_claim *cl, const char *answer)
{
    char keep[24], err[OTP_ERR_LEN] = "";
    const char *args[4];
    struct store_reply *rep = NULL;

    if (cl->token[0] == '\0')
        return;
    snprintf(keep, sizeof(keep), "%d", IDEM_KEEP_MS);
    args[0] = cl->rkey;
    args[1] = cl->token;
    args[2] = answer ? answer : "";
    args[3] = keep;
    if (store_eval(m->store, m->h_end, 1, 4, args, &rep, err) != OTP_OK)
        log_msg(LOG_WARN, "idempotency: cannot %s a claim, it expires in %d ms: %s",
                answer ? "store the answer of" : "give up", IDEM_PENDING_MS, err);
    else if (rep->n > 0 && rep->ints[0] == 0)
        log_msg(LOG_WARN,
                "idempotency: a claim expired before its answer (a decision took over %d ms); "
                "a retry may have been decided again",
                IDEM_PENDING_MS);
    store_reply_free(rep);
    cl->token[0] = '\0';
}

void idem_stats(struct idem *m, struct idem_stats *out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    pthread_mutex_unlock(&m->mu);
}
