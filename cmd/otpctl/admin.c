/*
 * otpctl override|block|unlock: the operator's client for otpd's admin API
 * (docs/openapi.yaml, the admin routes). Each command reads its flags from
 * its own table (flags.c), turns them into one JSON body (jansson, never
 * pasted text), sends one request with the admin key from OTPCTL_KEY
 * (http.c, libcurl), and prints the server's answer: add and unlock print
 * its JSON, list prints a table (or the JSON with --format json), rm prints
 * nothing. A refusal prints the problem's `error` and `detail` on stderr.
 *
 * The server judges every value (durations, phones, rules, ranges): otpctl
 * checks only what it needs to build the request (flags known, one match,
 * whole numbers), so one set of rules decides and its detail reaches the
 * operator. The key never reaches argv, stdout or stderr; otpctl's copies
 * are wiped, and the variable is wiped from the environment once read.
 *
 * Exit codes (sysexits): EX_USAGE bad flags or URL; EX_CONFIG no usable
 * OTPCTL_KEY; EX_NOINPUT a --cacert file that cannot be read; EX_NOPERM
 * 401/403; EX_DATAERR other 4xx (400, 404, 422...); EX_TEMPFAIL 409 (too
 * many rows) and 429; EX_UNAVAILABLE no connection, a timeout, or 5xx;
 * EX_PROTOCOL an answer otpctl cannot read, or a TLS handshake that failed
 * (a server certificate not trusted, a port that does not speak TLS).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "http.h"
#include "otpctl.h"

#define ADM_CONNECT_MS 5000 /* one address's connect, at most (and never past the whole) */
#define ADM_ERR_LEN (OTPCTL_HTTP_URL_MAX + 512)
#define ADM_KIND_MAX 64    /* an override key's KIND: longer than any the server knows */
#define ADM_UNSET LLONG_MIN /* --burst not given */

/* The six things a block matches, in the server's order; --phone and
 * --api-key serve unlock too. */
enum adm_match { M_PHONE, M_PHONE_PREFIX, M_REGION, M_DEVICE, M_CLIENT_IP, M_API_KEY, M_N };

/* Each one's member in a block's "match". */
static const char *const adm_match_json[M_N] = {
    [M_PHONE] = "phone",
    [M_PHONE_PREFIX] = "phone_prefix",
    [M_REGION] = "region",
    [M_DEVICE] = "device",
    [M_CLIENT_IP] = "client_ip",
    [M_API_KEY] = "api_key",
};

enum adm_shape { S_BLOCK, S_OVERRIDE, S_UNLOCK, S_LIST, S_RM };

/* The parsed command line. Strings borrow argv. */
struct adm_args {
    struct otpctl_net net;  /* -s, --timeout, --cacert among the command's flags */
    const char *match[M_N]; /* block add's (exactly one); unlock's phone and api_key */
    const char *rule, *expires_in, *note, *format;
    struct flag_list keys;  /* --key KIND=VALUE, in order */
    long long limit, burst; /* burst: ADM_UNSET when not given */
    struct flag_list id;    /* rm's operand */
};

#define A(field) offsetof(struct adm_args, field)

static const struct flag block_add_flags[] = {
    {"phone", 0, FLAG_STR, 0, A(match[M_PHONE]), "E164", "block a phone", 0, 0},
    {"phone-prefix", 0, FLAG_STR, 0, A(match[M_PHONE_PREFIX]), "+DIGITS", "block the phones with this prefix",
     0, 0},
    {"region", 0, FLAG_STR, 0, A(match[M_REGION]), "CC", "block a region (ISO 3166 alpha-2)", 0, 0},
    {"device", 0, FLAG_STR, 0, A(match[M_DEVICE]), "ID", "block a device id", 0, 0},
    {"client-ip", 0, FLAG_STR, 0, A(match[M_CLIENT_IP]), "IP[/BITS]", "block an address or a range", 0, 0},
    {"api-key", 0, FLAG_STR, 0, A(match[M_API_KEY]), "NAME", "block a caller (its api_keys[].name)", 0, 0},
    {"expires-in", 0, FLAG_STR, 1, A(expires_in), "D", "how long the block holds (10m, 1h, 7d)", 0, 0},
    {"note", 0, FLAG_STR, 0, A(note), "TEXT", "why, for the list and the ledger", 0, 0},
    OTPCTL_NET_FLAGS(A(net)),
};

