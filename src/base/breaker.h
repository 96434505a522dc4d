/*
 * breaker: a circuit breaker for one SMS provider's calls. Closed, it lets
 * every call through and counts consecutive failures; failures_max of them
 * open it. Open, it refuses every call for open_ns; then it is half-open and
 * lets exactly one call through, the probe: a success closes it, a failure
 * opens it again for open_ns from that failure.
 *
 * Pure: the caller passes the time (a monotonic clock, in ns) and holds any
 * lock; nothing here reads a clock or allocates.
 */
#ifndef OTPD_BREAKER_H
#define OTPD_BREAKER_H

#include <stdint.h>

enum breaker_state { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN, BREAKER_STATE_COUNT };

enum breaker_event {
    BREAKER_SUCCESS, /* the provider took the call */
    BREAKER_FAILURE, /* the provider failed it (an error, a timeout) */
    BREAKER_NEUTRAL  /* says nothing of the provider's health (e.g. an HTTP 429) */
};

struct breaker {
    int failures_max; /* consecutive failures that open it, >= 1 */
    uint64_t open_ns; /* how long it stays open before one probe */
    int failures;     /* consecutive failures so far */
    enum breaker_state state;
    uint64_t open_until_ns;
    int probing; /* half-open: the one probe is out */
};

/* Closed, no failures. A failures_max below 1 is taken as 1. */
void breaker_init(struct breaker *b, int failures_max, uint64_t open_ns);

/* 1 when a call may go now: closed; or open whose time has passed (it
 * becomes half-open and this call is its one probe). 0 when open, or
 * half-open with its probe out. A 1 from an open or half-open breaker must
 * be followed by breaker_record of that call. */
int breaker_allow(struct breaker *b, uint64_t now_ns);

/* 1 when breaker_allow would return 1 now, without taking the probe (for
 * routing: is this provider healthy enough to pick). */
int breaker_would_allow(const struct breaker *b, uint64_t now_ns);

/* Records a call's outcome. Success closes it and resets the count. Failure
 * counts, opening it at failures_max; half-open, any failure opens it again
 * at once, for open_ns from now_ns. Neutral changes nothing, but ends a
 * probe without closing: the next breaker_allow may probe again. */
void breaker_record(struct breaker *b, enum breaker_event e, uint64_t now_ns);

/* Its state at now_ns: open past its time reads half-open. */
enum breaker_state breaker_state(const struct breaker *b, uint64_t now_ns);

/* "closed", "open", "half_open"; "" for a value that is not a state. */
const char *breaker_state_name(enum breaker_state s);

#endif
