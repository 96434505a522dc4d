/*
 * xfer: curl easy handles on one multi handle. Everything here runs on the
 * owning thread; curl_multi_wakeup is the only call other threads make.
 */
#include "xfer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "../base/clock.h"
#include "../base/wipe.h"

#define XFER_REPLY_MAX 4096
/* The most a call is started ahead of its slot. */
#define XFER_LEAD_MAX_NS (500 * SCHED_NS_PER_MS)

/* One provider call in flight. */
struct xfer_call {
    struct xfer_call *prev, *next;
    struct xfer *x;
    CURL *easy;
    void *item;
    struct sched_slot slot;
    struct curl_slist *headers;
    struct provider_http req;
    uint64_t start_ns;
    char reply[XFER_REPLY_MAX];
    size_t reply_len;
    int64_t retry_after_ms; /* from a Retry-After header */
    int wrote;
    int missed;
    char errbuf[CURL_ERROR_SIZE];
};

struct xfer {
    const struct pacer_conf *cfg;
    struct provider *provider;
    struct xfer_hooks hooks;
    CURLM *multi;
    struct xfer_call *calls;
    int inflight;
    uint64_t lead_ns; /* how long calls have been taking to be ready to write */
};

struct xfer *xfer_new(const struct pacer_conf *c, struct provider *p, const struct xfer_hooks *hooks, char *err)
{
    struct xfer *x = calloc(1, sizeof(*x));

    if (x == NULL) {
        snprintf(err, OTP_ERR_LEN, "xfer: out of memory");
        return NULL;
    }
    x->cfg = c;
    x->provider = p;
    x->hooks = *hooks;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (x->multi = curl_multi_init()) == NULL) {
        snprintf(err, OTP_ERR_LEN, "xfer: curl init failed");
        free(x);
        return NULL;
    }
    curl_multi_setopt(x->multi, CURLMOPT_MAXCONNECTS, (long)c->max_inflight);
    return x;
}

static size_t xfer_on_body(char *data, size_t size, size_t n, void *arg)
{
    struct xfer_call *k = arg;
    size_t len = size * n, room = sizeof(k->reply) - 1 - k->reply_len;

    /* Past the cap the rest is dropped, not an error: the status decides. */
    memcpy(k->reply + k->reply_len, data, len < room ? len : room);
    k->reply_len += len < room ? len : room;
    k->reply[k->reply_len] = '\0';
    return len;
}

static size_t xfer_on_header(char *data, size_t size, size_t n, void *arg)
{
    struct xfer_call *k = arg;
    size_t len = size * n;

    if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        char num[16] = {0};
        size_t c = len - 12 < sizeof(num) - 1 ? len - 12 : sizeof(num) - 1;
        long v;
        memcpy(num, data + 12, c);
        v = strtol(num, NULL, 10);
        if (v > 0 && v < 86400)
            k->retry_after_ms = v * 1000;
    }
    return len;
}

/* curl calls this once the connection is ready, just before the request
 * goes out: the moment the provider's second counts. A call is started
 * ahead of its slot by the time connections have been taking (xfer_lead_ns),
 * so one that is ready early waits here for its slot; one that is ready
 * too late is not written at all. curl runs this again when it would send
 * the request a second time by itself, on a fresh connection, after a
 * reused one died before any answer: the first copy may have reached the
 * provider and be billed, and a second would be a copy no reservation and
 * no spend counted, off its slot. That is refused: the call ends as
 * written (billed), and the pacer's retry, if any, is a new attempt with a
 * reservation and a slot of its own. */
