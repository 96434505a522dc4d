/*
 * Unit tests of the circuit breaker (src/base/breaker.c) on a fake clock:
 * fixed times in ns. It opens after exactly failures_max consecutive
 * failures, a success resets the count, open refuses until open_ns has
 * passed, then one probe and one only; the probe's success closes it, its
 * failure reopens it from the failure's time, a neutral outcome changes
 * nothing but frees the probe. And the names table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/base/breaker.h"

#define NS_PER_S 1000000000ull
/* The fake monotonic clock starts a while after boot. */
#define T0 (100 * NS_PER_S)
#define OPEN_NS (30 * NS_PER_S)

/* Records n failures at now_ns. */
static void fail_n(struct breaker *b, int n, uint64_t now_ns)
{
    while (n-- > 0)
        breaker_record(b, BREAKER_FAILURE, now_ns);
}

/* A breaker of 3 failures, opened at T0. */
static void open_at_t0(struct breaker *b)
{
    breaker_init(b, 3, OPEN_NS);
    fail_n(b, 3, T0);
    assert_int_equal(breaker_state(b, T0), BREAKER_OPEN);
}

static void test_opens_after_n_failures(void **state)
{
    struct breaker b;

    (void)state;
    breaker_init(&b, 3, OPEN_NS);
    assert_int_equal(breaker_state(&b, T0), BREAKER_CLOSED);
    assert_true(breaker_allow(&b, T0));
    fail_n(&b, 2, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_CLOSED);
    assert_true(breaker_would_allow(&b, T0));
    assert_true(breaker_allow(&b, T0));
    fail_n(&b, 1, T0 + 1);
    assert_int_equal(breaker_state(&b, T0 + 1), BREAKER_OPEN);
    assert_false(breaker_would_allow(&b, T0 + 1));
    assert_false(breaker_allow(&b, T0 + 1));
    /* One failure opens a breaker of 1; below 1 is taken as 1. */
    breaker_init(&b, 1, OPEN_NS);
    fail_n(&b, 1, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_OPEN);
    breaker_init(&b, 0, OPEN_NS);
    fail_n(&b, 1, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_OPEN);
}

static void test_success_resets_count(void **state)
{
    struct breaker b;

    (void)state;
    breaker_init(&b, 3, OPEN_NS);
    fail_n(&b, 2, T0);
    breaker_record(&b, BREAKER_SUCCESS, T0);
    assert_int_equal(b.failures, 0);
    fail_n(&b, 2, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_CLOSED);
    fail_n(&b, 1, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_OPEN);
}

static void test_open_refuses_until_its_time(void **state)
{
    struct breaker b;

    (void)state;
    open_at_t0(&b);
    assert_false(breaker_allow(&b, T0 + 1));
    assert_false(breaker_would_allow(&b, T0 + OPEN_NS - 1));
    assert_false(breaker_allow(&b, T0 + OPEN_NS - 1));
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS - 1), BREAKER_OPEN);
    /* Its time has passed: reads half-open, and would_allow takes no probe. */
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS), BREAKER_HALF_OPEN);
    assert_true(breaker_would_allow(&b, T0 + OPEN_NS));
    assert_true(breaker_would_allow(&b, T0 + OPEN_NS));
    assert_int_equal(b.state, BREAKER_OPEN);
    assert_false(b.probing);
}

static void test_one_probe(void **state)
{
    struct breaker b;

    (void)state;
    open_at_t0(&b);
    assert_true(breaker_allow(&b, T0 + OPEN_NS));
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS), BREAKER_HALF_OPEN);
    assert_true(b.probing);
    /* The probe is out: every other call is refused, however late. */
    assert_false(breaker_would_allow(&b, T0 + OPEN_NS));
    assert_false(breaker_allow(&b, T0 + OPEN_NS));
    assert_false(breaker_allow(&b, T0 + 10 * OPEN_NS));
}

