/*
 * Unit tests of what the REST API reads from a request before any decision
 * (src/http/http_body.c): a JSON body holds only known string fields
 * (unknown fields, names that are a prefix or an extension of a known one,
 * duplicate keys, wrong types, NULs inside strings and bodies that are not
 * objects are refused, each with its sentence); the shared fields' bounds
 * (phone required and made canonical, device_id 1 to 128 and purpose 1 to 32
 * printable ASCII bytes); the body's bytes kept up to HTTP_BODY_MAX and no
 * further, whole across the move out of the request's small buffer; and a
 * delivery report's form (%-escapes, '+', truncated escapes, repeated and
 * empty fields, values cut to the caller's buffer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/http/http_int.h"

/* http_body.c's UNITTEST functions. */
int http_printable(const char *s, size_t max);
void http_form_decode(char *s);

#define PHONE "+919812345678"

static const char *const issue_fields[] = {"phone", "device_id", "client_ip", "purpose", NULL};

/* http_body over the text s; detail gets the refusal. */
static json_t *parse(const char *s, char *detail, size_t cap)
{
    memset(detail, 0, cap);
    return http_body(s, strlen(s), issue_fields, detail, cap);
}

/* Asserts that s is refused with a detail starting with want. */
static void refused(const char *s, const char *want)
{
    char detail[160];
    json_t *j = parse(s, detail, sizeof(detail));

    if (j != NULL)
        fail_msg("accepted: %s", s);
    if (strncmp(detail, want, strlen(want)) != 0)
        fail_msg("%s: detail \"%s\", want \"%s...\"", s, detail, want);
}

static void test_known_string_fields_pass(void **state)
{
    char detail[160];
    json_t *j;

    (void)state;
    j = parse("{\"phone\": \"" PHONE "\", \"device_id\": \"d1\", \"client_ip\": \"10.0.0.1\", \"purpose\": \"login\"}",
              detail, sizeof(detail));
    assert_non_null(j);
    assert_string_equal(http_field(j, "phone"), PHONE);
    assert_string_equal(http_field(j, "purpose"), "login");
    assert_null(http_field(j, "code"));
    json_decref(j);
    /* Every field is optional here; an empty object passes. */
    j = parse("{}", detail, sizeof(detail));
    assert_non_null(j);
    json_decref(j);
}

static void test_unknown_fields(void **state)
{
    char detail[160], name[101], body[200];

    (void)state;
    refused("{\"phone\": \"" PHONE "\", \"code\": \"123456\"}", "unknown field \"code\"");
    /* A name matches whole: a prefix or an extension of a known one is unknown. */
    refused("{\"phon\": \"" PHONE "\"}", "unknown field \"phon\"");
    refused("{\"phones\": \"" PHONE "\"}", "unknown field \"phones\"");
    refused("{\"Phone\": \"" PHONE "\"}", "unknown field \"Phone\"");
    refused("{\"\": \"x\"}", "unknown field \"\"");
    /* A long name is cut in the detail, which stays a sentence of bounded size. */
    memset(name, 'n', 100);
    name[100] = '\0';
    snprintf(body, sizeof(body), "{\"%s\": \"x\"}", name);
    assert_null(parse(body, detail, sizeof(detail)));
    assert_int_equal(strlen(detail), strlen("unknown field \"\"") + 40);
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    refused("{\"phone\": \"" PHONE "\", \"phone\": \"+919812345679\"}", "body is not JSON");
    refused("{\"purpose\": \"a\", \"phone\": \"" PHONE "\", \"purpose\": \"a\"}", "body is not JSON");
}

static void test_wrong_types(void **state)
{
    (void)state;
    refused("{\"phone\": 919812345678}", "phone must be a string");
    refused("{\"phone\": null}", "phone must be a string");
    refused("{\"phone\": true}", "phone must be a string");
    refused("{\"phone\": [\"" PHONE "\"]}", "phone must be a string");
    refused("{\"device_id\": {\"a\": \"b\"}}", "device_id must be a string");
    refused("{\"purpose\": 1.5}", "purpose must be a string");
    /* A string holding a NUL would be cut short downstream: jansson
     * refuses it (without JSON_ALLOW_NUL) before the type check would. */
    refused("{\"phone\": \"+91981234\\u00005678\"}", "body is not JSON");
}