static const struct flag override_add_flags[] = {
    {"rule", 0, FLAG_STR, 1, A(rule), "R", "the rule (limits[].name)", 0, 0},
    {"key", 0, FLAG_LIST, 1, A(keys), "KIND=VALUE", "one part of the rule's key; again for each part", 0, 0},
    {"limit", 0, FLAG_INT, 1, A(limit), "N", "the limit in place of the rule's", 0, 0},
    {"burst", 0, FLAG_INT, 0, A(burst), "N", "the burst in place of a token bucket's", 0, 0},
    {"expires-in", 0, FLAG_STR, 1, A(expires_in), "D", "how long the override holds (10m, 1h, 7d)", 0, 0},
    {"note", 0, FLAG_STR, 0, A(note), "TEXT", "why, for the list and the ledger", 0, 0},
    OTPCTL_NET_FLAGS(A(net)),
};

static const struct flag list_flags[] = {
    {"format", 0, FLAG_STR, 0, A(format), "F", "table (default) or json (the server's answer)", 0, 0},
    OTPCTL_NET_FLAGS(A(net)),
};

static const struct flag rm_flags[] = {
    OTPCTL_NET_FLAGS(A(net)),
};

static const struct flag unlock_flags[] = {
    {"phone", 0, FLAG_STR, 1, A(match[M_PHONE]), "E164", "the locked phone", 0, 0},
    {"api-key", 0, FLAG_STR, 0, A(match[M_API_KEY]), "NAME", "only this caller's lock (default: all)", 0, 0},
    {"note", 0, FLAG_STR, 0, A(note), "TEXT", "why, for the ledger", 0, 0},
    OTPCTL_NET_FLAGS(A(net)),
};

#define ADM_KEY_NOTE "  the admin key comes from OTPCTL_KEY\n"
#define ADM_RM(noun)                                                                                         \
    {                                                                                                        \
        .name = "otpctl " noun " rm", .operands = "ID", .max_operands = 1, .operands_off = A(id),            \
        .flags = FLAGS_OF(rm_flags), .notes = "  ID: from " noun " list\n" ADM_KEY_NOTE                      \
    }

/* The commands: what each sends and its flags. */
static const struct adm_cmd {
    const char *noun, *verb; /* verb NULL: the noun alone (unlock) */
    const char *method, *path;
    enum adm_shape shape;
    struct flag_cmd flags;
} adm_cmds[] = {
    {"block", "add", "POST", "/v1/admin/blocks", S_BLOCK,
     {.name = "otpctl block add",
      .synopsis = "MATCH --expires-in D [options]",
      .flags = FLAGS_OF(block_add_flags),
      .notes = "  MATCH: exactly one of --phone, --phone-prefix, --region, --device, --client-ip, --api-key\n"
               ADM_KEY_NOTE}},
    {"block", "list", "GET", "/v1/admin/blocks", S_LIST,
     {.name = "otpctl block list", .flags = FLAGS_OF(list_flags), .notes = ADM_KEY_NOTE}},
    {"block", "rm", "DELETE", "/v1/admin/blocks/", S_RM, ADM_RM("block")},
    {"override", "add", "POST", "/v1/admin/overrides", S_OVERRIDE,
     {.name = "otpctl override add", .flags = FLAGS_OF(override_add_flags), .notes = ADM_KEY_NOTE}},
    {"override", "list", "GET", "/v1/admin/overrides", S_LIST,
     {.name = "otpctl override list", .flags = FLAGS_OF(list_flags), .notes = ADM_KEY_NOTE}},
    {"override", "rm", "DELETE", "/v1/admin/overrides/", S_RM, ADM_RM("override")},
    {"unlock", NULL, "POST", "/v1/admin/unlock", S_UNLOCK,
     {.name = "otpctl unlock", .flags = FLAGS_OF(unlock_flags), .notes = ADM_KEY_NOTE}},
};
#define ADM_NCMDS (sizeof(adm_cmds) / sizeof(adm_cmds[0]))

