/*
 * http_reply: every answer the REST API queues, and the RFC 9457 problems
 * among them. Each echoes the request's id and notes its status for the
 * log line; a 401 names its scheme, a 429 or 503 says when to come back,
 * and an answer that met a limit carries RateLimit-Policy and RateLimit.
 * One call per request, on the worker that serves it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/unittest.h"
#include "http_int.h"
#include "problem.h"

void http_out_set(struct http_out *out, unsigned status, const char *ctype, char *body,
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

enum MHD_Result http_send(struct MHD_Connection *con, struct http_out *out, const char *allow)
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
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                http_v2_current() ? "Basic realm=\"Twilio API\"" : "Bearer");
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

enum MHD_Result http_reply(struct MHD_Connection *con, unsigned status, const char *ctype, char *body,
                           const struct otp_answer *a, const char *allow)
{
    struct http_out out;

    http_out_set(&out, status, ctype, body, a);
    return http_send(con, &out, allow);
}

/* jansson allocates with malloc (no json_set_alloc_funcs), so its text is
 * ours to free. */
char *http_json_text(json_t *j)
{
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;

    json_decref(j);
    return body;
}

enum MHD_Result http_json(struct MHD_Connection *con, unsigned status, json_t *j, const struct otp_answer *a)
{
    return http_reply(con, status, "application/json", http_json_text(j), a, NULL);
}

enum MHD_Result http_no_content(struct MHD_Connection *con)
{
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
void http_count(struct http *h, enum otp_outcome o)
{
    if (h != NULL && (unsigned)o < OUT_COUNT)
        __atomic_fetch_add(&h->problems[o], 1, __ATOMIC_RELAXED);
}

enum MHD_Result http_problem(struct http *h, struct MHD_Connection *con, enum otp_outcome o,
                             const char *detail, const struct otp_answer *a, const char *allow)
{
    const struct otp_outcome_row *row = otp_outcome_row(o);

    if (http_v2_current())
        return http_v2_problem(h, con, o, detail, a, allow);
    http_count(h, o);
    return http_reply(con, (unsigned)row->http_status, "application/problem+json",
                      http_problem_text((unsigned)row->http_status, row->error, row->title, detail, a), a,
                      allow);
}

void http_out_problem(struct http *h, struct http_out *out, enum otp_outcome o, const char *detail,
                      const struct otp_answer *a)
{
    const struct otp_outcome_row *row = otp_outcome_row(o);

    http_count(h, o);
    http_out_set(out, (unsigned)row->http_status, "application/problem+json",
                 http_problem_text((unsigned)row->http_status, row->error, row->title, detail, a), a);
}
