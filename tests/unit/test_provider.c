/*
 * Unit tests of the provider adapters' pure part (src/provider): the
 * request each HTTP adapter builds (prepare) and how it classifies an
 * answer (classify), each adapter made by its public constructor from a
 * config filled in here and called through its struct provider. Expected
 * URLs and bodies are written out by hand, and the webhook's signature is
 * computed again with libsodium, not with otpd's own HMAC. The file sink
 * is checked once, with a line written to a scratch file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "../../src/provider/provider.h"

#define AC_SID "AC0123456789abcdef0123456789abcdef"
#define SK_SID "SK0123456789abcdef0123456789abcdef"
#define MG_SID "MG0123456789abcdef0123456789abcdef"
#define KANNEL "http://kannel.example:13013/cgi-bin/sendsms"
#define NOW_MS INT64_C(1700000000999)

/* One message: code in the text, five minutes left, no report URL. */
static struct sms sms_plain(void)
{
    struct sms m = {"m1", "+15551234567", "Your code is 123456", NULL, NOW_MS, NOW_MS + 300000};

    return m;
}

static struct provider *must_make(struct provider *(*make)(const struct provider_conf *, char *),
                                  const struct provider_conf *c)
{
    char err[OTP_ERR_LEN] = "";
    struct provider *p = make(c, err);

    if (p == NULL)
        fail_msg("constructor failed: %s", err);
    return p;
}

/* Runs p's prepare on a zeroed request; it must build one, not deliver. */
static void prepare_ok(struct provider *p, const struct sms *m, struct provider_http *req)
{
    struct provider_result res;
    int done = -1;

    memset(req, 0, sizeof(*req));
    memset(&res, 0, sizeof(res));
    assert_int_equal(p->ops->prepare(p->self, m, req, &done, &res), OTP_OK);
    assert_int_equal(done, 0);
}

static struct provider_result classify(struct provider *p, long status, const char *body)
{
    struct provider_result res;

    memset(&res, 0, sizeof(res));
    p->ops->classify(p->self, status, body, strlen(body), &res);
    return res;
}

/* res's cause, and the outcome, money class and retry its row gives. */
static void assert_cause(const struct provider_result *res, enum provider_cause c, enum provider_outcome o,
                         enum provider_class cls, int retry)
{
    assert_int_equal(res->cause, c);
    assert_int_equal(res->outcome, o);
    assert_int_equal(provider_cause_row(res->cause)->cls, cls);
    assert_int_equal(provider_cause_row(res->cause)->retry, retry);
}

/*
 * The answers every HTTP adapter classifies by status alone: a 429 is not
 * billed and retried (its Retry-After comes from the transfer, so classify
 * leaves retry_after_ms at 0), a 4xx is refused for good (a 401 or 403, the
 * provider's credentials, as a route refusal), a 5xx, 408 or odd status may
 * have been billed.
 */