static void test_probe_success_closes(void **state)
{
    struct breaker b;

    (void)state;
    open_at_t0(&b);
    assert_true(breaker_allow(&b, T0 + OPEN_NS + 5));
    breaker_record(&b, BREAKER_SUCCESS, T0 + OPEN_NS + 7);
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS + 7), BREAKER_CLOSED);
    assert_int_equal(b.failures, 0);
    assert_false(b.probing);
    assert_true(breaker_allow(&b, T0 + OPEN_NS + 8));
    assert_true(breaker_allow(&b, T0 + OPEN_NS + 8));
    /* Closed again, it takes failures_max failures to open. */
    fail_n(&b, 2, T0 + OPEN_NS + 9);
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS + 9), BREAKER_CLOSED);
}

static void test_probe_failure_reopens(void **state)
{
    struct breaker b;
    uint64_t probe_ns = T0 + OPEN_NS + 3, fail_ns = probe_ns + 2 * NS_PER_S;

    (void)state;
    open_at_t0(&b);
    assert_true(breaker_allow(&b, probe_ns));
    breaker_record(&b, BREAKER_FAILURE, fail_ns);
    /* Open at once, for open_ns from the failure (not from the probe's start). */
    assert_int_equal(breaker_state(&b, fail_ns), BREAKER_OPEN);
    assert_true(b.open_until_ns == fail_ns + OPEN_NS);
    assert_false(b.probing);
    assert_false(breaker_allow(&b, probe_ns + OPEN_NS));
    assert_false(breaker_allow(&b, fail_ns + OPEN_NS - 1));
    assert_true(breaker_allow(&b, fail_ns + OPEN_NS));
    assert_false(breaker_allow(&b, fail_ns + OPEN_NS));
    /* Near the clock's end, open_until saturates instead of wrapping. */
    breaker_record(&b, BREAKER_FAILURE, UINT64_MAX - 1);
    assert_true(b.open_until_ns == UINT64_MAX);
    assert_false(breaker_allow(&b, UINT64_MAX - 1));
}

static void test_neutral_changes_nothing(void **state)
{
    struct breaker b, before;

    (void)state;
    /* Closed: the count stays, neither reset nor grown. */
    breaker_init(&b, 3, OPEN_NS);
    fail_n(&b, 2, T0);
    breaker_record(&b, BREAKER_NEUTRAL, T0);
    assert_int_equal(b.failures, 2);
    assert_int_equal(breaker_state(&b, T0), BREAKER_CLOSED);
    fail_n(&b, 1, T0);
    assert_int_equal(breaker_state(&b, T0), BREAKER_OPEN);
    /* Open: nothing at all, before or after its time. */
    before = b;
    breaker_record(&b, BREAKER_NEUTRAL, T0 + 1);
    breaker_record(&b, BREAKER_NEUTRAL, T0 + OPEN_NS);
    assert_true(b.state == before.state && b.open_until_ns == before.open_until_ns &&
                b.failures == before.failures && b.probing == before.probing);
    /* Half-open: ends the probe without closing; the next allow probes again. */
    assert_true(breaker_allow(&b, T0 + OPEN_NS));
    breaker_record(&b, BREAKER_NEUTRAL, T0 + OPEN_NS + 1);
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS + 1), BREAKER_HALF_OPEN);
    assert_false(b.probing);
    assert_true(breaker_would_allow(&b, T0 + OPEN_NS + 1));
    assert_true(breaker_allow(&b, T0 + OPEN_NS + 1));
    assert_false(breaker_allow(&b, T0 + OPEN_NS + 1));
    breaker_record(&b, BREAKER_SUCCESS, T0 + OPEN_NS + 2);
    assert_int_equal(breaker_state(&b, T0 + OPEN_NS + 2), BREAKER_CLOSED);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(breaker_state_name(BREAKER_CLOSED), "closed");
    assert_string_equal(breaker_state_name(BREAKER_OPEN), "open");
    assert_string_equal(breaker_state_name(BREAKER_HALF_OPEN), "half_open");
    assert_string_equal(breaker_state_name(BREAKER_STATE_COUNT), "");
    assert_string_equal(breaker_state_name((enum breaker_state) - 1), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opens_after_n_failures),
        cmocka_unit_test(test_success_resets_count),
        cmocka_unit_test(test_open_refuses_until_its_time),
        cmocka_unit_test(test_one_probe),
        cmocka_unit_test(test_probe_success_closes),
        cmocka_unit_test(test_probe_failure_reopens),
        cmocka_unit_test(test_neutral_changes_nothing),
        cmocka_unit_test(test_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
