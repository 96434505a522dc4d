/*
 * schedule: the arithmetic of the fleet's send slots, pure: no clock
 * reads, no curl, no Redis. Every time is an argument, so a fake clock
 * tests it (tests/unit/test_schedule.c).
 *
 * The fleet's rate is one GCRA kept in Redis (slot.lua, on Redis's clock):
 * each send takes the next slot, slot = max(tat, now), and the theoretical
 * arrival time moves one period on. There is no burst: an idle queue earns
 * nothing, and slots are at least a period apart whoever takes them. The
 * period is (1 s + margin) / rate, so any rate + 1 slots span at least
 * 1 s + margin.
 *
 * A sender learns its slot on Redis's clock and moves it onto its own
 * monotonic clock from the round trip of the call that took it: the
 * slot's local time L is placed from the midpoint of send and reply
 * (rounded down), so it is off the true local time T by at most
 * h = ceil(round trip / 2). The argument below needs every write in
 * [T - SCHED_ERR_MAX_NS, T + SCHED_ERR_MAX_NS + late]. Up to a round trip of
 * 2 * SCHED_ERR_MAX_NS (h <= SCHED_ERR_MAX_NS) the window is
 * [L, L + late]; over a longer one it shrinks by
 * shrink = h - SCHED_ERR_MAX_NS at both ends, [L + shrink, L + late -
 * shrink], which keeps every write in the same bounds. It is empty once
 * 2 * shrink > late, so a slot taken over a round trip longer than
 * SCHED_RTT_MAX_NS is not used. The request must be written (curl's
 * prereq) within that window; a later write is aborted before any byte
 * leaves, and the message takes a new slot. A slot already past when the
 * store read its clock is due at once (any write is after T), its last
 * write still L + late - shrink. The store's clock reads whole
 * microseconds, so each slot's local time is off by up to another
 * SCHED_STORE_RES_NS, one way. So the writes of any rate + 1 slots span
 * more than
 *   1 s + margin - late - 2 * SCHED_ERR_MAX_NS - SCHED_STORE_RES_NS
 *   = 1 s + SCHED_JITTER_NS,
 * and no 1-second window at the provider holds rate + 1 calls as long as
 * the wire adds less than SCHED_JITTER_NS of jitter between two calls.
 */
#ifndef OTPD_SCHEDULE_H
#define OTPD_SCHEDULE_H

#include <stdint.h>

#define SCHED_NS_PER_US 1000ull
#define SCHED_NS_PER_MS 1000000ull
#define SCHED_NS_PER_S 1000000000ull

/* Added to one second for the span of any rate + 1 slots. */
#define SCHED_MARGIN_US 12000
/* The largest error allowed in moving a slot onto the local clock. */
#define SCHED_ERR_MAX_NS (2 * SCHED_NS_PER_MS)
/* Left over for the wire's jitter between two calls. */
#define SCHED_JITTER_NS (2 * SCHED_NS_PER_MS)
/* The store's clock reads whole microseconds (Redis's TIME): the instant
 * behind a reading is up to 1 us before it, which the error bound above
 * does not cover. */
#define SCHED_STORE_RES_NS SCHED_NS_PER_US
/* How late after its slot a request may still be written. */
#define SCHED_LATE_NS                                                                                        \
    ((uint64_t)SCHED_MARGIN_US * SCHED_NS_PER_US - 2 * SCHED_ERR_MAX_NS - SCHED_JITTER_NS -                  \
     SCHED_STORE_RES_NS)
/* The longest round trip whose slot is used (9.999 ms): its window, shrunk
 * by ceil(rtt / 2) - SCHED_ERR_MAX_NS at both ends, still holds one
 * nanosecond. Halved and doubled so that it stays even, and so exact, if
 * SCHED_LATE_NS is ever odd: an odd round trip's h rounds up, and
 * 2 * SCHED_ERR_MAX_NS + an odd SCHED_LATE_NS would leave no window. */