/* The synopses of the commands whose noun is noun (NULL: all). */
static void adm_synopses(const char *noun, FILE *f)
{
    size_t i;

    for (i = 0; i < ADM_NCMDS; i++)
        if (noun == NULL || strcmp(adm_cmds[i].noun, noun) == 0)
            flags_synopsis(&adm_cmds[i].flags, "  ", f);
}

void otpctl_admin_synopsis(FILE *f)
{
    adm_synopses(NULL, f);
}

/* The command argv starts ("block add", "unlock"): FLAGS_GO with *out, or
 * the exit code after the help (a noun and --help) or a usage error. */
static int adm_find(int argc, char **argv, const struct adm_cmd **out)
{
    size_t i;

    for (i = 0; i < ADM_NCMDS; i++)
        if (strcmp(argv[0], adm_cmds[i].noun) == 0 &&
            (adm_cmds[i].verb == NULL || (argc > 1 && strcmp(argv[1], adm_cmds[i].verb) == 0))) {
            *out = &adm_cmds[i];
            return FLAGS_GO;
        }
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs("usage:\n", stdout);
        adm_synopses(argv[0], stdout);
        fprintf(stdout, "Run 'otpctl %s COMMAND --help' for a command's flags.\n", argv[0]);
        return EX_OK;
    }
    if (argc > 1)
        fprintf(stderr, "otpctl %s: unknown command %s (add, list or rm)\nusage:\n", argv[0], argv[1]);
    else
        fprintf(stderr, "otpctl %s: add, list or rm is needed\nusage:\n", argv[0]);
    adm_synopses(argv[0], stderr);
    return EX_USAGE;
}

/* What the table cannot say: otpctl's flags given once (before the command
 * or among its flags), a block's one match, override keys that are
 * KIND=VALUE with each KIND once, rm's ID, list's formats. Merges net into
 * a->net. FLAGS_GO or EX_USAGE. */
static int adm_check(const struct adm_cmd *cmd, struct adm_args *a, const struct otpctl_net *net)
{
    const struct flag_cmd *c = &cmd->flags;
    const char *twice = net->server && a->net.server       ? "-s"
                        : net->timeout_s && a->net.timeout_s ? "--timeout"
                        : net->cacert && a->net.cacert       ? "--cacert"
                                                             : NULL;
    int i, k, n = 0;

    if (twice != NULL)
        return flags_usage_error(c, "%s given twice (before the command and after it)", twice);
    a->net.server = a->net.server ? a->net.server : net->server;
    a->net.timeout_s = a->net.timeout_s ? a->net.timeout_s : net->timeout_s;
    a->net.cacert = a->net.cacert ? a->net.cacert : net->cacert;
    for (i = 0; cmd->shape == S_BLOCK && i < M_N; i++)
        n += a->match[i] != NULL;
    if (cmd->shape == S_BLOCK && n != 1)
        return flags_usage_error(c,
                                 "exactly one of --phone, --phone-prefix, --region, --device, --client-ip, "
                                 "--api-key is needed");
    for (i = 0; i < a->keys.n; i++) {
        const char *kv = a->keys.v[i], *eq = strchr(kv, '=');
        size_t len = eq ? (size_t)(eq - kv) : 0;
        if (len == 0 || len >= ADM_KIND_MAX)
            return flags_usage_error(c, "--key %s: KIND=VALUE is needed (phone=+91..., api_key=NAME, ...)",
                                     kv);
        for (k = 0; k < i; k++)
            if (strncmp(a->keys.v[k], kv, len + 1) == 0)
                return flags_usage_error(c, "--key %.*s given twice", (int)len, kv);
    }
    if (cmd->shape == S_RM && (a->id.n == 0 || a->id.v[0][0] == '\0'))
        return flags_usage_error(c, "the row's ID is needed (see list)");
    if (a->format && strcmp(a->format, "table") != 0 && strcmp(a->format, "json") != 0)
        return flags_usage_error(c, "--format %s: table or json", a->format);
    return FLAGS_GO;
}

/* Sets obj's member name to the text value, when given. -1 when the text
 * is not UTF-8 or memory ran out. */
static int adm_str(json_t *obj, const char *name, const char *value)
{
    return value == NULL ? 0 : json_object_set_new(obj, name, json_string(value));
}

