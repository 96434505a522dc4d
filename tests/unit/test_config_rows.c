/*
 * Every constraint of the config key table, driven by the table itself:
 * for each row of cfg_rows (config_int.h; this test reads the table the
 * loader walks, so a new row gets its cases without a line here), values
 * that break its type and bounds, an absent required key, a wrong type for
 * a section or a hook's list. Each must be refused with one error per line,
 * every line "t.json: PATH: ..." naming the row's key (an array's element
 * as ".0"). The bounds themselves and every enum value must load, on plain
 * rows. Then the hooks' cross-key rules, one explicit case each (a change to
 * a valid base config and the path its error must name).
 *
 * The bases are valid configs that together hold every key; a row is tried
 * in the first base that has its parent object, its key's own base when one
 * holds the key. Secrets are read (their variables are set here), and the
 * variable names are checked again with secrets off, as otpd --check does.
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

#include "../../src/base/config.h"
#include "../../src/base/config_int.h"

#define FILE_NAME "t.json"
#define REPORT_MAX 65536

/* Valid configs, ' for ". Kannel with every optional section first. */
static const char *const bases[] = {
    "{'listen': '127.0.0.1:8080', 'listen_internal': '127.0.0.1:8081',"
    " 'tls': {'cert': 'c.pem', 'key': 'k.pem'}, 'http_threads': 4,"
    " 'http': {'max_conns_per_ip': 2048, 'request_timeout': '30s'}, 'log': {'format': 'json', 'level': "
    "'info'},"
    " 'redis': {'url': 'redis://127.0.0.1:6379/0', 'password_env': 'T_REDIS_PASS', 'username': 'otpd',"
    "           'timeout_ms': 50, 'breaker_failures': 5, 'breaker_open': '2s'},"
    " 'ledger': {'path': 'l.db', 'retention': '90d'}, 'secret_env': 'T_SECRET',"
    " 'api_keys': [{'name': 'login-web', 'key_env': 'T_KEY_WEB', 'role': 'admin'},"
    "              {'name': 'login-app', 'key_env': 'T_KEY_APP'}],"
    " 'otp': {'length': 6, 'ttl': '5m', 'max_attempts': 5, 'template': '{code} is your code.'},"
    " 'phone': {'types': ['mobile']}, 'countries': {'allow': ['IN', 'GB'], 'deny': ['US'], 'monitor': "
    "['GB']},"
    " 'pumping': {'prefix_digits': 7, 'window': '1h', 'min_sent': 30, 'min_verified_ratio': 0.2, 'hold': "
    "'12h',"
    "             'mode': 'enforce'},"
    " 'limits': [{'name': 'device_10m', 'key': 'device', 'algorithm': 'token_bucket', 'limit': 3, 'window': "
    "'10m',"
    "             'burst': 2, 'mode': 'enforce', 'on': 'issue', 'if_store_down': 'fail_closed',"
    "             'penalty': {'after': 20, 'within': '1m', 'block': '15m'}},"
    "            {'name': 'resend', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s'}],"
    " 'cost': {'currency': 'INR', 'prices': {'+91': 20, '*': 500}, 'caps': [{'window': '1h', 'max': 500000,"
    "          'key': 'api_key'}]},"
    " 'refusal_cache': {'max_entries': 1000},"
    " 'pacer': {'rate': 50, 'capacity': 500, 'share_per_key': 0.5, 'max_inflight': 32,"
    "           'retry': {'max': 3, 'base': '500ms'}, 'timeout': '10s', 'takeover': '10s', 'instance': 'a:1',"
    "           'on_restart_sending': 'resend'},"
    " 'provider': {'type': 'kannel', 'url': 'http://127.0.0.1:13013/cgi-bin/sendsms', 'username_env': "
    "'T_K_USER',"
    "              'password_env': 'T_K_PASS', 'from': 'OTPD', 'smsc': 's1', 'priority': 1, 'validity': "
    "'10m',"
    "              'dlr_mask': 19, 'callback_url': 'http://127.0.0.1:8080', 'callback_ttl': '7d'}}",
    /* Redis behind Sentinel; a caller with a Twilio account. */
    "{'listen': '127.0.0.1:8080', 'redis': {'sentinel': {'addrs': ['127.0.0.1:26379'], 'master': 'm'}},"
    " 'ledger': {'path': 'l.db'}, 'secret_env': 'T_SECRET', 'api_keys': [{'name': 'a', 'key_env': "
    "'T_KEY_WEB', 'twilio': {'account_sid': 'AC0123456789abcdef0123456789abcdef',"
    " 'api_keys': [{'sid': 'SK0123456789abcdef0123456789abcdef', 'secret_env': 'T_TW_SK'}]}}],"
    " 'otp': {}, 'provider': {'type': 'file', 'path': 'sms.jsonl'}}",
    /* Twilio with its auth token, then with an API key and a Messaging Service. */
    "{'listen': '127.0.0.1:8080', 'redis': {'url': 'redis://127.0.0.1'}, 'ledger': {'path': 'l.db'},"
    " 'secret_env': 'T_SECRET', 'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB'}], 'otp': {},"
    " 'provider': {'type': 'twilio', 'account_sid_env': 'T_TW_SID', 'auth_token_env': 'T_TW_TOKEN',"
    "              'from': '+15005550006', 'base_url': 'https://api.twilio.com'}}",
    "{'listen': '127.0.0.1:8080', 'redis': {'url': 'redis://127.0.0.1'}, 'ledger': {'path': 'l.db'},"
    " 'secret_env': 'T_SECRET', 'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB'}], 'otp': {},"
    " 'provider': {'type': 'twilio', 'account_sid_env': 'T_TW_SID', 'api_key_sid_env': 'T_TW_KSID',"
    "              'api_key_secret_env': 'T_TW_KSECRET', 'messaging_service_sid': "
    "'MG0123456789abcdef0123456789abcdef'}}",
    "{'listen': '127.0.0.1:8080', 'redis': {'url': 'redis://127.0.0.1'}, 'ledger': {'path': 'l.db'},"
    " 'secret_env': 'T_SECRET', 'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB'}], 'otp': {},"
    " 'provider': {'type': 'webhook', 'url': 'https://sms.example/send', 'token_env': 'T_WH_TOKEN',"
    "              'signing_secret_env': 'T_WH_SIGN'}}",
    /* Providers as a network: two, routed, with failover. */
    "{'listen': '127.0.0.1:8080', 'redis': {'url': 'redis://127.0.0.1'}, 'ledger': {'path': 'l.db'},"
    " 'secret_env': 'T_SECRET', 'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB'}], 'otp': {},"
    " 'providers': {'local': {'type': 'webhook', 'url': 'http://127.0.0.1:9/send', 'rate': 5,"
    "                         'prices': {'*': 3}, 'breaker': {'failures': 3, 'open': '10s'}},"
    "               'global': {'type': 'file', 'path': 'sms.jsonl'}},"
    " 'routes': [{'match': 'IN', 'providers': ['local', 'global']}, {'match': '*', 'providers': ['global']}],"
    " 'failover': {'max_providers': 2}}",
};
#define N_BASES (sizeof(bases) / sizeof(bases[0]))

