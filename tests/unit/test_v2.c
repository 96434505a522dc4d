/*
 * Unit tests of the Twilio Verify surface's pure parts (src/v2): the form
 * reader (v2_form.c: decoding, refusals naming the field, the field kinds,
 * the field cap), v2_bool and v2_int, the outcome-to-error table
 * (v2_error.c) walked for every outcome, op and rule class against a table
 * of this test's own, the error JSON parsed back, SIDs and dates, and the
 * list envelope's page URLs (v2_json.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "../../src/v2/v2.h"
#include "../../src/v2/v2_error.h"
#include "../../src/v2/v2_form.h"

#define WHY "is not supported: it sends SMS only"

static const struct v2_field table[] = {
    {"To", V2_TAKE, NULL},
    {"Channel", V2_TAKE, NULL},
    {"FriendlyName", V2_TAKE, NULL},
    {"Psd2Enabled", V2_OFF_ONLY, NULL},
    {"TtsName", V2_REFUSE, WHY},
    {NULL, V2_TAKE, NULL},
};

/* Reads body (its strlen) with table: the return, and detail. */
static int rd(const char *body, struct v2_form *f, char *detail)
{
    detail[0] = '\0';
    return v2_form_read(body, strlen(body), table, f, detail, 200);
}

/* body is refused with detail exactly want, and nothing is left to free. */
static void refused(const char *body, const char *want)
{
    struct v2_form f;
    char detail[200];

    memset(&f, 0x5a, sizeof(f));
    if (rd(body, &f, detail) != -1)
        fail_msg("accepted: %s", body);
    assert_null(f.buf);
    assert_int_equal(f.n, 0);
    if (strcmp(detail, want) != 0)
        fail_msg("%s: detail \"%s\", want \"%s\"", body, detail, want);
}

/* body reads as one field name of value want. */
static void one(const char *body, const char *name, const char *want)
{
    struct v2_form f;
    char detail[200];

    if (rd(body, &f, detail) != 0)
        fail_msg("%s refused: %s", body, detail);
    assert_int_equal(f.n, 1);
    assert_string_equal(f.f[0].name, name);
    assert_non_null(v2_form_get(&f, name));
    assert_string_equal(v2_form_get(&f, name), want);
    v2_form_free(&f);
}

static void test_form_fields(void **state)
{
    struct v2_form f;
    char detail[200];

    (void)state;
    assert_int_equal(rd("To=%2B919812345678&Channel=sms", &f, detail), 0);
    assert_int_equal(f.n, 2);
    assert_string_equal(v2_form_get(&f, "To"), "+919812345678");
    assert_string_equal(v2_form_get(&f, "Channel"), "sms");
    assert_null(v2_form_get(&f, "FriendlyName"));
    assert_null(v2_form_get(&f, "to")); /* names are case-sensitive */
    v2_form_free(&f);
    assert_null(f.buf);
    assert_int_equal(f.n, 0);

    /* An empty body is a form of no fields. */
    assert_int_equal(rd("", &f, detail), 0);
    assert_int_equal(f.n, 0);
    v2_form_free(&f);

    /* Only len bytes are read: what follows is not the body's. */
    assert_int_equal(v2_form_read("To=abcChannel=sms", 6, table, &f, detail, sizeof(detail)), 0);
    assert_int_equal(f.n, 1);
    assert_string_equal(v2_form_get(&f, "To"), "abc");
    v2_form_free(&f);
}

static void test_form_decoding(void **state)
{
    (void)state;
    one("FriendlyName=My+App", "FriendlyName", "My App");
    one("FriendlyName=a%2Bb", "FriendlyName", "a+b");
    one("FriendlyName=%41%62%4a%4A%7e", "FriendlyName", "AbJJ~");
    one("FriendlyName=%25", "FriendlyName", "%");
    one("FriendlyName=%26%3D", "FriendlyName", "&=");
    one("FriendlyName=a=b", "FriendlyName", "a=b"); /* only the first '=' splits */
    one("FriendlyName=", "FriendlyName", "");
    one("FriendlyName=%C3%A9t%C3%A9", "FriendlyName", "\xc3\xa9t\xc3\xa9");
    one("FriendlyName=%E2%82%AC", "FriendlyName", "\xe2\x82\xac");
    one("FriendlyName=%F0%9F%98%80", "FriendlyName", "\xf0\x9f\x98\x80");
    /* U+00A0 is the first code point after C1: text. */
    one("FriendlyName=%C2%A0", "FriendlyName", "\xc2\xa0");
    /* Names decode too. */
    one("Friendly%4Eame=x", "FriendlyName", "x");
    one("%54o=y", "To", "y");
}

