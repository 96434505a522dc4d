/*
 * http_api: the caller's routes. Issue and verify (with the
 * Idempotency-Key's look-up, store and replay around their decision),
 * cancel, a message's status, and the providers' delivery reports. Each
 * reads its request into otp's terms and its answer back into HTTP's;
 * the decisions are otp's, and block on Redis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

static const char http_bad_purpose[] = "purpose must be 1 to 32 printable ASCII bytes";
static const char http_bad_idem_key[] = "Idempotency-Key must be 1 to 64 printable ASCII bytes, given once";

/* How often one request looks its Idempotency-Key up: again when its
 * decision found the key another request's, or its claim lapsed first. */
#define HTTP_IDEM_TRIES 3

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

/* The request's Idempotency-Key in *key (NULL when absent); 0 when it is
 * not 1 to IDEM_KEY_MAX printable ASCII bytes, or given twice. */
static int http_idem_key(struct MHD_Connection *con, const char **key)
{
    struct http_header_seen x = http_header_first(con, "Idempotency-Key");

    *key = x.value;
    return x.n == 0 || (x.n == 1 && idem_key_ok(x.value));
}

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

/*
 * Reads rq's body as a JSON object of fields, with the fields every route
 * here shares checked (and the phone made canonical), into *j and out for
 * the caller; with code, the guess is required too. 1 when it is fine,
 * else 0 with the refusal queued (*ret) and nothing to free.
 */
static int http_read(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                     const char *const *fields, int code, json_t **j, struct otp_req *out,
                     enum MHD_Result *ret)
{
    enum otp_outcome bad = OUT_INVALID_REQUEST;
    struct phone_info pi;
    char detail[160];

    if ((*j = http_body(rq->body, rq->len, fields, detail, sizeof(detail))) == NULL)
        goto refuse;
    if ((bad = http_check_common(*j, &pi, detail, sizeof(detail))) != OUT_COUNT)
        goto refuse;
    bad = OUT_INVALID_REQUEST;
    if (code && http_field(*j, "code") == NULL) {
        snprintf(detail, sizeof(detail), "code is required");
        goto refuse;
    }
    if (!http_purpose_ok(*j)) {
        snprintf(detail, sizeof(detail), "%s", http_bad_purpose);
        goto refuse;
    }
    memset(out, 0, sizeof(*out));
    out->api_key = rq->caller;
    out->phone = http_field(*j, "phone");
    memcpy(out->region, pi.region, sizeof(out->region));
    out->type = pi.type;
    out->device_id = http_field(*j, "device_id");
    out->client_ip = http_field(*j, "client_ip");
    out->purpose = http_field(*j, "purpose");
    out->locale = http_field(*j, "locale");
    out->app_hash = http_field(*j, "app_hash");
    return 1;
refuse:
    json_decref(*j);
    *j = NULL;
    *ret = http_problem(h, con, bad, detail, NULL, NULL);
    return 0;
}

/* Issue (verify 0) or verify: the body, the Idempotency-Key, the decision. */
static enum MHD_Result http_issue_or_verify(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                            int verify)
{
    static const char *const issue_fields[] = {"phone", "device_id", "client_ip", "purpose", "locale", "app_hash",
                                               NULL};
    static const char *const verify_fields[] = {"phone", "code", "device_id", "client_ip", "purpose", NULL};
    struct otp_req req;
    struct http_out out;
    enum MHD_Result ret;
    const char *key;
    json_t *j;

    if (!http_idem_key(con, &key))
        return http_problem(h, con, OUT_INVALID_REQUEST, http_bad_idem_key, NULL, NULL);
    if (!http_read(h, con, rq, verify ? verify_fields : issue_fields, verify, &j, &req, &ret))
        return ret;
    http_decide(h, key, verify ? "verify" : "issue", j, &req, verify ? http_field(j, "code") : NULL, &out);
    json_decref(j);
    return http_send(con, &out, NULL);
}

/* POST /v1/otp {phone, device_id?, client_ip?, purpose?, locale?, app_hash?}. */
enum MHD_Result http_issue(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    return http_issue_or_verify(h, con, rq, 0);
}

/* POST /v1/otp/verify {phone, code, device_id?, client_ip?, purpose?}. */
enum MHD_Result http_verify(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    return http_issue_or_verify(h, con, rq, 1);
}