static const struct {
    const char *name, *value;
} env[] = {
    {"T_SECRET", "0123456789abcdef0123456789abcdef0123"},
    {"T_KEY_WEB", "key-web-0123456789"},
    {"T_KEY_APP", "key-app-0123456789"},
    {"T_TW_SK", "tw-sk-secret-0123456789"},
    {"T_REDIS_PASS", "pw"},
    {"T_K_USER", "u"},
    {"T_K_PASS", "p"},
    {"T_TW_SID", "AC0123456789abcdef0123456789abcdef"},
    {"T_TW_TOKEN", "token"},
    {"T_TW_KSID", "SK0123456789abcdef0123456789abcdef"},
    {"T_TW_KSECRET", "secret"},
    {"T_WH_TOKEN", "webhook-token-0123456789"},
    {"T_WH_SIGN", "0123456789abcdef0123456789abcdef0123"},
};

/* Failures so far, reported together at the end of a test. */
static char report[REPORT_MAX];
static size_t report_len;
static int n_failed;

static void failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failed(const char *fmt, ...)
{
    va_list ap;
    int n;

    n_failed++;
    if (report_len >= sizeof(report) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(report + report_len, sizeof(report) - report_len, fmt, ap);
    va_end(ap);
    if (n > 0)
        report_len += (size_t)n < sizeof(report) - report_len ? (size_t)n : sizeof(report) - report_len - 1;
}

static void report_end(void)
{
    if (n_failed > 0) {
        fputs(report, stderr);
        fail_msg("%d case(s) failed (above)", n_failed);
    }
}

static int setup(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(env) / sizeof(env[0]); i++)
        setenv(env[i].name, env[i].value, 1);
    unsetenv("T_UNSET");
    report_len = 0;
    report[0] = '\0';
    n_failed = 0;
    config_set_secrets(1);
    return 0;
}

static json_t *base(size_t b)
{
    char *text = strdup(bases[b]), *p;
    json_error_t jerr;
    json_t *j;

    assert_non_null(text);
    for (p = text; *p; p++)
        if (*p == '\'')
            *p = '"';
    j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        fail_msg("base %zu: %s", b, jerr.text);
    free(text);
    return j;
}

