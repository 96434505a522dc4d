/*
 * pacer: one thread owns the queue's far end, the curl multi handle and
 * every transfer. Request threads only touch the queue under the mutex and
 * wake the thread with curl_multi_wakeup. Load: `rate` sends a second at
 * most (50 typical, 10,000 the cap); everything here is O(1) per send
 * except the retry list, which is short and kept sorted.
 *
 * Pacing. Tick k is due at anchor + k/rate on CLOCK_MONOTONIC; the thread
 * polls curl until just before a deadline and then sleeps to it with
 * clock_nanosleep(TIMER_ABSTIME), so error never accumulates. After idle
 * time, or a wait of more than one tick (a full bulkhead), the schedule
 * restarts from now: idle time earns no burst. On top, a ring holds the
 * time each of the last `rate` requests went on the wire (curl's prereq
 * callback: after the connection is made, before the request is sent), and
 * a send waits until the request `rate` sends ago is a second (and a margin)
 * old, so no 1-second window ever holds more than `rate` calls, retries
 * included, even when a new connection is slow to open.
 */
#include "pacer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "../base/clock.h"

#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull
#define PACER_REPLY_MAX 4096
/* Added to the one-second spacing of any rate + 1 requests, for the jitter
 * between a request leaving and the provider taking it in (2 ms was not
 * always enough on a loaded machine). Costs 0.5 % of the rate at most. */
#define PACER_MARGIN_NS (5 * NS_PER_MS)
/* A ring entry whose request is not on the wire yet. */
#define PACER_PENDING UINT64_MAX
/* A transfer whose ring slot has been taken by a later send. */
#define PACER_NO_SLOT SIZE_MAX

/* A queued or waiting message. */
struct pacer_item {
    struct pacer_item *next;
    struct pacer_msg m;
    uint64_t not_before_ns; /* retries only: not sent before this */
};

/* One provider call in flight. */
struct pacer_xfer {
    struct pacer_xfer *prev, *next; /* the list of calls in flight */
    struct pacer *pc;
    size_t slot; /* its entry in pc->ring, PACER_NO_SLOT once a later send owns it */
    CURL *easy;
    struct pacer_item *item;
    struct curl_slist *headers;
    struct provider_http req;
    uint64_t start_ns;
    int64_t start_ms;
    char reply[PACER_REPLY_MAX];
    size_t reply_len;
    int64_t retry_after_ms; /* from a Retry-After header */
    char errbuf[CURL_ERROR_SIZE];
};

struct pacer {
    const struct config *cfg;
    struct provider *provider;
    struct ledger *ledger;
    pacer_refund_fn refund;
    void *refund_ctx;
    CURLM *multi;
    pthread_t thread;
    int started;
    uint64_t period_ns;
    uint64_t *ring; /* when each of the last `rate` requests went out; 0 none, PACER_PENDING not yet */
    struct pacer_xfer **owner; /* the transfer still in flight for each ring entry, or NULL */
    size_t ring_pos;
    struct pacer_xfer *xfers; /* calls in flight; pacer thread only */
    unsigned seed;

    pthread_mutex_t mu; /* guards everything below */
    struct pacer_item *head, *tail; /* the queue, oldest first */
    struct pacer_item *retry;       /* waiting retries, by not_before_ns */
    int used;    /* reserved slots, queued, waiting retries and the one being paced */
    int queued;  /* in the queue proper */
    int stopping;
    int inflight; /* written by the pacer thread only */
    struct pacer_stats stats;
};

struct pacer *pacer_new(const struct config *c, struct provider *p, struct ledger *l, pacer_refund_fn refund,
                        void *refund_ctx, char *err)
{
    struct pacer *pc = calloc(1, sizeof(*pc));

    if (pc == NULL || (pc->ring = calloc((size_t)c->pacer_rate, sizeof(*pc->ring))) == NULL ||
        (pc->owner = calloc((size_t)c->pacer_rate, sizeof(*pc->owner))) == NULL) {
        if (pc)
            free(pc->ring);
        free(pc);
        snprintf(err, OTP_ERR_LEN, "pacer: out of memory");
        return NULL;
    }
    pc->cfg = c;
    pc->provider = p;
    pc->ledger = l;
    pc->refund = refund;
    pc->refund_ctx = refund_ctx;
    pc->period_ns = NS_PER_S / (uint64_t)c->pacer_rate;
    pc->seed = (unsigned)clock_mono_ns();
    pthread_mutex_init(&pc->mu, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (pc->multi = curl_multi_init()) == NULL) {
        snprintf(err, OTP_ERR_LEN, "pacer: curl init failed");
        pacer_free(pc);
        return NULL;
    }
    curl_multi_setopt(pc->multi, CURLMOPT_MAXCONNECTS, (long)c->pacer_max_inflight);
    return pc;
}

