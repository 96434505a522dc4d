/*
 * Unit tests of the refusal cache (src/limits/rcache.c) on a fake clock:
 * an entry answers until the millisecond before its deadline and not at it,
 * the deadline is t0 + retry, LRU eviction order and the bound, clears
 * (all, one key, the generation), exact keys (op, key and field each tell
 * entries apart; a shard holds many keys), penalty hits, threads, and
 * freshness (nothing is answered while the admin rows' last whole read is
 * more than RCACHE_FRESH_MS old or failed), and which rules may be cached
 * (never a shadow rule).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

/* The module itself, not the library's copy: the collision test needs its
 * hash (entry_hash, shard_of) to find two keys it cannot tell apart. */
#include "../../src/limits/rcache.c"

/* A cache vouched for by a read that never ages (one after every fake
 * time used here): the tests of everything but freshness. */
static struct rcache *cache_new(size_t max_entries)
{
    struct rcache *c = rcache_new(max_entries);

    rcache_vouch(c, INT64_MAX);
    return c;
}

static struct rcache_value val(const char *rule, int64_t deadline_ms, int penalty)
{
    struct rcache_value v = {0};

    v.outcome = RCACHE_RATE_LIMITED;
    snprintf(v.rule, sizeof(v.rule), "%s", rule);
    v.quota = 3;
    v.window_s = 60;
    v.deadline_ms = deadline_ms;
    v.penalty = penalty;
    return v;
}

/* Redis decided at the call's start (0 ms call), at a whole ms: the state
 * ends at t0 + retry, and the entry answers until the ms before that one
 * less the 1 ms that Redis's floored clock may add to retry (rcache.h):
 * at t0 + retry - 2, not at t0 + retry - 1. */
static void test_expiry_exact_ms(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value v = val("per_phone", 0, 0), got;
    int64_t t0 = 5000, retry = 999;

    (void)state;
    v.deadline_ms = rcache_deadline_ms(t0, retry);
    assert_int_equal(v.deadline_ms, t0 + retry - 1); /* under a second: no margin for clock rates */
    v.end_ms = t0 + retry;
    assert_int_equal(rcache_put(c, rcache_gen(c), RCACHE_ISSUE, "otp:{+447400123456}", "Ab", &v, t0), 1);
    assert_int_equal(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab", t0, &got), 1);
    assert_int_equal(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab", t0 + retry - 2, &got), 1);
    assert_string_equal(got.rule, "per_phone");
    assert_int_equal(got.quota, 3);
    assert_int_equal(got.window_s, 60);
    assert_int_equal(got.deadline_ms, t0 + retry - 1);
    assert_int_equal(got.end_ms, t0 + retry); /* what the answer's Retry-After counts down to */
    assert_int_equal(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab", t0 + retry - 1, &got), 0);
    /* Dropped once expired, not merely skipped. */
    assert_int_equal(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab", t0, &got), 0);
    rcache_free(c);
}

/* Redis's clock is another host's wall clock: NTP may slew it (up to 500
 * ppm) the other way from ours, so over a long refusal it may run faster
 * than our monotonic clock. The deadline leaves 1 ms per second of wait
 * (1,000 ppm): a refusal of an hour ends 3.6 s early here, of 30 days 43
 * min early, and then Redis is asked again. */
static void test_deadline_margin_for_clock_rates(void **state)
{
    const int64_t t0 = 1000, hour = 3600000, month = 30LL * 86400000;

    (void)state;
    assert_int_equal(rcache_deadline_ms(t0, 1), t0); /* a 1 ms wait is never cached (floored clocks) */
    assert_int_equal(rcache_deadline_ms(t0, 999), t0 + 998);
    assert_int_equal(rcache_deadline_ms(t0, 1000), t0 + 998);
    assert_int_equal(rcache_deadline_ms(t0, hour), t0 + hour - 3600 - 1);
    assert_int_equal(rcache_deadline_ms(t0, month), t0 + month - month / 1000 - 1);
    /* A Redis clock 1,000 ppm fast ends the refusal at t0 + retry / 1.001, never before the deadline. */
    assert_true(rcache_deadline_ms(t0, month) <= t0 + month * 1000 / 1001);
    assert_true(rcache_deadline_ms(t0, hour) <= t0 + hour * 1000 / 1001);
}

/* An entry whose deadline has come is not stored at all. */
static void test_put_past_deadline(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value v = val("r", 100, 0), got;
    struct rcache_stats st;

    (void)state;
    assert_int_equal(rcache_put(c, rcache_gen(c), RCACHE_ISSUE, "k", "f", &v, 100), 0);
    assert_int_equal(rcache_get(c, RCACHE_ISSUE, "k", "f", 99, &got), 0);
    rcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    rcache_free(c);
}

/* One key, many fields: one shard. With room for 2 per shard, the least
 * recently used goes first, and a get makes an entry recent. */
static void test_lru_order(void **state)
{
    struct rcache *c = cache_new(2 * RCACHE_SHARDS);
    struct rcache_value v = val("r", 1000, 0), got;
    struct rcache_stats st;

    (void)state;
    assert_true(rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "a", &v, 0));
    assert_true(rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "b", &v, 0));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "a", 1, &got)); /* a is now the most recent */
    assert_true(rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "c", &v, 0));
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "b", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "a", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "c", 1, &got));
    assert_true(rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "d", &v, 0)); /* a was used before c: a goes */
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "a", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "c", 1, &got));
    rcache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.entries, 2);
    rcache_free(c);
}