/* The errors of root's parse (malloc'd), NULL when it loads. */
static char *errors_of(json_t *root, int secrets)
{
    char *text = json_dumps(root, 0), *errs = NULL;
    struct config *c;

    assert_non_null(text);
    config_set_secrets(secrets);
    c = config_parse(text, FILE_NAME, &errs);
    config_set_secrets(1);
    free(text);
    if (c != NULL) {
        config_free(c);
        return NULL;
    }
    assert_non_null(errs);
    return errs;
}

/* The object holding path's last component in root ("*": element 0),
 * that component in *key; NULL when a parent is missing. */
static json_t *parent_of(json_t *root, const char *path, char *key, size_t cap)
{
    char buf[64], *part, *next;
    json_t *at = root;

    snprintf(buf, sizeof(buf), "%s", path);
    for (part = buf; (next = strchr(part, '.')) != NULL; part = next + 1) {
        *next = '\0';
        at = strcmp(part, "*") == 0 ? json_array_get(at, 0) : json_object_get(at, part);
        if (at == NULL)
            return NULL;
    }
    snprintf(key, cap, "%s", part);
    return json_is_object(at) ? at : NULL;
}

/* The path as errors show it: an array's element 0 for "*". */
static const char *shown(const char *path, char *buf, size_t cap)
{
    size_t n = 0;

    for (; *path && n + 2 < cap; path++)
        if (*path == '*')
            buf[n++] = '0';
        else
            buf[n++] = *path;
    buf[n] = '\0';
    return buf;
}

/* The first base with path's parent object, preferring one that holds the key itself. */
static long context_of(const char *path)
{
    char key[64];
    long first = -1;
    size_t b;

    for (b = 0; b < N_BASES; b++) {
        json_t *root = base(b), *obj = parent_of(root, path, key, sizeof(key));
        int has = obj != NULL && json_object_get(obj, key) != NULL;
        if (obj != NULL && first < 0)
            first = (long)b;
        json_decref(root);
        if (has)
            return (long)b;
    }
    return first;
}

/* 1 when a line of errs names path (then ": ", or "." for an element).
 * Others may follow from it (a dlr_mask that needs the callback_url just
 * refused). */
static int names(const char *errs, const char *path)
{
    char want[300];
    size_t n = (size_t)snprintf(want, sizeof(want), "%s: %s", FILE_NAME, path);
    const char *line;

    for (line = errs; line != NULL && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, want, n) == 0 && (line[n] == ':' || line[n] == '.'))
            return 1;
    return 0;
}

/* Sets path in base b to value (NULL: removes it) and checks the parse:
 * refused with every error at path when bad, loaded when not. */
static void expect(size_t b, const char *path, json_t *value, int bad, int secrets, const char *what)
{
    json_t *root = base(b), *obj;
    char key[64], at[256];
    char *errs, *v = value ? json_dumps(value, JSON_ENCODE_ANY) : strdup("(absent)");

    obj = parent_of(root, path, key, sizeof(key));
    assert_non_null(obj);
    if (value != NULL)
        json_object_set(obj, key, value);
    else
        json_object_del(obj, key);
    errs = errors_of(root, secrets);
    shown(path, at, sizeof(at));
    if (bad && errs == NULL)
        failed("%s = %s (%s, base %zu%s): loaded\n", at, v, what, b, secrets ? "" : ", secrets off");
    else if (bad && !names(errs, at))
        failed("%s = %s (%s, base %zu): no error names %s:\n%s", at, v, what, b, at, errs);
    else if (!bad && errs != NULL)
        failed("%s = %s (%s, base %zu): refused:\n%s", at, v, what, b, errs);
    free(errs);
    free(v);
    json_decref(root);
}

static void bad(size_t b, const char *path, json_t *value, const char *what)
{
    expect(b, path, value, 1, 1, what);
    json_decref(value);
}

/* bad, as otpd --check sees it: secrets (the environment) are not read. */
static void bad_unread(size_t b, const char *path, json_t *value, const char *what)
{
    expect(b, path, value, 1, 0, what);
    json_decref(value);
}

static void good(size_t b, const char *path, json_t *value, const char *what)
{
    expect(b, path, value, 0, 1, what);
    json_decref(value);
}

static json_t *ms_text(int64_t ms)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%lldms", (long long)ms);
    return json_string(buf);
}

/* The longest string a row takes, as docs/config.md's table says it. */
static size_t str_max(const struct cfg_row *r)
{
    return r->hi > 0 ? (size_t)r->hi : r->size ? r->size - 1 : CFG_STR_MAX - 1;
}

