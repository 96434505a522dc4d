/*
 * idem: runs on the HTTP worker threads, only for requests that carry an
 * Idempotency-Key: one script call to look the key up before the decision.
 * Duplicates in flight poll Redis with a growing pause (2 ms up to 50 ms)
 * for at most IDEM_WAIT_MS; the first request decides in milliseconds, so
 * they rarely poll more than a few times.
 */
#include "idem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "code.h"

/*
 * Look-up: KEYS[1] the (caller, key) hash; ARGV[1] the request's hash.
 * Writes nothing. Replies {"new"}, {"mismatch"}, {"busy"} (claimed, no
 * answer yet) or {"done", answer}.
 */
static const char idem_look_lua[] = "local v = redis.call('HMGET', KEYS[1], 'h', 'a')\n"
                                    "if not v[1] then return {'new'} end\n"
                                    "if v[1] ~= ARGV[1] then return {'mismatch'} end\n"
                                    "if v[2] then return {'done', v[2]} end\n"
                                    "return {'busy'}\n";

/* The reply's elements, in the order the look-up script returns them. */
enum { IDEM_R_STATE, IDEM_R_ANSWER };

struct idem {
    struct store *store;
    const struct code_keys *keys;
    int h_look;
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
    m->h_look = store_script(s, idem_look_lua);
    if (m->h_look < 0) {
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

enum otp_rc idem_prepare(struct idem *m, const char *caller, const char *key, const char *request,
                         struct idem_claim *cl)
{
    char *in = NULL, tag[CODE_TAG_LEN + 1];
    size_t i, n;

    memset(cl, 0, sizeof(*cl));
    /* Keyed because a verify's body holds the guess, usually the live code:
     * Redis holds only keyed hashes of codes. The "idem:" prefix keeps
     * these apart from delivery-report tags, whose input is a message id. */
    if (asprintf(&in, "idem:%s", request) < 0)
        return OTP_ENOMEM;
    code_tag(m->keys, in, cl->hash);
    free(in);
    /* The caller's name is length-prefixed, so no (caller, key) pair can
     * spell another's; and no byte of either is in a Redis key name, which
     * the undo records carry as JSON (src/limits/limits_undo.c). */
    if (asprintf(&in, "idemkey:%zu:%s:%s", strlen(caller), caller, key) < 0)
        return OTP_ENOMEM;
    code_tag(m->keys, in, tag);
    free(in);
    snprintf(cl->rkey, sizeof(cl->rkey), "otpd:idem:%s", tag);
    n = (size_t)snprintf(cl->ckey, sizeof(cl->ckey), "otpd:idemc:");
    for (i = 0; caller[i] && n + 2 < sizeof(cl->ckey); i++)
        n += (size_t)snprintf(cl->ckey + n, sizeof(cl->ckey) - n, "%02x", (unsigned char)caller[i]);
    return OTP_OK;
}

static void idem_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

enum otp_rc idem_begin(struct idem *m, const struct idem_claim *cl, enum idem_state *state, char **answer,
                       int64_t *retry_ms, char *err)
{
    const char *args[2] = {cl->rkey, cl->hash};
    struct store_reply *rep = NULL;
    uint64_t deadline_ns = clock_mono_ns() + (uint64_t)IDEM_WAIT_MS * 1000000u;
    uint64_t now_ns;
    int64_t pause_ms = 2, left_ms;
    enum otp_rc rc;

    *answer = NULL;
    *retry_ms = 0;
    for (;;) {
        const char *st;
        if ((rc = store_eval(m->store, m->h_look, 1, 2, args, &rep, err)) != OTP_OK)
            goto out;
        st = rep->n > IDEM_R_STATE ? rep->strs[IDEM_R_STATE] : NULL;
        if (st == NULL) {
            snprintf(err, OTP_ERR_LEN, "idem: unexpected reply from the look-up script");
            rc = OTP_ESTORE;
            goto out;
        }
        if (strcmp(st, "new") == 0) {
            *state = IDEM_NEW;
            break;
        }
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
    if (rc == OTP_ESTORE)
        *retry_ms = store_breaker_left_ms(m->store);
    return rc;
}

void idem_decided(struct idem *m)
{
    idem_count(m, &m->stats.decided);
}

void idem_stats(struct idem *m, struct idem_stats *out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    pthread_mutex_unlock(&m->mu);
}