static void check_common_statuses(struct provider *p)
{
    struct provider_result r;

    r = classify(p, 429, "<html>slow down</html>");
    assert_cause(&r, PROVIDER_C_429, PROVIDER_TRANSIENT, PROVIDER_UNREACHED, 1);
    assert_int_equal(r.retry_after_ms, 0);
    assert_string_equal(r.provider_id, "");
    r = classify(p, 401, "");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 401");
    r = classify(p, 403, "");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 403");
    r = classify(p, 404, "");
    assert_cause(&r, PROVIDER_C_4XX, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 404");
    r = classify(p, 503, "\x01\xff garbage");
    assert_cause(&r, PROVIDER_C_5XX, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    r = classify(p, 408, "");
    assert_cause(&r, PROVIDER_C_408, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    r = classify(p, 302, "");
    assert_cause(&r, PROVIDER_C_ODD_STATUS, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    assert_string_equal(r.error, "HTTP 302");
    r = classify(p, 0, "");
    assert_cause(&r, PROVIDER_C_BROKEN, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    assert_string_equal(r.error, "no answer");
}

/* ---- webhook ---- */

static struct provider_conf webhook_conf(char *token, char *secret)
{
    struct provider_conf c;

    memset(&c, 0, sizeof(c));
    c.type = CFG_PROVIDER_WEBHOOK;
    snprintf(c.url, sizeof(c.url), "https://hooks.example.com/sms?x=1");
    c.token = token;
    c.signing_secret = secret;
    return c;
}

/* "t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>", by libsodium. */
static void expect_signature(const char *secret, const char *t, const char *body, char *out, size_t cap)
{
    crypto_auth_hmacsha256_state st;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    char hex[2 * sizeof(mac) + 1];

    crypto_auth_hmacsha256_init(&st, (const unsigned char *)secret, strlen(secret));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)t, strlen(t));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, strlen(body));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(out, cap, "X-Otpd-Signature: t=%s,v1=%s", t, hex);
}

static void test_webhook_json_post(void **state)
{
    struct provider_conf c = webhook_conf(NULL, NULL);
    struct provider *p = must_make(provider_webhook_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    assert_string_equal(p->ops->name, "webhook");
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, "https://hooks.example.com/sms?x=1");
    assert_int_equal(req.post, 1);
    assert_string_equal(req.content_type, "application/json");
    assert_string_equal(req.body, "{\"to\":\"+15551234567\",\"text\":\"Your code is 123456\",\"id\":\"m1\"}");
    assert_null(req.user);
    assert_null(req.pass);
    assert_int_equal(req.n_headers, 0);
    /* JSON's escapes; UTF-8 goes as it is. */
    m.text = "a \"b\"\\ \n\xc3\xa9";
    prepare_ok(p, &m, &req);
    assert_string_equal(req.body, "{\"to\":\"+15551234567\",\"text\":\"a \\\"b\\\"\\\\ \\n\xc3\xa9\",\"id\":\"m1\"}");
    provider_free(p);
}

static void test_webhook_bearer_and_signature(void **state)
{
    struct provider_conf c = webhook_conf("tok-123", "whsec_a-secret");
    struct provider *p = must_make(provider_webhook_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();
    char want[PROVIDER_HEADER_MAX];

    (void)state;
    prepare_ok(p, &m, &req);
    assert_int_equal(req.n_headers, 2);
    assert_string_equal(req.headers[0], "Authorization: Bearer tok-123");
    /* Unix seconds, truncated, over the exact body sent. */
    expect_signature("whsec_a-secret", "1700000000", req.body, want, sizeof(want));
    assert_string_equal(req.headers[1], want);
    /* Another time signs another text. */
    m.now_ms = 1700000061000;
    prepare_ok(p, &m, &req);
    expect_signature("whsec_a-secret", "1700000061", req.body, want, sizeof(want));
    assert_string_equal(req.headers[1], want);
    provider_free(p);
}

static void test_webhook_signature_alone(void **state)
{
    /* A key longer than SHA-256's block is hashed first (RFC 2104). */
    static char long_secret[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-and-more";
    struct provider_conf c = webhook_conf(NULL, long_secret);
    struct provider *p = must_make(provider_webhook_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();
    char want[PROVIDER_HEADER_MAX];

    (void)state;
    prepare_ok(p, &m, &req);
    assert_int_equal(req.n_headers, 1);
    expect_signature(long_secret, "1700000000", req.body, want, sizeof(want));
    assert_string_equal(req.headers[0], want);
    provider_free(p);
}

static void test_webhook_classify(void **state)
{
    struct provider_conf c = webhook_conf(NULL, NULL);
    struct provider *p = must_make(provider_webhook_new, &c);
    struct provider_result r;

    (void)state;
    r = classify(p, 200, "{\"id\":\"wh-42\"}");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.provider_id, "wh-42");
    assert_string_equal(r.error, "");
    r = classify(p, 204, "");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.provider_id, "");
    r = classify(p, 202, "not json {");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.provider_id, "");
    r = classify(p, 200, "{\"id\":42}");
    assert_string_equal(r.provider_id, "");
    /* A refusal's id is no message's. */
    r = classify(p, 400, "{\"id\":\"wh-43\"}");
    assert_cause(&r, PROVIDER_C_4XX, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.provider_id, "");
    assert_string_equal(r.error, "HTTP 400");
    check_common_statuses(p);
    provider_free(p);
}

/* ---- kannel ---- */

static struct provider_conf kannel_conf(char *user, char *pass)
{
    struct provider_conf c;

    memset(&c, 0, sizeof(c));
    c.type = CFG_PROVIDER_KANNEL;
    snprintf(c.url, sizeof(c.url), KANNEL);
    snprintf(c.from, sizeof(c.from), "Acme Co");
    c.user = user;
    c.pass = pass;
    c.priority = -1;
    c.dlr_mask = 19;
    return c;
}

static void test_kannel_query_escaped(void **state)
{
    struct provider_conf c = kannel_conf("otp user", "p&ss=w/+d%");
    struct provider *p = must_make(provider_kannel_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    assert_string_equal(p->ops->name, "kannel");
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, KANNEL "?username=otp%20user&password=p%26ss%3Dw%2F%2Bd%25&from=Acme%20Co"
                                        "&to=%2B15551234567&text=Your%20code%20is%20123456&validity=5");
    assert_int_equal(req.post, 0);
    assert_string_equal(req.body, "");
    assert_null(req.user);
    assert_null(req.pass);
    assert_int_equal(req.n_headers, 0);
    /* Unreserved characters stay; the rest of ASCII is encoded. */
    m.text = "Az09-_.~ !\"#&'()*+,/:;=?@[]";
    prepare_ok(p, &m, &req);
    assert_non_null(strstr(req.url, "&text=Az09-_.~%20%21%22%23%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D"
                                    "&validity=5"));
    provider_free(p);
}

static void test_kannel_url_with_query_and_unicode(void **state)
{
    struct provider_conf c = kannel_conf("u", "p");
    struct provider *p;
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    snprintf(c.url, sizeof(c.url), KANNEL "?account=otp");
    p = must_make(provider_kannel_new, &c);
    m.text = "C\xc3\xb3" "digo 1234";
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, KANNEL "?account=otp&username=u&password=p&from=Acme%20Co&to=%2B15551234567"
                                        "&text=C%C3%B3digo%201234&charset=UTF-8&coding=2&validity=5");
    provider_free(p);
}

static void test_kannel_configured_fields(void **state)
{
    struct provider_conf c = kannel_conf("u", "p");
    struct provider *p;
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    snprintf(c.smsc, sizeof(c.smsc), "route 1");
    c.priority = 0;
    c.validity_ms = 10 * 60000;
    p = must_make(provider_kannel_new, &c);
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, KANNEL "?username=u&password=p&from=Acme%20Co&to=%2B15551234567"
                                        "&text=Your%20code%20is%20123456&smsc=route%201&priority=0&validity=10");
    provider_free(p);
}