static void row_cases(const struct cfg_row *r, size_t b)
{
    const char *p = r->path;
    /* A plain row's own bounds and values must load; a hook's rows and a
     * required key (provider.type: its value decides what else is needed)
     * depend on other keys. */
    int plain = !(r->flags & (CFG_BYHOOK | CFG_REQUIRED));
    char *s;
    size_t n;
    int k;

    if (r->flags & CFG_REQUIRED)
        bad(b, p, NULL, "required");
    switch (r->type) {
    case CFG_T_INT:
        bad(b, p, json_integer(r->lo - 1), "below lo");
        if (r->hi < INT64_MAX)
            bad(b, p, json_integer(r->hi + 1), "above hi");
        bad(b, p, json_string("1"), "a string");
        bad(b, p, json_real(1.5), "a fraction");
        bad(b, p, json_true(), "a boolean");
        if (plain) {
            good(b, p, json_integer(r->lo), "lo");
            good(b, p, json_integer(r->hi), "hi");
        }
        break;
    case CFG_T_DUR:
        bad(b, p, json_string("soon"), "not a duration");
        bad(b, p, json_string(""), "empty");
        bad(b, p, json_string("0s"), "zero");
        bad(b, p, json_string("-1s"), "negative");
        bad(b, p, json_string("1.5s"), "a fraction");
        bad(b, p, json_integer(30), "a number");
        if (r->lo > 1)
            bad(b, p, ms_text(r->lo - 1), "below lo");
        bad(b, p, r->hi > 0 ? ms_text(r->hi + 1) : json_string("367d"), "above hi");
        /* Weeks are a unit too ("1w"). */
        if (plain && r->lo <= 7 * 86400000LL && (r->hi == 0 || r->hi >= 7 * 86400000LL))
            good(b, p, json_string("1w"), "a week");
        if (plain && r->lo > 0)
            good(b, p, ms_text(r->lo), "lo");
        if (plain && r->hi > 0)
            good(b, p, ms_text(r->hi), "hi");
        break;
    case CFG_T_STR:
        bad(b, p, json_integer(5), "a number");
        bad(b, p, json_true(), "a boolean");
        n = str_max(r) + 1;
        s = malloc(n + 1);
        assert_non_null(s);
        memset(s, 'a', n);
        s[n] = '\0';
        bad(b, p, json_string(s), "too long");
        free(s);
        bad(b, p, json_string(""), "empty");
        break;
    case CFG_T_ENUM:
        bad(b, p, json_string("nope"), "not a value");
        bad(b, p, json_string(""), "empty");
        bad(b, p, json_integer(1), "a number");
        for (k = 0; plain && r->names[k]; k++)
            good(b, p, json_string(r->names[k]), "a value");
        break;
    case CFG_T_RATIO:
    case CFG_T_PPM:
        bad(b, p, json_integer(0), "zero");
        bad(b, p, json_real(-0.5), "negative");
        bad(b, p, json_real(1.0001), "above 1");
        bad(b, p, json_string("0.5"), "a string");
        bad(b, p, json_true(), "a boolean");
        if (plain) {
            good(b, p, json_integer(1), "1");
            good(b, p, json_real(0.000001), "a millionth");
        }
        break;
    case CFG_T_ENV:
        bad(b, p, json_integer(5), "a number");
        bad(b, p, json_string("T_UNSET"), "unset");
        setenv("T_SHORT", "", 1);
        bad(b, p, json_string("T_SHORT"), "empty");
        if (r->lo > 1) {
            s = calloc((size_t)r->lo, 1);
            assert_non_null(s);
            memset(s, 'x', (size_t)r->lo - 1);
            setenv("T_SHORT", s, 1);
            free(s);
            bad(b, p, json_string("T_SHORT"), "shorter than lo");
        }
        /* otpd --check reads no value, but the variable must still be named. */
        bad_unread(b, p, json_string(""), "no name");
        bad_unread(b, p, json_string("NOT A NAME"), "not a name");
        break;
    case CFG_T_SECTION:
        bad(b, p, json_integer(5), "a number");
        bad(b, p, json_string("x"), "a string");
        bad(b, p, json_array(), "an array");
        break;
    case CFG_T_CUSTOM:
        bad(b, p, json_integer(5), "a number");
        bad(b, p, json_string("x"), "a string");
        break;
    }
}

/* The hooks' rules that join keys: a merge patch (RFC 7386: null removes;
 * ' for ") on a base, and the path its error must name. */
