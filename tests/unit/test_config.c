/*
 * Unit tests of config_parse, config_free and config_price: the dev config
 * parses whole with every field where it belongs; each provider type;
 * every class of mistake gives one "FILE: path.to.key: what" line with the
 * exact path; several mistakes are all reported at once; secrets come from
 * the environment with their minimum lengths; prices match the longest
 * prefix, then "*".
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

#include "../../src/base/config.h"
#include "../../src/base/phone.h"

/* UNITTEST functions (src/base/unittest.h): the loader's allocator
 * (config_read.c) and the price over a whole config (config_cost.c). */
void config_set_alloc(void *(*fn)(size_t));
int64_t config_price(const struct config *c, const char *phone);

#define FILE_NAME "t.json"

/* configs/dev.json, member by member, so that tests can swap one. */
#define DEV_LISTEN "\"listen\": \"127.0.0.1:8080\""
#define DEV_REDIS "\"redis\": {\"url\": \"redis://127.0.0.1:6399/0\", \"timeout_ms\": 50}"
#define DEV_LEDGER "\"ledger\": {\"path\": \"run/dev/ledger.db\"}"
#define DEV_SECRET "\"secret_env\": \"OTPD_SECRET\""
#define DEV_API_KEYS "\"api_keys\": [{\"name\": \"login-web\", \"key_env\": \"OTPD_KEY_LOGIN_WEB\"}]"
#define DEV_OTP                                                                                              \
    "\"otp\": {\"length\": 6, \"ttl\": \"5m\", \"max_attempts\": 5,\n"                                       \
    "          \"template\": \"{code} is your login code. It expires in {minutes} minutes.\"}"
#define DEV_LIMITS                                                                                           \
    "\"limits\": [\n"                                                                                        \
    "  {\"name\": \"phone_10m\", \"key\": \"phone\", \"algorithm\": \"sliding_log\", \"limit\": 3,\n"        \
    "   \"window\": \"10m\"},\n"                                                                             \
    "  {\"name\": \"phone_day\", \"key\": \"phone\", \"algorithm\": \"fixed_window\", \"limit\": 10,\n"      \
    "   \"window\": \"1d\"},\n"                                                                              \
    "  {\"name\": \"device_hour\", \"key\": \"device\", \"algorithm\": \"token_bucket\", \"limit\": 5,\n"    \
    "   \"window\": \"1h\", \"burst\": 3},\n"                                                                \
    "  {\"name\": \"ip_hour\", \"key\": \"client_ip\", \"algorithm\": \"sliding_log\", \"limit\": 20,\n"     \
    "   \"window\": \"1h\"},\n"                                                                              \
    "  {\"name\": \"caller\", \"key\": \"api_key\", \"algorithm\": \"token_bucket\", \"limit\": 100,\n"      \
    "   \"window\": \"1s\", \"burst\": 200},\n"                                                              \
    "  {\"name\": \"resend\", \"key\": \"phone\", \"algorithm\": \"resend_delay\", \"delay\": \"30s\"},\n"   \
    "  {\"name\": \"wrong_codes\", \"key\": \"phone\", \"algorithm\": \"wrong_guess_cap\", \"limit\": 10,\n" \
    "   \"window\": \"1d\"}\n"                                                                               \
    "]"
#define DEV_COST                                                                                             \
    "\"cost\": {\"currency\": \"INR\", \"prices\": {\"+91\": 20, \"+1\": 70, \"*\": 500},\n"                 \
    "           \"caps\": [{\"window\": \"1h\", \"max\": 500000}, {\"window\": \"1d\", \"max\": 5000000}]}"
#define DEV_PACER                                                                                            \
    "\"pacer\": {\"rate\": 50, \"capacity\": 500, \"max_inflight\": 32, \"retry\": {\"max\": 3, \"base\": "  \
    "\"500ms\"}}"
#define DEV_PROVIDER "\"provider\": {\"type\": \"file\", \"path\": \"run/dev/sms.jsonl\"}"

static const char DEV_JSON[] =
    "{\n  " DEV_LISTEN ",\n  " DEV_REDIS ",\n  " DEV_LEDGER ",\n  " DEV_SECRET ",\n  " DEV_API_KEYS
    ",\n  " DEV_OTP ",\n  " DEV_LIMITS ",\n  " DEV_COST ",\n  " DEV_PACER ",\n  " DEV_PROVIDER "\n}\n";

#define SECRET_VALUE "dev-secret-0123456789abcdef-0123456789abcdef"
#define API_KEY_VALUE "dev-key-login-web-0001"

/* The top-level members a test can replace, in file order. */
enum part {
    P_LISTEN,
    P_REDIS,
    P_LEDGER,
    P_SECRET,
    P_API_KEYS,
    P_OTP,
    P_LIMITS,
    P_COST,
    P_PACER,
    P_PROVIDER,
    P_EXTRA,
    P_COUNT
};

static const char *const dev_parts[P_COUNT] = {DEV_LISTEN,   DEV_REDIS,    DEV_LEDGER, DEV_SECRET,
                                               DEV_API_KEYS, DEV_OTP,      DEV_LIMITS, DEV_COST,
                                               DEV_PACER,    DEV_PROVIDER, NULL};

/*
 * Builds a config text into buf: the dev config with member part replaced
 * by text, where text uses ' for " to stay readable ("" drops the member).
 * A second replacement (part2, text2) may be given, or part2 = P_COUNT.
 */
static const char *build2(char *buf, size_t cap, enum part part, const char *text, enum part part2,
                          const char *text2)
{
    size_t n = 0;
    int i;

    n += (size_t)snprintf(buf + n, cap - n, "{");
    for (i = 0; i < P_COUNT; i++) {
        const char *s = dev_parts[i];
        int swapped = 0;
        size_t start = n;
        if (i == (int)part)
            s = text, swapped = 1;
        else if (i == (int)part2)
            s = text2, swapped = 1;
        if (s == NULL || s[0] == '\0')
            continue;
        n += (size_t)snprintf(buf + n, cap - n, "%s\n%s", n > 1 ? "," : "", s);
        assert_true(n < cap);
        if (swapped)
            for (; start < n; start++)
                if (buf[start] == '\'')
                    buf[start] = '"';
    }
    n += (size_t)snprintf(buf + n, cap - n, "\n}\n");
    assert_true(n < cap);
    return buf;
}

static const char *build(char *buf, size_t cap, enum part part, const char *text)
{
    return build2(buf, cap, part, text, P_COUNT, NULL);
}

/* Counts the lines of errors and checks that each has the form
 * "t.json: path: message". */
static int error_lines(const char *errors)
{
    const char *line, *nl;
    int n = 0;

    for (line = errors; line != NULL && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl == NULL)
            fail_msg("error text does not end in a newline: \"%s\"", line);
        if (strncmp(line, FILE_NAME ": ", strlen(FILE_NAME ": ")) != 0 ||
            memmem(line + strlen(FILE_NAME ": "), (size_t)(nl - line) - strlen(FILE_NAME ": "), ": ", 2) ==
                NULL)
            fail_msg("error line not \"FILE: path: what\": \"%.*s\"", (int)(nl - line), line);
        n++;
    }
    return n;
}

/* 1 when errors has the line "t.json: path: ..." with msg in its message. */
static int has_error(const char *errors, const char *path, const char *msg)
{
    char head[256];
    const char *line, *nl;
    size_t hn;

    hn = (size_t)snprintf(head, sizeof(head), "%s: %s: ", FILE_NAME, path);
    for (line = errors; line != NULL && *line; line = nl + 1) {
        if ((nl = strchr(line, '\n')) == NULL)
            return 0;
        if (strncmp(line, head, hn) == 0 &&
            memmem(line + hn, (size_t)(nl - line) - hn, msg, strlen(msg)) != NULL)
            return 1;
    }
    return 0;
}

/* Parses text, which must be refused with exactly n_errors lines, one of
 * them "t.json: path: ...msg...". */
static void expect_errors(const char *what, const char *text, const char *path, const char *msg, int n_errors)
{
    char *errors = NULL;
    struct config *c = config_parse(text, FILE_NAME, &errors);
    int n;

    if (c != NULL) {
        config_free(c);
        fail_msg("%s: accepted, want \"%s: %s\"", what, path, msg);
    }
    if (errors == NULL)
        fail_msg("%s: refused with no error text", what);
    n = error_lines(errors);
    if (!has_error(errors, path, msg) || (n_errors > 0 && n != n_errors)) {
        fprintf(stderr, "%s: got %d line(s):\n%s", what, n, errors);
        free(errors);
        fail_msg("%s: want %d line(s) with \"%s: %s: ...%s...\"", what, n_errors, FILE_NAME, path, msg);
    }
    free(errors);
}

/* Parses text, which must be accepted. The caller frees the config. */
static struct config *expect_ok(const char *what, const char *text)
{
    char *errors = NULL;
    struct config *c = config_parse(text, FILE_NAME, &errors);

    if (c == NULL) {
        fprintf(stderr, "%s", errors ? errors : "(no error text)\n");
        free(errors);
        fail_msg("%s: refused", what);
    }
    assert_null(errors);
    return c;
}

/* Twilio SIDs of the right shape: two letters and 32 hex digits. */
#define TWILIO_AC "AC0123456789abcdef0123456789abcdef"
#define TWILIO_SK "SK0123456789abcdef0123456789abcdef"
#define TWILIO_MG "MG0123456789abcdef0123456789ABCDEF"

static int setup(void **state)
{
    (void)state;
    if (setenv("OTPD_SECRET", SECRET_VALUE, 1) || setenv("OTPD_KEY_LOGIN_WEB", API_KEY_VALUE, 1) ||
        setenv("OTPD_TEST_KEY2", "second-api-key-00002", 1) || setenv("KANNEL_USER", "kuser", 1) ||
        setenv("KANNEL_PASS", "kpass", 1) || setenv("TWILIO_SID", TWILIO_AC, 1) ||
        setenv("TWILIO_TOKEN", "tok456", 1) || setenv("TWILIO_KEY_SID", TWILIO_SK, 1) ||
        setenv("TWILIO_KEY_SECRET", "key-secret-789", 1) || setenv("TWILIO_SHORT_SID", "AC0123", 1) ||
        setenv("TWILIO_AC_AS_KEY", TWILIO_AC, 1) ||
        setenv("TWILIO_NOT_HEX", "ACg123456789abcdef0123456789abcdef", 1) ||
        setenv("WEBHOOK_TOKEN", "webhook-bearer-token-0001", 1) ||
        setenv("WEBHOOK_TOKEN_SPACE", "webhook bearer token 0001", 1) ||
        setenv("OTPD_TEST_SECRET_31", "0123456789012345678901234567890", 1) ||
        setenv("OTPD_TEST_SECRET_32", "01234567890123456789012345678901", 1) ||
        setenv("OTPD_TEST_KEY_15", "012345678901234", 1) ||
        setenv("OTPD_TEST_KEY_16", "0123456789012345", 1) || setenv("OTPD_TEST_EMPTY", "", 1) ||
        unsetenv("OTPD_TEST_UNSET") || unsetenv("OTPD_TEST_UNSET_TOKEN"))
        return -1;
    return 0;
}