/* Validity from the code's remaining life, rounded up to whole minutes, at least 1. */
static void test_kannel_validity_from_life(void **state)
{
    static const struct {
        int64_t left_ms;
        const char *want;
    } cases[] = {
        {-5000, "&validity=1"},    {0, "&validity=1"},       {59999, "&validity=1"},  {60000, "&validity=1"},
        {60001, "&validity=2"},    {299999, "&validity=5"},  {300000, "&validity=5"}, {300001, "&validity=6"},
        {3600000, "&validity=60"},
    };
    struct provider_conf c = kannel_conf("u", "p");
    struct provider *p = must_make(provider_kannel_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();
    size_t i, n;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        m.expires_ms = m.now_ms + cases[i].left_ms;
        prepare_ok(p, &m, &req);
        n = strlen(req.url) - strlen(cases[i].want);
        if (strcmp(req.url + n, cases[i].want) != 0)
            fail_msg("%lld ms left: %s does not end with %s", (long long)cases[i].left_ms, req.url, cases[i].want);
    }
    provider_free(p);
}

static void test_kannel_delivery_reports(void **state)
{
    struct provider_conf c = kannel_conf("u", "p");
    struct provider *p;
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    snprintf(c.callback_url, sizeof(c.callback_url), "https://otpd.example.com");
    c.dlr_mask = 3;
    p = must_make(provider_kannel_new, &c);
    /* The report URL, Kannel's %d and all, is one encoded value; the mask sent is the one the URL's tag binds. */
    m.dlr_query = "id=m1&exp=1700086400&m=3&tag=AbC-_9";
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, KANNEL "?username=u&password=p&from=Acme%20Co&to=%2B15551234567"
                                        "&text=Your%20code%20is%20123456&validity=5&dlr-mask=3"
                                        "&dlr-url=https%3A%2F%2Fotpd.example.com%2Fv1%2Fdlr%2Fkannel%3Fid%3Dm1"
                                        "%26exp%3D1700086400%26m%3D3%26tag%3DAbC-_9%26status%3D%25d");
    /* No report asked for this message: none asked of Kannel. */
    m.dlr_query = NULL;
    prepare_ok(p, &m, &req);
    assert_null(strstr(req.url, "dlr-"));
    provider_free(p);
    /* Nor without a callback URL. */
    c.callback_url[0] = '\0';
    p = must_make(provider_kannel_new, &c);
    m.dlr_query = "id=m1&exp=1700086400&m=3&tag=x";
    prepare_ok(p, &m, &req);
    assert_null(strstr(req.url, "dlr-"));
    provider_free(p);
}