enum { K, S, TT, TK, W }; /* the bases, in bases[]'s order */
#define TB_RULE "{'name': 'r', 'key': 'device', 'algorithm': 'token_bucket', 'limit': 3, 'window': '10m'"
static const struct {
    size_t base;
    const char *patch, *path;
} hook_cases[] = {
    /* listen, listen_internal, tls */
    {K, "{'listen': '127.0.0.1'}", "listen"},
    {K, "{'listen': '127.0.0.1:0'}", "listen"},
    {K, "{'listen': '127.0.0.1:65536'}", "listen"},
    {K, "{'listen': '::1:8080'}", "listen"},
    {K, "{'listen': ':8080'}", "listen"},
    {K, "{'listen_internal': '127.0.0.1:8080'}", "listen_internal"},
    {K, "{'listen_internal': '127.0.0.1'}", "listen_internal"},
    {K, "{'tls': {'cert': ''}}", "tls.cert"},
    {K, "{'tls': {'key': ''}}", "tls.key"},
    /* redis */
    {K, "{'redis': {'url': 'http://127.0.0.1'}}", "redis.url"},
    {K, "{'redis': {'url': 'redis://u:p@127.0.0.1'}}", "redis.url"},
    {K, "{'redis': {'url': 'redis://127.0.0.1:0'}}", "redis.url"},
    {K, "{'redis': {'url': 'redis://127.0.0.1/16'}}", "redis.url"},
    {K, "{'redis': {'url': 'redis:///0'}}", "redis.url"},
    {K, "{'redis': {'url': null}}", "redis.url"},
    {K, "{'redis': {'password_env': null}}", "redis.username"},
    {K, "{'redis': {'username': 'a b'}}", "redis.username"},
    {K, "{'redis': {'username': ''}}", "redis.username"},
    {S, "{'redis': {'sentinel': {'addrs': []}}}", "redis.sentinel.addrs"},
    {S,
     "{'redis': {'sentinel': {'addrs': ['h1:1', 'h2:1', 'h3:1', 'h4:1', 'h5:1', 'h6:1', 'h7:1', 'h8:1', "
     "'h9:1']}}}",
     "redis.sentinel.addrs"},
    {S, "{'redis': {'sentinel': {'addrs': ['127.0.0.1']}}}", "redis.sentinel.addrs.0"},
    {S, "{'redis': {'sentinel': {'addrs': [5]}}}", "redis.sentinel.addrs.0"},
    {S, "{'redis': {'sentinel': {'addrs': ['127.0.0.1:70000']}}}", "redis.sentinel.addrs.0"},
    {S, "{'redis': {'sentinel': {'master': null}}}", "redis.sentinel.master"},
    /* api_keys */
    {K, "{'api_keys': []}", "api_keys"},
    {K, "{'api_keys': [5]}", "api_keys.0"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB'}, {'name': 'a', 'key_env': 'T_KEY_APP'}]}",
     "api_keys.1.name"},
    {K, "{'api_keys': [{'name': '', 'key_env': 'T_KEY_WEB'}]}", "api_keys.0.name"},
    {K, "{'api_keys': [{'name': 'a\\'b', 'key_env': 'T_KEY_WEB'}]}", "api_keys.0.name"},
    {K, "{'api_keys': [{'name': 'a b', 'key_env': 'T_KEY_WEB'}]}", "api_keys.0.name"},
    {K, "{'api_keys': [{'name': 'a{b}', 'key_env': 'T_KEY_WEB'}]}", "api_keys.0.name"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'role': 'user'}]}", "api_keys.0.role"},
    /* api_keys.*.webotp_origin, otp.templates */
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'webotp_origin': 'https://login.example.com'}]}",
     "api_keys.0.webotp_origin"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'webotp_origin': 'login..example.com'}]}",
     "api_keys.0.webotp_origin"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'webotp_origin': '-login.example.com'}]}",
     "api_keys.0.webotp_origin"},
    {K, "{'otp': {'templates': {'hi': 'no code here'}}}", "otp.templates.hi"},
    {K, "{'otp': {'templates': {'english': '{code}'}}}", "otp.templates.english"},
    {K, "{'otp': {'templates': {'pt-B': '{code}'}}}", "otp.templates.pt-B"},
    {K, "{'otp': {'templates': {'pt-BR': '{code}', 'pt-br': '{code}'}}}", "otp.templates.pt-br"},
    {K, "{'otp': {'templates': {'hi': ''}}}", "otp.templates.hi"},
    {K, "{'otp': {'templates': ['{code}']}}", "otp.templates"},
    /* api_keys.*.twilio */
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': 5}]}", "api_keys.0.twilio"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'role': 'admin', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef'}}]}",
     "api_keys.0.twilio"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': 'AC0123'}}]}",
     "api_keys.0.twilio.account_sid"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'SK0123456789abcdef0123456789abcdef'}}]}",
     "api_keys.0.twilio.account_sid"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef'}}, {'name': 'b', 'key_env': 'T_KEY_APP', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef'}}]}",
     "api_keys.1.twilio.account_sid"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef', 'api_keys': 5}}]}",
     "api_keys.0.twilio.api_keys"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef', 'api_keys': [{'sid': 'AC0123456789abcdef0123456789abcdef', "
        "'secret_env': 'T_TW_SK'}]}}]}",
     "api_keys.0.twilio.api_keys.0.sid"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef', 'api_keys': [{'sid': 'SK0123456789abcdef0123456789abcdef', "
        "'secret_env': 'T_TW_SK'}, {'sid': 'SK0123456789abcdef0123456789abcdef', 'secret_env': 'T_TW_SK'}]}}]}",
     "api_keys.0.twilio.api_keys.1.sid"},
    {K, "{'api_keys': [{'name': 'a', 'key_env': 'T_KEY_WEB', 'twilio': {'account_sid': "
        "'AC0123456789abcdef0123456789abcdef', 'api_keys': [{'sid': 'SK0123456789abcdef0123456789abcdef', "
        "'secret_env': 'T_UNSET'}]}}]}",
     "api_keys.0.twilio.api_keys.0.secret_env"},
    /* otp */
    {K, "{'otp': {'template': 'no code here'}}", "otp.template"},
    {K,
     "{'otp': {'length': 10, 'template': '{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}"
     "{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}"
     "{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}{code}"
     "{code}{code}{code}{code}'}}",
     "otp.template"},
    /* limits: each rule field per algorithm */
    {K, "{'limits': [" TB_RULE ", 'name': 'Bad'}]}", "limits.0.name"},
    {K, "{'limits': [" TB_RULE "}, " TB_RULE "}]}", "limits.1.name"},
    {K, "{'limits': [" TB_RULE ", 'key': 'nope'}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': []}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': ['phone', 'phone']}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': ['global', 'phone']}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': ['phone', 'device', 'api_key', 'purpose', 'region']}]}",
     "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': 'phone_prefix:0'}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': 'phone_prefix:16'}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': 'phone_prefix:07'}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'window': null}]}", "limits.0.window"},
    {K, "{'limits': [" TB_RULE ", 'limit': null}]}", "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'limit': 601, 'window': '600ms'}]}", "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'burst': 0}]}", "limits.0.burst"},
    {K, "{'limits': [" TB_RULE ", 'delay': '1s'}]}", "limits.0.delay"},
    {K, "{'limits': [" TB_RULE ", 'if_store_down': 'local_fallback'}]}", "limits.0.if_store_down"},
    {K, "{'limits': [" TB_RULE ", 'local_limit': 5}]}", "limits.0.local_limit"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'fixed_window', 'burst': 2}]}", "limits.0.burst"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'fixed_window', 'limit': 1000000001}]}", "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'sliding_log', 'limit': 1001}]}", "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'sliding_window_counter', 'limit': 1000001}]}",
     "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'sliding_window_counter', 'window': '31d'}]}",
     "limits.0.window"},
    {K, "{'limits': [" TB_RULE ", 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'limit': 1001}]}",
     "limits.0.limit"},
    {K, "{'limits': [" TB_RULE ", 'algorithm': 'wrong_guess_cap'}]}", "limits.0.key"},
    {K, "{'limits': [" TB_RULE ", 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'on': 'verify'}]}",
     "limits.0.on"},
    {K,
     "{'limits': [" TB_RULE ", 'key': 'phone', 'algorithm': 'wrong_guess_cap', 'penalty': {'after': 1, "
     "'within': '1m', 'block': '1m'}}]}",
     "limits.0.penalty"},
    {K,
     "{'limits': [" TB_RULE
     ", 'key': 'phone', 'algorithm': 'wrong_guess_cap'}, {'name': 'w2', 'key': 'phone',"
     " 'algorithm': 'wrong_guess_cap', 'limit': 3, 'window': '10m'}]}",
     "limits.1"},
    {K, "{'limits': [{'name': 'r', 'key': 'device', 'algorithm': 'resend_delay', 'delay': '30s'}]}",
     "limits.0.key"},
    {K, "{'limits': [{'name': 'r', 'key': 'phone', 'algorithm': 'resend_delay'}]}", "limits.0.delay"},
    {K,
     "{'limits': [{'name': 'r', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'limit': 1}]}",
     "limits.0.limit"},
    {K,
     "{'limits': [{'name': 'r', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'window': "
     "'1m'}]}",
     "limits.0.window"},
    {K,
     "{'limits': [{'name': 'r', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'burst': 1}]}",
     "limits.0.burst"},
    {K,
     "{'limits': [{'name': 'r', 'key': 'phone', 'algorithm': 'resend_delay', 'delay': '30s', 'on': 'both'}]}",
     "limits.0.on"},
    {K, "{'limits': [" TB_RULE ", 'penalty': {'after': 1, 'within': '1m'}}]}", "limits.0.penalty.block"},
    {K, "{'limits': [" TB_RULE ", 'penalty': {'after': 1, 'within': '999ms', 'block': '1m'}}]}",
     "limits.0.penalty.within"},
    {K, "{'limits': [" TB_RULE ", 'penalty': {'after': 1, 'within': '1m', 'block': '31d'}}]}",
     "limits.0.penalty.block"},
    {K,
     "{'limits': [{'name': 'p1', 'key': 'phone_prefix:1', 'algorithm': 'fixed_window', 'limit': 1, "
     "'window': '1h'}, {'name': 'p2', 'key': 'phone_prefix:2', 'algorithm': 'fixed_window', 'limit': 1, "
     "'window': '1h'}, {'name': 'p3', 'key': 'phone_prefix:3', 'algorithm': 'fixed_window', 'limit': 1, "
     "'window': '1h'}, {'name': 'p4', 'key': 'phone_prefix:4', 'algorithm': 'fixed_window', 'limit': 1, "
     "'window': '1h'}, {'name': 'p5', 'key': 'phone_prefix:5', 'algorithm': 'fixed_window', 'limit': 1, "
     "'window': '1h'}]}",
     "limits"},
    /* phone, countries */
    {K, "{'phone': {'types': []}}", "phone.types"},
    {K, "{'phone': {'types': ['mobile', 'nope']}}", "phone.types.1"},
    {K, "{'phone': {'types': ['mobile', 'mobile']}}", "phone.types.1"},
    {K, "{'countries': {'allow': []}}", "countries.allow"},
    {K, "{'countries': {'allow': ['XX']}}", "countries.allow.0"},
    {K, "{'countries': {'allow': ['in']}}", "countries.allow.0"},
    {K, "{'countries': {'deny': ['US', 'US']}}", "countries.deny.1"},
    {K, "{'countries': {'deny': ['IN']}}", "countries.deny.0"},
    {K, "{'countries': {'monitor': 'GB'}}", "countries.monitor"},
    /* cost */
    {K, "{'cost': {'currency': 'inr'}}", "cost.currency"},
    {K, "{'cost': {'currency': 'IN'}}", "cost.currency"},
    {K, "{'cost': {'currency': 'IN\\'R'}}", "cost.currency"},
    {K, "{'cost': {'prices': {'91': 20, '*': 500}}}", "cost.prices.91"},
    {K, "{'cost': {'prices': {'+9a': 20, '*': 500}}}", "cost.prices.+9a"},
    {K, "{'cost': {'prices': {'+91': -1, '*': 500}}}", "cost.prices.+91"},
    {K, "{'cost': {'prices': {'+91': 1.5, '*': 500}}}", "cost.prices.+91"},
    {K, "{'cost': {'prices': {'+91': 1000000001, '*': 500}}}", "cost.prices.+91"},
    {K, "{'cost': {'prices': {'+91': 20, '*': null}}}", "cost.prices"},
    {K, "{'cost': {'caps': [5]}}", "cost.caps.0"},
    {K, "{'cost': {'caps': [{'max': 5}]}}", "cost.caps.0.window"},
    {K, "{'cost': {'caps': [{'window': '1h'}]}}", "cost.caps.0.max"},
    {K, "{'cost': {'caps': [{'window': '1h', 'max': 5, 'per': 'x'}]}}", "cost.caps.0.per"},
    {K,
     "{'cost': {'caps': [{'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}, "
     "{'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}, "
     "{'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}, {'window': '1h', 'max': 1}]}}",
     "cost.caps"},
    /* provider: what each type needs, and the keys of other types */
    {K, "{'provider': {'url': null}}", "provider.url"},
    {K, "{'provider': {'from': null}}", "provider.from"},
    {K, "{'provider': {'url': 'ftp://h/x'}}", "provider.url"},
    {K, "{'provider': {'smsc': 'a;b'}}", "provider.smsc"},
    {K, "{'provider': {'validity': '90s'}}", "provider.validity"},
    {K, "{'provider': {'callback_url': null}}", "provider.dlr_mask"},
    {K, "{'provider': {'callback_url': 'otpd.example'}}", "provider.callback_url"},
    {K, "{'provider': {'path': 'x'}}", "provider.path"},
    {K, "{'provider': {'base_url': 'https://x'}}", "provider.base_url"},
    {K, "{'provider': {'token_env': 'T_WH_TOKEN'}}", "provider.token_env"},
    {K, "{'provider': {'account_sid_env': 'T_TW_SID'}}", "provider.account_sid_env"},
    {S, "{'provider': {'path': null}}", "provider.path"},
    {S, "{'provider': {'url': 'http://x'}}", "provider.url"},
    {S, "{'provider': {'from': 'OTPD'}}", "provider.from"},
    {W, "{'provider': {'url': null}}", "provider.url"},
    {W, "{'provider': {'from': 'OTPD'}}", "provider.from"},
    {W, "{'provider': {'username_env': 'T_K_USER'}}", "provider.username_env"},
    {W, "{'provider': {'token_env': 'T_WH_SPACE'}}", "provider.token_env"},
    {TT, "{'provider': {'url': 'http://x'}}", "provider.url"},
    {TT, "{'provider': {'base_url': 'api.twilio.com'}}", "provider.base_url"},
    {TT, "{'provider': {'from': null}}", "provider"},
    {TT, "{'provider': {'messaging_service_sid': 'MG0123456789abcdef0123456789abcdef'}}", "provider"},
    {TT, "{'provider': {'auth_token_env': null}}", "provider"},
    {TT, "{'provider': {'account_sid_env': 'T_BAD_SID'}}", "provider.account_sid_env"},
    {TT, "{'provider': {'api_key_sid_env': 'T_TW_KSID'}}", "provider.api_key_sid_env"},
    {TT, "{'provider': {'api_key_sid_env': 'T_TW_KSID', 'api_key_secret_env': 'T_TW_KSECRET'}}",
     "provider.auth_token_env"},
    {TK, "{'provider': {'api_key_sid_env': 'T_BAD_SID'}}", "provider.api_key_sid_env"},
    {TK, "{'provider': {'api_key_secret_env': null}}", "provider.api_key_sid_env"},
    {TK, "{'provider': {'messaging_service_sid': 'MG0123'}}", "provider.messaging_service_sid"},
    {TK, "{'provider': {'callback_url': 'https://otpd.example'}}", "provider.callback_url"},
};

