/*
 * otpctl override|block|unlock: the operator's client for otpd's admin API
 * (DESIGN.md, "Admin bodies"). It turns flags into one JSON body (jansson,
 * never pasted text), sends one request with the admin key from OTPCTL_KEY
 * (http.c), and prints the server's answer: add and unlock print its JSON,
 * list prints a table (or the JSON with --format json), rm prints nothing.
 * A refusal prints the problem's `error` and `detail` on stderr.
 *
 * The server judges every value (durations, phones, rules, ranges): otpctl
 * checks only what it needs to build the request (flags known, one match,
 * whole numbers), so one set of rules decides and its detail reaches the
 * operator. The key never reaches argv, stdout or stderr; its copies are
 * wiped, and the variable is wiped from the environment once read.
 *
 * Exit codes (sysexits): EX_USAGE bad flags or URL; EX_CONFIG no usable
 * OTPCTL_KEY; EX_NOPERM 401/403; EX_DATAERR other 4xx (400, 404, 422...);
 * EX_TEMPFAIL 409 (too many rows) and 429; EX_UNAVAILABLE no connection, a
 * timeout, or 5xx; EX_PROTOCOL an answer otpctl cannot read.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "http.h"
#include "otpctl.h"

#define ADM_DEFAULT_URL "http://127.0.0.1:8080"
#define ADM_TIMEOUT_S 10     /* the whole exchange, by default */
#define ADM_TIMEOUT_MAX_S 600
#define ADM_CONNECT_MS 5000  /* one address's connect, at most (and never past the whole) */
#define ADM_KEYS_MAX 8       /* --key parts of one override: more than any rule's key has */
#define ADM_ERR_LEN 512

/* The flags, one row each: its spelling, the JSON member it fills (NULL:
 * not a body member) and what it takes. */
enum adm_opt {
    O_SERVER,
    O_TIMEOUT,
    O_FORMAT,
    O_PHONE, /* the six block matches, in the server's order; phone and api_key serve unlock too */
    O_PHONE_PREFIX,
    O_REGION,
    O_DEVICE,
    O_CLIENT_IP,
    O_API_KEY,
    O_RULE,
    O_KEY, /* repeatable: KIND=VALUE */
    O_LIMIT,
    O_BURST,
    O_EXPIRES_IN,
    O_NOTE,
    O_N
};

static const struct {
    const char *flag;
    const char *json;
    int integer; /* a whole number in the body */
} adm_opts[O_N] = {
    [O_SERVER] = {"-s", NULL, 0},
    [O_TIMEOUT] = {"--timeout", NULL, 0},
    [O_FORMAT] = {"--format", NULL, 0},
    [O_PHONE] = {"--phone", "phone", 0},
    [O_PHONE_PREFIX] = {"--phone-prefix", "phone_prefix", 0},
    [O_REGION] = {"--region", "region", 0},
    [O_DEVICE] = {"--device", "device", 0},
    [O_CLIENT_IP] = {"--client-ip", "client_ip", 0},
    [O_API_KEY] = {"--api-key", "api_key", 0},
    [O_RULE] = {"--rule", "rule", 0},
    [O_KEY] = {"--key", "key", 0},
    [O_LIMIT] = {"--limit", "limit", 1},
    [O_BURST] = {"--burst", "burst", 1},
    [O_EXPIRES_IN] = {"--expires-in", "expires_in", 0},
    [O_NOTE] = {"--note", "note", 0},
};

#define B(o) (1u << (o))
#define ADM_GLOBAL (B(O_SERVER) | B(O_TIMEOUT))
#define ADM_MATCH (B(O_PHONE) | B(O_PHONE_PREFIX) | B(O_REGION) | B(O_DEVICE) | B(O_CLIENT_IP) | B(O_API_KEY))

enum adm_shape { S_BLOCK, S_OVERRIDE, S_UNLOCK, S_LIST, S_RM };

