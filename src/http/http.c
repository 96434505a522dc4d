/*
 * http: the daemons of the REST API and their connections. One daemon on
 * `listen` (HTTPS when tls is set) with `http_threads` workers, and one
 * plain, single-threaded daemon on listen_internal when it is set, both fed
 * by our own listening sockets (listener.h). Every request passes here: it
 * gets a small state with a body buffer capped at HTTP_BODY_MAX (nothing
 * else is allocated until the body is complete), its id, its framing
 * checks, the route table's dispatch (http_route.c) and one log line. A
 * reaper thread holds every connection to its request deadline, flushes the
 * refusal log's summaries and frees replaced TLS certificates.
 */
#include "http.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <gnutls/abstract.h>
#include <microhttpd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/phone.h"
#include "../base/unittest.h"
#include "framing.h"
#include "http_int.h"
#include "listener.h"
#include "logsum.h"
#include "tls.h"

/* A flood of 401, 403 or 404 is logged as the first line of each kind
 * and one summary per kind and window (logsum.h). */
#define HTTP_LOG_WINDOW_MS 10000

_Thread_local struct http_req *http_cur;

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
                                  const char *method, const char *upload_data, size_t *upload_data_size)
{
    const char *bad;

    if (first) {
        if ((bad = framing_check(con, MHD_HEADER_KIND)) != NULL) {
            http_route_pick(h, rq, method); /* only for the refusal's shape: /v2 answers in Twilio's */
            return http_bad_framing(h, con, rq, bad);
        }
        return http_route_begin(h, con, rq, method);
    }
    if (*upload_data_size > 0) {
        if (http_body_take(rq, upload_data, *upload_data_size) < 0)
            return MHD_NO; /* out of memory: drop the connection */
        *upload_data_size = 0;
        return MHD_YES;
    }
    http_deadline(h, con, 1);
    if ((bad = framing_check(con, MHD_FOOTER_KIND)) != NULL) /* a chunked body's trailers */
        return http_bad_framing(h, con, rq, bad);
    if (rq->too_big)
        return http_problem(h, con, OUT_PAYLOAD_TOO_LARGE, "the body is larger than 4 KiB", NULL, NULL);
    return http_route_run(h, con, rq);
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
    const struct http_route *r = rq->route;
    int ok = rq->status < 400;
    const char *event = "http.request";
    enum log_level level = LOG_INFO;

    if (r != NULL && r->ok_event != NULL && !rq->allow[0])
        event = ok ? r->ok_event : r->refused_event;
    if (rq->status >= 500)
        level = LOG_WARN;
    else if (rq->cached || (r != NULL && (r->flags & HTTP_QUIET)))
        level = LOG_DEBUG;
    else if ((rq->status == 401 || rq->status == 403 || rq->status == 404) &&
             !logsum_note(h->logsum, rq->status, rq->outcome, r != NULL ? r->name : "none", http_now_ms()))
        level = LOG_DEBUG; /* counted in its kind's summary line */
    log_event(level, event,
              LOG_FIELDS(LOG_STR("method", method), LOG_STR("path", url), LOG_INT("status", rq->status),
                         LOG_STR("outcome", rq->outcome[0] ? rq->outcome : ok ? "ok" : "error"), LOG_STR("rule", rq->rule),
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
    rq->url = url;
    http_cur = rq;
    log_set_request(rq->request_id);
    ret = http_serve(h, con, rq, first, method, upload_data, upload_data_size);
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

struct http *http_new(const struct http_conf *c, const struct keys_conf *k, struct otp *o, struct v2 *v2,
                      struct tls *tls, char *err)
{
    struct http *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        snprintf(err, OTP_ERR_LEN, "http: out of memory");
        return NULL;
    }
    h->cfg = c;
    h->keys = k;
    h->otp = o;
    h->v2 = v2;
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
