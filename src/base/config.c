/*
 * config: JSON to struct config, with every problem reported, not just the
 * first. Runs at start-up and on SIGHUP, never on a request path. This file
 * holds the key table (cfg_rows) and the readers of keys that need more
 * than their row (hooks); conftab.c walks the table.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config_int.h"
#include "duration.h"
#include "log.h"
#include "phone.h"

#define CFG_ERRORS_MAX 65536

/* Every allocation of the loader goes through cfg_alloc, so a test can make
 * any one of them fail (config_set_alloc). free() releases them all. */
static void *(*cfg_alloc_fn)(size_t) = malloc;

/* 0: loads leave every secret NULL (config_set_secrets). */
static int cfg_read_secrets = 1;

void config_set_secrets(int read)
{
    cfg_read_secrets = read;
}

void config_set_alloc(void *(*fn)(size_t))
{
    cfg_alloc_fn = fn ? fn : malloc;
}

/* calloc through cfg_alloc_fn; NULL on overflow or out of memory. */
static void *cfg_calloc(size_t n, size_t size)
{
    size_t bytes;
    void *p;

    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    bytes = n * size;
    if ((p = cfg_alloc_fn(bytes > 0 ? bytes : 1)) != NULL)
        memset(p, 0, bytes);
    return p;
}

static char *cfg_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = cfg_alloc_fn(n);

    if (p != NULL)
        memcpy(p, s, n);
    return p;
}


