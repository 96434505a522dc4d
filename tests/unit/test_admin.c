/*
 * Unit tests of admin's pure parts: addresses and CIDR ranges
 * (src/admin/admin_net.c: IPv4, IPv6, IPv4-mapped IPv6, /0, /32, /128,
 * prefixes that are not a whole number of bytes, malformed prefixes, the
 * one spelling a range is shown in) and the admin bodies
 * (src/admin/admin_body.c: what a block, an override and an unlock take,
 * and every refusal's sentence: unknown fields, wrong types, bad and too
 * long durations, notes with control characters, keys that do not fit
 * their rule, limits out of their rule's bounds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../src/admin/admin_int.h"

/* ---- Addresses and ranges ---- */

/* s parsed, in its canonical text ("" when refused). */
static const char *net(const char *s)
{
    static char out[64];
    struct admin_net n;

    out[0] = '\0';
    if (admin_net_parse(s, &n) == OTP_OK)
        admin_net_text(&n, out, sizeof(out));
    return out;
}

/* 1 when the address ip lies in the range r (both must parse). */
static int in(const char *r, const char *ip)
{
    struct admin_net rn, ipn;

    assert_int_equal(admin_net_parse(r, &rn), OTP_OK);
    assert_int_equal(admin_net_parse(ip, &ipn), OTP_OK);
    return admin_net_match(&rn, &ipn);
}

static void test_net_ipv4(void **state)
{
    struct admin_net n;

    (void)state;
    assert_int_equal(admin_net_parse("192.0.2.7", &n), OTP_OK);
    assert_int_equal(n.family, 4);
    assert_int_equal(n.bits, 32);
    assert_memory_equal(n.addr, "\xc0\x00\x02\x07", 4);
    assert_string_equal(net("192.0.2.7"), "192.0.2.7/32");
    assert_string_equal(net("192.0.2.7/32"), "192.0.2.7/32");
    /* Host bits past the prefix are cleared: one spelling per range. */
    assert_string_equal(net("10.1.2.3/8"), "10.0.0.0/8");
    assert_string_equal(net("10.255.2.3/9"), "10.128.0.0/9");
    assert_string_equal(net("10.1.2.3/0"), "0.0.0.0/0");
    assert_string_equal(net("10.0.0.0/008"), "10.0.0.0/8");
}

static void test_net_ipv6(void **state)
{
    struct admin_net n;

    (void)state;
    assert_int_equal(admin_net_parse("2001:db8::1", &n), OTP_OK);
    assert_int_equal(n.family, 6);
    assert_int_equal(n.bits, 128);
    assert_string_equal(net("2001:db8::1"), "2001:db8::1/128");
    assert_string_equal(net("2001:db8::1/128"), "2001:db8::1/128");
    assert_string_equal(net("2001:db8:ffff::1/32"), "2001:db8::/32");
    assert_string_equal(net("2001:db8::3/127"), "2001:db8::2/127");
    assert_string_equal(net("2001:db8::1/0"), "::/0");
}

/* ::ffff:a.b.c.d is keyed as IPv4, as requests are: its prefix less 96. */
static void test_net_mapped(void **state)
{
    struct admin_net n;

    (void)state;
    assert_int_equal(admin_net_parse("::ffff:10.1.2.3", &n), OTP_OK);
    assert_int_equal(n.family, 4);
    assert_int_equal(n.bits, 32);
    assert_string_equal(net("::ffff:10.1.2.3"), "10.1.2.3/32");
    assert_string_equal(net("::ffff:10.1.2.3/128"), "10.1.2.3/32");
    assert_string_equal(net("::ffff:10.1.2.3/104"), "10.0.0.0/8");
    assert_string_equal(net("::ffff:10.1.2.3/96"), "0.0.0.0/0");
    assert_string_equal(net("::ffff:10.1.2.3/95"), ""); /* wider than IPv4 itself */
    assert_true(in("10.0.0.0/8", "::ffff:10.9.9.9"));
    assert_true(in("::ffff:10.0.0.0/104", "10.9.9.9"));
}