enum otp_rc pacer_reserve(struct pacer *pc, int64_t *retry_after_s)
{
    enum otp_rc rc = OTP_OK;

    pthread_mutex_lock(&pc->mu);
    if (pc->stopping || pc->used >= pc->cfg->pacer_capacity) {
        int64_t rate = pc->cfg->pacer_rate;
        *retry_after_s = (pc->used + rate - 1) / rate;
        if (*retry_after_s < 1)
            *retry_after_s = 1;
        pc->stats.dropped_full++;
        rc = OTP_EFULL;
    } else {
        pc->used++;
    }
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

void pacer_release(struct pacer *pc)
{
    pthread_mutex_lock(&pc->mu);
    pc->used--;
    pthread_mutex_unlock(&pc->mu);
}

/* Appends m to the queue; reserved says whether a slot is already taken. */
static void pacer_append(struct pacer *pc, const struct pacer_msg *m, int reserved)
{
    struct pacer_item *it = calloc(1, sizeof(*it));

    pthread_mutex_lock(&pc->mu);
    if (it == NULL) {
        /* The message is 'queued' in the ledger: a restart sends it. */
        if (reserved)
            pc->used--;
        pthread_mutex_unlock(&pc->mu);
        return;
    }
    it->m = *m;
    if (!reserved)
        pc->used++;
    pc->queued++;
    if (pc->tail)
        pc->tail->next = it;
    else
        pc->head = it;
    pc->tail = it;
    pthread_mutex_unlock(&pc->mu);
    curl_multi_wakeup(pc->multi);
}

void pacer_push(struct pacer *pc, const struct pacer_msg *m)
{
    pacer_append(pc, m, 1);
}

void pacer_restore(struct pacer *pc, const struct pacer_msg *m)
{
    pacer_append(pc, m, 0);
}

/* Takes the next message to send: a due retry first, then the queue's
 * head. NULL when none; then *wait_ns is how long until a retry is due. */
static struct pacer_item *pacer_pick(struct pacer *pc, uint64_t now, uint64_t *wait_ns)
{
    struct pacer_item *it = NULL;

