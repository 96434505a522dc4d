/*
 * http: every API request passes here, on one of `http_threads` workers.
 * Each request gets a small state with a body buffer capped at
 * HTTP_BODY_MAX; nothing else is allocated until the body is complete.
 */
#include "http.h"

#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gnutls/abstract.h>
#include <jansson.h>
#include <microhttpd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/phone.h"
#include "../base/timestamp.h"
#include "../base/unittest.h"
#include "framing.h"
#include "listener.h"
#include "logsum.h"
#include "problem.h"
#include "tls.h"

/* Bodies up to this are kept in the request's own state. */
#define HTTP_BODY_SMALL 511

enum http_route {
    ROUTE_ISSUE,
    ROUTE_VERIFY,
    ROUTE_STATUS,
    ROUTE_CANCEL,
    ROUTE_HEALTH,
    ROUTE_READY,
    ROUTE_METRICS,
    ROUTE_DLR_KANNEL,
    ROUTE_DLR_TWILIO,
    ROUTE_ADMIN_OVERRIDES, /* GET list, POST add */
    ROUTE_ADMIN_OVERRIDE,  /* DELETE /{id} */
    ROUTE_ADMIN_BLOCKS,
    ROUTE_ADMIN_BLOCK,
    ROUTE_ADMIN_UNLOCK,
    ROUTE_NONE, /* 404 */
};

/* Each route's name in a summary line (a client's path may be anything). */
static const char *const http_route_names[] = {
    [ROUTE_ISSUE] = "issue",
    [ROUTE_VERIFY] = "verify",
    [ROUTE_STATUS] = "status",
    [ROUTE_CANCEL] = "cancel",
    [ROUTE_HEALTH] = "healthz",
    [ROUTE_READY] = "readyz",
    [ROUTE_METRICS] = "metrics",
    [ROUTE_DLR_KANNEL] = "dlr_kannel",
    [ROUTE_DLR_TWILIO] = "dlr_twilio",
    [ROUTE_ADMIN_OVERRIDES] = "admin_overrides",
    [ROUTE_ADMIN_OVERRIDE] = "admin_override",
    [ROUTE_ADMIN_BLOCKS] = "admin_blocks",
    [ROUTE_ADMIN_BLOCK] = "admin_block",
    [ROUTE_ADMIN_UNLOCK] = "admin_unlock",
    [ROUTE_NONE] = "none",
};

/* A flood of 401, 403 or 404 is logged as the first line of each kind
 * and one summary per kind and window (logsum.h). */
#define HTTP_LOG_WINDOW_MS 10000

/* One open connection, for the request deadline (see http_reaper). */
struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    /* The TLS generation when it opened, before its handshake (tls_gen);
     * UINT64_MAX on the plain internal listener. The certificates it may
     * use stay allocated while it is open (tls_collect). */
    uint64_t tls_gen;
    int64_t deadline_ms; /* INT64_MAX while a whole request is being answered */
    int internal;        /* on listen_internal: HTTP_INTERNAL_DEADLINE_MS at most */
    int shut;            /* shut down by the reaper; MHD closes it */
};

struct http {
    const struct http_conf *cfg;
    const struct keys_conf *keys;
    struct otp *otp;
    struct tls *tls;        /* borrowed; NULL: plain HTTP on listen */
    struct MHD_Daemon *d;
    struct MHD_Daemon *di;  /* listen_internal's; NULL when none */
    int untracked;          /* a connection opened without its entry (out of memory): replaced certificates
                             * are kept until the end, since it may use any of them */
    pthread_mutex_t mu; /* guards conns, stop and closed_slow */
    pthread_cond_t wake;
    struct http_conn *conns;
    pthread_t reaper;
    int reaper_started, stop;
    uint64_t closed_slow;
    /* Problems this layer answered itself, by outcome (atomic adds). */
    uint64_t problems[OUT_COUNT];
    /* The listening sockets, ours rather than MHD's (see listener.h): NULL
     * once quiesced, and always before the daemon they feed is stopped. */
    struct listener *l, *li;
    struct logsum *logsum; /* the refusals logged in summary; the reaper flushes it */
};

/* One request in progress. */
struct http_req {
    enum http_route route;
    int internal;      /* it came to listen_internal */
    const char *allow; /* set when the method is wrong: 405 with Allow */
    int post;          /* the method is POST */
    int too_big;
    /* For its answer's X-Request-Id and its log line. */
    char request_id[LOG_REQUEST_ID_MAX + 1]; /* the client's when sane, else ours */
    int64_t start_ms;                        /* monotonic */
    unsigned status;                         /* the answer's, once queued; 0 before */
    char outcome[32];                        /* the problem's error code; "" for a success */
    char rule[CFG_NAME_MAX];                 /* the refusing rule, "" when none */
    int cached;                              /* a refusal from the refusal cache: logged at debug */
    int close;                               /* the answer ends the connection (Connection: close) */
    const char *caller;                      /* the API key's name (the config's) once known */
    size_t len;
    /* The body: in small while it fits, else a heap copy of HTTP_BODY_MAX
     * + 1 bytes. A 4 KiB state for every request was a large-bin calloc,
     * zeroed and with glibc's fast bins consolidated each time (issue 13's
     * profile); an API body is a few hundred bytes. */
    char *body;
    char small[HTTP_BODY_SMALL + 1];
};

/* The request this worker thread is serving (set by http_handle around
 * each call it makes), so that the answer's helpers note what the log
 * line needs without a parameter through every route. */
static _Thread_local struct http_req *http_cur;

/* One answer before it is sent: what an Idempotency-Key stores and
 * replays. Header values are built here from numbers and rule names, so
 * they never hold a newline (see http_out_pack). */
struct http_out {
    unsigned status;
    char ctype[48];
    char *body;           /* malloc'd, NUL-terminated; NULL when out of memory */
    char retry_after[24]; /* "" when none */
    char policy[160];     /* RateLimit-Policy, "" when none */
    char ratelimit[160];  /* RateLimit */
};

/* Fills out from an answer; takes body (malloc'd; NULL allowed). */
static void http_out_set(struct http_out *out, unsigned status, const char *ctype, char *body,
                         const struct otp_answer *a)
{
    memset(out, 0, sizeof(*out));
    out->status = status;
    snprintf(out->ctype, sizeof(out->ctype), "%s", ctype);
    out->body = body;
    if (a != NULL && a->retry_after_s > 0 && (status == 409 || status == 429 || status == 503))
        snprintf(out->retry_after, sizeof(out->retry_after), "%lld", (long long)a->retry_after_s);
    if (a != NULL && a->header.name[0] && a->rc != OTP_ECOST) {
        const struct limits_header *h = &a->header;
        snprintf(out->policy, sizeof(out->policy), "\"%s\";q=%lld;w=%lld", h->name, (long long)h->quota,
                 (long long)h->window_s);
        snprintf(out->ratelimit, sizeof(out->ratelimit), "\"%s\";r=%lld;t=%lld", h->name,
                 (long long)h->remaining, (long long)h->reset_s);
    }
}

/* Every answer: echoes the request's id and notes the status for its log
 * line. */
