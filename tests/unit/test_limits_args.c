/*
 * Unit tests of the pure argument builders of limits (limits_args.c):
 * issue.lua's and verify.lua's KEYS and ARGV for a request under a rules
 * snapshot. The layout is the one limits_int.h names (each value at its
 * enum's index, every index up to the last set), rules whose key the
 * request lacks are skipped, a composite key's state is the first kind's
 * hash and a field with the others' values, a shadow rule or a penalty is
 * its mode, an override's limit and burst replace the rule's, the caps
 * give their fields and the cap windows text, and an Idempotency-Key adds
 * its two KEYS and its group (or its group says none). Also the cap
 * windows text itself (limits_caps_text, a UNITTEST function), and a
 * request's own rules and its message's style.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/limits/limits_int.h"

/* limits_money.c's UNITTEST function. */
void limits_caps_text(const struct cfg_cap *caps, size_t n_caps, const char *api_key, char *out, size_t cap);

#define PHONE "+919812345678"

/* ARGV[i] (1-based) and KEYS[k] (1-based) of a call. */
static const char *argv_at(const struct limits_args *a, int i)
{
    assert_true(i >= 1 && a->nkeys + i - 1 < a->n);
    return a->v[a->nkeys + i - 1];
}

static const char *keys_at(const struct limits_args *a, int k)
{
    assert_true(k >= 1 && k <= a->nkeys);
    return a->v[k - 1];
}

/* Every slot up to the last one set holds a string: no index of the
 * layout was skipped (the call is calloc'd, so a gap is NULL). */
static void assert_no_gap(const struct limits_args *a)
{
    int i;

    for (i = 0; i < a->n; i++)
        if (a->v[i] == NULL)
            fail_msg("slot %d of %d (ARGV[%d]) was never set", i, a->n, i - a->nkeys + 1);
}

static struct cfg_rule rule(const char *name, const char *field, enum cfg_key key, enum cfg_algo algo, int64_t limit,
                            int64_t window_ms)
{
    struct cfg_rule r;

    memset(&r, 0, sizeof(r));
    snprintf(r.name, sizeof(r.name), "%s", name);
    snprintf(r.field, sizeof(r.field), "%s", field);
    r.key = key;
    r.key_mask = 1u << key;
    r.algo = algo;
    r.limit = r.burst = limit;
    r.window_ms = window_ms;
    return r;
}

/* The snapshot of rules[0..n-1], prices +91 at 20 and every other at 50,
 * and caps[0..n_caps-1]. */
static struct limits_rules *snapshot(struct cfg_rule *rules, size_t n, struct cfg_cap *caps, size_t n_caps)
{
    static struct cfg_price prices[] = {{"+91", 20}, {"*", 50}};
    struct limits_conf c;
    struct limits_rules *rs;

    memset(&c, 0, sizeof(c));
    c.rules = rules;
    c.n_rules = n;
    c.prices = prices;
    c.n_prices = 2;
    c.caps = caps;
    c.n_caps = n_caps;
    rs = limits_rules_new(&c);
    assert_non_null(rs);
    return rs;
}

static struct limits_request request(void)
{
    struct limits_request rq;

    memset(&rq, 0, sizeof(rq));
    rq.phone = PHONE;
    rq.api_key = "login-web";
    rq.purpose = "login";
    rq.scope = "scopescope12";
    rq.rid = "r0123456789abcdef0123456789abcde";
    rq.vid = "v0123456789abcdef0123456789abcde";
    rq.vhash = "hhhhhhhhhhhhhhhh";
    rq.mid = "m0123456789abcdef0123456789abcde";
    rq.ttl_ms = 300000;
    rq.max_attempts = 3;
    return rq;
}

/* Builds the issue call of rq under rs on a queue of 100 (shares of 10). */
static struct limits_call *issue_call(const struct limits_rules *rs, const struct limits_request *rq,
                                      struct limits_issue *out)
{
    struct limits_fleet q = {100, 10};
    struct limits_call *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    memset(out, 0, sizeof(*out));
    limits_issue_args(rs, rq, &q, out, c);
    assert_no_gap(&c->args);
    return c;
}