static void test_dev_config(void **state)
{
    struct config *c = expect_ok("dev.json", DEV_JSON);
    const struct cfg_rule *r;

    (void)state;
    assert_string_equal(c->http.listen_host, "127.0.0.1");
    assert_int_equal(c->http.listen_port, 8080);
    assert_int_equal(c->http.threads, 32);
    assert_string_equal(c->redis.host, "127.0.0.1");
    assert_int_equal(c->redis.port, 6399);
    assert_int_equal(c->redis.db, 0);
    assert_null(c->redis.password);
    assert_int_equal(c->redis.timeout_ms, 50);
    assert_int_equal(c->redis.breaker_failures, 5);
    assert_int_equal(c->redis.breaker_open_ms, 2000);
    assert_string_equal(c->ledger.path, "run/dev/ledger.db");

    assert_non_null(c->secret);
    assert_int_equal(c->secret_len, strlen(SECRET_VALUE));
    assert_memory_equal(c->secret, SECRET_VALUE, c->secret_len);

    assert_int_equal(c->keys.n_api_keys, 1);
    assert_string_equal(c->keys.api_keys[0].name, "login-web");
    assert_string_equal(c->keys.api_keys[0].key, API_KEY_VALUE);

    assert_int_equal(c->otp.length, 6);
    assert_int_equal(c->otp.ttl_ms, 300000);
    assert_int_equal(c->otp.max_attempts, 5);
    assert_string_equal(c->otp.tmpl, "{code} is your login code. It expires in {minutes} minutes.");

    assert_int_equal(c->limits.n_rules, 7);
    r = &c->limits.rules[0];
    assert_string_equal(r->name, "phone_10m");
    assert_int_equal(r->key, CFG_KEY_PHONE);
    assert_int_equal(r->algo, CFG_ALGO_SLIDING_LOG);
    assert_int_equal(r->limit, 3);
    assert_int_equal(r->window_ms, 600000);
    assert_int_equal(r->burst, 3);
    assert_int_equal(r->shadow, 0);
    assert_int_equal(r->local_fallback, 0);
    r = &c->limits.rules[1];
    assert_string_equal(r->name, "phone_day");
    assert_int_equal(r->key, CFG_KEY_PHONE);
    assert_int_equal(r->algo, CFG_ALGO_FIXED_WINDOW);
    assert_int_equal(r->limit, 10);
    assert_int_equal(r->window_ms, 86400000);
    assert_int_equal(r->burst, 10);
    r = &c->limits.rules[2];
    assert_string_equal(r->name, "device_hour");
    assert_int_equal(r->key, CFG_KEY_DEVICE);
    assert_int_equal(r->algo, CFG_ALGO_TOKEN_BUCKET);
    assert_int_equal(r->limit, 5);
    assert_int_equal(r->window_ms, 3600000);
    assert_int_equal(r->burst, 3);
    r = &c->limits.rules[3];
    assert_string_equal(r->name, "ip_hour");
    assert_int_equal(r->key, CFG_KEY_CLIENT_IP);
    assert_int_equal(r->algo, CFG_ALGO_SLIDING_LOG);
    assert_int_equal(r->limit, 20);
    assert_int_equal(r->window_ms, 3600000);
    r = &c->limits.rules[4];
    assert_string_equal(r->name, "caller");
    assert_int_equal(r->key, CFG_KEY_API_KEY);
    assert_int_equal(r->algo, CFG_ALGO_TOKEN_BUCKET);
    assert_int_equal(r->limit, 100);
    assert_int_equal(r->window_ms, 1000);
    assert_int_equal(r->burst, 200);
    r = &c->limits.rules[5];
    assert_string_equal(r->name, "resend");
    assert_int_equal(r->key, CFG_KEY_PHONE);
    assert_int_equal(r->algo, CFG_ALGO_RESEND_DELAY);
    assert_int_equal(r->limit, 1);
    assert_int_equal(r->window_ms, 30000);
    r = &c->limits.rules[6];
    assert_string_equal(r->name, "wrong_codes");
    assert_int_equal(r->key, CFG_KEY_PHONE);
    assert_int_equal(r->algo, CFG_ALGO_WRONG_GUESS_CAP);
    assert_int_equal(r->limit, 10);
    assert_int_equal(r->window_ms, 86400000);

    assert_string_equal(c->limits.currency, "INR");
    assert_int_equal(c->limits.n_prices, 3);
    assert_int_equal(c->limits.n_caps, 2);
    assert_int_equal(c->limits.caps[0].window_ms, 3600000);
    assert_int_equal(c->limits.caps[0].max_minor, 500000);
    assert_int_equal(c->limits.caps[1].window_ms, 86400000);
    assert_int_equal(c->limits.caps[1].max_minor, 5000000);

    assert_int_equal(c->pacer.rate, 50);
    assert_int_equal(c->pacer.capacity, 500);
    assert_int_equal(c->pacer.max_inflight, 32);
    assert_int_equal(c->pacer.retry_max, 3);
    assert_int_equal(c->pacer.retry_base_ms, 500);
    assert_int_equal(c->pacer.timeout_ms, 10000);
    assert_int_equal(c->pacer.on_restart_sending, CFG_SENDING_RESEND);

    assert_int_equal(c->provider.type, CFG_PROVIDER_FILE);
    assert_string_equal(c->provider.path, "run/dev/sms.jsonl");
    assert_string_equal(c->provider.callback_url, "");
    assert_null(c->provider.user);
    assert_null(c->provider.pass);
    config_free(c);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(config_key_name(CFG_KEY_PHONE), "phone");
    assert_string_equal(config_key_name(CFG_KEY_DEVICE), "device");
    assert_string_equal(config_key_name(CFG_KEY_CLIENT_IP), "client_ip");
    assert_string_equal(config_key_name(CFG_KEY_API_KEY), "api_key");
    assert_string_equal(config_key_name(CFG_KEY_GLOBAL), "global");
    assert_string_equal(config_algo_name(CFG_ALGO_SLIDING_LOG), "sliding_log");
    assert_string_equal(config_algo_name(CFG_ALGO_FIXED_WINDOW), "fixed_window");
    assert_string_equal(config_algo_name(CFG_ALGO_TOKEN_BUCKET), "token_bucket");
    assert_string_equal(config_algo_name(CFG_ALGO_RESEND_DELAY), "resend_delay");
    assert_string_equal(config_algo_name(CFG_ALGO_WRONG_GUESS_CAP), "wrong_guess_cap");
}

static void test_minimal_and_options(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    /* Only the required members: every optional one takes its default. */
    c = expect_ok("minimal", "{\"listen\": \"0.0.0.0:80\", \"redis\": {\"url\": \"redis://localhost\"},"
                             " \"ledger\": {\"path\": \"l.db\"}, \"secret_env\": \"OTPD_SECRET\","
                             " \"api_keys\": [{\"name\": \"k\", \"key_env\": \"OTPD_KEY_LOGIN_WEB\"}],"
                             " \"otp\": {}, \"provider\": {\"type\": \"file\", \"path\": \"s.jsonl\"}}");
    assert_string_equal(c->http.listen_host, "0.0.0.0");
    assert_int_equal(c->http.listen_port, 80);
    assert_string_equal(c->redis.host, "localhost");
    assert_int_equal(c->redis.port, 6379);
    assert_int_equal(c->redis.db, 0);
    assert_int_equal(c->redis.timeout_ms, 50);
    assert_int_equal(c->otp.length, 6);
    assert_int_equal(c->otp.ttl_ms, 300000);
    assert_int_equal(c->limits.n_rules, 0);
    assert_int_equal(c->limits.n_prices, 0);
    assert_int_equal(c->limits.n_caps, 0);
    assert_int_equal(c->pacer.rate, 50);
    assert_int_equal(c->pacer.retry_max, 3);
    assert_int_equal(config_price(c, "+919812345678"), -1);
    config_free(c);

    /* Redis with a password (from the environment), a port and a database. */
    setenv("REDIS_PASS", "s3cret", 1);
    c = expect_ok("redis url",
                  build(buf, sizeof(buf), P_REDIS,
                        "'redis': {'url': 'redis://redis.example:6380/3', 'password_env': 'REDIS_PASS',"
                        " 'timeout_ms': 10000, 'breaker_failures': 1, 'breaker_open': '1m'}"));
    assert_string_equal(c->redis.host, "redis.example");
    assert_int_equal(c->redis.port, 6380);
    assert_int_equal(c->redis.db, 3);
    assert_non_null(c->redis.password);
    assert_string_equal(c->redis.password, "s3cret");
    assert_int_equal(c->redis.timeout_ms, 10000);
    assert_int_equal(c->redis.breaker_failures, 1);
    assert_int_equal(c->redis.breaker_open_ms, 60000);
    config_free(c);

    c = expect_ok("redis db 15", build(buf, sizeof(buf), P_REDIS, "'redis': {'url': 'redis://h:1/15'}"));
    assert_string_equal(c->redis.host, "h");
    assert_int_equal(c->redis.port, 1);
    assert_int_equal(c->redis.db, 15);
    config_free(c);

    /* A bracketed IPv6 listen address. */
    c = expect_ok("listen [::1]", build(buf, sizeof(buf), P_LISTEN, "'listen': '[::1]:65535'"));
    assert_string_equal(c->http.listen_host, "::1");
    assert_int_equal(c->http.listen_port, 65535);
    config_free(c);

    /* HTTPS on listen and the probes on a second listener. */
    c = expect_ok("tls", build(buf, sizeof(buf), P_EXTRA,
                               "'tls': {'cert': 'c.pem', 'key': 'k.pem'}, 'listen_internal': '[::1]:9101'"));
    assert_int_equal(c->tls.on, 1);
    assert_string_equal(c->tls.cert, "c.pem");
    assert_string_equal(c->tls.key, "k.pem");
    assert_string_equal(c->http.listen_internal_host, "::1");
    assert_int_equal(c->http.listen_internal_port, 9101);
    config_free(c);
    c = expect_ok("no tls", DEV_JSON);
    assert_int_equal(c->tls.on, 0);
    assert_int_equal(c->http.listen_internal_port, 0);
    config_free(c);

    /* Pacer and otp extremes, and the other restart policy. */
    c = expect_ok("pacer",
                  build2(buf, sizeof(buf), P_PACER,
                         "'pacer': {'rate': 10000, 'capacity': 1, 'max_inflight': 1024, 'timeout': '2s',"
                         " 'on_restart_sending': 'fail', 'retry': {'max': 0, 'base': '1ms'}}",
                         P_OTP,
                         "'otp': {'length': 10, 'ttl': '1h', 'max_attempts': 100, 'template': '{code}'}"));
    assert_int_equal(c->pacer.rate, 10000);
    assert_int_equal(c->pacer.capacity, 1);
    assert_int_equal(c->pacer.max_inflight, 1024);
    assert_int_equal(c->pacer.timeout_ms, 2000);
    assert_int_equal(c->pacer.on_restart_sending, CFG_SENDING_FAIL);
    assert_int_equal(c->pacer.retry_max, 0);
    assert_int_equal(c->pacer.retry_base_ms, 1);
    assert_int_equal(c->otp.length, 10);
    assert_int_equal(c->otp.ttl_ms, 3600000);
    assert_int_equal(c->otp.max_attempts, 100);
    assert_string_equal(c->otp.tmpl, "{code}");
    config_free(c);

    c = expect_ok("otp low",
                  build(buf, sizeof(buf), P_OTP, "'otp': {'length': 4, 'ttl': '10s', 'max_attempts': 1}"));
    assert_int_equal(c->otp.length, 4);
    assert_int_equal(c->otp.ttl_ms, 10000);
    assert_int_equal(c->otp.max_attempts, 1);
    config_free(c);
}

/* Redis behind Sentinel: the sentinels' addresses and the master's name;
 * the URL is then optional and gives only the database. */
static void test_sentinel(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("sentinel", build(buf, sizeof(buf), P_REDIS,
                                    "'redis': {'sentinel': {'addrs': ['10.0.0.1:26379', '[::1]:26380'],"
                                    " 'master': 'otpd'}}"));
    assert_int_equal(c->redis.n_sentinels, 2);
    assert_string_equal(c->redis.sentinel_hosts[0], "10.0.0.1");
    assert_int_equal(c->redis.sentinel_ports[0], 26379);
    assert_string_equal(c->redis.sentinel_hosts[1], "::1");
    assert_int_equal(c->redis.sentinel_ports[1], 26380);
    assert_string_equal(c->redis.master, "otpd");
    assert_int_equal(c->redis.db, 0);
    config_free(c);
    c = expect_ok("sentinel and db", build(buf, sizeof(buf), P_REDIS,
                                           "'redis': {'url': 'redis://ignored/4', 'sentinel': {'addrs': ['h:1'],"
                                           " 'master': 'm'}}"));
    assert_int_equal(c->redis.db, 4);
    config_free(c);
    expect_errors("no master", build(buf, sizeof(buf), P_REDIS, "'redis': {'sentinel': {'addrs': ['h:1']}}"),
                  "redis.sentinel.master", "is required", 1);
    expect_errors("no port", build(buf, sizeof(buf), P_REDIS,
                                   "'redis': {'sentinel': {'addrs': ['h:1', 'h'], 'master': 'm'}}"),
                  "redis.sentinel.addrs.1", "HOST:PORT", 1);
    expect_errors("empty", build(buf, sizeof(buf), P_REDIS, "'redis': {'sentinel': {'addrs': [], 'master': 'm'}}"),
                  "redis.sentinel.addrs", "1 to 8", 1);
    expect_errors("no url, no sentinel", build(buf, sizeof(buf), P_REDIS, "'redis': {'timeout_ms': 5}"),
                  "redis.url", "is required", 1);
}

/* The rendered text must fit one pacer message (CFG_TEXT_MAX bytes) with
 * the longest code and an app hash's line (12 bytes): 46 ten-digit codes
 * fit, 47 do not. */
static void test_template_fits(void **state)
{
    char buf[8192], otp[512], tmpl[400] = "";
    int i;

    (void)state;
    for (i = 0; i < 46; i++)
        memcpy(tmpl + i * 6, "{code}", 7);
    snprintf(otp, sizeof(otp), "'otp': {'length': 10, 'template': '%s'}", tmpl);
    config_free(expect_ok("46 codes", build(buf, sizeof(buf), P_OTP, otp)));
    memcpy(tmpl + 46 * 6, "{code}", 7);
    snprintf(otp, sizeof(otp), "'otp': {'length': 10, 'template': '%s'}", tmpl);
    expect_errors("47 codes", build(buf, sizeof(buf), P_OTP, otp), "otp.template", "renders longer than 479", 1);
}