static void test_form_empty_pairs_skipped(void **state)
{
    struct v2_form f;
    char detail[200];

    (void)state;
    assert_int_equal(rd("&&To=a&&Channel=sms&", &f, detail), 0);
    assert_int_equal(f.n, 2);
    assert_string_equal(v2_form_get(&f, "To"), "a");
    assert_string_equal(v2_form_get(&f, "Channel"), "sms");
    v2_form_free(&f);
    assert_int_equal(rd("&", &f, detail), 0);
    assert_int_equal(f.n, 0);
    v2_form_free(&f);
    assert_int_equal(rd("&&&", &f, detail), 0);
    assert_int_equal(f.n, 0);
    v2_form_free(&f);
}

static void test_form_duplicates_and_unknown(void **state)
{
    (void)state;
    refused("To=a&To=b", "To is given twice");
    refused("To=a&Channel=sms&To=a", "To is given twice");
    refused("To=a&%54o=a", "To is given twice"); /* the same name, encoded */
    refused("Psd2Enabled=false&Psd2Enabled=false", "Psd2Enabled is given twice");
    refused("Foo=1", "Foo is not a field of this request");
    refused("To=a&Bogus=", "Bogus is not a field of this request");
    refused("to=a", "to is not a field of this request");
    refused("To+=a", "To  is not a field of this request");
    refused("To", "the body must be a form of NAME=VALUE pairs");
    refused("To=a&Channel", "the body must be a form of NAME=VALUE pairs");
    refused("=a", "a field's name is not a name Twilio defines");
    refused("%0A=a", "a field's name is not a name Twilio defines");
    refused("%ZZ=a", "a field's name is not a name Twilio defines");
    refused("ThisNameIsLongerThanAnyNameTwilioDefinesForAField=1", "a field's name is not a name Twilio defines");
}

static void test_form_bad_escapes(void **state)
{
    struct v2_form f;
    char detail[200];

    (void)state;
    refused("To=%zz", "To is not percent-encoded correctly");
    refused("To=%4g", "To is not percent-encoded correctly");
    refused("To=%g4", "To is not percent-encoded correctly");
    refused("To=%", "To is not percent-encoded correctly");
    refused("To=%4", "To is not percent-encoded correctly");
    refused("To=a%", "To is not percent-encoded correctly");
    refused("To=%4&Channel=sms", "To is not percent-encoded correctly");
    refused("To=%%41", "To is not percent-encoded correctly");
    /* A truncated "%4" at the body's end, even when the bytes past len
     * would complete it. */
    assert_int_equal(v2_form_read("To=%41", 5, table, &f, detail, sizeof(detail)), -1);
    assert_string_equal(detail, "To is not percent-encoded correctly");
    assert_null(f.buf);
    assert_int_equal(v2_form_read("To=%", 4, table, &f, detail, sizeof(detail)), -1);
    assert_int_equal(v2_form_read("To=a%4142", 6, table, &f, detail, sizeof(detail)), -1);
    assert_int_equal(v2_form_read("To=a%41", 7, table, &f, detail, sizeof(detail)), 0);
    assert_string_equal(v2_form_get(&f, "To"), "aA");
    v2_form_free(&f);
}

