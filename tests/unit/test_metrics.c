/*
 * Unit tests of the Prometheus text builder and the latency histograms
 * (src/base/metrics.c): headers and samples in the text format's exact
 * shape; label values escaped (backslash, double quote, newline) and HELP
 * text too (backslash, newline; a quote stays); a page that reaches its cap
 * or finds no memory is given up whole, never served in part; a page grows
 * past its first allocation; a histogram's buckets are cumulative, its
 * +Inf is its count and its sum is in seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/metrics.h"

/* The page t holds so far, taken and compared with want. */
static void page_is(struct metrics_text *t, const char *want)
{
    char *got = metrics_text_take(t);

    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_head_and_samples(void **state)
{
    struct metrics_text t = {0};

    (void)state;
    metrics_head(&t, "otpd_x_total", "counter", "Things, by kind.");
    metrics_u64(&t, "otpd_x_total", 18446744073709551615ULL);
    metrics_u64(&t, "otpd_x_total", 0, "kind", "a");
    metrics_i64(&t, "otpd_y", -42, "currency", "INR", "window", "1h", "api_key", "login-web");
    metrics_put(&t, "otpd_z %.6f\n", 1.5);
    page_is(&t, "# HELP otpd_x_total Things, by kind.\n"
                "# TYPE otpd_x_total counter\n"
                "otpd_x_total 18446744073709551615\n"
                "otpd_x_total{kind=\"a\"} 0\n"
                "otpd_y{currency=\"INR\",window=\"1h\",api_key=\"login-web\"} -42\n"
                "otpd_z 1.500000\n");
}

static void test_label_values_escaped(void **state)
{
    struct metrics_text t = {0};

    (void)state;
    metrics_u64(&t, "otpd_build_info", 1, "version", "v1\"x\\y\nz", "rule", "plain");
    page_is(&t, "otpd_build_info{version=\"v1\\\"x\\\\y\\nz\",rule=\"plain\"} 1\n");
}

static void test_help_escaped(void **state)
{
    struct metrics_text t = {0};

    (void)state;
    metrics_head(&t, "otpd_a", "gauge", "a \"quoted\" \\ path\nand a second line");
    page_is(&t, "# HELP otpd_a a \"quoted\" \\\\ path\\nand a second line\n# TYPE otpd_a gauge\n");
}

/* A page past its cap is refused whole: the first append that does not
 * fit fails it, and later ones that would fit change nothing. */
static void test_cap_fails_the_whole_page(void **state)
{
    struct metrics_text t = {.max = 32};

    (void)state;
    metrics_u64(&t, "otpd_fits", 1);
    assert_int_equal(t.failed, 0);
    metrics_u64(&t, "otpd_does_not_fit_under_the_cap", 2, "kind", "long");
    assert_int_equal(t.failed, 1);
    metrics_put(&t, "x\n");
    assert_null(metrics_text_take(&t));
    assert_null(t.s);
    /* Exactly at the cap is still whole. */
    t.max = 8;
    metrics_put(&t, "1234567\n");
    page_is(&t, "1234567\n");
    /* A label value past the cap fails it too. */
    t.max = 16;
    metrics_u64(&t, "otpd_a", 1, "v", "\"\"\"\"\"\"\"\"");
    assert_null(metrics_text_take(&t));
}

static void test_grows_and_empty(void **state)
{
    struct metrics_text t = {0};
    static char want[64 * 1000];
    size_t n = 0;
    char *s;
    int i;

    (void)state;
    assert_null(metrics_text_take(&t));
    for (i = 0; i < 1000; i++) {
        metrics_u64(&t, "otpd_many_total", (uint64_t)i, "i", "0123456789");
        n += (size_t)snprintf(want + n, sizeof(want) - n, "otpd_many_total{i=\"0123456789\"} %d\n", i);
    }
    s = metrics_text_take(&t);
    assert_non_null(s);
    assert_string_equal(s, want);
    free(s);
    assert_null(t.s);
    assert_int_equal(t.len, 0);
}

static void test_histogram(void **state)
{
    struct metrics_text t = {0};
    char *s;

    (void)state;
    metrics_observe_us(METRICS_H_PROVIDER, 400);      /* 0.0005 */
    metrics_observe_us(METRICS_H_PROVIDER, 1000);     /* 0.001: a bound is inclusive */
    metrics_observe_us(METRICS_H_PROVIDER, 20000000); /* past 10 s: +Inf only */
    metrics_observe_us(METRICS_H_COUNT, 1);           /* no such histogram: ignored */
    metrics_hist_text(&t);
    s = metrics_text_take(&t);
    assert_non_null(s);
    assert_non_null(strstr(s, "# TYPE otpd_provider_call_duration_seconds histogram\n"
                              "otpd_provider_call_duration_seconds_bucket{le=\"0.0005\"} 1\n"
                              "otpd_provider_call_duration_seconds_bucket{le=\"0.001\"} 2\n"
                              "otpd_provider_call_duration_seconds_bucket{le=\"0.0025\"} 2\n"));
    assert_non_null(strstr(s, "otpd_provider_call_duration_seconds_bucket{le=\"10\"} 2\n"
                              "otpd_provider_call_duration_seconds_bucket{le=\"+Inf\"} 3\n"
                              "otpd_provider_call_duration_seconds_sum 20.001400\n"
                              "otpd_provider_call_duration_seconds_count 3\n"));
    assert_non_null(strstr(s, "otpd_redis_call_duration_seconds_bucket{le=\"+Inf\"} 0\n"
                              "otpd_redis_call_duration_seconds_sum 0.000000\n"
                              "otpd_redis_call_duration_seconds_count 0\n"));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_and_samples),       cmocka_unit_test(test_label_values_escaped),
        cmocka_unit_test(test_help_escaped),           cmocka_unit_test(test_cap_fails_the_whole_page),
        cmocka_unit_test(test_grows_and_empty),        cmocka_unit_test(test_histogram),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
