/*
 * report: one call per delivery report, on the HTTP workers; about one per
 * message sent, so at most the send rate. Checking a tag costs one
 * HMAC-SHA256, a Twilio signature one HMAC-SHA1 over at most 4 KiB; a
 * report that may move a message waits for one ledger commit, so that only
 * a report that really moved it is counted.
 */
#include "report.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/unittest.h"

#define REPORT_EXP_MAX 12    /* decimal digits of a Unix time in seconds */
#define REPORT_BIND_MAX 24   /* a tag's provider binding: "kannel", 0x1f, a mask of up to 2 digits */
#define REPORT_PARAMS_MAX 64 /* form parameters in a signed Twilio callback (it sends about 10) */

struct report {
    const struct provider_conf *provider; /* the start-up config's */
    const struct code_keys *keys;
    struct ledger *ledger;
    struct lanes *lanes;
    pthread_mutex_t mu;                /* guards the counters */
    uint64_t recorded[2];              /* reports that moved a message: failed, delivered */
    uint64_t ignored[2];               /* final reports that changed nothing: failed, delivered */
    uint64_t verdicts[REPORT_VERDICTS]; /* every report, by verdict */
    int64_t status_logged_ms;          /* the last log line of a refused Kannel status (wall ms) */
    uint64_t status_unlogged;          /* refused statuses since that line */
};

static const struct report_row report_rows[REPORT_VERDICTS] = {
    [REPORT_RECORDED] = {OUT_COUNT, "recorded", NULL},
    [REPORT_IGNORED] = {OUT_COUNT, "the message is final already", NULL},
    [REPORT_PASSING] = {OUT_COUNT, "an intermediate stage", NULL},
    [REPORT_UNKNOWN] = {OUT_NOT_FOUND, "unknown message", "unknown"},
    [REPORT_EXPIRED] = {OUT_REPORT_EXPIRED, "this report URL has expired", "expired"},
    [REPORT_BAD_STATUS] = {OUT_INVALID_REQUEST, "status is not a report type this URL asked for", "status"},
    [REPORT_FORBIDDEN] = {OUT_INVALID_SIGNATURE, "X-Twilio-Signature is missing or wrong", "signature"},
    [REPORT_UNRECORDED] = {OUT_STORE_UNAVAILABLE, "the report could not be recorded", NULL},
};

/* The provider name a tag binds, by the config's provider type. */
static const char *const report_provider[] = {
    [CFG_PROVIDER_FILE] = "file",
    [CFG_PROVIDER_WEBHOOK] = "webhook",
    [CFG_PROVIDER_KANNEL] = "kannel",
    [CFG_PROVIDER_TWILIO] = "twilio",
};

/* The provider name of each route. */
static const char *const report_via_name[] = {[REPORT_KANNEL] = "kannel", [REPORT_TWILIO] = "twilio"};

const struct report_row *report_row(enum report_verdict v)
{
    return &report_rows[v < REPORT_VERDICTS ? v : REPORT_UNKNOWN];
}