/* The commands: what each sends, which flags it takes and needs. */
static const struct adm_cmd {
    const char *noun, *verb; /* verb NULL: the noun alone (unlock) */
    const char *method, *path;
    enum adm_shape shape;
    unsigned allowed, required;
} adm_cmds[] = {
    {"block", "add", "POST", "/v1/admin/blocks", S_BLOCK, ADM_MATCH | B(O_EXPIRES_IN) | B(O_NOTE), B(O_EXPIRES_IN)},
    {"block", "list", "GET", "/v1/admin/blocks", S_LIST, B(O_FORMAT), 0},
    {"block", "rm", "DELETE", "/v1/admin/blocks/", S_RM, 0, 0},
    {"override", "add", "POST", "/v1/admin/overrides", S_OVERRIDE,
     B(O_RULE) | B(O_KEY) | B(O_LIMIT) | B(O_BURST) | B(O_EXPIRES_IN) | B(O_NOTE),
     B(O_RULE) | B(O_KEY) | B(O_LIMIT) | B(O_EXPIRES_IN)},
    {"override", "list", "GET", "/v1/admin/overrides", S_LIST, B(O_FORMAT), 0},
    {"override", "rm", "DELETE", "/v1/admin/overrides/", S_RM, 0, 0},
    {"unlock", NULL, "POST", "/v1/admin/unlock", S_UNLOCK, B(O_PHONE) | B(O_API_KEY) | B(O_NOTE), B(O_PHONE)},
};
#define ADM_NCMDS (sizeof(adm_cmds) / sizeof(adm_cmds[0]))

/* The parsed command line. Strings borrow argv. */
struct adm_args {
    const struct adm_cmd *cmd;
    const char *val[O_N];
    const char *keys[ADM_KEYS_MAX]; /* --key KIND=VALUE, in order */
    int nkeys;
    const char *id; /* rm's operand */
};

void otpctl_admin_usage(FILE *f)
{
    fprintf(f, "       otpctl [-s URL] [--timeout S] block add (--phone P | --phone-prefix +DIGITS | --region CC |\n"
               "                    --device ID | --client-ip IP[/BITS] | --api-key NAME) --expires-in D [--note T]\n"
               "       otpctl [-s URL] override add --rule R --key KIND=VALUE [--key ...] --limit N [--burst N]\n"
               "                    --expires-in D [--note T]\n"
               "       otpctl [-s URL] block|override list [--format table|json]\n"
               "       otpctl [-s URL] block|override rm ID\n"
               "       otpctl [-s URL] unlock --phone P [--api-key NAME] [--note T]\n"
               "         (the admin key from OTPCTL_KEY; -s defaults to " ADM_DEFAULT_URL ")\n");
}

int otpctl_admin_is(const char *word)
{
    size_t i;

    if (strcmp(word, "-s") == 0 || strcmp(word, "--timeout") == 0 || strncmp(word, "-s=", 3) == 0 ||
        strncmp(word, "--timeout=", 10) == 0)
        return 1;
    for (i = 0; i < ADM_NCMDS; i++)
        if (strcmp(word, adm_cmds[i].noun) == 0)
            return 1;
    return 0;
}

__attribute__((format(printf, 1, 2))) static int adm_usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("otpctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    otpctl_admin_usage(stderr);
    return EX_USAGE;
}

/* Which option argv[*i] is (--flag VALUE or --flag=VALUE); its value in
 * *value, *i moved past it. O_N when it is no option; -1 when it lacks its
 * value. */
static int adm_opt_of(int argc, char **argv, int *i, const char **value)
{
    const char *a = argv[*i];
    int o;

    for (o = 0; o < O_N; o++) {
        size_t n = strlen(adm_opts[o].flag);
        if (strncmp(a, adm_opts[o].flag, n) != 0)
            continue;
        if (a[n] == '=') {
            *value = a + n + 1;
            return o;
        }
        if (a[n] != '\0')
            continue;
        if (*i + 1 >= argc)
            return -1;
        *value = argv[++*i];
        return o;
    }
    return O_N;
}

/* Records option o's value; EX_OK or EX_USAGE. */
static int adm_set(struct adm_args *a, int o, const char *value)
{
    if (o == O_KEY) {
        if (a->nkeys == ADM_KEYS_MAX)
            return adm_usage_error("--key: at most %d parts", ADM_KEYS_MAX);
        a->keys[a->nkeys++] = value;
        return EX_OK;
    }
    if (a->val[o] != NULL)
        return adm_usage_error("%s given twice", adm_opts[o].flag);
    a->val[o] = value;
    return EX_OK;
}

/* A whole number from a flag; 0 when s is not one. */
static int adm_integer(const char *s, json_int_t *out)
{
    char *end;
    long long v;

    if (s[0] == '\0' || s[0] == ' ')
        return 0;
    v = strtoll(s, &end, 10);
    if (*end != '\0')
        return 0;
    *out = (json_int_t)v;
    return 1;
}