static void test_form_text_only(void **state)
{
    static const char *const bad[] = {
        "To=a%00b",     /* NUL */
        "To=a%01",      "To=%09",       "To=a%0Ab", "To=%0D", "To=%1F", "To=%7F", /* C0 and DEL */
        "To=%C2%80",    "To=%C2%85",    "To=a%C2%9Fb",                            /* C1 */
        "To=%FF",       "To=%FE",       "To=%80",   "To=a%C3",                   /* not UTF-8 */
        "To=%C3%28",    "To=%C0%AF",    "To=%E0%80%AF",                         /* bad, overlong */
        "To=%ED%A0%80",                                                         /* a surrogate */
        "To=%F4%90%80%80",                                                      /* past U+10FFFF */
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        refused(bad[i], "To must be UTF-8 text without control characters");
    /* The same in a name. */
    refused("T%C2%85o=a", "a field's name is not a name Twilio defines");
    refused("T%FFo=a", "a field's name is not a name Twilio defines");
    one("To=%20%7E", "To", " ~");
}

static void test_form_off_only(void **state)
{
    static const char *const bad[] = {"true", "True", "TRUE", "1", "0", "", "no", "falsey", "+false", "false+",
                                      "%20false"};
    char body[64];
    size_t i;

    (void)state;
    one("Psd2Enabled=false", "Psd2Enabled", "false");
    one("Psd2Enabled=False", "Psd2Enabled", "False");
    one("Psd2Enabled=FALSE", "Psd2Enabled", "FALSE");
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "Psd2Enabled=%s", bad[i]);
        refused(body, "Psd2Enabled is not supported by otpd: only false is accepted");
    }
}

static void test_form_refuse(void **state)
{
    (void)state;
    refused("TtsName=x", "TtsName " WHY);
    refused("TtsName=", "TtsName " WHY);
    refused("TtsName=false", "TtsName " WHY);
    refused("To=a&TtsName=x&Channel=sms", "TtsName " WHY);
    /* A bad value of a refused field says what is wrong with the value. */
    refused("TtsName=%zz", "TtsName is not percent-encoded correctly");
}

/* Exactly V2_FIELDS_MAX fields, and one more. */
static void test_form_field_cap(void **state)
{
    struct v2_field t[V2_FIELDS_MAX + 2];
    char names[V2_FIELDS_MAX + 1][8], body[1024] = "", detail[200], want[8];
    struct v2_form f;
    size_t i, len;

    (void)state;
    for (i = 0; i <= V2_FIELDS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "F%zu", i);
        t[i] = (struct v2_field){names[i], V2_TAKE, NULL};
    }
    t[V2_FIELDS_MAX + 1] = (struct v2_field){NULL, V2_TAKE, NULL};
    for (i = 0; i < V2_FIELDS_MAX; i++) {
        len = strlen(body);
        snprintf(body + len, sizeof(body) - len, "%sF%zu=v%zu", i ? "&" : "", i, i);
    }
    assert_int_equal(v2_form_read(body, strlen(body), t, &f, detail, sizeof(detail)), 0);
    assert_int_equal(f.n, V2_FIELDS_MAX);
    for (i = 0; i < V2_FIELDS_MAX; i++) {
        snprintf(want, sizeof(want), "v%zu", i);
        assert_string_equal(v2_form_get(&f, names[i]), want);
    }
    v2_form_free(&f);
    len = strlen(body);
    snprintf(body + len, sizeof(body) - len, "&F%d=v", V2_FIELDS_MAX);
    assert_int_equal(v2_form_read(body, strlen(body), t, &f, detail, sizeof(detail)), -1);
    assert_string_equal(detail, "too many fields");
    assert_null(f.buf);
}

static void test_bool(void **state)
{
    static const char *const bad[] = {"", "1", "0", "yes", "no", "t", "f", "truex", " true", "true ", "fals"};
    size_t i;
    int b;

    (void)state;
    b = 7;
    assert_int_equal(v2_bool("true", &b), 0);
    assert_int_equal(b, 1);
    b = 7;
    assert_int_equal(v2_bool("True", &b), 0);
    assert_int_equal(b, 1);
    b = 7;
    assert_int_equal(v2_bool("TRUE", &b), 0);
    assert_int_equal(b, 1);
    b = 7;
    assert_int_equal(v2_bool("false", &b), 0);
    assert_int_equal(b, 0);
    b = 7;
    assert_int_equal(v2_bool("False", &b), 0);
    assert_int_equal(b, 0);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        b = 7;
        if (v2_bool(bad[i], &b) != -1)
            fail_msg("v2_bool(\"%s\") accepted", bad[i]);
        assert_int_equal(b, 7);
    }
    assert_int_equal(v2_bool(NULL, &b), -1);
}