    *wait_ns = 200 * NS_PER_MS;
    pthread_mutex_lock(&pc->mu);
    if (pc->retry && pc->retry->not_before_ns <= now) {
        it = pc->retry;
        pc->retry = it->next;
    } else if (pc->head) {
        it = pc->head;
        pc->head = it->next;
        if (pc->head == NULL)
            pc->tail = NULL;
        pc->queued--;
    } else if (pc->retry && pc->retry->not_before_ns - now < *wait_ns) {
        *wait_ns = pc->retry->not_before_ns - now;
    }
    if (it)
        it->next = NULL; /* it keeps its slot until it is sent or ended */
    pthread_mutex_unlock(&pc->mu);
    return it;
}

/* Frees the slot of a picked item that leaves the queue for good. */
static void pacer_slot_free(struct pacer *pc)
{
    pthread_mutex_lock(&pc->mu);
    pc->used--;
    pthread_mutex_unlock(&pc->mu);
}

/* Puts an item back at the queue's head (on stop). */
static void pacer_unpick(struct pacer *pc, struct pacer_item *it)
{
    pthread_mutex_lock(&pc->mu);
    it->next = pc->head;
    pc->head = it;
    if (pc->tail == NULL)
        pc->tail = it;
    pc->queued++;
    pthread_mutex_unlock(&pc->mu);
}

/* Ends a message unsent or failed: ledger, refund, counters. */
static void pacer_end(struct pacer *pc, struct pacer_item *it, const char *state, const char *detail)
{
    ledger_message_state(pc->ledger, it->m.id, state, "queued,sending", NULL, detail, it->m.attempts,
                         clock_wall_ms());
    if (pc->refund && it->m.price_minor > 0)
        pc->refund(pc->refund_ctx, it->m.price_minor, it->m.cost_ms);
    pthread_mutex_lock(&pc->mu);
    if (strcmp(state, "expired") == 0)
        pc->stats.expired++;
    else
        pc->stats.failed++;
    pthread_mutex_unlock(&pc->mu);
    free(it);
}

/* Schedules a retry, or ends the message when retries or its life run out. */
static void pacer_retry(struct pacer *pc, struct pacer_item *it, int64_t retry_after_ms, const char *why)
{
    int64_t base = pc->cfg->pacer_retry_base_ms, backoff_ms, now_ms = clock_wall_ms();
    struct pacer_item **pp;
    char detail[PROVIDER_ERR_MAX + 32];
    int shift = it->m.attempts - 1 < 16 ? it->m.attempts - 1 : 16;

    if (it->m.attempts > pc->cfg->pacer_retry_max) {
        snprintf(detail, sizeof(detail), "retries exhausted: %s", why);
        pacer_end(pc, it, "failed", detail);
        return;
    }
    /* Exponential backoff with jitter: base * 2^(n-1) plus up to base more. */
    backoff_ms = (base << shift) + (int64_t)(rand_r(&pc->seed) % (unsigned)(base > 0 ? base : 1));
    if (retry_after_ms > backoff_ms)
        backoff_ms = retry_after_ms;
    if (now_ms + backoff_ms >= it->m.expires_ms) {
        snprintf(detail, sizeof(detail), "code expires before a retry: %s", why);
        pacer_end(pc, it, "failed", detail);
        return;
    }
    snprintf(detail, sizeof(detail), "retry in %lld ms: %s", (long long)backoff_ms, why);
    ledger_message_state(pc->ledger, it->m.id, "queued", "sending", NULL, detail, it->m.attempts, now_ms);
    it->not_before_ns = clock_mono_ns() + (uint64_t)backoff_ms * NS_PER_MS;
    pthread_mutex_lock(&pc->mu);
    for (pp = &pc->retry; *pp && (*pp)->not_before_ns <= it->not_before_ns; pp = &(*pp)->next)
        ;
    it->next = *pp;
    *pp = it;
    pc->used++;
    pc->stats.retried++;
    pthread_mutex_unlock(&pc->mu);
}

/* Records the outcome of one provider call and moves the message on. */
static void pacer_outcome(struct pacer *pc, struct pacer_item *it, long status, int64_t latency_ms,
                          struct provider_result *res)
{
    static const char *const outcome_names[] = {"sent", "transient", "permanent"};
    struct ledger_send s = {
        .ts_ms = clock_wall_ms(),
        .message_id = it->m.id,
        .attempt = it->m.attempts,
        .provider = pc->provider->ops->name,
        .http_status = status,
        .latency_ms = latency_ms,
        .outcome = outcome_names[res->outcome],
        .provider_id = res->provider_id[0] ? res->provider_id : NULL,
        .error = res->error[0] ? res->error : NULL,
        .cost_minor = res->outcome == PROVIDER_SENT ? it->m.price_minor : 0,
    };

    ledger_send(pc->ledger, &s);
    switch (res->outcome) {
    case PROVIDER_SENT:
        ledger_message_state(pc->ledger, it->m.id, "sent", "queued,sending", s.provider_id, NULL, it->m.attempts,
                             s.ts_ms);
        pthread_mutex_lock(&pc->mu);
        pc->stats.sent++;
        pthread_mutex_unlock(&pc->mu);
        free(it);
        break;
    case PROVIDER_TRANSIENT:
        pthread_mutex_lock(&pc->mu);
        pc->stats.transient++;
        pthread_mutex_unlock(&pc->mu);
        pacer_retry(pc, it, res->retry_after_ms, res->error);
        break;
    case PROVIDER_PERMANENT:
        pthread_mutex_lock(&pc->mu);
        pc->stats.permanent++;
        pthread_mutex_unlock(&pc->mu);
        pacer_end(pc, it, "failed", res->error);
        break;
    }
}

static size_t pacer_on_body(char *data, size_t size, size_t n, void *arg)
{
    struct pacer_xfer *x = arg;
    size_t len = size * n, room = sizeof(x->reply) - 1 - x->reply_len;

    /* Past the cap the rest is dropped, not an error: the status decides. */
    memcpy(x->reply + x->reply_len, data, len < room ? len : room);
    x->reply_len += len < room ? len : room;
    x->reply[x->reply_len] = '\0';
    return len;
}

static size_t pacer_on_header(char *data, size_t size, size_t n, void *arg)
{
    struct pacer_xfer *x = arg;
    size_t len = size * n;

    if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        char num[16] = {0};
        size_t k = len - 12 < sizeof(num) - 1 ? len - 12 : sizeof(num) - 1;
        long v;
        memcpy(num, data + 12, k);
        v = strtol(num, NULL, 10);
        if (v > 0 && v < 86400)
            x->retry_after_ms = v * 1000;
    }
    return len;
}