/* Never more than max_entries, however many keys come. */
static void test_bound(void **state)
{
    struct rcache *c = cache_new(64);
    struct rcache_value v = val("r", 1000, 0);
    struct rcache_stats st;
    char key[32];
    int i;

    (void)state;
    for (i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "otp:{+%d}", i);
        rcache_put(c, 0, RCACHE_ISSUE, key, "f", &v, 0);
        rcache_stats(c, &st);
        assert_true(st.entries <= 64);
    }
    assert_int_equal(st.entries + st.evictions, 5000);
    assert_true(st.entries > 32); /* the shards fill: the hash spreads keys */
    rcache_free(c);
}

/* A replacement keeps one entry with the new values. */
static void test_replace(void **state)
{
    struct rcache *c = cache_new(100);
    struct rcache_value v = val("first", 1000, 0), got;
    struct rcache_stats st;

    (void)state;
    rcache_put(c, 0, RCACHE_ISSUE, "k", "f", &v, 0);
    v = val("second_rule_name_of_32_bytes_xyz", 3000, 0);
    v.outcome = RCACHE_LOCKED;
    rcache_put(c, 0, RCACHE_ISSUE, "k", "f", &v, 0);
    assert_true(rcache_get(c, RCACHE_ISSUE, "k", "f", 2000, &got));
    assert_string_equal(got.rule, "second_rule_name_of_32_bytes_xyz");
    assert_int_equal(got.outcome, RCACHE_LOCKED);
    rcache_stats(c, &st);
    assert_int_equal(st.entries, 1);
    rcache_free(c);
}

/* Op, key and field each tell entries apart; a prefix is not a match. */
static void test_exact_keys(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value v = val("r", 1000, 0), got;

    (void)state;
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+447400123456}", "Ab\x1f" "caller", &v, 0);
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab\x1f" "caller", 1, &got));
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+447400123456}", "Ab\x1f" "caller", 1, &got));
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123457}", "Ab\x1f" "caller", 1, &got));
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab\x1f" "caller2", 1, &got));
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab\x1f" "calle", 1, &got));
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+447400123456}", "Ab", 1, &got));
    /* The key/field split is part of the key: "ab"+"c" is not "a"+"bc". */
    rcache_put(c, 0, RCACHE_ISSUE, "ab", "c", &v, 0);
    assert_false(rcache_get(c, RCACHE_ISSUE, "a", "bc", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "ab", "c", 1, &got));
    rcache_free(c);
}

/* Many keys in every shard: each is found, and only its own. */
static void test_shards(void **state)
{
    struct rcache *c = cache_new(100000);
    struct rcache_value v = val("r", 1000, 0), got;
    char key[32], field[8];
    int i;

    (void)state;
    for (i = 0; i < 4000; i++) {
        snprintf(key, sizeof(key), "otp:{+%d}", i);
        snprintf(field, sizeof(field), "f%d", i % 7);
        v.quota = i;
        assert_true(rcache_put(c, 0, RCACHE_ISSUE, key, field, &v, 0));
    }
    for (i = 0; i < 4000; i++) {
        snprintf(key, sizeof(key), "otp:{+%d}", i);
        snprintf(field, sizeof(field), "f%d", i % 7);
        assert_true(rcache_get(c, RCACHE_ISSUE, key, field, 1, &got));
        assert_int_equal(got.quota, i);
        snprintf(field, sizeof(field), "f%d", (i + 1) % 7);
        assert_false(rcache_get(c, RCACHE_ISSUE, key, field, 1, &got));
    }
    rcache_free(c);
}