static void test_net_refused(void **state)
{
    static const char *const bad[] = {
        "",
        "10.0.0.0/",
        "10.0.0.0/33",
        "10.0.0.0/-1",
        "10.0.0.0/a",
        "10.0.0.0/ 8",
        "10.0.0.0/0008",
        "10.0.0.0/8/8",
        "2001:db8::/129",
        "2001:db8::/1000",
        "10.0.0",
        "10.0.0.256",
        " 10.0.0.1",
        "10.0.0.1 ",
        "/8",
        "example.com",
        "2001:db8:::1",
        "::ffff:10.0.0.0/95",
        "0000000000000000000000000000000000000000000000000000000000000000000000",
        NULL,
    };
    struct admin_net n;
    size_t i;

    (void)state;
    for (i = 0; bad[i] != NULL; i++)
        if (admin_net_parse(bad[i], &n) != OTP_EINVAL)
            fail_msg("\"%s\" parsed", bad[i]);
    assert_int_equal(admin_net_parse(NULL, &n), OTP_EINVAL);
}

static void test_net_match(void **state)
{
    (void)state;
    /* /0 takes in its whole family, and only it. */
    assert_true(in("0.0.0.0/0", "203.0.113.9"));
    assert_false(in("0.0.0.0/0", "2001:db8::1"));
    assert_true(in("::/0", "2001:db8::1"));
    assert_false(in("::/0", "203.0.113.9"));
    /* /32 and /128: the address alone. */
    assert_true(in("192.0.2.7/32", "192.0.2.7"));
    assert_false(in("192.0.2.7/32", "192.0.2.6"));
    assert_false(in("192.0.2.7/32", "192.0.2.8"));
    assert_true(in("2001:db8::1", "2001:db8::1"));
    assert_false(in("2001:db8::1", "2001:db8::"));
    /* A prefix that ends inside a byte: its bits, no more, no fewer. */
    assert_true(in("10.0.0.0/9", "10.127.255.255"));
    assert_false(in("10.0.0.0/9", "10.128.0.0"));
    assert_true(in("2001:db8::/127", "2001:db8::1"));
    assert_false(in("2001:db8::/127", "2001:db8::2"));
    assert_true(in("2001:db8::/33", "2001:db8:7fff::1"));
    assert_false(in("2001:db8::/33", "2001:db8:8000::1"));
    /* Whole bytes. */
    assert_true(in("10.0.0.0/8", "10.255.255.255"));
    assert_false(in("10.0.0.0/8", "11.0.0.0"));
    assert_true(in("2001:db8::/32", "2001:db8:ffff::1"));
    assert_false(in("2001:db8::/32", "2001:db9::1"));
}

/* ---- Bodies ---- */

static char detail[256];
static int64_t ttl_ms;

/* Asserts row is NULL with a detail that holds want. */
static void refused(json_t *row, const char *body, const char *want)
{
    if (row != NULL) {
        json_decref(row);
        fail_msg("accepted: %s", body);
    }
    if (detail[0] == '\0' || strstr(detail, want) == NULL)
        fail_msg("%s: the detail \"%s\" does not say \"%s\"", body, detail, want);
}

static json_t *block(const char *body)
{
    detail[0] = '\0';
    ttl_ms = -1;
    return admin_block_body(body, strlen(body), &ttl_ms, detail, sizeof(detail));
}

static void block_refused(const char *body, const char *want)
{
    refused(block(body), body, want);
}

/* Asserts body is taken, and that its row matches kind with value. */
static void block_ok(const char *body, const char *kind, const char *value)
{
    json_t *row = block(body);

    if (row == NULL)
        fail_msg("%s refused: %s", body, detail);
    assert_string_equal(json_string_value(json_object_get(json_object_get(row, "match"), kind)), value);
    json_decref(row);
}