/* curl calls this once the connection is ready, just before the request
 * goes out: that moment is what the provider's second counts. It can run
 * again when curl retries on a fresh connection; the latest time counts. */
static int pacer_on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    struct pacer_xfer *x = arg;

    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    if (x->slot != PACER_NO_SLOT)
        x->pc->ring[x->slot] = clock_mono_ns();
    return CURL_PREREQFUNC_OK;
}

/* Takes ring slot for a new send, detaching the transfer that held it (its
 * request went out a second ago; only the new send may write the slot now). */
static void pacer_ring_take(struct pacer *pc, size_t slot)
{
    if (pc->owner[slot] != NULL)
        pc->owner[slot]->slot = PACER_NO_SLOT;
    pc->owner[slot] = NULL;
    pc->ring[slot] = PACER_PENDING;
}

/* Lets go of x's ring slot when x ends; if its request never went out (no
 * connection), the slot holds no time. */
static void pacer_ring_release(struct pacer *pc, struct pacer_xfer *x)
{
    if (x->slot == PACER_NO_SLOT)
        return;
    if (pc->ring[x->slot] == PACER_PENDING)
        pc->ring[x->slot] = 0;
    pc->owner[x->slot] = NULL;
    x->slot = PACER_NO_SLOT;
}

/* Settles a slot whose send never reached curl. */
static void pacer_ring_unsent(struct pacer *pc, size_t slot)
{
    if (pc->ring[slot] == PACER_PENDING)
        pc->ring[slot] = 0;
}

static void pacer_xfer_free(struct pacer_xfer *x)
{
    if (x == NULL)
        return;
    curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    free(x);
}

/* Starts one provider call for it, its time to be recorded in ring slot;
 * the message is 'sending' from here. */
static void pacer_send(struct pacer *pc, struct pacer_item *it, size_t slot)
{
    struct sms sms = {it->m.id, it->m.to, it->m.text, it->m.dlr_query[0] ? it->m.dlr_query : NULL};
    struct provider_result res = {0};
    struct pacer_xfer *x = calloc(1, sizeof(*x));
    uint64_t t0 = clock_mono_ns();
    int done = 0;
    enum otp_rc rc;

    it->m.attempts++;
    ledger_message_state(pc->ledger, it->m.id, "sending", "queued,sending", NULL, NULL, it->m.attempts,
                         clock_wall_ms());
    if (x == NULL) {
        pacer_ring_unsent(pc, slot);
        snprintf(res.error, sizeof(res.error), "out of memory");
        res.outcome = PROVIDER_TRANSIENT;
        pacer_outcome(pc, it, 0, 0, &res);
        return;
    }
    rc = pc->provider->ops->prepare(pc->provider->self, &sms, &x->req, &done, &res);
    if (rc != OTP_OK || done) {
        if (done)
            pc->ring[slot] = t0; /* delivered in place, as of now */
        else
            pacer_ring_unsent(pc, slot);
        if (rc != OTP_OK) {
            res.outcome = PROVIDER_PERMANENT;
            snprintf(res.error, sizeof(res.error), "cannot build the request (%s)", otp_rc_str(rc));
        }
        pacer_outcome(pc, it, 0, (int64_t)((clock_mono_ns() - t0) / NS_PER_MS), &res);
        free(x);
        return;
    }
    x->item = it;
    x->start_ns = t0;
    x->pc = pc;
    x->slot = slot;
    if ((x->easy = curl_easy_init()) == NULL) {
        pacer_ring_unsent(pc, slot);
        free(x);
        snprintf(res.error, sizeof(res.error), "curl: out of memory");
        res.outcome = PROVIDER_TRANSIENT;
        pacer_outcome(pc, it, 0, 0, &res);
        return;
    }
    curl_easy_setopt(x->easy, CURLOPT_URL, x->req.url);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)pc->cfg->pacer_timeout_ms);
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)(pc->cfg->pacer_timeout_ms < 5000 ?
                                                              pc->cfg->pacer_timeout_ms : 5000));
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, pacer_on_body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, pacer_on_header);
    curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_PREREQFUNCTION, pacer_on_prereq);
    curl_easy_setopt(x->easy, CURLOPT_PREREQDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    x->headers = curl_slist_append(NULL, "Expect:");
    if (x->req.post) {
        char ct[96];
        snprintf(ct, sizeof(ct), "Content-Type: %s", x->req.content_type);
        x->headers = curl_slist_append(x->headers, ct);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->req.body);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(x->req.body));
    }
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
    if (x->req.user) {
        curl_easy_setopt(x->easy, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(x->easy, CURLOPT_USERNAME, x->req.user);
        curl_easy_setopt(x->easy, CURLOPT_PASSWORD, x->req.pass);
    }
    if (curl_multi_add_handle(pc->multi, x->easy) != CURLM_OK) {
        pacer_ring_unsent(pc, slot);
        pacer_xfer_free(x);
        snprintf(res.error, sizeof(res.error), "curl: cannot start the transfer");
        res.outcome = PROVIDER_TRANSIENT;
        pacer_outcome(pc, it, 0, 0, &res);
        return;
    }
    pc->owner[slot] = x;
    x->next = pc->xfers;
    if (pc->xfers)
        pc->xfers->prev = x;
    pc->xfers = x;
    pthread_mutex_lock(&pc->mu);
    pc->inflight++;
    pthread_mutex_unlock(&pc->mu);
}