void cfg_error(struct cfg_ctx *x, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n;

    x->n_err++;
    if (x->err == NULL && (x->err = cfg_calloc(1, CFG_ERRORS_MAX)) == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    n = snprintf(x->err + x->err_len, CFG_ERRORS_MAX - x->err_len, "%s: %s: %s\n", x->file, path, msg);
    if (n > 0 && x->err_len + (size_t)n < CFG_ERRORS_MAX)
        x->err_len += (size_t)n;
}

/* Joins a parent path and a key or index into buf. */
const char *cfg_path(char *buf, size_t cap, const char *parent, const char *key)
{
    if (parent[0] == '\0')
        snprintf(buf, cap, "%s", key);
    else
        snprintf(buf, cap, "%s.%s", parent, key);
    return buf;
}


/* Gets an object member; reports it when required and absent. */
json_t *cfg_member(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    char p[256];

    if (v == NULL && required)
        cfg_error(x, cfg_path(p, sizeof(p), parent, key), "is required");
    return v;
}

/* Copies a string member into out (cap bytes); keeps out when absent. */
int cfg_str(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, char *out,
                   size_t cap)
{
    json_t *v = cfg_member(x, obj, parent, key, required);
    char p[256];
    size_t n;

    if (v == NULL)
        return 0;
    cfg_path(p, sizeof(p), parent, key);
    if (!json_is_string(v)) {
        cfg_error(x, p, "must be a string");
        return 0;
    }
    n = json_string_length(v);
    if (n >= cap || strlen(json_string_value(v)) != n) {
        cfg_error(x, p, "must be at most %zu bytes with no NUL", cap - 1);
        return 0;
    }
    memcpy(out, json_string_value(v), n + 1);
    return 1;
}

/* Reads an integer member within [lo, hi]; keeps *out when absent. */
int cfg_int(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, int64_t lo,
                   int64_t hi, int64_t *out)
{
    json_t *v = cfg_member(x, obj, parent, key, required);
    char p[256];

    if (v == NULL)
        return 0;
    cfg_path(p, sizeof(p), parent, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        cfg_error(x, p, "must be an integer from %lld to %lld", (long long)lo, (long long)hi);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}


/* Reads a duration string member ("30s"); keeps *out_ms when absent. */
int cfg_dur(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required,
                   int64_t *out_ms)
{
    char s[32], p[256];

    if (!cfg_str(x, obj, parent, key, required, s, sizeof(s)))
        return 0;
    if (duration_parse(s, out_ms) != OTP_OK) {
        cfg_error(x, cfg_path(p, sizeof(p), parent, key),
                  "must be a duration such as \"500ms\", \"30s\", \"10m\", \"2h\", \"1d\" or \"1w\"");
        return 0;
    }
    return 1;
}

/*
 * Secret variables once read: config_scrub_env wipes them from the
 * environment (so /proc/PID/environ no longer holds them) and keeps a copy
 * here, so a SIGHUP reload still finds them. Main thread only.
 */
#define CFG_ENV_MAX 32
static struct {
    char name[128];
    char *value; /* NULL until scrubbed */
} cfg_env_seen[CFG_ENV_MAX];
static size_t cfg_n_env_seen;

static const char *cfg_getenv(const char *name)
{
    const char *v = getenv(name);
    size_t i;

    for (i = 0; i < cfg_n_env_seen && strcmp(cfg_env_seen[i].name, name) != 0; i++)
        ;
    if (i == cfg_n_env_seen && i < CFG_ENV_MAX && strlen(name) < sizeof(cfg_env_seen[i].name))
        snprintf(cfg_env_seen[cfg_n_env_seen++].name, sizeof(cfg_env_seen[i].name), "%s", name);
    if (v == NULL && i < cfg_n_env_seen)
        v = cfg_env_seen[i].value;
    return v;
}

int config_scrub_env(void)
{
    size_t i;
    int failed = 0;

    for (i = 0; i < cfg_n_env_seen; i++) {
        char *v = getenv(cfg_env_seen[i].name);
        if (v == NULL)
            continue;
        if (cfg_env_seen[i].value == NULL && (cfg_env_seen[i].value = strdup(v)) == NULL) {
            failed = 1;
            continue;
        }
        /* In place: the kernel shows the original environment block, which
         * unsetenv alone leaves as it was. */
        explicit_bzero(v, strlen(v));
        unsetenv(cfg_env_seen[i].name);
    }
    return failed ? -1 : 0;
}

/* 1 when name can be an environment variable's (POSIX's portable names:
 * a letter or _, then letters, digits or _). */
static int cfg_env_name_ok(const char *name)
{
    size_t n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");

    return n > 0 && name[n] == '\0' && (name[0] < '0' || name[0] > '9');
}

/* Reads the environment variable named by member key; NULL when absent.
 * The name is checked with secrets off too (otpd --check): a name no
 * variable can have would fail only at start. */
char *cfg_env(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required,
                     size_t min_len)
{
    char name[128], p[256];
    const char *v;
    char *copy;

    if (!cfg_str(x, obj, parent, key, required, name, sizeof(name)))
        return NULL;
    cfg_path(p, sizeof(p), parent, key);
    if (!cfg_env_name_ok(name)) {
        cfg_error(x, p, "must name an environment variable: a letter or _, then letters, digits or _");
        return NULL;
    }
    if (!cfg_read_secrets)
        return NULL;
    v = cfg_getenv(name);
    if (v == NULL || v[0] == '\0') {
        cfg_error(x, p, "environment variable %s is not set", name);
        return NULL;
    }
    if (strlen(v) < min_len) {
        cfg_error(x, p, "environment variable %s must hold at least %zu bytes", name, min_len);
        return NULL;
    }
    if ((copy = cfg_strdup(v)) == NULL)
        cfg_error(x, p, "out of memory");
    return copy;
}

/* "\"x\" is not one of the allowed values: a, b, c". */
static void cfg_enum_error(struct cfg_ctx *x, const char *path, const char *got, const char *const *names)
{
    char list[256];
    size_t n = 0;
    int i;

    list[0] = '\0';
    for (i = 0; names[i] && n < sizeof(list); i++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", names[i]);
    cfg_error(x, path, "\"%s\" is not one of the allowed values: %s", got, list);
}

int cfg_enum(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required,
                    const char *const *names, int *out)
{
    char s[64], p[256];
    int i;

    if (!cfg_str(x, obj, parent, key, required, s, sizeof(s)))
        return 0;
    for (i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) {
            *out = i;
            return 1;
        }
    cfg_enum_error(x, cfg_path(p, sizeof(p), parent, key), s, names);
    return 0;
}

#define CFG_30D_MS (30LL * 24 * 3600 * 1000)

static const char *const key_names[] = {"phone",   "device",       "client_ip", "api_key",
                                        "global",  "purpose",      "phone_prefix", "region", NULL};
static const char *const cfg_on_names[] = {"issue", "verify", "both", NULL};
static const char *const cfg_mode_names[] = {"enforce", "shadow", NULL};
static const char *const cfg_down_names[] = {"fail_closed", "local_fallback", NULL};
static const char *const cfg_cap_key_names[] = {"api_key", NULL};
static const char *const cfg_provider_names[] = {"file", "webhook", "kannel", "twilio", NULL};
static const char *const algo_names[] = {"sliding_log",  "fixed_window",    "token_bucket",
                                         "resend_delay", "wrong_guess_cap", "sliding_window_counter", NULL};

const char *config_key_name(enum cfg_key k)
{
    return key_names[k];
}

const char *config_algo_name(enum cfg_algo a)
{
    return algo_names[a];
}

/* Parses "PORT" fully into 1..65535; -1 otherwise. */
static long cfg_port(const char *s)
{
    char *end;
    long port;

    errno = 0;
    port = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || port < 1 || port > 65535)
        return -1;
    return port;
}

/* Splits "host:port" or "[v6]:port" in place; NULL when malformed. */
static char *cfg_hostport(char *s, long *port)
{
    char *colon = strrchr(s, ':');

    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return NULL;
        *close = '\0';
        colon = close + 1;
        s++;
    } else if (colon == NULL || strchr(s, ':') != colon) {
        return NULL; /* no port, or an IPv6 address without brackets */
    }
    *colon = '\0';
    if ((*port = cfg_port(colon + 1)) < 0)
        return NULL;
    return s;
}

/* "127.0.0.1:8080" or "[::1]:8080". */
static void cfg_listen(struct cfg_ctx *x, struct config *c, json_t *root)
{
    char s[64], *host;
    long port;

    if (!cfg_str(x, root, "", "listen", 1, s, sizeof(s)))
        return;
    if ((host = cfg_hostport(s, &port)) == NULL || host[0] == '\0') {
        cfg_error(x, "listen", "must be HOST:PORT, IPv6 as [ADDR]:PORT; port must be from 1 to 65535");
        return;
    }
    snprintf(c->http.listen_host, sizeof(c->http.listen_host), "%s", host);
    c->http.listen_port = (int)port;
}

/* listen_internal: like listen, and not listen's own address (the
 * second bind would fail later, with a vaguer message). */
static void cfg_listen_internal(struct cfg_ctx *x, struct config *c, json_t *root)
{
    char s[64], *host;
    long port;

    if (!cfg_str(x, root, "", "listen_internal", 0, s, sizeof(s)))
        return;
    if ((host = cfg_hostport(s, &port)) == NULL || host[0] == '\0') {
        cfg_error(x, "listen_internal", "must be HOST:PORT, IPv6 as [ADDR]:PORT; port must be from 1 to 65535");
        return;
    }
    if (port == c->http.listen_port && strcmp(host, c->http.listen_host) == 0) {
        cfg_error(x, "listen_internal", "must differ from listen");
        return;
    }
    snprintf(c->http.listen_internal_host, sizeof(c->http.listen_internal_host), "%s", host);
    c->http.listen_internal_port = (int)port;
}

/* tls: present means HTTPS; both files are required and named (rows). */
static void cfg_tls(struct cfg_ctx *x, struct config *c, json_t *obj)
{
    (void)x;
    (void)obj;
    c->tls.on = 1;
}

/* "redis://host[:port][/db]"; the password comes from redis.password_env. */
static void cfg_redis_url(struct cfg_ctx *x, struct config *c, const char *url)
{
    const char *p = url, *slash;
    char hostport[256], *host = hostport, *end;
    long port = 6379, db = 0;
    size_t n;

    if (strncmp(p, "redis://", 8) != 0) {
        cfg_error(x, "redis.url", "must start with redis://");
        return;
    }
    p += 8;
    if (strchr(p, '@') != NULL) {
        /* Secrets come from the environment, never from the file. */
        cfg_error(x, "redis.url", "must not hold credentials; name them with redis.password_env");
        return;
    }
    slash = strchr(p, '/');
    n = slash ? (size_t)(slash - p) : strlen(p);
    if (n >= sizeof(hostport)) {
        cfg_error(x, "redis.url", "host is too long");
        return;
    }
    memcpy(hostport, p, n);
    hostport[n] = '\0';
    if (strchr(hostport, ':') != NULL && (host = cfg_hostport(hostport, &port)) == NULL) {
        cfg_error(x, "redis.url", "must be redis://HOST[:PORT][/DB]; port must be from 1 to 65535");
        return;
    }
    if (host[0] == '\0') {
        cfg_error(x, "redis.url", "has no host");
        return;
    }
    if (slash != NULL && slash[1] != '\0') {
        errno = 0;
        db = strtol(slash + 1, &end, 10);
        if (errno || *end != '\0' || db < 0 || db > 15) {
            cfg_error(x, "redis.url", "database must be from 0 to 15");
            return;
        }
    }
    snprintf(c->redis.host, sizeof(c->redis.host), "%s", host);
    c->redis.port = (int)port;
    c->redis.db = (int)db;
}

/* redis.sentinel.addrs: ["host:port", ...] (s is redis.sentinel). */
static void cfg_sentinel_addrs(struct cfg_ctx *x, struct config *c, json_t *s)
{
    json_t *addrs = json_object_get(s, "addrs"), *a;
    char buf[300], path[64], *host;
    size_t i;
    long port;

    if (!json_is_array(addrs) || json_array_size(addrs) == 0 || json_array_size(addrs) > CFG_SENTINELS_MAX) {
        cfg_error(x, "redis.sentinel.addrs", "must be an array of 1 to %d \"HOST:PORT\"", CFG_SENTINELS_MAX);
        return;
    }
    json_array_foreach(addrs, i, a) {
        snprintf(path, sizeof(path), "redis.sentinel.addrs.%zu", i);
        if (!json_is_string(a) || json_string_length(a) >= sizeof(buf)) {
            cfg_error(x, path, "must be \"HOST:PORT\"");
            continue;
        }
        snprintf(buf, sizeof(buf), "%s", json_string_value(a));
        if ((host = cfg_hostport(buf, &port)) == NULL || host[0] == '\0' || strlen(host) >= 256) {
            cfg_error(x, path, "must be \"HOST:PORT\" with a port from 1 to 65535");
            continue;
        }
        snprintf(c->redis.sentinel_hosts[c->redis.n_sentinels], 256, "%s", host);
        c->redis.sentinel_ports[c->redis.n_sentinels++] = (int)port;
    }
}

/* redis.username: an ACL user, which needs its password. */
static void cfg_redis_user(struct cfg_ctx *x, struct config *c, json_t *r)
{
    const char *u = c->redis.username;
    size_t i;

    if (!cfg_str(x, r, "redis", "username", 0, c->redis.username, sizeof(c->redis.username)))
        return;
    for (i = 0; u[i] > 0x20 && u[i] < 0x7f; i++)
        ;
    if (i == 0 || u[i] != '\0')
        cfg_error(x, "redis.username", "must be 1 to %d printable ASCII bytes without spaces", CFG_NAME_MAX - 1);
    else if (json_object_get(r, "password_env") == NULL)
        cfg_error(x, "redis.username", "needs redis.password_env");
}


/* After redis's rows: the URL (required unless sentinels give the master)
 * and the ACL user. */
static void cfg_redis(struct cfg_ctx *x, struct config *c, json_t *r)
{
    json_t *sentinel = json_object_get(r, "sentinel");
    char url[CFG_STR_MAX];

    /* With sentinels the master's address comes from them; the URL, if
     * any, still gives the database. */
    if (cfg_str(x, r, "redis", "url", sentinel == NULL, url, sizeof(url)))
        cfg_redis_url(x, c, url);
    cfg_redis_user(x, c, r);
}

static const char *const cfg_role_names[] = {"admin", NULL};
#define CFG_CALLER_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

static void cfg_api_keys(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *arr = json_object_get(root, "api_keys"), *k;
    size_t i, j;
    char p[64], q[80];
    int role;

    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 256) {
        cfg_error(x, "api_keys", "must be an array of 1 to 256 keys");
        return;
    }
    /* Out of memory is a load error like any other: a config that silently
     * lost its keys, rules, prices or caps must never load. */
    if ((c->keys.api_keys = cfg_calloc(json_array_size(arr), sizeof(*c->keys.api_keys))) == NULL) {
        cfg_error(x, "api_keys", "out of memory");
        return;
    }
    json_array_foreach(arr, i, k) {
        struct cfg_api_key *a = &c->keys.api_keys[c->keys.n_api_keys++];
        snprintf(p, sizeof(p), "api_keys.%zu", i);
        if (!json_is_object(k)) {
            cfg_error(x, p, "must be an object");
            continue;
        }
        cfg_unknown(x, k, p, "api_keys.*");
        cfg_path(q, sizeof(q), p, "name");
        /* The name is a metric label, a log field and part of Redis keys:
         * nothing there may need quoting. */
        if (cfg_str(x, k, p, "name", 1, a->name, sizeof(a->name)) &&
            (a->name[0] == '\0' || strspn(a->name, CFG_CALLER_CHARS) != strlen(a->name))) {
            cfg_error(x, q, "must be 1 to %d of A-Z, a-z, 0-9, '.', '_' and '-'", CFG_NAME_MAX - 1);
            a->name[0] = '\0';
        }
        a->key = cfg_env(x, k, p, "key_env", 1, 16);
        if (cfg_enum(x, k, p, "role", 0, cfg_role_names, &role))
            a->admin = 1;
        for (j = 0; j + 1 < c->keys.n_api_keys; j++)
            if (a->name[0] && strcmp(c->keys.api_keys[j].name, a->name) == 0)
                cfg_error(x, q, "\"%s\" is used twice", a->name);
    }
}

/* The longest text tmpl can render to: every {code} as digits digits and
 * every {minutes} as "60" (otp.ttl is at most an hour). */
static size_t cfg_rendered_max(const char *tmpl, int digits)
{
    size_t n = 0;

    while (*tmpl) {
        if (strncmp(tmpl, "{code}", 6) == 0)
            n += (size_t)digits, tmpl += 6;
        else if (strncmp(tmpl, "{minutes}", 9) == 0)
            n += 2, tmpl += 9;
        else
            n++, tmpl++;
    }
    return n;
}