static void test_rule_fields(void **state)
{
    char buf[8192];
    struct config *c;
    const struct cfg_rule *r;

    (void)state;
    c = expect_ok("rules",
                  build(buf, sizeof(buf), P_LIMITS,
                        "'limits': ["
                        "{'name': 'tb', 'key': 'global', 'algorithm': 'token_bucket', 'limit': 7,"
                        " 'window': '2h'},"
                        "{'name': 'shadow_ip', 'key': 'client_ip', 'algorithm': 'fixed_window',"
                        " 'limit': 1000000000, 'window': '366d', 'mode': 'shadow',"
                        " 'if_store_down': 'fail_closed'},"
                        "{'name': 'enf', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1000,"
                        " 'window': '500ms', 'mode': 'enforce', 'if_store_down': 'fail_closed'},"
                        "{'name': 'rd', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '45s',"
                        " 'mode': 'shadow'},"
                        "{'name': 'wg', 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'limit': 1,"
                        " 'window': '15m'},"
                        "{'name': 'dev_fb', 'key': 'device', 'algorithm': 'token_bucket', 'limit': 9,"
                        " 'window': '1m', 'burst': 1}"
                        "]"));
    assert_int_equal(c->limits.n_rules, 6);
    r = &c->limits.rules[0];
    assert_string_equal(r->name, "tb");
    assert_int_equal(r->key, CFG_KEY_GLOBAL);
    assert_int_equal(r->algo, CFG_ALGO_TOKEN_BUCKET);
    assert_int_equal(r->limit, 7);
    assert_int_equal(r->window_ms, 7200000);
    assert_int_equal(r->burst, 7); /* defaults to limit */
    assert_int_equal(r->shadow, 0);
    assert_int_equal(r->local_fallback, 0);
    r = &c->limits.rules[1];
    assert_int_equal(r->key, CFG_KEY_CLIENT_IP);
    assert_int_equal(r->algo, CFG_ALGO_FIXED_WINDOW);
    assert_int_equal(r->limit, 1000000000);
    assert_int_equal(r->window_ms, 366LL * 86400000);
    assert_int_equal(r->burst, 1000000000);
    assert_int_equal(r->shadow, 1);
    assert_int_equal(r->local_fallback, 0);
    r = &c->limits.rules[2];
    assert_int_equal(r->algo, CFG_ALGO_SLIDING_LOG);
    assert_int_equal(r->limit, 1000);
    assert_int_equal(r->window_ms, 500);
    assert_int_equal(r->shadow, 0);
    assert_int_equal(r->local_fallback, 0);
    r = &c->limits.rules[3];
    assert_string_equal(r->name, "rd");
    assert_int_equal(r->algo, CFG_ALGO_RESEND_DELAY);
    assert_int_equal(r->limit, 1);
    assert_int_equal(r->window_ms, 45000); /* the delay */
    assert_int_equal(r->shadow, 1);
    r = &c->limits.rules[4];
    assert_int_equal(r->algo, CFG_ALGO_WRONG_GUESS_CAP);
    assert_int_equal(r->limit, 1);
    assert_int_equal(r->window_ms, 900000);
    assert_int_equal(r->burst, 1);
    r = &c->limits.rules[5];
    assert_int_equal(r->key, CFG_KEY_DEVICE);
    assert_int_equal(r->burst, 1);
    assert_int_equal(r->limit, 9);
    assert_int_equal(r->local_fallback, 0);
    config_free(c);

    /* An empty rule list is allowed. */
    c = expect_ok("no rules", build(buf, sizeof(buf), P_LIMITS, "'limits': []"));
    assert_int_equal(c->limits.n_rules, 0);
    config_free(c);
}

/* Each rule's Redis field: two characters from a hash of its name, the
 * same for the same name whatever the order, distinct within a config. */
static void test_redis_fields(void **state)
{
    static const char *const names[] = {"phone_10m", "phone_day", "device_hour", "ip_hour", "caller", "resend",
                                        "wrong_codes"};
    static const char *const fields[] = {"8e", "RS", "a6", "1P", "pS", "mE", "vT"};
    struct config *c = expect_ok("dev.json", DEV_JSON);
    size_t i, j;

    (void)state;
    assert_int_equal(c->limits.n_rules, 7);
    for (i = 0; i < c->limits.n_rules; i++) {
        assert_string_equal(c->limits.rules[i].name, names[i]);
        assert_string_equal(c->limits.rules[i].field, fields[i]);
        for (j = 0; j < i; j++)
            assert_string_not_equal(c->limits.rules[i].field, c->limits.rules[j].field);
    }
    config_free(c);
}

static void test_rule_count(void **state)
{
    char rules[8192], buf[16384];
    size_t n;
    int i;

    (void)state;
    /* 32 rules are allowed, 33 are not. */
    n = (size_t)snprintf(rules, sizeof(rules), "'limits': [");
    for (i = 0; i < 33; i++)
        n += (size_t)snprintf(rules + n, sizeof(rules) - n,
                              "%s{'name': 'r%d', 'key': 'global', 'algorithm': 'fixed_window', 'limit': 1,"
                              " 'window': '1s'}",
                              i ? "," : "", i);
    snprintf(rules + n, sizeof(rules) - n, "]");
    expect_errors("33 rules", build(buf, sizeof(buf), P_LIMITS, rules), "limits", "at most 32 rules", 1);
    *strstr(rules, ",{'name': 'r32'") = '\0';
    n = strlen(rules);
    snprintf(rules + n, sizeof(rules) - n, "]");
    config_free(expect_ok("32 rules", build(buf, sizeof(buf), P_LIMITS, rules)));
}

static void test_providers(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("webhook", build(buf, sizeof(buf), P_PROVIDER,
                                   "'provider': {'type': 'webhook', 'url': 'https://sms.example/send'}"));
    assert_int_equal(c->provider.type, CFG_PROVIDER_WEBHOOK);
    assert_string_equal(c->provider.url, "https://sms.example/send");
    config_free(c);

    c = expect_ok("kannel",
                  build(buf, sizeof(buf), P_PROVIDER,
                        "'provider': {'type': 'kannel', 'url': 'http://127.0.0.1:13013/cgi-bin/sendsms',"
                        " 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'from': 'OTPD',"
                        " 'callback_url': 'http://127.0.0.1:8080'}"));
    assert_int_equal(c->provider.type, CFG_PROVIDER_KANNEL);
    assert_string_equal(c->provider.url, "http://127.0.0.1:13013/cgi-bin/sendsms");
    assert_string_equal(c->provider.from, "OTPD");
    assert_string_equal(c->provider.user, "kuser");
    assert_string_equal(c->provider.pass, "kpass");
    assert_string_equal(c->provider.callback_url, "http://127.0.0.1:8080");
    config_free(c);

    c = expect_ok("twilio", build(buf, sizeof(buf), P_PROVIDER,
                                  "'provider': {'type': 'twilio', 'from': '+15550001111',"
                                  " 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN'}"));
    assert_int_equal(c->provider.type, CFG_PROVIDER_TWILIO);
    assert_string_equal(c->provider.from, "+15550001111");
    assert_string_equal(c->provider.base_url, "https://api.twilio.com"); /* the default */
    assert_string_equal(c->provider.user, TWILIO_AC);
    assert_string_equal(c->provider.pass, "tok456");
    assert_null(c->provider.key_sid);
    assert_string_equal(c->provider.messaging_service, "");
    config_free(c);

    /* An API key and a Messaging Service, as Twilio advises; the token is
     * then only for status callbacks, so it comes with callback_url. */
    c = expect_ok("twilio api key", build(buf, sizeof(buf), P_PROVIDER,
                                          "'provider': {'type': 'twilio', 'messaging_service_sid': '" TWILIO_MG "',"
                                          " 'account_sid_env': 'TWILIO_SID', 'api_key_sid_env': 'TWILIO_KEY_SID',"
                                          " 'api_key_secret_env': 'TWILIO_KEY_SECRET'}"));
    assert_string_equal(c->provider.user, TWILIO_AC);
    assert_null(c->provider.pass);
    assert_string_equal(c->provider.key_sid, TWILIO_SK);
    assert_string_equal(c->provider.key_secret, "key-secret-789");
    assert_string_equal(c->provider.messaging_service, TWILIO_MG);
    assert_string_equal(c->provider.from, "");
    config_free(c);
    c = expect_ok("twilio api key, callbacks", build(buf, sizeof(buf), P_PROVIDER,
                                          "'provider': {'type': 'twilio', 'from': 'X', 'callback_url': 'https://o',"
                                          " 'account_sid_env': 'TWILIO_SID', 'api_key_sid_env': 'TWILIO_KEY_SID',"
                                          " 'api_key_secret_env': 'TWILIO_KEY_SECRET', 'auth_token_env': 'TWILIO_TOKEN'}"));
    assert_string_equal(c->provider.key_sid, TWILIO_SK);
    assert_string_equal(c->provider.pass, "tok456");
    config_free(c);

    c = expect_ok("webhook token, signature",
                  build(buf, sizeof(buf), P_PROVIDER,
                        "'provider': {'type': 'webhook', 'url': 'https://sms.example/send', 'token_env':"
                        " 'WEBHOOK_TOKEN', 'signing_secret_env': 'OTPD_TEST_SECRET_32'}"));
    assert_string_equal(c->provider.token, "webhook-bearer-token-0001");
    assert_string_equal(c->provider.signing_secret, "01234567890123456789012345678901");
    config_free(c);

    c = expect_ok("kannel routing",
                  build(buf, sizeof(buf), P_PROVIDER,
                        "'provider': {'type': 'kannel', 'url': 'http://k/', 'username_env': 'KANNEL_USER',"
                        " 'password_env': 'KANNEL_PASS', 'from': 'OTPD', 'smsc': 'route-a.1', 'priority': 0,"
                        " 'validity': '10m', 'dlr_mask': 31, 'callback_url': 'http://o'}"));
    assert_string_equal(c->provider.smsc, "route-a.1");
    assert_int_equal(c->provider.priority, 0);
    assert_true(c->provider.validity_ms == 600000);
    assert_int_equal(c->provider.dlr_mask, 31);
    config_free(c);
    /* Unset: no smsc, no priority, validity from each code, mask 19. */
    c = expect_ok("kannel defaults",
                  build(buf, sizeof(buf), P_PROVIDER,
                        "'provider': {'type': 'kannel', 'url': 'http://k/', 'username_env': 'KANNEL_USER',"
                        " 'password_env': 'KANNEL_PASS', 'from': 'OTPD'}"));
    assert_string_equal(c->provider.smsc, "");
    assert_int_equal(c->provider.priority, -1);
    assert_true(c->provider.validity_ms == 0);
    assert_int_equal(c->provider.dlr_mask, 19);
    config_free(c);

    c = expect_ok("twilio base_url", build(buf, sizeof(buf), P_PROVIDER,
                                           "'provider': {'type': 'twilio', 'from': 'X', 'base_url': "
                                           "'http://127.0.0.1:9999', 'account_sid_env': 'TWILIO_SID',"
                                           " 'auth_token_env': 'TWILIO_TOKEN'}"));
    assert_string_equal(c->provider.base_url, "http://127.0.0.1:9999");
    config_free(c);

    /* The production-shaped config parses too. */
    c = expect_ok("otpd.json",
                  build2(buf, sizeof(buf), P_REDIS,
                         "'redis': {'url': 'redis://127.0.0.1:6379/0', 'timeout_ms': 50}", P_PROVIDER,
                         "'provider': {'type': 'kannel', 'url': "
                         "'http://127.0.0.1:13013/cgi-bin/sendsms', 'username_env': 'KANNEL_USER',"
                         " 'password_env': 'KANNEL_PASS', 'from': 'OTPD', 'callback_url': "
                         "'http://127.0.0.1:8080'}"));
    assert_int_equal(c->redis.port, 6379);
    config_free(c);
}

/* Limits that fit real traffic: the counter kinds take 10^6 (an IP's
 * 5,000 an hour among them), a sliding log its 1000, a token bucket one
 * request per ms of its window. */