static void test_not_an_object(void **state)
{
    char detail[160];

    (void)state;
    refused("[]", "body must be a JSON object");
    refused("[{\"phone\": \"" PHONE "\"}]", "body must be a JSON object");
    /* A bare value is not a JSON text jansson reads without JSON_DECODE_ANY. */
    refused("\"x\"", "body is not JSON");
    refused("1", "body is not JSON");
    refused("", "body is not JSON");
    refused("{", "body is not JSON");
    refused("{\"phone\": \"" PHONE "\"} x", "body is not JSON");
    /* len bounds what is read: the same bytes, cut, are not JSON. */
    assert_null(http_body("{}", 1, issue_fields, detail, sizeof(detail)));
}

/* http_check_common over the body s: its outcome, detail in detail. */
static enum otp_outcome check(const char *s, char *detail, size_t cap, json_t **out)
{
    struct phone_info pi;
    enum otp_outcome o;
    json_t *j = parse(s, detail, cap);

    assert_non_null(j);
    o = http_check_common(j, &pi, detail, cap);
    if (out != NULL)
        *out = j;
    else
        json_decref(j);
    return o;
}

/* The body of PHONE with field set to value (a C string, JSON-escaped by
 * jansson). */
static char *with(const char *field, const char *value)
{
    json_t *j = json_pack("{s:s, s:s}", "phone", PHONE, field, value);
    char *s = json_dumps(j, JSON_COMPACT);

    json_decref(j);
    return s;
}

static void test_phone_required_and_canonical(void **state)
{
    char detail[160];
    json_t *j;

    (void)state;
    assert_int_equal(check("{\"device_id\": \"d\"}", detail, sizeof(detail), NULL), OUT_INVALID_REQUEST);
    assert_string_equal(detail, "phone is required");
    assert_int_equal(check("{\"phone\": \"12\"}", detail, sizeof(detail), NULL), OUT_INVALID_PHONE);
    assert_true(detail[0] != '\0');
    /* A trunk-prefix spelling is replaced by the one canonical form. */
    assert_int_equal(check("{\"phone\": \"+9109812345678\"}", detail, sizeof(detail), &j), OUT_COUNT);
    assert_string_equal(http_field(j, "phone"), PHONE);
    json_decref(j);
}

/* Asserts http_check_common's outcome for field set to value. */
static void common_is(const char *field, const char *value, enum otp_outcome want)
{
    char detail[160], *s = with(field, value);
    enum otp_outcome o = check(s, detail, sizeof(detail), NULL);

    if (o != want)
        fail_msg("%s \"%s\": outcome %d, want %d (%s)", field, value, o, want, detail);
    if (want == OUT_INVALID_REQUEST)
        assert_string_equal(detail, "device_id must be 1 to 128 printable ASCII bytes");
    free(s);
}

static void test_device_id_bounds(void **state)
{
    char id[130];

    (void)state;
    memset(id, 'd', sizeof(id));
    id[128] = '\0';
    common_is("device_id", id, OUT_COUNT);
    id[128] = 'd';
    id[129] = '\0';
    common_is("device_id", id, OUT_INVALID_REQUEST);
    common_is("device_id", "x", OUT_COUNT);
    common_is("device_id", " ~", OUT_COUNT);
    common_is("device_id", "", OUT_INVALID_REQUEST);
    common_is("device_id", "tab\there", OUT_INVALID_REQUEST);
    common_is("device_id", "line\n", OUT_INVALID_REQUEST);
    common_is("device_id", "del\x7f", OUT_INVALID_REQUEST);
    common_is("device_id", "caf\xc3\xa9", OUT_INVALID_REQUEST);
}

/* Asserts http_purpose_ok for purpose set to value. */
static void purpose_is(const char *value, int want)
{
    char detail[160], *s = with("purpose", value);
    json_t *j = parse(s, detail, sizeof(detail));

    assert_non_null(j);
    if (http_purpose_ok(j) != want)
        fail_msg("purpose \"%s\": %d, want %d", value, !want, want);
    json_decref(j);
    free(s);
}