static void test_int(void **state)
{
    static const char *const bad[] = {"",   "3",   "11", "-1", "+5", " 5", "5 ", "0x5", "5a",
                                      "1e1", "4.0", "0",  "00", "-0"};
    long v;
    size_t i;

    (void)state;
    assert_int_equal(v2_int("4", 4, 10, &v), 0);
    assert_int_equal(v, 4);
    assert_int_equal(v2_int("10", 4, 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(v2_int("6", 4, 10, &v), 0);
    assert_int_equal(v, 6);
    assert_int_equal(v2_int("007", 4, 10, &v), 0);
    assert_int_equal(v, 7);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 99;
        if (v2_int(bad[i], 4, 10, &v) != -1)
            fail_msg("v2_int(\"%s\", 4, 10) accepted", bad[i]);
        assert_int_equal(v, 99);
    }
    assert_int_equal(v2_int(NULL, 0, 10, &v), -1);
    assert_int_equal(v2_int("0", 0, 100000, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(v2_int("100000", 0, 100000, &v), 0);
    assert_int_equal(v, 100000);
    assert_int_equal(v2_int("100001", 0, 100000, &v), -1);
    /* At most nine digits, whatever the bounds. */
    assert_int_equal(v2_int("999999999", 0, 2000000000, &v), 0);
    assert_int_equal(v, 999999999);
    assert_int_equal(v2_int("1000000000", 0, 2000000000, &v), -1);
    assert_int_equal(v2_int("99999999999999999999", 0, 2000000000, &v), -1);
}

/* ---- Errors ---- */

/* Every outcome's error: the default for any op and rule, and what a rate
 * limit becomes for a send or a check refused by a rule on the phone. */
static const struct {
    enum otp_outcome o;
    unsigned status;
    int code;
} by_outcome[] = {
    {OUT_ACCEPTED, 500, 20500},           /* no error */
    {OUT_VERIFIED, 500, 20500},           /* no error */
    {OUT_CANCELLED, 500, 20500},          /* no error */
    {OUT_INVALID_REQUEST, 400, 60200},
    {OUT_INVALID_PHONE, 400, 60200},
    {OUT_UNAUTHORIZED, 401, 20003},
    {OUT_FORBIDDEN, 403, 20403},
    {OUT_INVALID_SIGNATURE, 403, 20403},
    {OUT_NUMBER_TYPE, 400, 60205},
    {OUT_BLOCKED, 403, 60410},
    {OUT_COUNTRY_BLOCKED, 403, 60605},
    {OUT_NO_ROUTE, 403, 60605},
    {OUT_NOT_FOUND, 404, 20404},
    {OUT_NO_ACTIVE_CODE, 404, 20404},
    {OUT_METHOD_NOT_ALLOWED, 405, 20004},
    {OUT_IDEM_IN_USE, 429, 60212},
    {OUT_TOO_MANY_ROWS, 429, 20429},
    {OUT_REPORT_EXPIRED, 404, 20404},
    {OUT_PAYLOAD_TOO_LARGE, 400, 60200},
    {OUT_UNSUPPORTED_MEDIA, 400, 60200},
    {OUT_INVALID_CODE, 400, 60200},
    {OUT_IDEM_REUSED, 400, 60200},
    {OUT_RATE_LIMITED, 429, 20429},
    {OUT_LOCKED, 429, 60202},
    {OUT_SUSPECTED_PUMPING, 403, 60410},
    {OUT_INTERNAL, 500, 20500},
    {OUT_QUEUE_FULL, 503, 20503},
    {OUT_STORE_UNAVAILABLE, 503, 20503},
    {OUT_COST_CAP, 503, 20503},
    {OUT_LEDGER_UNAVAILABLE, 503, 20503},
};

static const struct {
    enum otp_outcome o;
    enum v2_op op;
    enum v2_rule rule;
    unsigned status;
    int code;
} special[] = {
    {OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_PHONE, 429, 60203},
    {OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_PHONE, 429, 60202},
};

static void test_error_every_outcome(void **state)
{
    static const enum v2_op ops[] = {V2_OP_ANY, V2_OP_SEND, V2_OP_CHECK};
    static const enum v2_rule rules[] = {V2_RULE_ANY, V2_RULE_PHONE, V2_RULE_OTHER};
    size_t i, j, k, s;
    int seen[OUT_COUNT] = {0};

    (void)state;
    assert_int_equal(sizeof(by_outcome) / sizeof(by_outcome[0]), OUT_COUNT);
    for (i = 0; i < OUT_COUNT; i++) {
        assert_true((unsigned)by_outcome[i].o < OUT_COUNT);
        assert_int_equal(seen[by_outcome[i].o]++, 0);
        for (j = 0; j < 3; j++)
            for (k = 0; k < 3; k++) {
                const struct v2_error *e = v2_error_of(by_outcome[i].o, ops[j], rules[k]);
                unsigned status = by_outcome[i].status;
                int code = by_outcome[i].code;
                for (s = 0; s < sizeof(special) / sizeof(special[0]); s++)
                    if (special[s].o == by_outcome[i].o && special[s].op == ops[j] && special[s].rule == rules[k])
                        status = special[s].status, code = special[s].code;
                assert_non_null(e);
                assert_non_null(e->message);
                assert_non_null(e->sep);
                if (e->status != status || e->code != code)
                    fail_msg("outcome %d op %d rule %d: %u %d, want %u %d", (int)by_outcome[i].o, (int)ops[j],
                             (int)rules[k], e->status, e->code, status, code);
            }
    }
    /* Past the table: no error of ours. */
    assert_int_equal(v2_error_of(OUT_COUNT, V2_OP_ANY, V2_RULE_ANY)->code, 20500);
    assert_int_equal(v2_error_of(OUT_COUNT, V2_OP_ANY, V2_RULE_ANY)->status, 500);
}

static void test_error_rate_limit_classes(void **state)
{
    (void)state;
    /* Spelled out: the rule's class and the op pick the code. */
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_PHONE)->code, 60203);
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_PHONE)->code, 60202);
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_OTHER)->code, 20429);
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_OTHER)->code, 20429);
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_ANY, V2_RULE_PHONE)->code, 20429);
    assert_int_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_ANY)->code, 20429);
    assert_int_equal(v2_error_of(OUT_LOCKED, V2_OP_CHECK, V2_RULE_OTHER)->code, 60202);
    assert_int_equal(v2_error_of(OUT_LOCKED, V2_OP_SEND, V2_RULE_PHONE)->code, 60202);
    assert_string_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_PHONE)->message,
                        "Max send attempts reached");
    assert_string_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_PHONE)->message,
                        "Max check attempts reached");
    assert_string_equal(v2_error_of(OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_OTHER)->message, "Too many requests");
    assert_string_equal(v2_error_of(OUT_NOT_FOUND, V2_OP_ANY, V2_RULE_ANY)->message,
                        "The requested resource was not found");
    assert_string_equal(v2_error_of(OUT_INVALID_REQUEST, V2_OP_ANY, V2_RULE_ANY)->message, "Invalid parameter");
}