static void http_mark(struct MHD_Response *r, unsigned status)
{
    if (http_cur == NULL)
        return;
    MHD_add_response_header(r, "X-Request-Id", http_cur->request_id);
    if (http_cur->close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close"); /* MHD then closes it */
    http_cur->status = status;
}

/* Queues out (its body is taken and sent as is). */
static enum MHD_Result http_send(struct MHD_Connection *con, struct http_out *out, const char *allow)
{
    struct MHD_Response *r;
    enum MHD_Result ok;
    char *body = out->body;

    out->body = NULL;
    if (body == NULL)
        return MHD_NO; /* out of memory: drop the connection */
    r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, out->ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    http_mark(r, out->status);
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (out->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (out->retry_after[0])
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, out->retry_after);
    if (out->policy[0]) {
        MHD_add_response_header(r, "RateLimit-Policy", out->policy);
        MHD_add_response_header(r, "RateLimit", out->ratelimit);
    }
    ok = MHD_queue_response(con, out->status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Queues a response whose body (malloc'd, taken; NULL allowed) is sent as is. */
static enum MHD_Result http_reply(struct MHD_Connection *con, unsigned status, const char *ctype, char *body,
                                  const struct otp_answer *a, const char *allow)
{
    struct http_out out;

    http_out_set(&out, status, ctype, body, a);
    return http_send(con, &out, allow);
}

/* The text of j (taken), or NULL when out of memory. jansson allocates
 * with malloc (no json_set_alloc_funcs), so its text is ours to free. */
static char *http_json_text(json_t *j)
{
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;

    json_decref(j);
    return body;
}

static enum MHD_Result http_json(struct MHD_Connection *con, unsigned status, json_t *j,
                                 const struct otp_answer *a)
{
    return http_reply(con, status, "application/json", http_json_text(j), a, NULL);
}

/* Cuts s at its first byte that does not begin a whole, valid UTF-8
 * character, so a detail cut by snprintf mid-character (or holding a
 * client's bad bytes) is still a JSON string. Overlong forms, surrogates
 * and code points past U+10FFFF count as invalid. */
UNITTEST void http_utf8_cut(char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (p[i]) {
        unsigned c = p[i], cp;
        size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0, k;
        if (n == 0)
            break;
        cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        for (k = 1; k < n && (p[i + k] & 0xc0) == 0x80; k++)
            cp = cp << 6 | (p[i + k] & 0x3f);
        if (k < n || (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            break;
        i += n;
    }
    s[i] = '\0';
}

/* The text of an RFC 9457 problem with our stable code in "error"
 * (problem.c); malloc'd, NULL when out of memory. */
static char *http_problem_text(unsigned status, const char *error, const char *title, const char *detail,
                               const struct otp_answer *a)
{
    char cut[PROBLEM_DETAIL_MAX + 1];
    struct problem p = {.status = status, .error = error, .title = title, .detail = cut};

    if (http_cur != NULL) {
        snprintf(http_cur->outcome, sizeof(http_cur->outcome), "%s", error);
        snprintf(http_cur->rule, sizeof(http_cur->rule), "%s", a != NULL ? a->reason : "");
        http_cur->cached = a != NULL && a->cached;
    }
    snprintf(cut, sizeof(cut), "%s", detail);
    http_utf8_cut(cut);
    if (a != NULL) {
        p.reason = a->reason;
        p.retry_after_s = a->retry_after_s;
        p.attempts_left = a->attempts_left;
        p.show_attempts = a->rc == OTP_EBADCODE;
    }
    return problem_text(&p);
}

/* Counts a problem this layer answers itself (h NULL: an answer otp
 * decided, which otp counts). */
static void http_count(struct http *h, enum otp_outcome o)
{
    if (h != NULL && (unsigned)o < OUT_COUNT)
        __atomic_fetch_add(&h->problems[o], 1, __ATOMIC_RELAXED);
}

/* Sends outcome o as a problem: its status, code and title from the one
 * table (rc.c). h counts it when the HTTP layer decided it (see http_count). */
static enum MHD_Result http_problem(struct http *h, struct MHD_Connection *con, enum otp_outcome o,
                                    const char *detail, const struct otp_answer *a, const char *allow)
{
    const struct otp_outcome_row *row = otp_outcome_row(o);

    http_count(h, o);
    return http_reply(con, (unsigned)row->http_status, "application/problem+json",
                      http_problem_text((unsigned)row->http_status, row->error, row->title, detail, a), a, allow);
}

/* out as a problem (for issue and verify, whose answers may be stored). */
static void http_out_problem(struct http *h, struct http_out *out, enum otp_outcome o, const char *detail,
                             const struct otp_answer *a)
{
    const struct otp_outcome_row *row = otp_outcome_row(o);

    http_count(h, o);
    http_out_set(out, (unsigned)row->http_status, "application/problem+json",
                 http_problem_text((unsigned)row->http_status, row->error, row->title, detail, a), a);
}

/* The served certificate's expiry, when HTTPS is on: what an alert on
 * renewal watches. */
static void http_metrics_tls(struct http *h, struct metrics_text *t)
{
    struct tls_info ti;

    if (h->tls == NULL)
        return;
    tls_info(h->tls, &ti);
    metrics_head(t, "otpd_tls_certificate_expiry_timestamp_seconds", "gauge",
                 "When the certificate HTTPS serves stops being valid (Unix time); SIGHUP loads a renewed "
                 "one.");
    metrics_i64(t, "otpd_tls_certificate_expiry_timestamp_seconds", ti.not_after_s);
}

/* The Prometheus text of this layer's own problems, each outcome it can
 * answer shown (0 until it happens); malloc'd, NULL when out of memory. */
static char *http_metrics_text(struct http *h)
{
    struct metrics_text t = {0};
    char status[8];
    int i;

    metrics_head(&t, "otpd_http_refusals_total", "counter",
                 "Problems the HTTP layer answered itself, before any decision (authentication, routing, "
                 "framing, bodies, Idempotency-Key, admin calls).");
    for (i = 0; i < OUT_COUNT; i++) {
        const struct otp_outcome_row *row = otp_outcome_row((enum otp_outcome)i);
        if (!(row->ops & OUT_OP_HTTP))
            continue;
        snprintf(status, sizeof(status), "%d", row->http_status);
        metrics_u64(&t, "otpd_http_refusals_total", __atomic_load_n(&h->problems[i], __ATOMIC_RELAXED),
                    "status", status, "error", row->error);
    }
    http_metrics_tls(h, &t);
    return metrics_text_take(&t);
}

/* Compares a presented key with each configured one in constant time;
 * returns the matching key's name or NULL, and in *admin its role (1 for
 * "admin"). */
static const char *http_auth(struct http *h, struct MHD_Connection *con, int *admin)
{
    const char *hdr = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *name = NULL, *key;
    size_t i, n, j;

    if (hdr == NULL || strncasecmp(hdr, "Bearer ", 7) != 0 || hdr[7] == '\0')
        return NULL;
    key = hdr + 7;
    n = strlen(key);
    for (i = 0; i < h->keys->n_api_keys; i++) {
        const char *want = h->keys->api_keys[i].key;
        size_t m = strlen(want);
        unsigned char diff = n != m;
        for (j = 0; j < m; j++)
            diff |= (unsigned char)(want[j] ^ key[j % n]);
        if (diff == 0) {
            name = h->keys->api_keys[i].name;
            *admin = h->keys->api_keys[i].admin;
        }
    }
    return name;
}

static int http_is_json(struct MHD_Connection *con)
{
    const char *ct = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = strlen("application/json");

    return ct != NULL && strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\0' || ct[n] == ';' ||
                                                                           ct[n] == ' ');
}

/* Reads the request body (len bytes) as a JSON object, allowing only the
 * named string fields. Returns NULL and fills detail when the body is not
 * acceptable. */
UNITTEST json_t *http_body(const char *body, size_t len, const char *const *fields, char *detail, size_t cap)
{
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e), *v;
    const char *key;

    if (j == NULL) {
        snprintf(detail, cap, "body is not JSON: %.100s", e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(detail, cap, "body must be a JSON object");
        goto bad;
    }
    json_object_foreach(j, key, v) {
        const char *const *f;
        for (f = fields; *f && strcmp(*f, key) != 0; f++)
            ;
        if (*f == NULL) {
            snprintf(detail, cap, "unknown field \"%.40s\"", key);
            goto bad;
        }
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
            snprintf(detail, cap, "%.40s must be a string", key);
            goto bad;
        }
    }
    return j;
bad:
    json_decref(j);
    return NULL;
}

static const char *http_field(json_t *j, const char *name)
{
    return json_string_value(json_object_get(j, name));
}

/* 1 when s is 1 to max printable ASCII bytes. */
UNITTEST int http_printable(const char *s, size_t max)
{
    size_t n = 0;

    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e)
            return 0;
    return n >= 1 && n <= max;
}

static const char http_bad_purpose[] = "purpose must be 1 to 32 printable ASCII bytes";

/* 1 when j's purpose is absent or 1 to 32 printable ASCII bytes. */
static int http_purpose_ok(json_t *j)
{
    const char *purpose = http_field(j, "purpose");

    return purpose == NULL || http_printable(purpose, 32);
}

/* Checks the fields issue and verify share. Returns the refusal's outcome,
 * or OUT_COUNT when they are fine.
 * The phone is parsed into *pi and replaced in j by its canonical form, so
 * that everything after this (the decision, the ledger, the provider, the
 * Idempotency-Key's hash of the body) sees one spelling of one number. */
UNITTEST enum otp_outcome http_check_common(json_t *j, struct phone_info *pi, char *detail, size_t cap)
{
    const char *phone = http_field(j, "phone"), *dev = http_field(j, "device_id");
    enum phone_err perr;

    if (phone == NULL) {
        snprintf(detail, cap, "phone is required");
        return OUT_INVALID_REQUEST;
    }
    if ((perr = phone_parse(phone, pi)) != PHONE_OK) {
        phone_why(perr, pi, detail, cap);
        return OUT_INVALID_PHONE;
    }
    if (json_object_set_new(j, "phone", json_string(pi->e164)) != 0) {
        snprintf(detail, cap, "out of memory");
        return OUT_INVALID_REQUEST;
    }
    if (dev != NULL && !http_printable(dev, 128)) {
        snprintf(detail, cap, "device_id must be 1 to 128 printable ASCII bytes");
        return OUT_INVALID_REQUEST;
    }
    return OUT_COUNT;
}

/* The stored form of an answer, for Idempotency-Key replays: a version line,
 * the status, Content-Type, Retry-After, RateLimit-Policy and RateLimit
 * lines ("" when absent), then the body. malloc'd; NULL when out of memory. */
static char *http_out_pack(const struct http_out *out)
{
    char *text;

    if (out->body == NULL || asprintf(&text, "1\n%u\n%s\n%s\n%s\n%s\n%s", out->status, out->ctype,
                                      out->retry_after, out->policy, out->ratelimit, out->body) < 0)
        return NULL;
    return text;
}

/* Copies the line at *p (without its newline) into out and moves *p past
 * it; -1 when there is no newline or the line does not fit. */
static int http_line(const char **p, char *out, size_t cap)
{
    const char *nl = strchr(*p, '\n');

    if (nl == NULL || (size_t)(nl - *p) >= cap)
        return -1;
    memcpy(out, *p, (size_t)(nl - *p));
    out[nl - *p] = '\0';
    *p = nl + 1;
    return 0;
}

/* Reads http_out_pack's text back into out (whose body the caller sends
 * or frees); -1 when it is not such a text or out of memory. */
static int http_out_unpack(const char *text, struct http_out *out)
{
    const char *p = text;
    char version[4], status[8], *end;

    memset(out, 0, sizeof(*out));
    if (http_line(&p, version, sizeof(version)) < 0 || strcmp(version, "1") != 0 ||
        http_line(&p, status, sizeof(status)) < 0 || http_line(&p, out->ctype, sizeof(out->ctype)) < 0 ||
        http_line(&p, out->retry_after, sizeof(out->retry_after)) < 0 ||
        http_line(&p, out->policy, sizeof(out->policy)) < 0 ||
        http_line(&p, out->ratelimit, sizeof(out->ratelimit)) < 0)
        return -1;
    out->status = (unsigned)strtoul(status, &end, 10);
    if (*end != '\0' || out->status < 200 || out->status > 599)
        return -1;
    return (out->body = strdup(p)) == NULL ? -1 : 0;
}

static const char http_bad_idem_key[] = "Idempotency-Key must be 1 to 64 printable ASCII bytes, given once";

/* One request header's count and first value (http_header_first). */
struct http_header_seen {
    const char *name;
    const char *value;
    int n;
};

static enum MHD_Result http_header_count(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct http_header_seen *x = cls;

    (void)kind;
    if (strcasecmp(key, x->name) == 0 && x->n++ == 0)
        x->value = value;
    return MHD_YES;
}

/* Counts the headers called name and keeps the first one's value. */
static struct http_header_seen http_header_first(struct MHD_Connection *con, const char *name)
{
    struct http_header_seen x = {name, NULL, 0};

    MHD_get_connection_values(con, MHD_HEADER_KIND, http_header_count, &x);
    return x;
}

/* The request's Idempotency-Key in *key (NULL when absent); 0 when it is
 * not 1 to IDEM_KEY_MAX printable ASCII bytes, or given twice. */
static int http_idem_key(struct MHD_Connection *con, const char **key)
{
    struct http_header_seen x = http_header_first(con, "Idempotency-Key");

    *key = x.value;
    return x.n == 0 || (x.n == 1 && idem_key_ok(x.value));
}

/* How often one request looks its Idempotency-Key up: again when its
 * decision found the key another request's, or its claim lapsed first. */
#define HTTP_IDEM_TRIES 3

/*
 * Looks cl's key up before a decision (op names it in the log). Returns 1
 * when the key is free and the request must be decided now, or 0 with
 * the answer to send in out: the first request's answer again, a reused
 * key (422), a duplicate still deciding after the wait (409), or a store
 * failure (503, fail closed).
 */
static int http_idem_begin(struct http *h, const struct idem_claim *cl, const char *op, struct http_out *out)
{
    struct otp_answer a = {0};
    enum idem_state st = IDEM_BUSY;
    char *stored = NULL, err[OTP_ERR_LEN] = "";
    int64_t retry_ms = 0;

    memset(out, 0, sizeof(*out));
    if (idem_begin(otp_idem(h->otp), cl, &st, &stored, &retry_ms, err) != OTP_OK) {
        log_msg(LOG_WARN, "%s refused, store unavailable for its Idempotency-Key: %s", op, err);
        a.retry_after_s = retry_ms > 1000 ? (retry_ms + 999) / 1000 : 1;
        http_out_problem(h, out, OUT_STORE_UNAVAILABLE, "the rate-limit store is unavailable", &a);
        return 0;
    }
    switch (st) {
    case IDEM_NEW:
        return 1;
    case IDEM_REPLAY:
        if (http_cur != NULL)
            snprintf(http_cur->outcome, sizeof(http_cur->outcome), "replayed");
        if (http_out_unpack(stored, out) < 0) {
            log_msg(LOG_ERROR, "%s: a stored Idempotency-Key answer cannot be read; refused", op);
            a.retry_after_s = 1;
            http_out_problem(h, out, OUT_STORE_UNAVAILABLE, "the stored answer cannot be read", &a);
        }
        break;
    case IDEM_MISMATCH:
        http_out_problem(h, out, OUT_IDEM_REUSED, "this Idempotency-Key was used with another request", NULL);
        break;
    case IDEM_BUSY:
        a.retry_after_s = 1;
        http_out_problem(h, out, OUT_IDEM_IN_USE,
                         "a request with this Idempotency-Key is still being decided", &a);
        break;
    }
    free(stored);
    return 0;
}

/* The answer of an issue or a verify as sent, and as an Idempotency-Key
 * stores it: 202 or 200 with its JSON, else its problem. A 409 from otp
 * (the key was another request's, every time) is this layer's to count. */
static void http_answer_out(struct http *h, const struct otp_answer *a, struct http_out *out)
{
    if (a->outcome == OUT_ACCEPTED)
        http_out_set(out, 202, "application/json",
                     http_json_text(json_pack("{s:s, s:s, s:I, s:I}", "id", a->id, "verification_id",
                                              a->verification_id, "expires_in", (json_int_t)a->expires_in_s,
                                              "resend_after", (json_int_t)a->resend_after_s)),
                     a);
    else if (a->outcome == OUT_VERIFIED)
        http_out_set(
            out, 200, "application/json",
            http_json_text(json_pack("{s:b, s:s}", "verified", 1, "verification_id", a->verification_id)), a);
    else
        http_out_problem(a->outcome == OUT_IDEM_IN_USE ? h : NULL, out, a->outcome, a->detail, a);
}

/* otp's pack hook (struct otp_idem): the text a replay of a sends. */
static char *http_idem_pack(void *ctx, const struct otp_answer *a)
{
    struct http_out out;
    char *text;

    (void)ctx;
    http_answer_out(NULL, a, &out);
    text = http_out_pack(&out);
    free(out.body);
    return text;
}

/*
 * Decides issue or verify (op; guess NULL for an issue) rq, whose body is
 * j, into out. Refusals that need no Redis come first and are never kept.
 * With an Idempotency-Key (key), the key is looked up next, and decided
 * only while free: the decision claims it, and its answer is stored with
 * its commit. out->body NULL: out of memory.
 */
static void http_decide(struct http *h, const char *key, const char *op, json_t *j, const struct otp_req *req,
                        const char *guess, struct http_out *out)
{
    struct idem_claim cl;
    struct otp_idem idem = {&cl, http_idem_pack, NULL};
    struct otp_req r = *req, *rq = &r;
    struct otp_answer a;
    char *canon = NULL, *request = NULL;
    int tries;

    memset(out, 0, sizeof(*out));
    if (guess ? otp_verify_screen(h->otp, rq, guess, &a) : otp_issue_screen(h->otp, rq, &a))
        goto answer;
    if (key != NULL) {
        /* Same request, same hash: the body's fields, sorted, whatever
         * their order or spacing on the wire. */
        canon = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (canon == NULL || asprintf(&request, "%s\n%s", op, canon) < 0 ||
            idem_prepare(otp_idem(h->otp), rq->api_key, key, request, &cl) != OTP_OK)
            goto out; /* out of memory: out->body NULL drops the connection */
        rq->idem = &idem;
    }
    for (tries = 0; tries < HTTP_IDEM_TRIES; tries++) {
        if (key != NULL && !http_idem_begin(h, &cl, op, out))
            goto out;
        if (guess)
            otp_verify(h->otp, rq, guess, &a);
        else
            otp_issue(h->otp, rq, &a);
        if (a.outcome != OUT_IDEM_IN_USE) {
            if (key != NULL)
                idem_decided(otp_idem(h->otp));
            break;
        }
    }
answer:
    http_answer_out(h, &a, out);
out:
    free(canon);
    free(request);
}

static enum MHD_Result http_issue(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                  const char *api_key)
{
    static const char *const fields[] = {"phone", "device_id", "client_ip", "purpose", NULL};
    struct otp_req ir = {0};
    struct phone_info pi;
    struct http_out out;
    const char *purpose, *key;
    enum otp_outcome bad;
    char detail[160];
    json_t *j;

    if (!http_idem_key(con, &key))
        return http_problem(h, con, OUT_INVALID_REQUEST, http_bad_idem_key, NULL, NULL);
    if ((j = http_body(rq->body, rq->len, fields, detail, sizeof(detail))) == NULL)
        return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
    if ((bad = http_check_common(j, &pi, detail, sizeof(detail))) != OUT_COUNT) {
        json_decref(j);
        return http_problem(h, con, bad, detail, NULL, NULL);
    }
    purpose = http_field(j, "purpose");
    if (purpose != NULL && !http_printable(purpose, 32)) {
        json_decref(j);
        return http_problem(h, con, OUT_INVALID_REQUEST, "purpose must be 1 to 32 printable ASCII bytes", NULL,
                            NULL);
    }
    ir.api_key = api_key;
    ir.phone = http_field(j, "phone");
    memcpy(ir.region, pi.region, sizeof(ir.region));
    ir.type = pi.type;
    ir.device_id = http_field(j, "device_id");
    ir.client_ip = http_field(j, "client_ip");
    ir.purpose = purpose;
    http_decide(h, key, "issue", j, &ir, NULL, &out);
    json_decref(j);
    return http_send(con, &out, NULL);
}

static enum MHD_Result http_verify(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                   const char *api_key)
{
    static const char *const fields[] = {"phone", "code", "device_id", "client_ip", "purpose", NULL};
    struct otp_req vr = {0};
    struct phone_info pi;
    struct http_out out;
    const char *code, *key;
    enum otp_outcome bad;
    char detail[160];
    json_t *j;

    if (!http_idem_key(con, &key))
        return http_problem(h, con, OUT_INVALID_REQUEST, http_bad_idem_key, NULL, NULL);
    if ((j = http_body(rq->body, rq->len, fields, detail, sizeof(detail))) == NULL)
        return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
    if ((bad = http_check_common(j, &pi, detail, sizeof(detail))) != OUT_COUNT) {
        json_decref(j);
        return http_problem(h, con, bad, detail, NULL, NULL);
    }
    code = http_field(j, "code");
    if (code == NULL) {
        json_decref(j);
        return http_problem(h, con, OUT_INVALID_REQUEST, "code is required", NULL, NULL);
    }
    if (!http_purpose_ok(j)) {
        json_decref(j);
        return http_problem(h, con, OUT_INVALID_REQUEST, http_bad_purpose, NULL, NULL);
    }
    vr.purpose = http_field(j, "purpose");
    vr.api_key = api_key;
    vr.phone = http_field(j, "phone");
    memcpy(vr.region, pi.region, sizeof(vr.region));
    vr.type = pi.type;
    vr.device_id = http_field(j, "device_id");
    vr.client_ip = http_field(j, "client_ip");
    http_decide(h, key, "verify", j, &vr, code, &out);
    json_decref(j);
    return http_send(con, &out, NULL);
}

/* POST /v1/otp/cancel {phone, purpose?}: ends the caller's live
 * verification for that phone and purpose, and its queued messages. */
static enum MHD_Result http_cancel(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                   const char *api_key)
{
    static const char *const fields[] = {"phone", "purpose", NULL};
    struct otp_req cr = {0};
    struct phone_info pi;
    struct otp_answer a;
    enum otp_outcome bad;
    char detail[160];
    json_t *j;

    if ((j = http_body(rq->body, rq->len, fields, detail, sizeof(detail))) == NULL)
        return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
    if ((bad = http_check_common(j, &pi, detail, sizeof(detail))) != OUT_COUNT) {
        json_decref(j);
        return http_problem(h, con, bad, detail, NULL, NULL);
    }
    if (!http_purpose_ok(j)) {
        json_decref(j);
        return http_problem(h, con, OUT_INVALID_REQUEST, http_bad_purpose, NULL, NULL);
    }
    cr.api_key = api_key;
    cr.phone = http_field(j, "phone");
    memcpy(cr.region, pi.region, sizeof(cr.region));
    cr.type = pi.type;
    cr.purpose = http_field(j, "purpose");
    otp_cancel(h->otp, &cr, &a);
    json_decref(j);
    if (a.rc != OTP_OK)
        return http_problem(NULL, con, a.outcome, a.detail, &a, NULL);
    return http_json(con, 200, json_pack("{s:b, s:s}", "cancelled", 1, "verification_id", a.verification_id),
                     NULL);
}

static enum MHD_Result http_status(struct http *h, struct MHD_Connection *con, const char *url,
                                   const char *api_key)
{
    const char *id = url + strlen("/v1/otp/");
    char state[PACER_STATE_MAX];
    enum otp_rc rc = OTP_ENOTFOUND;

    if (strlen(id) == CODE_ID_LEN && strspn(id, "0123456789abcdef") == CODE_ID_LEN)
        rc = otp_status(h->otp, api_key, id, state);
    if (rc == OTP_ESTORE) {
        /* Every 503 says when to come back (DESIGN.md, "HTTP contract"). */
        struct otp_answer a = {.outcome = OUT_STORE_UNAVAILABLE, .rc = OTP_ESTORE, .retry_after_s = 1};
        return http_problem(h, con, OUT_STORE_UNAVAILABLE, "the store did not answer; try again", &a, NULL);
    }
    if (rc != OTP_OK)
        return http_problem(h, con, OUT_NOT_FOUND, "no such message for this API key", NULL, NULL);
    return http_json(con, 200, json_pack("{s:s, s:s}", "id", id, "status", state), NULL);
}

/* GET /metrics: otp's text, then this layer's. */
static enum MHD_Result http_metrics(struct http *h, struct MHD_Connection *con)
{
    char *otp = otp_metrics(h->otp), *mine = http_metrics_text(h), *text = NULL;

    if (otp != NULL && mine != NULL && asprintf(&text, "%s%s", otp, mine) < 0)
        text = NULL;
    free(otp);
    free(mine);
    return http_reply(con, 200, "text/plain; version=0.0.4", text, NULL, NULL);
}

static enum MHD_Result http_ready(struct http *h, struct MHD_Connection *con)
{
    char why[OTP_ERR_LEN + 32];
    int ready = otp_ready(h->otp, why, sizeof(why));

    return http_json(con, ready ? 200 : 503,
                     json_pack("{s:s, s:s}", "status", ready ? "ready" : "not_ready", "detail", why), NULL);
}

/* Decodes %XX and '+' of a form value in place. */
UNITTEST void http_form_decode(char *s)
{
    char *o = s;

    for (; *s; s++) {
        if (*s == '+') {
            *o++ = ' ';
        } else if (*s == '%' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

/* Finds name's value in a form body; copies at most cap - 1 bytes. */
UNITTEST int http_form_get(const char *body, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    const char *p = body;

    while (p && *p) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == '=') {
            snprintf(out, cap, "%.*s", (int)(len - n - 1), p + n + 1);
            http_form_decode(out);
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* Kannel: GET /v1/dlr/kannel?id=&exp=&m=&tag=&status=N (report.c reads
 * the status against the mask m); Twilio: POST /v1/dlr/twilio?id=&exp=&tag=
 * with MessageStatus in the form body, signed in X-Twilio-Signature.
 * Answers by report.c's table of verdicts; a refusal's reason goes to the
 * request's log line (never the query: the tag is a capability). */
static enum MHD_Result http_dlr(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    struct report_in in = {.via = REPORT_KANNEL, .outcome = -1};
    const struct report_row *row;
    enum MHD_Result ret;
    char status[32] = "", detail[64];

    in.id = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "id");
    in.exp = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "exp");
    in.tag = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "tag");
    if (rq->route == ROUTE_DLR_KANNEL) {
        in.mask = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "m");
        in.status = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "status");
    } else {
        rq->body[rq->len] = '\0';
        http_form_get(rq->body, "MessageStatus", status, sizeof(status));
        if (strcmp(status, "delivered") == 0)
            in.outcome = 1;
        else if (strcmp(status, "undelivered") == 0 || strcmp(status, "failed") == 0)
            in.outcome = 0;
        snprintf(detail, sizeof(detail), "twilio %s", status);
        in.detail = detail;
        in.via = REPORT_TWILIO;
        in.form = rq->body;
        in.signature = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Twilio-Signature");
    }
    row = report_row(otp_delivery(h->otp, &in));
    if (row->outcome == OUT_COUNT)
        return http_json(con, 200, json_pack("{s:b}", "ok", 1), NULL);
    /* Counted by report.c's verdicts, not here. */
    if (otp_outcome_row(row->outcome)->http_status == 503) { /* not recorded: the provider retries a 5xx */
        struct otp_answer a = {.rc = OTP_EIO, .retry_after_s = 1};
        return http_problem(NULL, con, row->outcome, row->detail, &a, NULL);
    }
    ret = http_problem(NULL, con, row->outcome, row->detail, NULL, NULL);
    snprintf(rq->rule, sizeof(rq->rule), "report:%s", row->label ? row->label : "");
    return ret;
}

/* 1 when method is one of allow's ("GET, HEAD, POST"). */
static int http_method_in(const char *allow, const char *method)
{
    size_t n = strlen(method);
    const char *p;

    for (p = allow; (p = strstr(p, method)) != NULL; p += n)
        if ((p == allow || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Picks the route for url and method; sets rq->allow for a wrong method. */
static void http_route(struct http_req *rq, const char *url, const char *method)
{
    struct {
        const char *path;
        int prefix;
        enum http_route route;
        const char *allow;
    } table[] = {
        {"/v1/otp", 0, ROUTE_ISSUE, "POST"},          {"/v1/otp/verify", 0, ROUTE_VERIFY, "POST"},
        {"/healthz", 0, ROUTE_HEALTH, "GET, HEAD"},   {"/readyz", 0, ROUTE_READY, "GET, HEAD"},
        {"/metrics", 0, ROUTE_METRICS, "GET, HEAD"},  {"/v1/dlr/kannel", 0, ROUTE_DLR_KANNEL, "GET, HEAD"},
        {"/v1/dlr/twilio", 0, ROUTE_DLR_TWILIO, "POST"}, {"/v1/otp/cancel", 0, ROUTE_CANCEL, "POST"},
        {"/v1/otp/", 1, ROUTE_STATUS, "GET, HEAD"},
        {"/v1/admin/overrides", 0, ROUTE_ADMIN_OVERRIDES, "GET, HEAD, POST"},
        {"/v1/admin/overrides/", 1, ROUTE_ADMIN_OVERRIDE, "DELETE"},
        {"/v1/admin/blocks", 0, ROUTE_ADMIN_BLOCKS, "GET, HEAD, POST"},
        {"/v1/admin/blocks/", 1, ROUTE_ADMIN_BLOCK, "DELETE"},
        {"/v1/admin/unlock", 0, ROUTE_ADMIN_UNLOCK, "POST"},
    };
    size_t i;

    rq->route = ROUTE_NONE;
    for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        int match = table[i].prefix ? strncmp(url, table[i].path, strlen(table[i].path)) == 0 &&
                                          url[strlen(table[i].path)] != '\0' &&
                                          !strchr(url + strlen(table[i].path), '/')
                                    : strcmp(url, table[i].path) == 0;
        if (!match)
            continue;
        rq->route = table[i].route;
        rq->post = strcmp(method, "POST") == 0;
        if (!http_method_in(table[i].allow, method))
            rq->allow = table[i].allow;
        return;
    }
}

/* Which listener serves which routes. With listen_internal set, the probes
 * and the metrics are its alone and it serves nothing else; the other
 * listener answers 404 there, as for any path it does not know. */
static void http_route_listener(const struct http *h, struct http_req *rq)
{
    int probe = rq->route == ROUTE_HEALTH || rq->route == ROUTE_READY || rq->route == ROUTE_METRICS;

    if (h->di == NULL || probe == rq->internal)
        return;
    rq->route = ROUTE_NONE;
    rq->allow = NULL;
}

static int64_t http_now_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000);
}

/* The connection's deadline entry (http_notify), or NULL. */
static struct http_conn *http_conn_of(struct MHD_Connection *con)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

/* listen_internal's connections: a scraper and a few probes. Each address
 * may hold a few of them, and a request must be whole within a few seconds,
 * so idle sockets from one host cannot lock the probes out. */
#define HTTP_INTERNAL_CONNS 64u
#define HTTP_INTERNAL_PER_IP 8u
#define HTTP_INTERNAL_DEADLINE_MS 5000

/* How long a request on a connection of either listener (internal:
 * listen_internal's) may take to arrive whole. */
static int64_t http_timeout_ms(const struct http *h, int internal)
{
    int64_t t = h->cfg->request_timeout_ms;

    return internal && t > HTTP_INTERNAL_DEADLINE_MS ? HTTP_INTERNAL_DEADLINE_MS : t;
}

/* A whole request is in (whole): its deadline no longer runs; or the
 * next request on the connection starts its own (now + its timeout). */
static void http_deadline(struct http *h, struct MHD_Connection *con, int whole)
{
    struct http_conn *hc = http_conn_of(con);

    if (hc == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    hc->deadline_ms = whole ? INT64_MAX : http_now_ms() + http_timeout_ms(h, hc->internal);
    pthread_mutex_unlock(&h->mu);
}

static int http_route_posts(const struct http_req *rq)
{
    enum http_route r = rq->route;

    return r == ROUTE_ISSUE || r == ROUTE_VERIFY || r == ROUTE_DLR_TWILIO || r == ROUTE_CANCEL ||
           (rq->post && (r == ROUTE_ADMIN_OVERRIDES || r == ROUTE_ADMIN_BLOCKS || r == ROUTE_ADMIN_UNLOCK));
}

static int http_route_admin(enum http_route r)
{
    return r == ROUTE_ADMIN_OVERRIDES || r == ROUTE_ADMIN_OVERRIDE || r == ROUTE_ADMIN_BLOCKS ||
           r == ROUTE_ADMIN_BLOCK || r == ROUTE_ADMIN_UNLOCK;
}

/* A store failure of an admin call: 503; nothing changed (or, for a
 * change whose answer was lost, GET tells). */
static enum MHD_Result http_admin_down(struct http *h, struct MHD_Connection *con)
{
    struct otp_answer a = {0};

    a.rc = OTP_ESTORE;
    a.retry_after_s = 1;
    return http_problem(h, con, OUT_STORE_UNAVAILABLE, "the store is unavailable", &a, NULL);
}

/*
 * The /v1/admin routes (DESIGN.md, "Admin bodies"), for admin keys only.
 * POST adds (201 {id, expires_at}), GET lists ({"items": [...]}), DELETE
 * /{id} removes (204, or 404 when no such live row), POST unlock clears
 * wrong-guess locks (200 {"unlocked": n}). Times are RFC 3339 UTC.
 */
static enum MHD_Result http_admin(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *url,
                                  const char *who)
{
    struct admin *adm = otp_admin(h->otp);
    enum admin_kind kind = rq->route == ROUTE_ADMIN_OVERRIDES || rq->route == ROUTE_ADMIN_OVERRIDE
                               ? ADMIN_OVERRIDE
                               : ADMIN_BLOCK;
    char detail[OTP_ERR_LEN] = "", id[ADMIN_ID_LEN + 1], ts[TIMESTAMP_LEN], *text = NULL;
    int64_t expires_ms = 0;
    enum otp_rc rc;
    int n = 0;

    if (rq->route == ROUTE_ADMIN_UNLOCK) {
        rc = admin_unlock(adm, who, rq->body, rq->len, &n, detail, sizeof(detail));
        if (rc == OTP_OK)
            otp_admin_changed(h->otp);
        if (rc == OTP_OK)
            return http_json(con, 200, json_pack("{s:i}", "unlocked", n), NULL);
    } else if (rq->route == ROUTE_ADMIN_OVERRIDE || rq->route == ROUTE_ADMIN_BLOCK) {
        const char *rid = strrchr(url, '/') + 1;
        size_t i;
        for (i = 0; rid[i] && ((rid[i] >= '0' && rid[i] <= '9') || (rid[i] >= 'a' && rid[i] <= 'f')); i++)
            ;
        if (i != ADMIN_ID_LEN || rid[i] != '\0')
            return http_problem(h, con, OUT_NOT_FOUND, "no such live row", NULL, NULL);
        rc = admin_remove(adm, kind, who, rid, detail);
        if (rc == OTP_OK)
            otp_admin_changed(h->otp);
        if (rc == OTP_OK) {
            struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            enum MHD_Result ok;
            if (r == NULL)
                return MHD_NO;
            MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
            http_mark(r, 204);
            ok = MHD_queue_response(con, 204, r);
            MHD_destroy_response(r);
            return ok;
        }
        if (rc == OTP_ENOTFOUND)
            return http_problem(h, con, OUT_NOT_FOUND, "no such live row", NULL, NULL);
    } else if (!rq->post) {
        if ((rc = admin_list(adm, kind, &text, detail)) == OTP_OK)
            return http_reply(con, 200, "application/json", text, NULL, NULL);
    } else {
        rc = admin_add(adm, kind, who, rq->body, rq->len, id, &expires_ms, detail, sizeof(detail));
        if (rc == OTP_OK) {
            timestamp_format(expires_ms, ts, sizeof(ts));
            return http_json(con, 201, json_pack("{s:s, s:s}", "id", id, "expires_at", ts), NULL);
        }
        if (rc == OTP_EFULL)
            return http_problem(h, con, OUT_TOO_MANY_ROWS, detail, NULL, NULL);
    }
    if (rc == OTP_EINVAL)
        return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
    if (rc == OTP_ESTORE)
        return http_admin_down(h, con);
    return http_problem(h, con, OUT_INTERNAL, "out of memory", NULL, NULL);
}

/* A 400 for framing that a proxy may read otherwise (framing.h), on a
 * connection that then closes. */
static enum MHD_Result http_bad_framing(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                        const char *detail)
{
    rq->close = 1;
    return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
}

/* One call of MHD's for rq (first: its headers are in). */
static enum MHD_Result http_serve(struct http *h, struct MHD_Connection *con, struct http_req *rq, int first,
                                  const char *url, const char *method, const char *upload_data,
                                  size_t *upload_data_size)
{
    const char *api_key, *bad;
    int admin = 0;

    if (first) {
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if ((bad = framing_check(con, MHD_HEADER_KIND)) != NULL)
            return http_bad_framing(h, con, rq, bad);
        http_route(rq, url, method);
        http_route_listener(h, rq);
        if (rq->route == ROUTE_NONE)
            return http_problem(h, con, OUT_NOT_FOUND, "no such route", NULL, NULL);
        if (rq->allow)
            return http_problem(h, con, OUT_METHOD_NOT_ALLOWED, "method not allowed here", NULL, rq->allow);
        if (http_route_posts(rq)) {
            if (cl != NULL && strtoll(cl, NULL, 10) > HTTP_BODY_MAX)
                return http_problem(h, con, OUT_PAYLOAD_TOO_LARGE, "the body is larger than 4 KiB", NULL, NULL);
            if (rq->route != ROUTE_DLR_TWILIO && !http_is_json(con))
                return http_problem(h, con, OUT_UNSUPPORTED_MEDIA, "the body must be application/json",
                                    NULL, NULL);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (rq->len + *upload_data_size > HTTP_BODY_MAX) {
            rq->too_big = 1;
        } else if (rq->len + *upload_data_size > HTTP_BODY_SMALL && rq->body == rq->small) {
            char *big = malloc(HTTP_BODY_MAX + 1);
            if (big == NULL)
                return MHD_NO; /* out of memory: drop the connection */
            memcpy(big, rq->small, rq->len);
            rq->body = big;
        }
        if (!rq->too_big) {
            memcpy(rq->body + rq->len, upload_data, *upload_data_size);
            rq->len += *upload_data_size;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    http_deadline(h, con, 1);
    if ((bad = framing_check(con, MHD_FOOTER_KIND)) != NULL) /* a chunked body's trailers */
        return http_bad_framing(h, con, rq, bad);
    if (rq->too_big)
        return http_problem(h, con, OUT_PAYLOAD_TOO_LARGE, "the body is larger than 4 KiB", NULL, NULL);
    switch (rq->route) {
    case ROUTE_HEALTH:
        return http_json(con, 200, json_pack("{s:s}", "status", "ok"), NULL);
    case ROUTE_READY:
        return http_ready(h, con);
    case ROUTE_METRICS:
        return http_metrics(h, con);
    case ROUTE_DLR_KANNEL:
    case ROUTE_DLR_TWILIO:
        return http_dlr(h, con, rq);
    default:
        break;
    }
    if ((api_key = http_auth(h, con, &admin)) == NULL)
        return http_problem(h, con, OUT_UNAUTHORIZED, "a valid Authorization: Bearer key is required", NULL, NULL);
    rq->caller = api_key;
    /* Roles: an admin key manages rows and never asks for codes; a caller
     * never touches the rows. */
    if (admin != http_route_admin(rq->route))
        return http_problem(h, con, OUT_FORBIDDEN,
                            admin ? "an admin key may not use the OTP routes"
                                  : "only an admin key (api_keys[].role \"admin\") may use /v1/admin",
                            NULL, NULL);
    if (admin)
        return http_admin(h, con, rq, url, api_key);
    if (rq->route == ROUTE_STATUS)
        return http_status(h, con, url, api_key);
    if (rq->route == ROUTE_CANCEL)
        return http_cancel(h, con, rq, api_key);
    if (rq->route == ROUTE_ISSUE)
        return http_issue(h, con, rq, api_key);
    return http_verify(h, con, rq, api_key);
}

/* 1 when a client's request id may be kept: 1 to LOG_REQUEST_ID_MAX bytes
 * of printable ASCII without spaces (a UUID, a W3C trace id, a load
 * balancer's "Root=1-...;Parent=..."), so it fits a header and a log field
 * as one token. */
UNITTEST int http_request_id_ok(const char *s)
{
    size_t n;

    for (n = 0; s[n]; n++)
        if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f || n >= LOG_REQUEST_ID_MAX)
            return 0;
    return n >= 1;
}

/* The request's id into out (LOG_REQUEST_ID_MAX + 1 bytes): the client's
 * X-Request-Id when given once and sane, else 32 random hex digits, from
 * the same per-thread pool as the message ids (code_new_id: a getrandom
 * per request was 3.7 % of a hot refusal, issue 13's profile). */
static void http_request_id(struct MHD_Connection *con, char *out)
{
    struct http_header_seen x = http_header_first(con, "X-Request-Id");

    _Static_assert(CODE_ID_LEN <= LOG_REQUEST_ID_MAX, "a generated id fits the request id");
    if (x.n == 1 && http_request_id_ok(x.value))
        snprintf(out, LOG_REQUEST_ID_MAX + 1, "%s", x.value);
    else
        code_new_id(out);
}

/* The request's one log line, once its answer is queued: issue and verify
 * by their decision, health checks and scrapes at debug, our own failures
 * (5xx) at warn. A repeat refusal answered from the refusal cache is at
 * debug too: in a flood, the log must not grow with the flood's rate (the
 * ledger holds those refusals in aggregate and
 * otpd_refusal_cache_hits_total counts them); the first refusal of each
 * key, decided by Redis, stays at info. For the same reason a 401, 403 or
 * 404 is at info only as the first of its kind in a window, the others at
 * debug and counted in the kind's summary line (http_log_summary). */
static void http_log_request(struct http *h, const struct http_req *rq, const char *method, const char *url)
{
    int ok = rq->status < 400;
    const char *event = "http.request";
    enum log_level level = LOG_INFO;

    if (rq->route == ROUTE_ISSUE && rq->allow == NULL)
        event = ok ? "issue.accepted" : "issue.refused";
    else if (rq->route == ROUTE_VERIFY && rq->allow == NULL)
        event = ok ? "verify.verified" : "verify.refused";
    if (rq->status >= 500)
        level = LOG_WARN;
    else if (rq->cached || rq->route == ROUTE_HEALTH || rq->route == ROUTE_READY || rq->route == ROUTE_METRICS)
        level = LOG_DEBUG;
    else if ((rq->status == 401 || rq->status == 403 || rq->status == 404) &&
             !logsum_note(h->logsum, rq->status, rq->outcome, http_route_names[rq->route], http_now_ms()))
        level = LOG_DEBUG; /* counted in its kind's summary line */
    log_event(level, event,
              LOG_FIELDS(LOG_STR("method", method), LOG_STR("path", url), LOG_INT("status", rq->status),
                         LOG_STR("outcome", rq->outcome[0] ? rq->outcome : "ok"), LOG_STR("rule", rq->rule),
                         LOG_STR("caller", rq->caller), LOG_INT("duration_ms", http_now_ms() - rq->start_ms)),
              "%.8s %.200s %u", method, url, rq->status);
}

/* One call of MHD's on either listener (internal: listen_internal's). */
static enum MHD_Result http_handle_on(struct http *h, int internal, struct MHD_Connection *con, const char *url,
                                      const char *method, const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    struct http_req *rq = *con_cls;
    enum MHD_Result ret;
    int first = rq == NULL;

    if (first) {
        /* malloc, not calloc: glibc's calloc skips the per-thread cache.
         * Everything before the body's bytes starts zeroed. */
        if ((rq = malloc(sizeof(*rq))) == NULL)
            return MHD_NO;
        memset(rq, 0, offsetof(struct http_req, small));
        rq->body = rq->small;
        *con_cls = rq;
        rq->internal = internal;
        rq->start_ms = http_now_ms();
        http_request_id(con, rq->request_id);
    }
    http_cur = rq;
    log_set_request(rq->request_id);
    ret = http_serve(h, con, rq, first, url, method, upload_data, upload_data_size);
    if (rq->status != 0) {
        http_log_request(h, rq, method, url);
        rq->status = 0; /* one line, whatever MHD calls next */
    }
    http_cur = NULL;
    log_set_request(NULL);
    return ret;
}

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    (void)version;
    return http_handle_on(cls, 0, con, url, method, upload_data, upload_data_size, con_cls);
}

static enum MHD_Result http_handle_internal(void *cls, struct MHD_Connection *con, const char *url,
                                            const char *method, const char *version, const char *upload_data,
                                            size_t *upload_data_size, void **con_cls)
{
    (void)version;
    return http_handle_on(cls, 1, con, url, method, upload_data, upload_data_size, con_cls);
}

static void http_done(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct http *h = cls;
    struct http_req *rq = *con_cls;

    (void)toe;

    if (rq != NULL && rq->body != rq->small)
        free(rq->body);
    free(rq);
    *con_cls = NULL;
    http_deadline(h, con, 0);
}

/*
 * The request deadline. MHD's own timeout is for inactivity only, so a
 * client sending a byte a second would hold its connection for ever. Each
 * connection is listed from its start with a deadline: its request must be
 * whole within http.request_timeout of the connection opening or of the
 * previous answer (no later than its first byte). The reaper shuts down
 * the socket of a connection past it; MHD then sees the end of the stream
 * and closes the connection itself. MHD closes the descriptor only after
 * its CLOSED notification, which unlists it under mu, so the reaper never
 * touches a descriptor that was reused.
 */
static void http_notify_on(struct http *h, int internal, struct MHD_Connection *con, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe)
{
    struct http_conn *hc = *socket_context;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        /* Read before the entry is listed (see tls_collect). */
        uint64_t gen = h->tls != NULL && !internal ? tls_gen(h->tls) : UINT64_MAX;
        if (ci == NULL || (hc = calloc(1, sizeof(*hc))) == NULL) {
            /* Out of memory: MHD's inactivity timeout still applies. */
            __atomic_store_n(&h->untracked, 1, __ATOMIC_SEQ_CST);
            return;
        }
        hc->fd = ci->connect_fd;
        hc->tls_gen = gen;
        hc->internal = internal;
        hc->deadline_ms = http_now_ms() + http_timeout_ms(h, hc->internal);
        pthread_mutex_lock(&h->mu);
        hc->next = h->conns;
        if (h->conns)
            h->conns->prev = hc;
        h->conns = hc;
        pthread_mutex_unlock(&h->mu);
        *socket_context = hc;
        return;
    }
    if (hc == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    if (hc->prev)
        hc->prev->next = hc->next;
    else
        h->conns = hc->next;
    if (hc->next)
        hc->next->prev = hc->prev;
    pthread_mutex_unlock(&h->mu);
    free(hc);
    *socket_context = NULL;
}

static void http_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    http_notify_on(cls, 0, con, socket_context, toe);
}

static void http_notify_internal(void *cls, struct MHD_Connection *con, void **socket_context,
                                 enum MHD_ConnectionNotificationCode toe)
{
    http_notify_on(cls, 1, con, socket_context, toe);
}

/* A kind's summary at the end of its window (logsum_flush's emit). */
static void http_log_summary(void *ctx, const struct logsum_row *r)
{
    (void)ctx;
    log_event(LOG_INFO, "http.repeated",
              LOG_FIELDS(LOG_INT("status", r->status), LOG_STR("outcome", r->outcome), LOG_STR("route", r->route),
                         LOG_INT("count", r->count), LOG_INT("window_s", r->window_ms / 1000)),
              "%llu more %u %s answers on %s within %llds (each logged at debug)", (unsigned long long)r->count,
              r->status, r->outcome, r->route, (long long)(r->window_ms / 1000));
}

/* How often the reaper looks: a deadline is kept to within this. */
#define HTTP_REAP_EVERY_MS 250

static void *http_reaper(void *arg)
{
    struct http *h = arg;

    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        int64_t now_ms = http_now_ms(), wake_ms = clock_wall_ms() + HTTP_REAP_EVERY_MS;
        struct timespec ts = {(time_t)(wake_ms / 1000), (long)(wake_ms % 1000) * 1000000L};
        struct http_conn *hc;
        /* The TLS generation before the look at the connections (tls_collect). */
        uint64_t n[2] = {0, 0}, oldest = h->tls != NULL ? tls_gen(h->tls) : 0;
        int i;
        for (hc = h->conns; hc; hc = hc->next) {
            if (!hc->shut && hc->deadline_ms <= now_ms) {
                shutdown(hc->fd, SHUT_RDWR);
                hc->shut = 1;
                n[hc->internal]++;
            }
            if (hc->tls_gen < oldest)
                oldest = hc->tls_gen;
        }
        h->closed_slow += n[0] + n[1];
        for (i = 0; i < 2; i++)
            if (n[i] > 0)
                log_msg(LOG_WARN, "closed %llu connections whose request did not arrive within %llds%s",
                        (unsigned long long)n[i], (long long)(http_timeout_ms(h, i) / 1000),
                        i ? " (listen_internal)" : "");
        /* Not under mu: the locks never nest. */
        pthread_mutex_unlock(&h->mu);
        logsum_flush(h->logsum, now_ms, http_log_summary, NULL);
        if (h->tls != NULL && !__atomic_load_n(&h->untracked, __ATOMIC_SEQ_CST))
            tls_collect(h->tls, oldest);
        pthread_mutex_lock(&h->mu);
        if (h->stop)
            break;
        pthread_cond_timedwait(&h->wake, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* As many connections as the descriptor limit allows, up to 10,000. */
static unsigned http_connection_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 512)
        return 256;
    return rl.rlim_cur - 256 > 10000 ? 10000 : (unsigned)(rl.rlim_cur - 256);
}

/* TLS 1.2 and 1.3 only, GnuTLS's usual choice of ciphers within them. */
#define HTTP_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

/* Binds host:port and starts the daemon it will feed: the API's (internal
 * 0; HTTPS with h->tls) or listen_internal's (plain HTTP, one thread). *lp
 * gets the socket (see listener.h), which accepts nothing before
 * listener_run. NULL with err. */
static struct MHD_Daemon *http_listen(struct http *h, const char *host, int port, int internal,
                                      struct listener **lp, char *err)
{
    const struct http_conf *c = h->cfg;
    /* No listening socket in MHD: ours hands it the connections, so that
     * stopping them never goes through MHD_quiesce_daemon. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET;
    /* The certificate comes from tls_retrieve at each handshake, so that
     * a SIGHUP can change it (MHD_OPTION_HTTPS_MEM_CERT is read once). */
    struct MHD_OptionItem tls_opts[] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL},
                                        {MHD_OPTION_END, 0, NULL}};
    struct MHD_Daemon *d;

    if ((*lp = listener_open(host, port, err)) == NULL) {
        if (internal)
            snprintf(err + strlen(err), OTP_ERR_LEN - strlen(err), " (listen_internal)");
        return NULL;
    }
    if (!internal && h->tls != NULL) {
        flags |= MHD_USE_TLS;
        tls_opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)tls_retrieve};
        tls_opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)HTTP_TLS_PRIORITIES};
    }
    d = MHD_start_daemon(flags, 0, NULL, NULL, internal ? http_handle_internal : http_handle, h,
                         MHD_OPTION_THREAD_POOL_SIZE, internal ? 1u : (unsigned)c->threads,
                         MHD_OPTION_CONNECTION_LIMIT, internal ? HTTP_INTERNAL_CONNS : http_connection_limit(),
                         MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                         MHD_OPTION_NOTIFY_COMPLETED, http_done, h,
                         MHD_OPTION_NOTIFY_CONNECTION, internal ? http_notify_internal : http_notify, h,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                         internal ? HTTP_INTERNAL_PER_IP : (unsigned)c->max_conns_per_ip,
                         MHD_OPTION_ARRAY, tls_opts,
                         MHD_OPTION_END);
    if (d == NULL)
        snprintf(err, OTP_ERR_LEN, "http: cannot start the server for %s:%d%s", host, port,
                 internal ? " (listen_internal)" : "");
    return d;
}