static void test_purpose_bounds(void **state)
{
    char p[34], detail[160];
    json_t *j;

    (void)state;
    memset(p, 'p', sizeof(p));
    p[32] = '\0';
    purpose_is(p, 1);
    p[32] = 'p';
    p[33] = '\0';
    purpose_is(p, 0);
    purpose_is("login", 1);
    purpose_is("", 0);
    purpose_is("a\x1f", 0);
    purpose_is("\xe2\x82\xac", 0);
    /* Absent is fine. */
    j = parse("{\"phone\": \"" PHONE "\"}", detail, sizeof(detail));
    assert_int_equal(http_purpose_ok(j), 1);
    json_decref(j);
}

static void test_printable(void **state)
{
    int c;
    char s[2] = {0, 0};

    (void)state;
    for (c = 1; c < 256; c++) {
        s[0] = (char)c;
        assert_int_equal(http_printable(s, 1), c >= 0x20 && c <= 0x7e);
    }
    assert_int_equal(http_printable("", 5), 0);
    assert_int_equal(http_printable("abcde", 5), 1);
    assert_int_equal(http_printable("abcdef", 5), 0);
}

/* A request state as http.c makes one. */
static struct http_req *req_new(void)
{
    struct http_req *rq = calloc(1, sizeof(*rq));

    assert_non_null(rq);
    rq->body = rq->small;
    return rq;
}

static void req_free(struct http_req *rq)
{
    if (rq->body != rq->small)
        free(rq->body);
    free(rq);
}

static void test_body_kept_whole_up_to_the_cap(void **state)
{
    struct http_req *rq = req_new();
    char piece[HTTP_BODY_MAX + 1];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(piece); i++)
        piece[i] = (char)('a' + i % 26);
    /* Up to HTTP_BODY_SMALL in the state itself. */
    assert_int_equal(http_body_take(rq, piece, HTTP_BODY_SMALL), 0);
    assert_ptr_equal(rq->body, rq->small);
    /* One more byte moves it to the heap, its start with it; pieces of any
     * size fill it up to HTTP_BODY_MAX exactly. */
    assert_int_equal(http_body_take(rq, piece + HTTP_BODY_SMALL, 1), 0);
    assert_ptr_not_equal(rq->body, rq->small);
    for (i = HTTP_BODY_SMALL + 1; i < HTTP_BODY_MAX; i += 700) {
        size_t n = HTTP_BODY_MAX - i < 700 ? HTTP_BODY_MAX - i : 700;
        assert_int_equal(http_body_take(rq, piece + i, n), 0);
    }
    assert_int_equal(rq->len, HTTP_BODY_MAX);
    assert_false(rq->too_big);
    assert_memory_equal(rq->body, piece, HTTP_BODY_MAX);
    /* One byte over: too big, and nothing more is kept. */
    assert_int_equal(http_body_take(rq, "x", 1), 0);
    assert_true(rq->too_big);
    assert_int_equal(rq->len, HTTP_BODY_MAX);
    assert_int_equal(http_body_take(rq, "y", 1), 0);
    assert_int_equal(rq->len, HTTP_BODY_MAX);
    req_free(rq);
}

static void test_body_over_the_cap_at_once(void **state)
{
    struct http_req *rq = req_new();
    static char big[HTTP_BODY_MAX + 2];

    (void)state;
    /* A first piece past the cap is never copied anywhere. */
    assert_int_equal(http_body_take(rq, big, HTTP_BODY_MAX + 1), 0);
    assert_true(rq->too_big);
    assert_int_equal(rq->len, 0);
    assert_ptr_equal(rq->body, rq->small);
    req_free(rq);
    /* A body that ends just past the small buffer moves whole. */
    rq = req_new();
    assert_int_equal(http_body_take(rq, "0123456789", 10), 0);
    memset(big, 'b', sizeof(big));
    assert_int_equal(http_body_take(rq, big, HTTP_BODY_SMALL), 0);
    assert_ptr_not_equal(rq->body, rq->small);
    assert_int_equal(rq->len, HTTP_BODY_SMALL + 10);
    assert_memory_equal(rq->body, "0123456789", 10);
    assert_int_equal(rq->body[rq->len - 1], 'b');
    req_free(rq);
}