/* e's text with detail, parsed: its four fields, nothing else. */
static void text_is(const struct v2_error *e, const char *detail, const char *message)
{
    char *text = v2_error_text(e, detail), more[64];
    json_error_t jerr;
    json_t *j;

    assert_non_null(text);
    j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, text);
    assert_true(json_is_object(j));
    assert_int_equal(json_object_size(j), 4);
    assert_true(json_is_integer(json_object_get(j, "code")));
    assert_int_equal(json_integer_value(json_object_get(j, "code")), e->code);
    assert_true(json_is_integer(json_object_get(j, "status")));
    assert_int_equal(json_integer_value(json_object_get(j, "status")), e->status);
    assert_true(json_is_string(json_object_get(j, "message")));
    assert_string_equal(json_string_value(json_object_get(j, "message")), message);
    snprintf(more, sizeof(more), "https://www.twilio.com/docs/errors/%d", e->code);
    assert_true(json_is_string(json_object_get(j, "more_info")));
    assert_string_equal(json_string_value(json_object_get(j, "more_info")), more);
    json_decref(j);
    free(text);
}

static void test_error_text(void **state)
{
    const struct v2_error *inval = v2_error_of(OUT_INVALID_REQUEST, V2_OP_ANY, V2_RULE_ANY);
    const struct v2_error *locked = v2_error_of(OUT_LOCKED, V2_OP_CHECK, V2_RULE_PHONE);
    const struct v2_error *send = v2_error_of(OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_PHONE);
    const struct v2_error *auth = v2_error_of(OUT_UNAUTHORIZED, V2_OP_ANY, V2_RULE_ANY);
    size_t i;

    (void)state;
    text_is(inval, "To is required", "Invalid parameter: To is required");
    text_is(inval, NULL, "Invalid parameter");
    text_is(inval, "", "Invalid parameter");
    text_is(inval, "a \"quoted\"\\ one\n\t\x01 \xc3\xa9", "Invalid parameter: a \"quoted\"\\ one\n\t\x01 \xc3\xa9");
    text_is(locked, "too many wrong codes", "Max check attempts reached. too many wrong codes");
    text_is(send, NULL, "Max send attempts reached");
    text_is(auth, NULL, "Authenticate");
    text_is(v2_error_of(OUT_STORE_UNAVAILABLE, V2_OP_ANY, V2_RULE_ANY), "try again",
            "Service unavailable. try again");
    /* Every row's text is JSON with its own code. */
    for (i = 0; i < OUT_COUNT; i++) {
        const struct v2_error *e = v2_error_of((enum otp_outcome)i, V2_OP_SEND, V2_RULE_PHONE);
        char want[512];
        snprintf(want, sizeof(want), "%s%sx", e->message, e->sep);
        text_is(e, "x", want);
    }
}

