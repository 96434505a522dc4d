/*
 * Unit tests of the send schedule (src/pacer/schedule.c), driven by a fake
 * clock. The fleet simulation is the main check: 1..5 senders share one
 * GCRA on a store clock that reads whole microseconds, take slots over
 * adversarial round trips (up to the limit, where the window shrinks to a
 * nanosecond, and beyond), write at adversarial lateness (bounds hit
 * exactly, bursts, stalls) and reach the provider with up to
 * SCHED_JITTER_NS of jitter; no 1-second window at the provider may hold
 * rate + 1 calls, every message must be written, and senders that are never
 * late must reach the rate the margin leaves. The PRNG is seeded with fixed
 * seeds, and every failure prints its seed, rate and fleet size. Then the
 * worst case built by hand, idle and restart and pause cases, and every
 * function's boundaries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/pacer/schedule.h"

#define NS_PER_S SCHED_NS_PER_S
#define NS_PER_MS SCHED_NS_PER_MS
#define NS_PER_US SCHED_NS_PER_US
/* The store's clock: Unix time in ns, so its microseconds are ~1.7e15 like Redis's TIME. */
#define STORE_EPOCH_NS 1700000000000000000ull
/* The fake local monotonic clock starts a while after boot. */
#define BOOT_NS (5 * NS_PER_S)
/* A message taking more attempts than this was never written. */
#define MAX_ATTEMPTS 2000

static const uint64_t seeds[] = {1, 0x9e3779b97f4a7c15ull, 20240611, 0xdeadbeefcafef00dull};

/* splitmix64: small, seedable, good enough to pick adversarial cases. */
struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (0 when n is 0); the modulo bias does not matter here. */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

static int rng_pct(struct rng *r, unsigned pct)
{
    return rng_below(r, 100) < pct;
}

/* ----------------------------------------------------------------------------------------------------------
 */
/* The fleet simulation */

/* What the adversary does with one attempt. */
enum sim_episode { EP_CALM, EP_CHAOS, EP_TIGHT, EP_LATE, EP_EARLY };

enum sim_mode {
    SIM_ADVERSARIAL, /* long round trips, lateness, bursts, stalls, jitter at its bounds */
    SIM_CALM         /* round trips of at most 3 ms (no shrink), every write at its slot */
};

/* What a lane (one message in flight at a sender) does next. */
enum lane_state { LANE_IDLE, LANE_TAKE, LANE_REPLY, LANE_WRITE, LANE_DONE };

struct lane {
    int sender;
    enum lane_state st;
    uint64_t t_ns; /* local time of its next step */
    int has_msg;
    int attempts;
    uint64_t sent_ns, recv_ns;
    int64_t now_us, slot_us;
    struct sched_slot s;
    enum sim_episode ep; /* what the adversary does with this attempt */
};

struct sender {
    uint64_t stall_until_ns; /* writes wait for this (a descheduled thread, a GC pause) */
    int burst_left;          /* writes left in a burst of lateness near the bound */
};

struct sim {
    int64_t rate;
    int n_senders;
    enum sim_mode mode;
    uint64_t seed;
    struct rng r;
    int64_t tat_us;
    int64_t period_us;
    uint64_t store_offset_ns; /* store clock = local clock + this */
    struct sender senders[5];
    struct lane *lanes;
    int n_lanes;
    int queued; /* messages not yet picked up */
    int n_msgs;
    uint64_t *arrivals;
    int n_arrivals;
    long refused, aborted, written;
    long shrunk;   /* slots used over a round trip longer than 2 * SCHED_ERR_MAX_NS */
    int64_t calls; /* slot calls made, for the adversary's episodes */
};

/*
 * The adversary strikes in episodes. A run of 3 x rate + 30 attempts (slot
 * calls) begins with rate / 2 + 10 chaotic ones: long round trips (used
 * with a shrunk window, or refused), late and aborted writes, bursts,
 * stalls. The rest use every slot: a block at the latest a slot can reach
 * the provider (the largest error, written at its bound, the most jitter),
 * a block about rate slots on at the earliest, and random extremes
 * elsewhere, so that rate + 1 slots in a row reach the provider as close
 * together as they can at every rate. The blocks' round trips are 2 *
 * SCHED_ERR_MAX_NS or longer, up to the limit: a shrunk window must reach
 * the same extremes and no further.
 */
static enum sim_episode sim_episode_next(struct sim *sm)
{
    int64_t run = 3 * sm->rate + 30, chaos = sm->rate / 2 + 10, block = sm->rate / 50 + 2, p;

    if (sm->mode == SIM_CALM)
        return EP_CALM;
    p = sm->calls++ % run;
    if (p < chaos)
        return EP_CHAOS;
    p -= chaos;
    if (p < block)
        return EP_LATE;
    if (p >= sm->rate - 3 * block && p < sm->rate + 3 * block)
        return EP_EARLY;
    return EP_TIGHT;
}

/* The store's clock read at local time t_ns: whole microseconds, as Redis's TIME. */
static int64_t sim_store_now_us(const struct sim *sm, uint64_t t_ns)
{
    return (int64_t)((t_ns + sm->store_offset_ns) / NS_PER_US);
}

/* A round trip of 2 * SCHED_ERR_MAX_NS (no shrink) half the time, else a
 * longer one up to the limit, even so that its error is exactly half of it
 * (an odd one's midpoint rounds down, and its ceil leaves a nanosecond). */
static uint64_t sim_rtt_extreme(struct sim *sm)
{
    if (rng_pct(&sm->r, 50))
        return 2 * SCHED_ERR_MAX_NS;
    if (rng_pct(&sm->r, 20))
        return SCHED_RTT_MAX_NS; /* a one-nanosecond window */
    return 2 * SCHED_ERR_MAX_NS + 2 * rng_below(&sm->r, (SCHED_RTT_MAX_NS - 2 * SCHED_ERR_MAX_NS) / 2 + 1);
}

