/*
 * fuzz_body: libFuzzer over what http reads from a request body before any
 * decision (http_body.c): the JSON body of issue and verify (http_body,
 * then the field checks, with limits_ip_key for client_ip as otp.c applies
 * it) and the form body of a Twilio delivery report (http_form_get,
 * http_form_decode, and report.c's report_twilio_data, the text its
 * signature covers), and the cut every problem's detail gets (http_reply.c's
 * http_utf8_cut: its result is a prefix jansson takes as a string), and the
 * problem text of such a detail (problem.c, against jansson). An input is
 * one body of at most HTTP_BODY_MAX bytes, as http_body_take buffers it.
 * Seeds: tests/fuzz/corpus/body/, bodies that pass every check.
 */
#include <string.h>

#include <jansson.h>

#include "../../src/base/phone.h"
#include "../../src/http/http.h"
#include "../../src/http/problem.h"
#include "../unit/problem_ref.h"
#include "../../src/limits/limits.h"
#include "fuzz.h"

/* http's: shared by its files (http_int.h), or UNITTEST functions of
 * http_body.c and http_reply.c. */
json_t *http_body(const char *body, size_t len, const char *const *fields, char *detail, size_t cap);
int http_printable(const char *s, size_t max);
int http_purpose_ok(json_t *j);
enum otp_outcome http_check_common(json_t *j, struct phone_info *pi, char *detail, size_t cap);
void http_form_decode(char *s);
int http_form_get(const char *body, const char *name, char *out, size_t cap);
void http_utf8_cut(char *s);
/* report.c's: what Twilio signs, built from an unauthenticated body. */
int report_twilio_data(const char *url, const char *form, char *out, size_t cap);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    json_object_seed(1);
    return 0;
}

static const char *fuzz_str(json_t *j, const char *name)
{
    return json_string_value(json_object_get(j, name));
}

/* 1 when every byte of s is printable ASCII. */
static int fuzz_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return 0;
    return 1;
}

/* Parses body as http_issue (verify 0) or http_verify does (http_api.c);
 * returns 1 when it passes every check, and checks what passing promises. */
static int fuzz_json(const char *body, size_t len, int verify)
{
    static const char *const issue_fields[] = {"phone", "device_id", "client_ip", "purpose", NULL};
    static const char *const verify_fields[] = {"phone", "code", "device_id", "client_ip", "purpose", NULL};
    const char *const *fields = verify ? verify_fields : issue_fields;
    char detail[160]; /* as in http_api.c */
    struct phone_info pi;
    const char *key, *s;
    enum otp_outcome bad;
    json_t *j, *v;
    int ok = 0;

    memset(detail, 0, sizeof(detail));
    j = http_body(body, len, fields, detail, sizeof(detail));
    if (j == NULL) {
        FUZZ_CHECK(detail[0] != '\0' && memchr(detail, '\0', sizeof(detail)) != NULL);
        /* As http_problem_text does: the detail, cut, is never dropped. */
        http_utf8_cut(detail);
        v = json_string(detail);
        FUZZ_CHECK(v != NULL);
        json_decref(v);
        return 0;
    }
    /* An object of allowed fields, each a string without a NUL. */
    FUZZ_CHECK(json_is_object(j));
    json_object_foreach(j, key, v) {
        const char *const *f;
        for (f = fields; *f && strcmp(*f, key) != 0; f++)
            ;
        FUZZ_CHECK(*f != NULL);
        FUZZ_CHECK(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v));
    }
    bad = http_check_common(j, &pi, detail, sizeof(detail));
    if (bad != OUT_COUNT) {
        FUZZ_CHECK(bad == OUT_INVALID_REQUEST || bad == OUT_INVALID_PHONE);
        FUZZ_CHECK(detail[0] != '\0');
        goto out;
    }
    /* What the rest of otpd relies on: the phone's canonical form in the
     * body (valid, fitting PHONE_MAX), and a device id that is safe to put
     * into a Redis key and a log. */
    s = fuzz_str(j, "phone");
    FUZZ_CHECK(s != NULL && phone_valid(s) && strlen(s) < PHONE_MAX && strcmp(s, pi.e164) == 0);
    s = fuzz_str(j, "device_id");
    FUZZ_CHECK(s == NULL || (strlen(s) >= 1 && strlen(s) <= 128 && http_printable(s, 128)));
    s = fuzz_str(j, "client_ip");
    if (s != NULL) {
        char ipkey[LIMITS_IP_KEY_MAX];
        if (limits_ip_key(s, ipkey, sizeof(ipkey)) != OTP_OK)
            goto out; /* otp.c: 400 invalid_request */
        /* A key is an address's text (IPv6 as its /64): safe in a Redis key. */
        FUZZ_CHECK(ipkey[0] != '\0' && strlen(ipkey) < sizeof(ipkey));
        FUZZ_CHECK(strspn(ipkey, "0123456789abcdef.:/") == strlen(ipkey));
    }
    /* A purpose that passes is 1 to 32 bytes of printable ASCII (a Redis
     * key's part and a log field). */
    if (!http_purpose_ok(j))
        goto out; /* http_api.c: 400 invalid_request */
    s = fuzz_str(j, "purpose");
    FUZZ_CHECK(s == NULL || (strlen(s) >= 1 && strlen(s) <= 32 && fuzz_printable(s)));
    ok = !verify || fuzz_str(j, "code") != NULL;
