/*
 * Unit tests of duration_parse: every unit, the 366-day ceiling on both
 * sides, and the strings it must refuse (no unit, no number, signs, spaces,
 * fractions, zero, NULL). A refusal must leave the output untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/base/duration.h"

#define DAY_MS (24LL * 3600 * 1000)
#define MAX_MS (366 * DAY_MS)

/* Parses s and checks that it succeeds with want_ms. */
static void expect_ms(const char *s, int64_t want_ms)
{
    int64_t ms = -1;

    if (duration_parse(s, &ms) != OTP_OK)
        fail_msg("duration_parse(\"%s\") refused, want %lld ms", s, (long long)want_ms);
    if (ms != want_ms)
        fail_msg("duration_parse(\"%s\") = %lld ms, want %lld ms", s, (long long)ms, (long long)want_ms);
}

/* Parses s and checks that it is refused without touching the output. */
static void expect_einval(const char *s)
{
    int64_t ms = -12345;

    if (duration_parse(s, &ms) != OTP_EINVAL)
        fail_msg("duration_parse(\"%s\") accepted (%lld ms), want OTP_EINVAL", s ? s : "(null)",
                 (long long)ms);
    if (ms != -12345)
        fail_msg("duration_parse(\"%s\") wrote %lld ms on refusal", s ? s : "(null)", (long long)ms);
}

static void test_units(void **state)
{
    (void)state;
    expect_ms("500ms", 500);
    expect_ms("1ms", 1);
    expect_ms("30s", 30000);
    expect_ms("1s", 1000);
    expect_ms("10m", 600000);
    expect_ms("2h", 7200000);
    expect_ms("1d", DAY_MS);
    expect_ms("1w", 7 * DAY_MS);
    expect_ms("1000ms", 1000);
    expect_ms("90s", 90000);
}

static void test_upper_bound(void **state)
{
    (void)state;
    /* 366 days is the largest duration, in every unit. */
    expect_ms("366d", MAX_MS);
    expect_ms("8784h", MAX_MS);
    expect_ms("527040m", MAX_MS);
    expect_ms("31622400s", MAX_MS);
    expect_ms("31622400000ms", MAX_MS);
    /* One unit more is refused. */
    expect_ms("52w", 364 * DAY_MS);
    expect_einval("53w");
    expect_einval("367d");
    expect_einval("8785h");
    expect_einval("527041m");
    expect_einval("31622401s");
    expect_einval("31622400001ms");
}

static void test_overflow(void **state)
{
    (void)state;
    /* Numbers that would overflow int64_t (alone or times the unit). */
    expect_einval("9223372036854775807ms");
    expect_einval("9223372036854775808ms");
    expect_einval("99999999999999999999999999999d");
    expect_einval("10000000000000000d");
    expect_einval("9223372036854775s");
}

static void test_malformed(void **state)
{
    (void)state;
    expect_einval(NULL);
    expect_einval("");
    expect_einval("s");
    expect_einval("ms");
    expect_einval("0s");
    expect_einval("0ms");
    expect_einval("00d");
    expect_einval("-1s");
    expect_einval("+1s");
    expect_einval("10");
    expect_einval("10x");
    expect_einval("10S");
    expect_einval("10sec");
    expect_einval("10mss");
    expect_einval("1W");
    expect_einval("1wk");
    expect_einval("10ss");
    expect_einval("1.5s");
    expect_einval(" 1s");
    expect_einval("1s ");
    expect_einval("1 s");
    expect_einval("1s1");
    expect_einval("1h30m");
    expect_einval("0x10s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_upper_bound),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_malformed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
