/*
 * Unit tests of phone_valid: E.164 as "+", then 7 to 15 digits, the first
 * not 0. Covers both length boundaries and every kind of bad character.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/phone.h"

static void expect_valid(const char *s, int want)
{
    int got = phone_valid(s);

    if (got != want)
        fail_msg("phone_valid(\"%s\") = %d, want %d", s ? s : "(null)", got, want);
}

static void test_valid(void **state)
{
    (void)state;
    expect_valid("+919812345678", 1);
    expect_valid("+14155550123", 1);
    expect_valid("+447911123456", 1);
    expect_valid("+1000000", 1); /* zeros after the first digit are fine */
}

static void test_length_bounds(void **state)
{
    char s[32];
    int n;

    (void)state;
    expect_valid("+123456", 0);           /* 6 digits */
    expect_valid("+1234567", 1);          /* 7 digits: the shortest */
    expect_valid("+123456789012345", 1);  /* 15 digits: the longest */
    expect_valid("+1234567890123456", 0); /* 16 digits */
    /* Every length from 0 to 20 digits. */
    for (n = 0; n <= 20; n++) {
        s[0] = '+';
        memset(s + 1, '9', (size_t)n);
        s[n + 1] = '\0';
        expect_valid(s, n >= 7 && n <= 15);
    }
    /* The longest valid number fits PHONE_MAX with its NUL. */
    assert_int_equal(strlen("+123456789012345") + 1, PHONE_MAX);
}

static void test_leading_zero(void **state)
{
    (void)state;
    expect_valid("+0919812345678", 0);
    expect_valid("+01234567", 0);
    expect_valid("+00000000", 0);
}

static void test_bad_chars(void **state)
{
    (void)state;
    expect_valid(NULL, 0);
    expect_valid("", 0);
    expect_valid("+", 0);
    expect_valid("919812345678", 0);   /* no plus */
    expect_valid("00919812345678", 0); /* international prefix, no plus */
    expect_valid("++919812345678", 0);
    expect_valid("+91981234567a", 0);
    expect_valid("+9198x2345678", 0);
    expect_valid("+a919812345678", 0);
    expect_valid("+91 9812345678", 0);
    expect_valid(" +919812345678", 0);
    expect_valid("+919812345678 ", 0);
    expect_valid("+919812345678\n", 0);
    expect_valid("+91-98123-45678", 0);
    expect_valid("+(91)9812345678", 0);
    expect_valid("+91981234567+", 0);
    expect_valid("+\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6\xd9\xa7", 0); /* Arabic-Indic digits */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_length_bounds),
        cmocka_unit_test(test_leading_zero),
        cmocka_unit_test(test_bad_chars),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
