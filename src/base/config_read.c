/*
 * config_read: the primitives every reader of the config file uses (a
 * member, a string, an integer, a duration, an enum, each with its error at
 * its path), the loader's allocations, and the secrets the file names by
 * their environment variables. Runs at start-up and on SIGHUP (main thread
 * only), never on a request path.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"
#include "duration.h"
#include "unittest.h"

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

/*
 * Makes the loader allocate through fn (NULL: malloc again); what fn returns
 * must be released by free(). For tests that make one allocation fail: every
 * failure is then a load error, never a config with something missing. Not
 * thread-safe; set it before loading. The product never calls it.
 */
UNITTEST __attribute__((unused)) void config_set_alloc(void *(*fn)(size_t))
{
    cfg_alloc_fn = fn ? fn : malloc;
}

void *cfg_alloc(size_t bytes)
{
    return cfg_alloc_fn(bytes);
}

void *cfg_calloc(size_t n, size_t size)
{
    size_t bytes;
    void *p;

    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    bytes = n * size;
    if ((p = cfg_alloc(bytes > 0 ? bytes : 1)) != NULL)
        memset(p, 0, bytes);
    return p;
}

static char *cfg_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = cfg_alloc(n);

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