static void test_kannel_too_long(void **state)
{
    struct provider_conf c = kannel_conf("u", "p");
    struct provider *p = must_make(provider_kannel_new, &c);
    struct provider_http req;
    struct provider_result res;
    struct sms m = sms_plain();
    char text[PROVIDER_URL_MAX / 3 + 10];
    int done = -1;

    (void)state;
    memset(text, ' ', sizeof(text) - 1); /* each one "%20" */
    text[sizeof(text) - 1] = '\0';
    m.text = text;
    memset(&req, 0, sizeof(req));
    memset(&res, 0, sizeof(res));
    assert_int_equal(p->ops->prepare(p->self, &m, &req, &done, &res), OTP_EINVAL);
    assert_int_equal(done, 0);
    provider_free(p);
}

static void test_kannel_classify(void **state)
{
    struct provider_conf c = kannel_conf("u", "s3cret");
    struct provider *p = must_make(provider_kannel_new, &c);
    struct provider_result r;
    char long_body[200];

    (void)state;
    r = classify(p, 202, "0: Accepted for delivery");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.error, "");
    assert_string_equal(r.provider_id, "");
    r = classify(p, 202, "3: Queued for later delivery");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.error, "");
    /* Kannel's own refusals reach the log as they are. Its 403s are about
     * Kannel: the credentials, or no SMSC for the destination. */
    r = classify(p, 403, "Authorization failed for sendsms");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 403: Authorization failed for sendsms");
    r = classify(p, 403, "Not routable. Do not try again.");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 403: Not routable. Do not try again.");
    /* Its 400s are about the request or the number: no other provider would do better. */
    r = classify(p, 400, "Number(s) has/have been denied by white- and/or black-lists.");
    assert_cause(&r, PROVIDER_C_4XX, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    r = classify(p, 400, "Missing receiver number, rejected");
    assert_cause(&r, PROVIDER_C_4XX, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    /* Kannel's temporary failure is the provider's health: a 5xx. */
    r = classify(p, 503, "Temporal failure, try again later.");
    assert_cause(&r, PROVIDER_C_5XX, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    r = classify(p, 503, "Sending failed.");
    assert_cause(&r, PROVIDER_C_5XX, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    assert_string_equal(r.error, "HTTP 503: Sending failed.");
    r = classify(p, 400, "");
    assert_string_equal(r.error, "HTTP 400");
    /* Anything that may echo the request (password, text, a code) is withheld. */
    r = classify(p, 502, "<html>GET /cgi-bin/sendsms?username=u&amp;pw=s3cret</html>");
    assert_string_equal(r.error, "HTTP 502 (answer withheld: it may echo the request)");
    r = classify(p, 400, "bad password");
    assert_string_equal(r.error, "HTTP 400 (answer withheld: it may echo the request)");
    r = classify(p, 400, "rejected text=hello");
    assert_string_equal(r.error, "HTTP 400 (answer withheld: it may echo the request)");
    r = classify(p, 400, "rejected: Your code is 1234");
    assert_string_equal(r.error, "HTTP 400 (answer withheld: it may echo the request)");
    r = classify(p, 400, "error 123 at 45");
    assert_string_equal(r.error, "HTTP 400: error 123 at 45");
    /* Only the first 100 bytes are kept (and looked at). */
    memset(long_body, 'x', sizeof(long_body) - 1);
    long_body[sizeof(long_body) - 1] = '\0';
    memcpy(long_body + 150, "s3cret", 6);
    r = classify(p, 500, long_body);
    assert_int_equal(strlen(r.error), strlen("HTTP 500: ") + 100);
    check_common_statuses(p);
    provider_free(p);
}

/* ---- twilio ---- */

static struct provider_conf twilio_conf(void)
{
    static char sid[] = AC_SID, token[] = "auth-token-1";
    struct provider_conf c;

    memset(&c, 0, sizeof(c));
    c.type = CFG_PROVIDER_TWILIO;
    snprintf(c.base_url, sizeof(c.base_url), "https://api.twilio.com");
    snprintf(c.from, sizeof(c.from), "+15557654321");
    c.user = sid;
    c.pass = token;
    return c;
}

static void test_twilio_account_token_and_from(void **state)
{
    struct provider_conf c = twilio_conf();
    struct provider *p = must_make(provider_twilio_new, &c);
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    assert_string_equal(p->ops->name, "twilio");
    prepare_ok(p, &m, &req);
    assert_string_equal(req.url, "https://api.twilio.com/2010-04-01/Accounts/" AC_SID "/Messages.json");
    assert_int_equal(req.post, 1);
    assert_string_equal(req.content_type, "application/x-www-form-urlencoded");
    assert_string_equal(req.user, AC_SID);
    assert_string_equal(req.pass, "auth-token-1");
    assert_int_equal(req.n_headers, 0);
    assert_string_equal(req.body, "To=%2B15551234567&From=%2B15557654321&Body=Your%20code%20is%20123456");
    provider_free(p);
}

static void test_twilio_api_key_and_service(void **state)
{
    static char key[] = SK_SID, secret[] = "key-secret-1";
    struct provider_conf c = twilio_conf();
    struct provider *p;
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    c.key_sid = key;
    c.key_secret = secret;
    snprintf(c.messaging_service, sizeof(c.messaging_service), MG_SID);
    p = must_make(provider_twilio_new, &c);
    prepare_ok(p, &m, &req);
    /* The URL still names the account; the key authenticates; the service, not From, sends. */
    assert_string_equal(req.url, "https://api.twilio.com/2010-04-01/Accounts/" AC_SID "/Messages.json");
    assert_string_equal(req.user, SK_SID);
    assert_string_equal(req.pass, "key-secret-1");
    assert_string_equal(req.body, "To=%2B15551234567&MessagingServiceSid=" MG_SID "&Body=Your%20code%20is%20123456");
    provider_free(p);
}

static void test_twilio_form_encoding_and_callback(void **state)
{
    struct provider_conf c = twilio_conf();
    struct provider *p;
    struct provider_http req;
    struct sms m = sms_plain();

    (void)state;
    snprintf(c.callback_url, sizeof(c.callback_url), "https://otpd.example.com");
    p = must_make(provider_twilio_new, &c);
    m.text = "a b&c=d+e%\n\xc3\xa9~";
    m.dlr_query = "id=m1&exp=1700086400&tag=AbC-_9";
    prepare_ok(p, &m, &req);
    assert_string_equal(req.body, "To=%2B15551234567&From=%2B15557654321&Body=a%20b%26c%3Dd%2Be%25%0A%C3%A9~"
                                  "&StatusCallback=https%3A%2F%2Fotpd.example.com%2Fv1%2Fdlr%2Ftwilio%3Fid%3Dm1"
                                  "%26exp%3D1700086400%26tag%3DAbC-_9");
    /* No report URL for this message: no StatusCallback. */
    m.dlr_query = NULL;
    prepare_ok(p, &m, &req);
    assert_string_equal(req.body, "To=%2B15551234567&From=%2B15557654321&Body=a%20b%26c%3Dd%2Be%25%0A%C3%A9~");
    provider_free(p);
}

static void test_twilio_too_long(void **state)
{
    struct provider_conf c = twilio_conf();
    struct provider *p = must_make(provider_twilio_new, &c);
    struct provider_http req;
    struct provider_result res;
    struct sms m = sms_plain();
    char text[PROVIDER_BODY_MAX / 3 + 10];
    int done = -1;

    (void)state;
    memset(text, '&', sizeof(text) - 1); /* each one "%26" */
    text[sizeof(text) - 1] = '\0';
    m.text = text;
    memset(&req, 0, sizeof(req));
    memset(&res, 0, sizeof(res));
    assert_int_equal(p->ops->prepare(p->self, &m, &req, &done, &res), OTP_EINVAL);
    provider_free(p);
}

static void test_twilio_classify(void **state)
{
    struct provider_conf c = twilio_conf();
    struct provider *p = must_make(provider_twilio_new, &c);
    struct provider_result r;

    (void)state;
    r = classify(p, 201, "{\"sid\":\"SM0123\",\"status\":\"queued\"}");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.provider_id, "SM0123");
    assert_string_equal(r.error, "");
    r = classify(p, 201, "<html>accepted</html>");
    assert_cause(&r, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    assert_string_equal(r.provider_id, "");
    r = classify(p, 400, "{\"code\":21211,\"message\":\"The 'To' number is not valid.\",\"sid\":\"SMx\"}");
    assert_cause(&r, PROVIDER_C_4XX, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 400: twilio error 21211");
    assert_string_equal(r.provider_id, "");
    r = classify(p, 429, "{\"code\":20429,\"message\":\"Too Many Requests\"}");
    assert_cause(&r, PROVIDER_C_429, PROVIDER_TRANSIENT, PROVIDER_UNREACHED, 1);
    assert_string_equal(r.error, "HTTP 429: twilio error 20429");
    assert_int_equal(r.retry_after_ms, 0);
    r = classify(p, 500, "{\"code\":20500}");
    assert_cause(&r, PROVIDER_C_5XX, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    assert_string_equal(r.error, "HTTP 500: twilio error 20500");
    /* A code that is not an integer, or no JSON at all: the status alone. */
    r = classify(p, 401, "{\"code\":\"20003\"}");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.error, "HTTP 401");
    r = classify(p, 502, "<html>Bad Gateway</html>");
    assert_cause(&r, PROVIDER_C_5XX, PROVIDER_TRANSIENT, PROVIDER_UNKNOWN, 1);
    assert_string_equal(r.error, "HTTP 502");
    check_common_statuses(p);
    provider_free(p);
}

/* Twilio's refusals about this account or sender and the destination are
 * route refusals (another provider may reach the number); those about the
 * number itself stay http_4xx; the credentials' are route refusals. */
static void test_twilio_classify_route_or_number(void **state)
{
    static const struct {
        long status;
        const char *body;
        enum provider_cause cause;
        const char *error;
    } cases[] = {
        /* the account may not send to the number's region */
        {400, "{\"code\":21408,\"message\":\"Permission to send an SMS has not been enabled for the region\"}",
         PROVIDER_C_ROUTE, "HTTP 400: twilio error 21408"},
        /* not reachable by SMS from this From or service */
        {400, "{\"code\":21612,\"message\":\"The 'To' phone number is not currently reachable via SMS\"}",
         PROVIDER_C_ROUTE, "HTTP 400: twilio error 21612"},
        /* this From cannot send to the destination */
        {400, "{\"code\":21606,\"message\":\"The From phone number is not a valid message-capable number\"}",
         PROVIDER_C_ROUTE, "HTTP 400: twilio error 21606"},
        /* the credentials or the account */
        {401, "{\"code\":20003,\"message\":\"Authenticate\",\"status\":401}", PROVIDER_C_ROUTE,
         "HTTP 401: twilio error 20003"},
        {403, "{\"code\":20003,\"message\":\"Forbidden\",\"status\":403}", PROVIDER_C_ROUTE,
         "HTTP 403: twilio error 20003"},
        {403, "<html>Forbidden</html>", PROVIDER_C_ROUTE, "HTTP 403"},
        /* the number itself: no provider would do better */
        {400, "{\"code\":21211,\"message\":\"Invalid 'To' Phone Number\"}", PROVIDER_C_4XX,
         "HTTP 400: twilio error 21211"},
        {400, "{\"code\":21610,\"message\":\"Attempt to send to unsubscribed recipient\"}", PROVIDER_C_4XX,
         "HTTP 400: twilio error 21610"},
        {400, "{\"code\":21614,\"message\":\"'To' number is not a valid mobile number\"}", PROVIDER_C_4XX,
         "HTTP 400: twilio error 21614"},
        /* a route code that is not an integer is no code */
        {400, "{\"code\":\"21408\"}", PROVIDER_C_4XX, "HTTP 400"},
        /* a route code only turns a refusal: the status says the rest */
        {500, "{\"code\":21408}", PROVIDER_C_5XX, "HTTP 500: twilio error 21408"},
        {429, "{\"code\":21612}", PROVIDER_C_429, "HTTP 429: twilio error 21612"},
        {201, "{\"sid\":\"SM1\",\"code\":21408}", PROVIDER_C_ACCEPTED, ""},
    };
    struct provider_conf c = twilio_conf();
    struct provider *p = must_make(provider_twilio_new, &c);
    struct provider_result r;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = classify(p, cases[i].status, cases[i].body);
        if (r.cause != cases[i].cause || strcmp(r.error, cases[i].error) != 0)
            fail_msg("%ld %s: cause %d (%s), want %d (%s)", cases[i].status, cases[i].body, (int)r.cause, r.error,
                     (int)cases[i].cause, cases[i].error);
        assert_int_equal(r.outcome, provider_cause_row(r.cause)->outcome);
    }
    r = classify(p, 400, "{\"code\":21408}");
    assert_cause(&r, PROVIDER_C_ROUTE, PROVIDER_PERMANENT, PROVIDER_UNREACHED, 0);
    assert_string_equal(r.provider_id, "");
    provider_free(p);
}

/* ---- the cause table ---- */

/*
 * Every cause's row, written out by hand: its metric label, its money, its
 * retry, its ledger outcome and whether it fails over to the route's next
 * provider (1 for the provider's health, transport and credentials and a
 * destination it cannot reach; 0 for the number, the code, our own side,
 * rate and an odd status).
 */
static void test_cause_table(void **state)
{
    static const struct {
        enum provider_cause c;
        const char *name;
        enum provider_class cls;
        int retry;
        enum provider_outcome outcome;
        int failover;
        enum breaker_event health;
    } rows[] = {
        {PROVIDER_C_ACCEPTED, "accepted", PROVIDER_ACCEPTED, 0, PROVIDER_SENT, 0, BREAKER_SUCCESS},
        {PROVIDER_C_TIMEOUT, "timeout", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
        {PROVIDER_C_BROKEN, "broken", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
        {PROVIDER_C_408, "http_408", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
        {PROVIDER_C_5XX, "http_5xx", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
        {PROVIDER_C_ODD_STATUS, "http_other", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 0, BREAKER_SUCCESS},
        {PROVIDER_C_429, "http_429", PROVIDER_UNREACHED, 1, PROVIDER_TRANSIENT, 0, BREAKER_NEUTRAL},
        {PROVIDER_C_4XX, "http_4xx", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_SUCCESS},
        {PROVIDER_C_UNSENT, "unsent", PROVIDER_UNREACHED, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
        {PROVIDER_C_LOCAL, "local", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_NEUTRAL},
        {PROVIDER_C_EXPIRED, "expired", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_NEUTRAL},
        {PROVIDER_C_ROUTE, "route", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 1, BREAKER_SUCCESS},
    };
    const struct provider_cause_info *ci;
    struct provider_result res;
    size_t i, j;

    (void)state;
    /* One row here for each cause, in the enum's order. */
    assert_int_equal(sizeof(rows) / sizeof(rows[0]), PROVIDER_C_COUNT);
    for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        assert_int_equal(rows[i].c, i);
        ci = provider_cause_row(rows[i].c);
        assert_non_null(ci->name);
        if (strcmp(ci->name, rows[i].name) != 0 || ci->cls != rows[i].cls || ci->retry != rows[i].retry ||
            ci->outcome != rows[i].outcome || ci->failover != rows[i].failover || ci->health != rows[i].health)
            fail_msg("cause %s: {%s, class %d, retry %d, outcome %d, failover %d, health %d}, want {class %d, "
                     "retry %d, outcome %d, failover %d, health %d}",
                     rows[i].name, ci->name, (int)ci->cls, ci->retry, (int)ci->outcome, ci->failover,
                     (int)ci->health, (int)rows[i].cls, rows[i].retry, (int)rows[i].outcome, rows[i].failover,
                     (int)rows[i].health);
        /* provider_set_cause takes the row's outcome. */
        memset(&res, 0, sizeof(res));
        provider_set_cause(&res, rows[i].c);
        assert_int_equal(res.cause, rows[i].c);
        assert_int_equal(res.outcome, rows[i].outcome);
        /* Metric labels are distinct. */
        for (j = 0; j < i; j++)
            assert_string_not_equal(provider_cause_row(rows[j].c)->name, ci->name);
    }
    /* A cause past the table reads as broken. */
    assert_ptr_equal(provider_cause_row(PROVIDER_C_COUNT), provider_cause_row(PROVIDER_C_BROKEN));
}

/* ---- file, and the registry ---- */

static void test_file_sink(void **state)
{
    char dir[] = "/tmp/test_provider.XXXXXX", err[OTP_ERR_LEN] = "", line[512];
    struct provider_conf c;
    struct provider *p;
    struct provider_http req;
    struct provider_result res;
    struct sms m = sms_plain();
    json_t *j;
    FILE *f;
    int done = 0;

    (void)state;
    assert_non_null(mkdtemp(dir));
    memset(&c, 0, sizeof(c));
    c.type = CFG_PROVIDER_FILE;
    snprintf(c.path, sizeof(c.path), "%s/none/sms.jsonl", dir);
    assert_null(provider_file_new(&c, err));
    assert_non_null(strstr(err, "provider: cannot open "));
    snprintf(c.path, sizeof(c.path), "%s/sms.jsonl", dir);
    p = must_make(provider_new, &c);
    assert_string_equal(p->ops->name, "file");
    memset(&req, 0, sizeof(req));
    memset(&res, 0, sizeof(res));
    assert_int_equal(p->ops->prepare(p->self, &m, &req, &done, &res), OTP_OK);
    assert_int_equal(done, 1);
    assert_cause(&res, PROVIDER_C_ACCEPTED, PROVIDER_SENT, PROVIDER_ACCEPTED, 0);
    provider_free(p);
    assert_non_null(f = fopen(c.path, "r"));
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_non_null(j = json_loads(line, 0, NULL));
    assert_string_equal(json_string_value(json_object_get(j, "id")), "m1");
    assert_string_equal(json_string_value(json_object_get(j, "to")), "+15551234567");
    assert_string_equal(json_string_value(json_object_get(j, "text")), "Your code is 123456");
    assert_true(json_is_integer(json_object_get(j, "ts_ms")));
    json_decref(j);
    unlink(c.path);
    rmdir(dir);
}

static void test_registry_picks_the_adapter(void **state)
{
    struct provider_conf w = webhook_conf(NULL, NULL), k = kannel_conf("u", "p"), t = twilio_conf();
    struct provider *p;

    (void)state;
    p = must_make(provider_new, &w);
    assert_string_equal(p->ops->name, "webhook");
    provider_free(p);
    p = must_make(provider_new, &k);
    assert_string_equal(p->ops->name, "kannel");
    provider_free(p);
    p = must_make(provider_new, &t);
    assert_string_equal(p->ops->name, "twilio");
    provider_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_webhook_json_post),
        cmocka_unit_test(test_webhook_bearer_and_signature),
        cmocka_unit_test(test_webhook_signature_alone),
        cmocka_unit_test(test_webhook_classify),
        cmocka_unit_test(test_kannel_query_escaped),
        cmocka_unit_test(test_kannel_url_with_query_and_unicode),
        cmocka_unit_test(test_kannel_configured_fields),
        cmocka_unit_test(test_kannel_validity_from_life),
        cmocka_unit_test(test_kannel_delivery_reports),
        cmocka_unit_test(test_kannel_too_long),
        cmocka_unit_test(test_kannel_classify),
        cmocka_unit_test(test_twilio_account_token_and_from),
        cmocka_unit_test(test_twilio_api_key_and_service),
        cmocka_unit_test(test_twilio_form_encoding_and_callback),
        cmocka_unit_test(test_twilio_too_long),
        cmocka_unit_test(test_twilio_classify),
        cmocka_unit_test(test_twilio_classify_route_or_number),
        cmocka_unit_test(test_cause_table),
        cmocka_unit_test(test_file_sink),
        cmocka_unit_test(test_registry_picks_the_adapter),
    };

    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
