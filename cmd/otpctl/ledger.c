/*
 * otpctl ledger: the history of one fleet, read from each instance's ledger
 * (src/ledger/history.c reads and merges; this file parses the flags and
 * prints). Needs no config and no secret, and opens every file read-only,
 * so it runs beside a live otpd and on a copy of a ledger alike.
 *
 * Output: one line per event, in time order across the files, each naming
 * its ledger and the request, verification and message ids that let one
 * message be followed across instances. Three formats from one column
 * table: table (aligned for people; it holds the rows until the end to
 * align them, so export big ranges as json or csv), json (one object per
 * line, every column, null where not applicable) and csv (a header row,
 * RFC 4180 quoting, CRLF line ends).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "../../src/base/phone.h"
#include "../../src/base/timestamp.h"
#include "../../src/ledger/history.h"
#include "otpctl.h"

enum ledger_format { FMT_TABLE, FMT_JSON, FMT_CSV };

/* The output's columns, in json's and csv's order. */
enum out_col {
    OC_TIME,
    OC_TS,
    OC_LEDGER,
    OC_FILE,
    OC_EVENT,
    OC_STATE,
    OC_PHONE,
    OC_API_KEY,
    OC_PURPOSE,
    OC_DEVICE,
    OC_IP,
    OC_RULE,
    OC_SHADOW,
    OC_HTTP,
    OC_COUNT,
    OC_REQUEST_ID,
    OC_VID,
    OC_MID,
    OC_PROVIDER,
    OC_PROVIDER_ID,
    OC_ATTEMPT,
    OC_LATENCY,
    OC_COST,
    OC_WRONG,
    OC_DETAIL,
    OC_N
};

/* How the table shows a column: as its own column, folded into DETAIL as
 * name=value, or not at all (the legend above it names the files). */
enum table_show { TB_COLUMN, TB_FOLD, TB_HIDDEN };

static const struct {
    const char *name;    /* json's key and csv's heading */
    const char *heading; /* the table's, for TB_COLUMN */
    enum table_show show;
} out_cols[OC_N] = {
    [OC_TIME] = {"time", "TIME", TB_COLUMN},
    [OC_TS] = {"ts_ms", NULL, TB_HIDDEN},
    [OC_LEDGER] = {"ledger", "LEDGER", TB_COLUMN},
    [OC_FILE] = {"file", NULL, TB_HIDDEN},
    [OC_EVENT] = {"event", "EVENT", TB_COLUMN},
    [OC_STATE] = {"state", "STATE", TB_COLUMN},
    [OC_PHONE] = {"phone", "PHONE", TB_COLUMN},
    [OC_API_KEY] = {"api_key", "CALLER", TB_COLUMN},
    [OC_PURPOSE] = {"purpose", NULL, TB_FOLD},
    [OC_DEVICE] = {"device_id", NULL, TB_FOLD},
    [OC_IP] = {"client_ip", NULL, TB_FOLD},
    [OC_RULE] = {"rule", "RULE", TB_COLUMN},
    [OC_SHADOW] = {"shadow", NULL, TB_FOLD},
    [OC_HTTP] = {"http_status", "HTTP", TB_COLUMN},
    [OC_COUNT] = {"count", NULL, TB_FOLD},
    [OC_REQUEST_ID] = {"request_id", "REQUEST", TB_COLUMN},
    [OC_VID] = {"verification_id", "VERIFICATION", TB_COLUMN},
    [OC_MID] = {"message_id", "MESSAGE", TB_COLUMN},
    [OC_PROVIDER] = {"provider", NULL, TB_FOLD},
    [OC_PROVIDER_ID] = {"provider_id", NULL, TB_FOLD},
    [OC_ATTEMPT] = {"attempt", NULL, TB_FOLD},
    [OC_LATENCY] = {"latency_ms", NULL, TB_FOLD},
    [OC_COST] = {"cost_minor", NULL, TB_FOLD},
    [OC_WRONG] = {"wrong", NULL, TB_FOLD},
    [OC_DETAIL] = {"detail", NULL, TB_FOLD},
};

/* One value: a string, an integer, or null (neither). */
struct out_field {
    const char *s;
    int64_t i;
    int is_int;
};

