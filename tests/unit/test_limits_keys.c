/*
 * Unit tests of the pure key builders of limits: limits_ip_key (IPv4 whole,
 * IPv4-mapped IPv6 as IPv4, other IPv6 as its /64, malformed refused, the
 * output cap honoured) and limits_key (the Redis key of each rule kind).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/limits/limits.h"

/* limits_keys.c's UNITTEST function. */
void limits_key(enum cfg_key kind, const struct limits_request *rq, char *out, size_t cap);

/* Checks that ip gives want. */
static void expect_key(const char *ip, const char *want)
{
    char out[LIMITS_IP_KEY_MAX];
    enum otp_rc rc = limits_ip_key(ip, out, sizeof(out));

    if (rc != OTP_OK)
        fail_msg("limits_ip_key(\"%s\") = %s, want \"%s\"", ip, otp_rc_str(rc), want);
    if (strcmp(out, want) != 0)
        fail_msg("limits_ip_key(\"%s\") = \"%s\", want \"%s\"", ip, out, want);
}

static void expect_einval(const char *ip)
{
    char out[LIMITS_IP_KEY_MAX];
    enum otp_rc rc = limits_ip_key(ip, out, sizeof(out));

    if (rc != OTP_EINVAL)
        fail_msg("limits_ip_key(\"%s\") = %s, want invalid_request", ip ? ip : "(null)", otp_rc_str(rc));
}

static void test_ipv4(void **state)
{
    (void)state;
    expect_key("1.2.3.4", "1.2.3.4");
    expect_key("0.0.0.0", "0.0.0.0");
    expect_key("255.255.255.255", "255.255.255.255");
    expect_key("192.168.10.200", "192.168.10.200");
}

static void test_ipv4_mapped(void **state)
{
    (void)state;
    expect_key("::ffff:1.2.3.4", "1.2.3.4");
    expect_key("::FFFF:10.0.0.1", "10.0.0.1");
    expect_key("0:0:0:0:0:ffff:0102:0304", "1.2.3.4");
    /* The mapped form and plain IPv4 share one key. */
    expect_key("::ffff:192.168.10.200", "192.168.10.200");
}

static void test_ipv6_prefix(void **state)
{
    char a[LIMITS_IP_KEY_MAX], b[LIMITS_IP_KEY_MAX];

    (void)state;
    expect_key("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64");
    expect_key("2001:db8:1:2::", "2001:db8:1:2::/64");
    expect_key("2001:0DB8:0001:0002:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64");
    expect_key("::1", "::/64");
    expect_key("fe80::1", "fe80::/64");
    expect_key("2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff", "2001:db8:aaaa:bbbb::/64");
    /* The longest text form (45 characters) is accepted. */
    expect_key("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", "ffff:ffff:ffff:ffff::/64");

    /* Two addresses in one /64 share a key; neighbouring /64s do not. */
    assert_int_equal(limits_ip_key("2001:db8:1:2::1", a, sizeof(a)), OTP_OK);
    assert_int_equal(limits_ip_key("2001:db8:1:2:ab:cd:ef:1", b, sizeof(b)), OTP_OK);
    assert_string_equal(a, b);
    assert_int_equal(limits_ip_key("2001:db8:1:3::1", b, sizeof(b)), OTP_OK);
    assert_string_not_equal(a, b);
    assert_int_equal(limits_ip_key("2001:db8:1:1:ffff:ffff:ffff:ffff", b, sizeof(b)), OTP_OK);
    assert_string_not_equal(a, b);
    assert_int_equal(limits_ip_key("2001:db9:1:2::1", b, sizeof(b)), OTP_OK);
    assert_string_not_equal(a, b);
}

static void test_malformed(void **state)
{
    char long_ip[101];

    (void)state;
    memset(long_ip, '1', 100);
    long_ip[100] = '\0';
    expect_einval(long_ip);
    memcpy(long_ip, "2001:db8::", 10); /* an IPv6 start, then too long */
    expect_einval(long_ip);
    expect_einval(NULL);
    expect_einval("");
    expect_einval("1.2.3");
    expect_einval("1.2.3.4.5");
    expect_einval("1.2.3.256");
    expect_einval("1.2.3.-1");
    expect_einval(" 1.2.3.4");
    expect_einval("1.2.3.4 ");
    expect_einval("1.2.3.4/32");
    expect_einval("1.2.3.4:80");
    expect_einval("2001:db8::g");
    expect_einval("2001:db8::1::2");
    expect_einval("2001:db8:1:2:3:4:5:6:7");
    expect_einval("[2001:db8::1]");
    expect_einval("2001:db8::1/64");
    expect_einval("fe80::1%eth0");
    expect_einval(":::");
    expect_einval("localhost");
    expect_einval("unknown");
}