/* A clear drops everything, and a put made with the generation read before
 * it is dropped too (its refusal may predate what the clear was for). */
static void test_clear_and_gen(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value v = val("r", 1000, 0), got;
    struct rcache_stats st;
    uint64_t gen = rcache_gen(c);

    (void)state;
    rcache_put(c, gen, RCACHE_ISSUE, "k1", "f", &v, 0);
    rcache_put(c, gen, RCACHE_VERIFY, "k2", "f", &v, 0);
    rcache_clear(c);
    assert_false(rcache_get(c, RCACHE_ISSUE, "k1", "f", 1, &got));
    assert_false(rcache_get(c, RCACHE_VERIFY, "k2", "f", 1, &got));
    rcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(rcache_put(c, gen, RCACHE_ISSUE, "k1", "f", &v, 0), 0);
    assert_false(rcache_get(c, RCACHE_ISSUE, "k1", "f", 1, &got));
    assert_int_equal(rcache_put(c, rcache_gen(c), RCACHE_ISSUE, "k1", "f", &v, 0), 1);
    assert_true(rcache_get(c, RCACHE_ISSUE, "k1", "f", 1, &got));
    rcache_free(c);
}

/* A key's clear drops that key's entries (any op, any field) and no other. */
static void test_clear_key(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value v = val("r", 1000, 0), got;

    (void)state;
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "a", &v, 0);
    rcache_put(c, 0, RCACHE_VERIFY, "otp:{+1}", "b", &v, 0);
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+12}", "a", &v, 0);
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+2}", "a", &v, 0);
    rcache_clear_key(c, "otp:{+1}");
    assert_false(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "a", 1, &got));
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "b", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+12}", "a", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+2}", "a", 1, &got));
    rcache_free(c);
}

/* Hits of entries with a penalty are counted once each and taken once;
 * entries without one count nothing; a cleared entry keeps its hits. */
static void test_penalty_hits(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value pen = val("pen", 1000, 1), plain = val("plain", 1000, 0), got;
    struct rcache_hits out[4];
    int i;

    (void)state;
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "p", &pen, 0);
    rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "q", &plain, 0);
    for (i = 0; i < 4; i++) {
        assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 1, &got));
        assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "q", 1, &got));
    }
    assert_int_equal(rcache_take_hits(c, out, 4), 1);
    assert_string_equal(out[0].key, "otp:{+1}");
    assert_string_equal(out[0].field, "p");
    assert_string_equal(out[0].rule, "pen");
    assert_int_equal(out[0].n, 4);
    assert_int_equal(rcache_take_hits(c, out, 4), 0);
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 2, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 2, &got));
    rcache_clear(c); /* two refusals were answered: they still count */
    assert_int_equal(rcache_take_hits(c, out, 4), 1);
    assert_int_equal(out[0].n, 2);
    assert_int_equal(rcache_take_hits(c, out, 4), 0);
    /* cap honoured: the rest stays for the next call */
    rcache_put(c, rcache_gen(c), RCACHE_ISSUE, "otp:{+1}", "p", &pen, 0);
    rcache_put(c, rcache_gen(c), RCACHE_ISSUE, "otp:{+2}", "p", &pen, 0);
    rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 1, &got);
    rcache_get(c, RCACHE_ISSUE, "otp:{+2}", "p", 1, &got);
    assert_int_equal(rcache_take_hits(c, out, 1), 1);
    assert_int_equal(rcache_take_hits(c, out, 1), 1);
    assert_int_equal(rcache_take_hits(c, out, 1), 0);
    rcache_free(c); /* frees dirty entries too (ASan checks) */
}

/* A refusal that outlasts its penalty block (the block started with it,
 * the rule's own state refuses longer): hits before count_from_ms (the
 * block's end) are not counted, as Redis counts none during a block; hits
 * from that ms on are. */
static void test_penalty_hits_after_block(void **state)
{
    struct rcache *c = cache_new(1000);
    struct rcache_value pen = val("pen", 10000, 1), got;
    struct rcache_hits out[2] = {0};

    (void)state;
    pen.count_from_ms = 3000;
    assert_int_equal(rcache_put(c, 0, RCACHE_ISSUE, "otp:{+1}", "p", &pen, 0), 1);
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 1, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 2999, &got));
    assert_int_equal(got.count_from_ms, 3000);
    assert_int_equal(rcache_take_hits(c, out, 2), 0);
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 3000, &got));
    assert_true(rcache_get(c, RCACHE_ISSUE, "otp:{+1}", "p", 9999, &got));
    assert_int_equal(rcache_take_hits(c, out, 2), 1);
    assert_int_equal(out[0].n, 2);
    rcache_free(c);
}