/* Starts a slot's call at t_ns: an adversarial round trip, and the instant within
 * it at which the store reads its clock. */
static void sim_call(struct sim *sm, struct lane *l, uint64_t t_ns)
{
    uint64_t rtt_ns, read_ns, phase;

    l->sent_ns = t_ns;
    l->ep = sim_episode_next(sm);
    phase = (t_ns + sm->store_offset_ns) % NS_PER_US;
    switch (l->ep) {
    case EP_CALM:
        rtt_ns = rng_below(&sm->r, 3 * NS_PER_MS + 1);
        read_ns = l->sent_ns + rng_below(&sm->r, rtt_ns + 1);
        break;
    case EP_LATE:
        /* Read at the start of the longest round trip, 999 ns into the store's microsecond. */
        l->sent_ns += (NS_PER_US - 1 - phase);
        rtt_ns = sim_rtt_extreme(sm);
        read_ns = l->sent_ns;
        break;
    case EP_EARLY:
        /* Read at the end of the longest round trip, on a whole microsecond. */
        l->sent_ns += (NS_PER_US - phase) % NS_PER_US;
        rtt_ns = sim_rtt_extreme(sm);
        read_ns = l->sent_ns + rtt_ns;
        break;
    default:
        /* Now and then the call starts where the store's microsecond has just
         * begun or is about to end, so its truncation is at either extreme. */
        if (rng_pct(&sm->r, 30))
            l->sent_ns += (rng_pct(&sm->r, 50) ? NS_PER_US - phase : 2 * NS_PER_US - 1 - phase);
        if (l->ep == EP_CHAOS && rng_pct(&sm->r, 20)) /* beyond the limit: the slot must be refused */
            rtt_ns = SCHED_RTT_MAX_NS + 1 + (rng_pct(&sm->r, 20) ? 0 : rng_below(&sm->r, 40 * NS_PER_MS));
        else if (rng_pct(&sm->r, 25)) /* longer than 2 * ERR, within the limit: used, shrunk */
            rtt_ns = rng_pct(&sm->r, 20) ? SCHED_RTT_MAX_NS
                                         : 2 * SCHED_ERR_MAX_NS + 1 +
                                               rng_below(&sm->r, SCHED_RTT_MAX_NS - 2 * SCHED_ERR_MAX_NS);
        else if (rng_pct(&sm->r, 50)) /* exactly 2 * ERR: used, unshrunk, with the largest error */
            rtt_ns = 2 * SCHED_ERR_MAX_NS;
        else
            rtt_ns = rng_below(&sm->r, 3 * NS_PER_MS + 1);
        switch (rng_below(&sm->r, 3)) {
        case 0:
            read_ns = l->sent_ns;
            break;
        case 1:
            read_ns = l->sent_ns + rtt_ns;
            break;
        default:
            read_ns = l->sent_ns + rng_below(&sm->r, rtt_ns + 1);
        }
    }
    l->recv_ns = l->sent_ns + rtt_ns;
    l->st = LANE_TAKE;
    l->t_ns = read_ns;
}

/* What the adversary picks for a write's time, base_ns the earliest it can be;
 * the caller keeps it from going below. */
static uint64_t sim_write_pick(struct sim *sm, struct lane *l, uint64_t base_ns)
{
    struct sender *snd = &sm->senders[l->sender];

    switch (l->ep) {
    case EP_CALM:
    case EP_EARLY:
        return base_ns;
    case EP_LATE:
        return l->s.last_ns;
    case EP_TIGHT:
        /* Every slot used, at either end of its window or between. */
        switch (rng_below(&sm->r, 3)) {
        case 0:
            return base_ns;
        case 1:
            return l->s.last_ns;
        default:
            return l->s.last_ns < base_ns ? base_ns : base_ns + rng_below(&sm->r, l->s.last_ns - base_ns + 1);
        }
    case EP_CHAOS:
        break;
    }
    if (snd->stall_until_ns > base_ns)
        return snd->stall_until_ns + rng_below(&sm->r, 100 * NS_PER_US);
    if (rng_pct(&sm->r, 5)) {
        snd->stall_until_ns = base_ns + NS_PER_MS + rng_below(&sm->r, 20 * NS_PER_MS);
        return snd->stall_until_ns;
    }
    if (snd->burst_left > 0) {
        uint64_t w_ns;

        snd->burst_left--;
        /* Around the bound, on both sides of it. */
        w_ns = l->s.last_ns - 50 * NS_PER_US + rng_below(&sm->r, 100 * NS_PER_US + 1);
        return w_ns > base_ns ? w_ns : base_ns;
    }
    if (rng_pct(&sm->r, 5)) {
        snd->burst_left = 5 + (int)rng_below(&sm->r, 20);
        return base_ns;
    }
    switch (rng_below(&sm->r, 5)) {
    case 0:
        return base_ns;
    case 1:
        return l->s.last_ns > base_ns ? l->s.last_ns : base_ns;
    case 2:
        return l->s.last_ns + 1;
    case 3:
        return base_ns + rng_below(&sm->r, 20 * NS_PER_MS + 1);
    default:
        return base_ns + rng_below(&sm->r, SCHED_LATE_NS + 1);
    }
}

/* When the sender writes a request whose slot it holds, from the earliest it
 * can (the reply may come after the slot's window has closed: a write at
 * once is then too late). */
static uint64_t sim_write_time(struct sim *sm, struct lane *l)
{
    uint64_t base_ns = l->s.due_ns > l->recv_ns ? l->s.due_ns : l->recv_ns;
    uint64_t w_ns = sim_write_pick(sm, l, base_ns);

    /* Never before base_ns: no write comes before the reply, and a lane's
     * time only moves on (the store's takes stay in time order). */
    return w_ns > base_ns ? w_ns : base_ns;
}

