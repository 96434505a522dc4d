/*
 * Unit tests of the route matcher (src/base/route.c): the matches it parses
 * and the ones it refuses (leaving the route untouched), each rung of the
 * specificity ladder, ties to the earlier route, "*" as the fallback, no
 * match, and an unknown region ("") that matches no region route.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/route.h"

/* Fills routes[] from matches, each of which must parse (the providers play no part in a match). */
static void make_routes(struct route *routes, const char *const *matches, size_t n)
{
    char why[80];
    size_t i;

    for (i = 0; i < n; i++) {
        memset(&routes[i], 0, sizeof routes[i]);
        if (route_parse_match(matches[i], &routes[i], why, sizeof why) != 0)
            fail_msg("route_parse_match(\"%s\") refused: %s", matches[i], why);
    }
}

/* Checks that e164 (region, cc_digits) takes route want (an index; -1: none). */
static void expect_route(const char *const *matches, size_t n, const char *e164, const char *region,
                         int cc_digits, int want)
{
    struct route routes[ROUTES_MAX];
    const struct route *got;
    int got_i;

    make_routes(routes, matches, n);
    got = route_match(routes, n, e164, region, cc_digits);
    got_i = got == NULL ? -1 : (int)(got - routes);
    if (got_i != want)
        fail_msg("%s (region \"%s\", cc %d) took route %d (%s), want %d", e164, region, cc_digits, got_i,
                 got ? got->match : "none", want);
}

static void expect_parse(const char *text, enum route_kind kind)
{
    struct route r;
    char why[80] = "";

    memset(&r, 0, sizeof r);
    if (route_parse_match(text, &r, why, sizeof why) != 0)
        fail_msg("route_parse_match(\"%s\") refused: %s", text, why);
    assert_string_equal(r.match, text);
    assert_int_equal(r.kind, kind);
}

static void expect_refused(const char *text)
{
    struct route r;
    char why[80] = "";

    memset(&r, 0x5a, sizeof r);
    r.match[0] = '\0';
    if (route_parse_match(text, &r, why, sizeof why) != -1)
        fail_msg("route_parse_match(\"%s\") accepted", text ? text : "(null)");
    if (why[0] == '\0')
        fail_msg("route_parse_match(\"%s\") gave no reason", text ? text : "(null)");
    assert_string_equal(r.match, "");
    assert_int_equal(r.kind, 0x5a5a5a5a);
}

static void test_parse_valid(void **state)
{
    (void)state;
    expect_parse("*", ROUTE_ANY);
    expect_parse("IN", ROUTE_REGION);
    expect_parse("GB", ROUTE_REGION);
    expect_parse("+1", ROUTE_PREFIX);
    expect_parse("+4474", ROUTE_PREFIX);
    expect_parse("+123456789012345", ROUTE_PREFIX); /* 15 digits */
}

static void test_parse_invalid(void **state)
{
    char why[8];
    struct route r;

    (void)state;
    expect_refused(NULL);
    expect_refused("");
    expect_refused("in");
    expect_refused("In");
    expect_refused("G");
    expect_refused("GBR");
    expect_refused("+");
    expect_refused("+12a");
    expect_refused("+ 1");
    expect_refused("44");
    expect_refused("**");
    expect_refused("+1234567890123456"); /* 16 digits */
    /* A short buffer holds a truncated reason; no buffer is fine. */
    assert_int_equal(route_parse_match("x", &r, why, sizeof why), -1);
    assert_int_equal(strlen(why), sizeof why - 1);
    assert_int_equal(route_parse_match("x", &r, NULL, 0), -1);
}

static void test_long_prefix_beats_region(void **state)
{
    static const char *const m[] = {"*", "GB", "+44", "+4474"};
    static const char *const m2[] = {"+44740", "GB", "+4474"};

    (void)state;
    expect_route(m, 4, "+447400123456", "GB", 2, 3);
    /* Longest first among the long prefixes, wherever they stand in the list. */
    expect_route(m2, 3, "+447400123456", "GB", 2, 0);
    expect_route(m2, 3, "+447410123456", "GB", 2, 2);
}

static void test_region_beats_cc_prefix(void **state)
{
    static const char *const m[] = {"+1", "CA", "*"};
    static const char *const m2[] = {"+44", "GB"};
    static const char *const m3[] = {"+353", "IE", "+3538"};

    (void)state;
    expect_route(m, 3, "+14165550123", "CA", 1, 1);
    expect_route(m, 3, "+12125550123", "US", 1, 0);
    /* A prefix as long as the country code ranks below the region too. */
    expect_route(m2, 2, "+447400123456", "GB", 2, 1);
    /* Three-digit country code: "+353" is the code, "+3538" is longer. */
    expect_route(m3, 3, "+353851234567", "IE", 3, 2);
    expect_route(m3, 3, "+353112345678", "IE", 3, 1);
}

static void test_cc_prefix_longest_first(void **state)
{
    static const char *const m[] = {"*", "+3", "+35", "+353"};

    (void)state;
    expect_route(m, 4, "+353851234567", "IE", 3, 3);
    expect_route(m, 4, "+358401234567", "FI", 3, 2);
    expect_route(m, 4, "+301234567890", "GR", 2, 1);
}

static void test_any_fallback(void **state)
{
    static const char *const m[] = {"*", "GB", "+44"};

    (void)state;
    expect_route(m, 3, "+919812345678", "IN", 2, 0);
    /* "*" is last however early it stands. */
    expect_route(m, 3, "+447400123456", "GB", 2, 1);
}

static void test_no_match(void **state)
{
    static const char *const m[] = {"GB", "+44", "+4474"};
    static const char *const m2[] = {"+4474001234567"};

    (void)state;
    expect_route(m, 3, "+919812345678", "IN", 2, -1);
    expect_route(m, 0, "+447400123456", "GB", 2, -1);
    /* A prefix longer than the number does not match it. */
    expect_route(m2, 1, "+447400123", "GB", 2, -1);
}

static void test_ties_to_file_order(void **state)
{
    static const char *const dup_prefix[] = {"+4474", "+4474"};
    static const char *const dup_region[] = {"GB", "GB"};
    static const char *const dup_any[] = {"*", "*"};
    static const char *const dup_cc[] = {"+44", "*", "+44"};

    (void)state;
    expect_route(dup_prefix, 2, "+447400123456", "GB", 2, 0);
    expect_route(dup_region, 2, "+447400123456", "GB", 2, 0);
    expect_route(dup_any, 2, "+447400123456", "GB", 2, 0);
    expect_route(dup_cc, 3, "+447400123456", "GB", 2, 0);
}

static void test_unknown_region(void **state)
{
    static const char *const m[] = {"GB", "*"};
    static const char *const m2[] = {"GB", "+8"};

    (void)state;
    expect_route(m, 2, "+888123456789", "", 3, 1);
    expect_route(m2, 2, "+888123456789", "", 3, 1);
    expect_route(m2, 1, "+888123456789", "", 3, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_long_prefix_beats_region),
        cmocka_unit_test(test_region_beats_cc_prefix),
        cmocka_unit_test(test_cc_prefix_longest_first),
        cmocka_unit_test(test_any_fallback),
        cmocka_unit_test(test_no_match),
        cmocka_unit_test(test_ties_to_file_order),
        cmocka_unit_test(test_unknown_region),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