static struct limits_call *verify_call(const struct limits_rules *rs, const struct limits_request *rq,
                                       struct limits_undo *u)
{
    struct limits_call *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    memset(u, 0, sizeof(*u));
    limits_verify_args(rs, rq, "gggggggggggggggg", 3, u, c);
    assert_no_gap(&c->args);
    return c;
}

/* One rule's group from ARGV[base]. */
static void assert_rule(const struct limits_args *a, int base, const char *kind, const char *key, const char *field,
                        const char *limit, const char *window, const char *burst, const char *mode)
{
    assert_string_equal(argv_at(a, base + RA_KIND), kind);
    assert_string_equal(argv_at(a, base + RA_KEY), key);
    assert_string_equal(argv_at(a, base + RA_FIELD), field);
    assert_string_equal(argv_at(a, base + RA_LIMIT), limit);
    assert_string_equal(argv_at(a, base + RA_WINDOW), window);
    assert_string_equal(argv_at(a, base + RA_BURST), burst);
    assert_string_equal(argv_at(a, base + RA_MODE), mode);
}

/* issue.lua's whole layout: KEYS, the fixed values, each group. */
static void test_issue_layout(void **state)
{
    struct cfg_rule rules[] = {
        rule("phone_10m", "Ph", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 3, 600000),
        rule("key_day", "Kd", CFG_KEY_API_KEY, CFG_ALGO_FIXED_WINDOW, 1000, 86400000),
        rule("phone_verify", "Pv", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 5, 60000),
    };
    struct cfg_cap caps[] = {{3600000, 5000, 0}};
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;
    const struct limits_args *a;
    int msg, pump;

    (void)state;
    rules[2].on = CFG_ON_VERIFY; /* not an issue's */
    rs = snapshot(rules, 3, caps, 1);
    rs->pumping.on = 1;
    rs->pumping.prefix_digits = 5;
    rs->pumping.window_ms = 3600000;
    rs->pumping.min_sent = 20;
    rs->pumping.min_ratio_ppm = 100000;
    rs->pumping.hold_ms = 900000;
    c = issue_call(rs, &rq, &out);
    a = &c->args;

    /* KEYS: the phone's hash (its rule's too), the caller's, the cost, the
     * pumping guard's, the shares, then the last IK_TAIL. */
    assert_int_equal(a->nkeys, 9);
    assert_int_equal(out.undo.nkeys, 9);
    assert_string_equal(keys_at(a, IK_PHONE), "otp:{" PHONE "}");
    assert_string_equal(keys_at(a, 2), "otp:k:{login-web}");
    assert_string_equal(keys_at(a, 3), "otp:cost");
    assert_string_equal(keys_at(a, 4), "otp:pump:{+91981}");
    assert_string_equal(keys_at(a, 5), STORE_SHARE_KEY);
    assert_string_equal(keys_at(a, a->nkeys - IK_QUEUE), STORE_QUEUE_KEY);
    assert_string_equal(keys_at(a, a->nkeys - IK_HOLDS), STORE_HOLDS_KEY);
    assert_string_equal(keys_at(a, a->nkeys - IK_MSG), "otp:msg:" "m0123456789abcdef0123456789abcde");
    assert_string_equal(keys_at(a, a->nkeys - IK_UNDO), "otp:u:" "r0123456789abcdef0123456789abcde");
    assert_int_equal(out.undo.verify, 0);
    assert_int_equal(out.undo.idem_at, 0);
    assert_string_equal(out.undo.hold, "m0123456789abcdef0123456789abcde:r0123456789abcdef0123456789abcde");

    assert_string_equal(argv_at(a, IA_OP), "i");
    assert_string_equal(argv_at(a, IA_VID), rq.vid);
    assert_string_equal(argv_at(a, IA_VHASH), rq.vhash);
    assert_string_equal(argv_at(a, IA_TTL), "300000");
    assert_string_equal(argv_at(a, IA_MAX_ATTEMPTS), "3");
    assert_string_equal(argv_at(a, IA_PRICE), "20");
    assert_int_equal(out.price_minor, 20);
    assert_string_equal(argv_at(a, IA_NRULES), "2");
    assert_string_equal(argv_at(a, IA_NCAPS), "1");
    assert_string_equal(argv_at(a, IA_COST_KEY), "3");
    assert_string_equal(argv_at(a, IA_UNDO_TTL), "30000");
    assert_string_equal(argv_at(a, IA_SCOPE), rq.scope);
    assert_string_equal(argv_at(a, IA_AT), "0");
    assert_rule(a, IA_RULES, "1", "1", "Ph", "3", "600000", "3", "0");
    assert_rule(a, IA_RULES + RA_N, "2", "2", "Kd", "1000", "86400000", "1000", "0");
    assert_int_equal(c->n_used, 2);
    assert_int_equal(c->key_of[1], 2);

    assert_string_equal(argv_at(a, IA_RULES + 2 * RA_N + CA_FIELD), "c3600000");
    assert_string_equal(argv_at(a, IA_RULES + 2 * RA_N + CA_WINDOW), "3600000");
    assert_string_equal(argv_at(a, IA_RULES + 2 * RA_N + CA_MAX), "5000");
    msg = IA_RULES + 2 * RA_N + CA_N;
    assert_string_equal(argv_at(a, msg + MA_CAPACITY), "100");
    assert_string_equal(argv_at(a, msg + MA_HOLD_MS), "10000");
    assert_string_equal(argv_at(a, msg + MA_MID), rq.mid);
    assert_string_equal(argv_at(a, msg + MA_API_KEY), "login-web");
    assert_string_equal(argv_at(a, msg + MA_CAPS_TEXT), "3600000");
    assert_string_equal(out.cost_caps, "3600000");
    assert_string_equal(argv_at(a, msg + MA_PHONE), PHONE);
    assert_string_equal(argv_at(a, msg + MA_SHARE), "10");
    assert_string_equal(argv_at(a, msg + MA_SHARE_KEY), "5");
    /* No Idempotency-Key: its group says none. */
    assert_string_equal(argv_at(a, msg + MA_N + XA_KEY), "0");
    assert_string_equal(argv_at(a, msg + MA_N + XA_HASH), "");
    assert_string_equal(argv_at(a, msg + MA_N + XA_CLAIM_MS), "0");
    assert_string_equal(argv_at(a, msg + MA_N + XA_MAX_KEYS), "0");
    /* The pumping guard's group is the last of the list. */
    pump = a->n - a->nkeys - PA_N + 1;
    assert_int_equal(pump, msg + MA_N + XA_N);
    assert_string_equal(argv_at(a, pump + PA_WORD), "pump");
    assert_string_equal(argv_at(a, pump + PA_KEY), "4");
    assert_string_equal(argv_at(a, pump + PA_WINDOW), "3600000");
    assert_string_equal(argv_at(a, pump + PA_MIN_SENT), "20");
    assert_string_equal(argv_at(a, pump + PA_RATIO), "100000");
    assert_string_equal(argv_at(a, pump + PA_HOLD), "900000");
    assert_string_equal(argv_at(a, pump + PA_SHADOW), "0");
    assert_string_equal(out.pump_prefix, "+91981");
    free(c);
    limits_rules_free(rs);
}