/* ---- SIDs, dates, pages ---- */

static void test_sid_ok(void **state)
{
    (void)state;
    assert_true(v2_sid_ok("VA0123456789abcdef0123456789abcdef", "VA"));
    assert_true(v2_sid_ok("VA0123456789ABCDEF0123456789ABCDEF", "VA"));
    assert_true(v2_sid_ok("VE00000000000000000000000000000000", "VE"));
    assert_false(v2_sid_ok("VA0123456789abcdef0123456789abcdef", "VE"));
    assert_false(v2_sid_ok("VE0123456789abcdef0123456789abcdef", "VA"));
    assert_false(v2_sid_ok("va0123456789abcdef0123456789abcdef", "VA"));
    assert_false(v2_sid_ok("VA0123456789abcdef0123456789abcde", "VA"));   /* 31 */
    assert_false(v2_sid_ok("VA0123456789abcdef0123456789abcdef0", "VA")); /* 33 */
    assert_false(v2_sid_ok("VA0123456789abcdef0123456789abcdeg", "VA"));
    assert_false(v2_sid_ok("VA0123456789abcdef 123456789abcdef", "VA"));
    assert_false(v2_sid_ok("VA-123456789abcdef0123456789abcdef", "VA"));
    assert_false(v2_sid_ok("VA", "VA"));
    assert_false(v2_sid_ok("", "VA"));
    assert_false(v2_sid_ok(NULL, "VA"));
}

static void test_sid_new(void **state)
{
    char a[V2_SID_LEN + 1], b[V2_SID_LEN + 1];

    (void)state;
    v2_sid_new("VA", a);
    v2_sid_new("VA", b);
    assert_int_equal(strlen(a), V2_SID_LEN);
    assert_true(v2_sid_ok(a, "VA"));
    assert_true(v2_sid_ok(b, "VA"));
    assert_string_not_equal(a, b);
}

static void test_date(void **state)
{
    char out[32];

    (void)state;
    v2_date(0, out, sizeof(out));
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    v2_date(1438286400, out, sizeof(out));
    assert_string_equal(out, "2015-07-30T20:00:00Z");
    v2_date(951782400 + 86399, out, sizeof(out));
    assert_string_equal(out, "2000-02-29T23:59:59Z");
    v2_date(1798761599, out, sizeof(out));
    assert_string_equal(out, "2026-12-31T23:59:59Z");
    v2_date(4102444800LL, out, sizeof(out));
    assert_string_equal(out, "2100-01-01T00:00:00Z");
    /* Exactly enough room: 20 characters and the NUL. */
    v2_date(1438286400, out, 21);
    assert_string_equal(out, "2015-07-30T20:00:00Z");
}

