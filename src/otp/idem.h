/*
 * idem: Idempotency-Key for issue and verify. The same key from the same
 * caller within 24 h gets the first answer again and nothing else happens;
 * the same key with another request is refused; two identical requests at
 * once get one decision: the first claims the key, the others wait for its
 * answer and replay it.
 *
 * State lives in Redis, one hash per (caller, key): the request's keyed
 * hash (h), the id of the request that decided it (o) and, once committed,
 * the answer (a), an opaque text the HTTP layer writes and reads back. This
 * module only names the keys, hashes requests and looks keys up; the
 * decision scripts write them (src/limits/issue.lua, "Idempotency-Key"):
 * - Only a decision that took something claims its key, in the same step
 *   as the decision, after the blocks, every rule, the caller's own rate
 *   and the caps passed. A refusal takes nothing and leaves nothing: a
 *   retry is decided afresh.
 * - The answer is stored by the decision's commit, in the same step as the
 *   release of its message, and only while the claim is still the deciding
 *   request's (a fence). A claim lives IDEM_PENDING_MS; an owner that
 *   stalled past it neither sends nor answers its own decision: it gives
 *   the decision back and replays the answer stored by then, if any.
 * - A caller holds at most a configured number of keys at once (a sorted
 *   set per caller, scored by when each key lapses); past that, a new key
 *   is refused until the oldest lapses.
 * Every Redis failure is OTP_ESTORE: the caller fails closed.
 */
#ifndef OTPD_IDEM_H
#define OTPD_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "../base/rc.h"
#include "../store/store.h"
#include "code.h"

#define IDEM_KEY_MAX 64             /* printable ASCII bytes of one key */
#define IDEM_KEEP_MS (24 * 3600000) /* how long an answer is replayed */
#define IDEM_PENDING_MS 10000       /* how long a claim without an answer holds the key */
#define IDEM_WAIT_MS 2000           /* how long a duplicate waits for the first's answer */

struct idem;

/* Registers idem's script with s; k keys the names and request hashes.
 * Both are borrowed and outlive it. Call before the store is shared
 * between threads. NULL when out of memory or out of script slots. */
struct idem *idem_new(struct store *s, const struct code_keys *k);
void idem_free(struct idem *m);

/* 1 when key is 1 to IDEM_KEY_MAX printable ASCII bytes (0x20 to 0x7e). */
int idem_key_ok(const char *key);

enum idem_state {
    IDEM_NEW,      /* the key is free: decide (the decision claims it) */
    IDEM_REPLAY,   /* *answer holds the first request's answer */
    IDEM_MISMATCH, /* the key was used for another request */
    IDEM_BUSY,     /* another request with this key was still deciding after IDEM_WAIT_MS */
};

/* One request's key, as Redis knows it. Names hold no byte of the request:
 * the hash's is a keyed hash of (caller, key), the count's the caller's
 * name in hex. */
struct idem_claim {
    char rkey[48];               /* the (caller, key) hash, "otpd:idem:" and 32 hex */
    char ckey[80];               /* the caller's keys held, "otpd:idemc:" and hex */
    char hash[CODE_TAG_LEN + 1]; /* the request's keyed hash */
};

/* Fills cl for key of caller (a configured API key name); request is the
 * canonical text of the request (operation and body), whose keyed hash
 * decides "same request". OTP_ENOMEM when out of memory. */
enum otp_rc idem_prepare(struct idem *m, const char *caller, const char *key, const char *request,
                         struct idem_claim *cl);

/*
 * Looks cl's key up; writes nothing. May block up to IDEM_WAIT_MS polling
 * Redis while another request with the key is deciding. On OTP_OK *state
 * says what to do; for IDEM_REPLAY *answer is a malloc'd text the caller
 * frees. Otherwise OTP_ESTORE with detail in err, and *retry_ms is when
 * the store's breaker lets calls through again (0 when closed).
 */
enum otp_rc idem_begin(struct idem *m, const struct idem_claim *cl, enum idem_state *state, char **answer,
                       int64_t *retry_ms, char *err);

/* Counts one request decided under its key (its decision stood: no
 * replay), for /metrics. */
void idem_decided(struct idem *m);

/* Counters for /metrics. */
struct idem_stats {
    uint64_t decided, replayed, mismatched, busy;
};
void idem_stats(struct idem *m, struct idem_stats *out);

#endif