/* No caps, no guard, no shares: no price, no cost key, the guard's key 0. */
static void test_issue_without_money(void **state)
{
    struct cfg_rule rules[] = {rule("phone_10m", "Ph", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 3, 600000)};
    struct limits_rules *rs = snapshot(rules, 1, NULL, 0);
    struct limits_request rq = request();
    struct limits_fleet q = {100, 0};
    struct limits_call *c = calloc(1, sizeof(*c));
    struct limits_issue out;
    const struct limits_args *a = &c->args;
    int msg = IA_RULES + RA_N;

    (void)state;
    memset(&out, 0, sizeof(out));
    limits_issue_args(rs, &rq, &q, &out, c);
    assert_no_gap(a);
    assert_int_equal(a->nkeys, 1 + IK_TAIL);
    assert_string_equal(argv_at(a, IA_PRICE), "-1");
    assert_string_equal(argv_at(a, IA_NCAPS), "0");
    assert_string_equal(argv_at(a, IA_COST_KEY), "0");
    assert_string_equal(argv_at(a, msg + MA_CAPS_TEXT), "");
    assert_string_equal(argv_at(a, msg + MA_SHARE_KEY), "0");
    assert_string_equal(argv_at(a, msg + MA_N + XA_N + PA_KEY), "0");
    assert_int_equal(a->n - a->nkeys, msg + MA_N + XA_N + PA_N - 1);
    assert_string_equal(out.pump_prefix, "");
    free(c);
    limits_rules_free(rs);
}