/* The table's rows, held until the end to align them. */
struct table {
    char **cells; /* n_rows * n_cols, row by row, each malloc'd */
    size_t n_rows, cap_rows;
    int n_cols;
};

struct ledger_opts {
    struct flag_list db;
    const char *phone, *since, *until, *format;
};

#define L(field) offsetof(struct ledger_opts, field)

static const struct flag ledger_flags[] = {
    {"db", 0, FLAG_LIST, 1, L(db), "FILE", "a ledger; again for each instance's", 0, 0},
    {"phone", 0, FLAG_STR, 0, L(phone), "E164", "only this phone's history", 0, 0},
    {"since", 0, FLAG_STR, 0, L(since), "T", "from T on", 0, 0},
    {"until", 0, FLAG_STR, 0, L(until), "T", "before T", 0, 0},
    {"format", 0, FLAG_STR, 0, L(format), "F", "table (default), json or csv", 0, 0},
};

static const struct flag_cmd ledger_cmd = {
    .name = "otpctl ledger",
    .flags = FLAGS_OF(ledger_flags),
    .notes = "  T: RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T17:30:00+05:30) or Unix milliseconds;\n"
             "  --since is inclusive, --until exclusive\n",
};

void otpctl_ledger_synopsis(FILE *f)
{
    flags_synopsis(&ledger_cmd, "  ", f);
}

static struct out_field f_str(const char *s)
{
    return (struct out_field){s, 0, 0};
}

/* An integer, or null for -1 (history's "none"). */
static struct out_field f_int(int64_t i)
{
    return i < 0 ? (struct out_field){NULL, 0, 0} : (struct out_field){NULL, i, 1};
}

/* The row of ev; time is the caller's buffer (TIMESTAMP_LEN). */
static void out_fields(const struct history_event *ev, const char *file, char *time, struct out_field *f)
{
    int req = ev->kind == HISTORY_REQUEST;

    f[OC_TIME] = f_str(timestamp_format(ev->ts_ms, time, TIMESTAMP_LEN) == OTP_OK ? time : NULL);
    f[OC_TS] = (struct out_field){NULL, ev->ts_ms, 1};
    f[OC_LEDGER] = f_int(ev->ledger + 1);
    f[OC_FILE] = f_str(file);
    f[OC_EVENT] = f_str(req && ev->request ? ev->request : history_kind_name(ev->kind));
    f[OC_STATE] = f_str(ev->state);
    f[OC_PHONE] = f_str(ev->phone);
    f[OC_API_KEY] = f_str(ev->api_key);
    f[OC_PURPOSE] = f_str(ev->purpose);
    f[OC_DEVICE] = f_str(ev->device_id);
    f[OC_IP] = f_str(ev->client_ip);
    f[OC_RULE] = f_str(ev->rule);
    f[OC_SHADOW] = f_str(ev->shadow);
    f[OC_HTTP] = f_int(ev->http_status);
    f[OC_COUNT] = f_int(ev->count);
    f[OC_REQUEST_ID] = f_int(req ? ev->row_id : -1);
    f[OC_VID] = f_str(ev->verification_id);
    f[OC_MID] = f_str(ev->message_id);
    f[OC_PROVIDER] = f_str(ev->provider);
    f[OC_PROVIDER_ID] = f_str(ev->provider_id);
    f[OC_ATTEMPT] = f_int(ev->attempt);
    f[OC_LATENCY] = f_int(ev->latency_ms);
    f[OC_COST] = f_int(ev->cost_minor);
    f[OC_WRONG] = f_int(ev->wrong);
    f[OC_DETAIL] = f_str(ev->detail);
}

/* json: one object per line. A string that is not UTF-8 (jansson refuses
 * it) goes out with its other bytes as \xHH. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    char *esc;
    size_t n = strlen(s), i, o = 0;

    if (j != NULL || (esc = malloc(4 * n + 1)) == NULL)
        return j;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            esc[o++] = (char)c;
        else
            o += (size_t)snprintf(esc + o, 5, "\\x%02X", c);
    }
    esc[o] = '\0';
    j = json_string(esc);
    free(esc);
    return j;
}

static int print_json(const struct out_field *f)
{
    json_t *row = json_object();
    int i, rc;

    for (i = 0; i < OC_N; i++)
        json_object_set_new(row, out_cols[i].name,
                            f[i].is_int ? json_integer(f[i].i)
                            : f[i].s    ? json_text(f[i].s)
                                        : json_null());
    rc = otpctl_print_json(row, JSON_COMPACT | JSON_PRESERVE_ORDER, stdout);
    json_decref(row);
    return rc;
}

/* The bytes of a control character at s (C0, DEL, or C1 as UTF-8), or 0. */
static size_t csv_control(const unsigned char *s)
{
    if (*s < 0x20 || *s == 0x7f)
        return 1;
    return *s == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f ? 2 : 0;
}