static void test_counter_limits(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("10^6", build(buf, sizeof(buf), P_LIMITS,
                                "'limits': ["
                                "{'name': 'ip_hour', 'key': 'client_ip', 'algorithm': 'sliding_window_counter',"
                                " 'limit': 5000, 'window': '1h'},"
                                "{'name': 'swc', 'key': 'global', 'algorithm': 'sliding_window_counter',"
                                " 'limit': 1000000, 'window': '1d'},"
                                "{'name': 'fw', 'key': 'api_key', 'algorithm': 'fixed_window', 'limit': 1000000,"
                                " 'window': '1h'},"
                                "{'name': 'tb', 'key': 'device', 'algorithm': 'token_bucket', 'limit': 1000000,"
                                " 'window': '1h', 'burst': 1000000},"
                                "{'name': 'tb_ms', 'key': 'purpose', 'algorithm': 'token_bucket', 'limit': 1000,"
                                " 'window': '1s'},"
                                "{'name': 'log', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1000,"
                                " 'window': '1h'}]"));
    assert_int_equal(c->limits.n_rules, 6);
    assert_int_equal(c->limits.rules[0].limit, 5000);
    assert_int_equal(c->limits.rules[1].limit, 1000000);
    assert_int_equal(c->limits.rules[2].limit, 1000000);
    assert_int_equal(c->limits.rules[3].limit, 1000000);
    assert_int_equal(c->limits.rules[4].limit, 1000);
    assert_int_equal(c->limits.rules[5].limit, 1000);
    assert_null(config_limit_why(CFG_ALGO_SLIDING_LOG, 1000, 1000));
    assert_non_null(config_limit_why(CFG_ALGO_SLIDING_LOG, 3600000, 1001));
    assert_null(config_limit_why(CFG_ALGO_TOKEN_BUCKET, 1000, 1000));
    assert_non_null(config_limit_why(CFG_ALGO_TOKEN_BUCKET, 1000, 1001));
    assert_null(config_limit_why(CFG_ALGO_FIXED_WINDOW, 1000, 1000000));
    config_free(c);
}

/* One mistake: member part replaced by text gives exactly n lines, one of
 * them at path with msg. */
struct err_case {
    enum part part;
    const char *text;
    const char *path;
    const char *msg;
    int n;
};

static void run_cases(const struct err_case *cases, size_t n_cases)
{
    char buf[8192], what[300];
    size_t i;

    for (i = 0; i < n_cases; i++) {
        snprintf(what, sizeof(what), "case %zu (%s)", i, cases[i].path);
        expect_errors(what, build(buf, sizeof(buf), cases[i].part, cases[i].text), cases[i].path,
                      cases[i].msg, cases[i].n);
    }
}

#define RULE_PRE "'limits': [{'name': 'a', "

/* config_diff's callback: appends "path:reload;" to ctx (1024 bytes). */
static void diff_seen(void *ctx, const char *path, int reload)
{
    char *s = ctx;
    size_t n = strlen(s);

    snprintf(s + n, 1024 - n, "%s:%d;", path, reload);
}

static void test_rule_errors(void **state)
{
    static const struct err_case cases[] = {
        /* The third rule's window: the path counts from 0. */
        {P_LIMITS,
         "'limits': [{'name': 'a', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'window': '10m'},"
         " {'name': 'b', 'key': 'phone', 'algorithm': 'fixed_window', 'limit': 3, 'window': '1d'},"
         " {'name': 'c', 'key': 'device', 'algorithm': 'token_bucket', 'limit': 3, 'window': '1x'}]",
         "limits.2.window", "must be a duration", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'window': '0s'}]",
         "limits.0.window", "must be a duration", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3}]", "limits.0.window",
         "is required", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'window': '1m'}]", "limits.0.limit",
         "is required", 1},
        {P_LIMITS, "'limits': [{'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.name", "is required", 1},
        {P_LIMITS, RULE_PRE "'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]", "limits.0.key",
         "is required", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'limit': 1, 'window': '1m'}]", "limits.0.algorithm",
         "is required", 1},
        /* Limits by algorithm: sliding_log keeps every event, so 1000, and
         * says why and what to use instead. */
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1001, 'window': '1m'}]",
         "limits.0.limit",
         "must be at most 1000 for sliding_log, which keeps every request of its window (its memory grows with "
         "the limit); use sliding_window_counter, fixed_window or token_bucket for larger limits", 1},
        {P_LIMITS, RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 5000, 'window': '1h'}]",
         "limits.0.limit", "its memory grows with the limit", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 0, 'window': '1m'}]",
         "limits.0.limit", "from 1 to 1000", 1},
        /* A token bucket spaces requests in whole ms: one per ms at most. */
        {P_LIMITS, RULE_PRE "'key': 'global', 'algorithm': 'token_bucket', 'limit': 1001, 'window': '1s'}]",
         "limits.0.limit", "at most the window in ms for token_bucket, which spaces requests at least 1 ms apart", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'fixed_window', 'limit': 0, 'window': '1m'}]",
         "limits.0.limit", "from 1 to 1000000000", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'fixed_window', 'limit': 1000000001, 'window': '1m'}]",
         "limits.0.limit", "from 1 to 1000000000", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'fixed_window', 'limit': '3', 'window': '1m'}]",
         "limits.0.limit", "must be an integer", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'fixed_window', 'limit': 2.5, 'window': '1m'}]",
         "limits.0.limit", "must be an integer", 1},
        {P_LIMITS, RULE_PRE "'key': 'email', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.key", "\"email\" is not one of the allowed values", 1},
        /* Composite keys and the keys of issue 9. */
        {P_LIMITS, RULE_PRE "'key': ['phone', 'phone'], 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.key", "names \"phone\" twice", 1},
        {P_LIMITS, RULE_PRE "'key': ['phone', 'global'], 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.key", "global cannot be part of a composite key", 1},
        {P_LIMITS, RULE_PRE "'key': [], 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]", "limits.0.key",
         "a list of 1 to 4 key names", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone_prefix:16', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.key", "\"phone_prefix:16\" is not one of the allowed values", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone_prefix', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.key", "\"phone_prefix\" is not one of the allowed values", 1},
        {P_LIMITS, RULE_PRE "'key': ['api_key', 'purpose'], 'algorithm': 'wrong_guess_cap', 'limit': 1,"
                   " 'window': '1m'}]",
         "limits.0.key", "wrong_guess_cap rules are keyed on phone", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay', 'delay': '1m', 'on': 'both'}]",
         "limits.0.on", "resend_delay rules apply to issue only", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m', 'on': 'x'}]",
         "limits.0.on", "\"x\" is not one of the allowed values", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'leaky_bucket', 'limit': 1, 'window': '1m'}]",
         "limits.0.algorithm", "\"leaky_bucket\" is not one of the allowed values", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m',"
                  " 'mode': 'dry_run'}]",
         "limits.0.mode", "is not one of the allowed values", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m',"
                  " 'if_store_down': 'fail_open'}]",
         "limits.0.if_store_down", "is not one of the allowed values", 1},
        /* Names. */
        {P_LIMITS,
         "'limits': [{'name': 'Phone-10m', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1,"
         " 'window': '1m'}]",
         "limits.0.name", "must be 1 to 32 of a-z, 0-9 and _", 1},
        {P_LIMITS,
         "'limits': [{'name': '', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1,"
         " 'window': '1m'}]",
         "limits.0.name", "must be 1 to 32", 1},
        {P_LIMITS,
         "'limits': [{'name': 'abcdefghijklmnopqrstuvwxyz0123456', 'key': 'phone',"
         " 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]",
         "limits.0.name", "at most 32 bytes", 1},
        {P_LIMITS,
         "'limits': [{'name': 'same', 'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1,"
         " 'window': '1m'}, {'name': 'other', 'key': 'device', 'algorithm': 'sliding_log', 'limit': 1,"
         " 'window': '1m'}, {'name': 'same', 'key': 'global', 'algorithm': 'fixed_window', 'limit': 1,"
         " 'window': '1m'}]",
         "limits.2.name", "\"same\" is used twice", 1},
        /* Which rules take which fields. */
        {P_LIMITS, RULE_PRE "'key': 'device', 'algorithm': 'wrong_guess_cap', 'limit': 5, 'window': '1h'}]",
         "limits.0.key", "wrong_guess_cap rules are keyed on phone", 1},
        {P_LIMITS, RULE_PRE "'key': 'client_ip', 'algorithm': 'resend_delay', 'delay': '30s'}]",
         "limits.0.key", "resend_delay rules are keyed on phone", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'limit': 1}]",
         "limits.0.limit", "does not apply to resend_delay (it takes delay only)", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'window': '1m'}]",
         "limits.0.window", "does not apply to resend_delay (it takes delay only)", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'burst': 1}]",
         "limits.0.burst", "does not apply to resend_delay (it takes delay only)", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay'}]", "limits.0.delay", "is required",
         1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30'}]", "limits.0.delay",
         "must be a duration", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m',"
                  " 'delay': '30s'}]",
         "limits.0.delay", "applies to resend_delay only", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'burst': 5}]",
         "limits.0.burst", "applies to token_bucket only", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'fixed_window', 'limit': 3, 'window': '1m',"
                  " 'burst': 5}]",
         "limits.0.burst", "applies to token_bucket only", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'wrong_guess_cap', 'limit': 3, 'window': '1m',"
                  " 'burst': 5}]",
         "limits.0.burst", "applies to token_bucket only", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'device', 'algorithm': 'token_bucket', 'limit': 3, 'window': '1m',"
                  " 'burst': 0}]",
         "limits.0.burst", "must be an integer from 1", 1},
        /* local_fallback: never on per-phone rules, and needs local_limit. */
        {P_LIMITS,
         RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'if_store_down': 'local_fallback', 'local_limit': 1}]",
         "limits.0.if_store_down", "local_fallback is not allowed for per-phone OTP rules", 1},
        {P_LIMITS,
         "'limits': [{'name': 'a', 'key': 'global', 'algorithm': 'fixed_window', 'limit': 3,"
         " 'window': '1m'}, {'name': 'b', 'key': 'phone', 'algorithm': 'fixed_window', 'limit': 3,"
         " 'window': '1d', 'if_store_down': 'local_fallback', 'local_limit': 1}]",
         "limits.1.if_store_down", "local_fallback is not allowed", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'if_store_down': 'local_fallback'}]",
         "limits.0.local_limit", "is required", 2},
        /* ...and nowhere else: the verification lives in Redis. */
        {P_LIMITS,
         RULE_PRE "'key': 'device', 'algorithm': 'token_bucket', 'limit': 3, 'window': '1m',"
                  " 'if_store_down': 'local_fallback', 'local_limit': 1}]",
         "limits.0.if_store_down", "local_fallback is not available", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'if_store_down': 'local_fallback', 'local_limit': 0}]",
         "limits.0.local_limit", "must be an integer from 1", 2},
        {P_LIMITS,
         RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'local_limit': 2}]",
         "limits.0.local_limit", "applies with if_store_down: local_fallback only", 1},
        {P_LIMITS,
         RULE_PRE "'key': 'client_ip', 'algorithm': 'sliding_log', 'limit': 3, 'window': '1m',"
                  " 'if_store_down': 'fail_closed', 'local_limit': 2}]",
         "limits.0.local_limit", "applies with if_store_down: local_fallback only", 1},
        /* One wrong_guess_cap rule at most. */
        {P_LIMITS,
         "'limits': [{'name': 'a', 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'limit': 3,"
         " 'window': '1m'}, {'name': 'b', 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'limit': 9,"
         " 'window': '1d'}]",
         "limits.1", "only one wrong_guess_cap rule is allowed", 1},
        /* Shapes. */
        {P_LIMITS, "'limits': {}", "limits", "must be an array", 1},
        {P_LIMITS, "'limits': [3]", "limits.0", "must be an object", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'windw': '1m'}]",
         "limits.0.windw", "unknown key", 2},
    };

    (void)state;
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* The key table: an unknown key names its nearest sibling when one is
 * close (at most 2 edits, fewer than the key's length), and only from its
 * own level; an enum's error lists its values. */
static void test_table_messages(void **state)
{
    static const struct err_case cases[] = {
        {P_OTP, "'otp': {'tll': '5m'}", "otp.tll", "unknown key (did you mean \"ttl\"?)", 1},
        {P_PACER, "'pacer': {'retry': {'bsae': '1s'}}", "pacer.retry.bsae", "unknown key (did you mean \"base\"?)",
         1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'sliding_log', 'limit': 3, 'windw': '1m'}]",
         "limits.0.windw", "unknown key (did you mean \"window\"?)", 2},
        /* "rate" is a pacer key, not an otp one: no guess across levels. */
        {P_OTP, "'otp': {'rate': 5}", "otp.rate", "unknown key", 1},
        {P_EXTRA, "'pacr': {}", "pacr", "unknown key (did you mean \"pacer\"?)", 1},
        {P_PACER, "'pacer': {'on_restart_sending': 'retry'}", "pacer.on_restart_sending",
         "\"retry\" is not one of the allowed values: resend, fail", 1},
        {P_LIMITS, RULE_PRE "'key': 'phone', 'algorithm': 'leaky', 'limit': 1, 'window': '1m'}]",
         "limits.0.algorithm",
         "is not one of the allowed values: sliding_log, fixed_window, token_bucket, resend_delay, "
         "wrong_guess_cap, sliding_window_counter",
         1},
        /* Bounds of durations come from the table's milliseconds. */
        {P_PACER, "'pacer': {'takeover': '11m'}", "pacer.takeover", "must be from 1s to 10m", 1},
        {P_LEDGER, "'ledger': {'path': 'a.db', 'retention': '500ms'}", "ledger.retention", "must be at least 1s", 1},
    };
    char buf[8192], *errors = NULL;
    struct config *c;

    (void)state;
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
    /* "2 edits" only when the key is longer than 2: "ab" is no typo of "at". */
    c = config_parse(build(buf, sizeof(buf), P_EXTRA, "'zz': 1"), FILE_NAME, &errors);
    assert_null(c);
    assert_non_null(strstr(errors, "zz: unknown key\n"));
    free(errors);
}