/* A rule whose key the request lacks is not run: no device_id, no region,
 * a number shorter than the prefix. The others keep their order. */
static void test_absent_keys_skipped(void **state)
{
    struct cfg_rule rules[] = {
        rule("device_h", "Dh", CFG_KEY_DEVICE, CFG_ALGO_SLIDING_LOG, 5, 3600000),
        rule("region_h", "Rh", CFG_KEY_REGION, CFG_ALGO_FIXED_WINDOW, 50, 3600000),
        rule("prefix_h", "Ah", CFG_KEY_PHONE_PREFIX, CFG_ALGO_FIXED_WINDOW, 50, 3600000),
        rule("phone_h", "Ph", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 5, 3600000),
    };
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;

    (void)state;
    rules[2].prefix_digits = 13; /* the number has 12 digits */
    rs = snapshot(rules, 4, NULL, 0);
    c = issue_call(rs, &rq, &out);
    assert_int_equal(c->n_used, 1);
    assert_string_equal(argv_at(&c->args, IA_NRULES), "1");
    assert_rule(&c->args, IA_RULES, "1", "1", "Ph", "5", "3600000", "5", "0");
    free(c);

    /* With the values, every rule runs, each on its own key. */
    rq.device_id = "dev-1";
    snprintf(rq.region, sizeof(rq.region), "IN");
    rs->rules[2].prefix_digits = 5;
    c = issue_call(rs, &rq, &out);
    assert_int_equal(c->n_used, 4);
    assert_string_equal(keys_at(&c->args, 2), "otp:d:{dev-1}");
    assert_string_equal(keys_at(&c->args, 3), "otp:r:{IN}");
    assert_string_equal(keys_at(&c->args, 4), "otp:pp:{91981}");
    assert_rule(&c->args, IA_RULES + 3 * RA_N, "1", "1", "Ph", "5", "3600000", "5", "0");
    free(c);
    limits_rules_free(rs);
}

/* A composite key: the first kind's hash, the field with the others'
 * values after 0x1f; two rules on one key share its KEYS index. */
static void test_composite_key(void **state)
{
    struct cfg_rule rules[] = {
        rule("phone_caller", "Pc", CFG_KEY_PHONE, CFG_ALGO_FIXED_WINDOW, 2, 3600000),
        rule("caller_purpose", "Cp", CFG_KEY_API_KEY, CFG_ALGO_FIXED_WINDOW, 9, 3600000),
        rule("caller_day", "Cd", CFG_KEY_API_KEY, CFG_ALGO_FIXED_WINDOW, 99, 86400000),
    };
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;

    (void)state;
    rules[0].key_mask |= 1u << CFG_KEY_API_KEY;
    rules[1].key_mask |= 1u << CFG_KEY_PURPOSE;
    rs = snapshot(rules, 3, NULL, 0);
    c = issue_call(rs, &rq, &out);
    assert_int_equal(c->args.nkeys, 3 + IK_TAIL); /* the phone's, the caller's, the shares */
    assert_rule(&c->args, IA_RULES, "2", "1", "Pc\x1flogin-web", "2", "3600000", "2", "0");
    assert_rule(&c->args, IA_RULES + RA_N, "2", "2", "Cp\x1flogin", "9", "3600000", "9", "0");
    assert_rule(&c->args, IA_RULES + 2 * RA_N, "2", "2", "Cd", "99", "86400000", "99", "0");
    free(c);
    limits_rules_free(rs);
}