/* csv (RFC 4180): a field holding a comma or a quote is quoted, its quotes
 * doubled; records end in CRLF. A control character (a line break
 * included) goes out as \xHH per byte, as in the table: the output may
 * reach a terminal. */
static void csv_field(const char *s, int first)
{
    const unsigned char *p = (const unsigned char *)s;
    int quote = s[strcspn(s, ",\"")] != '\0';
    size_t k, i;

    if (!first)
        putchar(',');
    if (quote)
        putchar('"');
    for (; *p; p += k ? k : 1) {
        for (i = 0, k = csv_control(p); i < k; i++)
            printf("\\x%02X", p[i]);
        if (k == 0 && *p == '"')
            putchar('"');
        if (k == 0)
            putchar(*p);
    }
    if (quote)
        putchar('"');
}

static void print_csv_header(void)
{
    int i;

    for (i = 0; i < OC_N; i++)
        csv_field(out_cols[i].name, i == 0);
    fputs("\r\n", stdout);
}

static void print_csv(const struct out_field *f)
{
    char num[24];
    int i;

    for (i = 0; i < OC_N; i++) {
        if (f[i].is_int)
            snprintf(num, sizeof(num), "%lld", (long long)f[i].i);
        csv_field(f[i].is_int ? num : f[i].s ? f[i].s : "", i == 0);
    }
    fputs("\r\n", stdout);
}

/* table: a cell safe for a terminal. Bytes outside printable ASCII (a
 * provider's error text could hold escape sequences) become \xHH. */
static void table_put(char **buf, size_t *len, size_t *cap, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char *grown;
        if (*len + 5 > *cap) {
            *cap = *cap * 2 + 64;
            if ((grown = realloc(*buf, *cap)) == NULL)
                return; /* table_add notices: the cell is cut short, then NULL below */
            *buf = grown;
        }
        if (c >= 0x20 && c < 0x7f)
            (*buf)[(*len)++] = (char)c;
        else
            *len += (size_t)snprintf(*buf + *len, 5, "\\x%02X", c);
        (*buf)[*len] = '\0';
    }
}

static char *table_cell(const struct out_field *f)
{
    char num[24], *buf = calloc(1, 64);
    size_t len = 0, cap = 64;

    if (buf == NULL)
        return NULL;
    if (f->is_int) {
        snprintf(num, sizeof(num), "%lld", (long long)f->i);
        table_put(&buf, &len, &cap, num);
    } else {
        table_put(&buf, &len, &cap, f->s ? f->s : "-");
    }
    return buf;
}

/* DETAIL: the folded columns that have a value, as name=value; a value
 * with a space, quote or '=' in quotes. A request's count shows only when
 * the row stands for more than one request. */
static char *table_detail(const struct out_field *f)
{
    char num[24], *buf = calloc(1, 64);
    size_t len = 0, cap = 64;
    int i;

    if (buf == NULL)
        return NULL;
    for (i = 0; i < OC_N; i++) {
        const char *v = f[i].s;
        int quote;
        if (out_cols[i].show != TB_FOLD || (!f[i].is_int && f[i].s == NULL) || (i == OC_COUNT && f[i].i == 1))
            continue;
        if (f[i].is_int) {
            snprintf(num, sizeof(num), "%lld", (long long)f[i].i);
            v = num;
        }
        quote = v[0] == '\0' || v[strcspn(v, " \"=")] != '\0';
        if (len > 0)
            table_put(&buf, &len, &cap, " ");
        table_put(&buf, &len, &cap, out_cols[i].name);
        table_put(&buf, &len, &cap, quote ? "=\"" : "=");
        for (; quote && *v; v++) {
            char one[3] = {*v, '\0', '\0'};
            if (*v == '"' || *v == '\\') {
                one[0] = '\\';
                one[1] = *v;
            }
            table_put(&buf, &len, &cap, one);
        }
        table_put(&buf, &len, &cap, quote ? "\"" : v);
    }
    if (len == 0)
        table_put(&buf, &len, &cap, "-");
    return buf;
}