static void test_cap(void **state)
{
    char out[LIMITS_IP_KEY_MAX];

    (void)state;
    /* "1.2.3.4" needs 8 bytes. */
    assert_int_equal(limits_ip_key("1.2.3.4", out, 8), OTP_OK);
    assert_string_equal(out, "1.2.3.4");
    assert_int_equal(limits_ip_key("1.2.3.4", out, 7), OTP_EINVAL);
    /* "2001:db8:1:2::/64" needs 18 bytes. */
    assert_int_equal(limits_ip_key("2001:db8:1:2:3:4:5:6", out, 18), OTP_OK);
    assert_string_equal(out, "2001:db8:1:2::/64");
    assert_int_equal(limits_ip_key("2001:db8:1:2:3:4:5:6", out, 17), OTP_EINVAL);
    /* The mapped form's key is the short IPv4 text. */
    assert_int_equal(limits_ip_key("::ffff:1.2.3.4", out, 8), OTP_OK);
    assert_string_equal(out, "1.2.3.4");
    assert_int_equal(limits_ip_key("::ffff:1.2.3.4", out, 7), OTP_EINVAL);
}

static void test_key(void **state)
{
    struct limits_request rq = {0};
    char out[128];

    (void)state;
    rq.phone = "+919812345678";
    rq.device_id = "dev-42";
    rq.ip_key = "2001:db8:1:2::/64";
    rq.api_key = "login-web";

    limits_key(CFG_KEY_PHONE, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:{+919812345678}");
    limits_key(CFG_KEY_DEVICE, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:d:{dev-42}");
    limits_key(CFG_KEY_CLIENT_IP, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:ip:{2001:db8:1:2::/64}");
    limits_key(CFG_KEY_API_KEY, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:k:{login-web}");
    limits_key(CFG_KEY_GLOBAL, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:g");

    rq.ip_key = "1.2.3.4";
    limits_key(CFG_KEY_CLIENT_IP, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:ip:{1.2.3.4}");

    /* The global key needs nothing from the request. */
    memset(&rq, 0, sizeof(rq));
    limits_key(CFG_KEY_GLOBAL, &rq, out, sizeof(out));
    assert_string_equal(out, "otp:g");
}

/* Where a (composite) rule keeps its state: the first kind's key, the rule's
 * field and each other kind's value after 0x1f; skipped when a value is
 * missing (no device_id, unknown region, a number shorter than the prefix). */
static void test_rule_key(void **state)
{
    struct limits_request rq = {0};
    struct cfg_rule r = {0};
    char key[128], field[128];

    (void)state;
    rq.phone = "+919812345678";
    rq.api_key = "login-web";
    rq.purpose = "login";
    snprintf(r.field, sizeof(r.field), "Ab");

    r.key = CFG_KEY_PHONE;
    r.key_mask = (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_API_KEY);
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(key, "otp:{+919812345678}");
    assert_string_equal(field, "Ab\x1flogin-web");

    r.key = CFG_KEY_API_KEY;
    r.key_mask = (1u << CFG_KEY_API_KEY) | (1u << CFG_KEY_PURPOSE);
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(key, "otp:k:{login-web}");
    assert_string_equal(field, "Ab\x1flogin");

    r.key = CFG_KEY_PHONE_PREFIX;
    r.key_mask = 1u << CFG_KEY_PHONE_PREFIX;
    r.prefix_digits = 5;
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(key, "otp:pp:{91981}");
    assert_string_equal(field, "Ab");
    r.prefix_digits = 13; /* the number has 12 digits */
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 0);

    /* A prefix as a second part is cut to its digits too. */
    r.key = CFG_KEY_API_KEY;
    r.key_mask = (1u << CFG_KEY_API_KEY) | (1u << CFG_KEY_PHONE_PREFIX);
    r.prefix_digits = 3;
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(field, "Ab\x1f" "919");

    r.key = CFG_KEY_REGION;
    r.key_mask = 1u << CFG_KEY_REGION;
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 0);
    snprintf(rq.region, sizeof(rq.region), "IN");
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(key, "otp:r:{IN}");

    r.key = CFG_KEY_PHONE;
    r.key_mask = (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_DEVICE);
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 0);
    rq.device_id = "dev-1";
    assert_int_equal(limits_rule_key(&r, &rq, key, sizeof(key), field, sizeof(field)), 1);
    assert_string_equal(field, "Ab\x1f" "dev-1");

    limits_key(CFG_KEY_PURPOSE, &rq, key, sizeof(key));
    assert_string_equal(key, "otp:pu:{login}");
}

static void test_key_cap(void **state)
{
    struct limits_request rq = {0};
    char out[16];

    (void)state;
    /* A key longer than the buffer is cut and stays terminated. */
    rq.phone = "+919812345678";
    memset(out, 'X', sizeof(out));
    limits_key(CFG_KEY_PHONE, &rq, out, 8);
    assert_string_equal(out, "otp:{+9");
    assert_int_equal(out[8], 'X');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),        cmocka_unit_test(test_ipv4_mapped),
        cmocka_unit_test(test_ipv6_prefix), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_cap),         cmocka_unit_test(test_key),
        cmocka_unit_test(test_key_cap),     cmocka_unit_test(test_rule_key),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