struct http *http_new(const struct http_conf *c, const struct keys_conf *k, struct otp *o, struct tls *tls,
                      char *err)
{
    struct http *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        snprintf(err, OTP_ERR_LEN, "http: out of memory");
        return NULL;
    }
    h->cfg = c;
    h->keys = k;
    h->otp = o;
    h->tls = tls;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->wake, NULL);
    if ((h->logsum = logsum_new(HTTP_LOG_WINDOW_MS)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "http: out of memory");
        goto fail;
    }
    phone_init(); /* libphonenumber's metadata now, not on the first request */
    if (tls != NULL && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, OTP_ERR_LEN, "http: this libmicrohttpd was built without TLS; tls needs one with GnuTLS");
        goto fail;
    }
    /* Both daemons before either socket accepts: a request on either
     * listener is routed by whether di is set (http_route_listener). */
    if ((c->listen_internal_port != 0 &&
         (h->di = http_listen(h, c->listen_internal_host, c->listen_internal_port, 1, &h->li, err)) == NULL) ||
        (h->d = http_listen(h, c->listen_host, c->listen_port, 0, &h->l, err)) == NULL)
        goto fail;
    if (pthread_create(&h->reaper, NULL, http_reaper, h) != 0) {
        snprintf(err, OTP_ERR_LEN, "http: cannot start the deadline thread");
        goto fail;
    }
    h->reaper_started = 1;
    if ((h->di != NULL && listener_run(h->li, h->di, err) != 0) || listener_run(h->l, h->d, err) != 0)
        goto fail;
    return h;
fail:
    http_free(h);
    return NULL;
}

void http_quiesce(struct http *h)
{
    if (h == NULL)
        return;
    listener_free(h->l);
    listener_free(h->li);
    h->l = h->li = NULL;
}

void http_free(struct http *h)
{
    if (h == NULL)
        return;
    if (h->reaper_started) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->reaper, NULL);
    }
    /* Nothing may hand the daemons a connection once they stop. */
    http_quiesce(h);
    if (h->d)
        MHD_stop_daemon(h->d);
    if (h->di)
        MHD_stop_daemon(h->di);
    logsum_flush(h->logsum, INT64_MAX, http_log_summary, NULL);
    logsum_free(h->logsum);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
