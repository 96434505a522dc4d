/*
 * fresh: how long one whole read of the admin rows vouches for what an
 * instance remembers (the admin snapshot's blocks, the limits' refusal
 * cache). An unlock, a block's removal or an override made on another
 * instance reaches this one only through that read, so memory may answer
 * only while the last read succeeded within the fleet's bound for an admin
 * change to reach every instance. Here, below both admin and limits, so
 * that neither has to know the other. Pure: the caller passes the times.
 * Asked on every refusal-cache lookup and every block that matches.
 */
#ifndef OTPD_FRESH_H
#define OTPD_FRESH_H

#include <stdint.h>

/* The contract's bound for an admin change to reach every instance. */
#define FRESH_MS 2000
#define FRESH_NEVER INT64_MIN /* no read vouches: none yet, or the last one failed */

/* 1 when memory may answer at now_ms: the admin rows were last read whole
 * at read_ms (local monotonic, taken before the read began; FRESH_NEVER
 * when never, or when the last read failed), at most FRESH_MS before
 * now_ms. A read_ms after now_ms (a read that began after the caller took
 * now_ms) is fresh. */
static inline int fresh_ok(int64_t read_ms, int64_t now_ms)
{
    /* Compared before subtracting: FRESH_NEVER is INT64_MIN. */
    return read_ms != FRESH_NEVER && now_ms - read_ms <= FRESH_MS;
}

#endif