static void test_diff(void **state)
{
    static char seen[1024];
    char buf[8192], *errors = NULL;
    struct config *a, *b;
    size_t n;

    (void)state;
    seen[0] = '\0';
    a = config_parse(DEV_JSON, FILE_NAME, &errors);
    assert_non_null(a);
    b = config_parse(build(buf, sizeof(buf), P_PACER, "'pacer': {'rate': 7, 'capacity': 500, 'max_inflight': 32, "
                                                      "'retry': {'max': 3, 'base': '500ms'}}"),
                     FILE_NAME, &errors);
    assert_non_null(b);
    assert_int_equal(config_diff(a, a, diff_seen, seen), 0);
    n = config_diff(a, b, diff_seen, seen);
    assert_int_equal(n, 1);
    assert_string_equal(seen, "pacer.rate:0;");
    config_free(b);
    seen[0] = '\0';
    /* length, max_attempts and template dropped for their defaults (the
     * same values): no change; a pumping block with every default turns
     * the guard on: the section itself changed, each key kept its value. */
    b = config_parse(build2(buf, sizeof(buf), P_OTP, "'otp': {'ttl': '2m', 'length': 6}", P_EXTRA, "'pumping': {}"),
                     FILE_NAME, &errors);
    assert_non_null(b);
    n = config_diff(a, b, diff_seen, seen);
    assert_string_equal(seen, "otp.ttl:1;pumping:1;");
    assert_int_equal(n, 2);
    config_free(b);
    config_free(a);
    /* tls: other files reload (SIGHUP reads them); tls coming or going, or
     * listen_internal, needs a restart. */
    a = config_parse(build(buf, sizeof(buf), P_EXTRA, "'tls': {'cert': 'a.pem', 'key': 'a.key'}"), FILE_NAME,
                     &errors);
    assert_non_null(a);
    b = config_parse(build(buf, sizeof(buf), P_EXTRA, "'tls': {'cert': 'b.pem', 'key': 'a.key'}"), FILE_NAME,
                     &errors);
    assert_non_null(b);
    seen[0] = '\0';
    assert_int_equal(config_diff(a, b, diff_seen, seen), 1);
    assert_string_equal(seen, "tls.cert:1;");
    config_free(b);
    b = config_parse(build(buf, sizeof(buf), P_EXTRA, "'listen_internal': '127.0.0.1:9101'"), FILE_NAME, &errors);
    assert_non_null(b);
    seen[0] = '\0';
    config_diff(a, b, diff_seen, seen);
    assert_string_equal(seen, "listen_internal:0;tls:0;tls.cert:1;tls.key:1;");
    config_free(b);
    config_free(a);

    /* Issue 14's provider keys need a restart (the adapter is built once),
     * a secret's variable named by its key, never its value. */
    seen[0] = '\0';
    a = config_parse(build(buf, sizeof(buf), P_PROVIDER,
                           "'provider': {'type': 'webhook', 'url': 'http://w', 'token_env': 'WEBHOOK_TOKEN'}"),
                     FILE_NAME, &errors);
    assert_non_null(a);
    b = config_parse(build(buf, sizeof(buf), P_PROVIDER,
                           "'provider': {'type': 'webhook', 'url': 'http://w', 'token_env': 'OTPD_TEST_KEY_16',"
                           " 'signing_secret_env': 'OTPD_TEST_SECRET_32'}"),
                     FILE_NAME, &errors);
    assert_non_null(b);
    assert_int_equal(config_diff(a, b, diff_seen, seen), 2);
    assert_string_equal(seen, "provider.token_env:0;provider.signing_secret_env:0;");
    config_free(b);
    config_free(a);
    seen[0] = '\0';
    a = config_parse(build(buf, sizeof(buf), P_PROVIDER,
                           "'provider': {'type': 'kannel', 'url': 'http://k/', 'username_env': 'KANNEL_USER',"
                           " 'password_env': 'KANNEL_PASS', 'from': 'OTPD'}"),
                     FILE_NAME, &errors);
    assert_non_null(a);
    b = config_parse(build(buf, sizeof(buf), P_PROVIDER,
                           "'provider': {'type': 'kannel', 'url': 'http://k/', 'username_env': 'KANNEL_USER',"
                           " 'password_env': 'KANNEL_PASS', 'from': 'OTPD', 'smsc': 's', 'priority': 1,"
                           " 'validity': '3m', 'dlr_mask': 19, 'callback_url': 'http://o'}"),
                     FILE_NAME, &errors);
    assert_non_null(b);
    /* dlr_mask 19 is its default: no change. */
    assert_int_equal(config_diff(a, b, diff_seen, seen), 4);
    assert_string_equal(seen, "provider.smsc:0;provider.priority:0;provider.validity:0;provider.callback_url:0;");
    config_free(b);
    config_free(a);
}