/* Parses argv (after "otpctl") into *a. EX_OK, EX_USAGE, or -1 for help. */
static int adm_parse(int argc, char **argv, struct adm_args *a)
{
    const char *value;
    size_t c;
    int i = 0, o, rc;

    memset(a, 0, sizeof(*a));
    /* Global options come before the command (and may come among its flags). */
    while (i < argc && (o = adm_opt_of(argc, argv, &i, &value)) != O_N) {
        if (o < 0)
            return adm_usage_error("%s needs a value", argv[i]);
        if (!(ADM_GLOBAL & B(o)))
            return adm_usage_error("%s goes after the command", adm_opts[o].flag);
        if ((rc = adm_set(a, o, value)) != EX_OK)
            return rc;
        i++;
    }
    if (i >= argc)
        return adm_usage_error("%s", "a command is needed");
    for (c = 0; c < ADM_NCMDS; c++)
        if (strcmp(argv[i], adm_cmds[c].noun) == 0 &&
            (adm_cmds[c].verb == NULL || (i + 1 < argc && strcmp(argv[i + 1], adm_cmds[c].verb) == 0)))
            break;
    if (c == ADM_NCMDS) {
        if (i + 1 < argc && (strcmp(argv[i + 1], "-h") == 0 || strcmp(argv[i + 1], "--help") == 0))
            return -1;
        if (!otpctl_admin_is(argv[i]) || argv[i][0] == '-')
            return adm_usage_error("unknown command %s (block, override or unlock)", argv[i]);
        return adm_usage_error("%s: add, list or rm is needed", argv[i]);
    }
    a->cmd = &adm_cmds[c];
    i += a->cmd->verb ? 2 : 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return -1;
        if ((o = adm_opt_of(argc, argv, &i, &value)) < 0)
            return adm_usage_error("%s needs a value", argv[i]);
        if (o == O_N) {
            if (a->cmd->shape == S_RM && a->id == NULL && argv[i][0] != '-') {
                a->id = argv[i];
                continue;
            }
            return adm_usage_error("unknown argument %s", argv[i]);
        }
        if (!((a->cmd->allowed | ADM_GLOBAL) & B(o)))
            return adm_usage_error("%s does not apply to this command", adm_opts[o].flag);
        if ((rc = adm_set(a, o, value)) != EX_OK)
            return rc;
    }
    for (o = 0; o < O_N; o++)
        if ((a->cmd->required & B(o)) && a->val[o] == NULL && !(o == O_KEY && a->nkeys > 0))
            return adm_usage_error("%s is required", adm_opts[o].flag);
    if (a->cmd->shape == S_RM && (a->id == NULL || a->id[0] == '\0'))
        return adm_usage_error("%s", "rm needs the row's ID (see list)");
    if (a->cmd->shape == S_BLOCK) {
        int n = 0;
        for (o = O_PHONE; o <= O_API_KEY; o++)
            n += a->val[o] != NULL;
        if (n != 1)
            return adm_usage_error("%s", "block add takes exactly one of --phone, --phone-prefix, --region, "
                                         "--device, --client-ip, --api-key");
    }
    for (o = 0; o < O_N; o++) {
        json_int_t n;
        if (adm_opts[o].integer && a->val[o] != NULL && !adm_integer(a->val[o], &n))
            return adm_usage_error("%s: a whole number is needed", adm_opts[o].flag);
    }
    if (a->val[O_FORMAT] && strcmp(a->val[O_FORMAT], "table") != 0 && strcmp(a->val[O_FORMAT], "json") != 0)
        return adm_usage_error("--format %s: table or json", a->val[O_FORMAT]);
    return EX_OK;
}

/* Sets o's member of obj from its flag, when given (its number checked by
 * adm_parse). -1 when the text is not UTF-8 or memory ran out. */
static int adm_member(json_t *obj, const struct adm_args *a, int o)
{
    json_int_t n = 0;

    if (a->val[o] == NULL)
        return 0;
    if (!adm_opts[o].integer)
        return json_object_set_new(obj, adm_opts[o].json, json_string(a->val[o]));
    adm_integer(a->val[o], &n);
    return json_object_set_new(obj, adm_opts[o].json, json_integer(n));
}

/*
 * The request body for a's command, as new text (the caller frees), or
 * NULL with *rc set (EX_USAGE, said; EX_OSERR out of memory). Commands
 * without a body give NULL and EX_OK.
 */