static void test_block_values(void **state)
{
    (void)state;
    block_ok("{\"match\":{\"phone\":\"+9109812345699\"},\"expires_in\":\"1h\"}", "phone", "+919812345699");
    assert_int_equal(ttl_ms, 3600000);
    block_ok("{\"match\":{\"phone_prefix\":\"+91\"},\"expires_in\":\"1h\"}", "phone_prefix", "+91");
    block_ok("{\"match\":{\"region\":\"001\"},\"expires_in\":\"1h\"}", "region", "001");
    block_ok("{\"match\":{\"device\":\"pixel 7\"},\"expires_in\":\"1h\"}", "device", "pixel 7");
    block_ok("{\"match\":{\"api_key\":\"shop\"},\"expires_in\":\"1h\"}", "api_key", "shop");
    block_ok("{\"match\":{\"client_ip\":\"10.1.2.3/8\"},\"expires_in\":\"1h\"}", "client_ip", "10.0.0.0/8");
    block_ok("{\"match\":{\"client_ip\":\"::ffff:10.1.2.3\"},\"expires_in\":\"1h\"}", "client_ip",
             "10.1.2.3/32");
    /* One IPv6 address stands for its /64, as the limits key it. */
    block_ok("{\"match\":{\"client_ip\":\"2001:db8::1:2:3:4\"},\"expires_in\":\"1h\"}", "client_ip",
             "2001:db8::/64");
    block_ok("{\"match\":{\"client_ip\":\"2001:db8::1/128\"},\"expires_in\":\"1h\"}", "client_ip",
             "2001:db8::1/128");

    block_refused("{\"match\":{\"phone\":\"12\"},\"expires_in\":\"1h\"}", "");
    block_refused("{\"match\":{\"phone_prefix\":\"91\"},\"expires_in\":\"1h\"}", "phone_prefix must be");
    block_refused("{\"match\":{\"phone_prefix\":\"+1234567890123456\"},\"expires_in\":\"1h\"}",
                  "phone_prefix must be");
    block_refused("{\"match\":{\"region\":\"in\"},\"expires_in\":\"1h\"}", "region must be");
    block_refused("{\"match\":{\"device\":\"\"},\"expires_in\":\"1h\"}", "device must be");
    block_refused("{\"match\":{\"device\":\"a\\u0007b\"},\"expires_in\":\"1h\"}", "device must be");
    block_refused("{\"match\":{\"client_ip\":\"10.0.0.0/33\"},\"expires_in\":\"1h\"}", "client_ip must be");
    block_refused("{\"match\":{\"api_key\":\"123456789012345678901234567890123\"},\"expires_in\":\"1h\"}",
                  "api_key must be");
}

static void test_block_shape(void **state)
{
    (void)state;
    block_refused("", "body is not JSON");
    block_refused("[1]", "body must be a JSON object");
    block_refused("{\"match\":{\"phone\":\"+919812345699\"},\"expires_in\":\"1h\",\"extra\":1}",
                  "unknown field \"extra\"");
    block_refused("{\"expires_in\":\"1h\",\"expires_in\":\"2h\",\"match\":{\"region\":\"IN\"}}",
                  "body is not JSON");
    block_refused("{\"expires_in\":\"1h\"}", "match must be an object");
    block_refused("{\"match\":\"IN\",\"expires_in\":\"1h\"}", "match must be an object");
    block_refused("{\"match\":{},\"expires_in\":\"1h\"}", "match must be an object");
    block_refused("{\"match\":{\"region\":\"IN\",\"device\":\"d\"},\"expires_in\":\"1h\"}",
                  "match must be an object");
    block_refused("{\"match\":{\"country\":\"IN\"},\"expires_in\":\"1h\"}", "match.country is not one of");
    block_refused("{\"match\":{\"region\":91},\"expires_in\":\"1h\"}", "match's value must be a string");
    /* jansson refuses a NUL inside a string (no JSON_ALLOW_NUL). */
    block_refused("{\"match\":{\"region\":\"I\\u0000N\"},\"expires_in\":\"1h\"}", "body is not JSON");
}

static void test_durations(void **state)
{
    static const char *const bad[] = {"0s",  "-1h",  "1x",           "",     "h",    "1.5h", "1 h",
                                      "31d", "721h", "2592000001ms", "366d", "367d", NULL};
    char body[160];
    json_t *row;
    size_t i;

    (void)state;
    block_refused("{\"match\":{\"region\":\"IN\"}}", "expires_in is required");
    block_refused("{\"match\":{\"region\":\"IN\"},\"expires_in\":3600}", "expires_in must be a string");
    block_refused("{\"match\":{\"region\":\"IN\"},\"expires_in\":null}", "expires_in must be a string");
    for (i = 0; bad[i] != NULL; i++) {
        snprintf(body, sizeof(body), "{\"match\":{\"region\":\"IN\"},\"expires_in\":\"%s\"}", bad[i]);
        block_refused(body, "expires_in must be a duration such as \"1h\", more than 0 and at most 30 days");
    }
    /* 30 days is the most, however it is written. */
    assert_non_null(row = block("{\"match\":{\"region\":\"IN\"},\"expires_in\":\"30d\"}"));
    assert_int_equal(ttl_ms, ADMIN_TTL_MAX_MS);
    assert_string_equal(json_string_value(json_object_get(row, "expires_in")), "30d");
    json_decref(row);
    assert_non_null(row = block("{\"match\":{\"region\":\"IN\"},\"expires_in\":\"720h\"}"));
    assert_int_equal(ttl_ms, ADMIN_TTL_MAX_MS);
    json_decref(row);
    assert_non_null(row = block("{\"match\":{\"region\":\"IN\"},\"expires_in\":\"1ms\"}"));
    assert_int_equal(ttl_ms, 1);
    json_decref(row);
}

