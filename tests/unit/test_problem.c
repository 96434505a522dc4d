/*
 * Unit tests of problem (src/http/problem.c): its text is byte for byte
 * jansson's compact dump of the same object in the same order, for every
 * byte a detail can hold after http_utf8_cut (each control byte, the
 * escaped ASCII, DEL, multi-byte UTF-8), for each optional field shown and
 * not, and for a detail at its 255-byte bound of bytes that escape to six.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/http/problem.h"
#include "problem_ref.h"

static void same(const struct problem *p)
{
    char *ours = problem_text(p), *theirs = problem_ref_text(p);

    assert_non_null(ours);
    assert_non_null(theirs);
    assert_string_equal(ours, theirs);
    free(ours);
    free(theirs);
}

static void test_every_ascii_byte(void **state)
{
    struct problem p = {.status = 400, .error = "invalid_request", .title = "Invalid request"};
    char detail[8];
    int c;

    (void)state;
    for (c = 1; c < 0x80; c++) {
        snprintf(detail, sizeof(detail), "a%cb", c);
        p.detail = detail;
        same(&p);
    }
}

static void test_known_text(void **state)
{
    struct problem p = {.status = 429, .error = "rate_limited", .title = "Rate limited",
                        .detail = "limit \"resend\" \\ reached\x01\n", .reason = "resend", .retry_after_s = 3600};
    char *t = problem_text(&p);

    (void)state;
    assert_string_equal(t, "{\"type\":\"urn:otpd:problem:rate_limited\",\"title\":\"Rate limited\",\"status\":429,"
                           "\"detail\":\"limit \\\"resend\\\" \\\\ reached\\u0001\\n\",\"error\":\"rate_limited\","
                           "\"reason\":\"resend\",\"retry_after\":3600}");
    free(t);
}

static void test_utf8_and_fields(void **state)
{
    static const char *const details[] = {"", "caf\xc3\xa9", "\xe2\x80\xa8 line separator", "\xf0\x9f\x93\xb1 phone",
                                          "\x7f del", "slash / stays"};
    struct problem p = {.status = 422, .error = "invalid_code", .title = "Invalid code"};
    size_t i;
    int shown;

    (void)state;
    for (i = 0; i < sizeof(details) / sizeof(*details); i++)
        for (shown = 0; shown < 8; shown++) {
            p.detail = details[i];
            p.reason = shown & 1 ? "verify_wrong" : NULL;
            p.retry_after_s = shown & 2 ? 59 : 0;
            p.show_attempts = shown & 4;
            p.attempts_left = (int)i;
            same(&p);
        }
}

/* The longest detail, every byte escaped at six: fits, same text. */
static void test_longest_detail(void **state)
{
    char detail[PROBLEM_DETAIL_MAX + 1];
    struct problem p = {.status = 400, .error = "invalid_request", .title = "Invalid request", .detail = detail,
                        .reason = "a_rule_name_of_thirty_two_bytes_", .retry_after_s = INT64_MAX,
                        .show_attempts = 1, .attempts_left = -1};

    (void)state;
    memset(detail, '\x1f', PROBLEM_DETAIL_MAX);
    detail[PROBLEM_DETAIL_MAX] = '\0';
    same(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_ascii_byte),
        cmocka_unit_test(test_known_text),
        cmocka_unit_test(test_utf8_and_fields),
        cmocka_unit_test(test_longest_detail),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