static uint64_t sim_jitter(struct sim *sm, const struct lane *l)
{
    switch (l->ep) {
    case EP_LATE:
        return SCHED_JITTER_NS - 1;
    case EP_EARLY:
        return 0;
    case EP_CALM:
        break;
    case EP_TIGHT:
    case EP_CHAOS:
        switch (rng_below(&sm->r, 3)) {
        case 0:
            return 0;
        case 1:
            return SCHED_JITTER_NS - 1;
        default:
            break;
        }
    }
    return rng_below(&sm->r, SCHED_JITTER_NS);
}

/* One step of lane l at its time; fails the test on a broken rule. */
static void sim_step(struct sim *sm, struct lane *l)
{
    uint64_t t_ns = l->t_ns;

    switch (l->st) {
    case LANE_IDLE:
        if (!l->has_msg) {
            if (sm->queued == 0) {
                l->st = LANE_DONE;
                l->t_ns = UINT64_MAX;
                return;
            }
            sm->queued--;
            l->has_msg = 1;
            l->attempts = 0;
        }
        if (++l->attempts > MAX_ATTEMPTS)
            fail_msg("seed %llu rate %lld senders %d: a message was not written in %d attempts",
                     (unsigned long long)sm->seed, (long long)sm->rate, sm->n_senders, MAX_ATTEMPTS);
        sim_call(sm, l, t_ns);
        return;
    case LANE_TAKE:
        /* The store runs the GCRA at the instant it reads its clock; the
         * simulation steps in time order, so takes are serialised as in Redis. */
        l->now_us = sim_store_now_us(sm, t_ns);
        l->slot_us = sched_gcra_take(&sm->tat_us, l->now_us, sm->period_us);
        l->st = LANE_REPLY;
        l->t_ns = l->recv_ns;
        return;
    case LANE_REPLY:
        if (sched_slot_local(l->slot_us, l->now_us, l->sent_ns, l->recv_ns, &l->s) != 0) {
            if (l->recv_ns - l->sent_ns <= SCHED_RTT_MAX_NS)
                fail_msg("seed %llu: a slot taken over a %llu ns round trip was refused",
                         (unsigned long long)sm->seed, (unsigned long long)(l->recv_ns - l->sent_ns));
            sm->refused++;
            l->st = LANE_IDLE;
            return;
        }
        if (l->recv_ns - l->sent_ns > SCHED_RTT_MAX_NS)
            fail_msg("seed %llu: a slot taken over a %llu ns round trip was used",
                     (unsigned long long)sm->seed, (unsigned long long)(l->recv_ns - l->sent_ns));
        if (l->recv_ns - l->sent_ns > 2 * SCHED_ERR_MAX_NS)
            sm->shrunk++;
        l->st = LANE_WRITE;
        l->t_ns = sim_write_time(sm, l);
        return;
    case LANE_WRITE:
        if (sched_write_ok(&l->s, t_ns)) {
            sm->arrivals[sm->n_arrivals++] = t_ns + sim_jitter(sm, l);
            sm->written++;
            l->has_msg = 0;
        } else {
            /* Aborted before any byte left; the message takes a new slot. */
            if (sm->mode == SIM_CALM)
                fail_msg("seed %llu rate %lld: a write at its slot was refused", (unsigned long long)sm->seed,
                         (long long)sm->rate);
            sm->aborted++;
        }
        l->st = LANE_IDLE;
        return;
    case LANE_DONE:
        return;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/*
 * Runs n_msgs messages through a fleet of n_senders at rate, and checks the
 * arrivals. Each sender has enough lanes that the GCRA, not the round trips,
 * limits the rate (Little's law: rate x 5 ms of round trip and wait).
 */
static void sim_run(int64_t rate, int n_senders, enum sim_mode mode, uint64_t seed, int n_msgs)
{
    struct sim sm;
    int lanes_each = (int)((rate * 15 + 999) / 1000 + 4 + n_senders - 1) / n_senders;
    int i, done;

    memset(&sm, 0, sizeof(sm));
    sm.rate = rate;
    sm.n_senders = n_senders;
    sm.mode = mode;
    sm.seed = seed;
    sm.r.s = seed;
    sm.period_us = sched_period_us(rate);
    sm.store_offset_ns = STORE_EPOCH_NS + rng_below(&sm.r, NS_PER_S);
    sm.n_lanes = lanes_each * n_senders;
    sm.lanes = calloc((size_t)sm.n_lanes, sizeof(*sm.lanes));
    sm.arrivals = calloc((size_t)n_msgs, sizeof(*sm.arrivals));
    assert_non_null(sm.lanes);
    assert_non_null(sm.arrivals);
    sm.queued = sm.n_msgs = n_msgs;
    for (i = 0; i < sm.n_lanes; i++) {
        sm.lanes[i].sender = i % n_senders;
        sm.lanes[i].st = LANE_IDLE;
        sm.lanes[i].t_ns = BOOT_NS + rng_below(&sm.r, NS_PER_MS);
    }

    /* Steps the lane with the earliest time (the first of equals) until all are done. */
    for (;;) {
        struct lane *next = NULL;

        for (i = 0; i < sm.n_lanes; i++)
            if (sm.lanes[i].st != LANE_DONE && (next == NULL || sm.lanes[i].t_ns < next->t_ns))
                next = &sm.lanes[i];
        if (next == NULL)
            break;
        sim_step(&sm, next);
    }

    if (sm.written != n_msgs)
        fail_msg("seed %llu rate %lld senders %d: %ld of %d messages written", (unsigned long long)seed,
                 (long long)rate, n_senders, sm.written, n_msgs);
    if (mode == SIM_ADVERSARIAL && (sm.refused == 0 || sm.aborted == 0 || sm.shrunk == 0))
        fail_msg("seed %llu rate %lld senders %d: the adversary never struck (%ld refused, %ld aborted, "
                 "%ld shrunk)",
                 (unsigned long long)seed, (long long)rate, n_senders, sm.refused, sm.aborted, sm.shrunk);

    qsort(sm.arrivals, (size_t)n_msgs, sizeof(*sm.arrivals), cmp_u64);
    /* A 1-second window [t, t + 1 s] holds rate + 1 arrivals exactly when
     * some rate + 1 consecutive arrivals span 1 s or less. */
    for (done = 0, i = 0; i + rate < n_msgs; i++) {
        uint64_t span_ns = sm.arrivals[i + rate] - sm.arrivals[i];

        if (span_ns <= NS_PER_S)
            fail_msg("seed %llu rate %lld senders %d %s: arrivals %d..%lld span %llu ns: %lld calls in 1 s",
                     (unsigned long long)seed, (long long)rate, n_senders,
                     mode == SIM_CALM ? "calm" : "adversarial", i, (long long)(i + rate),
                     (unsigned long long)span_ns, (long long)(rate + 1));
        done++;
    }
    if (done == 0)
        fail_msg("rate %lld: %d messages check no window", (long long)rate, n_msgs);

    if (mode == SIM_CALM) {
        /* The achieved rate over the whole run, first arrival to last. */
        double secs = (double)(sm.arrivals[n_msgs - 1] - sm.arrivals[0]) / 1e9;
        double got = (double)(n_msgs - 1) / secs;
        double want = (double)rate * 1e6 / (1e6 + SCHED_MARGIN_US) * 0.99;

        if (got < want)
            fail_msg("seed %llu rate %lld senders %d: achieved %.3f/s, want >= %.3f/s",
                     (unsigned long long)seed, (long long)rate, n_senders, got, want);
    }
    free(sm.lanes);
    free(sm.arrivals);
}

static const int64_t sim_rates[] = {1, 3, 30, 50, 1000, 10000};

/* Enough messages for many full windows, chaos and tight: a few seconds' worth, at least 100. */
static int sim_msgs(int64_t rate)
{
    return rate * 4 + 1 > 100 ? (int)(rate * 4 + 1) : 100;
}

static void test_fleet_adversarial(void **state)
{
    size_t ri, si;
    int n;

    (void)state;
    for (ri = 0; ri < sizeof(sim_rates) / sizeof(sim_rates[0]); ri++)
        for (n = 1; n <= 5; n++)
            for (si = 0; si < sizeof(seeds) / sizeof(seeds[0]); si++)
                sim_run(sim_rates[ri], n, SIM_ADVERSARIAL, seeds[si] + (uint64_t)n, sim_msgs(sim_rates[ri]));
}

static void test_fleet_calm_reaches_rate(void **state)
{
    size_t ri, si;
    int n;

    (void)state;
    for (ri = 0; ri < sizeof(sim_rates) / sizeof(sim_rates[0]); ri++)
        for (n = 1; n <= 5; n++)
            for (si = 0; si < sizeof(seeds) / sizeof(seeds[0]); si++)
                sim_run(sim_rates[ri], n, SIM_CALM, seeds[si] * 7 + (uint64_t)n, sim_msgs(sim_rates[ri]));
}

/*
 * The worst case by hand, at a rate whose period is exact (1000/s: 1012 us,
 * no slack from the rounding): the first slot's store read at the start of
 * its round trip of rtt_ns with its microsecond 999 ns old, written at its
 * last moment with the most jitter; the rate + 1st slot's read at the end
 * of its round trip on a whole microsecond, written at its due with no
 * jitter. Returns how far apart the two arrive.
 */
static uint64_t worst_case_gap(uint64_t rtt_ns)
{
    const int64_t rate = 1000;
    int64_t period_us = sched_period_us(rate), tat_us = 0, slot1_us, slot2_us = 0, now_us;
    uint64_t offset_ns = STORE_EPOCH_NS + 1, sent_ns, a1_ns, a2_ns;
    struct sched_slot s1, s2;
    int64_t i;

    assert_int_equal(period_us * rate, 1000000 + SCHED_MARGIN_US);
    /* Slot 1: read at sent, whose store time is 999 ns into a microsecond. */
    sent_ns = BOOT_NS + (NS_PER_US - 1) - (BOOT_NS + offset_ns) % NS_PER_US;
    now_us = (int64_t)((sent_ns + offset_ns) / NS_PER_US);
    assert_int_equal((sent_ns + offset_ns) % NS_PER_US, NS_PER_US - 1);
    slot1_us = sched_gcra_take(&tat_us, now_us, period_us);
    assert_int_equal(sched_slot_local(slot1_us, now_us, sent_ns, sent_ns + rtt_ns, &s1), 0);
    assert_true(sched_write_ok(&s1, s1.last_ns));
    a1_ns = s1.last_ns + SCHED_JITTER_NS - 1;
    /* The slots between, then slot rate + 1: read at recv on a whole microsecond. */
    for (i = 0; i < rate; i++)
        slot2_us = sched_gcra_take(&tat_us, now_us, period_us);
    assert_int_equal(slot2_us - slot1_us, 1000000 + SCHED_MARGIN_US);
    now_us = slot2_us;
    sent_ns = (uint64_t)now_us * NS_PER_US - offset_ns - rtt_ns;
    assert_int_equal(sched_slot_local(slot2_us, now_us, sent_ns, sent_ns + rtt_ns, &s2), 0);
    assert_true(sched_write_ok(&s2, s2.due_ns));
    a2_ns = s2.due_ns;
    if (a2_ns - a1_ns <= NS_PER_S)
        fail_msg("rtt %llu ns: rate + 1 calls arrive within %llu ns (1 s less %llu ns)",
                 (unsigned long long)rtt_ns, (unsigned long long)(a2_ns - a1_ns),
                 (unsigned long long)(NS_PER_S - (a2_ns - a1_ns)));
    return a2_ns - a1_ns;
}

static void test_worst_case_spacing(void **state)
{
    uint64_t gap_ns = worst_case_gap(2 * SCHED_ERR_MAX_NS);

    (void)state;
    /* A shrunk window reaches the same extremes, no further: the shrink
     * takes exactly the error beyond SCHED_ERR_MAX_NS off each end. */
    assert_true(worst_case_gap(6 * NS_PER_MS) == gap_ns);
    assert_true(worst_case_gap(SCHED_RTT_MAX_NS) == gap_ns);
    /* An odd round trip's midpoint rounds down and its error bound up: a
     * nanosecond of slack, never less. */
    assert_true(worst_case_gap(SCHED_RTT_MAX_NS - 1) == gap_ns + 1);
    assert_true(worst_case_gap(2 * SCHED_ERR_MAX_NS + 1) == gap_ns + 1);
}

/* ----------------------------------------------------------------------------------------------------------
 */
/* Idle, restart, pause */

static void test_idle_earns_no_burst(void **state)
{
    int64_t period_us = sched_period_us(50), tat_us = 0, now_us = 1700000000000000, a, b, c;

    (void)state;
    a = sched_gcra_take(&tat_us, now_us, period_us);
    assert_int_equal(a, now_us);
    /* An hour idle: the next two slots are still a period apart. */
    now_us += 3600LL * 1000000;
    b = sched_gcra_take(&tat_us, now_us, period_us);
    c = sched_gcra_take(&tat_us, now_us, period_us);
    assert_int_equal(b, now_us);
    assert_int_equal(c - b, period_us);
    /* Taken a microsecond later, still a period after the one before. */
    assert_int_equal(sched_gcra_take(&tat_us, now_us + 1, period_us) - c, period_us);
    /* tat 0 is "none": the slot is the store's now. */
    tat_us = 0;
    assert_int_equal(sched_gcra_take(&tat_us, 5, period_us), 5);
    assert_int_equal(tat_us, 5 + period_us);
}

/* The take at its edges: a microsecond before tat, at tat and after it. */
static void test_take_edges(void **state)
{
    int64_t period_us = sched_period_us(50), t_us = 1700000000000000, tat_us;

    (void)state;
    /* Asked a microsecond early: the slot is tat, never now. */
    tat_us = t_us;
    assert_int_equal(sched_gcra_take(&tat_us, t_us - 1, period_us), t_us);
    assert_int_equal(tat_us, t_us + period_us);
    /* Asked at tat: tat. */
    tat_us = t_us;
    assert_int_equal(sched_gcra_take(&tat_us, t_us, period_us), t_us);
    assert_int_equal(tat_us, t_us + period_us);
    /* A microsecond late: now, and the next a period after now, not after the old tat. */
    tat_us = t_us;
    assert_int_equal(sched_gcra_take(&tat_us, t_us + 1, period_us), t_us + 1);
    assert_int_equal(tat_us, t_us + 1 + period_us);
}

static void test_restart_does_not_burst(void **state)
{
    const int64_t rate = 30;
    int64_t period_us = sched_period_us(rate), tat_us = 0, now_us = 1700000000000000, last_us = 0, slot_us;
    struct sched_slot s;
    int i;

    (void)state;
    /* A sender takes ten slots in a row, then dies. */
    for (i = 0; i < 10; i++)
        last_us = sched_gcra_take(&tat_us, now_us, period_us);
    /* Its restart (fresh local state, same tat in the store) asks at once, many times. */
    for (i = 0; i < 10; i++) {
        memset(&s, 0, sizeof(s));
        slot_us = sched_gcra_take(&tat_us, now_us + i, period_us);
        assert_int_equal(slot_us - last_us, period_us);
        assert_int_equal(sched_slot_local(slot_us, now_us + i, BOOT_NS, BOOT_NS, &s), 0);
        /* Its local due keeps the spacing: not before the slot's distance ahead. */
        assert_true(s.due_ns == BOOT_NS + (uint64_t)(slot_us - now_us - i) * NS_PER_US);
        last_us = slot_us;
    }
}

static void test_pause_holds_every_sender(void **state)
{
    int64_t period_us = sched_period_us(10), tat_us = 0, now_us = 1700000000000000, pause_us = 5000000;
    int64_t slot_us;
    int sender;

    (void)state;
    sched_gcra_take(&tat_us, now_us, period_us);
    sched_gcra_pause(&tat_us, now_us, pause_us);
    assert_int_equal(tat_us, now_us + pause_us);
    /* Every sender's next slot, whenever it asks during the pause, is after it. */
    for (sender = 0; sender < 5; sender++) {
        slot_us = sched_gcra_take(&tat_us, now_us + sender * 1000, period_us);
        assert_int_equal(slot_us, now_us + pause_us + sender * period_us);
    }
    /* A shorter pause does not pull slots already promised back in. */
    sched_gcra_pause(&tat_us, now_us, 1000);
    assert_int_equal(tat_us, now_us + pause_us + 5 * period_us);
    /* A pause ending exactly at tat leaves it. */
    sched_gcra_pause(&tat_us, now_us + pause_us, 5 * period_us);
    assert_int_equal(tat_us, now_us + pause_us + 5 * period_us);
    /* One ending a microsecond after moves it. */
    sched_gcra_pause(&tat_us, now_us + pause_us, 5 * period_us + 1);
    assert_int_equal(tat_us, now_us + pause_us + 5 * period_us + 1);
}

/* ----------------------------------------------------------------------------------------------------------
 */
/* Each function's boundaries */

static void test_period(void **state)
{
    int64_t rate;

    (void)state;
    assert_int_equal(sched_period_us(1), 1012000);
    assert_int_equal(sched_period_us(1000), 1012);         /* exact */
    assert_int_equal(sched_period_us(3), 337334);          /* 337333.3 rounds up */
    assert_int_equal(sched_period_us(10000), 102);         /* 101.2 rounds up */
    assert_int_equal(sched_period_us(1012000 / 7 + 1), 7); /* 144572: 6.99998, up */
    assert_int_equal(sched_period_us(999), 1014);          /* 1013.01 */
    for (rate = 1; rate <= 10000; rate++) {
        int64_t p = sched_period_us(rate);

        /* rate + 1 slots span at least 1 s + margin, and the period is the least that does. */
        if (p * rate < 1000000 + SCHED_MARGIN_US || (p - 1) * rate >= 1000000 + SCHED_MARGIN_US)
            fail_msg("rate %lld: period %lld us", (long long)rate, (long long)p);
    }
}

static void test_slot_local_round_trip(void **state)
{
    struct sched_slot s, keep = {77, 88};
    int64_t now_us = 1700000000000000;

    (void)state;
    /* The limit: 2 * 2 ms of error plus the 5.999 ms lateness bound. */
    assert_true(SCHED_RTT_MAX_NS == 9999000);
    assert_true(SCHED_RTT_MAX_NS == 2 * SCHED_ERR_MAX_NS + SCHED_LATE_NS);
    /* A round trip of 2 * ERR: the full window; the midpoint is the local now. */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + 2 * SCHED_ERR_MAX_NS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + SCHED_ERR_MAX_NS + 10 * NS_PER_US);
    assert_true(s.last_ns == s.due_ns + SCHED_LATE_NS);
    /* One ns over: its error bound rounds up, so the window shrinks by 1 ns
     * at both ends (the midpoint rounds down). */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + 2 * SCHED_ERR_MAX_NS + 1, &s),
                     0);
    assert_true(s.due_ns == BOOT_NS + SCHED_ERR_MAX_NS + 10 * NS_PER_US + 1);
    assert_true(s.last_ns == BOOT_NS + SCHED_ERR_MAX_NS + 10 * NS_PER_US + SCHED_LATE_NS - 1);
    /* 6 ms: off by up to 3 ms, 1 ms more than allowed: 1 ms off each end. */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 4 * NS_PER_MS + 10 * NS_PER_US);
    assert_true(s.last_ns == BOOT_NS + 2 * NS_PER_MS + 10 * NS_PER_US + SCHED_LATE_NS);
    assert_true(s.last_ns - s.due_ns == SCHED_LATE_NS - 2 * NS_PER_MS);
    assert_false(sched_write_ok(&s, s.due_ns - 1));
    assert_true(sched_write_ok(&s, s.due_ns));
    assert_true(sched_write_ok(&s, s.last_ns));
    assert_false(sched_write_ok(&s, s.last_ns + 1));
    /* Exactly the limit: used, a window of one nanosecond. */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + SCHED_RTT_MAX_NS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + SCHED_RTT_MAX_NS / 2 + 10 * NS_PER_US + SCHED_LATE_NS / 2);
    assert_true(s.last_ns == s.due_ns);
    assert_true(sched_write_ok(&s, s.due_ns));
    assert_false(sched_write_ok(&s, s.due_ns - 1));
    assert_false(sched_write_ok(&s, s.due_ns + 1));
    /* One ns over: refused, the output untouched. */
    s = keep;
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + SCHED_RTT_MAX_NS + 1, &s), -1);
    assert_true(s.due_ns == 77 && s.last_ns == 88);
    /* Much longer: refused too. */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS + 40 * NS_PER_MS, &s), -1);
    assert_int_equal(sched_slot_local(now_us + 10, now_us, 0, UINT64_MAX, &s), -1);
    assert_true(s.due_ns == 77 && s.last_ns == 88);
    /* A reply before its call: refused. */
    assert_int_equal(sched_slot_local(now_us + 10, now_us, BOOT_NS, BOOT_NS - 1, &s), -1);
    /* A zero round trip is fine. */
    assert_int_equal(sched_slot_local(now_us, now_us, BOOT_NS, BOOT_NS, &s), 0);
    assert_true(s.due_ns == BOOT_NS);
    /* An odd round trip: the midpoint rounds down (error at most half of it, rounded up). */
    assert_int_equal(sched_slot_local(now_us, now_us, BOOT_NS, BOOT_NS + 3, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 1);
    /* A slot far ahead (a minute's pause) converts exactly. */
    assert_int_equal(sched_slot_local(now_us + 60000000, now_us, BOOT_NS, BOOT_NS + 2, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 1 + 60 * NS_PER_S);
}

static void test_slot_local_past(void **state)
{
    struct sched_slot s;
    int64_t now_us = 1700000000000000;
    uint64_t mid_ns = BOOT_NS + NS_PER_MS;

    (void)state;
    /* A slot 1 ms past: due at once, its bound 1 ms less than a fresh slot's. */
    assert_int_equal(sched_slot_local(now_us - 1000, now_us, BOOT_NS, BOOT_NS + 2 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == mid_ns);
    assert_true(s.last_ns == mid_ns + SCHED_LATE_NS - NS_PER_MS);
    assert_true(sched_write_ok(&s, s.last_ns));
    assert_false(sched_write_ok(&s, s.last_ns + 1));
    /* Past by exactly the lateness bound (whole us): writable only at once. */
    assert_int_equal(
        sched_slot_local(now_us - (int64_t)(SCHED_LATE_NS / NS_PER_US), now_us, BOOT_NS, mid_ns, &s), 0);
    assert_true(s.due_ns == BOOT_NS + NS_PER_MS / 2 && s.last_ns == s.due_ns);
    assert_true(sched_write_ok(&s, s.due_ns));
    /* Past by more: too late already, nothing is writable. */
    assert_int_equal(
        sched_slot_local(now_us - (int64_t)(SCHED_LATE_NS / NS_PER_US) - 1, now_us, BOOT_NS, mid_ns, &s), 0);
    assert_true(s.last_ns < s.due_ns);
    assert_false(sched_write_ok(&s, s.due_ns));
    assert_false(sched_write_ok(&s, s.due_ns + SCHED_LATE_NS));
    /* Past by more than the local clock has run: still nothing writable, even at zero. */
    assert_int_equal(sched_slot_local(now_us - 1000000, now_us, 0, 0, &s), 0);
    assert_false(sched_write_ok(&s, 0));
    assert_false(sched_write_ok(&s, 1));
    assert_false(sched_write_ok(&s, SCHED_LATE_NS));
    /* Taken over 6 ms (1 ms of shrink), 1 ms past: still due at the
     * midpoint, not the shrunk slot's time, and its bound 1 ms in less. */
    assert_int_equal(sched_slot_local(now_us - 1000, now_us, BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 3 * NS_PER_MS);
    assert_true(s.last_ns == BOOT_NS + 3 * NS_PER_MS - NS_PER_MS + SCHED_LATE_NS - NS_PER_MS);
    /* 1 us past over the same: the shrunk slot's time (1 ms - 1 us on) is
     * not due's, which stays the midpoint. */
    assert_int_equal(sched_slot_local(now_us - 1, now_us, BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 3 * NS_PER_MS);
    assert_true(s.last_ns == BOOT_NS + 3 * NS_PER_MS - NS_PER_US + SCHED_LATE_NS - NS_PER_MS);
    /* Past by exactly the shrunk bound (4.999 ms): writable only at once; by 1 us more, never. */
    assert_int_equal(sched_slot_local(now_us - (int64_t)((SCHED_LATE_NS - NS_PER_MS) / NS_PER_US), now_us,
                                      BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s),
                     0);
    assert_true(s.due_ns == BOOT_NS + 3 * NS_PER_MS && s.last_ns == s.due_ns);
    assert_int_equal(sched_slot_local(now_us - (int64_t)((SCHED_LATE_NS - NS_PER_MS) / NS_PER_US) - 1, now_us,
                                      BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s),
                     0);
    assert_true(s.last_ns < s.due_ns);
    assert_false(sched_write_ok(&s, s.due_ns));
    /* At the limit, a past slot's bound falls before the reply (half the
     * round trip after the midpoint, more than half the lateness bound):
     * too late by the time the sender could write. */
    assert_int_equal(sched_slot_local(now_us - 1, now_us, BOOT_NS, BOOT_NS + SCHED_RTT_MAX_NS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + SCHED_RTT_MAX_NS / 2);
    assert_true(s.last_ns == s.due_ns + SCHED_LATE_NS / 2 - NS_PER_US);
    assert_false(sched_write_ok(&s, BOOT_NS + SCHED_RTT_MAX_NS));
    /* Past by more than the local clock has run, shrunk: empty, even at zero. */
    assert_int_equal(sched_slot_local(now_us - 1000000, now_us, 0, 6 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == 3 * NS_PER_MS && s.last_ns == 0);
    assert_int_equal(sched_slot_local(now_us - 1000000, now_us, 0, 1, &s), 0);
    assert_true(s.due_ns == 1 && s.last_ns == 0);
    /* Extremes do not overflow into a writable window. */
    assert_int_equal(sched_slot_local(INT64_MIN, INT64_MAX, BOOT_NS, BOOT_NS, &s), 0);
    assert_false(sched_write_ok(&s, BOOT_NS));
    assert_int_equal(sched_slot_local(INT64_MIN, INT64_MAX, BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s), 0);
    assert_false(sched_write_ok(&s, BOOT_NS + 6 * NS_PER_MS));
    assert_int_equal(sched_slot_local(INT64_MAX, INT64_MIN, BOOT_NS, BOOT_NS, &s), 0);
    assert_false(sched_write_ok(&s, BOOT_NS));
    assert_true(s.due_ns > BOOT_NS && s.last_ns >= s.due_ns);
    /* Beyond the local clock's range, shrunk: never due, still a window, no wrap. */
    assert_int_equal(sched_slot_local(INT64_MAX, INT64_MIN, BOOT_NS, BOOT_NS + 6 * NS_PER_MS, &s), 0);
    assert_true(s.due_ns == UINT64_MAX - SCHED_LATE_NS + NS_PER_MS);
    assert_true(s.last_ns == UINT64_MAX - NS_PER_MS);
    assert_int_equal(sched_slot_local(now_us, now_us, UINT64_MAX - SCHED_RTT_MAX_NS, UINT64_MAX, &s), 0);
    assert_true(s.due_ns == UINT64_MAX - SCHED_LATE_NS / 2 && s.last_ns == s.due_ns);
}

static void test_write_ok(void **state)
{
    struct sched_slot s;
    int64_t now_us = 1700000000000000;

    (void)state;
    assert_int_equal(sched_slot_local(now_us + 500, now_us, BOOT_NS, BOOT_NS, &s), 0);
    assert_true(s.due_ns == BOOT_NS + 500 * NS_PER_US);
    assert_false(sched_write_ok(&s, s.due_ns - 1)); /* never early */
    assert_true(sched_write_ok(&s, s.due_ns));
    assert_true(sched_write_ok(&s, s.due_ns + 1));
    assert_true(sched_write_ok(&s, s.last_ns));
    assert_false(sched_write_ok(&s, s.last_ns + 1));
    assert_false(sched_write_ok(&s, 0));
    assert_false(sched_write_ok(&s, UINT64_MAX));
}

static void test_backoff(void **state)
{
    int a;

    (void)state;
    /* The shift: base << (attempts - 1), rnd 0 adds nothing. */
    assert_int_equal(sched_backoff_ms(1, 100, 0, 0), 100);
    assert_int_equal(sched_backoff_ms(2, 100, 0, 0), 200);
    assert_int_equal(sched_backoff_ms(5, 100, 0, 0), 1600);
    for (a = 1; a <= 17; a++)
        assert_int_equal(sched_backoff_ms(a, 3, 0, 0), 3LL << (a - 1));
    /* Capped at 16. */
    assert_int_equal(sched_backoff_ms(17, 1, 0, 0), 65536);
    assert_int_equal(sched_backoff_ms(18, 1, 0, 0), 65536);
    assert_int_equal(sched_backoff_ms(1000, 1, 0, 0), 65536);
    /* An attempt number below 1 is the first. */
    assert_int_equal(sched_backoff_ms(0, 100, 0, 0), 100);
    /* Jitter: rnd % base, so in [0, base). */
    assert_int_equal(sched_backoff_ms(1, 100, 99, 0), 199);
    assert_int_equal(sched_backoff_ms(1, 100, 100, 0), 100);
    assert_int_equal(sched_backoff_ms(3, 100, 250, 0), 450);
    assert_int_equal(sched_backoff_ms(1, 100, 0xffffffffu, 0), 100 + 0xffffffffLL % 100);
    /* Retry-After is a floor, not an addition. */
    assert_int_equal(sched_backoff_ms(1, 100, 0, 5000), 5000);
    assert_int_equal(sched_backoff_ms(1, 100, 50, 150), 150);
    assert_int_equal(sched_backoff_ms(1, 100, 50, 149), 150);
    assert_int_equal(sched_backoff_ms(1, 100, 50, 151), 151);
    /* Base 0 (or less): no backoff, no division by zero; Retry-After still counts. */
    assert_int_equal(sched_backoff_ms(3, 0, 12345, 0), 0);
    assert_int_equal(sched_backoff_ms(3, 0, 12345, 700), 700);
    assert_int_equal(sched_backoff_ms(3, -5, 12345, 0), 0);
    /* An absurd base saturates instead of overflowing. */
    assert_true(sched_backoff_ms(17, INT64_MAX / 4, 7, 0) > 0);
}

static void test_pause(void **state)
{
    int n;

    (void)state;
    /* Retry-After wins, unclamped either way. */
    assert_int_equal(sched_pause_ms(0, 1000, 250), 250);
    assert_int_equal(sched_pause_ms(5, 1000, 120000), 120000);
    /* Growth: base << n429. */
    assert_int_equal(sched_pause_ms(0, 1000, 0), 1000);
    assert_int_equal(sched_pause_ms(1, 1000, 0), 2000);
    assert_int_equal(sched_pause_ms(3, 1000, 0), 8000);
    assert_int_equal(sched_pause_ms(5, 1000, 0), 32000);
    assert_int_equal(sched_pause_ms(2, 1500, -1), 6000);
    /* The shift stops at 6: 100 << 6 = 6400, never 12800. */
    assert_int_equal(sched_pause_ms(6, 100, 0), 6400);
    assert_int_equal(sched_pause_ms(7, 100, 0), 6400);
    assert_int_equal(sched_pause_ms(1000, 100, 0), 6400);
    /* Within [1 s, 60 s]. */
    assert_int_equal(sched_pause_ms(0, 100, 0), 1000);
    assert_int_equal(sched_pause_ms(3, 125, 0), 1000);
    assert_int_equal(sched_pause_ms(3, 126, 0), 1008);
    assert_int_equal(sched_pause_ms(0, 0, 0), 1000);
    assert_int_equal(sched_pause_ms(6, 937, 0), 59968);
    assert_int_equal(sched_pause_ms(6, 938, 0), 60000);
    assert_int_equal(sched_pause_ms(0, 60001, 0), 60000);
    assert_int_equal(sched_pause_ms(6, INT64_MAX, 0), 60000);
    for (n = -3; n < 20; n++) {
        int64_t ms = sched_pause_ms(n, 1000, 0);

        assert_true(ms >= 1000 && ms <= 60000);
    }
}

static void test_min_life_and_too_late(void **state)
{
    (void)state;
    assert_int_equal(sched_min_life_ms(300000), 30000); /* 5 min: 75 s, capped */
    assert_int_equal(sched_min_life_ms(120000), 30000); /* exactly 30 s */
    assert_int_equal(sched_min_life_ms(119996), 29999);
    assert_int_equal(sched_min_life_ms(60000), 15000);
    assert_int_equal(sched_min_life_ms(7), 1);
    assert_int_equal(sched_min_life_ms(3), 0);
    /* Less than min life left is too late; exactly min life is not. */
    assert_false(sched_too_late(100000, 70000, 30000));
    assert_true(sched_too_late(99999, 70000, 30000));
    assert_false(sched_too_late(100001, 70000, 30000));
    assert_true(sched_too_late(50000, 70000, 30000)); /* already expired */
    assert_false(sched_too_late(70000, 70000, 0));
    assert_true(sched_too_late(69999, 70000, 0));
    /* No overflow at the ends. */
    assert_true(sched_too_late(INT64_MAX, INT64_MAX - 5, 30000));
    assert_false(sched_too_late(INT64_MIN + 10, INT64_MIN, 5));
}

static void test_full_retry(void **state)
{
    (void)state;
    assert_int_equal(sched_full_retry_s(0, 50), 1);
    assert_int_equal(sched_full_retry_s(1, 50), 1);
    assert_int_equal(sched_full_retry_s(50, 50), 1);
    assert_int_equal(sched_full_retry_s(51, 50), 2);
    assert_int_equal(sched_full_retry_s(100, 50), 2);
    assert_int_equal(sched_full_retry_s(101, 50), 3);
    assert_int_equal(sched_full_retry_s(10000, 1), 10000);
    assert_int_equal(sched_full_retry_s(10001, 10000), 2);
    assert_int_equal(sched_full_retry_s(INT64_MAX, 10000), INT64_MAX / 10000 + 1);
    assert_int_equal(sched_full_retry_s(-5, 10), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_period),
        cmocka_unit_test(test_slot_local_round_trip),
        cmocka_unit_test(test_slot_local_past),
        cmocka_unit_test(test_write_ok),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_pause),
        cmocka_unit_test(test_min_life_and_too_late),
        cmocka_unit_test(test_full_retry),
        cmocka_unit_test(test_idle_earns_no_burst),
        cmocka_unit_test(test_take_edges),
        cmocka_unit_test(test_restart_does_not_burst),
        cmocka_unit_test(test_pause_holds_every_sender),
        cmocka_unit_test(test_worst_case_spacing),
        cmocka_unit_test(test_fleet_adversarial),
        cmocka_unit_test(test_fleet_calm_reaches_rate),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