static char *adm_body(const struct adm_args *a, int *rc)
{
    json_t *body = NULL, *inner = NULL;
    char *text = NULL;
    int o, k, bad = 0;

    *rc = EX_OK;
    if (a->cmd->shape == S_LIST || a->cmd->shape == S_RM)
        return NULL;
    *rc = EX_OSERR;
    if ((body = json_object()) == NULL)
        goto out;
    switch (a->cmd->shape) {
    case S_BLOCK:
        if ((inner = json_object()) == NULL)
            goto out;
        for (o = O_PHONE; o <= O_API_KEY; o++)
            bad |= adm_member(inner, a, o);
        bad |= json_object_set(body, "match", inner);
        break;
    case S_OVERRIDE:
        if ((inner = json_object()) == NULL)
            goto out;
        for (k = 0; k < a->nkeys; k++) {
            const char *eq = strchr(a->keys[k], '=');
            char kind[64];
            if (eq == NULL || eq == a->keys[k] || (size_t)(eq - a->keys[k]) >= sizeof(kind)) {
                adm_usage_error("--key %s: KIND=VALUE is needed (phone=+91..., api_key=NAME, ...)", a->keys[k]);
                *rc = EX_USAGE;
                goto out;
            }
            memcpy(kind, a->keys[k], (size_t)(eq - a->keys[k]));
            kind[eq - a->keys[k]] = '\0';
            if (json_object_get(inner, kind) != NULL) {
                adm_usage_error("--key %s: given twice", kind);
                *rc = EX_USAGE;
                goto out;
            }
            bad |= json_object_set_new(inner, kind, json_string(eq + 1));
        }
        bad |= adm_member(body, a, O_RULE);
        bad |= json_object_set(body, "key", inner);
        bad |= adm_member(body, a, O_LIMIT);
        bad |= adm_member(body, a, O_BURST);
        break;
    case S_UNLOCK:
        bad |= adm_member(body, a, O_PHONE);
        bad |= adm_member(body, a, O_API_KEY);
        break;
    default:
        break;
    }
    if (a->cmd->shape != S_UNLOCK)
        bad |= adm_member(body, a, O_EXPIRES_IN);
    bad |= adm_member(body, a, O_NOTE);
    if (bad) {
        /* The numbers were checked by adm_parse: json_string refused text that is not UTF-8. */
        *rc = EX_USAGE;
        adm_usage_error("%s", "a value is not valid UTF-8 text");
        goto out;
    }
    if ((text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL)
        *rc = EX_OK;
out:
    json_decref(inner);
    json_decref(body);
    return text;
}

/* Writes s with every control character (C0, DEL, C1 as UTF-8) as one
 * '?': text from the server goes to a terminal, where an escape sequence
 * must not act (U+009B is CSI to many). One '?' per character keeps the
 * table's widths (adm_width). */
static void adm_put_clean(const char *s, FILE *f)
{
    const unsigned char *p = (const unsigned char *)s;

    for (; *p; p++) {
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            fputc('?', f);
            p++;
        } else {
            fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
        }
    }
}

/* The display width of UTF-8 text: its code points. */
static size_t adm_width(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* One cell's text for a JSON value (new, the caller frees): strings as they
 * are, an object as k=v pairs joined by commas, "-" for none. */
static char *adm_cell(json_t *v)
{
    if (v == NULL || json_is_null(v))
        return strdup("-");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_object(v)) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        void *it;
        if (f == NULL)
            return NULL;
        /* A plain iterator loop: cppcheck does not know jansson's foreach macros. */
        for (it = json_object_iter(v); it != NULL; it = json_object_iter_next(v, it)) {
            char *c = adm_cell(json_object_iter_value(it));
            fprintf(f, "%s%s=%s", len ? "," : "", json_object_iter_key(it), c ? c : "?");
            fflush(f);
            free(c);
        }
        fclose(f);
        return out;
    }
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* list's table: one row per item, columns sized to their widest cell. */
static int adm_print_table(const struct adm_args *a, json_t *items)
{
    static const char *const block_cols[] = {"id", "match", "expires_at", "created_by", "note", NULL};
    static const char *const override_cols[] = {"id",         "rule",       "key",  "limit", "burst",
                                                "expires_at", "created_by", "note", NULL};
    const char *const *cols = strcmp(a->cmd->noun, "block") == 0 ? block_cols : override_cols;
    size_t ncols = 0, nrows = json_array_size(items), r, c, *width;
    char **cells;
    int rc = EX_OK;

    while (cols[ncols])
        ncols++;
    width = calloc(ncols, sizeof(*width));
    cells = calloc((nrows + 1) * ncols, sizeof(*cells));
    if (width == NULL || cells == NULL) {
        free(width);
        free(cells);
        return EX_OSERR;
    }
    for (c = 0; c < ncols; c++) {
        char *h = strdup(cols[c]);
        size_t i;
        for (i = 0; h && h[i]; i++)
            h[i] = (char)(h[i] >= 'a' && h[i] <= 'z' ? h[i] - 32 : h[i]);
        cells[c] = h;
    }
    for (r = 0; r < nrows; r++)
        for (c = 0; c < ncols; c++)
            cells[(r + 1) * ncols + c] = adm_cell(json_object_get(json_array_get(items, r), cols[c]));
    for (r = 0; r <= nrows * ncols + ncols - 1; r++)
        if (cells[r] == NULL)
            rc = EX_OSERR;
    if (rc == EX_OK) {
        for (r = 0; r <= nrows; r++)
            for (c = 0; c < ncols; c++)
                if (adm_width(cells[r * ncols + c]) > width[c])
                    width[c] = adm_width(cells[r * ncols + c]);
        for (r = 0; r <= nrows; r++) {
            for (c = 0; c < ncols; c++) {
                const char *s = cells[r * ncols + c];
                adm_put_clean(s, stdout);
                if (c + 1 < ncols)
                    printf("%*s", (int)(width[c] - adm_width(s) + 2), "");
            }
            putchar('\n');
        }
    }
    for (r = 0; r < (nrows + 1) * ncols; r++)
        free(cells[r]);
    free(cells);
    free(width);
    return rc;
}