/* A block body with note, raw JSON text between the quotes. */
static json_t *noted(const char *note)
{
    static char body[600];

    snprintf(body, sizeof(body), "{\"match\":{\"region\":\"IN\"},\"expires_in\":\"1h\",\"note\":\"%s\"}",
             note);
    return block(body);
}

static void test_notes(void **state)
{
    /* C0, DEL, and C1 (U+0080 to U+009F): a terminal listing the rows would act on them. */
    static const char *const bad[] = {"a\\u0001b", "a\\nb",     "a\\tb",    "\\u001b[2J", "a\\u007fb",
                                      "a\\u0080b", "a\\u009bb", "a\\u009f", "",           NULL};
    static const char *const good[] = {"ticket 42", "caf\\u00e9", "a\\u00a0b", "\\u2603", "~", NULL};
    char long_note[ADMIN_NOTE_MAX + 1];
    json_t *row;
    size_t i;

    (void)state;
    for (i = 0; bad[i] != NULL; i++)
        refused(noted(bad[i]), bad[i], "note must be 1 to 255 bytes without control characters");
    for (i = 0; good[i] != NULL; i++) {
        if ((row = noted(good[i])) == NULL)
            fail_msg("note \"%s\" refused: %s", good[i], detail);
        assert_non_null(json_string_value(json_object_get(row, "note")));
        json_decref(row);
    }
    memset(long_note, 'n', ADMIN_NOTE_MAX - 1);
    long_note[ADMIN_NOTE_MAX - 1] = '\0';
    assert_non_null(row = noted(long_note)); /* 255 bytes */
    json_decref(row);
    long_note[ADMIN_NOTE_MAX - 1] = 'n';
    long_note[ADMIN_NOTE_MAX] = '\0';
    refused(noted(long_note), "256 bytes", "note must be 1 to 255 bytes");
    block_refused("{\"match\":{\"region\":\"IN\"},\"expires_in\":\"1h\",\"note\":7}",
                  "note must be a string");
    block_refused("{\"match\":{\"region\":\"IN\"},\"expires_in\":\"1h\",\"note\":\"a\\u0000b\"}",
                  "body is not JSON");
}

/* ---- Overrides ---- */

static struct cfg_rule rules[6];
static struct admin_override ov;

static void rule(struct cfg_rule *r, const char *name, enum cfg_algo algo, unsigned mask, int64_t window_ms)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->algo = algo;
    for (r->key = 0; !(mask & (1u << r->key)); r->key++)
        ;
    r->key_mask = mask;
    r->window_ms = window_ms;
    r->limit = 5;
}

static int setup_rules(void **state)
{
    (void)state;
    rule(&rules[0], "phone_hour", CFG_ALGO_FIXED_WINDOW, 1u << CFG_KEY_PHONE, 3600000);
    rules[0].key_mask = 0; /* a single key kind: the loader leaves the mask to key */
    rule(&rules[1], "ip_bucket", CFG_ALGO_TOKEN_BUCKET, 1u << CFG_KEY_CLIENT_IP, 60000);
    rule(&rules[2], "resend", CFG_ALGO_RESEND_DELAY, 1u << CFG_KEY_PHONE, 30000);
    rule(&rules[3], "phone_caller", CFG_ALGO_SLIDING_LOG, (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_API_KEY),
         3600000);
    rule(&rules[4], "prefix_day", CFG_ALGO_FIXED_WINDOW, 1u << CFG_KEY_PHONE_PREFIX, 86400000);
    rules[4].prefix_digits = 3;
    rule(&rules[5], "phone_in_prefix", CFG_ALGO_FIXED_WINDOW,
         (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_PHONE_PREFIX), 86400000);
    rules[5].prefix_digits = 2;
    return 0;
}

static json_t * override(const char *body)
{
    detail[0] = '\0';
    ttl_ms = -1;
    return admin_override_body(rules, sizeof(rules) / sizeof(rules[0]), body, strlen(body), &ov, &ttl_ms,
                               detail, sizeof(detail));
}

static void override_refused(const char *body, const char *want)
{
    refused(override(body), body, want);
}