out:
    json_decref(j);
    return ok;
}

/* problem_text for detail (cut as http_reply.c cuts it) against jansson's
 * dump of the same object, built as http.c built it before problem.c: byte for
 * byte the same (problem_ref.h). The rest of the problem varies with the
 * input's size. */
static void fuzz_problem(const char *detail, size_t size)
{
    struct problem p = {.status = 400 + (unsigned)(size % 200), .error = "rate_limited", .title = "Rate limited",
                        .detail = detail, .reason = size % 3 ? "phone_10m" : "", .retry_after_s = (int64_t)size % 4,
                        .attempts_left = (int)(size % 7), .show_attempts = size % 2};
    char *ours = problem_text(&p), *theirs = problem_ref_text(&p);

    FUZZ_CHECK(ours != NULL && theirs != NULL && strcmp(ours, theirs) == 0);
    free(ours);
    free(theirs);
}

/* http_utf8_cut over any bytes: a prefix of them that jansson accepts; and
 * the problem text of it. */
static void fuzz_cut(const char *body, size_t size)
{
    char copy[HTTP_BODY_MAX + 1], detail[PROBLEM_DETAIL_MAX + 1];
    json_t *v;

    snprintf(copy, sizeof(copy), "%s", body);
    http_utf8_cut(copy);
    FUZZ_CHECK(strncmp(copy, body, strlen(copy)) == 0);
    v = json_string(copy);
    FUZZ_CHECK(v != NULL);
    json_decref(v);
    snprintf(detail, sizeof(detail), "%s", body); /* as http_problem_text */
    http_utf8_cut(detail);
    fuzz_problem(detail, size);
}

/* Reads body as a Twilio status callback; returns 1 when it names a status. */
static int fuzz_form(const char *body, size_t len)
{
    char status[32], copy[HTTP_BODY_MAX + 1];
    size_t n;
    int found;

    memset(status, 'x', sizeof(status));
    found = http_form_get(body, "MessageStatus", status, sizeof(status));
    FUZZ_CHECK(memchr(status, '\0', sizeof(status)) != NULL || !found);
    if (found)
        FUZZ_CHECK(strlen(status) < sizeof(status));
    /* Decoding never grows a string. */
    memcpy(copy, body, len + 1);
    n = strlen(copy);
    http_form_decode(copy);
    FUZZ_CHECK(strlen(copy) <= n);
    /* The signed text: the URL, then at most the body's bytes (decoding and
     * dropping '=' and '&' never grow it), NUL-terminated, in a buffer that
     * report.c sizes the same way. */
    {
        static const char url[] = "http://127.0.0.1:8080/v1/dlr/twilio?id=0&exp=1&tag=2";
        char data[sizeof(url) + HTTP_BODY_MAX + 1];
        int got;
        memset(data, 'x', sizeof(data));
        got = report_twilio_data(url, body, data, sizeof(url) + len);
        FUZZ_CHECK(got == -1 || ((size_t)got == strlen(data) && (size_t)got <= sizeof(url) - 1 + len &&
                                 memcmp(data, url, sizeof(url) - 1) == 0));
    }
    return found && status[0] != '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body;
    int deep;

    if (size > HTTP_BODY_MAX) /* http answers 413 before parsing */
        return 0;
    /* http's buffer holds the body and a NUL after it, for the form. */
    if ((body = malloc(size + 1)) == NULL)
        return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    deep = fuzz_json(body, size, 0);
    deep |= fuzz_json(body, size, 1);
    deep |= fuzz_form(body, size);
    fuzz_cut(body, size);
    fuzz_deep(deep, "neither a valid issue or verify body nor a form with MessageStatus");
    free(body);
    return 0;
}