/* A shadow rule's mode is "1"; a penalty's "<shadow>:<after>:<within>:<block>". */
static void test_modes(void **state)
{
    struct cfg_rule rules[] = {
        rule("shadow_h", "Sh", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 5, 3600000),
        rule("pen_h", "Pn", CFG_KEY_PHONE, CFG_ALGO_TOKEN_BUCKET, 10, 60000),
    };
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;

    (void)state;
    rules[0].shadow = 1;
    rules[1].burst = 4;
    rules[1].penalty_after = 3;
    rules[1].penalty_within_ms = 60000;
    rules[1].penalty_block_ms = 600000;
    rs = snapshot(rules, 2, NULL, 0);
    c = issue_call(rs, &rq, &out);
    assert_rule(&c->args, IA_RULES, "1", "1", "Sh", "5", "3600000", "5", "1");
    assert_rule(&c->args, IA_RULES + RA_N, "3", "1", "Pn", "10", "60000", "4", "0:3:60000:600000");
    free(c);
    rs->rules[1].shadow = 1;
    c = issue_call(rs, &rq, &out);
    assert_string_equal(argv_at(&c->args, IA_RULES + RA_N + RA_MODE), "1:3:60000:600000");
    free(c);
    limits_rules_free(rs);
}

/* An override of one rule for one phone: its limit and (scaled) burst
 * replace the rule's for that phone's state only. */
static void test_override(void **state)
{
    struct cfg_rule rules[] = {rule("bucket", "Bk", CFG_KEY_PHONE, CFG_ALGO_TOKEN_BUCKET, 10, 60000)};
    struct limits_override ov;
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;

    (void)state;
    rules[0].burst = 4;
    rs = snapshot(rules, 1, NULL, 0);
    memset(&ov, 0, sizeof(ov));
    snprintf(ov.rule, sizeof(ov.rule), "bucket");
    snprintf(ov.values[CFG_KEY_PHONE], sizeof(ov.values[0]), "%s", PHONE);
    ov.limit = 50;
    assert_int_equal(limits_rules_index(rs, &ov, 1), 0);
    c = issue_call(rs, &rq, &out);
    assert_rule(&c->args, IA_RULES, "3", "1", "Bk", "50", "60000", "20", "0"); /* 5x the limit, 5x the burst */
    assert_ptr_equal(c->used[0], &c->eff[0]);
    free(c);

    rq.phone = "+919800000000"; /* another phone: the rule as it is */
    c = issue_call(rs, &rq, &out);
    assert_rule(&c->args, IA_RULES, "3", "1", "Bk", "10", "60000", "4", "0");
    assert_ptr_equal(c->used[0], &rs->rules[0]);
    free(c);
    limits_rules_free(rs);
}

/* Caps: a global one and a caller's; their fields, and the cap windows
 * text the reservation carries. Caps of one window and kind are one. */
static void test_caps(void **state)
{
    struct cfg_cap caps[] = {{3600000, 5000, 0}, {86400000, 900, 1}, {3600000, 4000, 0}};
    struct limits_rules *rs = snapshot(NULL, 0, caps, 3);
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;
    const struct limits_args *a;
    int cap = IA_RULES, msg = IA_RULES + 2 * CA_N;

    (void)state;
    rq.phone = "+15551234567"; /* the "*" price */
    c = issue_call(rs, &rq, &out);
    a = &c->args;
    assert_string_equal(argv_at(a, IA_PRICE), "50");
    assert_string_equal(argv_at(a, IA_NCAPS), "2");
    assert_string_equal(argv_at(a, cap + CA_FIELD), "c3600000");
    assert_string_equal(argv_at(a, cap + CA_MAX), "4000"); /* the tighter of the two hours */
    assert_string_equal(argv_at(a, cap + CA_N + CA_FIELD), "k86400000:login-web");
    assert_string_equal(argv_at(a, cap + CA_N + CA_WINDOW), "86400000");
    assert_string_equal(argv_at(a, cap + CA_N + CA_MAX), "900");
    /* "login-web" as two letters a-p per byte, the day's digits as letters. */
    assert_string_equal(argv_at(a, msg + MA_CAPS_TEXT), "3600000;gmgpghgjgocnhhgfgc:igeaaaaa");
    assert_string_equal(out.cost_caps, "3600000;gmgpghgjgocnhhgfgc:igeaaaaa");
    free(c);
    limits_rules_free(rs);
}