/* A block's "match": its one flag's member. */
static int adm_block_body(json_t *body, const struct adm_args *a)
{
    json_t *match = json_object();
    int i, bad = 0;

    for (i = 0; i < M_N; i++)
        bad |= adm_str(match, adm_match_json[i], a->match[i]);
    return bad | json_object_set_new(body, "match", match);
}

/* An override's rule, key (KIND=VALUE parts checked by adm_check), limit
 * and burst. */
static int adm_override_body(json_t *body, const struct adm_args *a)
{
    json_t *key = json_object();
    char kind[ADM_KIND_MAX];
    int i, bad = adm_str(body, "rule", a->rule);

    for (i = 0; i < a->keys.n; i++) {
        const char *eq = strchr(a->keys.v[i], '=');
        snprintf(kind, sizeof(kind), "%.*s", (int)(eq - a->keys.v[i]), a->keys.v[i]);
        bad |= json_object_set_new(key, kind, json_string(eq + 1));
    }
    bad |= json_object_set_new(body, "key", key);
    bad |= json_object_set_new(body, "limit", json_integer(a->limit));
    if (a->burst != ADM_UNSET)
        bad |= json_object_set_new(body, "burst", json_integer(a->burst));
    return bad;
}

/*
 * The request body for cmd, as new text (the caller frees), or NULL with
 * *ex set (EX_USAGE, said; EX_OSERR out of memory). Commands without a
 * body give NULL and EX_OK.
 */