/* Takes x off the multi handle and the in-flight list. */
static void pacer_detach(struct pacer *pc, struct pacer_xfer *x)
{
    curl_multi_remove_handle(pc->multi, x->easy);
    if (x->prev)
        x->prev->next = x->next;
    else
        pc->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    pthread_mutex_lock(&pc->mu);
    pc->inflight--;
    pthread_mutex_unlock(&pc->mu);
}

/* Runs the transfers and settles the finished ones. Never blocks. */
static void pacer_progress(struct pacer *pc)
{
    CURLMsg *msg;
    int running, left;

    curl_multi_perform(pc->multi, &running);
    while ((msg = curl_multi_info_read(pc->multi, &left)) != NULL) {
        struct pacer_xfer *x = NULL;
        struct provider_result res = {0};
        long status = 0;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (msg->data.result == CURLE_OK)
            curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        pc->provider->ops->classify(pc->provider->self, status, x->reply, x->reply_len, &res);
        if (msg->data.result != CURLE_OK)
            snprintf(res.error, sizeof(res.error), "%s", curl_easy_strerror(msg->data.result));
        if (res.retry_after_ms == 0)
            res.retry_after_ms = x->retry_after_ms;
        pacer_detach(pc, x);
        pacer_ring_release(pc, x);
        pacer_outcome(pc, x->item, status, (int64_t)((clock_mono_ns() - x->start_ns) / NS_PER_MS), &res);
        pacer_xfer_free(x);
    }
}

/* Waits up to wait_ns for transfers or a wake-up, then makes progress. */
static void pacer_wait(struct pacer *pc, uint64_t wait_ns)
{
    int ms = (int)(wait_ns / NS_PER_MS);

    curl_multi_poll(pc->multi, NULL, 0, ms > 0 ? ms : 0, NULL);
    pacer_progress(pc);
}

/* Sleeps until the absolute monotonic time due_ns, serving transfers. */
static void pacer_sleep_until(struct pacer *pc, uint64_t due_ns)
{
    for (;;) {
        uint64_t now = clock_mono_ns();
        struct timespec ts;
        if (now >= due_ns)
            return;
        if (due_ns - now > 2 * NS_PER_MS) {
            pacer_wait(pc, due_ns - now - NS_PER_MS);
            continue;
        }
        ts.tv_sec = (time_t)(due_ns / NS_PER_S);
        ts.tv_nsec = (long)(due_ns % NS_PER_S);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        return;
    }
}

static int pacer_stopping(struct pacer *pc)
{
    int s;

    pthread_mutex_lock(&pc->mu);
    s = pc->stopping;
    pthread_mutex_unlock(&pc->mu);
    return s;
}