/* Appends one row: the TB_COLUMN columns, then DETAIL. -1 out of memory. */
static int table_add(struct table *t, const struct out_field *f)
{
    char **row;
    int i, c = 0, bad = 0;

    if (t->n_rows == t->cap_rows) {
        size_t cap = t->cap_rows * 2 + 64;
        char **grown = realloc(t->cells, cap * (size_t)t->n_cols * sizeof(*grown));
        if (grown == NULL)
            return -1;
        t->cells = grown;
        t->cap_rows = cap;
    }
    row = t->cells + t->n_rows * (size_t)t->n_cols;
    for (i = 0; i < OC_N; i++)
        if (out_cols[i].show == TB_COLUMN)
            bad |= (row[c++] = table_cell(&f[i])) == NULL;
    bad |= (row[c] = table_detail(f)) == NULL;
    t->n_rows++;
    return bad ? -1 : 0;
}

static void table_print(const struct table *t, const char *const *paths, int n_paths)
{
    size_t *width = calloc((size_t)t->n_cols, sizeof(*width)), r;
    const char *head[OC_N + 1];
    int i, c = 0;

    if (width == NULL)
        return;
    for (i = 0; i < n_paths; i++) {
        char *buf = calloc(1, 64);
        size_t len = 0, cap = 64;
        if (buf != NULL) {
            table_put(&buf, &len, &cap, paths[i]);
            printf("# ledger %d: %s\n", i + 1, buf);
        }
        free(buf);
    }
    for (i = 0; i < OC_N; i++)
        if (out_cols[i].show == TB_COLUMN)
            head[c++] = out_cols[i].heading;
    head[c] = "DETAIL";
    for (c = 0; c < t->n_cols; c++)
        width[c] = strlen(head[c]);
    for (r = 0; r < t->n_rows; r++)
        for (c = 0; c < t->n_cols; c++) {
            const char *cell = t->cells[r * (size_t)t->n_cols + (size_t)c];
            if (cell && strlen(cell) > width[c])
                width[c] = strlen(cell);
        }
    for (r = 0; r <= t->n_rows; r++)
        for (c = 0; c < t->n_cols; c++) {
            const char *cell = r == 0 ? head[c] : t->cells[(r - 1) * (size_t)t->n_cols + (size_t)c];
            if (c + 1 < t->n_cols)
                printf("%-*s  ", (int)width[c], cell ? cell : "");
            else
                printf("%s\n", cell ? cell : "");
        }
    free(width);
}