static int xfer_on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    struct xfer_call *k = arg;
    uint64_t now = clock_mono_ns(), took, lead;

    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    if (k->wrote)
        return CURL_PREREQFUNC_ABORT;
    /* An average over the last calls: a cold pool raises it, warm ones
     * bring it down. Other threads read it (xfer_lead_ns). */
    took = now - k->start_ns;
    lead = __atomic_load_n(&k->x->lead_ns, __ATOMIC_RELAXED);
    lead = lead - lead / 4 + took / 4;
    __atomic_store_n(&k->x->lead_ns, lead < XFER_LEAD_MAX_NS ? lead : XFER_LEAD_MAX_NS, __ATOMIC_RELAXED);
    if (now < k->slot.due_ns) {
        struct timespec ts = {(time_t)(k->slot.due_ns / SCHED_NS_PER_S), (long)(k->slot.due_ns % SCHED_NS_PER_S)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        now = clock_mono_ns();
    }
    if (!sched_write_ok(&k->slot, now)) {
        k->missed = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    k->x->hooks.wrote(k->x->hooks.ctx, k->item);
    k->wrote = 1;
    return CURL_PREREQFUNC_OK;
}

static void xfer_call_free(struct xfer_call *k)
{
    if (k == NULL)
        return;
    if (k->easy)
        curl_easy_cleanup(k->easy);
    /* curl keeps its own copies of the headers, a bearer token among them. */
    for (struct curl_slist *h = k->headers; h != NULL; h = h->next)
        wipe(h->data, strlen(h->data));
    curl_slist_free_all(k->headers);
    wipe(&k->req, sizeof(k->req)); /* its body or URL holds the code, its headers a token */
    free(k);
}

/* Ends a call that never reached curl. */
static void xfer_fail(struct xfer *x, void *item, enum provider_cause cause, const char *why, uint64_t t0)
{
    struct xfer_result r = {0};

    provider_set_cause(&r.res, cause);
    snprintf(r.res.error, sizeof(r.res.error), "%s", why);
    r.latency_ms = (int64_t)((clock_mono_ns() - t0) / SCHED_NS_PER_MS);
    x->hooks.done(x->hooks.ctx, item, &r);
}

/* Sets k's easy handle up for its request (k->req): -1 when a header
 * cannot be added, and the call must not leave. */
static int xfer_easy_setup(struct xfer *x, struct xfer_call *k)
{
    curl_easy_setopt(k->easy, CURLOPT_URL, k->req.url);
    curl_easy_setopt(k->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k->easy, CURLOPT_TIMEOUT_MS, (long)x->cfg->timeout_ms);
    curl_easy_setopt(k->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(x->cfg->timeout_ms < 5000 ? x->cfg->timeout_ms : 5000));
    curl_easy_setopt(k->easy, CURLOPT_WRITEFUNCTION, xfer_on_body);
    curl_easy_setopt(k->easy, CURLOPT_WRITEDATA, k);
    curl_easy_setopt(k->easy, CURLOPT_HEADERFUNCTION, xfer_on_header);
    curl_easy_setopt(k->easy, CURLOPT_HEADERDATA, k);
    curl_easy_setopt(k->easy, CURLOPT_ERRORBUFFER, k->errbuf);
    curl_easy_setopt(k->easy, CURLOPT_PRIVATE, k);
    curl_easy_setopt(k->easy, CURLOPT_PREREQFUNCTION, xfer_on_prereq);
    curl_easy_setopt(k->easy, CURLOPT_PREREQDATA, k);
    curl_easy_setopt(k->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    k->headers = curl_slist_append(NULL, "Expect:");
    if (k->req.post) {
        char ct[96];
        snprintf(ct, sizeof(ct), "Content-Type: %s", k->req.content_type);
        k->headers = curl_slist_append(k->headers, ct);
        curl_easy_setopt(k->easy, CURLOPT_POSTFIELDS, k->req.body);
        curl_easy_setopt(k->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(k->req.body));
    }
    for (int i = 0; i < k->req.n_headers && i < PROVIDER_HEADERS_MAX; i++) {
        /* A header that cannot be added (an Authorization) must not leave without it. */
        struct curl_slist *more = curl_slist_append(k->headers, k->req.headers[i]);
        if (more == NULL)
            return -1;
        k->headers = more;
    }
    curl_easy_setopt(k->easy, CURLOPT_HTTPHEADER, k->headers);
    if (k->req.user) {
        curl_easy_setopt(k->easy, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(k->easy, CURLOPT_USERNAME, k->req.user);
        curl_easy_setopt(k->easy, CURLOPT_PASSWORD, k->req.pass);
    }
    return 0;
}

void xfer_start(struct xfer *x, const struct sms *sms, const struct sched_slot *slot, void *item)
{
    struct xfer_call *k = calloc(1, sizeof(*k));
    struct xfer_result r = {0};
    uint64_t t0 = clock_mono_ns();
    int done = 0;
    enum otp_rc rc;

    if (k == NULL) {
        xfer_fail(x, item, PROVIDER_C_UNSENT, "out of memory", t0);
        return;
    }
    rc = x->provider->ops->prepare(x->provider->self, sms, &k->req, &done, &r.res);
    if (rc != OTP_OK || done) {
        if (rc != OTP_OK) {
            provider_set_cause(&r.res, PROVIDER_C_LOCAL);
            snprintf(r.res.error, sizeof(r.res.error), "cannot build the request (%s)", otp_rc_str(rc));
        }
        r.latency_ms = (int64_t)((clock_mono_ns() - t0) / SCHED_NS_PER_MS);
        xfer_call_free(k);
        x->hooks.done(x->hooks.ctx, item, &r);
        return;
    }
    k->x = x;
    k->item = item;
    k->slot = *slot;
    k->start_ns = t0;
    if ((k->easy = curl_easy_init()) == NULL || xfer_easy_setup(x, k) != 0) {
        xfer_call_free(k);
        xfer_fail(x, item, PROVIDER_C_UNSENT, "curl: out of memory", t0);
        return;
    }
    if (curl_multi_add_handle(x->multi, k->easy) != CURLM_OK) {
        xfer_call_free(k);
        xfer_fail(x, item, PROVIDER_C_UNSENT, "curl: cannot start the transfer", t0);
        return;
    }
    k->next = x->calls;
    if (x->calls)
        x->calls->prev = k;
    x->calls = k;
    x->inflight++;
    curl_multi_perform(x->multi, &(int){0});
}

/* Takes k off the multi handle and the list. */
static void xfer_detach(struct xfer *x, struct xfer_call *k)
{
    curl_multi_remove_handle(x->multi, k->easy);
    if (k->prev)
        k->prev->next = k->next;
    else
        x->calls = k->next;
    if (k->next)
        k->next->prev = k->prev;
    x->inflight--;
}

/* Classifies k's end (result: curl's) and hands it to done. */
static void xfer_end(struct xfer *x, struct xfer_call *k, CURLcode result)
{
    struct xfer_result r = {0};

    if (result == CURLE_OK)
        curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &r.status);
    x->provider->ops->classify(x->provider->self, r.status, k->reply, k->reply_len, &r.res);
    if (result != CURLE_OK) {
        /* No answer. Once curl was about to write the request, the
         * provider may have it: billed, whatever the error says. */
        if (!k->wrote)
            provider_set_cause(&r.res, PROVIDER_C_UNSENT);
        else if (result == CURLE_OPERATION_TIMEDOUT)
            provider_set_cause(&r.res, PROVIDER_C_TIMEOUT);
        else
            provider_set_cause(&r.res, PROVIDER_C_BROKEN);
        snprintf(r.res.error, sizeof(r.res.error), "%s",
                 k->missed ? "too late for its send slot" : curl_easy_strerror(result));
    }
    if (r.res.retry_after_ms == 0)
        r.res.retry_after_ms = k->retry_after_ms;
    r.wrote = k->wrote;
    r.missed = k->missed && !k->wrote;
    r.latency_us = (int64_t)((clock_mono_ns() - k->start_ns) / 1000);
    r.latency_ms = r.latency_us / 1000;
    xfer_detach(x, k);
    x->hooks.done(x->hooks.ctx, k->item, &r);
    xfer_call_free(k);
}

void xfer_poll(struct xfer *x, int wait_ms)
{
    CURLMsg *msg;
    int left;

    curl_multi_poll(x->multi, NULL, 0, wait_ms > 0 ? wait_ms : 0, NULL);
    curl_multi_perform(x->multi, &left);
    while ((msg = curl_multi_info_read(x->multi, &left)) != NULL) {
        struct xfer_call *k = NULL;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&k);
        xfer_end(x, k, msg->data.result);
    }
}

void xfer_wakeup(struct xfer *x)
{
    curl_multi_wakeup(x->multi);
}

int xfer_inflight(const struct xfer *x)
{
    return x->inflight;
}

uint64_t xfer_lead_ns(const struct xfer *x)
{
    return __atomic_load_n(&x->lead_ns, __ATOMIC_RELAXED);
}

void xfer_free(struct xfer *x)
{
    if (x == NULL)
        return;
    while (x->calls)
        xfer_end(x, x->calls, CURLE_ABORTED_BY_CALLBACK);
    curl_multi_cleanup(x->multi);
    curl_global_cleanup();
    free(x);
}
