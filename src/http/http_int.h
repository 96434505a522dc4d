/*
 * http's internals, shared by the files of the REST API: the server's
 * state, one request's state, an answer before it is sent, the route
 * table's row, and what each file offers the others. Outside
 * src/http/http*.c, only tests/unit/test_http_body.c includes this.
 *
 *   http.c        the daemons, their connections, deadlines and reaper
 *   http_route.c  the route table and the dispatcher that walks it
 *   http_reply.c  answers and problems
 *   http_body.c   what a request says: its body, JSON and form fields
 *   http_api.c    issue, verify, cancel, status, delivery reports
 *   http_admin.c  /v1/admin
 *   http_probe.c  /healthz, /readyz, /metrics
 */
#ifndef OTPD_HTTP_INT_H
#define OTPD_HTTP_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../base/log.h"
#include "../base/phone.h"
#include "../v2/v2.h"
#include "../v2/v2_error.h"
#include "../v2/v2_form.h"
#include "http.h"

/* Bodies up to this are kept in the request's own state. */
#define HTTP_BODY_SMALL 511

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

/* The operations of otp's that /v2 answers: its metrics' op label. */
enum http_v2_op { HTTP_V2_ISSUE, HTTP_V2_VERIFY, HTTP_V2_CANCEL, HTTP_V2_OPS };

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
    struct v2 *v2;         /* the Twilio Verify surface's records (borrowed) */
    /* otp's decisions answered on /v2, by operation (enum http_v2_op) and
     * outcome (atomic adds): /metrics's api="twilio" series. */
    uint64_t v2_decided[HTTP_V2_OPS][OUT_COUNT];
};

struct http_req;

/* A route's handler: called once the whole request is in, its caller
 * checked as the row's flags ask. Queues the answer (MHD_NO: drop the
 * connection, out of memory). */
typedef enum MHD_Result http_handler(struct http *h, struct MHD_Connection *con, struct http_req *rq);

/* The methods a row answers (struct http_route's methods). */
#define HTTP_GET 0x1u
#define HTTP_HEAD 0x2u
#define HTTP_POST 0x4u
#define HTTP_DELETE 0x8u

/* A row's flags. Auth: neither HTTP_AUTH_ bit, no key. Listener: with
 * listen_internal set, a row is served only on the listeners it names;
 * without it, every row on listen. Body: neither HTTP_BODY_ bit, whatever
 * comes is read, capped, and ignored. */
#define HTTP_PREFIX 0x01u      /* path is a prefix, then one non-empty segment without '/' */
#define HTTP_AUTH_CALLER 0x02u /* a caller's key; an admin key is refused (403) */
#define HTTP_AUTH_ADMIN 0x04u  /* an admin key; a caller's is refused (403) */
#define HTTP_ON_API 0x08u      /* on listen */
#define HTTP_ON_INTERNAL 0x10u /* on listen_internal */
#define HTTP_BODY_JSON 0x20u   /* Content-Length within HTTP_BODY_MAX, Content-Type application/json */
#define HTTP_BODY_FORM 0x40u   /* Content-Length within HTTP_BODY_MAX, any Content-Type */
#define HTTP_QUIET 0x80u       /* the request's log line is at debug (probes and scrapes) */
#define HTTP_TWILIO 0x100u     /* the Twilio Verify surface: Basic auth with an account or API key of a
                                * caller (api_keys[].twilio), errors in Twilio's shape (http_v2.c) */
#define HTTP_SUBTREE 0x200u    /* path itself, and any path below it */

/* One row of the route table (http_route.c), as nginx's commands carry
 * their flags and their setter. Rows that share a path are one route's
 * methods, the first of them names it. */
struct http_route {
    const char *path;
    unsigned methods; /* HTTP_GET | ... */
    unsigned flags;   /* HTTP_PREFIX | HTTP_AUTH_* | HTTP_ON_* | HTTP_BODY_* | HTTP_QUIET */
    http_handler *handler;
    const char *name;     /* the route's in summary lines (a client's path may be anything) */
    int arg;              /* the handler's own: enum admin_kind on /v1/admin */
    const char *ok_event; /* the log line's event for an answer below 400; NULL: "http.request" */
    const char *refused_event;
};