struct report *report_new(const struct provider_conf *c, const struct code_keys *k, struct ledger *l, struct lanes *p)
{
    struct report *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->provider = c;
    r->keys = k;
    r->ledger = l;
    r->lanes = p;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void report_free(struct report *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* The one layout of a report URL's query, for building it and for
 * rebuilding the URL Twilio signed; mask (Kannel's) is NULL for none. */
static int report_format(char *out, size_t cap, const char *id, const char *exp, const char *mask,
                         const char *tag)
{
    int n = mask ? snprintf(out, cap, "id=%s&exp=%s&m=%s&tag=%s", id, exp, mask, tag)
                 : snprintf(out, cap, "id=%s&exp=%s&tag=%s", id, exp, tag);

    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* What a tag binds besides the message and its expiry: the provider, and
 * for Kannel the dlr-mask its URL carries ("kannel\x1f19"), so a report
 * can claim only the types Kannel was asked for. */
static void report_binding(const char *provider, const char *mask, char *out, size_t cap)
{
    if (mask != NULL)
        snprintf(out, cap, "%s\x1f%s", provider, mask);
    else
        snprintf(out, cap, "%s", provider);
}

/* Kannel's report types, one bit each of its dlr-mask and the %d of a
 * report: 1 delivered, 2 undelivered, 4 buffered, 8 SMSC submit, 16 SMSC
 * reject. The outcome of each (-1: an intermediate stage). */
static const struct {
    const char *text;
    int bit, outcome;
} report_kannel_types[] = {{"1", 1, 1}, {"2", 2, 0}, {"4", 4, -1}, {"8", 8, -1}, {"16", 16, 0}};

/* mask's value when it is one as otpd writes it (1 to 31, no sign or
 * leading zero), else 0. */
static int report_mask_value(const char *mask)
{
    size_t n = mask ? strlen(mask) : 0;
    int v;

    if (n < 1 || n > 2 || strspn(mask, "0123456789") != n || mask[0] == '0')
        return 0;
    v = (int)strtol(mask, NULL, 10);
    return v <= 31 ? v : 0;
}

/* 1 with the outcome in *outcome when status is exactly one of Kannel's
 * types (as Kannel writes it) and one that mask asked for; else 0. */
static int report_kannel_status(const char *status, const char *mask, int *outcome)
{
    int m = report_mask_value(mask);
    size_t i;

    for (i = 0; status != NULL && i < sizeof(report_kannel_types) / sizeof(report_kannel_types[0]); i++)
        if (strcmp(status, report_kannel_types[i].text) == 0 && (m & report_kannel_types[i].bit)) {
            *outcome = report_kannel_types[i].outcome;
            return 1;
        }
    return 0;
}

enum otp_rc report_query(const struct report *r, const char *id, int64_t now_ms, char *out, size_t cap)
{
    char exp[REPORT_EXP_MAX + 8], tag[CODE_TAG_LEN + 1], mask[8], bind[REPORT_BIND_MAX];
    const char *m = NULL;
    /* Rounded up: a URL never lives shorter than callback_ttl. */
    int64_t exp_s = (now_ms + r->provider->callback_ttl_ms + 999) / 1000;

    snprintf(exp, sizeof(exp), "%lld", (long long)exp_s);
    if (r->provider->type == CFG_PROVIDER_KANNEL) {
        snprintf(mask, sizeof(mask), "%d", r->provider->dlr_mask); /* the dlr-mask kannel.c sends */
        m = mask;
    }
    report_binding(report_provider[r->provider->type], m, bind, sizeof(bind));
    code_report_tag(r->keys, bind, id, exp, tag);
    return report_format(out, cap, id, exp, m, tag) < 0 ? OTP_EINVAL : OTP_OK;
}

/* Decodes %XX and '+' of a form value in place; -1 for a bad escape or a
 * NUL, which no genuine callback holds. */
static int report_decode(char *s)
{
    static const char hex[] = "0123456789abcdef0123456789ABCDEF";
    char *o = s;

    for (; *s; s++) {
        if (*s == '+') {
            *o++ = ' ';
        } else if (*s == '%') {
            const char *hi = s[1] ? strchr(hex, s[1]) : NULL, *lo = hi && s[2] ? strchr(hex, s[2]) : NULL;
            int v;
            if (lo == NULL)
                return -1;
            v = (int)((hi - hex) % 16) * 16 + (int)((lo - hex) % 16);
            if (v == 0)
                return -1;
            *o++ = (char)v;
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return 0;
}

struct report_param {
    const char *name, *value;
};

static int report_param_cmp(const void *a, const void *b)
{
    const struct report_param *x = a, *y = b;
    int c = strcmp(x->name, y->name);

    return c ? c : strcmp(x->value, y->value);
}

/*
 * What Twilio signs (its "Webhooks security" page): the URL it called,
 * then each POST parameter's name and value, decoded, with no separators,
 * sorted by name (byte order; equal names by value). Writes it into out
 * (cap bytes, NUL-terminated) and returns its length, or -1 when the form
 * is malformed, has more than REPORT_PARAMS_MAX parameters or out is too
 * small.
 */
UNITTEST int report_twilio_data(const char *url, const char *form, char *out, size_t cap)
{
    struct report_param p[REPORT_PARAMS_MAX];
    char *copy = strdup(form), *save = NULL, *pair;
    size_t n = 0, len, i;
    int rc = -1;

    if (copy == NULL || (len = strlen(url)) >= cap)
        goto out;
    memcpy(out, url, len + 1);
    for (pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (n == REPORT_PARAMS_MAX)
            goto out;
        p[n].name = pair;
        p[n].value = eq ? eq + 1 : "";
        if (eq)
            *eq = '\0';
        if (report_decode(pair) < 0 || (eq && report_decode(eq + 1) < 0))
            goto out;
        n++;
    }
    qsort(p, n, sizeof(p[0]), report_param_cmp);
    for (i = 0; i < n; i++) {
        size_t a = strlen(p[i].name), b = strlen(p[i].value);
        if (len + a + b >= cap)
            goto out;
        memcpy(out + len, p[i].name, a);
        memcpy(out + len + a, p[i].value, b + 1);
        len += a + b;
    }
    rc = (int)len;
out:
    free(copy);
    return rc;
}

/* 1 when in carries Twilio's signature of the URL otpd gave for it (the
 * callback URL and the query as report_format lays it out, whatever order
 * the query arrived in) and its form. */
static int report_twilio_ok(const struct report *r, const struct report_in *in)
{
    const struct provider_conf *c = r->provider;
    size_t cap;
    char *url = NULL, *data = NULL;
    int ok = 0, n;

    /* Only the configured Twilio account's token can check a signature. */
    if (c->type != CFG_PROVIDER_TWILIO || c->callback_url[0] == '\0' || in->signature == NULL ||
        in->id == NULL || in->exp == NULL || in->tag == NULL || in->form == NULL)
        return 0;
    cap = strlen(c->callback_url) + strlen(in->id) + strlen(in->exp) + strlen(in->tag) + 64;
    if ((url = malloc(cap)) == NULL)
        goto out;
    n = snprintf(url, cap, "%s/v1/dlr/twilio?", c->callback_url);
    if (n < 0 || (size_t)n >= cap ||
        report_format(url + n, cap - (size_t)n, in->id, in->exp, NULL, in->tag) < 0)
        goto out;
    /* Decoding never grows the form, and dropping '=' and '&' shrinks it. */
    cap = strlen(url) + strlen(in->form) + 1;
    if ((data = malloc(cap)) == NULL || (n = report_twilio_data(url, in->form, data, cap)) < 0)
        goto out;
    ok = code_twilio_sig_ok(c->pass, data, (size_t)n, in->signature);
out:
    free(url);
    free(data);
    return ok;
}

/* 1 when in's tag is genuine for its route (with Kannel's mask), message
 * and expiry. */
static int report_tag_ok(const struct report *r, const struct report_in *in)
{
    char bind[REPORT_BIND_MAX];

    if (in->id == NULL || in->exp == NULL || in->tag == NULL || strlen(in->id) != CODE_ID_LEN ||
        in->exp[0] == '\0' || strlen(in->exp) > REPORT_EXP_MAX ||
        strspn(in->exp, "0123456789") != strlen(in->exp) ||
        (in->via == REPORT_KANNEL && report_mask_value(in->mask) == 0))
        return 0;
    report_binding(report_via_name[in->via], in->via == REPORT_KANNEL ? in->mask : NULL, bind, sizeof(bind));
    return code_report_tag_ok(r->keys, bind, in->id, in->exp, in->tag);
}

/* A Kannel report with a genuine tag and a type its mask did not ask for:
 * someone holding that URL made it up (Kannel sends only the types asked
 * for). Logged with the message (the tag proved the id is ours; nothing
 * else of the URL is written), at most once a second with the count
 * since, so one URL cannot flood the log. */
static void report_status_refused(struct report *r, const struct report_in *in, int64_t now_ms)
{
    uint64_t n = 0;

    pthread_mutex_lock(&r->mu);
    r->status_unlogged++;
    if (now_ms - r->status_logged_ms >= 1000) {
        n = r->status_unlogged;
        r->status_unlogged = 0;
        r->status_logged_ms = now_ms;
    }
    pthread_mutex_unlock(&r->mu);
    if (n > 0)
        log_event(LOG_WARN, "report.status_refused",
                  LOG_FIELDS(LOG_STR("message", in->id), LOG_INT("refused", (int64_t)n)),
                  "kannel report for message %s refused: its status is not a type the URL's dlr-mask asked "
                  "for (%llu refused since the last such line); the report URL may have leaked", in->id,
                  (unsigned long long)n);
}

static enum report_verdict report_decide(struct report *r, const struct report_in *in)
{
    int64_t now_ms = clock_wall_ms();
    char err[OTP_ERR_LEN] = "", detail[32];
    const char *what = in->detail;
    int moved = 0, ignored = 0, outcome = in->outcome;
    const char *again = NULL;
    enum msg_state to;

    if (in->via == REPORT_TWILIO && !report_twilio_ok(r, in))
        return REPORT_FORBIDDEN;
    if (!report_tag_ok(r, in))
        return REPORT_UNKNOWN;
    if (strtoll(in->exp, NULL, 10) * 1000 <= now_ms)
        return REPORT_EXPIRED;
    if (in->via == REPORT_KANNEL) {
        if (!report_kannel_status(in->status, in->mask, &outcome)) {
            report_status_refused(r, in, now_ms);
            return REPORT_BAD_STATUS;
        }
        snprintf(detail, sizeof(detail), "kannel dlr %s", in->status);
        what = detail;
    }
    if (outcome < 0)
        return REPORT_PASSING;
    to = outcome ? MSG_DELIVERED : MSG_FAILED;
    /* The message's state lives in Redis, for any instance's message: only
     * from the states before an end (delivered, failed and expired are
     * final), so a late or replayed report changes nothing. */
    if (lanes_report(r->lanes, in->id, to, &moved, &again, err) != OTP_OK) {
        log_msg(LOG_ERROR, "cannot record a delivery report for %s: %s", in->id, err);
        return REPORT_UNRECORDED;
    }
    if (again != NULL) {
        /* Not failed: queued again on the next provider. Its row here stays
         * 'sent' (its first delivery); the attempt's rows are the sending
         * instance's (sends: provider, outcome, cost). */
        log_event(LOG_WARN, "report.failover",
                  LOG_FIELDS(LOG_STR("message_id", in->id), LOG_STR("to", again), LOG_STR("report", what)),
                  "message %s: its delivery failed (%s); sent again on %s with the same code", in->id, what, again);
    }
    /* This instance's ledger records what it saw: the message's row if it
     * accepted or sent it (from any state the table moves to to), else the
     * report's event alone. */
    if (moved && again == NULL &&
        ledger_message_report(r->ledger, in->id, to, msg_from(to, MSG_ALL), what, now_ms, &ignored) != OTP_OK)
        log_msg(LOG_ERROR, "ledger: cannot record the delivery report for %s", in->id);
    pthread_mutex_lock(&r->mu);
    if (moved)
        r->recorded[outcome ? 1 : 0]++;
    else
        r->ignored[outcome ? 1 : 0]++;
    pthread_mutex_unlock(&r->mu);
    return moved ? REPORT_RECORDED : REPORT_IGNORED;
}

enum report_verdict report_handle(struct report *r, const struct report_in *in)
{
    enum report_verdict v = report_decide(r, in);

    pthread_mutex_lock(&r->mu);
    r->verdicts[v]++;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void report_metrics(struct report *r, struct metrics_text *t)
{
    int i;

    pthread_mutex_lock(&r->mu);
    metrics_head(t, "otpd_delivery_reports_total", "counter",
                 "Delivery reports that changed a message's state, by status.");
    metrics_u64(t, "otpd_delivery_reports_total", r->recorded[1], "status", "delivered");
    metrics_u64(t, "otpd_delivery_reports_total", r->recorded[0], "status", "failed");
    metrics_head(t, "otpd_delivery_reports_ignored_total", "counter",
                 "Final reports that changed nothing (the message was final already), by status.");
    metrics_u64(t, "otpd_delivery_reports_ignored_total", r->ignored[1], "status", "delivered");
    metrics_u64(t, "otpd_delivery_reports_ignored_total", r->ignored[0], "status", "failed");
    metrics_head(t, "otpd_delivery_reports_refused_total", "counter", "Delivery reports refused, by reason.");
    for (i = 0; i < REPORT_VERDICTS; i++)
        if (report_rows[i].label != NULL)
            metrics_u64(t, "otpd_delivery_reports_refused_total", r->verdicts[i], "reason",
                        report_rows[i].label);
    pthread_mutex_unlock(&r->mu);
}