static void test_member_errors(void **state)
{
    static const struct err_case cases[] = {
        /* otp */
        {P_OTP, "'otp': {'length': 3}", "otp.length", "must be an integer from 4 to 10", 1},
        {P_OTP, "'otp': {'length': 11}", "otp.length", "must be an integer from 4 to 10", 1},
        {P_OTP, "'otp': {'length': '6'}", "otp.length", "must be an integer", 1},
        {P_OTP, "'otp': {'ttl': '9s'}", "otp.ttl", "must be from 10s to 1h", 1},
        {P_OTP, "'otp': {'ttl': '3601s'}", "otp.ttl", "must be from 10s to 1h", 1},
        {P_OTP, "'otp': {'ttl': 300}", "otp.ttl", "must be a string", 1},
        {P_OTP, "'otp': {'max_attempts': 0}", "otp.max_attempts", "from 1 to 100", 1},
        {P_OTP, "'otp': {'max_attempts': 101}", "otp.max_attempts", "from 1 to 100", 1},
        {P_OTP, "'otp': {'template': 'Your code is {cod}'}", "otp.template", "must contain {code}", 1},
        {P_OTP, "'otp': {'digits': 6}", "otp.digits", "unknown key", 1},
        {P_OTP, "'otp': 6", "otp", "must be an object", 1},
        {P_OTP, "", "otp", "is required", 1},
        /* api_keys and their secrets */
        {P_API_KEYS, "'api_keys': [{'name': 'k', 'key_env': 'OTPD_TEST_UNSET'}]", "api_keys.0.key_env",
         "environment variable OTPD_TEST_UNSET is not set", 1},
        {P_API_KEYS, "'api_keys': [{'name': 'k', 'key_env': 'OTPD_TEST_EMPTY'}]", "api_keys.0.key_env",
         "environment variable OTPD_TEST_EMPTY is not set", 1},
        {P_API_KEYS, "'api_keys': [{'name': 'k', 'key_env': 'OTPD_TEST_KEY_15'}]", "api_keys.0.key_env",
         "environment variable OTPD_TEST_KEY_15 must hold at least 16 bytes", 1},
        {P_API_KEYS,
         "'api_keys': [{'name': 'k', 'key_env': 'OTPD_KEY_LOGIN_WEB'}, {'name': 'k2', 'key_env':"
         " 'OTPD_TEST_UNSET'}]",
         "api_keys.1.key_env", "OTPD_TEST_UNSET", 1},
        {P_API_KEYS, "'api_keys': [{'name': 'k'}]", "api_keys.0.key_env", "is required", 1},
        {P_API_KEYS, "'api_keys': [{'name': 'k', 'key_env': 'OTPD_KEY_LOGIN_WEB', 'key': 'x'}]",
         "api_keys.0.key", "unknown key", 1},
        {P_API_KEYS,
         "'api_keys': [{'name': 'k', 'key_env': 'OTPD_KEY_LOGIN_WEB'}, {'name': 'k', 'key_env':"
         " 'OTPD_TEST_KEY2'}]",
         "api_keys.1.name", "\"k\" is used twice", 1},
        {P_API_KEYS, "'api_keys': []", "api_keys", "must be an array of 1 to 256 keys", 1},
        {P_API_KEYS, "'api_keys': ['k']", "api_keys.0", "must be an object", 1},
        {P_API_KEYS, "", "api_keys", "is required", 1},
        /* secret_env */
        {P_SECRET, "'secret_env': 'OTPD_TEST_UNSET'", "secret_env",
         "environment variable OTPD_TEST_UNSET is not set", 1},
        {P_SECRET, "'secret_env': 'OTPD_TEST_SECRET_31'", "secret_env",
         "environment variable OTPD_TEST_SECRET_31 must hold at least 32 bytes", 1},
        {P_SECRET, "'secret_env': 7", "secret_env", "must be a string", 1},
        {P_SECRET, "", "secret_env", "is required", 1},
        /* redis */
        {P_REDIS, "'redis': {'url': 'http://127.0.0.1:6379'}", "redis.url", "must start with redis://", 1},
        {P_REDIS, "'redis': {'url': 'redis://'}", "redis.url", "has no host", 1},
        {P_REDIS, "'redis': {'url': 'redis:///0'}", "redis.url", "has no host", 1},
        {P_REDIS, "'redis': {'url': 'redis://127.0.0.1:0'}", "redis.url", "port must be from 1 to 65535", 1},
        {P_REDIS, "'redis': {'url': 'redis://127.0.0.1:65536/0'}", "redis.url",
         "port must be from 1 to 65535", 1},
        {P_REDIS, "'redis': {'url': 'redis://127.0.0.1:abc'}", "redis.url", "port must be from 1 to 65535",
         1},
        {P_REDIS, "'redis': {'url': 'redis://127.0.0.1:6379/16'}", "redis.url",
         "database must be from 0 to 15", 1},
        {P_REDIS, "'redis': {'url': 'redis://127.0.0.1:6379/-1'}", "redis.url",
         "database must be from 0 to 15", 1},
        {P_REDIS, "'redis': {'timeout_ms': 50}", "redis.url", "is required", 1},
        {P_REDIS, "'redis': {'url': 'redis://h', 'timeout_ms': 0}", "redis.timeout_ms", "from 1 to 10000", 1},
        {P_REDIS, "'redis': {'url': 'redis://h', 'timeout_ms': 10001}", "redis.timeout_ms", "from 1 to 10000",
         1},
        {P_REDIS, "'redis': {'url': 'redis://h', 'breaker_open': 'soon'}", "redis.breaker_open", "duration",
         1},
        {P_REDIS, "'redis': {'url': 'redis://h', 'host': 'h'}", "redis.host", "unknown key", 1},
        {P_REDIS, "'redis': 'redis://h'", "redis", "must be an object", 1},
        {P_REDIS, "", "redis", "is required", 1},
        /* listen */
        {P_LISTEN, "'listen': '127.0.0.1'", "listen", "must be HOST:PORT", 1},
        {P_LISTEN, "'listen': ':8080'", "listen", "must be HOST:PORT", 1},
        {P_LISTEN, "'listen': '127.0.0.1:'", "listen", "port must be from 1 to 65535", 1},
        {P_LISTEN, "'listen': '127.0.0.1:0'", "listen", "port must be from 1 to 65535", 1},
        {P_LISTEN, "'listen': '127.0.0.1:65536'", "listen", "port must be from 1 to 65535", 1},
        {P_LISTEN, "'listen': '127.0.0.1:99999999999999999999'", "listen", "port must be from 1 to 65535", 1},
        {P_LISTEN, "'listen': 8080", "listen", "must be a string", 1},
        {P_LISTEN, "", "listen", "is required", 1},
        /* ledger */
        {P_LEDGER, "'ledger': {}", "ledger.path", "is required", 1},
        {P_LEDGER, "'ledger': {'path': 'a.db', 'wal': true}", "ledger.wal", "unknown key", 1},
        {P_LEDGER, "", "ledger", "is required", 1},
        /* cost */
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'91': 20}}", "cost.prices.91",
         "must be \"*\" or \"+\"", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'+9a': 20}}", "cost.prices.+9a", "must be \"*\" or",
         1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'+12345678901234567': 20}}",
         "cost.prices.+12345678901234567", "must be \"*\" or", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'+91': -1}}", "cost.prices.+91", "integer price", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'+91': 2.5}}", "cost.prices.+91", "integer price",
         1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'*': 1000000001}}", "cost.prices.*", "integer price",
         1},
        {P_COST, "'cost': {'prices': {'*': 1}}", "cost.currency", "is required", 1},
        {P_COST, "'cost': {'currency': 'INR'}", "cost.prices", "is required", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': []}", "cost.prices", "must be an object", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'*': 1}, 'caps': [{'window': '1x', 'max': 5}]}",
         "cost.caps.0.window", "must be a duration", 1},
        {P_COST,
         "'cost': {'currency': 'INR', 'prices': {'*': 1}, 'caps': [{'window': '1h', 'max': 5},"
         " {'window': '1h'}]}",
         "cost.caps.1.max", "is required", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'*': 1}, 'caps': [{'window': '1h', 'max': 5, 'min': 1}]}",
         "cost.caps.0.min", "unknown key", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'*': 1}, 'caps': [1,2,3,4,5,6,7,8,9]}", "cost.caps",
         "at most 8 caps", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {}, 'budget': 1}", "cost.budget", "unknown key", 1},
        /* Caps without a price for every destination would let unpriced routes through. */
        {P_REDIS, "'redis': {'url': 'redis://:pw@h:6379/0'}", "redis.url", "must not hold credentials", 1},
        {P_REDIS, "'redis': {'url': 'redis://h', 'password_env': 'NO_SUCH_VAR_X'}", "redis.password_env",
         "NO_SUCH_VAR_X is not set", 1},
        {P_COST, "'cost': {'currency': 'INR', 'prices': {'+91': 20}, 'caps': [{'window': '1h', 'max': 5}]}",
         "cost.prices", "must have a \"*\" price", 1},
        /* pacer */
        {P_PACER, "'pacer': {'rate': 0}", "pacer.rate", "from 1 to 10000", 1},
        {P_PACER, "'pacer': {'rate': 10001}", "pacer.rate", "from 1 to 10000", 1},
        {P_PACER, "'pacer': {'capacity': 0}", "pacer.capacity", "from 1 to 1000000", 1},
        {P_PACER, "'pacer': {'max_inflight': 1025}", "pacer.max_inflight", "from 1 to 1024", 1},
        {P_PACER, "'pacer': {'retry': {'max': 21}}", "pacer.retry.max", "from 0 to 20", 1},
        {P_PACER, "'pacer': {'retry': {'base': '0ms'}}", "pacer.retry.base", "must be a duration", 1},
        {P_PACER, "'pacer': {'retry': {'maximum': 2}}", "pacer.retry.maximum", "unknown key", 1},
        {P_PACER, "'pacer': {'retry': 3}", "pacer.retry", "must be an object", 1},
        {P_PACER, "'pacer': {'on_restart_sending': 'retry'}", "pacer.on_restart_sending",
         "\"retry\" is not one of the allowed values", 1},
        {P_PACER, "'pacer': {'timeout': '-1s'}", "pacer.timeout", "must be a duration", 1},
        /* providers, routes: every error names its path */
        {P_PROVIDER, "'provider': {'type': 'file', 'path': 'x'}, 'providers': {'a': {'type': 'file', 'path': 'y'}}",
         "providers", "provider and providers: give one", 1},
        {P_PROVIDER, "'x': 1", "provider", "is required (or providers, with routes)", 2},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'file', 'path': 'x'}, 'b': {'type': 'file', 'path': 'y'}}", "routes",
         "is required with more than one provider", 1},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': 'IN', 'providers': ['a', 'c']}]",
         "routes.0.providers.1", "names no provider (have: a)", 1},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': 'IN', 'providers': ['a', 'a']}]",
         "routes.0.providers.1", "names a twice", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': 'XX', 'providers': ['a']}]",
         "routes.0.match", "names no region libphonenumber knows", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': '+4a', 'providers': ['a']}]",
         "routes.0.match", "a prefix is '+' and digits only", 1},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': '*', 'providers': ['a']},"
         " {'match': '*', 'providers': ['a']}]",
         "routes.1.match", "\"*\" is routes.0's match already", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x'}}, 'routes': [{'match': '*', 'providers': []}]",
         "routes.0.providers", "must list 1 to 4 providers", 1},
        {P_PROVIDER, "'providers': {'A b': {'type': 'file', 'path': 'x'}}", "providers.A b",
         "a provider's name must be 1 to 31 bytes", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'webhook'}}", "providers.a.url", "is required", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x', 'rate': 0}}", "providers.a.rate",
         "must be an integer from 1 to 10000", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x', 'rate': 5, 'ratez': 1}}", "providers.a.ratez",
         "unknown key", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x', 'breaker': {'open': '1ms'}}}",
         "providers.a.breaker.open", "must be from 100ms to 1h", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x', 'prices': {'+91': 'x', '*': 2}}}",
         "providers.a.prices.+91", "must be an integer price", 1},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'twilio', 'from': 'X', 'account_sid_env': 'TWILIO_SID'}}",
         "providers.a", "twilio needs auth_token_env", 1},
        {P_PROVIDER, "'provider': {'type': 'file', 'path': 'x'}, 'routes': [{'match': '*', 'providers': ['a']}]",
         "routes", "needs providers", 1},
        {P_PROVIDER,
         "'providers': {'a': {'type': 'file', 'path': 'x'}, 'b': {'type': 'webhook', 'url': 'http://w/',"
         " 'callback_url': 'http://otpd/'}}, 'routes': [{'match': '*', 'providers': ['a', 'b']}]",
         "providers.b.callback_url", "delivery reports are the first provider's only (a)", 1},
        {P_PROVIDER, "'providers': {'a': {'type': 'file', 'path': 'x', 'prices': {'+91': 2}}}", "providers.a.prices",
         "needs a \"*\" price", 1},
        /* provider */
        {P_PROVIDER, "'provider': {'type': 'smpp'}", "provider.type",
         "\"smpp\" is not one of the allowed values", 1},
        {P_PROVIDER, "'provider': {'path': 'x'}", "provider.type", "is required", 1},
        {P_PROVIDER, "'provider': {'type': 'file'}", "provider.path", "is required", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook'}", "provider.url", "is required", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'ftp://sms.example/'}", "provider.url",
         "must be an http:// or https:// URL", 1},
        {P_PROVIDER,
         "'provider': {'type': 'kannel', 'url': 'http://k/', 'username_env': 'KANNEL_USER',"
         " 'password_env': 'KANNEL_PASS'}",
         "provider.from", "is required", 1},
        {P_PROVIDER,
         "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env':"
         " 'KANNEL_USER', 'password_env': 'OTPD_TEST_UNSET'}",
         "provider.password_env", "environment variable OTPD_TEST_UNSET is not set", 1},
        {P_PROVIDER,
         "'provider': {'type': 'twilio', 'from': 'X', 'account_sid_env': 'TWILIO_SID',"
         " 'auth_token_env': 'OTPD_TEST_UNSET_TOKEN'}",
         "provider.auth_token_env", "environment variable OTPD_TEST_UNSET_TOKEN is not set", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'from': 'X', 'auth_token_env': 'TWILIO_TOKEN'}",
         "provider.account_sid_env", "is required", 1},
        {P_PROVIDER, "'provider': {'type': 'file', 'path': 'x', 'token': 'y'}", "provider.token",
         "unknown key", 1},
        /* Twilio: one way to authenticate, one sender, SIDs of the right kind. */
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'from': 'X'}", "provider", "needs auth_token_env, or api_key_sid_env and api_key_secret_env", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN'}", "provider", "needs from or messaging_service_sid (one of them, none is set)", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X', 'messaging_service_sid': 'MG0123456789abcdef0123456789abcdef'}", "provider", "(one of them, not both)", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X', 'api_key_sid_env': 'TWILIO_KEY_SID', 'api_key_secret_env': 'TWILIO_KEY_SECRET'}", "provider.auth_token_env", "not both; with an API key the auth token only checks status callbacks", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'from': 'X', 'api_key_sid_env': 'TWILIO_KEY_SID'}", "provider.api_key_sid_env", "needs provider.api_key_secret_env", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'from': 'X', 'api_key_secret_env': 'TWILIO_KEY_SECRET'}", "provider.api_key_secret_env", "needs provider.api_key_sid_env", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'from': 'X', 'api_key_sid_env': 'TWILIO_KEY_SID', 'api_key_secret_env': 'TWILIO_KEY_SECRET', 'callback_url': 'https://o'}", "provider.callback_url", "needs auth_token_env with an API key: Twilio signs status callbacks", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SHORT_SID', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X'}", "provider.account_sid_env", "environment variable TWILIO_SHORT_SID must hold an account SID: AC and 32 hex digits", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_NOT_HEX', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X'}", "provider.account_sid_env", "must hold an account SID: AC and 32 hex digits", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_KEY_SID', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X'}", "provider.account_sid_env", "must hold an account SID", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'from': 'X', 'api_key_sid_env': 'TWILIO_AC_AS_KEY', 'api_key_secret_env': 'TWILIO_KEY_SECRET'}", "provider.api_key_sid_env", "environment variable TWILIO_AC_AS_KEY must hold an API key SID: SK and 32 hex digits", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'messaging_service_sid': 'MG0123'}", "provider.messaging_service_sid", "must be a Messaging Service SID: MG and 32 hex digits", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'messaging_service_sid': 'AC0123456789abcdef0123456789abcdef'}", "provider.messaging_service_sid", "must be a Messaging Service SID", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'messaging_service_sid': 'MG0123456789abcdef0123456789abcdef0'}", "provider.messaging_service_sid", "at most 34 bytes", 1},
        {P_PROVIDER, "'provider': {'type': 'twilio', 'account_sid_env': 'TWILIO_SID', 'auth_token_env': 'TWILIO_TOKEN', 'from': 'X', 'smsc': 'a'}", "provider.smsc", "applies to kannel only, not twilio", 1},
        /* Webhook: a token fit for a header, a signing secret as strong as the hash. */
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'token_env': 'OTPD_TEST_KEY_15'}", "provider.token_env", "must hold at least 16 bytes", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'token_env': 'WEBHOOK_TOKEN_SPACE'}", "provider.token_env", "environment variable WEBHOOK_TOKEN_SPACE must hold 16 to 1000 printable ASCII bytes without spaces", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'token_env': 'OTPD_TEST_UNSET'}", "provider.token_env", "environment variable OTPD_TEST_UNSET is not set", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'signing_secret_env': 'OTPD_TEST_SECRET_31'}", "provider.signing_secret_env", "must hold at least 32 bytes", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'signing_secret_env': 'OTPD_TEST_SECRET_32'}", "provider.signing_secret_env", "applies to webhook only, not kannel", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'api_key_sid_env': 'TWILIO_KEY_SID'}", "provider.api_key_sid_env", "applies to twilio only, not webhook", 1},
        /* Kannel: what its sendsms takes. */
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'smsc': ''}", "provider.smsc", "must not be empty", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'smsc': 'a b'}", "provider.smsc", "without spaces or ';'", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'smsc': 'a;b'}", "provider.smsc", "without spaces or ';'", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'smsc': 3}", "provider.smsc", "must be a string", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'priority': 4}", "provider.priority", "must be an integer from 0 to 3", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'priority': -1}", "provider.priority", "must be an integer from 0 to 3", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'validity': '30s'}", "provider.validity", "must be whole minutes from 1m to 1d", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'validity': '90s'}", "provider.validity", "must be whole minutes from 1m to 1d", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'validity': '2d'}", "provider.validity", "must be whole minutes from 1m to 1d", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'validity': 10}", "provider.validity", "must be a string", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'dlr_mask': 19}", "provider.dlr_mask", "needs provider.callback_url", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'dlr_mask': 0, 'callback_url': 'http://o'}", "provider.dlr_mask", "must be an integer from 1 to 31", 1},
        {P_PROVIDER, "'provider': {'type': 'kannel', 'url': 'http://k/', 'from': 'X', 'username_env': 'KANNEL_USER', 'password_env': 'KANNEL_PASS', 'dlr_mask': 32, 'callback_url': 'http://o'}", "provider.dlr_mask", "must be an integer from 1 to 31", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://w', 'validity': '5m'}", "provider.validity", "applies to kannel only, not webhook", 1},

        {P_PROVIDER, "", "provider", "is required", 1},
        /* top level */
        {P_EXTRA, "'bogus': 1", "bogus", "unknown key", 1},
        {P_EXTRA, "'http_threads': 0", "http_threads", "from 1 to 256", 1},
        {P_EXTRA, "'http_threads': 257", "http_threads", "from 1 to 256", 1},
        /* tls and listen_internal (the files themselves are src/http/tls.c's, checked at start) */
        {P_EXTRA, "'listen_internal': '127.0.0.1'", "listen_internal", "must be HOST:PORT", 1},
        {P_EXTRA, "'listen_internal': '127.0.0.1:8080'", "listen_internal", "must differ from listen", 1},
        {P_EXTRA, "'listen_internal': 9101", "listen_internal", "must be a string", 1},
        {P_EXTRA, "'tls': {'cert': 'c.pem'}", "tls.key", "is required", 1},
        {P_EXTRA, "'tls': {'key': 'k.pem'}", "tls.cert", "is required", 1},
        {P_EXTRA, "'tls': {'cert': '', 'key': 'k.pem'}", "tls.cert", "must not be empty", 1},
        {P_EXTRA, "'tls': {'cert': 'c.pem', 'key': 'k.pem', 'ca': 'x'}", "tls.ca", "unknown key", 1},
        {P_EXTRA, "'tls': 'c.pem'", "tls", "must be an object", 1},
    };

    (void)state;
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_string_bounds(void **state)
{
    char buf[8192], text[1024];
    struct config *c;

    (void)state;
    /* The template may be 320 bytes, not 321. */
    snprintf(text, sizeof(text), "'otp': {'template': '{code}%0314d'}", 0);
    c = expect_ok("template 320", build(buf, sizeof(buf), P_OTP, text));
    assert_int_equal(strlen(c->otp.tmpl), 320);
    config_free(c);
    snprintf(text, sizeof(text), "'otp': {'template': '{code}%0315d'}", 0);
    expect_errors("template 321", build(buf, sizeof(buf), P_OTP, text), "otp.template", "at most 320 bytes",
                  1);

    /* A rule name of 32 bytes is fine. */
    c = expect_ok("name 32", build(buf, sizeof(buf), P_LIMITS,
                                   "'limits': [{'name': 'abcdefghijklmnopqrstuvwxyz012345', 'key': 'phone',"
                                   " 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}]"));
    assert_string_equal(c->limits.rules[0].name, "abcdefghijklmnopqrstuvwxyz012345");
    config_free(c);

    /* Secrets at their minimum lengths: 32 and 16 bytes. */
    c = expect_ok("secret 32",
                  build2(buf, sizeof(buf), P_SECRET, "'secret_env': 'OTPD_TEST_SECRET_32'", P_API_KEYS,
                         "'api_keys': [{'name': 'a', 'key_env': 'OTPD_TEST_KEY_16'},"
                         " {'name': 'b', 'key_env': 'OTPD_TEST_KEY2'}]"));
    assert_int_equal(c->secret_len, 32);
    assert_int_equal(c->keys.n_api_keys, 2);
    assert_string_equal(c->keys.api_keys[0].key, "0123456789012345");
    assert_string_equal(c->keys.api_keys[1].name, "b");
    assert_string_equal(c->keys.api_keys[1].key, "second-api-key-00002");
    config_free(c);
}

