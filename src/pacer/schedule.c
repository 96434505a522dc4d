/*
 * schedule: the fleet's send-slot arithmetic (see schedule.h for the
 * argument that no 1-second window at the provider holds rate + 1 calls).
 * Pure: every time is an argument; no clock reads, no I/O, no allocation.
 * Called once or twice per send attempt, so plain integer arithmetic.
 *
 * Ranges: rate 1..10,000; store times are Unix microseconds, local times
 * monotonic nanoseconds since boot. Out-of-range arguments are clamped to
 * the safe side (a slower rate, a later or never-writable slot) rather than
 * overflowing: no function here has undefined behaviour for any argument.
 */
#include "schedule.h"

/* One second plus the margin, in microseconds: what rate + 1 slots span. */
#define SCHED_SPAN_US (1000000 + SCHED_MARGIN_US)
/* The largest shift of the retry backoff and of the 429 pause. */
#define SCHED_BACKOFF_SHIFT_MAX 16
#define SCHED_PAUSE_SHIFT_MAX 6
#define SCHED_PAUSE_MIN_MS 1000
#define SCHED_PAUSE_MAX_MS 60000
#define SCHED_MIN_LIFE_MAX_MS 30000

int64_t sched_period_us(int64_t rate)
{
    /* A rate below 1 would divide by zero; the slowest rate is the safe one. */
    if (rate < 1)
        rate = 1;
    /* Rounded up: rounding down would let rate + 1 slots fit in 1 s + margin. */
    return SCHED_SPAN_US / rate + (SCHED_SPAN_US % rate != 0);
}

int64_t sched_gcra_take(int64_t *tat_us, int64_t now_us, int64_t period_us)
{
    /* An idle queue earns nothing: the slot is never before the store's now,
     * and never before the last slot plus a period. */
    int64_t slot_us = *tat_us > now_us ? *tat_us : now_us;

    *tat_us = slot_us + period_us;
    return slot_us;
}

void sched_gcra_pause(int64_t *tat_us, int64_t now_us, int64_t pause_us)
{
    int64_t until_us = now_us + pause_us;

    /* A pause never pulls slots already promised further out back in. */
    if (until_us > *tat_us)
        *tat_us = until_us;
}

int sched_slot_local(int64_t slot_us, int64_t store_now_us, uint64_t sent_ns, uint64_t recv_ns,
                     struct sched_slot *out)
{
    uint64_t rtt_ns, mid_ns, half_ns, shrink_ns, keep_ns, diff_us, diff_ns, local_ns;

    if (recv_ns < sent_ns)
        return -1;
    rtt_ns = recv_ns - sent_ns;
    if (rtt_ns > SCHED_RTT_MAX_NS)
        return -1;
    /* The store read its clock somewhere between send and reply. The
     * midpoint rounds down, so it is off by at most half the round trip
     * rounded up: half_ns. Past SCHED_ERR_MAX_NS the window shrinks by the
     * excess at both ends, so every write stays within SCHED_ERR_MAX_NS of
     * the slot's true time (early) or of its lateness bound (late). The
     * limit above keeps 2 * shrink_ns <= SCHED_LATE_NS: keep_ns >= 0. */
    mid_ns = sent_ns + rtt_ns / 2;
    half_ns = rtt_ns - rtt_ns / 2;
    shrink_ns = half_ns > SCHED_ERR_MAX_NS ? half_ns - SCHED_ERR_MAX_NS : 0;
    keep_ns = SCHED_LATE_NS - shrink_ns;

    if (slot_us >= store_now_us) {
        /* Unsigned difference: exact even when the signed one would overflow. */
        diff_us = (uint64_t)slot_us - (uint64_t)store_now_us;
        if (mid_ns > UINT64_MAX - SCHED_LATE_NS ||
            diff_us > (UINT64_MAX - SCHED_LATE_NS - mid_ns) / SCHED_NS_PER_US) {
            /* Beyond the local clock's range: never due in practice. */
            local_ns = UINT64_MAX - SCHED_LATE_NS;
        } else {
            local_ns = mid_ns + diff_us * SCHED_NS_PER_US;
        }
        /* Both fit: local_ns + SCHED_LATE_NS does, and shrink_ns <= keep_ns. */
        out->due_ns = local_ns + shrink_ns;
        out->last_ns = local_ns + keep_ns;
        return 0;
    }