/* Off: NULL does nothing and answers nothing. */
static void test_off(void **state)
{
    struct rcache_value v = val("r", 1000, 0), got;
    struct rcache_stats st;

    (void)state;
    assert_null(rcache_new(0));
    assert_int_equal(rcache_put(NULL, 0, RCACHE_ISSUE, "k", "f", &v, 0), 0);
    assert_int_equal(rcache_get(NULL, RCACHE_ISSUE, "k", "f", 0, &got), 0);
    rcache_clear(NULL);
    rcache_vouch(NULL, 0);
    rcache_stats(NULL, &st);
    assert_int_equal(st.entries, 0);
}

/* The rule: a read at read_ms vouches up to and including read_ms +
 * RCACHE_FRESH_MS, never after; a failed read (RCACHE_NEVER) vouches for
 * nothing; a read that began after now (another thread's) is fresh. */
static void test_fresh_rule(void **state)
{
    const int64_t r = 1000000;

    (void)state;
    assert_true(rcache_fresh(r, r));
    assert_true(rcache_fresh(r, r + RCACHE_FRESH_MS));
    assert_false(rcache_fresh(r, r + RCACHE_FRESH_MS + 1));
    assert_false(rcache_fresh(r, INT64_MAX));
    assert_true(rcache_fresh(r, r - 5));
    assert_false(rcache_fresh(RCACHE_NEVER, r));
    assert_false(rcache_fresh(RCACHE_NEVER, 0));
    assert_false(rcache_fresh(RCACHE_NEVER, INT64_MIN + 1));
}

/* A cached lock on a fake clock through a partition: answered while the
 * last read is fresh; not from the moment it is more than RCACHE_FRESH_MS
 * old (reads stopped: the tick cannot reach Redis), nor at once after a
 * failed read; kept meanwhile, and answered again once a read vouches. A
 * new cache answers nothing until its first read. */
static void test_stale_answers_nothing(void **state)
{
    struct rcache *c = rcache_new(100);
    struct rcache_value v = val("guesses", 3600000, 0), got;
    struct rcache_stats st;
    const int64_t t = 10000;

    (void)state;
    v.outcome = RCACHE_LOCKED;
    assert_int_equal(rcache_put(c, rcache_gen(c), RCACHE_VERIFY, "otp:{+1}", "g", &v, t), 1);
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t, &got)); /* never read yet */
    rcache_vouch(c, t);
    assert_true(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + 1000, &got));
    assert_int_equal(got.outcome, RCACHE_LOCKED);
    assert_true(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + RCACHE_FRESH_MS, &got));
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + RCACHE_FRESH_MS + 1, &got));
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + 5800, &got));
    rcache_stats(c, &st);
    assert_int_equal(st.entries, 1); /* kept: the next good read decides */
    rcache_vouch(c, t + 6000);
    assert_true(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + 6000, &got));
    rcache_vouch(c, RCACHE_NEVER); /* a read failed: no waiting for the age */
    assert_false(rcache_get(c, RCACHE_VERIFY, "otp:{+1}", "g", t + 6001, &got));
    rcache_free(c);
}

/* Which rules' refusals may be cached, for every algorithm, each mode and
 * with or without a penalty: the four whose end only time moves, enforced;
 * a shadow rule never, whatever its algorithm or penalty. */
static void test_cacheable_by_mode(void **state)
{
    const enum cfg_algo algos[] = {CFG_ALGO_SLIDING_LOG,     CFG_ALGO_FIXED_WINDOW,
                                   CFG_ALGO_TOKEN_BUCKET,    CFG_ALGO_RESEND_DELAY,
                                   CFG_ALGO_WRONG_GUESS_CAP, CFG_ALGO_SLIDING_WINDOW_COUNTER};
    const int certain[] = {1, 1, 0, 1, 1, 0};
    struct cfg_rule r;
    size_t i;
    int shadow, penalty;

    (void)state;
    for (i = 0; i < sizeof(algos) / sizeof(algos[0]); i++)
        for (shadow = 0; shadow <= 1; shadow++)
            for (penalty = 0; penalty <= 1; penalty++) {
                memset(&r, 0, sizeof(r));
                r.algo = algos[i];
                r.limit = 1;
                r.window_ms = 60000;
                r.shadow = shadow;
                r.penalty_after = penalty ? 20 : 0;
                if (rcache_cacheable(&r) != (shadow ? 0 : certain[i]))
                    fail_msg("algorithm %d, shadow %d, penalty %d: cacheable %d", (int)algos[i], shadow,
                             penalty, rcache_cacheable(&r));
            }
}