/* Applies the merge patch p to dst. */
static void merge(json_t *dst, json_t *p)
{
    const char *k;
    json_t *v;

    json_object_foreach(p, k, v)
    {
        json_t *d = json_object_get(dst, k);
        if (json_is_null(v))
            json_object_del(dst, k);
        else if (json_is_object(v) && json_is_object(d))
            merge(d, v);
        else
            json_object_set(dst, k, v);
    }
}

static void test_hook_rules(void **state)
{
    size_t i;

    (void)state;
    setenv("T_BAD_SID", "AC0123", 1);
    setenv("T_WH_SPACE", "webhook token with spaces", 1);
    for (i = 0; i < sizeof(hook_cases) / sizeof(hook_cases[0]); i++) {
        char *text = strdup(hook_cases[i].patch), *q, *errs;
        json_t *root = base(hook_cases[i].base), *p;
        json_error_t jerr;

        assert_non_null(text);
        for (q = text; *q; q++)
            if (*q == '\'')
                *q = '"';
        /* A repeated key replaces the one before it (TB_RULE's name). */
        if ((p = json_loads(text, 0, &jerr)) == NULL)
            fail_msg("case %zu: %s", i, jerr.text);
        merge(root, p);
        errs = errors_of(root, 1);
        if (errs == NULL)
            failed("case %zu %s: loaded\n", i, hook_cases[i].patch);
        else if (!names(errs, hook_cases[i].path))
            failed("case %zu %s: no error names %s:\n%s", i, hook_cases[i].patch, hook_cases[i].path, errs);
        free(errs);
        free(text);
        json_decref(p);
        json_decref(root);
    }
    report_end();
}