    /* A slot already past is due at once: it was past when the store read
     * its clock, so any write after the reply is after its true time, and
     * the shrink need not move due. Its lateness bound stays where the
     * slot's own time puts it, shrunk, which may be before now (too late). */
    diff_us = (uint64_t)store_now_us - (uint64_t)slot_us;
    diff_ns = diff_us > UINT64_MAX / SCHED_NS_PER_US ? UINT64_MAX : diff_us * SCHED_NS_PER_US;
    out->due_ns = mid_ns;
    if (diff_ns <= keep_ns || diff_ns - keep_ns <= mid_ns) {
        out->last_ns = mid_ns + keep_ns - diff_ns;
    } else {
        /* The bound falls before the local clock's zero. An empty window
         * needs last < due, so a due at zero moves one nanosecond on. */
        out->last_ns = 0;
        if (out->due_ns == 0)
            out->due_ns = 1;
    }
    return 0;
}

int sched_write_ok(const struct sched_slot *s, uint64_t now_ns)
{
    return now_ns >= s->due_ns && now_ns <= s->last_ns;
}

int64_t sched_backoff_ms(int attempts, int64_t base_ms, unsigned rnd, int64_t retry_after_ms)
{
    int shift = attempts - 1;
    int64_t ms = 0;

    if (shift < 0)
        shift = 0;
    if (shift > SCHED_BACKOFF_SHIFT_MAX)
        shift = SCHED_BACKOFF_SHIFT_MAX;
    if (base_ms >= 1) {
        /* Saturates rather than overflows for an absurd base. */
        if (base_ms > (INT64_MAX / 2) >> shift)
            ms = INT64_MAX / 2;
        else
            ms = (base_ms << shift) + (int64_t)(rnd % (uint64_t)base_ms);
    }
    /* The provider's Retry-After is a floor: retrying sooner is refused. */
    return retry_after_ms > ms ? retry_after_ms : ms;
}

int64_t sched_pause_ms(int n429, int64_t base_ms, int64_t retry_after_ms)
{
    int shift = n429;
    int64_t ms;

    if (retry_after_ms > 0)
        return retry_after_ms;
    if (shift < 0)
        shift = 0;
    if (shift > SCHED_PAUSE_SHIFT_MAX)
        shift = SCHED_PAUSE_SHIFT_MAX;
    if (base_ms < 1)
        ms = 0;
    else if (base_ms > SCHED_PAUSE_MAX_MS >> shift)
        ms = SCHED_PAUSE_MAX_MS;
    else
        ms = base_ms << shift;
    /* At least a second, so a 429 storm is not retried at once; at most a
     * minute, so a provider that rate-limits hard does not stop the fleet. */
    if (ms < SCHED_PAUSE_MIN_MS)
        ms = SCHED_PAUSE_MIN_MS;
    if (ms > SCHED_PAUSE_MAX_MS)
        ms = SCHED_PAUSE_MAX_MS;
    return ms;
}

int64_t sched_min_life_ms(int64_t ttl_ms)
{
    int64_t quarter_ms = ttl_ms / 4;

    return quarter_ms < SCHED_MIN_LIFE_MAX_MS ? quarter_ms : SCHED_MIN_LIFE_MAX_MS;
}

int sched_too_late(int64_t expires_ms, int64_t now_ms, int64_t min_life_ms)
{
    /* Compared as expires < now + min_life without the sum's overflow. */
    if (now_ms > 0 && min_life_ms > INT64_MAX - now_ms)
        return 1;
    if (now_ms < 0 && min_life_ms < INT64_MIN - now_ms)
        return 0;
    return expires_ms < now_ms + min_life_ms;
}

int64_t sched_full_retry_s(int64_t depth, int64_t rate)
{
    int64_t s;

    if (rate < 1)
        rate = 1;
    if (depth < 0)
        depth = 0;
    /* Rounded up without depth + rate - 1, which could overflow. */
    s = depth / rate + (depth % rate != 0);
    return s < 1 ? 1 : s;
}