/* The cap windows text alone: globals as digits, then a caller's part
 * without one. */
static void test_caps_text(void **state)
{
    struct cfg_cap caps[] = {{3600000, 1, 0}, {86400000, 1, 0}, {86400000, 1, 1}};
    char out[LIMITS_CAPS_TEXT];

    (void)state;
    limits_caps_text(caps, 2, "abc", out, sizeof(out));
    assert_string_equal(out, "3600000,86400000");
    limits_caps_text(caps + 2, 1, "abc", out, sizeof(out));
    assert_string_equal(out, ";gbgcgd:igeaaaaa");
    limits_caps_text(caps, 3, "abc", out, sizeof(out));
    assert_string_equal(out, "3600000,86400000;gbgcgd:igeaaaaa");
    limits_caps_text(caps, 0, "abc", out, sizeof(out));
    assert_string_equal(out, "");
}

/* An Idempotency-Key: its hash and count join KEYS before the last ones,
 * and its group names them. */
static void test_issue_idem(void **state)
{
    struct cfg_rule rules[] = {rule("phone_10m", "Ph", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 3, 600000)};
    struct limits_idem idem = {"otpd:idem:tag", "otpd:idemc:6c6f67696e", "kkkkkkkkkkkkkkkk", 10000, 5};
    struct limits_rules *rs = snapshot(rules, 1, NULL, 0);
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_call *c;
    const struct limits_args *a;
    int idem_at = IA_RULES + RA_N + MA_N;

    (void)state;
    rq.idem = &idem;
    c = issue_call(rs, &rq, &out);
    a = &c->args;
    assert_string_equal(keys_at(a, 2), STORE_SHARE_KEY);
    assert_int_equal(out.undo.idem_at, 3);
    assert_string_equal(keys_at(a, 3), "otpd:idem:tag");
    assert_string_equal(keys_at(a, 4), "otpd:idemc:6c6f67696e");
    assert_int_equal(a->nkeys, 4 + IK_TAIL);
    assert_string_equal(argv_at(a, idem_at + XA_KEY), "3");
    assert_string_equal(argv_at(a, idem_at + XA_HASH), "kkkkkkkkkkkkkkkk");
    assert_string_equal(argv_at(a, idem_at + XA_CLAIM_MS), "10000");
    assert_string_equal(argv_at(a, idem_at + XA_MAX_KEYS), "5");
    assert_string_equal(argv_at(a, idem_at + XA_N + PA_WORD), "pump");
    free(c);
    limits_rules_free(rs);
}

/* verify.lua's layout: the wrong-guess rule's fixed values, the verify
 * rules (none only on issue), an Idempotency-Key, and the guard's first
 * PA_VERIFY_N last. */