/* POST /v1/otp/cancel {phone, purpose?}: ends the caller's live
 * verification for that phone and purpose, and its queued messages. */
enum MHD_Result http_cancel(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    static const char *const fields[] = {"phone", "purpose", NULL};
    struct otp_req cr;
    struct otp_answer a;
    enum MHD_Result ret;
    json_t *j;

    if (!http_read(h, con, rq, fields, 0, &j, &cr, &ret))
        return ret;
    otp_cancel(h->otp, &cr, &a);
    json_decref(j);
    if (a.rc != OTP_OK)
        return http_problem(NULL, con, a.outcome, a.detail, &a, NULL);
    return http_json(con, 200, json_pack("{s:b, s:s}", "cancelled", 1, "verification_id", a.verification_id),
                     NULL);
}

/* "alpha:timeout,beta:accepted" as [{"provider": "alpha", "cause": "timeout"}, ...]. */
static json_t *http_attempts(const char *text)
{
    json_t *out = json_array();
    char buf[PACER_ATTEMPTS_MAX], *save = NULL, *a;

    snprintf(buf, sizeof(buf), "%s", text);
    for (a = strtok_r(buf, ",", &save); a != NULL && out != NULL; a = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(a, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        json_array_append_new(out, json_pack("{s:s, s:s}", "provider", a, "cause", colon + 1));
    }
    return out;
}

/* GET /v1/otp/{id}: the caller's message's state, its provider and its attempts, from any instance. */
enum MHD_Result http_status(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    const char *id = rq->url + strlen("/v1/otp/");
    struct pacer_view v;
    enum otp_rc rc = OTP_ENOTFOUND;
    json_t *body;

    if (strlen(id) == CODE_ID_LEN && strspn(id, "0123456789abcdef") == CODE_ID_LEN)
        rc = otp_status(h->otp, rq->caller, id, &v);
    if (rc == OTP_ESTORE) {
        /* Every 503 says when to come back (docs/architecture.md, "HTTP"). */
        struct otp_answer a = {.outcome = OUT_STORE_UNAVAILABLE, .rc = OTP_ESTORE, .retry_after_s = 1};
        return http_problem(h, con, OUT_STORE_UNAVAILABLE, "the store did not answer; try again", &a, NULL);
    }
    if (rc != OTP_OK)
        return http_problem(h, con, OUT_NOT_FOUND, "no such message for this API key", NULL, NULL);
    body = json_pack("{s:s, s:s, s:o}", "id", id, "status", v.state, "attempts", http_attempts(v.attempts));
    if (body != NULL && v.provider[0] != '\0')
        json_object_set_new(body, "provider", json_string(v.provider));
    return http_json(con, 200, body, NULL);
}

/* A delivery report, read into in: answers by report.c's table of
 * verdicts; a refusal's reason goes to the request's log line (never the
 * query: the tag is a capability). */
static enum MHD_Result http_dlr(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                struct report_in *in)
{
    const struct report_row *row;
    enum MHD_Result ret;

    in->id = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "id");
    in->exp = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "exp");
    in->tag = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "tag");
    row = report_row(otp_delivery(h->otp, in));
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

/* Kannel: GET /v1/dlr/kannel?id=&exp=&m=&tag=&status=N (report.c reads
 * the status against the mask m). */
enum MHD_Result http_dlr_kannel(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    struct report_in in = {.via = REPORT_KANNEL, .outcome = -1};

    in.mask = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "m");
    in.status = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "status");
    return http_dlr(h, con, rq, &in);
}

/* Twilio: POST /v1/dlr/twilio?id=&exp=&tag= with MessageStatus in the form
 * body, signed in X-Twilio-Signature. */
enum MHD_Result http_dlr_twilio(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    struct report_in in = {.via = REPORT_TWILIO, .outcome = -1};
    char status[32] = "", detail[64];

    rq->body[rq->len] = '\0';
    http_form_get(rq->body, "MessageStatus", status, sizeof(status));
    if (strcmp(status, "delivered") == 0)
        in.outcome = 1;
    else if (strcmp(status, "undelivered") == 0 || strcmp(status, "failed") == 0)
        in.outcome = 0;
    snprintf(detail, sizeof(detail), "twilio %s", status);
    in.detail = detail;
    in.form = rq->body;
    in.signature = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Twilio-Signature");
    return http_dlr(h, con, rq, &in);
}