/* One request in progress. */
struct http_req {
    const struct http_route *route; /* NULL: no such route (404); with allow set, the route's first row */
    const char *url;                /* the path, as MHD gave it to the call in progress */
    char method[8];                 /* the request's method, "" for one no row knows */
    int internal;                   /* it came to listen_internal */
    char allow[32];                 /* set when the method is wrong: 405 with this Allow */
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
    const char *account;                     /* HTTP_TWILIO: the caller's account SID ("AC...") */
    size_t len;
    /* The body: in small while it fits, else a heap copy of HTTP_BODY_MAX
     * + 1 bytes. A 4 KiB state for every request was a large-bin calloc,
     * zeroed and with glibc's fast bins consolidated each time (issue 13's
     * profile); an API body is a few hundred bytes. */
    char *body;
    char small[HTTP_BODY_SMALL + 1];
};

/* The request this worker thread is serving (set by http.c around each
 * call it makes), so that the answer's helpers note what the log line
 * needs without a parameter through every route. NULL between calls. */
extern _Thread_local struct http_req *http_cur;

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

/* http_route.c: rq's row for url and method on its listener (NULL when
 * no path matches; the route's first row with rq->allow set when none of
 * its rows answers the method). */
void http_route_pick(const struct http *h, struct http_req *rq, const char *method);
/* http_route.c: the dispatcher. At a request's first call (its headers
 * in): picks its row, and answers 404, 405, 413 or 415 when the row's
 * flags say so; MHD_YES when the body may come. */
enum MHD_Result http_route_begin(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                 const char *method);
/* Once the body is whole: checks the caller as the row asks (401, 403)
 * and calls its handler. */
enum MHD_Result http_route_run(struct http *h, struct MHD_Connection *con, struct http_req *rq);

/* http_reply.c: answers. Each notes its status in http_cur for the log
 * line and echoes X-Request-Id. A body handed to them is malloc'd and
 * taken (NULL: out of memory, the connection is dropped). */
/* Fills out from an answer; takes body. */
void http_out_set(struct http_out *out, unsigned status, const char *ctype, char *body,
                  const struct otp_answer *a);
/* Queues out (its body is taken and sent as is); allow: an Allow header. */
enum MHD_Result http_send(struct MHD_Connection *con, struct http_out *out, const char *allow);
enum MHD_Result http_reply(struct MHD_Connection *con, unsigned status, const char *ctype, char *body,
                           const struct otp_answer *a, const char *allow);
/* The compact text of j (taken), or NULL when out of memory. */
char *http_json_text(json_t *j);
enum MHD_Result http_json(struct MHD_Connection *con, unsigned status, json_t *j, const struct otp_answer *a);
/* 204 without a body. */
enum MHD_Result http_no_content(struct MHD_Connection *con);
/* Sends outcome o as a problem: its status, code and title from the one
 * table (rc.c). h counts it when the HTTP layer decided it; NULL for an
 * answer otp decided, which otp counts. */
enum MHD_Result http_problem(struct http *h, struct MHD_Connection *con, enum otp_outcome o,
                             const char *detail, const struct otp_answer *a, const char *allow);
/* Counts a problem this layer answers itself (h NULL: none). */
void http_count(struct http *h, enum otp_outcome o);
/* out as such a problem (for answers an Idempotency-Key may store). */
void http_out_problem(struct http *h, struct http_out *out, enum otp_outcome o, const char *detail,
                      const struct otp_answer *a);

/* http_body.c: what a request says. */
/* Appends n bytes of the body to rq's buffer, up to HTTP_BODY_MAX (past
 * it, rq->too_big and nothing more is kept); -1 when out of memory. */
int http_body_take(struct http_req *rq, const char *data, size_t n);
/* 1 when the request's Content-Type is application/json. */
int http_is_json(struct MHD_Connection *con);
/* The body (len bytes) as a JSON object of only the named string fields;
 * NULL with a sentence in detail when it is not acceptable. */
json_t *http_body(const char *body, size_t len, const char *const *fields, char *detail, size_t cap);
/* j's string field name, or NULL. */
const char *http_field(json_t *j, const char *name);
/* 1 when j's purpose is absent or 1 to 32 printable ASCII bytes. */
int http_purpose_ok(json_t *j);
/* The fields issue, verify and cancel share; OUT_COUNT when fine (see
 * http_body.c). */
enum otp_outcome http_check_common(json_t *j, struct phone_info *pi, char *detail, size_t cap);
/* Finds name's value in a form body, decoded; copies at most cap - 1 bytes. */
int http_form_get(const char *body, const char *name, char *out, size_t cap);