static void table_free(struct table *t)
{
    size_t i;

    for (i = 0; i < t->n_rows * (size_t)t->n_cols; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* The sysexits code for a history error: the file is missing or no ledger
 * (EX_NOINPUT), it broke while being read (EX_DATAERR), or memory ran out. */
static int history_exit(enum otp_rc rc)
{
    switch (rc) {
    case OTP_ENOTFOUND:
    case OTP_EINVAL:
        return EX_NOINPUT;
    case OTP_EIO:
        return EX_DATAERR;
    case OTP_ENOMEM:
        return EX_OSERR;
    default:
        return EX_SOFTWARE;
    }
}

/* The filter the flags ask for (phone, times): EX_OK, or EX_DATAERR after
 * saying what is wrong. pi holds the phone's canonical form. */
static int ledger_filter(const struct ledger_opts *o, struct history_filter *filter, struct phone_info *pi)
{
    char why[OTP_ERR_LEN];

    if (o->phone != NULL) {
        enum phone_err pe = phone_parse(o->phone, pi);
        if (pe != PHONE_OK) {
            phone_why(pe, pi, why, sizeof(why));
            fprintf(stderr, "otpctl ledger: --phone %s: %s (want E.164: '+' then digits)\n", o->phone, why);
            return EX_DATAERR;
        }
        /* Ledgers hold the canonical form only ("+4407..." is "+447..."). */
        filter->phone = pi->e164;
    }
    if (o->since && timestamp_parse(o->since, &filter->since_ms) != OTP_OK) {
        fprintf(stderr,
                "otpctl ledger: --since %s: not an RFC 3339 time (2024-05-01T12:00:00Z) nor Unix ms\n",
                o->since);
        return EX_DATAERR;
    }
    if (o->until && timestamp_parse(o->until, &filter->until_ms) != OTP_OK) {
        fprintf(stderr,
                "otpctl ledger: --until %s: not an RFC 3339 time (2024-05-01T12:00:00Z) nor Unix ms\n",
                o->until);
        return EX_DATAERR;
    }
    if (filter->since_ms >= filter->until_ms) {
        fprintf(stderr, "otpctl ledger: --since %s is not before --until %s\n", o->since, o->until);
        return EX_DATAERR;
    }
    return EX_OK;
}

/* Prints every event of h in fmt; a sysexits code. What was read is
 * printed, even when a later row failed. */
static int ledger_print(struct history *h, const struct flag_list *paths, enum ledger_format fmt)
{
    struct table table = {NULL, 0, 0, 0};
    char err[OTP_ERR_LEN], when[TIMESTAMP_LEN];
    enum otp_rc rc;
    int i, got, ex = EX_OK;

    if (fmt == FMT_CSV)
        print_csv_header();
    for (i = 0; i < OC_N; i++)
        table.n_cols += out_cols[i].show == TB_COLUMN;
    table.n_cols++; /* DETAIL */
    for (;;) {
        struct history_event ev;
        struct out_field f[OC_N];
        if ((rc = history_next(h, &ev, &got, err)) != OTP_OK) {
            fprintf(stderr, "otpctl ledger: %s\n", err);
            ex = history_exit(rc);
            break;
        }
        if (!got)
            break;
        out_fields(&ev, paths->v[ev.ledger], when, f);
        if (fmt == FMT_JSON && print_json(f) != 0) {
            ex = EX_IOERR;
            break;
        }
        if (fmt == FMT_CSV)
            print_csv(f);
        if (fmt == FMT_TABLE && table_add(&table, f) < 0) {
            fputs("otpctl ledger: out of memory (use --format json or csv for a long history)\n", stderr);
            ex = EX_OSERR;
            break;
        }
    }
    if (fmt == FMT_TABLE)
        table_print(&table, paths->v, paths->n);
    table_free(&table);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("otpctl ledger: cannot write the output\n", stderr);
        if (ex == EX_OK)
            ex = EX_IOERR;
    }
    return ex;
}

int otpctl_ledger(int argc, char **argv)
{
    struct ledger_opts o;
    struct history_filter filter = {NULL, INT64_MIN, INT64_MAX};
    struct history *h = NULL;
    struct phone_info pi;
    enum ledger_format fmt = FMT_TABLE;
    enum otp_rc rc;
    char err[OTP_ERR_LEN];
    int ex;

    memset(&o, 0, sizeof(o));
    if ((ex = flags_parse(&ledger_cmd, argc, argv, &o)) != FLAGS_GO)
        goto out;
    if (o.format == NULL || strcmp(o.format, "table") == 0) {
        fmt = FMT_TABLE;
    } else if (strcmp(o.format, "json") == 0) {
        fmt = FMT_JSON;
    } else if (strcmp(o.format, "csv") == 0) {
        fmt = FMT_CSV;
    } else {
        ex = flags_usage_error(&ledger_cmd, "--format must be table, json or csv, not %s", o.format);
        goto out;
    }
    /* Bad values: the flags are right, what they carry is not. */
    if ((ex = ledger_filter(&o, &filter, &pi)) != EX_OK)
        goto out;
    if ((rc = history_open(o.db.v, o.db.n, &h, err)) != OTP_OK ||
        (rc = history_query(h, &filter, err)) != OTP_OK) {
        fprintf(stderr, "otpctl ledger: %s\n", err);
        ex = history_exit(rc);
        goto out;
    }
    ex = ledger_print(h, &o.db, fmt);
out:
    history_close(h);
    flags_free(&ledger_cmd, &o);
    return ex;
}