static void test_override_taken(void **state)
{
    json_t *row;

    (void)state;
    row = override("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+9109812345699\"},\"limit\":50,"
                   "\"expires_in\":\"2h\",\"note\":\"launch\"}");
    if (row == NULL)
        fail_msg("refused: %s", detail);
    assert_string_equal(ov.rule, "phone_hour");
    assert_int_equal(ov.mask, 1u << CFG_KEY_PHONE);
    assert_string_equal(ov.values[CFG_KEY_PHONE], "+919812345699");
    assert_int_equal(ov.limit, 50);
    assert_int_equal(ov.burst, 0);
    assert_int_equal(ttl_ms, 7200000);
    assert_string_equal(json_string_value(json_object_get(json_object_get(row, "key"), "phone")),
                        "+919812345699");
    assert_int_equal(json_integer_value(json_object_get(row, "limit")), 50);
    assert_null(json_object_get(row, "burst"));
    assert_string_equal(json_string_value(json_object_get(row, "note")), "launch");
    json_decref(row);

    row =
        override("{\"rule\":\"ip_bucket\",\"key\":{\"client_ip\":\"2001:db8::1\"},\"limit\":100,\"burst\":20,"
                 "\"expires_in\":\"1h\"}");
    if (row == NULL)
        fail_msg("refused: %s", detail);
    assert_int_equal(ov.burst, 20);
    assert_string_equal(ov.values[CFG_KEY_CLIENT_IP], "2001:db8::1");
    assert_int_equal(json_integer_value(json_object_get(row, "burst")), 20);
    json_decref(row);

    row = override("{\"rule\":\"phone_caller\",\"key\":{\"api_key\":\"shop\",\"phone\":\"+919812345699\"},"
                   "\"limit\":1000,\"expires_in\":\"1h\"}");
    if (row == NULL)
        fail_msg("refused: %s", detail);
    assert_int_equal(ov.mask, (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_API_KEY));
    assert_string_equal(ov.values[CFG_KEY_API_KEY], "shop");
    json_decref(row);
}

static void test_override_refused(void **state)
{
    (void)state;
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,"
                     "\"expires_in\":\"1h\",\"match\":{}}",
                     "unknown field \"match\"");
    override_refused("{\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,\"expires_in\":\"1h\"}",
                     "rule is required");
    override_refused("{\"rule\":7,\"key\":{},\"limit\":5,\"expires_in\":\"1h\"}", "rule must be a string");
    override_refused("{\"rule\":\"nope\",\"key\":{},\"limit\":5,\"expires_in\":\"1h\"}",
                     "no rule named \"nope\"");
    override_refused(
        "{\"rule\":\"resend\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,\"expires_in\":\"1h\"}",
        "rule resend is a resend_delay: it has no limit to override");
    /* The key: every part of the rule's, and no other. */
    override_refused("{\"rule\":\"phone_hour\",\"key\":\"+919812345699\",\"limit\":5,\"expires_in\":\"1h\"}",
                     "key must be an object naming every part of rule phone_hour's key");
    override_refused("{\"rule\":\"phone_caller\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,"
                     "\"expires_in\":\"1h\"}",
                     "key must name every part of rule phone_caller's key: api_key is missing");
    override_refused(
        "{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\",\"device\":\"d\"},\"limit\":5,"
        "\"expires_in\":\"1h\"}",
        "key.device is not a part of rule phone_hour's key");
    override_refused(
        "{\"rule\":\"phone_hour\",\"key\":{\"phone\":919812345699},\"limit\":5,\"expires_in\":\"1h\"}",
        "each key part must be a string");
    override_refused("{\"rule\":\"ip_bucket\",\"key\":{\"client_ip\":\"10.0.0.0/8\"},\"limit\":5,"
                     "\"expires_in\":\"1h\"}",
                     "key.client_ip must be one IPv4 or IPv6 address");
    override_refused(
        "{\"rule\":\"prefix_day\",\"key\":{\"phone_prefix\":\"+91\"},\"limit\":5,\"expires_in\":\"1h\"}",
        "key.phone_prefix must be \"+\" and 3 digits (rule prefix_day)");
    override_refused(
        "{\"rule\":\"phone_in_prefix\",\"key\":{\"phone\":\"+919812345699\",\"phone_prefix\":\"+44\"},"
        "\"limit\":5,\"expires_in\":\"1h\"}",
        "key.phone does not start with key.phone_prefix");
    /* The limit and the burst. */
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"expires_in\":\"1h\"}",
                     "limit must be an integer from 1 to 1000000000 for rule phone_hour (fixed_window)");
    override_refused(
        "{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":0,\"expires_in\":\"1h\"}",
        "limit must be an integer from 1");
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":\"5\","
                     "\"expires_in\":\"1h\"}",
                     "limit must be an integer from 1");
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":2.5,"
                     "\"expires_in\":\"1h\"}",
                     "limit must be an integer from 1");
    override_refused("{\"rule\":\"phone_caller\",\"key\":{\"api_key\":\"shop\",\"phone\":\"+919812345699\"},"
                     "\"limit\":1001,\"expires_in\":\"1h\"}",
                     "limit must be at most 1000 for sliding_log");
    override_refused("{\"rule\":\"ip_bucket\",\"key\":{\"client_ip\":\"10.0.0.1\"},\"limit\":60001,"
                     "\"expires_in\":\"1h\"}",
                     "limit must be at most the window in ms for token_bucket");
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,\"burst\":2,"
                     "\"expires_in\":\"1h\"}",
                     "burst is for token_bucket rules; phone_hour is not one");
    override_refused("{\"rule\":\"ip_bucket\",\"key\":{\"client_ip\":\"10.0.0.1\"},\"limit\":5,\"burst\":0,"
                     "\"expires_in\":\"1h\"}",
                     "burst must be an integer from 1 to 1000000000");
    /* Then the fields every row has. */
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,"
                     "\"expires_in\":\"31d\"}",
                     "at most 30 days");
    override_refused("{\"rule\":\"phone_hour\",\"key\":{\"phone\":\"+919812345699\"},\"limit\":5,"
                     "\"expires_in\":\"1h\",\"note\":\"\\u009b\"}",
                     "note must be 1 to 255 bytes without control characters");
}