static void *pacer_main(void *arg)
{
    struct pacer *pc = arg;
    uint64_t next_ns = 0, rate = (uint64_t)pc->cfg->pacer_rate;
    int idle = 1;

    while (!pacer_stopping(pc)) {
        uint64_t now = clock_mono_ns(), wait_ns, due, oldest;
        struct pacer_item *it;
        size_t slot;

        pacer_progress(pc);
        if ((it = pacer_pick(pc, now, &wait_ns)) == NULL) {
            idle = 1;
            pacer_wait(pc, wait_ns);
            continue;
        }
        if (it->m.expires_ms <= clock_wall_ms()) {
            pacer_slot_free(pc);
            pacer_end(pc, it, "expired", "the code expired in the queue");
            continue;
        }
        if (idle && next_ns < now)
            next_ns = now; /* idle time earns no burst */
        idle = 0;
        /* The request `rate` sends ago bounds this one: any rate + 1 requests
         * on the wire span at least a second. Its time is known once curl has
         * sent it; a slow new connection holds the next sends back. */
        while (pc->ring[pc->ring_pos] == PACER_PENDING && !pacer_stopping(pc))
            pacer_wait(pc, NS_PER_MS);
        oldest = pc->ring[pc->ring_pos];
        due = next_ns;
        if (oldest != 0 && oldest != PACER_PENDING && oldest + NS_PER_S + PACER_MARGIN_NS > due)
            due = oldest + NS_PER_S + PACER_MARGIN_NS;
        pacer_sleep_until(pc, due);
        while (pc->inflight >= pc->cfg->pacer_max_inflight && !pacer_stopping(pc))
            pacer_wait(pc, 50 * NS_PER_MS); /* the bulkhead is full: wait, then send one */
        if (pacer_stopping(pc)) {
            pacer_unpick(pc, it);
            break;
        }
        pacer_slot_free(pc);
        if (it->m.expires_ms <= clock_wall_ms()) {
            pacer_end(pc, it, "expired", "the code expired in the queue");
            continue;
        }
        now = clock_mono_ns();
        slot = pc->ring_pos;
        pacer_ring_take(pc, slot);
        pc->ring_pos = (slot + 1) % rate;
        pacer_send(pc, it, slot);
        /* Late by more than a tick (a full bulkhead): restart from now. */
        next_ns = now > due + pc->period_ns ? now + pc->period_ns : due + pc->period_ns;
        if (next_ns < now)
            next_ns = now;
        curl_multi_perform(pc->multi, &(int){0});
    }
    return NULL;
}

enum otp_rc pacer_start(struct pacer *pc, char *err)
{
    if (pthread_create(&pc->thread, NULL, pacer_main, pc) != 0) {
        snprintf(err, OTP_ERR_LEN, "pacer: cannot start the thread");
        return OTP_EIO;
    }
    pc->started = 1;
    return OTP_OK;
}

void pacer_stop(struct pacer *pc, int64_t grace_ms)
{
    uint64_t deadline = clock_mono_ns() + (uint64_t)grace_ms * NS_PER_MS;

    if (pc == NULL || !pc->started)
        return;
    pthread_mutex_lock(&pc->mu);
    pc->stopping = 1;
    pthread_mutex_unlock(&pc->mu);
    curl_multi_wakeup(pc->multi);
    pthread_join(pc->thread, NULL);
    pc->started = 0;
    /* Let calls in flight finish; what is left stays 'sending' in the
     * ledger and follows pacer.on_restart_sending at the next start. */
    while (pc->inflight > 0 && clock_mono_ns() < deadline)
        pacer_wait(pc, 20 * NS_PER_MS);
}

static void pacer_list_free(struct pacer_item *it)
{
    while (it) {
        struct pacer_item *next = it->next;
        free(it);
        it = next;
    }
}

void pacer_free(struct pacer *pc)
{
    if (pc == NULL)
        return;
    pacer_stop(pc, 0);
    while (pc->xfers) {
        struct pacer_xfer *x = pc->xfers;
        pacer_detach(pc, x);
        pacer_ring_release(pc, x);
        free(x->item);
        pacer_xfer_free(x);
    }
    if (pc->multi) {
        curl_multi_cleanup(pc->multi);
        curl_global_cleanup();
    }
    pacer_list_free(pc->head);
    pacer_list_free(pc->retry);
    pthread_mutex_destroy(&pc->mu);
    free(pc->ring);
    free(pc->owner);
    free(pc);
}

void pacer_stats(struct pacer *pc, struct pacer_stats *out)
{
    pthread_mutex_lock(&pc->mu);
    *out = pc->stats;
    out->depth = (uint64_t)pc->queued;
    out->inflight = (uint64_t)pc->inflight;
    pthread_mutex_unlock(&pc->mu);
}

int pacer_full(struct pacer *pc)
{
    int full;

    pthread_mutex_lock(&pc->mu);
    full = pc->stopping || pc->used >= pc->cfg->pacer_capacity;
    pthread_mutex_unlock(&pc->mu);
    return full;
}
