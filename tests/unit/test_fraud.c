/*
 * Unit tests of the pure fraud decisions (src/limits/fraud.c): countries'
 * verdict for every combination of allow, deny and monitor, a number with
 * no region; the pumping prefix; the log mask (never the whole number).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/limits/fraud.h"

static struct cfg_countries c;

static void set(char (*list)[CFG_REGION_LEN], size_t *n, const char *a, const char *b)
{
    *n = 0;
    if (a)
        snprintf(list[(*n)++], CFG_REGION_LEN, "%s", a);
    if (b)
        snprintf(list[(*n)++], CFG_REGION_LEN, "%s", b);
}

static void test_no_lists(void **state)
{
    (void)state;
    memset(&c, 0, sizeof(c));
    assert_int_equal(fraud_country(&c, "IN"), FRAUD_SERVE);
    assert_int_equal(fraud_country(&c, ""), FRAUD_SERVE);
    assert_int_equal(fraud_country(&c, NULL), FRAUD_SERVE);
}

static void test_deny_and_monitor(void **state)
{
    (void)state;
    memset(&c, 0, sizeof(c));
    set(c.deny, &c.n_deny, "GB", "001");
    set(c.monitor, &c.n_monitor, "IN", "GB");
    assert_int_equal(fraud_country(&c, "GB"), FRAUD_DENY); /* deny wins over monitor */
    assert_int_equal(fraud_country(&c, "001"), FRAUD_DENY);
    assert_int_equal(fraud_country(&c, "IN"), FRAUD_MONITOR);
    assert_int_equal(fraud_country(&c, "GG"), FRAUD_SERVE);
    assert_int_equal(fraud_country(&c, ""), FRAUD_SERVE); /* no region, no allow list: served */
}

static void test_allow(void **state)
{
    (void)state;
    memset(&c, 0, sizeof(c));
    c.has_allow = 1;
    set(c.allow, &c.n_allow, "IN", "US");
    set(c.monitor, &c.n_monitor, "US", NULL);
    assert_int_equal(fraud_country(&c, "IN"), FRAUD_SERVE);
    assert_int_equal(fraud_country(&c, "US"), FRAUD_MONITOR);
    assert_int_equal(fraud_country(&c, "CA"), FRAUD_DENY);
    assert_int_equal(fraud_country(&c, ""), FRAUD_DENY); /* nothing shows it is in an allowed region */
    assert_int_equal(fraud_country(&c, NULL), FRAUD_DENY);
}

static void test_prefix(void **state)
{
    char out[24];

    (void)state;
    assert_int_equal(fraud_prefix("+447400123456", 7, out, sizeof(out)), 1);
    assert_string_equal(out, "+4474001");
    assert_int_equal(fraud_prefix("+447400123456", 12, out, sizeof(out)), 1);
    assert_string_equal(out, "+447400123456");
    assert_int_equal(fraud_prefix("+447400123456", 13, out, sizeof(out)), 0);
    assert_string_equal(out, "");
    assert_int_equal(fraud_prefix("447400123456", 7, out, sizeof(out)), 0);
    assert_int_equal(fraud_prefix(NULL, 7, out, sizeof(out)), 0);
    assert_int_equal(fraud_prefix("+447400123456", 7, out, 8), 0); /* no room for '+', 7 digits and NUL */
    assert_int_equal(fraud_prefix("+447400123456", 7, out, 9), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_lists), cmocka_unit_test(test_deny_and_monitor), cmocka_unit_test(test_allow),
        cmocka_unit_test(test_prefix),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
