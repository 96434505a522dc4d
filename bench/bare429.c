/*
 * bare429: the ceiling of our HTTP stack for `make bench` (issue 13). A
 * libmicrohttpd server with otpd's thread model (src/http/http.c: the
 * internal polling thread, epoll, an inter-thread channel, a pool of
 * THREADS workers, the same connection limit, timeout and per-IP limit)
 * that reads each request whole, body included, and answers a fixed 429
 * problem+json with otpd's header set for a refusal: Content-Type,
 * Cache-Control, X-Request-Id, Retry-After, RateLimit-Policy, RateLimit.
 * Nothing else: no routing, no auth, no JSON, no Redis, no ledger, no log
 * line. What otpd's refusal path costs beyond this is ours.
 *
 * Left out on purpose: otpd's connection notifications (the request
 * deadline list under a mutex, http_notify/http_done). They are otpd's
 * own work, not the stack's, and the profile shows what they cost.
 *
 * Usage: bare429 PORT THREADS (on 127.0.0.1; PORT 0: any free port). Prints "ready PORT"
 * once listening, then serves until SIGTERM or SIGINT.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* What otpd answers a resend-delay refusal with (a 1-h delay), byte for
 * byte but for the request id and the seconds, which vary there. */
static const char bare_body[] =
    "{\"type\":\"urn:otpd:problem:rate_limited\",\"title\":\"Rate limited\",\"status\":429,"
    "\"detail\":\"limit resend reached\",\"error\":\"rate_limited\",\"reason\":\"resend\",\"retry_after\":3600}";

/* Per-request ids as otpd gives them (32 hex digits), from a counter: the
 * header's size and its formatting per request are the stack's cost, the
 * randomness is otpd's. */
static unsigned long long bare_seq;

static void bare_request_id(char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned long long v = __atomic_add_fetch(&bare_seq, 1, __ATOMIC_RELAXED);
    int i;

    for (i = 0; i < 32; i++)
        out[i] = hex[(v >> (i % 16 * 4)) & 15];
    out[32] = '\0';
}

static enum MHD_Result bare_handle(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    static int started;
    struct MHD_Response *r;
    enum MHD_Result ok;
    char id[33];

    (void)cls, (void)url, (void)method, (void)version, (void)upload_data;
    if (*con_cls == NULL) { /* the headers: wait for the body, as otpd does */
        *con_cls = &started;
        return MHD_YES;
    }
    if (*upload_data_size != 0) { /* a piece of the body: read and dropped */
        *upload_data_size = 0;
        return MHD_YES;
    }
    r = MHD_create_response_from_buffer(sizeof(bare_body) - 1, (void *)(uintptr_t)bare_body,
                                        MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    bare_request_id(id);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/problem+json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Request-Id", id);
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "3600");
    MHD_add_response_header(r, "RateLimit-Policy", "\"resend\";q=1;w=3600");
    MHD_add_response_header(r, "RateLimit", "\"resend\";r=0;t=3600");
    ok = MHD_queue_response(con, 429, r);
    MHD_destroy_response(r);
    return ok;
}

/* otpd's http_connection_limit: as many as the descriptor limit allows, up to 10,000. */
static unsigned bare_connection_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 512)
        return 256;
    return rl.rlim_cur - 256 > 10000 ? 10000 : (unsigned)(rl.rlim_cur - 256);
}

int main(int argc, char **argv)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_USE_ITC;
    const union MHD_DaemonInfo *info;
    struct sockaddr_in sa;
    struct MHD_Daemon *d;
    sigset_t set;
    long port, threads;
    int sig;

    if (argc != 3 || (port = strtol(argv[1], NULL, 10)) < 0 || port > 65535 ||
        (threads = strtol(argv[2], NULL, 10)) < 1 || threads > 256) {
        fprintf(stderr, "usage: bare429 PORT THREADS\n");
        return 64;
    }
    /* Blocked before the workers start, so that they inherit the mask and
     * only sigwait below takes the signal. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* Loopback only, as the bench's otpd listens. */
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d = MHD_start_daemon(flags, 0, NULL, NULL, bare_handle, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_THREAD_POOL_SIZE,
                         (unsigned)threads, MHD_OPTION_CONNECTION_LIMIT, bare_connection_limit(),
                         MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 1024u,
                         MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "bare429: cannot listen on port %ld\n", port);
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("ready %u\n", info ? (unsigned)info->port : (unsigned)port);
    fflush(stdout);
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    return 0;
}