static void test_verify_layout(void **state)
{
    struct cfg_rule rules[] = {
        rule("issue_only", "Io", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 3, 600000),
        rule("verify_rate", "Vr", CFG_KEY_API_KEY, CFG_ALGO_FIXED_WINDOW, 100, 60000),
        rule("wrong", "Wg", CFG_KEY_PHONE, CFG_ALGO_WRONG_GUESS_CAP, 10, 3600000),
        rule("device_v", "Dv", CFG_KEY_DEVICE, CFG_ALGO_SLIDING_LOG, 3, 600000),
    };
    struct limits_idem idem = {"otpd:idem:tag", "otpd:idemc:6c6f67696e", "kkkkkkkkkkkkkkkk", 10000, 5};
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_undo u;
    struct limits_call *c;
    const struct limits_args *a;
    int idem_at = VA_RULES + RA_N, pump;

    (void)state;
    rules[1].on = CFG_ON_VERIFY;
    rules[2].key_mask |= 1u << CFG_KEY_API_KEY;
    rules[3].on = CFG_ON_BOTH; /* its key is absent: skipped */
    rs = snapshot(rules, 4, NULL, 0);
    rs->pumping.on = 1;
    rs->pumping.prefix_digits = 5;
    rs->pumping.window_ms = 3600000;
    rq.idem = &idem;
    c = verify_call(rs, &rq, &u);
    a = &c->args;
    assert_int_equal(u.verify, 1);
    assert_string_equal(u.hold, "");
    assert_int_equal(a->nkeys, 6);
    assert_string_equal(keys_at(a, VK_PHONE), "otp:{" PHONE "}");
    assert_string_equal(keys_at(a, 2), "otp:k:{login-web}");
    assert_string_equal(keys_at(a, 3), "otp:pump:{+91981}");
    assert_int_equal(u.idem_at, 4);
    assert_string_equal(keys_at(a, 4), "otpd:idem:tag");
    assert_string_equal(keys_at(a, a->nkeys), "otp:u:" "r0123456789abcdef0123456789abcde");

    assert_string_equal(argv_at(a, VA_OP), "v");
    assert_string_equal(argv_at(a, VA_GUESS), "gggggggggggggggg");
    assert_string_equal(argv_at(a, VA_MAX_ATTEMPTS), "3");
    assert_string_equal(argv_at(a, VA_WRONG_FIELD), "Wg\x1flogin-web");
    assert_string_equal(argv_at(a, VA_WRONG_LIMIT), "10");
    assert_string_equal(argv_at(a, VA_WRONG_WINDOW), "3600000");
    assert_string_equal(argv_at(a, VA_WRONG_SHADOW), "0");
    assert_string_equal(argv_at(a, VA_UNDO_TTL), "30000");
    assert_string_equal(argv_at(a, VA_SCOPE), rq.scope);
    assert_string_equal(argv_at(a, VA_NRULES), "1");
    assert_string_equal(argv_at(a, VA_AT), "0");
    assert_rule(a, VA_RULES, "2", "2", "Vr", "100", "60000", "100", "0");
    assert_string_equal(argv_at(a, idem_at + XA_KEY), "4");
    assert_string_equal(argv_at(a, idem_at + XA_HASH), "kkkkkkkkkkkkkkkk");
    pump = a->n - a->nkeys - PA_VERIFY_N + 1;
    assert_int_equal(pump, idem_at + XA_N);
    assert_string_equal(argv_at(a, pump + PA_WORD), "pump");
    assert_string_equal(argv_at(a, pump + PA_KEY), "3");
    assert_string_equal(argv_at(a, pump + PA_WINDOW), "3600000");
    assert_string_equal(c->wkey, "otp:{" PHONE "}");
    free(c);
    limits_rules_free(rs);
}

/* Without a wrong-guess rule (or its key's values): its field "", limit 0,
 * window 1; a shadow cap says so. */
static void test_verify_without_wrong(void **state)
{
    struct cfg_rule rules[] = {rule("wrong", "Wg", CFG_KEY_PHONE, CFG_ALGO_WRONG_GUESS_CAP, 10, 3600000)};
    struct limits_rules *rs = snapshot(rules, 1, NULL, 0);
    struct limits_request rq = request();
    struct limits_undo u;
    struct limits_call *c;

    (void)state;
    rs->rules[0].key_mask |= 1u << CFG_KEY_DEVICE;
    c = verify_call(rs, &rq, &u);
    assert_null(c->wrong);
    assert_string_equal(argv_at(&c->args, VA_WRONG_FIELD), "");
    assert_string_equal(argv_at(&c->args, VA_WRONG_LIMIT), "0");
    assert_string_equal(argv_at(&c->args, VA_WRONG_WINDOW), "1");
    assert_string_equal(argv_at(&c->args, VA_NRULES), "0");
    assert_string_equal(argv_at(&c->args, VA_RULES + XA_KEY), "0");
    assert_int_equal(c->args.nkeys, 2);
    free(c);

    rs->rules[0].key_mask = 1u << CFG_KEY_PHONE;
    rs->rules[0].shadow = 1;
    c = verify_call(rs, &rq, &u);
    assert_string_equal(argv_at(&c->args, VA_WRONG_FIELD), "Wg");
    assert_string_equal(argv_at(&c->args, VA_WRONG_SHADOW), "1");
    free(c);
    limits_rules_free(rs);
}

