/*
 * Unit tests of the refusal log's summary (src/http/logsum.c) on a fake
 * clock: the first answer of a kind is logged in full, the others of its
 * window only counted; a flush before the window ends writes nothing, at
 * its end one row with the count, after which the kind starts afresh;
 * kinds are told apart by status, outcome and route; a full table logs a
 * new kind in full rather than losing it; INT64_MAX flushes everything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/http/logsum.h"

#define WINDOW_MS 10000

struct seen {
    struct logsum_row rows[LOGSUM_KINDS];
    int n;
};

static void collect(void *ctx, const struct logsum_row *r)
{
    struct seen *s = ctx;

    s->rows[s->n++] = *r;
}

static void test_first_in_full_then_counted_until_the_window_ends(void **state)
{
    struct logsum *s = logsum_new(WINDOW_MS);
    struct seen seen = {0};
    int i;

    (void)state;
    assert_int_equal(logsum_note(s, 401, "unauthorized", "issue", 1000), 1);
    for (i = 0; i < 499; i++)
        assert_int_equal(logsum_note(s, 401, "unauthorized", "issue", 1000 + i), 0);
    logsum_flush(s, 1000 + WINDOW_MS - 1, collect, &seen);
    assert_int_equal(seen.n, 0);
    logsum_flush(s, 1000 + WINDOW_MS, collect, &seen);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.rows[0].status, 401);
    assert_string_equal(seen.rows[0].outcome, "unauthorized");
    assert_string_equal(seen.rows[0].route, "issue");
    assert_int_equal(seen.rows[0].count, 499);
    assert_int_equal(seen.rows[0].window_ms, WINDOW_MS);
    /* The next window's first answer is in full again. */
    assert_int_equal(logsum_note(s, 401, "unauthorized", "issue", 1000 + WINDOW_MS), 1);
    logsum_free(s);
}

static void test_a_lone_answer_needs_no_summary(void **state)
{
    struct logsum *s = logsum_new(WINDOW_MS);
    struct seen seen = {0};

    (void)state;
    assert_int_equal(logsum_note(s, 404, "not_found", "none", 0), 1);
    logsum_flush(s, WINDOW_MS, collect, &seen);
    assert_int_equal(seen.n, 0);
    assert_int_equal(logsum_note(s, 404, "not_found", "none", WINDOW_MS), 1);
    logsum_free(s);
}

static void test_kinds_apart(void **state)
{
    struct logsum *s = logsum_new(WINDOW_MS);
    struct seen seen = {0};

    (void)state;
    assert_int_equal(logsum_note(s, 401, "unauthorized", "issue", 0), 1);
    assert_int_equal(logsum_note(s, 403, "unauthorized", "issue", 0), 1);
    assert_int_equal(logsum_note(s, 401, "forbidden", "issue", 0), 1);
    assert_int_equal(logsum_note(s, 401, "unauthorized", "verify", 0), 1);
    assert_int_equal(logsum_note(s, 401, "unauthorized", "verify", 1), 0);
    logsum_flush(s, INT64_MAX, collect, &seen);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.rows[0].route, "verify");
    assert_int_equal(seen.rows[0].count, 1);
    logsum_free(s);
}

static void test_a_full_table_logs_in_full(void **state)
{
    struct logsum *s = logsum_new(WINDOW_MS);
    struct seen seen = {0};
    char route[16];
    int i;

    (void)state;
    for (i = 0; i < LOGSUM_KINDS; i++) {
        snprintf(route, sizeof(route), "r%d", i);
        assert_int_equal(logsum_note(s, 404, "not_found", route, 0), 1);
        assert_int_equal(logsum_note(s, 404, "not_found", route, 0), 0);
    }
    assert_int_equal(logsum_note(s, 404, "not_found", "one_more", 0), 1);
    assert_int_equal(logsum_note(s, 404, "not_found", "one_more", 0), 1);
    logsum_flush(s, INT64_MAX, collect, &seen);
    assert_int_equal(seen.n, LOGSUM_KINDS);
    logsum_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_in_full_then_counted_until_the_window_ends),
        cmocka_unit_test(test_a_lone_answer_needs_no_summary),
        cmocka_unit_test(test_kinds_apart),
        cmocka_unit_test(test_a_full_table_logs_in_full),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