struct worker {
    struct rcache *c;
    int id;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    struct rcache_value v = val("r", 1000000, 1), got;
    char key[32];
    int i;

    for (i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "otp:{+%d}", (i * 7 + w->id) % 500);
        if (i % 3 == 0)
            rcache_put(w->c, rcache_gen(w->c), RCACHE_ISSUE, key, "f", &v, i);
        else if (rcache_get(w->c, RCACHE_ISSUE, key, "f", i, &got) && strcmp(got.rule, "r") != 0)
            return (void *)1;
        if (i % 5000 == 0)
            rcache_clear(w->c);
    }
    return NULL;
}

/* Threads at once on few keys (a small cache: evictions too): no crash or
 * torn entry (run under `make unit SAN=1` and TSan to see more). */
static void test_threads(void **state)
{
    struct rcache *c = cache_new(128);
    struct worker w[4];
    pthread_t t[4];
    struct rcache_hits out[64];
    void *rv;
    int i;

    (void)state;
    for (i = 0; i < 4; i++) {
        w[i].c = c;
        w[i].id = i;
        pthread_create(&t[i], NULL, hammer, &w[i]);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(t[i], &rv);
        assert_null(rv);
    }
    while (rcache_take_hits(c, out, 64) > 0)
        ;
    rcache_free(c);
}

/* Two Redis keys with the same shard and the same 32-bit entry hash (found
 * by search: birthday on 36 bits, a few hundred thousand keys) are still
 * two entries: the hash only picks the bucket, the text decides. */
struct probe {
    uint64_t v;
    uint32_t i;
};

static int probe_cmp(const void *a, const void *b)
{
    const struct probe *x = a, *y = b;

    return x->v < y->v ? -1 : x->v > y->v;
}

static void test_hash_collision_is_two_keys(void **state)
{
    enum { N = 1 << 20 };
    struct probe *p = calloc(N, sizeof(*p));
    struct rcache *c = cache_new(1000);
    struct rcache_value got, v = val("per_phone", 10000, 0);
    char a[32], b[32];
    uint32_t i, x = 0, y = 0;
    int found = 0;

    (void)state;
    assert_non_null(p);
    assert_non_null(c);
    for (i = 0; i < N; i++) {
        uint64_t kh;
        char k[32];
        int n = snprintf(k, sizeof(k), "otp:{+9198%08u}", i);
        struct rc_shard *s = shard_of(c, k, (size_t)n, &kh);
        p[i].v = ((uint64_t)(s - c->shards) << 32) | entry_hash(kh, RCACHE_ISSUE, "f", 1);
        p[i].i = i;
    }
    qsort(p, N, sizeof(*p), probe_cmp);
    for (i = 1; i < N && !found; i++)
        if (p[i].v == p[i - 1].v) {
            x = p[i - 1].i;
            y = p[i].i;
            found = 1;
        }
    free(p);
    assert_true(found); /* about 2^18 keys make a collision likely; 2^20 make it certain in practice */
    snprintf(a, sizeof(a), "otp:{+9198%08u}", x);
    snprintf(b, sizeof(b), "otp:{+9198%08u}", y);
    assert_true(rcache_put(c, rcache_gen(c), RCACHE_ISSUE, a, "f", &v, 0));
    assert_false(rcache_get(c, RCACHE_ISSUE, b, "f", 1, &got)); /* the other key: never its refusal */
    assert_true(rcache_get(c, RCACHE_ISSUE, a, "f", 1, &got));
    rcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expiry_exact_ms),
        cmocka_unit_test(test_deadline_margin_for_clock_rates), cmocka_unit_test(test_put_past_deadline),
        cmocka_unit_test(test_lru_order),       cmocka_unit_test(test_bound),
        cmocka_unit_test(test_replace),         cmocka_unit_test(test_exact_keys),
        cmocka_unit_test(test_shards),          cmocka_unit_test(test_clear_and_gen),
        cmocka_unit_test(test_clear_key),       cmocka_unit_test(test_penalty_hits),
        cmocka_unit_test(test_penalty_hits_after_block),
        cmocka_unit_test(test_off),             cmocka_unit_test(test_threads), cmocka_unit_test(test_hash_collision_is_two_keys),
        cmocka_unit_test(test_fresh_rule),      cmocka_unit_test(test_stale_answers_nothing),
        cmocka_unit_test(test_cacheable_by_mode),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
