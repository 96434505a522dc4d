/*
 * clock: the two clocks otpd reads. Wall time (Unix ms) for the ledger and
 * code expiry as the caller sees it; monotonic ns for pacing and timeouts.
 * Rate limits never use either: they read Redis's TIME.
 */
#ifndef OTPD_CLOCK_H
#define OTPD_CLOCK_H

#include <stdint.h>

int64_t clock_wall_ms(void);
uint64_t clock_mono_ns(void);

#endif