static void test_list_pages(void **state)
{
    json_t *j = v2_list_json("services", json_array(), "http://h:1", "/v2/Services", 0, 2, 1), *m;

    (void)state;
    assert_non_null(j);
    m = json_object_get(j, "meta");
    assert_true(json_is_array(json_object_get(j, "services")));
    assert_int_equal(json_integer_value(json_object_get(m, "page")), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "page_size")), 2);
    assert_string_equal(json_string_value(json_object_get(m, "key")), "services");
    assert_string_equal(json_string_value(json_object_get(m, "url")), "http://h:1/v2/Services?PageSize=2&Page=0");
    assert_string_equal(json_string_value(json_object_get(m, "first_page_url")),
                        "http://h:1/v2/Services?PageSize=2&Page=0");
    assert_true(json_is_null(json_object_get(m, "previous_page_url")));
    assert_string_equal(json_string_value(json_object_get(m, "next_page_url")),
                        "http://h:1/v2/Services?PageSize=2&Page=1");
    json_decref(j);

    j = v2_list_json("services", json_array(), "http://h:1", "/v2/Services", 3, 5, 0);
    m = json_object_get(j, "meta");
    assert_string_equal(json_string_value(json_object_get(m, "previous_page_url")),
                        "http://h:1/v2/Services?PageSize=5&Page=2");
    assert_true(json_is_null(json_object_get(m, "next_page_url")));
    json_decref(j);
}

static void test_service_json(void **state)
{
    struct v2_service s = {.sid = "VA0123456789abcdef0123456789abcdef", .friendly_name = "My \"App\"",
                           .code_length = 6, .lookup_enabled = 1, .created_s = 1438286400,
                           .updated_s = 1438286401};
    json_t *j = v2_service_json(&s, "AC0123456789abcdef0123456789abcdef", "http://h:1"), *links;

    (void)state;
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "sid")), s.sid);
    assert_string_equal(json_string_value(json_object_get(j, "account_sid")), "AC0123456789abcdef0123456789abcdef");
    assert_string_equal(json_string_value(json_object_get(j, "friendly_name")), "My \"App\"");
    assert_int_equal(json_integer_value(json_object_get(j, "code_length")), 6);
    assert_true(json_is_true(json_object_get(j, "lookup_enabled")));
    assert_true(json_is_false(json_object_get(j, "skip_sms_to_landlines")));
    assert_true(json_is_false(json_object_get(j, "psd2_enabled")));
    assert_string_equal(json_string_value(json_object_get(j, "date_created")), "2015-07-30T20:00:00Z");
    assert_string_equal(json_string_value(json_object_get(j, "date_updated")), "2015-07-30T20:00:01Z");
    assert_string_equal(json_string_value(json_object_get(j, "url")),
                        "http://h:1/v2/Services/VA0123456789abcdef0123456789abcdef");
    links = json_object_get(j, "links");
    assert_string_equal(json_string_value(json_object_get(links, "verifications")),
                        "http://h:1/v2/Services/VA0123456789abcdef0123456789abcdef/Verifications");
    assert_string_equal(json_string_value(json_object_get(links, "verification_checks")),
                        "http://h:1/v2/Services/VA0123456789abcdef0123456789abcdef/VerificationCheck");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_form_fields),
        cmocka_unit_test(test_form_decoding),
        cmocka_unit_test(test_form_empty_pairs_skipped),
        cmocka_unit_test(test_form_duplicates_and_unknown),
        cmocka_unit_test(test_form_bad_escapes),
        cmocka_unit_test(test_form_text_only),
        cmocka_unit_test(test_form_off_only),
        cmocka_unit_test(test_form_refuse),
        cmocka_unit_test(test_form_field_cap),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_error_every_outcome),
        cmocka_unit_test(test_error_rate_limit_classes),
        cmocka_unit_test(test_error_text),
        cmocka_unit_test(test_sid_ok),
        cmocka_unit_test(test_sid_new),
        cmocka_unit_test(test_date),
        cmocka_unit_test(test_list_pages),
        cmocka_unit_test(test_service_json),
    };

    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