static char *adm_body(const struct adm_cmd *cmd, const struct adm_args *a, int *ex)
{
    json_t *body;
    char *text = NULL;
    int bad;

    *ex = EX_OK;
    if (cmd->shape == S_LIST || cmd->shape == S_RM)
        return NULL;
    *ex = EX_OSERR;
    if ((body = json_object()) == NULL)
        return NULL;
    if (cmd->shape == S_BLOCK)
        bad = adm_block_body(body, a);
    else if (cmd->shape == S_OVERRIDE)
        bad = adm_override_body(body, a);
    else
        bad = adm_str(body, "phone", a->match[M_PHONE]) | adm_str(body, "api_key", a->match[M_API_KEY]);
    if (cmd->shape != S_UNLOCK)
        bad |= adm_str(body, "expires_in", a->expires_in);
    bad |= adm_str(body, "note", a->note);
    if (bad) {
        /* The numbers were checked by the flags: json_string refused text that is not UTF-8. */
        *ex = flags_usage_error(&cmd->flags, "a value is not valid UTF-8 text");
    } else if ((text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL) {
        *ex = EX_OK;
    }
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
static int adm_print_table(const struct adm_cmd *cmd, json_t *items)
{
    static const char *const block_cols[] = {"id", "match", "expires_at", "created_by", "note", NULL};
    static const char *const override_cols[] = {"id",         "rule",       "key",  "limit", "burst",
                                                "expires_at", "created_by", "note", NULL};
    const char *const *cols = strcmp(cmd->noun, "block") == 0 ? block_cols : override_cols;
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
static int adm_success(const struct adm_cmd *cmd, const struct adm_args *a,
                       const struct otpctl_http_answer *ans)
{
    json_t *j, *items;
    int rc;

    if (cmd->shape == S_RM)
        return EX_OK; /* 204: nothing to say */
    if ((j = json_loadb(ans->body, ans->len, 0, NULL)) == NULL) {
        fprintf(stderr, "otpctl: HTTP %d with a body that is not JSON\n", ans->status);
        return EX_PROTOCOL;
    }
    if (cmd->shape == S_LIST && (a->format == NULL || strcmp(a->format, "table") == 0)) {
        if (!json_is_array(items = json_object_get(j, "items"))) {
            fprintf(stderr, "otpctl: the list has no \"items\" array\n");
            json_decref(j);
            return EX_PROTOCOL;
        }
        rc = adm_print_table(cmd, items);
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
        fprintf(stderr,
                "otpctl: OTPCTL_KEY is not set: export an admin key (api_keys[].role \"admin\") in it\n");
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

/* The request path (new text: the caller frees): rm appends the ID,
 * percent-encoded but for RFC 3986's unreserved bytes, so no ID can change
 * the request line or the route. */
static char *adm_path(const struct adm_cmd *cmd, const struct adm_args *a)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(cmd->path), i;
    const char *id;
    char *p, *q;

    if (cmd->shape != S_RM)
        return strdup(cmd->path);
    id = a->id.v[0];
    if ((p = malloc(n + 3 * strlen(id) + 1)) == NULL)
        return NULL;
    memcpy(p, cmd->path, n);
    q = p + n;
    for (i = 0; id[i]; i++) {
        unsigned char ch = (unsigned char)id[i];
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


/* The exit code of a call that got no answer. */
static int adm_http_exit(enum otpctl_http_rc hrc)
{
    switch (hrc) {
    case OTPCTL_HTTP_EUNREACHABLE:
    case OTPCTL_HTTP_ETIMEOUT:
        return EX_UNAVAILABLE;
    case OTPCTL_HTTP_ECAFILE:
        return EX_NOINPUT;
    case OTPCTL_HTTP_ENOMEM:
        return EX_OSERR;
    case OTPCTL_HTTP_EURL:
        return EX_USAGE;
    default:
        return EX_PROTOCOL; /* OTPCTL_HTTP_ETLS, OTPCTL_HTTP_EPROTO */
    }
}

/* Sends cmd's request as a says and shows the answer. A sysexits code. */
static int adm_send(const struct adm_cmd *cmd, const struct adm_args *a)
{
    struct otpctl_http_url url;
    struct otpctl_http_answer ans = {0};
    struct otpctl_http_req rq = {cmd->method, NULL, NULL, NULL, a->net.cacert, 0, 0};
    enum otpctl_http_rc hrc;
    long long timeout_s = a->net.timeout_s ? a->net.timeout_s : OTPCTL_TIMEOUT_S;
    char err[ADM_ERR_LEN], *key = NULL, *body = NULL, *path = NULL;
    int ex;

    if (otpctl_http_parse_url(a->net.server ? a->net.server : OTPCTL_DEFAULT_URL, &url, err, sizeof(err)) !=
        OTPCTL_HTTP_OK)
        return flags_usage_error(&cmd->flags, "%s", err);
    if (a->net.cacert != NULL && !url.https)
        return flags_usage_error(&cmd->flags, "--cacert goes with an https:// URL");
    if ((body = adm_body(cmd, a, &ex)) == NULL && ex != EX_OK)
        return ex;
    if ((path = adm_path(cmd, a)) == NULL) {
        ex = EX_OSERR;
        goto out;
    }
    if ((key = adm_key()) == NULL) {
        ex = EX_CONFIG;
        goto out;
    }
    if (!url.https && !otpctl_http_is_loopback(&url))
        fprintf(stderr,
                "otpctl: warning: the admin key crosses the network to %s in clear text (use https://)\n",
                url.host);
    rq.path = path;
    rq.bearer = key;
    rq.body = body;
    rq.total_ms = (long)timeout_s * 1000;
    rq.connect_ms = ADM_CONNECT_MS < rq.total_ms ? ADM_CONNECT_MS : rq.total_ms;
    if ((hrc = otpctl_http_call(&url, &rq, &ans, err, sizeof(err))) != OTPCTL_HTTP_OK) {
        fprintf(stderr, "otpctl: %s\n", err);
        ex = adm_http_exit(hrc);
        goto out;
    }
    ex = ans.status >= 200 && ans.status < 300 ? adm_success(cmd, a, &ans) : adm_refusal(&ans);
out:
    if (key != NULL) {
        explicit_bzero(key, strlen(key));
        free(key);
    }
    otpctl_http_answer_free(&ans);
    free(body);
    free(path);
    return ex;
}

int otpctl_admin(int argc, char **argv, const struct otpctl_net *net)
{
    const struct adm_cmd *cmd = NULL;
    struct adm_args a;
    int ex, skip;

    if ((ex = adm_find(argc, argv, &cmd)) != FLAGS_GO)
        return ex;
    memset(&a, 0, sizeof(a));
    a.burst = ADM_UNSET;
    skip = cmd->verb ? 2 : 1;
    if ((ex = flags_parse(&cmd->flags, argc - skip, argv + skip, &a)) == FLAGS_GO &&
        (ex = adm_check(cmd, &a, net)) == FLAGS_GO)
        ex = adm_send(cmd, &a);
    flags_free(&cmd->flags, &a);
    return ex;
}