static void test_many_errors(void **state)
{
    /* Eight mistakes in six sections: all are reported in one go. */
    static const char text[] =
        "{\"listen\": \"127.0.0.1\", \"redis\": {\"url\": \"tcp://h\"}, \"ledger\": {\"path\": \"l.db\"},"
        " \"secret_env\": \"OTPD_TEST_SECRET_31\","
        " \"api_keys\": [{\"name\": \"k\", \"key_env\": \"OTPD_TEST_UNSET\"}],"
        " \"otp\": {\"length\": 12, \"ttl\": \"5m\"},"
        " \"limits\": [{\"name\": \"a\", \"key\": \"phone\", \"algorithm\": \"sliding_log\", \"limit\": 3,"
        " \"window\": \"10\"}, {\"name\": \"a\", \"key\": \"phone\", \"algorithm\": \"resend_delay\","
        " \"delay\": \"30s\", \"limit\": 2}],"
        " \"provider\": {\"type\": \"file\", \"path\": \"s\"}, \"extra\": true}";
    char *errors = NULL;
    struct config *c = config_parse(text, FILE_NAME, &errors);

    (void)state;
    assert_null(c);
    assert_non_null(errors);
    assert_true(has_error(errors, "listen", "must be HOST:PORT"));
    assert_true(has_error(errors, "redis.url", "must start with redis://"));
    assert_true(has_error(errors, "secret_env", "OTPD_TEST_SECRET_31 must hold at least 32 bytes"));
    assert_true(has_error(errors, "api_keys.0.key_env", "OTPD_TEST_UNSET is not set"));
    assert_true(has_error(errors, "otp.length", "from 4 to 10"));
    assert_true(has_error(errors, "limits.0.window", "must be a duration"));
    assert_true(has_error(errors, "limits.1.name", "\"a\" is used twice"));
    assert_true(has_error(errors, "limits.1.limit", "does not apply to resend_delay"));
    assert_true(has_error(errors, "extra", "unknown key"));
    if (error_lines(errors) != 9) {
        fprintf(stderr, "%s", errors);
        fail_msg("want 9 error lines, got %d", error_lines(errors));
    }
    free(errors);

    /* Without an errors pointer the result is the same, and nothing leaks. */
    assert_null(config_parse(text, FILE_NAME, NULL));
}