/* One request header's count and first value (http_header_first). */
struct http_header_seen {
    const char *name;
    const char *value;
    int n;
};
/* Counts the headers called name and keeps the first one's value. */
struct http_header_seen http_header_first(struct MHD_Connection *con, const char *name);

/* http_api.c: the caller's routes. */
http_handler http_issue, http_verify, http_cancel, http_status, http_dlr_kannel, http_dlr_twilio;
/* http_admin.c: the admin key's. */
http_handler http_admin_list, http_admin_add, http_admin_remove, http_admin_unlock;
/* http_probe.c: the probes and the scrape. */
http_handler http_health, http_ready, http_metrics;

/* http_v2.c: the Twilio Verify surface, /v2/... (docs/twilio-verify.md). */
http_handler http_v2;
/* 1 while the request being served is on the Twilio surface. */
int http_v2_current(void);
/* http_problem's form there: outcome o as Twilio's error (v2_error.c). */
enum MHD_Result http_v2_problem(struct http *h, struct MHD_Connection *con, enum otp_outcome o, const char *detail,
                                const struct otp_answer *a, const char *allow);
/* The caller that Basic credentials name on /v2 (NULL when none), with
 * its account SID in *account. Secrets are compared in constant time. */
const char *http_v2_auth(struct http *h, struct MHD_Connection *con, const char **account);

/* http_v2_ver.c: verifications and their checks, one route each. The
 * path's service SID (checked) is svc, the verification's SID ve. */
enum MHD_Result http_v2_ver_create(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                   const char *svc);
enum MHD_Result http_v2_ver_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *ve);
enum MHD_Result http_v2_ver_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                   const char *ve);
enum MHD_Result http_v2_check(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc);
/* http_v2_rl.c: a service's rate limits and their buckets. */
enum MHD_Result http_v2_rl_list(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc);
enum MHD_Result http_v2_rl_create(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc);
enum MHD_Result http_v2_rl_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                 const char *rl);
enum MHD_Result http_v2_rl_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl);
enum MHD_Result http_v2_rl_delete(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl);
enum MHD_Result http_v2_bk_list(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                const char *rl);
enum MHD_Result http_v2_bk_create(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl);
enum MHD_Result http_v2_bk_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                 const char *rl, const char *bk);
enum MHD_Result http_v2_bk_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl, const char *bk);
enum MHD_Result http_v2_bk_delete(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl, const char *bk);
/* Shared by the files: the URLs' base ("http://HOST"), from the request's
 * Host (cap >= 300); and a 200/201 answer of j. */
void http_v2_base(struct http *h, struct MHD_Connection *con, char *out, size_t cap);
enum MHD_Result http_v2_json(struct MHD_Connection *con, unsigned status, json_t *j);
/* The refusals both files give: 400 60200 with a sentence, 404 20404
 * naming the path, 503 20503 (a store failure, logged with what and err). */
enum MHD_Result http_v2_invalid(struct http *h, struct MHD_Connection *con, const char *detail);
enum MHD_Result http_v2_not_found(struct http *h, struct MHD_Connection *con, const struct http_req *rq);
enum MHD_Result http_v2_unavailable(struct http *h, struct MHD_Connection *con, const char *what, const char *err);
/* A store answer other than OTP_OK (err says why): 404 for
 * OTP_ENOTFOUND, 400 60200 with err for OTP_EFULL (a cap) and OTP_EINVAL
 * (a name taken), else 503 (logged with what). */
enum MHD_Result http_v2_failed(struct http *h, struct MHD_Connection *con, struct http_req *rq, enum otp_rc rc,
                               const char *what, const char *err);
/* Reads rq's body as a form of table into f: 1, or 0 with the refusal
 * answered in *ret. */
int http_v2_form(struct http *h, struct MHD_Connection *con, struct http_req *rq, const struct v2_field *table,
                 struct v2_form *f, enum MHD_Result *ret);
/* Counts otp's decision a of op answered on /v2. */
void http_v2_count(struct http *h, enum http_v2_op op, const struct otp_answer *a);

/* A list's page (PageSize, Page) of all (taken) under key, for path. */
enum MHD_Result http_v2_list(struct http *h, struct MHD_Connection *con, const char *key, const char *path,
                             json_t *all);
/* An error: o for op, refused by rule reason (NULL: none); count: 1 when
 * this layer decided it (otp counts its own). */
enum MHD_Result http_v2_refuse(struct http *h, struct MHD_Connection *con, enum otp_outcome o, enum v2_op op,
                               const char *reason, const char *detail, const struct otp_answer *a, int count);

#endif