/* http_form_decode of in. */
static void decodes(const char *in, const char *want)
{
    char s[64];

    snprintf(s, sizeof(s), "%s", in);
    http_form_decode(s);
    if (strcmp(s, want) != 0)
        fail_msg("\"%s\" decoded to \"%s\", want \"%s\"", in, s, want);
}

static void test_form_decode(void **state)
{
    (void)state;
    decodes("delivered", "delivered");
    decodes("a+b+", "a b ");
    decodes("%41%42c", "ABc");
    decodes("%2b%2B%25", "++%");
    decodes("%e2%82%ac", "\xe2\x82\xac");
    decodes("100%25+sure", "100% sure");
    /* A truncated escape is kept as it came. */
    decodes("ab%4", "ab%4");
    decodes("ab%", "ab%");
    decodes("%", "%");
    /* An escape that is not hex decodes as a NUL, which ends the value:
     * never longer than it came, never past its end. */
    decodes("ab%zzcd", "ab");
    decodes("%00delivered", "");
    decodes("", "");
}

/* http_form_get of name in body into a buffer of cap bytes. */
static void form_is(const char *body, const char *name, size_t cap, int found, const char *want)
{
    char out[64];

    memset(out, 'x', sizeof(out));
    assert_true(cap <= sizeof(out));
    if (http_form_get(body, name, out, cap) != found)
        fail_msg("%s in \"%s\": found %d, want %d", name, body, !found, found);
    if (found && strcmp(out, want) != 0)
        fail_msg("%s in \"%s\": \"%s\", want \"%s\"", name, body, out, want);
}

static void test_form_fields(void **state)
{
    (void)state;
    form_is("MessageStatus=delivered", "MessageStatus", 32, 1, "delivered");
    form_is("To=%2B9198&MessageStatus=undelivered&From=x", "MessageStatus", 32, 1, "undelivered");
    form_is("MessageStatus=a+b%21", "MessageStatus", 32, 1, "a b!");
    /* Repeated: the first counts. */
    form_is("MessageStatus=sent&MessageStatus=delivered", "MessageStatus", 32, 1, "sent");
    /* A name matches whole, before its '='. */
    form_is("MessageStatusX=1&MessageStatus=failed", "MessageStatus", 32, 1, "failed");
    form_is("XMessageStatus=delivered", "MessageStatus", 32, 0, "");
    form_is("messagestatus=delivered", "MessageStatus", 32, 0, "");
    form_is("MessageStatus&MessageStatus", "MessageStatus", 32, 0, "");
    form_is("Message%53tatus=delivered", "MessageStatus", 32, 0, "");
    /* Empty values and empty pairs. */
    form_is("MessageStatus=", "MessageStatus", 32, 1, "");
    form_is("&&MessageStatus=sent&", "MessageStatus", 32, 1, "sent");
    form_is("", "MessageStatus", 32, 0, "");
    /* A value longer than the buffer is cut, then decoded: an escape cut
     * in half stays as it came. */
    form_is("MessageStatus=delivered", "MessageStatus", 5, 1, "deli");
    form_is("MessageStatus=abc%41", "MessageStatus", 5, 1, "abc%");
    form_is("MessageStatus=abc%41", "MessageStatus", 6, 1, "abc%4");
    form_is("MessageStatus=abc%41", "MessageStatus", 7, 1, "abcA");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_string_fields_pass),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_not_an_object),
        cmocka_unit_test(test_phone_required_and_canonical),
        cmocka_unit_test(test_device_id_bounds),
        cmocka_unit_test(test_purpose_bounds),
        cmocka_unit_test(test_printable),
        cmocka_unit_test(test_body_kept_whole_up_to_the_cap),
        cmocka_unit_test(test_body_over_the_cap_at_once),
        cmocka_unit_test(test_form_decode),
        cmocka_unit_test(test_form_fields),
    };

    phone_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