static void test_json_errors(void **state)
{
    char *errors = NULL;

    (void)state;
    /* A duplicate key at the top level and inside a rule. */
    assert_null(
        config_parse("{\"listen\": \"127.0.0.1:1\", \"listen\": \"127.0.0.1:2\"}", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_int_equal(error_lines(errors), 1);
    assert_non_null(strstr(errors, FILE_NAME ": line 1: "));
    assert_non_null(strstr(errors, "duplicate"));
    free(errors);

    assert_null(config_parse("{\"limits\": [\n{\"name\": \"a\",\n \"name\": \"b\"}]}", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_int_equal(error_lines(errors), 1);
    assert_non_null(strstr(errors, FILE_NAME ": line 3: "));
    assert_non_null(strstr(errors, "duplicate"));
    free(errors);

    /* Broken JSON names its line. */
    assert_null(config_parse("{\n\"listen\": \"127.0.0.1:8080\",\n\"redis\": {\n", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_int_equal(error_lines(errors), 1);
    assert_non_null(strstr(errors, FILE_NAME ": line "));
    free(errors);

    assert_null(config_parse("", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_int_equal(error_lines(errors), 1);
    free(errors);

    /* The top level must be an object. */
    assert_null(config_parse("[1, 2]", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_string_equal(errors, FILE_NAME ": line 1: the top level must be an object\n");
    free(errors);

    /* An empty object misses every required member. */
    assert_null(config_parse("{}", FILE_NAME, &errors));
    assert_non_null(errors);
    assert_true(has_error(errors, "listen", "is required"));
    assert_true(has_error(errors, "redis", "is required"));
    assert_true(has_error(errors, "ledger", "is required"));
    assert_true(has_error(errors, "secret_env", "is required"));
    assert_true(has_error(errors, "api_keys", "is required"));
    assert_true(has_error(errors, "otp", "is required"));
    assert_true(has_error(errors, "provider", "is required"));
    assert_int_equal(error_lines(errors), 7);
    free(errors);

    config_free(NULL);
}

static void test_load(void **state)
{
    char *errors = NULL;

    (void)state;
    assert_null(config_load("/nonexistent/otpd-test.json", &errors));
    assert_non_null(errors);
    assert_non_null(strstr(errors, "/nonexistent/otpd-test.json: "));
    free(errors);
    assert_null(config_load("/nonexistent/otpd-test.json", NULL));
}

static void test_price(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("dev prices", DEV_JSON);
    assert_int_equal(config_price(c, "+919812345678"), 20);
    assert_int_equal(config_price(c, "+14155550123"), 70);
    assert_int_equal(config_price(c, "+447911123456"), 500);
    config_free(c);

    /* The longest prefix wins, whatever the order; "*" only when none does. */
    c = expect_ok("prices", build(buf, sizeof(buf), P_COST,
                                  "'cost': {'currency': 'INR', 'prices': {'*': 500, '+9': 1, '+919': 15,"
                                  " '+91': 20, '+1': 70, '+1876': 90}}"));
    assert_int_equal(c->limits.n_prices, 6);
    assert_int_equal(config_price(c, "+919812345678"), 15);
    assert_int_equal(config_price(c, "+918812345678"), 20);
    assert_int_equal(config_price(c, "+971501234567"), 1);
    assert_int_equal(config_price(c, "+18765550123"), 90);
    assert_int_equal(config_price(c, "+18775550123"), 70);
    assert_int_equal(config_price(c, "+447911123456"), 500);
    assert_int_equal(config_price(c, "+9"), 1);
    assert_int_equal(config_price(c, "+91"), 20);
    assert_int_equal(config_price(c, "+"), 500); /* a prefix longer than the number does not match */
    config_free(c);

    c = expect_ok("prices star last", build(buf, sizeof(buf), P_COST,
                                            "'cost': {'currency': 'INR', 'prices': {'+91': 20, '+919': 15,"
                                            " '*': 500}}"));
    assert_int_equal(config_price(c, "+919812345678"), 15);
    assert_int_equal(config_price(c, "+918812345678"), 20);
    assert_int_equal(config_price(c, "+447911123456"), 500);
    config_free(c);

    /* A free destination costs 0, which is not "no price". */
    c = expect_ok(
        "free", build(buf, sizeof(buf), P_COST, "'cost': {'currency': 'INR', 'prices': {'+91': 0, '*': 3}}"));
    assert_int_equal(config_price(c, "+919812345678"), 0);
    assert_int_equal(config_price(c, "+14155550123"), 3);
    config_free(c);

    /* No "*": other destinations have no price. */
    c = expect_ok("no star",
                  build(buf, sizeof(buf), P_COST, "'cost': {'currency': 'INR', 'prices': {'+91': 20}}"));
    assert_int_equal(config_price(c, "+919812345678"), 20);
    assert_int_equal(config_price(c, "+14155550123"), -1);
    config_free(c);

    /* No cost block: nothing has a price. */
    c = expect_ok("no cost", build(buf, sizeof(buf), P_COST, ""));
    assert_int_equal(c->limits.n_prices, 0);
    assert_int_equal(config_price(c, "+919812345678"), -1);
    assert_int_equal(config_price(c, "+14155550123"), -1);
    config_free(c);
}

/*
 * Inputs the parser should refuse but, at the time of writing, accepts.
 * Each is a separate test so that a fix turns exactly one green.
 */
static void test_listen_ipv6_without_port(void **state)
{
    char buf[8192];

    (void)state;
    /* IPv6 hosts with no port: today "[::1]" gives host "[:" port 1, and
     * "::1" gives host ":" port 1. */
    expect_errors("listen [::1]", build(buf, sizeof(buf), P_LISTEN, "'listen': '[::1]'"), "listen", "", 1);
    expect_errors("listen ::1", build(buf, sizeof(buf), P_LISTEN, "'listen': '::1'"), "listen", "", 1);
}

static void test_listen_port_trailing_junk(void **state)
{
    char buf[8192];

    (void)state;
    /* Today the junk is ignored and the port is 8080. */
    expect_errors("listen port 8080x", build(buf, sizeof(buf), P_LISTEN, "'listen': '127.0.0.1:8080x'"),
                  "listen", "port must be from 1 to 65535", 1);
}

static void test_redis_url_empty_host(void **state)
{
    char buf[8192];

    (void)state;
    /* A port but no host: today it gives redis_host "". */
    expect_errors("redis://:6379/0", build(buf, sizeof(buf), P_REDIS, "'redis': {'url': 'redis://:6379/0'}"),
                  "redis.url", "has no host", 1);
}

/* A counting allocator for config_set_alloc: fails the call numbered
 * alloc_fail_at (from 0), or every call from there on with alloc_fail_rest. */
static long alloc_calls, alloc_fail_at = -1;
static int alloc_fail_rest;

static void *counting_alloc(size_t n)
{
    long i = alloc_calls++;

    if (alloc_fail_at >= 0 && (i == alloc_fail_at || (alloc_fail_rest && i > alloc_fail_at)))
        return NULL;
    return malloc(n);
}

static void alloc_arm(long fail_at, int rest)
{
    alloc_calls = 0;
    alloc_fail_at = fail_at;
    alloc_fail_rest = rest;
}

/* Every allocation of the loader that fails makes the whole load fail with
 * an error: a config that lost its rules, caps, prices or keys to a failed
 * allocation would fail open (zero rules limit nothing). The dev config
 * reaches every allocation site: the config, the API keys and their
 * secrets, the server secret, the rules, the prices and the caps. */
static void test_alloc_failures(void **state)
{
    struct config *c;
    char *errors = NULL, path[] = "/tmp/otpd-test-config-XXXXXX";
    long total, i;
    int rest, fd;

    (void)state;
    config_set_alloc(counting_alloc);
    alloc_arm(-1, 0);
    c = expect_ok("dev config through the counting allocator", DEV_JSON);
    total = alloc_calls;
    assert_int_equal(c->limits.n_rules, 7);
    assert_int_equal(c->limits.n_prices, 3);
    assert_int_equal(c->limits.n_caps, 2);
    assert_int_equal(c->keys.n_api_keys, 1);
    config_free(c);
    /* config, api_keys, one key, the secret, rules, prices, caps */
    assert_int_equal(total, 7);
    for (rest = 0; rest <= 1; rest++) {
        for (i = 0; i < total; i++) {
            alloc_arm(i, rest);
            c = config_parse(DEV_JSON, FILE_NAME, &errors);
            if (c != NULL)
                fail_msg(
                    "allocation %ld of %ld failed (and %s after it) but the config loaded with %zu rules, "
                    "%zu caps, %zu prices, %zu keys",
                    i, total, rest ? "every one" : "none", c->limits.n_rules, c->limits.n_caps, c->limits.n_prices, c->keys.n_api_keys);
            assert_non_null(errors);
            if (strstr(errors, "out of memory") == NULL)
                fail_msg("allocation %ld failed; errors: %s", i, errors);
            if (!rest)
                assert_int_equal(error_lines(errors), 1);
            free(errors);
            errors = NULL;
        }
    }
    /* config_load's own buffer for the file's text. */
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, DEV_JSON, strlen(DEV_JSON)), (ssize_t)strlen(DEV_JSON));
    close(fd);
    alloc_arm(0, 0);
    assert_null(config_load(path, &errors));
    assert_non_null(errors);
    assert_non_null(strstr(errors, "cannot read"));
    free(errors);
    errors = NULL;
    alloc_arm(-1, 0);
    c = config_load(path, &errors);
    assert_non_null(c);
    assert_int_equal(alloc_calls, total + 1);
    config_free(c);
    unlink(path);
    config_set_alloc(NULL);
}

/* Composite keys, the keys of issue 9 and "on" (docs/architecture.md,
 * "Limits and rules"). */
static void test_rule_keys(void **state)
{
    char buf[8192];
    struct config *c;
    const struct cfg_rule *r;

    (void)state;
    c = expect_ok("composite keys",
                  build(buf, sizeof(buf), P_LIMITS,
                        "'limits': ["
                        "{'name': 'wg', 'key': ['api_key', 'phone'], 'algorithm': 'wrong_guess_cap', 'limit': 3,"
                        " 'window': '1h'},"
                        "{'name': 'pp', 'key': 'phone_prefix:7', 'algorithm': 'sliding_log', 'limit': 3,"
                        " 'window': '1h', 'on': 'both'},"
                        "{'name': 'rp', 'key': ['region', 'purpose'], 'algorithm': 'token_bucket', 'limit': 3,"
                        " 'window': '1h', 'on': 'verify'}"
                        "]"));
    r = &c->limits.rules[0];
    assert_int_equal(r->key, CFG_KEY_PHONE); /* the first kind holds the state, whatever the order */
    assert_int_equal(r->key_mask, (1u << CFG_KEY_PHONE) | (1u << CFG_KEY_API_KEY));
    assert_int_equal(r->on, CFG_ON_ISSUE);
    r = &c->limits.rules[1];
    assert_int_equal(r->key, CFG_KEY_PHONE_PREFIX);
    assert_int_equal(r->prefix_digits, 7);
    assert_int_equal(r->on, CFG_ON_BOTH);
    r = &c->limits.rules[2];
    assert_int_equal(r->key, CFG_KEY_PURPOSE);
    assert_int_equal(r->key_mask, (1u << CFG_KEY_PURPOSE) | (1u << CFG_KEY_REGION));
    assert_int_equal(r->on, CFG_ON_VERIFY);
    config_free(c);
    expect_errors("five prefix lengths",
                  build(buf, sizeof(buf), P_LIMITS,
                        "'limits': ["
                        "{'name': 'p1', 'key': 'phone_prefix:1', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'},"
                        "{'name': 'p2', 'key': 'phone_prefix:2', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'},"
                        "{'name': 'p3', 'key': 'phone_prefix:3', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'},"
                        "{'name': 'p4', 'key': 'phone_prefix:4', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'},"
                        "{'name': 'p5', 'key': 'phone_prefix:5', 'algorithm': 'sliding_log', 'limit': 1, 'window': '1m'}"
                        "]"),
                  "limits", "at most 4 different lengths", 1);
}

/* provider.callback_ttl: a week by default, a duration from 1 s to 30 days. */
static void test_callback_ttl(void **state)
{
    static const struct err_case cases[] = {
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://x', 'callback_ttl': '999ms'}",
         "provider.callback_ttl", "must be from 1s to 30d", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://x', 'callback_ttl': '31d'}",
         "provider.callback_ttl", "must be from 1s to 30d", 1},
        {P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://x', 'callback_ttl': 'week'}",
         "provider.callback_ttl", "must be a duration", 1},
    };
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("default", build(buf, sizeof(buf), P_PROVIDER, "'provider': {'type': 'webhook', 'url': 'http://x'}"));
    assert_int_equal(c->provider.callback_ttl_ms, 7LL * 86400000);
    config_free(c);
    c = expect_ok("1s", build(buf, sizeof(buf), P_PROVIDER,
                              "'provider': {'type': 'webhook', 'url': 'http://x', 'callback_ttl': '1s'}"));
    assert_int_equal(c->provider.callback_ttl_ms, 1000);
    config_free(c);
    c = expect_ok("30d", build(buf, sizeof(buf), P_PROVIDER,
                               "'provider': {'type': 'webhook', 'url': 'http://x', 'callback_ttl': '30d'}"));
    assert_int_equal(c->provider.callback_ttl_ms, 30LL * 86400000);
    config_free(c);
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* phone.types: libphonenumber's type names, each at most once; mobile and
 * fixed_line_or_mobile when absent. */
static void test_phone_types(void **state)
{
    static const struct err_case cases[] = {
        {P_EXTRA, "'phone': {'types': ['mobile', 'cellular']}", "phone.types.1", "must be one of mobile,", 1},
        {P_EXTRA, "'phone': {'types': ['Mobile']}", "phone.types.0", "must be one of mobile,", 1},
        {P_EXTRA, "'phone': {'types': [1]}", "phone.types.0", "must be one of", 1},
        {P_EXTRA, "'phone': {'types': ['voip', 'mobile', 'voip']}", "phone.types.2", "\"voip\" is listed twice",
         1},
        {P_EXTRA, "'phone': {'types': []}", "phone.types", "must be an array of 1 to 12", 1},
        {P_EXTRA, "'phone': {'types': 'mobile'}", "phone.types", "must be an array", 1},
        {P_EXTRA, "'phone': {'kinds': ['mobile']}", "phone.kinds", "unknown key", 1},
        {P_EXTRA, "'phone': ['mobile']", "phone", "must be an object", 1},
    };
    char buf[8192];
    struct config *c;

    (void)state;
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
    c = expect_ok("default types", DEV_JSON);
    assert_int_equal(c->limits.phone_types, PHONE_TYPE_BIT(PHONE_TYPE_MOBILE) |
                                         PHONE_TYPE_BIT(PHONE_TYPE_FIXED_LINE_OR_MOBILE));
    config_free(c);
    c = expect_ok("all types", build(buf, sizeof(buf), P_EXTRA,
                                     "'phone': {'types': ['unknown', 'mobile', 'fixed_line', "
                                     "'fixed_line_or_mobile', 'toll_free', 'premium_rate', 'shared_cost', "
                                     "'voip', 'personal_number', 'pager', 'uan', 'voicemail']}"));
    assert_int_equal(c->limits.phone_types, (1u << PHONE_TYPE_COUNT) - 1);
    config_free(c);
    c = expect_ok("one type", build(buf, sizeof(buf), P_EXTRA, "'phone': {'types': ['toll_free']}"));
    assert_int_equal(c->limits.phone_types, PHONE_TYPE_BIT(PHONE_TYPE_TOLL_FREE));
    config_free(c);
    c = expect_ok("no types key", build(buf, sizeof(buf), P_EXTRA, "'phone': {}"));
    assert_int_equal(c->limits.phone_types, PHONE_TYPES_DEFAULT);
    config_free(c);
}

/* Issue 9's keys: http.*, ledger.retention, redis.username; and secret
 * variables scrubbed from the environment, still found by a later load. */
static void test_hostile_keys(void **state)
{
    char buf[8192];
    struct config *c;

    (void)state;
    c = expect_ok("defaults", build(buf, sizeof(buf), P_EXTRA, NULL));
    assert_int_equal(c->http.max_conns_per_ip, 1024);
    assert_int_equal(c->http.request_timeout_ms, 30000);
    assert_true(c->ledger.retention_ms == 90LL * 86400 * 1000);
    assert_string_equal(c->redis.username, "");
    config_free(c);
    c = expect_ok("set", build2(buf, sizeof(buf), P_EXTRA,
                                "'http': {'max_conns_per_ip': 4096, 'request_timeout': '5s'}", P_LEDGER,
                                "'ledger': {'path': 'x.db', 'retention': '7d'}"));
    assert_int_equal(c->http.max_conns_per_ip, 4096);
    assert_int_equal(c->http.request_timeout_ms, 5000);
    assert_true(c->ledger.retention_ms == 7LL * 86400 * 1000);
    config_free(c);
    expect_errors("cap", build(buf, sizeof(buf), P_EXTRA, "'http': {'max_conns_per_ip': 1023}"),
                  "http.max_conns_per_ip", "1024", 1);
    expect_errors("timeout", build(buf, sizeof(buf), P_EXTRA, "'http': {'request_timeout': '500ms'}"),
                  "http.request_timeout", "1s to 5m", 1);
    expect_errors("unknown", build(buf, sizeof(buf), P_EXTRA, "'http': {'timeout': '5s'}"), "http.timeout",
                  "unknown", 1);
    expect_errors("retention", build(buf, sizeof(buf), P_LEDGER, "'ledger': {'path': 'x', 'retention': '10ms'}"),
                  "ledger.retention", "at least 1s", 1);
    expect_errors("username alone", build(buf, sizeof(buf), P_REDIS,
                                          "'redis': {'url': 'redis://h', 'username': 'otpd'}"),
                  "redis.username", "password_env", 1);
    expect_errors("username spaces", build(buf, sizeof(buf), P_REDIS,
                                           "'redis': {'url': 'redis://h', 'username': 'a b', 'password_env': "
                                           "'KANNEL_PASS'}"),
                  "redis.username", "printable", 1);
    c = expect_ok("username", build(buf, sizeof(buf), P_REDIS,
                                    "'redis': {'url': 'redis://h', 'username': 'otpd', 'password_env': 'KANNEL_PASS'}"));
    assert_string_equal(c->redis.username, "otpd");
    assert_string_equal(c->redis.password, "kpass");
    config_free(c);
    /* Scrubbed: gone from the environment, still read by the next load. */
    assert_int_equal(config_scrub_env(), 0);
    assert_null(getenv("OTPD_SECRET"));
    assert_null(getenv("KANNEL_PASS"));
    c = expect_ok("after the scrub", build(buf, sizeof(buf), P_REDIS,
                                           "'redis': {'url': 'redis://h', 'username': 'otpd', 'password_env': "
                                           "'KANNEL_PASS'}"));
    assert_string_equal(c->redis.password, "kpass");
    assert_memory_equal(c->secret, SECRET_VALUE, strlen(SECRET_VALUE));
    config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_keys),
        cmocka_unit_test(test_dev_config),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_minimal_and_options),
        cmocka_unit_test(test_rule_fields),
        cmocka_unit_test(test_redis_fields),
        cmocka_unit_test(test_template_fits),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_rule_count),
        cmocka_unit_test(test_providers),
        cmocka_unit_test(test_counter_limits),
        cmocka_unit_test(test_rule_errors),
        cmocka_unit_test(test_member_errors),
        cmocka_unit_test(test_table_messages),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_string_bounds),
        cmocka_unit_test(test_many_errors),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_price),
        cmocka_unit_test(test_listen_ipv6_without_port),
        cmocka_unit_test(test_listen_port_trailing_junk),
        cmocka_unit_test(test_redis_url_empty_host),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_callback_ttl),
        cmocka_unit_test(test_phone_types),
        cmocka_unit_test(test_hostile_keys), /* last: it scrubs the environment */
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
