/*
 * idem: Idempotency-Key for issue and verify (DESIGN.md, "One request,
 * issue path"). The same key from the same caller within 24 h gets the first
 * answer again and nothing else happens; the same key with another request
 * is refused; two identical requests at once get one decision: the first
 * claims the key, the others wait for its answer and replay it.
 *
 * State lives in Redis, one hash per (caller, key): the request's keyed hash, the
 * claim's owner while it decides, and then the answer, an opaque text the
 * HTTP layer writes and reads back. A claim whose owner never answers (it
 * died, or lost Redis) expires after IDEM_PENDING_MS, so a retry is decided
 * afresh. Every Redis failure is OTP_ESTORE: the caller fails closed.
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

/* Registers idem's scripts with s; k keys the request hashes. Both are
 * borrowed and outlive it. Call before the store is shared between
 * threads. NULL when out of memory or out of script slots. */
struct idem *idem_new(struct store *s, const struct code_keys *k);
void idem_free(struct idem *m);

/* 1 when key is 1 to IDEM_KEY_MAX printable ASCII bytes (0x20 to 0x7e). */
int idem_key_ok(const char *key);

enum idem_state {
    IDEM_NEW,      /* the key is ours: decide, then idem_end */
    IDEM_REPLAY,   /* *answer holds the first request's answer */
    IDEM_MISMATCH, /* the key was used for another request */
    IDEM_BUSY,     /* another request with this key was still deciding after IDEM_WAIT_MS */
};

/* A claim on a key; token is "" when nothing is held. */
struct idem_claim {
    char rkey[160];
    char token[33];
};

/*
 * Looks key up for caller (a configured API key name). request is the
 * canonical text of the request (operation and body): its keyed hash
 * decides "same request". May block up to IDEM_WAIT_MS polling Redis while another
 * request with the key decides. On OTP_OK *state says what to do; for
 * IDEM_REPLAY *answer is a malloc'd text the caller frees. Otherwise
 * OTP_ESTORE (or OTP_ENOMEM) with detail in err, and *retry_ms is when the
 * store's breaker lets calls through again (0 when closed).
 */
enum otp_rc idem_begin(struct idem *m, const char *caller, const char *key, const char *request,
                       struct idem_claim *cl, enum idem_state *state, char **answer, int64_t *retry_ms,
                       char *err);

/* Ends a claim taken by idem_begin (IDEM_NEW): stores answer, to be replayed
 * for IDEM_KEEP_MS, or with answer NULL gives the key up so that a retry is
 * decided afresh. A claim that is not held (token "") is ignored. Never
 * fails the request: a Redis failure is logged and the claim expires. */
void idem_end(struct idem *m, struct idem_claim *cl, const char *answer);

/* Counters for /metrics. */
struct idem_stats {
    uint64_t decided, replayed, mismatched, busy;
};
void idem_stats(struct idem *m, struct idem_stats *out);

#endif