/* After otp's rows: the template must hold the code and fit one message. */
static void cfg_otp(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *t = json_object_get(o, "template");

    /* Only a template that was read (a bad one is reported already). */
    if (!json_is_string(t) || strcmp(json_string_value(t), c->otp.tmpl) != 0)
        return;
    if (strstr(c->otp.tmpl, "{code}") == NULL)
        cfg_error(x, "otp.template", "must contain {code}");
    else if (cfg_rendered_max(c->otp.tmpl, c->otp.length) > CFG_TEXT_MAX)
        cfg_error(x, "otp.template", "renders longer than %d bytes", CFG_TEXT_MAX);
}

/* Reads one key kind ("phone", "phone_prefix:7", ...) into *kind and, for
 * phone_prefix, *digits. 0 when s is none of them. */
static int cfg_key_one(const char *s, int *kind, int *digits)
{
    int i;
    char *end;
    long n;

    if (strncmp(s, "phone_prefix:", 13) == 0) {
        n = strtol(s + 13, &end, 10);
        if (s[13] < '1' || s[13] > '9' || *end != '\0' || n < 1 || n > 15)
            return 0;
        *kind = CFG_KEY_PHONE_PREFIX;
        *digits = (int)n;
        return 1;
    }
    for (i = 0; key_names[i]; i++)
        if (i != CFG_KEY_PHONE_PREFIX && strcmp(key_names[i], s) == 0) {
            *kind = i;
            return 1;
        }
    return 0;
}

/* A rule's "key": one kind, or a list of 1 to 4 distinct kinds (a composite
 * key such as ["phone", "api_key"]: one counter per combination). *first
 * is the lowest kind, whose Redis key holds the state; -1 when invalid. */
static void cfg_rule_key(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule, int *first)
{
    json_t *v = cfg_member(x, r, p, "key", 1), *e;
    char q[96];
    size_t i, n;
    int kind, digits = 0;

    *first = -1;
    if (v == NULL)
        return;
    cfg_path(q, sizeof(q), p, "key");
    n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n < 1 || n > 4) {
        cfg_error(x, q, "must be a key name or a list of 1 to 4 key names");
        return;
    }
    rule->key_mask = 0;
    for (i = 0; i < n; i++) {
        e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(e) || !cfg_key_one(json_string_value(e), &kind, &digits)) {
            cfg_error(x, q, "\"%s\" is not one of the allowed values",
                      json_is_string(e) ? json_string_value(e) : "(not a string)");
            rule->key_mask = 0;
            return;
        }
        if (rule->key_mask & (1u << kind)) {
            cfg_error(x, q, "names \"%s\" twice", config_key_name((enum cfg_key)kind));
            rule->key_mask = 0;
            return;
        }
        rule->key_mask |= 1u << kind;
        if (kind == CFG_KEY_PHONE_PREFIX)
            rule->prefix_digits = digits;
    }
    if (n > 1 && (rule->key_mask & (1u << CFG_KEY_GLOBAL))) {
        cfg_error(x, q, "global cannot be part of a composite key");
        rule->key_mask = 0;
        return;
    }
    for (kind = 0; !(rule->key_mask & (1u << kind)); kind++)
        ;
    *first = kind;
}

/* phone.types: a list of libphonenumber's type names; a number of any
 * other type is refused before any rule (403 number_type). */
static void cfg_phone(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *types = json_object_get(o, "types"), *t;
    unsigned seen = 0;
    size_t i;
    char p[64];
    int type;

    if (!json_is_array(types) || json_array_size(types) == 0 || json_array_size(types) > PHONE_TYPE_COUNT) {
        cfg_error(x, "phone.types", "must be an array of 1 to %d number types", PHONE_TYPE_COUNT);
        return;
    }
    json_array_foreach(types, i, t) {
        snprintf(p, sizeof(p), "phone.types.%zu", i);
        if (!json_is_string(t) || (type = phone_type_from_name(json_string_value(t))) < 0)
            cfg_error(x, p,
                      "must be one of mobile, fixed_line, fixed_line_or_mobile, toll_free, premium_rate, "
                      "shared_cost, voip, personal_number, pager, uan, voicemail, unknown");
        else if (seen & PHONE_TYPE_BIT(type))
            cfg_error(x, p, "\"%s\" is listed twice", json_string_value(t));
        else
            seen |= PHONE_TYPE_BIT(type);
    }
    c->limits.phone_types = seen;
}

/* One list of countries (allow, deny or monitor): region codes that
 * libphonenumber gives ("IN", "GB", "001"), each at most once. Returns
 * how many were read into out; *present says whether the list was there. */
static size_t cfg_regions(struct cfg_ctx *x, json_t *o, const char *name, char (*out)[CFG_REGION_LEN],
                          int *present)
{
    json_t *arr = cfg_member(x, o, "countries", name, 0), *t;
    size_t i, j, n = 0;
    char p[64];

    *present = arr != NULL;
    if (arr == NULL)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > CFG_REGIONS_MAX) {
        cfg_error(x, cfg_path(p, sizeof(p), "countries", name), "must be an array of at most %d region codes",
                  CFG_REGIONS_MAX);
        return 0;
    }
    json_array_foreach(arr, i, t) {
        const char *r = json_is_string(t) ? json_string_value(t) : NULL;
        snprintf(p, sizeof(p), "countries.%s.%zu", name, i);
        if (r == NULL || !phone_region_known(r)) {
            cfg_error(x, p, "must be a region code as libphonenumber gives it (ISO 3166 alpha-2 in upper case, "
                      "such as \"IN\" or \"GB\", or \"001\" for non-geographic numbers)");
            continue;
        }
        for (j = 0; j < n && strcmp(out[j], r) != 0; j++)
            ;
        if (j < n) {
            cfg_error(x, p, "\"%s\" is listed twice", r);
            continue;
        }
        snprintf(out[n++], CFG_REGION_LEN, "%s", r);
    }
    return n;
}

static void cfg_countries_allow(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_allow = cfg_regions(x, o, "allow", c->limits.countries.allow, &present);
    c->limits.countries.has_allow = 1;
    if (c->limits.countries.n_allow == 0)
        cfg_error(x, "countries.allow", "must list at least one region (an empty allow list serves nobody; "
                  "leave it out to serve every region)");
}

static void cfg_countries_deny(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_deny = cfg_regions(x, o, "deny", c->limits.countries.deny, &present);
}

static void cfg_countries_monitor(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_monitor = cfg_regions(x, o, "monitor", c->limits.countries.monitor, &present);
}

/* countries: allow, deny and monitor by region (DESIGN.md, "Fraud"),
 * decided before any rule (src/limits/fraud.c); after the three lists. */
static void cfg_countries(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct cfg_countries *k = &c->limits.countries;
    size_t i, j;
    char p[64];

    (void)o;
    for (i = 0; i < k->n_deny; i++)
        for (j = 0; j < k->n_allow; j++)
            if (strcmp(k->deny[i], k->allow[j]) == 0) {
                snprintf(p, sizeof(p), "countries.deny.%zu", i);
                cfg_error(x, p, "\"%s\" is in both allow and deny", k->deny[i]);
            }
}

/* pumping: the SMS pumping guard (DESIGN.md, "Fraud"); absent = off, and
 * present (even {}) = on with the table's defaults. */
static void cfg_pumping(struct cfg_ctx *x, struct config *c, json_t *o)
{
    (void)x;
    (void)o;
    c->limits.pumping.on = 1;
}

/* A rule's optional "penalty" {after, within, block}: every key but
 * wrong_guess_cap's (its lock is its penalty). */
static void cfg_penalty(struct cfg_ctx *x, json_t *r, const char *parent, struct cfg_rule *rule, int algo)
{
    static const char *const durs[] = {"within", "block"};
    json_t *o = json_object_get(r, "penalty");
    int64_t *dur_ms[] = {&rule->penalty_within_ms, &rule->penalty_block_ms};
    char p[96], q[128];
    int ok = 1;
    size_t i;

    if (o == NULL)
        return;
    cfg_path(p, sizeof(p), parent, "penalty");
    if (!json_is_object(o)) {
        cfg_error(x, p, "must be an object {\"after\": N, \"within\": DURATION, \"block\": DURATION}");
        return;
    }
    if (algo == CFG_ALGO_WRONG_GUESS_CAP) {
        cfg_error(x, p, "does not apply to wrong_guess_cap (its lock is its penalty)");
        return;
    }
    cfg_unknown(x, o, p, "limits.*.penalty");
    ok &= cfg_int(x, o, p, "after", 1, 1, 1000000, &rule->penalty_after);
    for (i = 0; i < 2; i++) {
        if (!cfg_dur(x, o, p, durs[i], 1, dur_ms[i])) {
            ok = 0;
        } else if (*dur_ms[i] < 1000 || *dur_ms[i] > CFG_30D_MS) {
            cfg_error(x, cfg_path(q, sizeof(q), p, durs[i]), "must be from 1s to 30d");
            ok = 0;
        }
    }
    if (!ok)
        rule->penalty_after = 0;
}