/* The exit code for an HTTP status that is not a success. */
static int adm_exit_of(int status)
{
    if (status == 401 || status == 403)
        return EX_NOPERM;
    if (status == 409 || status == 429)
        return EX_TEMPFAIL;
    if (status >= 400 && status < 500)
        return EX_DATAERR;
    if (status >= 500)
        return EX_UNAVAILABLE;
    return EX_PROTOCOL; /* 1xx, 3xx: not an answer otpd gives on these routes */
}

/* A refusal on stderr: the problem's error and detail, or the status. */
static int adm_refusal(const struct otpctl_http_answer *ans)
{
    json_t *j = ans->body ? json_loadb(ans->body, ans->len, 0, NULL) : NULL;
    const char *error = json_string_value(json_object_get(j, "error"));
    const char *detail = json_string_value(json_object_get(j, "detail"));

    fprintf(stderr, "otpctl: HTTP %d", ans->status);
    if (error) {
        fputs(" ", stderr);
        adm_put_clean(error, stderr);
    }
    if (detail) {
        fputs(": ", stderr);
        adm_put_clean(detail, stderr);
    } else if (j == NULL && ans->status >= 300 && ans->status < 400) {
        fputs(": a redirect; -s must name otpd itself", stderr);
    }
    fputc('\n', stderr);
    json_decref(j);
    return adm_exit_of(ans->status);
}

/* A success: the answer as the command shows it. */
static int adm_success(const struct adm_args *a, const struct otpctl_http_answer *ans)
{
    json_t *j, *items;
    int rc;

    if (a->cmd->shape == S_RM)
        return EX_OK; /* 204: nothing to say */
    if ((j = json_loadb(ans->body, ans->len, 0, NULL)) == NULL) {
        fprintf(stderr, "otpctl: HTTP %d with a body that is not JSON\n", ans->status);
        return EX_PROTOCOL;
    }
    if (a->cmd->shape == S_LIST && (a->val[O_FORMAT] == NULL || strcmp(a->val[O_FORMAT], "table") == 0)) {
        if (!json_is_array(items = json_object_get(j, "items"))) {
            fprintf(stderr, "otpctl: the list has no \"items\" array\n");
            json_decref(j);
            return EX_PROTOCOL;
        }
        rc = adm_print_table(a, items);
    } else {
        /* The server's answer on one line, written again from what was
         * parsed, so no control character it held reaches the terminal. */
        rc = otpctl_print_json(j, JSON_COMPACT | JSON_PRESERVE_ORDER, stdout) == 0 ? EX_OK : EX_OSERR;
    }
    json_decref(j);
    return rc;
}

/*
 * The admin key from OTPCTL_KEY, as a new string (wipe and free it), or
 * NULL after saying why. The variable's value is wiped in place and the
 * variable removed, so what this process starts does not inherit it.
 */
