/*
 * Unit tests of timestamp_parse and timestamp_format: Unix ms and RFC 3339
 * in (offsets, fractions, leap days and seconds, the years' ends, before
 * 1970), the strings they must refuse without touching the output, RFC
 * 3339 out, and the round trip over a spread of times. The expected values
 * were computed with Python's datetime, not with this code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/timestamp.h"

#define MIN_MS (-62167219200000LL) /* 0000-01-01T00:00:00Z */
#define MAX_MS (253402300800000LL) /* 10000-01-01T00:00:00Z */

static void expect_ms(const char *s, int64_t want_ms)
{
    int64_t ms = -12345;

    if (timestamp_parse(s, &ms) != OTP_OK)
        fail_msg("timestamp_parse(\"%s\") refused, want %lld", s, (long long)want_ms);
    if (ms != want_ms)
        fail_msg("timestamp_parse(\"%s\") = %lld, want %lld", s, (long long)ms, (long long)want_ms);
}

static void expect_einval(const char *s)
{
    int64_t ms = -12345;

    if (timestamp_parse(s, &ms) != OTP_EINVAL)
        fail_msg("timestamp_parse(\"%s\") accepted (%lld), want OTP_EINVAL", s ? s : "(null)", (long long)ms);
    if (ms != -12345)
        fail_msg("timestamp_parse(\"%s\") wrote %lld on refusal", s ? s : "(null)", (long long)ms);
}

static void expect_text(int64_t ms, const char *want)
{
    char out[TIMESTAMP_LEN];

    if (timestamp_format(ms, out, sizeof(out)) != OTP_OK)
        fail_msg("timestamp_format(%lld) refused, want %s", (long long)ms, want);
    if (strcmp(out, want) != 0)
        fail_msg("timestamp_format(%lld) = %s, want %s", (long long)ms, out, want);
}

static void test_unix_ms(void **state)
{
    (void)state;
    expect_ms("0", 0);
    expect_ms("1714564800000", 1714564800000LL);
    expect_ms("000000000000042", 42);
    expect_ms("999999999999999", 999999999999999LL);
}

static void test_rfc3339(void **state)
{
    (void)state;
    expect_ms("1970-01-01T00:00:00Z", 0);
    expect_ms("2024-02-29T12:34:56.789Z", 1709210096789LL);
    expect_ms("2024-05-01T12:00:00+05:30", 1714545000000LL);
    expect_ms("2024-05-01T01:00:00-05:30", 1714545000000LL);
    expect_ms("2024-05-01t06:30:00z", 1714545000000LL);
    expect_ms("2024-05-01 06:30:00Z", 1714545000000LL);
    expect_ms("2024-05-01T06:30:00-00:00", 1714545000000LL);
    expect_ms("2024-05-01T06:30:00.1Z", 1714545000100LL);
    expect_ms("2024-05-01T06:30:00.12Z", 1714545000120LL);
    expect_ms("2024-05-01T06:30:00.123456789Z", 1714545000123LL);
    expect_ms("1969-12-31T23:59:59.999Z", -1);
    expect_ms("1900-03-01T00:00:00Z", -2203891200000LL);
    expect_ms("2000-02-29T23:00:00Z", 951865200000LL);
    expect_ms("0000-01-01T00:00:00Z", MIN_MS);
    expect_ms("9999-12-31T23:59:59.999Z", MAX_MS - 1);
    /* A leap second is the next minute's first, as in POSIX time. */
    expect_ms("2016-12-31T23:59:60Z", 1483228800000LL);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_einval(NULL);
    expect_einval("");
    expect_einval("-1");
    expect_einval("+1");
    expect_einval("1e3");
    expect_einval("1234567890123456"); /* 16 digits */
    expect_einval("1714564800000 ");
    expect_einval(" 1714564800000");
    expect_einval("2024-05-01");
    expect_einval("2024-05-01T12:00:00");
    expect_einval("2024-05-01T12:00Z");
    expect_einval("2024-5-01T12:00:00Z");
    expect_einval("24-05-01T12:00:00Z");
    expect_einval("2024-05-01X12:00:00Z");
    expect_einval("2024-05-01T12:00:00.Z");
    expect_einval("2024-05-01T12:00:00,5Z");
    expect_einval("2024-05-01T12:00:00+0530");
    expect_einval("2024-05-01T12:00:00+05");
    expect_einval("2024-05-01T12:00:00+24:00");
    expect_einval("2024-05-01T12:00:00+05:60");
    expect_einval("2024-05-01T12:00:00ZZ");
    expect_einval("2024-05-01T12:00:00Z ");
    expect_einval("2023-02-29T00:00:00Z");
    expect_einval("1900-02-29T00:00:00Z");
    expect_einval("2024-04-31T00:00:00Z");
    expect_einval("2024-00-01T00:00:00Z");
    expect_einval("2024-13-01T00:00:00Z");
    expect_einval("2024-01-00T00:00:00Z");
    expect_einval("2024-05-01T24:00:00Z");
    expect_einval("2024-05-01T12:60:00Z");
    expect_einval("2024-05-01T12:00:61Z");
    expect_einval("２024-05-01T12:00:00Z"); /* a fullwidth digit */
}

static void test_format(void **state)
{
    char out[TIMESTAMP_LEN];

    (void)state;
    expect_text(0, "1970-01-01T00:00:00.000Z");
    expect_text(-1, "1969-12-31T23:59:59.999Z");
    expect_text(1709210096789LL, "2024-02-29T12:34:56.789Z");
    expect_text(-2203891200000LL, "1900-03-01T00:00:00.000Z");
    expect_text(MIN_MS, "0000-01-01T00:00:00.000Z");
    expect_text(MAX_MS - 1, "9999-12-31T23:59:59.999Z");
    assert_int_equal(timestamp_format(MAX_MS, out, sizeof(out)), OTP_EINVAL);
    assert_string_equal(out, "");
    assert_int_equal(timestamp_format(MIN_MS - 1, out, sizeof(out)), OTP_EINVAL);
    assert_int_equal(timestamp_format(0, out, TIMESTAMP_LEN - 1), OTP_EINVAL);
    assert_string_equal(out, "");
}

/* format then parse gives the time back, across eras, leap days and
 * both sides of 1970. */
static void test_round_trip(void **state)
{
    int64_t ms, back;
    char out[TIMESTAMP_LEN];

    (void)state;
    for (ms = MIN_MS; ms < MAX_MS; ms += 86400000LL * 97 + 3600007LL) {
        assert_int_equal(timestamp_format(ms, out, sizeof(out)), OTP_OK);
        back = 0;
        assert_int_equal(timestamp_parse(out, &back), OTP_OK);
        if (back != ms)
            fail_msg("%lld formats as %s, which parses as %lld", (long long)ms, out, (long long)back);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unix_ms),
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_round_trip),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