static void cfg_rule(struct cfg_ctx *x, struct config *c, json_t *r, const char *p)
{
    const char *const *ons = cfg_on_names, *const *modes = cfg_mode_names, *const *down = cfg_down_names;
    struct cfg_rule *rule = &c->limits.rules[c->limits.n_rules];
    int key = -1, algo = -1, mode = 0, fb = 0, on = 0;
    size_t i;
    char q[96];

    if (!json_is_object(r)) {
        cfg_error(x, p, "must be an object");
        return;
    }
    cfg_unknown(x, r, p, "limits.*");
    if (cfg_str(x, r, p, "name", 1, rule->name, sizeof(rule->name))) {
        if (rule->name[0] == '\0' || strspn(rule->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(rule->name))
            cfg_error(x, cfg_path(q, sizeof(q), p, "name"), "must be 1 to 32 of a-z, 0-9 and _");
        for (i = 0; i < c->limits.n_rules; i++)
            if (strcmp(c->limits.rules[i].name, rule->name) == 0)
                cfg_error(x, cfg_path(q, sizeof(q), p, "name"), "\"%s\" is used twice", rule->name);
    }
    cfg_rule_key(x, r, p, rule, &key);
    cfg_enum(x, r, p, "algorithm", 1, algo_names, &algo);
    cfg_enum(x, r, p, "mode", 0, modes, &mode);
    cfg_enum(x, r, p, "on", 0, ons, &on);
    rule->on = (enum cfg_on)on;
    /* A verify counts events; a delay or a wrong-guess cap means nothing there. */
    if (on != CFG_ON_ISSUE && (algo == CFG_ALGO_RESEND_DELAY || algo == CFG_ALGO_WRONG_GUESS_CAP))
        cfg_error(x, cfg_path(q, sizeof(q), p, "on"), "%s rules apply to issue only", algo_names[algo]);
    cfg_enum(x, r, p, "if_store_down", 0, down, &fb);
    rule->key = (enum cfg_key)(key < 0 ? 0 : key);
    rule->algo = (enum cfg_algo)(algo < 0 ? 0 : algo);
    rule->shadow = mode == 1;
    rule->local_fallback = fb == 1;
    if (algo == CFG_ALGO_RESEND_DELAY) {
        static const char *const not_delay[] = {"limit", "window", "burst"};
        rule->limit = rule->burst = 1;
        cfg_dur(x, r, p, "delay", 1, &rule->window_ms);
        for (i = 0; i < sizeof(not_delay) / sizeof(not_delay[0]); i++)
            if (json_object_get(r, not_delay[i]))
                cfg_error(x, cfg_path(q, sizeof(q), p, not_delay[i]),
                          "does not apply to resend_delay (it takes delay only)");
    } else if (algo >= 0) {
        json_t *lim = json_object_get(r, "limit");
        const char *why;
        /* A sliding log's bound has a reason worth saying; the others are
         * plain ranges. */
        if ((algo == CFG_ALGO_SLIDING_LOG || algo == CFG_ALGO_WRONG_GUESS_CAP) && json_is_integer(lim) &&
            json_integer_value(lim) > 1 &&
            (why = config_limit_why((enum cfg_algo)algo, 0, json_integer_value(lim))) != NULL)
            cfg_error(x, cfg_path(q, sizeof(q), p, "limit"), "must be %s", why);
        else
            cfg_int(x, r, p, "limit", 1, 1, config_limit_max((enum cfg_algo)algo), &rule->limit);
        /* The counter's script weighs counts in exact integer ms (limit x
         * window stays below 2^53); longer quotas are fixed_window's. */
        if (cfg_dur(x, r, p, "window", 1, &rule->window_ms) && algo == CFG_ALGO_SLIDING_WINDOW_COUNTER &&
            rule->window_ms > CFG_30D_MS)
            cfg_error(x, cfg_path(q, sizeof(q), p, "window"),
                      "must be at most 30d for sliding_window_counter (use fixed_window for longer quotas)");
        else if (algo == CFG_ALGO_TOKEN_BUCKET && rule->limit > 0 && rule->window_ms > 0 &&
                 (why = config_limit_why((enum cfg_algo)algo, rule->window_ms, rule->limit)) != NULL)
            cfg_error(x, cfg_path(q, sizeof(q), p, "limit"), "must be %s", why);
        if (json_object_get(r, "delay"))
            cfg_error(x, cfg_path(q, sizeof(q), p, "delay"), "applies to resend_delay only");
        rule->burst = rule->limit;
        if (algo == CFG_ALGO_TOKEN_BUCKET)
            cfg_int(x, r, p, "burst", 0, 1, 1000000000, &rule->burst);
        else if (json_object_get(r, "burst"))
            cfg_error(x, cfg_path(q, sizeof(q), p, "burst"), "applies to token_bucket only");
    }
    if ((algo == CFG_ALGO_WRONG_GUESS_CAP || algo == CFG_ALGO_RESEND_DELAY) && key >= 0 && key != CFG_KEY_PHONE)
        cfg_error(x, cfg_path(q, sizeof(q), p, "key"), "%s rules are keyed on phone", algo_names[algo]);
    if (rule->local_fallback) {
        /* Issue and verify keep the verification itself in Redis, so no
         * request can be decided without it: a local share of a limit would
         * promise an availability otpd cannot give. Say so at load time. */
        if (key == CFG_KEY_PHONE || algo == CFG_ALGO_WRONG_GUESS_CAP || algo == CFG_ALGO_RESEND_DELAY)
            cfg_error(x, cfg_path(q, sizeof(q), p, "if_store_down"),
                      "local_fallback is not allowed for per-phone OTP rules");
        else
            cfg_error(x, cfg_path(q, sizeof(q), p, "if_store_down"),
                      "local_fallback is not available: the verification lives in Redis, so otpd fails "
                      "closed while Redis is down");
        cfg_int(x, r, p, "local_limit", 1, 1, 1000000000, &rule->local_limit);
    } else if (json_object_get(r, "local_limit")) {
        cfg_error(x, cfg_path(q, sizeof(q), p, "local_limit"), "applies with if_store_down: local_fallback only");
    }
    cfg_penalty(x, r, p, rule, algo);
    c->limits.n_rules++;
}

/* Gives every rule its 2-character Redis field (see struct cfg_rule):
 * FNV-1a of the name into 62 * 62 slots. The field depends on the name
 * alone, so a reload never moves a rule's state; two names of one config
 * that meet in one slot are an error (rename one). */
static void cfg_fields(struct cfg_ctx *x, struct config *c)
{
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t i, j;

    for (i = 0; i < c->limits.n_rules; i++) {
        struct cfg_rule *r = &c->limits.rules[i];
        uint32_t h = 2166136261u;
        const char *p;
        char path[64];
        for (p = r->name; *p; p++)
            h = (h ^ (unsigned char)*p) * 16777619u;
        h %= 62 * 62;
        r->field[0] = b62[h / 62];
        r->field[1] = b62[h % 62];
        r->field[2] = '\0';
        for (j = 0; j < i; j++)
            if (strcmp(c->limits.rules[j].field, r->field) == 0 && strcmp(c->limits.rules[j].name, r->name) != 0) {
                snprintf(path, sizeof(path), "limits.%zu.name", i);
                cfg_error(x, path, "\"%s\" and \"%s\" share a Redis field; rename one", c->limits.rules[j].name,
                          r->name);
            }
    }
}

static void cfg_limits(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *arr = json_object_get(root, "limits"), *r;
    size_t i, wrong = 0;
    char p[64];

    if (!json_is_array(arr) || json_array_size(arr) > 32) {
        cfg_error(x, "limits", "must be an array of at most 32 rules");
        return;
    }
    if ((c->limits.rules = cfg_calloc(json_array_size(arr) + 1, sizeof(*c->limits.rules))) == NULL) {
        cfg_error(x, "limits", "out of memory");
        return;
    }
    json_array_foreach(arr, i, r) {
        snprintf(p, sizeof(p), "limits.%zu", i);
        cfg_rule(x, c, r, p);
        if (json_is_object(r) && c->limits.rules[c->limits.n_rules - 1].algo == CFG_ALGO_WRONG_GUESS_CAP && ++wrong > 1)
            cfg_error(x, p, "only one wrong_guess_cap rule is allowed");
    }
    /* Each phone_prefix length is a Redis key of every issue; the script's
     * key list has room for the other kinds and four lengths. */
    {
        unsigned seen = 0;
        int n_len = 0;
        for (i = 0; i < c->limits.n_rules; i++) {
            int d = c->limits.rules[i].prefix_digits;
            if (d > 0 && !(seen & (1u << d))) {
                seen |= 1u << d;
                if (++n_len > 4)
                    cfg_error(x, "limits", "phone_prefix keys may use at most 4 different lengths");
            }
        }
    }
    cfg_fields(x, c);
}

/* cost.prices: {"+91": 20, "*": 500}, minor units per SMS. */
static void cfg_prices(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *prices = json_object_get(o, "prices"), *v;
    const char *prefix;
    char p[96];

    if (!json_is_object(prices) || json_object_size(prices) > 1000) {
        cfg_error(x, "cost.prices", "must be an object of at most 1000 prefixes");
        return;
    }
    if ((c->limits.prices = cfg_calloc(json_object_size(prices) + 1, sizeof(*c->limits.prices))) == NULL) {
        cfg_error(x, "cost.prices", "out of memory");
        return;
    }
    json_object_foreach(prices, prefix, v) {
        struct cfg_price *pr = &c->limits.prices[c->limits.n_prices];
        snprintf(p, sizeof(p), "cost.prices.%s", prefix);
        if (strcmp(prefix, "*") != 0 && (strlen(prefix) > 16 || strlen(prefix) < 2 || prefix[0] != '+' ||
                                         strspn(prefix + 1, "0123456789") != strlen(prefix) - 1)) {
            cfg_error(x, p, "must be \"*\" or \"+\" and digits");
            continue;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
            cfg_error(x, p, "must be an integer price in minor units");
            continue;
        }
        snprintf(pr->prefix, sizeof(pr->prefix), "%s", prefix);
        pr->price_minor = json_integer_value(v);
        c->limits.n_prices++;
    }
}

/* cost.caps: [{"window": "1h", "max": 500000, "key": "api_key"}]. */
static void cfg_caps(struct cfg_ctx *x, struct config *c, json_t *o)
{
    const char *const *cap_kinds = cfg_cap_key_names;
    json_t *caps = json_object_get(o, "caps"), *v;
    size_t i;
    int kind = 0;
    char p[96];

    if (!json_is_array(caps) || json_array_size(caps) > 8) {
        cfg_error(x, "cost.caps", "must be an array of at most 8 caps");
        return;
    }
    if ((c->limits.caps = cfg_calloc(json_array_size(caps) + 1, sizeof(*c->limits.caps))) == NULL) {
        cfg_error(x, "cost.caps", "out of memory");
        return;
    }
    json_array_foreach(caps, i, v) {
        struct cfg_cap *cap = &c->limits.caps[c->limits.n_caps++];
        snprintf(p, sizeof(p), "cost.caps.%zu", i);
        if (!json_is_object(v)) {
            cfg_error(x, p, "must be an object");
            continue;
        }
        cfg_unknown(x, v, p, "cost.caps.*");
        cfg_dur(x, v, p, "window", 1, &cap->window_ms);
        cfg_int(x, v, p, "max", 1, 0, INT64_MAX / 4, &cap->max_minor);
        /* Absent: the fleet's one budget. "api_key": a budget per
         * caller, taken with the global ones (one caller cannot spend
         * the others' budget). */
        if (cfg_enum(x, v, p, "key", 0, cap_kinds, &kind))
            cap->per_key = 1;
    }
}

/* After cost's rows. */
static void cfg_cost(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *prices = json_object_get(o, "prices");
    const char *cur = c->limits.currency;

    /* A metric label and the ledger's unit: ISO 4217's three letters. */
    if (cur[0] && (strlen(cur) != 3 || strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3))
        cfg_error(x, "cost.currency", "must be a currency code: three capital letters (ISO 4217)");

    /* A destination without a price would escape every cap: SMS pumping to
     * unpriced routes is the attack the caps exist for. */
    if (c->limits.n_caps > 0 && prices != NULL && json_object_get(prices, "*") == NULL)
        cfg_error(x, "cost.prices", "must have a \"*\" price for other destinations when cost.caps are set");
}


/* 1 when s is a Twilio SID of kind kind ("AC", "SK", "MG"): the two
 * letters and 32 hex digits, as Twilio's docs define a SID. */
static int cfg_twilio_sid(const char *s, const char *kind)
{
    return strlen(s) == CFG_SID_LEN && strncmp(s, kind, 2) == 0 &&
           strspn(s + 2, "0123456789abcdefABCDEF") == CFG_SID_LEN - 2;
}

/* A SID read from the environment (NULL when secrets are off or it was
 * reported): its value is named by kind only, never printed. */
static void cfg_twilio_env_sid(struct cfg_ctx *x, json_t *o, const char *key, const char *sid, const char *kind,
                               const char *what)
{
    char p[64];

    if (sid != NULL && !cfg_twilio_sid(sid, kind))
        cfg_error(x, cfg_path(p, sizeof(p), "provider", key),
                  "environment variable %s must hold %s: %s and 32 hex digits",
                  json_string_value(json_object_get(o, key)), what, kind);
}

/* Twilio (its docs: "Make an HTTP request to Twilio"): basic auth with the
 * account SID and auth token, or with an API key SID (SK...) and its
 * secret, the account SID still naming the Messages URL; a sender, From or
 * a Messaging Service (MG...). Twilio signs status callbacks with the
 * account's auth token and never an API key, so with API keys and a
 * callback_url the token is still needed, for that check alone. */
static void cfg_twilio(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct provider_conf *pc = &c->provider;
    int token = json_object_get(o, "auth_token_env") != NULL;
    int key_sid = json_object_get(o, "api_key_sid_env") != NULL;
    int key_secret = json_object_get(o, "api_key_secret_env") != NULL;
    int from = json_object_get(o, "from") != NULL, service = json_object_get(o, "messaging_service_sid") != NULL;

    pc->user = cfg_env(x, o, "provider", "account_sid_env", 1, 1);
    cfg_twilio_env_sid(x, o, "account_sid_env", pc->user, "AC", "an account SID");
    if (key_sid != key_secret)
        cfg_error(x, key_sid ? "provider.api_key_sid_env" : "provider.api_key_secret_env", "needs provider.%s",
                  key_sid ? "api_key_secret_env" : "api_key_sid_env");
    if (!token && !key_sid && !key_secret)
        cfg_error(x, "provider", "twilio needs auth_token_env, or api_key_sid_env and api_key_secret_env");
    else if (token && (key_sid || key_secret) && pc->callback_url[0] == '\0')
        cfg_error(x, "provider.auth_token_env",
                  "give auth_token_env or the API key (api_key_sid_env, api_key_secret_env), not both; with an "
                  "API key the auth token only checks status callbacks, which needs callback_url");
    else if (!token && key_sid && pc->callback_url[0] != '\0')
        cfg_error(x, "provider.callback_url",
                  "needs auth_token_env with an API key: Twilio signs status callbacks with the account's auth "
                  "token, never an API key");
    if (token)
        pc->pass = cfg_env(x, o, "provider", "auth_token_env", 1, 1);
    if (key_sid && key_secret) {
        pc->key_sid = cfg_env(x, o, "provider", "api_key_sid_env", 1, 1);
        cfg_twilio_env_sid(x, o, "api_key_sid_env", pc->key_sid, "SK", "an API key SID");
        pc->key_secret = cfg_env(x, o, "provider", "api_key_secret_env", 1, 1);
    }
    if (from == service)
        cfg_error(x, "provider", "twilio needs from or messaging_service_sid (one of them, %s)",
                  from ? "not both" : "none is set");
    if (pc->messaging_service[0] && !cfg_twilio_sid(pc->messaging_service, "MG"))
        cfg_error(x, "provider.messaging_service_sid", "must be a Messaging Service SID: MG and 32 hex digits");
}

/* Kannel's optional sendsms fields: smsc (an smsc-id; Kannel splits its
 * lists of them on ';'), priority (0 to 3, Kannel's bounds), validity (sent
 * in minutes) and dlr_mask (which reports; they go to callback_url). */
static void cfg_kannel(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct provider_conf *pc = &c->provider;
    const char *s = pc->smsc;
    int64_t v;
    size_t i;

    pc->user = cfg_env(x, o, "provider", "username_env", 1, 1);
    pc->pass = cfg_env(x, o, "provider", "password_env", 1, 1);
    for (i = 0; s[i] > 0x20 && s[i] < 0x7f && s[i] != ';'; i++)
        ;
    /* Only an smsc that was read (a bad or empty one is reported already). */
    if (s[0] != '\0' && s[i] != '\0')
        cfg_error(x, "provider.smsc", "must be an smsc-id: 1 to 63 printable ASCII bytes without spaces or ';'");
    if (cfg_int(x, o, "provider", "priority", 0, 0, 3, &v))
        pc->priority = (int)v;
    if (cfg_dur(x, o, "provider", "validity", 0, &v)) {
        if (v < 60000 || v > 86400000 || v % 60000 != 0)
            cfg_error(x, "provider.validity", "must be whole minutes from 1m to 1d (Kannel takes minutes)");
        else
            pc->validity_ms = v;
    }
    if (json_object_get(o, "dlr_mask") != NULL && pc->callback_url[0] == '\0')
        cfg_error(x, "provider.dlr_mask", "needs provider.callback_url, where Kannel sends the reports");
}

/* "webhook and kannel" for a mask of provider types (bit t: type t). */
static const char *cfg_provider_types_text(unsigned types, char *out, size_t cap)
{
    size_t n = 0;
    int t;

    out[0] = '\0';
    for (t = 0; cfg_provider_names[t] && n < cap; t++)
        if (types & (1u << t))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " and " : "", cfg_provider_names[t]);
    return out;
}