/* A request's own rules (the Twilio surface's buckets) run after the
 * config's, each at its own key and field, on issue only; two on one key
 * share it; one that finds no room makes the call overflow (it must not
 * run); the message's style rides in its group. */
static void test_extras(void **state)
{
    struct cfg_rule rules[] = {rule("phone_h", "Ph", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 5, 3600000)};
    struct limits_extra x[LIMITS_EXTRA_MAX + 1];
    struct limits_rules *rs;
    struct limits_request rq = request();
    struct limits_issue out;
    struct limits_undo u;
    struct limits_call *c;
    size_t i;

    (void)state;
    memset(x, 0, sizeof(x));
    for (i = 0; i < LIMITS_EXTRA_MAX + 1; i++) {
        x[i].rule = rule("v2_rate_limit", "", CFG_KEY_PHONE, CFG_ALGO_SLIDING_LOG, 2, 60000);
        snprintf(x[i].key, sizeof(x[i].key), "otp:v2:rv:k%zu", i / 2);
        snprintf(x[i].field, sizeof(x[i].field), "b%zu", i);
    }
    rs = snapshot(rules, 1, NULL, 0);
    rq.extra = x;
    rq.n_extra = 3;
    rq.style = "hi\037\037";
    c = issue_call(rs, &rq, &out);
    assert_false(c->overflow);
    assert_int_equal(c->n_used, 4);
    assert_int_equal(c->n_config, 1);
    assert_string_equal(argv_at(&c->args, IA_NRULES), "4");
    assert_string_equal(keys_at(&c->args, 2), "otp:v2:rv:k0");
    assert_string_equal(keys_at(&c->args, 3), "otp:v2:rv:k1");
    assert_rule(&c->args, IA_RULES, "1", "1", "Ph", "5", "3600000", "5", "0");
    assert_rule(&c->args, IA_RULES + RA_N, "1", "2", "b0", "2", "60000", "2", "0");
    assert_rule(&c->args, IA_RULES + 2 * RA_N, "1", "2", "b1", "2", "60000", "2", "0");
    assert_rule(&c->args, IA_RULES + 3 * RA_N, "1", "3", "b2", "2", "60000", "2", "0");
    assert_string_equal(argv_at(&c->args, IA_RULES + 4 * RA_N + MA_STYLE), "hi\037\037");
    free(c);

    /* A verify runs none of them (nor the config's rule, an issue's). */
    c = verify_call(rs, &rq, &u);
    assert_int_equal(c->n_used, 0);
    free(c);

    /* More than fit: the call overflows rather than run without them. */
    rq.n_extra = LIMITS_EXTRA_MAX + 1;
    c = issue_call(rs, &rq, &out);
    assert_true(c->overflow);
    free(c);
    rq.n_extra = LIMITS_EXTRA_MAX; /* 8 keys: fits with the phone's */
    c = issue_call(rs, &rq, &out);
    assert_false(c->overflow);
    assert_int_equal(c->n_used, 1 + LIMITS_EXTRA_MAX);
    free(c);
    /* As many, each on a key of its own: more keys than one call holds. */
    for (i = 0; i < LIMITS_EXTRA_MAX; i++)
        snprintf(x[i].key, sizeof(x[i].key), "otp:v2:rv:own%zu", i);
    c = issue_call(rs, &rq, &out);
    assert_true(c->overflow);
    free(c);
    limits_rules_free(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extras),
        cmocka_unit_test(test_issue_layout),   cmocka_unit_test(test_issue_without_money),
        cmocka_unit_test(test_absent_keys_skipped), cmocka_unit_test(test_composite_key),
        cmocka_unit_test(test_modes),          cmocka_unit_test(test_override),
        cmocka_unit_test(test_caps),           cmocka_unit_test(test_caps_text),
        cmocka_unit_test(test_issue_idem),     cmocka_unit_test(test_verify_layout),
        cmocka_unit_test(test_verify_without_wrong),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