static void test_bases_load(void **state)
{
    size_t b;

    (void)state;
    for (b = 0; b < N_BASES; b++) {
        json_t *root = base(b);
        char *errs = errors_of(root, 1), *errs_check = errors_of(root, 0);
        if (errs != NULL || errs_check != NULL)
            failed("base %zu:\n%s%s", b, errs ? errs : "", errs_check ? errs_check : "");
        free(errs);
        free(errs_check);
        json_decref(root);
    }
    report_end();
}

static void test_every_row(void **state)
{
    size_t i;
    long b;

    (void)state;
    for (i = 1; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        if ((b = context_of(r->path)) < 0) {
            failed("%s: no base config holds its parent; add one to bases[]\n", r->path);
            continue;
        }
        row_cases(r, (size_t)b);
    }
    report_end();
}

/* Every object the table describes (a section, an element of a list of
 * objects) refuses a key it does not list, naming it. */
static void test_unknown_keys(void **state)
{
    char path[128];
    const char *dot;
    size_t i, j;
    long b;

    (void)state;
    for (i = 1; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        /* Each parent once: the first row under it. */
        dot = strrchr(r->path, '.');
        for (j = 1; j < i && !(dot && strncmp(cfg_rows[j].path, r->path, (size_t)(dot - r->path) + 1) == 0 &&
                               strchr(cfg_rows[j].path + (dot - r->path) + 1, '.') == NULL);
             j++)
            ;
        if (j < i || (dot == NULL && i > 1))
            continue;
        snprintf(path, sizeof(path), "%.*szzz_unknown", dot ? (int)(dot - r->path) + 1 : 0, r->path);
        if ((b = context_of(path)) < 0) {
            failed("%s: no base config holds its parent; add one to bases[]\n", path);
            continue;
        }
        bad((size_t)b, path, json_integer(1), "unknown key");
    }
    report_end();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bases_load, setup),
        cmocka_unit_test_setup(test_every_row, setup),
        cmocka_unit_test_setup(test_unknown_keys, setup),
        cmocka_unit_test_setup(test_hook_rules, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