/* ---- Unlock ---- */

static struct admin_unlock_req u;

static json_t *unlock(const char *body)
{
    detail[0] = '\0';
    return admin_unlock_body(body, strlen(body), &u, detail, sizeof(detail));
}

static void test_unlock_body(void **state)
{
    json_t *j;

    (void)state;
    assert_non_null(j = unlock("{\"phone\":\"+9109812345699\",\"api_key\":\"shop\",\"note\":\"ticket 7\"}"));
    assert_string_equal(u.phone, "+919812345699");
    assert_string_equal(u.api_key, "shop");
    assert_string_equal(u.note, "ticket 7");
    assert_string_equal(json_string_value(json_object_get(j, "phone")), "+919812345699");
    json_decref(j);
    assert_non_null(j = unlock("{\"phone\":\"+919812345699\"}"));
    assert_string_equal(u.api_key, "");
    assert_null(u.note);
    json_decref(j);

    refused(unlock("{}"), "{}", "phone is required");
    refused(unlock("{\"phone\":919812345699}"), "number", "phone must be a string");
    refused(unlock("{\"phone\":\"12\"}"), "12", "");
    refused(unlock("{\"phone\":\"+919812345699\",\"lock\":\"x\"}"), "lock", "unknown field \"lock\"");
    refused(unlock("{\"phone\":\"+919812345699\",\"api_key\":5}"), "api_key 5", "api_key must be a string");
    refused(unlock("{\"phone\":\"+919812345699\",\"api_key\":\"s\\u0007p\"}"), "api_key BEL",
            "api_key must be a key's name");
    refused(unlock("{\"phone\":\"+919812345699\",\"note\":\"\\u0085\"}"), "note NEL",
            "note must be 1 to 255 bytes without control characters");
}

static void test_match_names(void **state)
{
    int m;

    (void)state;
    for (m = 0; m < ADMIN_M_COUNT; m++)
        assert_int_equal(admin_match_find(admin_match_name((enum admin_match)m)), m);
    assert_int_equal(admin_match_find("country"), -1);
    assert_string_equal(admin_match_name(ADMIN_M_COUNT), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_net_ipv4),
        cmocka_unit_test(test_net_ipv6),
        cmocka_unit_test(test_net_mapped),
        cmocka_unit_test(test_net_refused),
        cmocka_unit_test(test_net_match),
        cmocka_unit_test(test_block_values),
        cmocka_unit_test(test_block_shape),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_override_taken),
        cmocka_unit_test(test_override_refused),
        cmocka_unit_test(test_unlock_body),
        cmocka_unit_test(test_match_names),
    };

    return cmocka_run_group_tests(tests, setup_rules, NULL);
}