static char *adm_key(void)
{
    char *v = getenv("OTPCTL_KEY"), *key;
    size_t i, n;

    if (v == NULL || v[0] == '\0') {
        fprintf(stderr, "otpctl: OTPCTL_KEY is not set: export an admin key (api_keys[].role \"admin\") in it\n");
        return NULL;
    }
    n = strlen(v);
    for (i = 0; i < n; i++)
        if ((unsigned char)v[i] <= ' ' || (unsigned char)v[i] >= 0x7f) {
            fprintf(stderr, "otpctl: OTPCTL_KEY holds a space or a byte that cannot go in an HTTP header\n");
            return NULL;
        }
    key = strdup(v);
    explicit_bzero(v, n);
    unsetenv("OTPCTL_KEY");
    if (key == NULL)
        fprintf(stderr, "otpctl: out of memory\n");
    return key;
}

/* The request path for a (new text: the caller frees): rm appends the ID,
 * percent-encoded but for RFC 3986's unreserved bytes, so no ID can change
 * the request line or the route. */
static char *adm_path(const struct adm_args *a)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(a->cmd->path), i;
    char *p, *q;

    if (a->cmd->shape != S_RM)
        return strdup(a->cmd->path);
    if ((p = malloc(n + 3 * strlen(a->id) + 1)) == NULL)
        return NULL;
    memcpy(p, a->cmd->path, n);
    q = p + n;
    for (i = 0; a->id[i]; i++) {
        unsigned char ch = (unsigned char)a->id[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '.' || ch == '_' || ch == '~') {
            *q++ = (char)ch;
        } else {
            *q++ = '%';
            *q++ = hex[ch >> 4];
            *q++ = hex[ch & 15];
        }
    }
    *q = '\0';
    return p;
}

int otpctl_admin(int argc, char **argv)
{
    struct otpctl_http_url url;
    struct otpctl_http_answer ans = {0};
    struct adm_args a;
    enum otpctl_http_rc hrc;
    char err[ADM_ERR_LEN], *key = NULL, *body = NULL, *path = NULL;
    json_int_t timeout_s = ADM_TIMEOUT_S;
    int rc;

    if ((rc = adm_parse(argc, argv, &a)) != EX_OK) {
        if (rc < 0)
            otpctl_admin_usage(stdout);
        return rc < 0 ? EX_OK : rc;
    }
    if (a.val[O_TIMEOUT] &&
        (!adm_integer(a.val[O_TIMEOUT], &timeout_s) || timeout_s < 1 || timeout_s > ADM_TIMEOUT_MAX_S))
        return adm_usage_error("--timeout %s: whole seconds from 1 to 600", a.val[O_TIMEOUT]);
    if (otpctl_http_parse_url(a.val[O_SERVER] ? a.val[O_SERVER] : ADM_DEFAULT_URL, &url, err, sizeof(err)) !=
        OTPCTL_HTTP_OK) {
        fprintf(stderr, "otpctl: %s\n", err);
        return EX_USAGE;
    }
    if ((body = adm_body(&a, &rc)) == NULL && rc != EX_OK)
        return rc;
    if ((path = adm_path(&a)) == NULL) {
        rc = EX_OSERR;
        goto out;
    }
    if ((key = adm_key()) == NULL) {
        rc = EX_CONFIG;
        goto out;
    }
    if (!otpctl_http_is_loopback(&url))
        fprintf(stderr, "otpctl: warning: the admin key crosses the network to %s in clear text (http://)\n",
                url.host);
    hrc = otpctl_http_call(&url, a.cmd->method, path, key, body,
                           ADM_CONNECT_MS < timeout_s * 1000 ? ADM_CONNECT_MS : (int)timeout_s * 1000,
                           (int)timeout_s * 1000, &ans, err, sizeof(err));
    if (hrc != OTPCTL_HTTP_OK) {
        fprintf(stderr, "otpctl: %s\n", err);
        rc = hrc == OTPCTL_HTTP_EUNREACHABLE || hrc == OTPCTL_HTTP_ETIMEOUT ? EX_UNAVAILABLE
             : hrc == OTPCTL_HTTP_ENOMEM                                    ? EX_OSERR
                                                                            : EX_PROTOCOL;
        goto out;
    }
    rc = ans.status >= 200 && ans.status < 300 ? adm_success(&a, &ans) : adm_refusal(&ans);
out:
    if (key != NULL) {
        explicit_bzero(key, strlen(key));
        free(key);
    }
    otpctl_http_answer_free(&ans);
    free(body);
    free(path);
    return rc;
}