/* After provider's rows: what each type requires, its secrets, and the
 * keys that belong to another type. */
static void cfg_provider(struct cfg_ctx *x, struct config *c, json_t *o)
{
    static const char *const need[][3] = {
        [CFG_PROVIDER_FILE] = {"path", NULL, NULL},
        [CFG_PROVIDER_WEBHOOK] = {"url", NULL, NULL},
        [CFG_PROVIDER_KANNEL] = {"url", "from", NULL},
        [CFG_PROVIDER_TWILIO] = {NULL, NULL, NULL},
    };
    /* Keys of some types only (a mask of them): named at once when given
     * to another, rather than ignored. */
#define CFG_PT(t) (1u << (t))
    static const struct {
        const char *key;
        unsigned types;
    } only[] = {
        {"path", CFG_PT(CFG_PROVIDER_FILE)},
        {"url", CFG_PT(CFG_PROVIDER_WEBHOOK) | CFG_PT(CFG_PROVIDER_KANNEL)},
        {"from", CFG_PT(CFG_PROVIDER_KANNEL) | CFG_PT(CFG_PROVIDER_TWILIO)},
        {"base_url", CFG_PT(CFG_PROVIDER_TWILIO)},
        {"token_env", CFG_PT(CFG_PROVIDER_WEBHOOK)},
        {"signing_secret_env", CFG_PT(CFG_PROVIDER_WEBHOOK)},
        {"smsc", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"priority", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"validity", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"dlr_mask", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"username_env", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"password_env", CFG_PT(CFG_PROVIDER_KANNEL)},
        {"account_sid_env", CFG_PT(CFG_PROVIDER_TWILIO)},
        {"auth_token_env", CFG_PT(CFG_PROVIDER_TWILIO)},
        {"api_key_sid_env", CFG_PT(CFG_PROVIDER_TWILIO)},
        {"api_key_secret_env", CFG_PT(CFG_PROVIDER_TWILIO)},
        {"messaging_service_sid", CFG_PT(CFG_PROVIDER_TWILIO)},
    };
    /* The URLs otpd calls, or gives the provider to call it back on. */
    static const struct {
        const char *key;
        size_t off;
    } urls[] = {
        {"url", offsetof(struct provider_conf, url)},
        {"base_url", offsetof(struct provider_conf, base_url)},
        {"callback_url", offsetof(struct provider_conf, callback_url)},
    };
    json_t *t = json_object_get(o, "type");
    char p[64], names[64];
    size_t i;

    /* A missing or unknown type is reported already; nothing else means anything then. */
    if (!json_is_string(t) || strcmp(json_string_value(t), cfg_provider_names[c->provider.type]) != 0)
        return;
    for (i = 0; i < 3 && need[c->provider.type][i]; i++)
        if (json_object_get(o, need[c->provider.type][i]) == NULL)
            cfg_error(x, cfg_path(p, sizeof(p), "provider", need[c->provider.type][i]), "is required");
    for (i = 0; i < sizeof(only) / sizeof(only[0]); i++)
        if (!(only[i].types & CFG_PT(c->provider.type)) && json_object_get(o, only[i].key) != NULL)
            cfg_error(x, cfg_path(p, sizeof(p), "provider", only[i].key), "applies to %s only, not %s",
                      cfg_provider_types_text(only[i].types, names, sizeof(names)),
                      cfg_provider_names[c->provider.type]);
#undef CFG_PT
    switch (c->provider.type) {
    case CFG_PROVIDER_FILE:
        break;
    case CFG_PROVIDER_WEBHOOK:
        c->provider.token = cfg_env(x, o, "provider", "token_env", 0, 16);
        /* It goes in a header line: no spaces, controls or CR LF to split it. */
        if (c->provider.token != NULL) {
            const char *k = c->provider.token;
            for (i = 0; k[i] > 0x20 && k[i] < 0x7f; i++)
                ;
            if (k[i] != '\0' || i > 1000)
                cfg_error(x, "provider.token_env",
                          "environment variable %s must hold 16 to 1000 printable ASCII bytes without spaces",
                          json_string_value(json_object_get(o, "token_env")));
        }
        /* An HMAC key as strong as the hash: 32 bytes. */
        c->provider.signing_secret = cfg_env(x, o, "provider", "signing_secret_env", 0, 32);
        break;
    case CFG_PROVIDER_KANNEL:
        cfg_kannel(x, c, o);
        break;
    case CFG_PROVIDER_TWILIO:
        cfg_twilio(x, c, o);
        break;
    }
    for (i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        const char *u = (const char *)&c->provider + urls[i].off;
        if (u[0] && strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
            cfg_error(x, cfg_path(p, sizeof(p), "provider", urls[i].key),
                      "must be an http:// or https:// URL");
    }
}

#define CFG_AT(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define CFG_NONE 0, 0

static const char *const cfg_sending_names[] = {"resend", "fail", NULL};
static const char *const cfg_log_formats[] = {"text", "json", NULL};               /* enum log_format's order */
static const char *const cfg_log_levels[] = {"debug", "info", "warn", "error", NULL}; /* enum log_level's */

static void cfg_root(struct cfg_ctx *x, struct config *c, json_t *root);

/* The key table (config_int.h): one row per key, in the order errors are
 * reported and README lists them. Add a key here and its field in its section (conf.h). */
const struct cfg_row cfg_rows[] = {
    {"", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_root, NULL, NULL},
    {"listen", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 0, 63, NULL, NULL, NULL, "HOST:PORT, [V6]:PORT",
     "the API's address"},
    {"listen_internal", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, 63, NULL, NULL, NULL,
     "HOST:PORT, [V6]:PORT; not listen's",
     "a second listener, plain HTTP, that alone serves `/healthz`, `/readyz` and `/metrics` (`listen` then "
     "answers 404 there): keep it on loopback or a private interface"},
    {"tls", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_tls, NULL,
     "HTTPS on `listen` (README, \"TLS and private probes\"); absent: plain HTTP"},
    {"tls.cert", CFG_T_STR, CFG_REQUIRED | CFG_RELOAD, CFG_AT(tls.cert), 0, 0, NULL, NULL, NULL, "a PEM file",
     "the certificate, then its intermediates; read again on SIGHUP (new handshakes get it, open connections "
     "stay; a bad one is refused and the old one kept)"},
    {"tls.key", CFG_T_STR, CFG_REQUIRED | CFG_RELOAD, CFG_AT(tls.key), 0, 0, NULL, NULL, NULL,
     "a PEM file, unencrypted", "the certificate's private key; read with the certificate, never logged"},
    /* 32 by default: a worker blocks through an accepted issue's two Redis
     * round trips and its group commit (about 7 ms), so 4 workers capped
     * accepted issues near 570/s and a commit grouped at most 4 of them.
     * Measured on 2 shared CPUs (issue 13's bench, wrk 64 connections, 5 s
     * runs, three sessions; figures are / ceiling B, the bare MHD 429 with
     * as many workers): accepted issues 4: .0063 .0139 .0280, 8: .0103
     * .0191, 16: .0138 .0202, 32: .0207 .0351 .0457, 64: .0272 .0202;
     * hot-key refusals 4: .152 .110 .129, 8: .112 .161, 16: .068 (with
     * 503s) .164, 32: .160 .213 .239, 64: .188 .148. 32 was first or
     * second in every session on both; the ledger groups 5 accepted issues
     * per commit at 32 against 1.5 at 4. Idle workers cost a stack each. */
    {"http_threads", CFG_T_INT, 0, CFG_AT(http.threads), 1, 256, "32", NULL, NULL, NULL,
     "libmicrohttpd worker threads"},
    {"http", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"http.max_conns_per_ip", CFG_T_INT, 0, CFG_AT(http.max_conns_per_ip), 1024, 1000000, "1024", NULL, NULL, NULL,
     "connections one client address may hold open; the next is closed at once"},
    {"http.request_timeout", CFG_T_DUR, 0, CFG_AT(http.request_timeout_ms), 1000, 300000, "30s", NULL, NULL, NULL,
     "a request (headers and body) must arrive whole within this of the connection opening or of the "
     "previous answer on it; otpd then shuts the connection itself, whatever the client keeps dribbling "
     "(libmicrohttpd's own timeout is for inactivity only)"},
    {"log", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"log.format", CFG_T_ENUM, 0, CFG_AT(log.format), 0, 0, "text", cfg_log_formats, NULL, NULL,
     "`text` (readable, then `key=value` pairs) or `json` (one object per line)"},
    {"log.level", CFG_T_ENUM, CFG_RELOAD, CFG_AT(log.level), 0, 0, "info", cfg_log_levels, NULL, NULL,
     "the lowest level written"},
    {"redis", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_redis, NULL, NULL},
    {"redis.url", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "redis://HOST[:PORT][/DB]; required without redis.sentinel",
     "a password in the URL is refused"},
    {"redis.sentinel", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL,
     "Redis behind Sentinel. Each new connection asks the sentinels in turn where the master is and checks"
     " `ROLE`; after a failover the breaker's probe finds the new master. `redis.url` is then optional and"
     " gives only the database. Sentinels without a password only."},
    {"redis.sentinel.addrs", CFG_T_CUSTOM, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_sentinel_addrs,
     "1 to 8 \"HOST:PORT\"", NULL},
    {"redis.sentinel.master", CFG_T_STR, CFG_REQUIRED, CFG_AT(redis.master), 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"redis.password_env", CFG_T_ENV, 0, CFG_AT(redis.password), 1, 0, NULL, NULL, NULL, NULL,
     "the environment variable holding Redis's password"},
    {"redis.username", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, CFG_NAME_MAX - 1, NULL, NULL, NULL,
     "ACL user, printable ASCII; needs redis.password_env",
     "otpd sends `AUTH username password`"},
    {"redis.timeout_ms", CFG_T_INT, 0, CFG_AT(redis.timeout_ms), 1, 10000, "50", NULL, NULL, NULL,
     "one Redis call"},
    {"redis.breaker_failures", CFG_T_INT, 0, CFG_AT(redis.breaker_failures), 1, 1000, "5", NULL, NULL, NULL,
     "consecutive Redis failures that open the circuit breaker"},
    {"redis.breaker_open", CFG_T_DUR, 0, CFG_AT(redis.breaker_open_ms), 0, 0, "2s", NULL, NULL, NULL,
     "how long the breaker answers 503 at once before a probe"},
    {"ledger", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"ledger.path", CFG_T_STR, CFG_REQUIRED, CFG_AT(ledger.path), 0, 0, NULL, NULL, NULL, NULL,
     "the SQLite audit ledger"},
    {"ledger.retention", CFG_T_DUR, 0, CFG_AT(ledger.retention_ms), 1000, 0, "90d", NULL, NULL, NULL,
     "rows older than this are pruned (at start, then hourly); messages still queued or sending are kept"},
    {"secret_env", CFG_T_ENV, CFG_REQUIRED, CFG_AT(secret), 32, 0, NULL, NULL, NULL, NULL,
     "the variable holding the key codes are derived from"},
    {"api_keys", CFG_T_CUSTOM, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_api_keys, "1 to 256 objects",
     "the callers"},
    {"api_keys.*.name", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 0, CFG_NAME_MAX - 1, NULL, NULL, NULL,
     "A-Z, a-z, 0-9, '.', '_', '-'; unique", NULL},
    {"api_keys.*.key_env", CFG_T_ENV, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 16, 0, NULL, NULL, NULL, NULL, NULL},
    {"api_keys.*.role", CFG_T_ENUM, CFG_BYHOOK, CFG_NONE, 0, 0, NULL, cfg_role_names, NULL,
     "\"admin\": the admin API only; absent: the OTP API only", NULL},
    {"otp", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_otp, NULL, NULL},
    {"otp.length", CFG_T_INT, 0, CFG_AT(otp.length), 4, 10, "6", NULL, NULL, NULL,
     "digits of a code"},
    {"otp.ttl", CFG_T_DUR, CFG_RELOAD, CFG_AT(otp.ttl_ms), 10000, 3600000, "5m", NULL, NULL, NULL,
     "a code's life"},
    {"otp.max_attempts", CFG_T_INT, 0, CFG_AT(otp.max_attempts), 1, 100, "5", NULL, NULL, NULL,
     "wrong guesses before a code is dead"},
    {"otp.idempotency_keys", CFG_T_INT, 0, CFG_AT(otp.idem_keys), 1, 10000000, "100000", NULL, NULL, NULL,
     "Idempotency-Keys one caller may hold at once (each kept 24 h, under 1 KB of Redis); "
     "past that, 429 `idempotency_keys`"},
    {"otp.template", CFG_T_STR, CFG_RELOAD, CFG_AT(otp.tmpl), 0, 320,
     "{code} is your login code. It expires in {minutes} minutes.", NULL, NULL, NULL,
     "the SMS text: `{code}`, `{minutes}`"},
    {"phone", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"phone.types", CFG_T_CUSTOM, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_phone,
     "libphonenumber's number types; default mobile, fixed_line_or_mobile",
     "number types served; others are 403 `number_type`"},
    {"countries", CFG_T_SECTION, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries, NULL,
     "by region, before any rule (docs/rules.md)"},
    {"countries.allow", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_allow,
     "region codes (\"IN\", \"001\"); absent: every region", NULL},
    {"countries.deny", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_deny, "region codes", NULL},
    {"countries.monitor", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_monitor,
     "region codes: served, counted and logged", NULL},
    {"pumping", CFG_T_SECTION, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_pumping, NULL,
     "the SMS pumping guard; absent: off (docs/rules.md)"},
    {"pumping.prefix_digits", CFG_T_INT, CFG_RELOAD, CFG_AT(limits.pumping.prefix_digits), 3, 15, "7", NULL, NULL, NULL, NULL},
    {"pumping.window", CFG_T_DUR, CFG_RELOAD, CFG_AT(limits.pumping.window_ms), 60000, 7 * 86400000LL, "1h", NULL, NULL,
     NULL, NULL},
    {"pumping.min_sent", CFG_T_INT, CFG_RELOAD, CFG_AT(limits.pumping.min_sent), 1, 1000000, "30", NULL, NULL, NULL, NULL},
    {"pumping.min_verified_ratio", CFG_T_PPM, CFG_RELOAD, CFG_AT(limits.pumping.min_ratio_ppm), 0, 0, "0.2", NULL, NULL,
     NULL, NULL},
    {"pumping.hold", CFG_T_DUR, CFG_RELOAD, CFG_AT(limits.pumping.hold_ms), 1000, CFG_30D_MS, "12h", NULL, NULL, NULL, NULL},
    {"pumping.mode", CFG_T_ENUM, CFG_RELOAD, CFG_AT(limits.pumping.shadow), 0, 0, "enforce", cfg_mode_names, NULL, NULL, NULL},
    {"limits", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_limits,
     "at most 32 rules (docs/rules.md)",
     "the rules (docs/rules.md)"},
    {"limits.*.name", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 32, NULL, NULL, NULL,
     "a-z, 0-9, _; unique", NULL},
    {"limits.*.key", CFG_T_CUSTOM, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "phone, device, client_ip, api_key, global, purpose, phone_prefix:N, region, or a list of 1 to 4", NULL},
    {"limits.*.algorithm", CFG_T_ENUM, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, algo_names,
     NULL, NULL, NULL},
    {"limits.*.limit", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL,
     "1 to 1000 (sliding_log, wrong_guess_cap: their memory grows with the limit), 10^6 "
     "(sliding_window_counter), 10^9 (fixed_window; token_bucket: at most one per ms of its window); not for "
     "resend_delay", NULL},
    {"limits.*.window", CFG_T_DUR, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "at most 30d for sliding_window_counter; not for resend_delay", NULL},
    {"limits.*.burst", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL,
     "token_bucket only; default its limit", NULL},
    {"limits.*.delay", CFG_T_DUR, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL, "resend_delay only", NULL},
    {"limits.*.mode", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "enforce", cfg_mode_names, NULL, NULL, NULL},
    {"limits.*.on", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "issue", cfg_on_names, NULL, NULL, NULL},
    {"limits.*.if_store_down", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "fail_closed",
     cfg_down_names, NULL, NULL, NULL},
    {"limits.*.local_limit", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL, NULL, NULL},
    {"limits.*.penalty", CFG_T_SECTION, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "not for wrong_guess_cap", NULL},
    {"limits.*.penalty.after", CFG_T_INT, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1, 1000000, NULL, NULL,
     NULL, NULL, NULL},
    {"limits.*.penalty.within", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1000, CFG_30D_MS, NULL,
     NULL, NULL, NULL, NULL},
    {"limits.*.penalty.block", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1000, CFG_30D_MS, NULL,
     NULL, NULL, NULL, NULL},
    {"cost", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_cost, NULL,
     "prices and spend caps"},
    {"cost.currency", CFG_T_STR, CFG_REQUIRED, CFG_AT(limits.currency), 0, 0, NULL, NULL, NULL,
     "ISO 4217: \"INR\", \"USD\"", NULL},
    {"cost.prices", CFG_T_CUSTOM, CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_prices,
     "{\"+PREFIX\" or \"*\": minor units}; a \"*\" with caps", NULL},
    {"cost.caps", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_caps, "at most 8", NULL},
    {"cost.caps.*.window", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     NULL, NULL},
    {"cost.caps.*.max", CFG_T_INT, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, INT64_MAX / 4, NULL, NULL,
     NULL, "minor units", NULL},
    {"cost.caps.*.key", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, cfg_cap_key_names, NULL,
     "absent: one budget for the fleet", NULL},
    {"refusal_cache", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL,
     "refusals that only their own end or an admin change can lift (a sliding log, a fixed window, a resend delay, "
     "a lock, a penalty block), answered from memory until then; never past the real refusal's end (README, "
     "\"The refusal cache\")"},
    {"refusal_cache.max_entries", CFG_T_INT, 0, CFG_AT(limits.refusal_cache.max_entries), 0, 100000000, "1000000", NULL,
     NULL, "0 turns the cache off", "refusals remembered at most, the least recently used dropped first "
     "(about 170 bytes each, up to 370 with long composite keys)"},
    {"pacer", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"pacer.rate", CFG_T_INT, 0, CFG_AT(pacer.rate), 1, 10000, "50", NULL, NULL, "sends per second",
     "the fleet's sends per second"},
    {"pacer.capacity", CFG_T_INT, 0, CFG_AT(pacer.capacity), 1, 1000000, "500", NULL, NULL, NULL,
     "messages queued fleet-wide"},
    {"pacer.share_per_key", CFG_T_RATIO, 0, CFG_AT(pacer.share_per_key), 0, 0, "1", NULL, NULL, NULL,
     "the part of capacity one caller may hold"},
    {"pacer.max_inflight", CFG_T_INT, 0, CFG_AT(pacer.max_inflight), 1, 1024, "32", NULL, NULL, NULL,
     "provider calls at once per instance"},
    {"pacer.retry", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"pacer.retry.max", CFG_T_INT, 0, CFG_AT(pacer.retry_max), 0, 20, "3", NULL, NULL, NULL,
     "retries after the first attempt"},
    {"pacer.retry.base", CFG_T_DUR, 0, CFG_AT(pacer.retry_base_ms), 0, 0, "500ms", NULL, NULL, NULL,
     "the first backoff, doubled each retry"},
    {"pacer.timeout", CFG_T_DUR, 0, CFG_AT(pacer.timeout_ms), 0, 0, "10s", NULL, NULL, NULL,
     "one provider call, connect included"},
    {"pacer.takeover", CFG_T_DUR, 0, CFG_AT(pacer.takeover_ms), 1000, 600000, "10s", NULL, NULL, NULL,
     "a message claimed by an instance that has not touched its claims for this long is taken over by another"},
    {"pacer.instance", CFG_T_STR, 0, CFG_AT(pacer.instance), 0, 0, NULL, NULL, NULL,
     "default HOSTNAME:PORT",
     "this instance's name in the fleet's consumer group: unique per live instance, the same across its "
     "restarts (a restart takes its own messages back at once)"},
    {"pacer.on_restart_sending", CFG_T_ENUM, 0, CFG_AT(pacer.on_restart_sending), 0, 0, "resend",
     cfg_sending_names, NULL, NULL,
     "a message taken back after a crash (by its instance's restart or a takeover) while it was `sending`:"
     " `resend` (at least once; duplicates at most the dead instance's `max_inflight`) or `fail`"},
    {"provider", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_provider, NULL, NULL},
    {"provider.type", CFG_T_ENUM, CFG_REQUIRED, CFG_AT(provider.type), 0, 0, NULL, cfg_provider_names, NULL, NULL,
     "the SMS provider's adapter"},
    {"provider.path", CFG_T_STR, 0, CFG_AT(provider.path), 0, 0, NULL, NULL, NULL, "file: required", NULL},
    {"provider.url", CFG_T_STR, 0, CFG_AT(provider.url), 0, 0, NULL, NULL, NULL,
     "webhook, kannel: required, http(s)://", NULL},
    {"provider.from", CFG_T_STR, 0, CFG_AT(provider.from), 0, 0, NULL, NULL, NULL,
     "kannel: required; twilio: this or messaging_service_sid", NULL},
    {"provider.base_url", CFG_T_STR, 0, CFG_AT(provider.base_url), 0, 0, "https://api.twilio.com", NULL, NULL,
     "twilio", NULL},
    {"provider.username_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL, "kannel: required", NULL},
    {"provider.password_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL, "kannel: required", NULL},
    {"provider.smsc", CFG_T_STR, 0, CFG_AT(provider.smsc), 0, 63, NULL, NULL, NULL,
     "kannel: an smsc-id, no spaces or ';'", "sendsms `smsc`: the SMSC Kannel routes through (absent: Kannel's routing)"},
    {"provider.priority", CFG_T_INT, CFG_BYHOOK, CFG_NONE, 0, 3, NULL, NULL, NULL, "kannel",
     "sendsms `priority` (absent: not sent)"},
    {"provider.validity", CFG_T_DUR, CFG_BYHOOK, CFG_NONE, 60000, 86400000, NULL, NULL, NULL,
     "kannel: whole minutes",
     "sendsms `validity`, in minutes (absent: each code's remaining life, rounded up)"},
    {"provider.dlr_mask", CFG_T_INT, 0, CFG_AT(provider.dlr_mask), 1, 31, "19", NULL, NULL,
     "kannel: needs callback_url",
     "sendsms `dlr-mask`: the report types asked for (19: delivered, undelivered, SMSC reject)"},
    {"provider.account_sid_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: required; AC and 32 hex digits", NULL},
    {"provider.auth_token_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: this or the API key; with an API key, only with callback_url",
     "basic auth with the account SID, and the key of status callbacks' X-Twilio-Signature"},
    {"provider.api_key_sid_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: SK and 32 hex digits; with api_key_secret_env", "basic auth with an API key instead of the auth token"},
    {"provider.api_key_secret_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: with api_key_sid_env", NULL},
    {"provider.messaging_service_sid", CFG_T_STR, 0, CFG_AT(provider.messaging_service), 0, 0, NULL, NULL, NULL,
     "twilio: MG and 32 hex digits; this or from", "sent as `MessagingServiceSid` instead of `From`"},
    {"provider.token_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 16, 0, NULL, NULL, NULL, "webhook",
     "sent as `Authorization: Bearer <token>`"},
    {"provider.signing_secret_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 32, 0, NULL, NULL, NULL, "webhook",
     "signs each request: `X-Otpd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"t.body\">`"},
    {"provider.callback_url", CFG_T_STR, 0, CFG_AT(provider.callback_url), 0, 0, NULL, NULL, NULL,
     "otpd's own base URL for delivery reports",
     "with it Kannel and Twilio send delivery reports to `/v1/dlr/kannel` and `/v1/dlr/twilio` (see "
     "\"Delivery reports\")"},
    {"provider.callback_ttl", CFG_T_DUR, 0, CFG_AT(provider.callback_ttl_ms), 1000, CFG_30D_MS, "7d", NULL, NULL, NULL,
     "how long a report URL is accepted after its message was accepted"},
};
const size_t cfg_n_rows = sizeof(cfg_rows) / sizeof(cfg_rows[0]);

/* After the top level's rows. */
static void cfg_root(struct cfg_ctx *x, struct config *c, json_t *root)
{
    cfg_listen(x, c, root);
    cfg_listen_internal(x, c, root);
    if (c->secret != NULL)
        c->secret_len = strlen((const char *)c->secret);
}

struct config *config_parse(const char *text, const char *file, char **errors)
{
    struct cfg_ctx x = {file, NULL, 0, 0};
    struct config *c = NULL;
    json_error_t jerr;
    json_t *root = NULL;

    if (errors)
        *errors = NULL;
    root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL || !json_is_object(root)) {
        char where[64];
        snprintf(where, sizeof(where), "line %d", root ? 1 : jerr.line);
        cfg_error(&x, where, "%s", root ? "the top level must be an object" : jerr.text);
        goto out;
    }
    if ((c = cfg_calloc(1, sizeof(*c))) == NULL) {
        cfg_error(&x, "(all)", "out of memory");
        goto out;
    }
    cfg_defaults(c);
    c->provider.priority = -1; /* Kannel's priority is sent only when set */
    cfg_read_section(&x, c, &cfg_rows[0], root, "");
    if (x.n_err == 0)
        c->json = json_incref(root);
out:
    json_decref(root);
    if (x.n_err > 0) {
        config_free(c);
        c = NULL;
        if (errors)
            *errors = x.err;
        else
            free(x.err);
        if (errors && *errors == NULL)
            *errors = strdup("config: out of memory\n");
    }
    return c;
}

struct config *config_load(const char *path, char **errors)
{
    struct config *c;
    char *text = NULL;
    FILE *f;
    long n = -1;

    if (errors)
        *errors = NULL;
    errno = 0;
    f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > 1 << 20 ||
        fseek(f, 0, SEEK_SET) != 0 || (text = cfg_alloc_fn((size_t)n + 1)) == NULL ||
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        if (f != NULL && n >= 0 && n <= 1 << 20 && text == NULL)
            errno = ENOMEM; /* cfg_alloc_fn need not set it */
        if (errors && asprintf(errors, "%s: (file): cannot read (%s)\n", path,
                               errno ? strerror(errno) : "larger than 1 MiB?") < 0)
            *errors = NULL;
        if (f)
            fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[n] = '\0';
    c = config_parse(text, path, errors);
    free(text);
    return c;
}

/* Overwrites a secret before freeing it. */
static void cfg_free_secret(char *s)
{
    if (s != NULL) {
        volatile char *v = s;
        while (*v)
            *v++ = 0;
        free(s);
    }
}

void config_free(struct config *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->keys.n_api_keys; i++)
        cfg_free_secret(c->keys.api_keys[i].key);
    free(c->keys.api_keys);
    cfg_free_secret((char *)c->secret);
    cfg_free_secret(c->redis.password);
    cfg_free_secret(c->provider.user);
    cfg_free_secret(c->provider.pass);
    cfg_free_secret(c->provider.key_sid);
    cfg_free_secret(c->provider.key_secret);
    cfg_free_secret(c->provider.token);
    cfg_free_secret(c->provider.signing_secret);
    free(c->limits.rules);
    free(c->limits.prices);
    free(c->limits.caps);
    json_decref(c->json);
    free(c);
}

int64_t config_price(const struct config *c, const char *phone)
{
    return config_price_in(c->limits.prices, c->limits.n_prices, phone);
}

int64_t config_price_in(const struct cfg_price *prices, size_t n_prices, const char *phone)
{
    size_t i, best_len = 0;
    int64_t best = -1;

    for (i = 0; i < n_prices; i++) {
        const struct cfg_price *p = &prices[i];
        size_t n = strlen(p->prefix);
        if (strcmp(p->prefix, "*") == 0) {
            if (best_len == 0)
                best = p->price_minor;
        } else if (strncmp(phone, p->prefix, n) == 0 && n > best_len) {
            best_len = n;
            best = p->price_minor;
        }
    }
    return best;
}

const char *config_limit_why(enum cfg_algo a, int64_t window_ms, int64_t limit)
{
    if (a == CFG_ALGO_SLIDING_LOG && limit > config_limit_max(a))
        return "at most 1000 for sliding_log, which keeps every request of its window (its memory grows with "
               "the limit); use sliding_window_counter, fixed_window or token_bucket for larger limits";
    if (a == CFG_ALGO_WRONG_GUESS_CAP && limit > config_limit_max(a))
        return "at most 1000 for wrong_guess_cap, which keeps the time of every counted wrong guess in the "
               "phone's hash (its memory grows with the limit)";
    if (a == CFG_ALGO_TOKEN_BUCKET && limit > window_ms)
        return "at most the window in ms for token_bucket, which spaces requests at least 1 ms apart; use a "
               "longer window, or fixed_window or sliding_window_counter";
    return NULL;
}

int64_t config_limit_max(enum cfg_algo a)
{
    if (a == CFG_ALGO_SLIDING_LOG || a == CFG_ALGO_WRONG_GUESS_CAP)
        return 1000;
    return a == CFG_ALGO_SLIDING_WINDOW_COUNTER ? 1000000 : 1000000000;
}