#define SCHED_RTT_MAX_NS (2 * (SCHED_ERR_MAX_NS + SCHED_LATE_NS / 2))

/* The GCRA's period in microseconds for rate sends a second (1..10,000):
 * ceil((1 s + SCHED_MARGIN_US) / rate). */
int64_t sched_period_us(int64_t rate);

/*
 * The GCRA step, as slot.lua does it (the Lua is the one that runs; this is
 * its model, for the tests and the reader). *tat_us is the stored
 * theoretical arrival time (0: none), now_us the store's clock. Returns
 * the slot granted, max(*tat_us, now_us), and moves *tat_us to slot +
 * period_us.
 */
int64_t sched_gcra_take(int64_t *tat_us, int64_t now_us, int64_t period_us);

/* A provider 429 holds every slot of the fleet back until now + pause:
 * *tat_us becomes max(*tat_us, now_us + pause_us). */
void sched_gcra_pause(int64_t *tat_us, int64_t now_us, int64_t pause_us);

/* A slot on this instance's monotonic clock. */
struct sched_slot {
    /* Not written before this: the slot's local time plus the shrink; for a
     * slot already past, the midpoint of the call that took it. */
    uint64_t due_ns;
    /* Not written after this: the slot's local time plus SCHED_LATE_NS less
     * the shrink, so due_ns + SCHED_LATE_NS only for a future slot taken
     * over a round trip of at most 2 * SCHED_ERR_MAX_NS. Below due_ns when
     * no write is allowed (a slot already too late). */
    uint64_t last_ns;
};

/*
 * Moves slot_us (store clock) onto the local monotonic clock, given the
 * store's clock store_now_us read inside the call that took it, and the
 * local times the call was sent (sent_ns) and its reply came (recv_ns).
 * Returns 0 and fills *out, or -1 when the round trip was longer than
 * SCHED_RTT_MAX_NS (or recv_ns < sent_ns): the slot must not be used. Over
 * a round trip longer than 2 * SCHED_ERR_MAX_NS the window is shrunk at
 * both ends (see above). A slot already past is due at once, with its
 * lateness bound kept from the slot's own time (so it may be too late
 * already). Arguments beyond the clocks' ranges give a window never due,
 * or an empty one, never an overflow.
 */
int sched_slot_local(int64_t slot_us, int64_t store_now_us, uint64_t sent_ns, uint64_t recv_ns,
                     struct sched_slot *out);

/* 1 when a request may be written at now_ns for slot s; 0 when it is too
 * late (abort it, take a new slot). A write before due_ns is 0 as well:
 * the sender never writes early. */
int sched_write_ok(const struct sched_slot *s, uint64_t now_ns);

/* Exponential backoff with jitter for the retry after attempt number
 * attempts (1 for the first): base_ms << min(attempts - 1, 16), plus
 * rnd % base_ms (0 when base_ms < 1), and never less than retry_after_ms
 * (a provider's Retry-After, 0 for none). */
int64_t sched_backoff_ms(int attempts, int64_t base_ms, unsigned rnd, int64_t retry_after_ms);

/* The fleet's pause after a provider 429: its Retry-After when it gave
 * one (> 0), else base_ms << min(n429, 6) (n429: the 429s in a row before
 * this one) within [1 s, 60 s]. */
int64_t sched_pause_ms(int n429, int64_t base_ms, int64_t retry_after_ms);

/* The least life a code needs to go on the wire: min(30 s, ttl_ms / 4). */
int64_t sched_min_life_ms(int64_t ttl_ms);

/* 1 when a code expiring at expires_ms has less than min_life_ms left at
 * now_ms (one clock for both). */
int sched_too_late(int64_t expires_ms, int64_t now_ms, int64_t min_life_ms);

/* A full queue's Retry-After in seconds: ceil(depth / rate), at least 1. */
int64_t sched_full_retry_s(int64_t depth, int64_t rate);

#endif
