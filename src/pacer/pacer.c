/*
 * pacer: the two threads around the fleet's queue (queue.c), its slots
 * (schedule.c) and the calls (xfer.c).
 *
 * An item is one message this instance has claimed. It is in exactly one
 * place at a time: the queue thread's hands, its claimed buffer or retry
 * list, the sender's armed list (it holds a slot), in flight (xfer), or the
 * queue thread's job list (an outcome to write to Redis). Every item is
 * also on the registry, so the queue thread can keep its claims alive
 * (queue_touch) and cancel can find it.
 *
 * Money. Each attempt is classified by provider_cause_row: never reached
 * (not billed: the message keeps its reservation for a retry, or gives it
 * back when it ends), outcome unknown or accepted (billed: the
 * reservation is spent and counted in otpd_spend_minor_total). Before a
 * slot is taken, the message's reservation is made sure of and marked used
 * in Redis (reserve.lua): a retry after a billed attempt takes a new one
 * against every cap, and a message taken over (or back after a restart)
 * never goes out again on a reservation an earlier call may have spent.
 * The spend is counted when a request is written (curl's prereq). A stop
 * gives back the mark of a message whose reservation no call was ever
 * written on (marked, then stopped before its call went out, or held by a
 * 429's pause, or its slot missed): else the next start would reserve
 * again for a price never spent. Only the instance that owns a message
 * ends it and gives its money back (queue.lua's end and refund.lua check
 * it): one cut off from Redis while another took its messages over and
 * sent them gives nothing back when it has Redis again, and its ledger
 * says the message was taken over rather than claim an end that was not
 * its own.
 *
 * Locks: mu guards the lists, the registry and the stats; wmu/wcond wake
 * the queue thread. They never nest, and no Redis call or curl call is
 * made under either.
 */
#include "pacer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/wipe.h"
#include "queue.h"
#include "schedule.h"
#include "xfer.h"

/* Items with a slot waiting for the sender: enough to keep the wire busy
 * while the next slot is taken, few enough that slots are not far ahead. */
#define PACER_AHEAD 2
/* How often an idle queue thread looks for new messages in the stream. */
#define PACER_POLL_MS 20
/* The queue thread's wait before it asks a failing Redis again. */
#define PACER_RETRY_MS 200
/* Tries to place a slot on the local clock before the message waits. */
#define PACER_SLOT_TRIES 3
/* A slotted message's reservation is marked used this long before its
 * slot (plus the time calls take to be ready), then it goes to the sender. */
#define PACER_MARK_LEAD_NS (20 * SCHED_NS_PER_MS)

enum pacer_job {
    PACER_JOB_END,    /* write its end to Redis, give back its reservation if unspent */
    PACER_JOB_RETRY,  /* back to 'queued' in Redis, then on the retry list */
    PACER_JOB_RESLOT, /* missed its slot (late, or a 429 pause): a new slot, no new attempt */
};

struct pacer_item {
    struct pacer_item *next;         /* in the list that holds it */
    struct pacer_item *rprev, *rnext; /* the registry */
    struct queue_entry e;
    char text[PACER_TEXT_MAX];       /* holds the code: memory only, never logged */
    char dlr_query[160];
    int rendered;
    struct sched_slot slot;
    uint64_t not_before_ns;          /* a retry: not before this */
    int attempts;                    /* calls this instance made (retry.max counts them) */
    int attempt;                     /* slot.lua's attempt number, any instance's */
    /* The reservation it holds (1 is the issue's), whether it is unspent,
     * and whether it was taken over (its first reservation looks past
     * Redis's use mark). */
    int rsv_idx, held, adopted;
    int cancelled, lost;             /* under mu */
    int sending_logged;              /* this attempt's 'sending' row is submitted; the sender only */
    int missed;                      /* its last slot was missed: the next arm is the same attempt */
    /* The reservation the queue thread last marked used, and the one a call
     * of it was last written on (curl's prereq, on the sender; 0: none). A
     * stop gives a mark back only when no call on it may have been written
     * (unmark): one that missed its slot, or was refused a connection, never
     * was; one in flight at the stop is never given back. */
    int marked, written, unmark;
    enum pacer_job job;
    char state[16];                  /* PACER_JOB_END */
    char detail[PROVIDER_ERR_MAX + 64];
    char provider_id[PROVIDER_ID_MAX];
    int refund;                      /* PACER_JOB_END: give back its reservation */
    int ledger_end;                  /* PACER_JOB_END: its state goes to the ledger once Redis ends it here */
};

struct pacer {
    const struct pacer_conf *cfg;
    struct pacer_site site;
    struct provider *provider;
    struct ledger *ledger;
    struct queue *queue;
    struct xfer *xfer;
    struct pacer_money money;
    int has_money;
    struct pacer_render render;
    int64_t min_life_ms;             /* from otp.ttl; atomic: pacer_set_code_ttl changes it */
    int64_t period_us;
    char consumer[QUEUE_NAME_MAX];
    unsigned seed;                   /* the sender's backoff jitter */
    uint64_t pause_until_ns;         /* after a 429; the sender only */
    int n429;                        /* 429s in a row; the sender only */

    pthread_t sender, qthread;
    int sender_started, qthread_started;

    pthread_mutex_t wmu;
    pthread_cond_t wcond;
    int woken;                       /* under wmu: work for the queue thread */

    pthread_mutex_t mu;              /* guards everything below */
    struct pacer_item *registry;
    struct pacer_item *buf, *buf_tail; /* claimed, not yet prepared, in stream order */
    struct pacer_item *retry;        /* waiting retries, by not_before_ns */
    struct pacer_item *slotted, *slotted_tail; /* holding a slot, not yet marked used, in slot order */
    struct pacer_item *armed, *armed_tail; /* marked, for the sender, in slot order */
    struct pacer_item *jobs, *jobs_tail;   /* outcomes for the queue thread */
    int n_armed, inflight;           /* n_armed: slotted and armed */
    int redis_down;                  /* the queue thread's last Redis call failed; the queue thread only */
    /* The queue thread only: where the passes over this instance's own
     * pending entries and over the takeover candidates go on from, and
     * whether a pass over its own is due (at start, and after a claim
     * whose reply was lost: Redis may have handed it entries it never saw). */
    char own_cursor[QUEUE_EID_MAX], takeover_cursor[QUEUE_EID_MAX];
    int resync;
    int64_t pause_ms;                /* a 429's pause for the queue thread to apply */
    int64_t depth;                   /* the fleet's queue at the last claim */
    int stopping, qstop;
    struct pacer_stats stats;
};

/* Counts one stat under the lock. */
#define PACER_COUNT(pc, field, n)                                                                                      \
    do {                                                                                                               \
        pthread_mutex_lock(&(pc)->mu);                                                                                 \
        (pc)->stats.field += (n);                                                                                      \
        pthread_mutex_unlock(&(pc)->mu);                                                                               \
    } while (0)

static void pacer_xfer_wrote(void *ctx, void *item);
static void pacer_xfer_done(void *ctx, void *item, const struct xfer_result *r);

struct pacer *pacer_new(const struct pacer_conf *c, const struct pacer_site *site, struct store *s,
                        struct provider *p, struct ledger *l, const struct pacer_money *money, char *err)
{
    struct pacer *pc = calloc(1, sizeof(*pc));
    struct xfer_hooks hooks;
    char host[64] = "otpd";

    if (pc == NULL) {
        snprintf(err, OTP_ERR_LEN, "pacer: out of memory");
        return NULL;
    }
    pc->cfg = c;
    pc->site = *site;
    pc->provider = p;
    pc->ledger = l;
    if (money != NULL) {
        pc->money = *money;
        pc->has_money = 1;
    }
    __atomic_store_n(&pc->min_life_ms, sched_min_life_ms(site->otp_ttl_ms), __ATOMIC_RELAXED);
    pc->period_us = sched_period_us(c->rate);
    pc->seed = (unsigned)clock_mono_ns();
    pc->resync = 1;
    snprintf(pc->own_cursor, sizeof(pc->own_cursor), "0-0");
    snprintf(pc->takeover_cursor, sizeof(pc->takeover_cursor), "0-0");
    if (c->instance[0]) {
        snprintf(pc->consumer, sizeof(pc->consumer), "%s", c->instance);
    } else {
        gethostname(host, sizeof(host) - 1);
        snprintf(pc->consumer, sizeof(pc->consumer), "%s:%d", host, site->listen_port);
    }
    pthread_mutex_init(&pc->mu, NULL);
    pthread_mutex_init(&pc->wmu, NULL);
    pthread_cond_init(&pc->wcond, NULL);
    hooks = (struct xfer_hooks){pacer_xfer_wrote, pacer_xfer_done, pc};
    if ((pc->queue = queue_new(s, pc->consumer)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "pacer: out of memory");
        pacer_free(pc);
        return NULL;
    }
    if ((pc->xfer = xfer_new(c, p, &hooks, err)) == NULL) {
        pacer_free(pc);
        return NULL;
    }
    return pc;
}

/* Wakes the queue thread. */
static void pacer_kick(struct pacer *pc)
{
    pthread_mutex_lock(&pc->wmu);
    pc->woken = 1;
    pthread_cond_signal(&pc->wcond);
    pthread_mutex_unlock(&pc->wmu);
}

/* The least life a message must have left to go on the wire. */
static int64_t pacer_min_life(const struct pacer *pc)
{
    return __atomic_load_n(&pc->min_life_ms, __ATOMIC_RELAXED);
}

void pacer_set_code_ttl(struct pacer *pc, int64_t otp_ttl_ms)
{
    __atomic_store_n(&pc->min_life_ms, sched_min_life_ms(otp_ttl_ms), __ATOMIC_RELAXED);
}

void pacer_wake(struct pacer *pc)
{
    pacer_kick(pc);
}

/* ---- items ---- */

static struct pacer_item *pacer_item_new(struct pacer *pc, const struct queue_entry *e, int adopted)
{
    struct pacer_item *it = calloc(1, sizeof(*it));

    if (it == NULL)
        return NULL; /* it stays claimed in the stream: this instance's next start, or a takeover */
    it->e = *e;
    it->adopted = adopted;
    /* A new message holds the reservation, unspent; a taken-over
     * one holds nothing it knows of until reserve.lua says. */
    it->rsv_idx = adopted ? 0 : 1;
    it->held = !adopted;
    pthread_mutex_lock(&pc->mu);
    it->rnext = pc->registry;
    if (pc->registry)
        pc->registry->rprev = it;
    pc->registry = it;
    pthread_mutex_unlock(&pc->mu);
    return it;
}

/* Takes it off the registry, wipes it (its text holds the code) and frees it. */
static void pacer_item_free(struct pacer *pc, struct pacer_item *it)
{
    pthread_mutex_lock(&pc->mu);
    if (it->rprev)
        it->rprev->rnext = it->rnext;
    else
        pc->registry = it->rnext;
    if (it->rnext)
        it->rnext->rprev = it->rprev;
    pthread_mutex_unlock(&pc->mu);
    wipe(it, sizeof(*it));
    free(it);
}

/* 1 when its cost is tracked against the caps. */
static int pacer_priced(const struct pacer *pc, const struct pacer_item *it)
{
    return pc->has_money && it->e.price_minor >= 0;
}

/* The price an attempt of it may cost: its reservation, else the list
 * price (no caps configured), else 0. */
static int64_t pacer_price(const struct pacer *pc, const struct pacer_item *it)
{
    int64_t p = it->e.price_minor >= 0 ? it->e.price_minor
                                       : config_price_in(pc->site.prices, pc->site.n_prices, it->e.to);

    return p > 0 ? p : 0;
}

/* ---- the ledger (asynchronous submissions: no wait) ---- */

static void pacer_ledger_failed(struct pacer *pc, const char *what, const char *id)
{
    log_msg(LOG_ERROR, "ledger: cannot record %s of message %s", what, id);
    PACER_COUNT(pc, ledger_failures, 1);
}

static void pacer_ledger_state(struct pacer *pc, const char *id, const char *state, const char *detail,
                               const char *provider_id, int attempts)
{
    int tries;

    for (tries = 0; tries < 2; tries++)
        if (ledger_message_state(pc->ledger, id, state, "queued,sending", provider_id, detail, attempts,
                                 clock_wall_ms()) == OTP_OK)
            return;
    pacer_ledger_failed(pc, state, id);
}

static void pacer_ledger_send(struct pacer *pc, const struct ledger_send *s)
{
    int tries;

    for (tries = 0; tries < 2; tries++)
        if (ledger_send(pc->ledger, s) == OTP_OK)
            return;
    pacer_ledger_failed(pc, "a provider call", s->message_id);
}

/* ---- jobs: from any thread to the queue thread ---- */

static void pacer_job(struct pacer *pc, struct pacer_item *it, enum pacer_job job)
{
    it->job = job;
    it->next = NULL;
    pthread_mutex_lock(&pc->mu);
    if (pc->jobs_tail)
        pc->jobs_tail->next = it;
    else
        pc->jobs = it;
    pc->jobs_tail = it;
    pthread_mutex_unlock(&pc->mu);
    pacer_kick(pc);
}

/* Ends it in Redis on the queue thread, with its reservation given back
 * when it holds one unspent. A 'sent' goes to the ledger now (the provider
 * accepted this instance's call, whoever owns the message now); any other
 * end only once Redis has ended the message here (pacer_end_now): one
 * another instance took over meanwhile is not this instance's to end. */
static void pacer_end(struct pacer *pc, struct pacer_item *it, const char *state, const char *detail,
                      const char *provider_id)
{
    it->ledger_end = strcmp(state, "sent") != 0;
    if (!it->ledger_end) {
        pacer_ledger_state(pc, it->e.id, state, detail, provider_id, it->attempt);
        PACER_COUNT(pc, sent, 1);
    }
    snprintf(it->state, sizeof(it->state), "%s", state);
    snprintf(it->detail, sizeof(it->detail), "%s", detail ? detail : "");
    snprintf(it->provider_id, sizeof(it->provider_id), "%s", provider_id ? provider_id : "");
    /* What it holds unspent goes back. One taken over (or back after a
     * restart) before it reserved anything here gives back its latest
     * reservation only if Redis shows it was never used on the wire
     * (refund.lua's reservation 0). */
    it->refund = (it->held || (it->adopted && it->rsv_idx == 0)) && pacer_priced(pc, it) && it->e.price_minor > 0;
    pacer_job(pc, it, PACER_JOB_END);
}

/* Its end ('failed' or 'expired') is this instance's: in the ledger and the stats. */
static void pacer_ended(struct pacer *pc, struct pacer_item *it)
{
    pacer_ledger_state(pc, it->e.id, it->state, it->detail, it->provider_id[0] ? it->provider_id : NULL,
                       it->attempt);
    pthread_mutex_lock(&pc->mu);
    if (strcmp(it->state, "expired") == 0) {
        pc->stats.expired++;
        pc->stats.cause[PROVIDER_C_EXPIRED]++; /* never reached: not billed */
    } else {
        pc->stats.failed++;
    }
    pthread_mutex_unlock(&pc->mu);
}

/* Another instance took it over: what happens to it next, its end and its
 * money, is that instance's, and it leaves this one. The ledger here says
 * so and claims no end (its row stays 'queued', as an accepting instance's
 * row of a message another instance sent does); a 'sent' row stays, since
 * the provider accepted this instance's call. */
static void pacer_taken_over(struct pacer *pc, struct pacer_item *it)
{
    if (strcmp(it->state, "sent") != 0)
        pacer_ledger_state(pc, it->e.id, "queued", "taken over by another instance", NULL, it->attempt);
    pacer_item_free(pc, it);
}

/* ---- the sender thread: owns the wire ---- */

/* The ledger's 'sending' row of an attempt: once its request is written,
 * or when it ends without a wire (delivered in place, or failed before
 * writing); never for a call aborted before its slot (no attempt). */
static void pacer_sending(struct pacer *pc, struct pacer_item *it)
{
    if (!it->sending_logged)
        pacer_ledger_state(pc, it->e.id, "sending", NULL, NULL, it->attempt);
    it->sending_logged = 1;
}

static void pacer_xfer_wrote(void *ctx, void *item)
{
    struct pacer *pc = ctx;
    struct pacer_item *it = item;

    /* From here the provider may bill it: counted now, once per call, so
     * the spend never reads less than what could be billed; and its use
     * mark is never given back. */
    PACER_COUNT(pc, spend_unknown_minor, (uint64_t)pacer_price(pc, item));
    it->written = it->rsv_idx;
    pacer_sending(pc, item);
}

/* A 429 pauses every send of the fleet: its Retry-After, else a backoff
 * that grows with each 429 in a row. */
static void pacer_pause(struct pacer *pc, int64_t retry_after_ms)
{
    int64_t ms = sched_pause_ms(pc->n429, pc->cfg->retry_base_ms, retry_after_ms);
    uint64_t until = clock_mono_ns() + (uint64_t)ms * SCHED_NS_PER_MS;

    pc->n429++;
    if (until > pc->pause_until_ns)
        pc->pause_until_ns = until;
    log_event(LOG_WARN, "provider.paused", LOG_FIELDS(LOG_INT("status", 429), LOG_INT("pause_ms", ms)),
              "provider answered 429: every send of the fleet paused for %lld ms", (long long)ms);
    pthread_mutex_lock(&pc->mu);
    pc->stats.paused_429++;
    if (ms > pc->pause_ms)
        pc->pause_ms = ms;
    pthread_mutex_unlock(&pc->mu);
}

/* Schedules a retry, or ends the message when retries or its life run out. */
static void pacer_retry(struct pacer *pc, struct pacer_item *it, int64_t retry_after_ms, const char *why)
{
    int64_t backoff_ms;

    if (it->attempts > pc->cfg->retry_max) {
        snprintf(it->detail, sizeof(it->detail), "retries exhausted: %s", why);
        pacer_end(pc, it, "failed", it->detail, NULL);
        return;
    }
    backoff_ms = sched_backoff_ms(it->attempts, pc->cfg->retry_base_ms, (unsigned)rand_r(&pc->seed),
                                  retry_after_ms);
    if (clock_wall_ms() + backoff_ms + pacer_min_life(pc) > it->e.expires_ms) {
        snprintf(it->detail, sizeof(it->detail), "too little life left for a retry: %s", why);
        pacer_end(pc, it, "expired", it->detail, NULL);
        return;
    }
    snprintf(it->detail, sizeof(it->detail), "retry in %lld ms: %s", (long long)backoff_ms, why);
    pacer_ledger_state(pc, it->e.id, "queued", it->detail, NULL, it->attempt);
    it->not_before_ns = clock_mono_ns() + (uint64_t)backoff_ms * SCHED_NS_PER_MS;
    PACER_COUNT(pc, retried, 1);
    pacer_job(pc, it, PACER_JOB_RETRY);
}

/*
 * A failed attempt's log line: the provider's HTTP status (0: no answer),
 * the cause's name and the adapter's short reason (secret-free by
 * contract, and never the message text). A refusal for good is an error an
 * operator must act on (a 401 or 403: the credentials); a retried one a
 * warning.
 */
static void pacer_log_failure(struct pacer *pc, const struct pacer_item *it, const struct xfer_result *r,
                              const struct provider_cause_info *ci)
{
    static const char *const outcome_names[] = {"sent", "transient", "permanent"};
    const struct provider_result *res = &r->res;
    int auth = r->status == 401 || r->status == 403;

    if (ci->cls == PROVIDER_ACCEPTED)
        return;
    log_event(ci->outcome == PROVIDER_PERMANENT ? LOG_ERROR : LOG_WARN, "provider.failed",
              LOG_FIELDS(LOG_STR("provider", pc->provider->ops->name), LOG_INT("status", r->status),
                         LOG_STR("outcome", outcome_names[ci->outcome]), LOG_STR("cause", ci->name),
                         LOG_STR("reason", res->error), LOG_STR("message_id", it->e.id),
                         LOG_INT("attempt", it->attempt)),
              "provider %s %s message %s (HTTP %ld, %s)%s", pc->provider->ops->name,
              ci->outcome == PROVIDER_PERMANENT ? "refused for good" : "failed", it->e.id, r->status, ci->name,
              auth ? ": check the credentials" : "");
}

/* One call ended (the sender thread, inside xfer_poll or xfer_start). */
static void pacer_xfer_done(void *ctx, void *item, const struct xfer_result *r)
{
    static const char *const outcome_names[] = {"sent", "transient", "permanent"};
    struct pacer *pc = ctx;
    struct pacer_item *it = item;
    const struct provider_result *res = &r->res;
    const struct provider_cause_info *ci = provider_cause_row(res->cause);
    int64_t price = pacer_price(pc, it);
    int billed = ci->cls != PROVIDER_UNREACHED;
    struct ledger_send s = {
        .ts_ms = clock_wall_ms(),
        .message_id = it->e.id,
        .attempt = it->attempt,
        .provider = pc->provider->ops->name,
        .http_status = r->status,
        .latency_ms = r->latency_ms,
        .outcome = outcome_names[ci->outcome],
        .provider_id = res->provider_id[0] ? res->provider_id : NULL,
        .error = res->error[0] ? res->error : NULL,
        .cost_minor = billed ? price : 0,
    };

    pthread_mutex_lock(&pc->mu);
    pc->inflight--;
    pthread_mutex_unlock(&pc->mu);
    if (r->missed) {
        /* Never written: no attempt, no cost; a new slot. */
        it->attempts--;
        it->missed = 1;
        PACER_COUNT(pc, slots_missed, 1);
        pacer_job(pc, it, PACER_JOB_RESLOT);
        return;
    }
    pacer_sending(pc, it);
    pacer_ledger_send(pc, &s);
    if (r->wrote)
        metrics_observe_us(METRICS_H_PROVIDER, r->latency_us > 0 ? (uint64_t)r->latency_us : 0);
    pthread_mutex_lock(&pc->mu);
    pc->stats.cause[res->cause < PROVIDER_C_COUNT ? res->cause : PROVIDER_C_BROKEN]++;
    if (!r->wrote && ci->cls == PROVIDER_ACCEPTED)
        pc->stats.spend_accepted_minor += (uint64_t)price;
    else if (!r->wrote && ci->cls == PROVIDER_UNKNOWN)
        pc->stats.spend_unknown_minor += (uint64_t)price;
    if (r->wrote || billed) {
        if (ci->cls == PROVIDER_ACCEPTED)
            pc->stats.settled_accepted_minor += (uint64_t)price;
        else if (ci->cls == PROVIDER_UNKNOWN)
            pc->stats.settled_unknown_minor += (uint64_t)price;
        else
            pc->stats.settled_unbilled_minor += (uint64_t)price;
    }
    if (ci->outcome == PROVIDER_TRANSIENT)
        pc->stats.transient++;
    else if (ci->outcome == PROVIDER_PERMANENT)
        pc->stats.permanent++;
    pthread_mutex_unlock(&pc->mu);
    if (billed)
        it->held = 0; /* spent: the provider may bill it */
    if (res->cause == PROVIDER_C_429)
        pacer_pause(pc, res->retry_after_ms);
    else if (ci->cls == PROVIDER_ACCEPTED)
        pc->n429 = 0;
    pacer_log_failure(pc, it, r, ci);
    if (ci->cls == PROVIDER_ACCEPTED)
        pacer_end(pc, it, "sent", NULL, res->provider_id[0] ? res->provider_id : NULL);
    else if (ci->retry)
        pacer_retry(pc, it, res->retry_after_ms, res->error);
    else
        pacer_end(pc, it, "failed", res->error, NULL);
}

static int pacer_stopping(struct pacer *pc)
{
    int s;

    pthread_mutex_lock(&pc->mu);
    s = pc->stopping;
    pthread_mutex_unlock(&pc->mu);
    return s;
}

/* Sleeps until the monotonic time due_ns, serving the calls in flight; a
 * stop ends the sleep. */
static void pacer_sleep_until(struct pacer *pc, uint64_t due_ns)
{
    for (;;) {
        uint64_t now = clock_mono_ns();
        struct timespec ts;
        if (now >= due_ns || pacer_stopping(pc))
            return;
        if (due_ns - now > 2 * SCHED_NS_PER_MS) {
            xfer_poll(pc->xfer, (int)((due_ns - now) / SCHED_NS_PER_MS) - 1);
            continue;
        }
        ts.tv_sec = (time_t)(due_ns / SCHED_NS_PER_S);
        ts.tv_nsec = (long)(due_ns % SCHED_NS_PER_S);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        return;
    }
}

/* The armed item next in slot order, when the bulkhead has room; NULL else. */
static struct pacer_item *pacer_next_armed(struct pacer *pc)
{
    struct pacer_item *it = NULL;

    pthread_mutex_lock(&pc->mu);
    if (pc->armed && pc->inflight < pc->cfg->max_inflight)
        it = pc->armed;
    pthread_mutex_unlock(&pc->mu);
    return it;
}

static void *pacer_sender_main(void *arg)
{
    struct pacer *pc = arg;

    while (!pacer_stopping(pc)) {
        struct pacer_item *it = pacer_next_armed(pc);
        struct sms sms;
        int cancelled, lost;
        if (it == NULL) {
            xfer_poll(pc->xfer, 50); /* a new armed item or a finished call wakes it */
            continue;
        }
        if (clock_mono_ns() + xfer_lead_ns(pc->xfer) < it->slot.due_ns) {
            pacer_sleep_until(pc, it->slot.due_ns - xfer_lead_ns(pc->xfer));
            continue;
        }
        pthread_mutex_lock(&pc->mu);
        pc->armed = it->next;
        if (pc->armed == NULL)
            pc->armed_tail = NULL;
        pc->n_armed--;
        cancelled = it->cancelled;
        lost = it->lost;
        pthread_mutex_unlock(&pc->mu);
        it->next = NULL;
        pacer_kick(pc); /* room for the next slot */
        if (lost) {
            pacer_taken_over(pc, it); /* its new owner sends it */
        } else if (cancelled) {
            pacer_end(pc, it, "failed", "cancelled", NULL);
        } else if (pc->pause_until_ns > clock_mono_ns()) {
            /* A 429 came in after its slot was taken: a slot after the pause. */
            it->missed = 1;
            PACER_COUNT(pc, slots_missed, 1);
            pacer_job(pc, it, PACER_JOB_RESLOT);
        } else if (sched_too_late(it->e.expires_ms, clock_wall_ms(), pacer_min_life(pc))) {
            pacer_end(pc, it, "expired", "too little life left when it would go on the wire", NULL);
        } else {
            it->attempts++;
            it->sending_logged = 0;
            sms = (struct sms){it->e.id, it->e.to, it->text, it->dlr_query[0] ? it->dlr_query : NULL,
                               clock_wall_ms(), it->e.expires_ms};
            pthread_mutex_lock(&pc->mu);
            pc->inflight++;
            pthread_mutex_unlock(&pc->mu);
            xfer_start(pc->xfer, &sms, &it->slot, it);
        }
        xfer_poll(pc->xfer, 0);
    }
    return NULL;
}

/* ---- the queue thread: every Redis call ---- */

/* Waits up to ms for a wake-up; returns 1 when the queue thread must stop. */
static int pacer_qwait(struct pacer *pc, int64_t ms)
{
    struct timespec ts;
    int stop;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)((ms % 1000) * 1000000);
    ts.tv_sec += (time_t)(ms / 1000) + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&pc->wmu);
    if (!pc->woken)
        pthread_cond_timedwait(&pc->wcond, &pc->wmu, &ts);
    pc->woken = 0;
    pthread_mutex_unlock(&pc->wmu);
    pthread_mutex_lock(&pc->mu);
    stop = pc->qstop;
    pthread_mutex_unlock(&pc->mu);
    return stop;
}

/* After a failed Redis step: logs the first failure, waits a little and
 * says whether to try again. Once the pacer stops, one more try only;
 * then it logs the loss and says no. *tries starts at 0. */
static int pacer_again(struct pacer *pc, int *tries, const char *what, const char *id, const char *err)
{
    if (*tries < 0) {
        log_msg(LOG_ERROR, "pacer: %s of message %s lost at stop: %s", what, id, err);
        return 0;
    }
    if ((*tries)++ == 0)
        log_msg(LOG_WARN, "pacer: %s of message %s waits for Redis: %s", what, id, err);
    if (pacer_qwait(pc, PACER_RETRY_MS))
        *tries = -1;
    return 1;
}

/* Says once when the queue thread loses Redis (what failed), and once
 * when it has it back, rather than on every poll meanwhile. */
static void pacer_redis(struct pacer *pc, enum otp_rc rc, const char *what, const char *err)
{
    if (rc != OTP_OK && !pc->redis_down)
        log_msg(LOG_WARN, "pacer: %s failed: %s; no sends until Redis answers", what, err);
    else if (rc == OTP_OK && pc->redis_down)
        log_msg(LOG_INFO, "pacer: Redis answers again; sends resume");
    pc->redis_down = rc != OTP_OK;
}

/* Gives back its reservation (once: refund.lua marks it). */
static void pacer_refund(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "";
    int result = 0, tries = 0;
    enum otp_rc rc;

    while ((rc = pc->money.refund(pc->money.ctx, it->e.id, pc->consumer, it->rsv_idx, it->e.price_minor,
                                  it->e.cost_ms, it->e.caps, &result, err)) != OTP_OK &&
           pacer_again(pc, &tries, "the refund", it->e.id, err))
        ;
    if (rc != OTP_OK) {
        PACER_COUNT(pc, refunds_lost, 1); /* the caps then hold more than was spent, never less */
        return;
    }
    if (result == 1) {
        PACER_COUNT(pc, refunds, 1);
    } else if (result == 2) {
        log_msg(LOG_INFO, "pacer: message %s ended after a takeover; its cost is kept: its call may have left",
                it->e.id);
        PACER_COUNT(pc, refunds_kept, 1);
    } else if (result == 3) {
        log_msg(LOG_WARN, "pacer: message %s: reservation %d is not this instance's to give back (another "
                "instance ended the message or marked it used): its cost is kept", it->e.id, it->rsv_idx);
        PACER_COUNT(pc, refunds_kept, 1);
    } else if (result == 0) {
        PACER_COUNT(pc, refund_dups, 1);
    } else {
        log_msg(LOG_ERROR, "pacer: refund of message %s reservation %d refused: not its latest (anomaly)",
                it->e.id, it->rsv_idx);
        PACER_COUNT(pc, refund_anomalies, 1);
    }
}

/* At stop, after its retry put it back in the queue: gives back the use
 * mark of its reservation, which no call was ever written on (reserve.lua's
 * unuse: once, and only while nothing armed it since). When Redis refuses
 * or does not answer, the mark stays: the caps then count its price twice
 * once it is sent, never less than was spent. */
static void pacer_unmark(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "", why[96] = "";
    int ok = 0, idx = 0, tries = 0;
    int64_t at_ms = 0;
    enum otp_rc rc;

    it->unmark = 0;
    while ((rc = pc->money.reserve(pc->money.ctx, it->e.id, pc->consumer, it->rsv_idx, PACER_UNUSE,
                                   it->e.price_minor, it->e.cost_ms, &ok, &idx, &at_ms, why, sizeof(why), err)) !=
               OTP_OK &&
           pacer_again(pc, &tries, "giving back a use mark", it->e.id, err))
        ;
    if (rc != OTP_OK)
        log_msg(LOG_ERROR, "pacer: message %s keeps the use mark of reservation %d though it never reached the "
                "provider: its price is counted again when it is sent", it->e.id, it->rsv_idx);
    else if (ok)
        log_msg(LOG_INFO, "pacer: message %s never reached the provider: use mark of reservation %d given back",
                it->e.id, it->rsv_idx);
    else
        log_msg(LOG_WARN, "pacer: message %s: use mark of reservation %d not given back (given back already, or "
                "Redis has a later word on it): its price may be counted again", it->e.id, it->rsv_idx);
}

/* Ends it in Redis (and its entry leaves the stream), refunds, frees it;
 * unless another instance took it over (its touch saw it, or Redis says so
 * now: after a partition, say): then its end and its money are that
 * instance's, and nothing is given back here. */
static void pacer_end_now(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "";
    enum queue_end_result res = QUEUE_END_LOST;
    enum otp_rc rc = OTP_OK;
    int tries = 0, lost;

    pthread_mutex_lock(&pc->mu);
    lost = it->lost;
    pthread_mutex_unlock(&pc->mu);
    /* A sent one is still written when lost, so the new owner does not send it again. */
    if (!lost || strcmp(it->state, "sent") == 0)
        while ((rc = queue_end(pc->queue, &it->e, it->state, it->detail, it->provider_id, &res, err)) != OTP_OK &&
               pacer_again(pc, &tries, "the end", it->e.id, err))
            ;
    if (rc != OTP_OK) {
        pacer_item_free(pc, it); /* lost at the stop: still this instance's in the stream, for its next start */
        return;
    }
    if (res == QUEUE_END_LOST) {
        if (!lost)
            log_msg(LOG_WARN, "pacer: message %s was taken over by another instance before it ended here; "
                    "its end and its cost are that instance's", it->e.id);
        pthread_mutex_lock(&pc->mu);
        pc->stats.lost += !lost;
        pc->stats.refunds_taken_over += it->refund;
        pthread_mutex_unlock(&pc->mu);
        pacer_taken_over(pc, it);
        return;
    }
    if (it->ledger_end)
        pacer_ended(pc, it);
    pthread_mutex_lock(&pc->mu);
    if (pc->depth > 0)
        pc->depth--; /* its entry left the stream; the next claim reads the depth afresh */
    pthread_mutex_unlock(&pc->mu);
    if (it->refund)
        pacer_refund(pc, it);
    pacer_item_free(pc, it);
}

/* Inserts it in the retry list, by not_before_ns. */
static void pacer_retry_list(struct pacer *pc, struct pacer_item *it)
{
    struct pacer_item **pp;

    pthread_mutex_lock(&pc->mu);
    for (pp = &pc->retry; *pp && (*pp)->not_before_ns <= it->not_before_ns; pp = &(*pp)->next)
        ;
    it->next = *pp;
    *pp = it;
    pthread_mutex_unlock(&pc->mu);
}

/* Runs the jobs the sender and cancel handed over. */
static void pacer_jobs(struct pacer *pc)
{
    for (;;) {
        struct pacer_item *it;
        char err[OTP_ERR_LEN] = "";
        int owned = 1, tries = 0;
        enum otp_rc rc;
        pthread_mutex_lock(&pc->mu);
        if ((it = pc->jobs) != NULL) {
            pc->jobs = it->next;
            if (pc->jobs == NULL)
                pc->jobs_tail = NULL;
        }
        pthread_mutex_unlock(&pc->mu);
        if (it == NULL)
            return;
        it->next = NULL;
        switch (it->job) {
        case PACER_JOB_END:
            pacer_end_now(pc, it);
            break;
        case PACER_JOB_RETRY:
            while ((rc = queue_retry(pc->queue, &it->e, it->detail, &owned, err)) != OTP_OK &&
                   pacer_again(pc, &tries, "a retry", it->e.id, err))
                ;
            if (rc != OTP_OK) {
                pacer_item_free(pc, it); /* lost at the stop: the next start takes it back */
                break;
            }
            if (!owned) {
                PACER_COUNT(pc, lost, 1);
                pacer_taken_over(pc, it);
                break;
            }
            if (it->unmark)
                pacer_unmark(pc, it);
            pacer_retry_list(pc, it);
            break;
        case PACER_JOB_RESLOT:
            it->not_before_ns = 0;
            pacer_retry_list(pc, it);
            break;
        }
    }
}

/* Reads the fleet's queue depth from Redis into pc->depth; when Redis
 * does not answer, the last look stays. Any thread. */
static void pacer_depth_refresh(struct pacer *pc)
{
    char err[OTP_ERR_LEN];
    int64_t depth;

    if (queue_depth(pc->queue, &depth, err) != OTP_OK)
        return;
    pthread_mutex_lock(&pc->mu);
    pc->depth = depth;
    pthread_mutex_unlock(&pc->mu);
}

/* 1 when this instance holds an item for stream entry eid. */
static int pacer_holds(struct pacer *pc, const char *eid)
{
    struct pacer_item *it;
    int found = 0;

    pthread_mutex_lock(&pc->mu);
    for (it = pc->registry; it && !found; it = it->rnext)
        found = strcmp(it->e.eid, eid) == 0;
    pthread_mutex_unlock(&pc->mu);
    return found;
}

/* Claims up to want entries in mode into the buffer, skipping those this
 * instance holds already; returns how many Redis handed over, or -1. */
static int pacer_claim(struct pacer *pc, enum queue_mode mode, int want)
{
    struct queue_entry got[16];
    char err[OTP_ERR_LEN] = "";
    char *cursor = mode == QUEUE_OWN ? pc->own_cursor : pc->takeover_cursor;
    int64_t depth = 0;
    int n = 0, i;
    enum otp_rc rc = queue_claim(pc->queue, mode, want, pc->cfg->takeover_ms, cursor, got, &n, &depth, err);

    pacer_redis(pc, rc, "claiming messages", err);
    if (rc != OTP_OK) {
        pc->resync = 1; /* it may have run: look for entries of this instance it does not know */
        snprintf(pc->own_cursor, sizeof(pc->own_cursor), "0-0");
        return -1;
    }
    pthread_mutex_lock(&pc->mu);
    pc->depth = depth;
    pthread_mutex_unlock(&pc->mu);
    for (i = 0; i < n; i++) {
        struct pacer_item *it;
        if (mode != QUEUE_NEW && pacer_holds(pc, got[i].eid))
            continue; /* its own, alive here */
        if ((it = pacer_item_new(pc, &got[i], mode != QUEUE_NEW)) == NULL)
            continue;
        if (mode == QUEUE_TAKEOVER)
            log_msg(LOG_WARN, "pacer: took over message %s from a silent instance", it->e.id);
        pthread_mutex_lock(&pc->mu);
        if (mode == QUEUE_TAKEOVER)
            pc->stats.takeovers++;
        else if (mode == QUEUE_OWN)
            pc->stats.restored++;
        it->next = NULL;
        if (pc->buf_tail)
            pc->buf_tail->next = it;
        else
            pc->buf = it;
        pc->buf_tail = it;
        pthread_mutex_unlock(&pc->mu);
    }
    return n;
}

/* Keeps this instance's claims from being taken over; marks the lost ones. */
static void pacer_touch(struct pacer *pc)
{
    char(*eids)[QUEUE_EID_MAX] = NULL;
    const char **ptrs = NULL;
    int *lost = NULL, n = 0, cap = 0, i;
    char err[OTP_ERR_LEN] = "";
    struct pacer_item *it;

    pthread_mutex_lock(&pc->mu);
    for (it = pc->registry; it; it = it->rnext)
        cap++;
    if (cap > 0 && (eids = calloc((size_t)cap, sizeof(*eids))) != NULL)
        for (it = pc->registry; it && n < cap; it = it->rnext)
            if (!it->lost)
                snprintf(eids[n++], QUEUE_EID_MAX, "%s", it->e.eid);
    pthread_mutex_unlock(&pc->mu);
    if (n == 0 || (ptrs = calloc((size_t)n, sizeof(*ptrs))) == NULL ||
        (lost = calloc((size_t)n, sizeof(*lost))) == NULL)
        goto out;
    for (i = 0; i < n; i++)
        ptrs[i] = eids[i];
    if (queue_touch(pc->queue, ptrs, n, lost, err) != OTP_OK) {
        pacer_redis(pc, OTP_ESTORE, "keeping this instance's claims", err);
        goto out;
    }
    pthread_mutex_lock(&pc->mu);
    for (i = 0; i < n; i++)
        if (lost[i])
            for (it = pc->registry; it; it = it->rnext)
                if (strcmp(it->e.eid, eids[i]) == 0 && !it->lost) {
                    it->lost = 1;
                    pc->stats.lost++;
                    log_msg(LOG_WARN, "pacer: message %s was taken over by another instance", it->e.id);
                }
    pthread_mutex_unlock(&pc->mu);
out:
    free(eids);
    free((void *)ptrs);
    free(lost);
}

/* The next item to prepare: a due retry or missed slot, else a claimed one. */
static struct pacer_item *pacer_pick(struct pacer *pc, uint64_t now, uint64_t *wait_ns)
{
    struct pacer_item *it = NULL;

    pthread_mutex_lock(&pc->mu);
    if (pc->retry && pc->retry->not_before_ns <= now) {
        it = pc->retry;
        pc->retry = it->next;
    } else if (pc->buf) {
        it = pc->buf;
        pc->buf = it->next;
        if (pc->buf == NULL)
            pc->buf_tail = NULL;
    } else if (pc->retry && pc->retry->not_before_ns - now < *wait_ns) {
        *wait_ns = pc->retry->not_before_ns - now;
    }
    if (it)
        it->next = NULL;
    pthread_mutex_unlock(&pc->mu);
    return it;
}

/* Makes sure it holds an unspent reservation (use: PACER_RESERVE), or
 * marks the one it holds used (PACER_USE: its call goes out next); 0 when
 * it ended (no room in a cap), -1 when Redis failed (it waits), 1 when
 * ready. A message holding the reservation asks nothing to be sure. */
static int pacer_reserve(struct pacer *pc, struct pacer_item *it, enum pacer_use use)
{
    char err[OTP_ERR_LEN] = "", why[96] = "", detail[160];
    int ok = 0, idx = 0;
    int64_t at_ms = 0;

    if (use == PACER_RESERVE && it->held)
        return 1;
    if (it->adopted && !it->held) {
        /* Taken over: what it holds is not known here (an earlier call may
         * have spent it). Past every reservation used on the wire. */
        if (pc->money.reserve(pc->money.ctx, it->e.id, pc->consumer, 1, PACER_RESTORE, it->e.price_minor,
                              it->e.cost_ms, &ok, &idx, &at_ms, why, sizeof(why), err) != OTP_OK)
            goto down;
        if (!ok)
            goto full;
        if (idx != 1)
            PACER_COUNT(pc, reservations, 1);
        it->rsv_idx = idx;
        it->held = 1;
    }
    if (pc->money.reserve(pc->money.ctx, it->e.id, pc->consumer, it->held ? it->rsv_idx : it->rsv_idx + 1, use,
                          it->e.price_minor, it->e.cost_ms, &ok, &idx, &at_ms, why, sizeof(why), err) != OTP_OK)
        goto down;
    if (!ok)
        goto full;
    if (idx != it->rsv_idx)
        PACER_COUNT(pc, reservations, 1);
    it->rsv_idx = idx;
    it->held = 1;
    return 1;
full:
    PACER_COUNT(pc, reserve_refused, 1);
    snprintf(detail, sizeof(detail), "cost_cap: %s", why);
    pacer_end(pc, it, "failed", detail, NULL);
    return 0;
down:
    pacer_redis(pc, OTP_ESTORE, "a cost reservation", err);
    return -1;
}

/* Acts on what slot.lua says of it; returns 1 when it may go on, else it
 * has ended, or left this instance. */
static int pacer_verdict(struct pacer *pc, struct pacer_item *it, enum queue_verdict v)
{
    switch (v) {
    case QUEUE_DONE:
        /* Sent elsewhere (a takeover raced a slow owner): its entry
         * leaves; the reservation the call used stays counted. */
        snprintf(it->state, sizeof(it->state), "sent");
        it->refund = 0;
        pacer_job(pc, it, PACER_JOB_END);
        return 0;
    case QUEUE_ENDED:
        /* Ended unsent elsewhere (an abandon after its commit): what it
         * holds never left, and refund.lua gives it back once at most. */
        snprintf(it->state, sizeof(it->state), "failed");
        it->refund = it->held && pacer_priced(pc, it) && it->e.price_minor > 0;
        pacer_job(pc, it, PACER_JOB_END);
        return 0;
    case QUEUE_LOST:
        PACER_COUNT(pc, lost, 1);
        pacer_taken_over(pc, it); /* its new owner sends or ends it */
        return 0;
    case QUEUE_GONE:
        /* Cancelled, verified or replaced before it was sent. */
        pacer_end(pc, it, "failed", "cancelled", NULL);
        return 0;
    case QUEUE_EXPIRED:
        pacer_end(pc, it, "expired", "too little life left in the queue", NULL);
        return 0;
    case QUEUE_WAS_SENDING:
        pacer_end(pc, it, "failed", "its instance stopped while sending (on_restart_sending: fail)", NULL);
        return 0;
    case QUEUE_SEND:
        break;
    }
    return 1;
}

/* Puts it, holding a slot, on the slotted list (slot order): the queue
 * thread marks its reservation used just before the slot, then hands it
 * to the sender (pacer_arm_due). */
static void pacer_slotted(struct pacer *pc, struct pacer_item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&pc->mu);
    if (pc->slotted_tail)
        pc->slotted_tail->next = it;
    else
        pc->slotted = it;
    pc->slotted_tail = it;
    pc->n_armed++;
    pthread_mutex_unlock(&pc->mu);
}

/* Hands it, holding a slot, to the sender. */
static void pacer_arm(struct pacer *pc, struct pacer_item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&pc->mu);
    if (pc->armed_tail)
        pc->armed_tail->next = it;
    else
        pc->armed = it;
    pc->armed_tail = it;
    pthread_mutex_unlock(&pc->mu);
    xfer_wakeup(pc->xfer);
}

/* Marks the reservation of each slotted message whose slot is near used in
 * Redis (a restart or a takeover reads the mark: that call may have left)
 * and hands it to the sender; a message not marked in time takes a new
 * slot. Marking only just before the slot keeps what a crash leaves marked
 * but unsent to the few messages about to go. Returns how long until the
 * next one is near (at most wait_ns). */
static uint64_t pacer_arm_due(struct pacer *pc, uint64_t wait_ns)
{
    for (;;) {
        struct pacer_item *it;
        uint64_t now = clock_mono_ns(), lead = PACER_MARK_LEAD_NS + xfer_lead_ns(pc->xfer);
        struct queue_slot qs;
        char err[OTP_ERR_LEN] = "";
        int r;
        pthread_mutex_lock(&pc->mu);
        it = pc->stopping ? NULL : pc->slotted; /* stopping: nothing more goes to the sender */
        if (it != NULL && it->slot.due_ns > now + lead) {
            if (it->slot.due_ns - now - lead < wait_ns)
                wait_ns = it->slot.due_ns - now - lead;
            it = NULL;
        }
        if (it != NULL) {
            pc->slotted = it->next;
            if (pc->slotted == NULL)
                pc->slotted_tail = NULL;
        }
        pthread_mutex_unlock(&pc->mu);
        if (it == NULL)
            return wait_ns;
        it->next = NULL;
        /* Checked again now, not only when its slot was taken: a cancel
         * on any instance meanwhile stops it (slot.lua 'arm'). */
        if ((r = queue_arm(pc->queue, &it->e, pacer_min_life(pc),
                           it->adopted && pc->cfg->on_restart_sending == CFG_SENDING_FAIL, !it->missed, &qs,
                           err)) != OTP_OK)
            r = -1;
        else if (!pacer_verdict(pc, it, qs.verdict))
            r = 0;
        else if ((it->attempt = qs.attempt), (it->missed = 0), pacer_priced(pc, it))
            r = pacer_reserve(pc, it, PACER_USE);
        else
            r = 1;
        pacer_redis(pc, r < 0 ? OTP_ESTORE : OTP_OK, "arming a message", err);
        if (r <= 0) {
            pthread_mutex_lock(&pc->mu);
            pc->n_armed--;
            pthread_mutex_unlock(&pc->mu);
            if (r < 0) {
                it->not_before_ns = clock_mono_ns() + (uint64_t)PACER_RETRY_MS * SCHED_NS_PER_MS;
                pacer_retry_list(pc, it);
            }
            continue;
        }
        if (pacer_priced(pc, it))
            it->marked = it->rsv_idx;
        pacer_arm(pc, it);
    }
}

/* Prepares one item: its checks, its reservation and its slot; then the
 * sender has it, or it ended, or it waits (Redis failed: back on the retry
 * list a little later). */
static void pacer_prepare(struct pacer *pc, struct pacer_item *it)
{
    struct queue_slot qs;
    char err[OTP_ERR_LEN] = "";
    int cancelled, lost, tries, r;

    pthread_mutex_lock(&pc->mu);
    cancelled = it->cancelled;
    lost = it->lost;
    pthread_mutex_unlock(&pc->mu);
    if (lost) {
        pacer_taken_over(pc, it); /* another instance has it */
        return;
    }
    if (cancelled) {
        pacer_end(pc, it, "failed", "cancelled", NULL);
        return;
    }
    if (sched_too_late(it->e.expires_ms, clock_wall_ms(), pacer_min_life(pc))) {
        pacer_end(pc, it, "expired", "too little life left in the queue", NULL);
        return;
    }
    if (!it->rendered) {
        if (pc->render.render(pc->render.ctx, it->e.id, it->e.vid, it->e.expires_ms, it->e.cost_ms, it->text,
                              sizeof(it->text), it->dlr_query, sizeof(it->dlr_query)) != OTP_OK) {
            pacer_end(pc, it, "failed", "cannot render the message", NULL);
            return;
        }
        it->rendered = 1;
    }
    if (pacer_priced(pc, it) && (r = pacer_reserve(pc, it, PACER_RESERVE)) <= 0) {
        if (r < 0)
            goto later;
        return;
    }
    for (tries = 0; tries < PACER_SLOT_TRIES; tries++) {
        uint64_t sent = clock_mono_ns(), recv;
        enum otp_rc rc = queue_slot(pc->queue, &it->e, pacer_min_life(pc), pc->period_us,
                                    it->adopted && pc->cfg->on_restart_sending == CFG_SENDING_FAIL, &qs, err);
        pacer_redis(pc, rc, "taking a send slot", err);
        if (rc != OTP_OK)
            goto later;
        recv = clock_mono_ns();
        if (!pacer_verdict(pc, it, qs.verdict))
            return;
        PACER_COUNT(pc, slots, 1);
        if (sched_slot_local(qs.slot_us, qs.now_us, sent, recv, &it->slot) == 0) {
            PACER_COUNT(pc, slot_wait_us, (uint64_t)(qs.slot_us > qs.now_us ? qs.slot_us - qs.now_us : 0));
            pacer_slotted(pc, it);
            return;
        }
        PACER_COUNT(pc, slots_refused, 1); /* too slow a round trip to place it: that slot goes unused */
    }
later:
    it->not_before_ns = clock_mono_ns() + (uint64_t)PACER_RETRY_MS * SCHED_NS_PER_MS;
    pacer_retry_list(pc, it);
}

/* 1 while the sender could use another slot. */
static int pacer_room(struct pacer *pc)
{
    int room;

    pthread_mutex_lock(&pc->mu);
    room = !pc->stopping && pc->n_armed < PACER_AHEAD &&
           pc->n_armed + pc->inflight < pc->cfg->max_inflight;
    pthread_mutex_unlock(&pc->mu);
    return room;
}

/* 1 when it holds a use mark that no call was ever written on. */
static int pacer_mark_unspent(const struct pacer_item *it)
{
    return it->held && it->marked == it->rsv_idx && it->written != it->rsv_idx;
}

/* At stop, once the sender has gone and the jobs it left are run: the
 * messages holding a slot it never used, and those that missed theirs (a
 * 429's pause, or too late: armed, so 'sending' in Redis) and wait for
 * another, go back to 'queued' in Redis (they never left), so the next
 * start (or a takeover) sends them. One marked used whose reservation no
 * call was ever written on gives its mark back after that (pacer_unmark),
 * as does one waiting for a retry after its call was refused a connection:
 * that start then sends on it. Any other mark stays (a call on that
 * reservation may have reached the provider): that start reserves past
 * it. */
static void pacer_unarm(struct pacer *pc)
{
    struct pacer_item *lists[3] = {NULL, NULL, NULL}, *unsent = NULL, *it, *next, **pp;
    int i;

    pthread_mutex_lock(&pc->mu);
    lists[0] = pc->slotted;
    lists[1] = pc->armed;
    pc->slotted = pc->slotted_tail = pc->armed = pc->armed_tail = NULL;
    pc->n_armed = 0;
    /* The retry list: one that missed its slot is 'sending' in Redis and
     * goes back to 'queued' as the others above; one whose call was never
     * written (refused a connection: pacer_retry) is 'queued' already and
     * only gives its mark back. */
    for (pp = &pc->retry; (it = *pp) != NULL;) {
        if (it->missed || pacer_mark_unspent(it)) {
            struct pacer_item **to = it->missed ? &lists[2] : &unsent;
            *pp = it->next;
            it->next = *to;
            *to = it;
        } else {
            pp = &it->next;
        }
    }
    pthread_mutex_unlock(&pc->mu);
    for (i = 0; i < 3; i++)
        for (it = lists[i]; it; it = next) {
            next = it->next;
            snprintf(it->detail, sizeof(it->detail), "otpd stopped before its slot");
            it->unmark = pacer_mark_unspent(it);
            pacer_job(pc, it, PACER_JOB_RETRY);
        }
    for (it = unsent; it; it = next) {
        next = it->next;
        pacer_unmark(pc, it);
        pacer_retry_list(pc, it);
    }
}

static void *pacer_queue_main(void *arg)
{
    struct pacer *pc = arg;
    uint64_t next_touch = 0, next_takeover = 0, idle_until = 0, next_depth = 0;
    uint64_t touch_ns = (uint64_t)pc->cfg->takeover_ms * SCHED_NS_PER_MS / 3;
    int stop = 0, stopping;

    while (!stop) {
        uint64_t now, wait_ns = (uint64_t)PACER_POLL_MS * SCHED_NS_PER_MS;
        int64_t pause_ms;
        pacer_jobs(pc);
        pthread_mutex_lock(&pc->mu);
        pause_ms = pc->pause_ms;
        pc->pause_ms = 0;
        pthread_mutex_unlock(&pc->mu);
        if (pause_ms > 0) {
            char err[OTP_ERR_LEN] = "";
            if (queue_pause(pc->queue, pause_ms * 1000, err) != OTP_OK)
                log_msg(LOG_WARN, "pacer: cannot pause the fleet's slots (this instance's sends pause): %s", err);
        }
        now = clock_mono_ns();
        pthread_mutex_lock(&pc->mu);
        stopping = pc->stopping;
        pthread_mutex_unlock(&pc->mu);
        if (now >= next_depth) {
            pacer_depth_refresh(pc); /* for /metrics: claims read it too, but not while the bulkhead is full */
            next_depth = now + SCHED_NS_PER_S;
        }
        if (now >= next_touch) {
            pacer_touch(pc);
            next_touch = now + touch_ns;
        }
        if (stopping) {
            /* No new claims: what this instance holds stays its own. */
        } else if (pc->resync) {
            /* This instance's own messages it does not hold: from before a
             * restart, or handed over by a claim whose reply was lost. */
            if (pacer_claim(pc, QUEUE_OWN, 16) >= 0 && strcmp(pc->own_cursor, "0-0") == 0)
                pc->resync = 0;
        } else if (now >= next_takeover) {
            if (pacer_claim(pc, QUEUE_TAKEOVER, 16) >= 0)
                next_takeover = now + touch_ns;
        }
        while (pacer_room(pc)) {
            struct pacer_item *it = pacer_pick(pc, clock_mono_ns(), &wait_ns);
            if (it == NULL && clock_mono_ns() >= idle_until) {
                int got = pacer_claim(pc, QUEUE_NEW, PACER_AHEAD);
                if (got <= 0) {
                    idle_until = clock_mono_ns() + (uint64_t)PACER_POLL_MS * SCHED_NS_PER_MS;
                    break;
                }
                continue;
            }
            if (it == NULL)
                break;
            pacer_prepare(pc, it);
            pacer_jobs(pc);
            wait_ns = pacer_arm_due(pc, wait_ns);
        }
        wait_ns = pacer_arm_due(pc, wait_ns);
        stop = pacer_qwait(pc, (int64_t)(wait_ns / SCHED_NS_PER_MS) + 1);
        if (stop) {
            pacer_jobs(pc); /* a missed slot's job puts it on the retry list, for pacer_unarm */
            pacer_unarm(pc);
            pacer_jobs(pc); /* the last outcomes: one more try each if Redis fails */
        }
    }
    return NULL;
}

/* ---- the API ---- */

enum otp_rc pacer_start(struct pacer *pc, const struct pacer_render *render, char *err)
{
    pc->render = *render;
    log_msg(LOG_INFO, "pacer: instance %s of the fleet, %d sends a second shared, takeover after %lld ms",
            pc->consumer, pc->cfg->rate, (long long)pc->cfg->takeover_ms);
    if (pthread_create(&pc->qthread, NULL, pacer_queue_main, pc) != 0) {
        snprintf(err, OTP_ERR_LEN, "pacer: cannot start the queue thread");
        return OTP_EIO;
    }
    pc->qthread_started = 1;
    if (pthread_create(&pc->sender, NULL, pacer_sender_main, pc) != 0) {
        snprintf(err, OTP_ERR_LEN, "pacer: cannot start the sender thread");
        return OTP_EIO;
    }
    pc->sender_started = 1;
    return OTP_OK;
}

enum otp_rc pacer_import(struct pacer *pc, const struct ledger_message *m, int *added, char *err)
{
    struct queue_entry e;

    memset(&e, 0, sizeof(e));
    snprintf(e.id, sizeof(e.id), "%s", m->id);
    snprintf(e.vid, sizeof(e.vid), "%s", m->verification_id);
    snprintf(e.to, sizeof(e.to), "%s", m->phone);
    snprintf(e.caps, sizeof(e.caps), "%s", m->cost_caps ? m->cost_caps : "");
    e.expires_ms = m->expires_ms;
    e.price_minor = m->price_minor;
    e.cost_ms = m->cost_ms;
    return queue_import(pc->queue, &e, m->api_key, added, err);
}

enum otp_rc pacer_status(struct pacer *pc, const char *api_key, const char *id, char *state, char *err)
{
    char key[QUEUE_NAME_MAX];
    enum otp_rc rc = queue_get(pc->queue, id, key, sizeof(key), state, PACER_STATE_MAX, err);

    if (rc != OTP_OK)
        return rc;
    if (state[0] == '\0' || strcmp(key, api_key) != 0) {
        state[0] = '\0';
        return OTP_ENOTFOUND;
    }
    return OTP_OK;
}

enum otp_rc pacer_report(struct pacer *pc, const char *id, int delivered, int *moved, char *err)
{
    return queue_report(pc->queue, id, delivered ? "delivered" : "failed", moved, err);
}

int pacer_cancel(struct pacer *pc, const char *vid)
{
    struct pacer_item *it;
    int n = 0;

    pthread_mutex_lock(&pc->mu);
    for (it = pc->registry; it; it = it->rnext)
        if (strcmp(it->e.vid, vid) == 0 && !it->cancelled)
            it->cancelled = 1, n++;
    pthread_mutex_unlock(&pc->mu);
    return n;
}

static void pacer_list_free(struct pacer *pc, struct pacer_item *it)
{
    while (it) {
        struct pacer_item *next = it->next;
        pacer_item_free(pc, it);
        it = next;
    }
}

void pacer_stop(struct pacer *pc, int64_t grace_ms)
{
    uint64_t deadline = clock_mono_ns() + (uint64_t)grace_ms * SCHED_NS_PER_MS;

    if (pc == NULL)
        return;
    pthread_mutex_lock(&pc->mu);
    pc->stopping = 1;
    pthread_mutex_unlock(&pc->mu);
    if (pc->sender_started) {
        xfer_wakeup(pc->xfer);
        pthread_join(pc->sender, NULL);
        pc->sender_started = 0;
        /* Let calls in flight finish; their outcomes go to Redis below. */
        while (xfer_inflight(pc->xfer) > 0 && clock_mono_ns() < deadline)
            xfer_poll(pc->xfer, 20);
    }
    if (pc->qthread_started) {
        pthread_mutex_lock(&pc->mu);
        pc->qstop = 1;
        pthread_mutex_unlock(&pc->mu);
        pacer_kick(pc);
        pthread_join(pc->qthread, NULL);
        pc->qthread_started = 0;
    }
}

void pacer_free(struct pacer *pc)
{
    if (pc == NULL)
        return;
    pacer_stop(pc, 0);
    /* Calls still in flight end here (unknown when written); their
     * messages stay claimed in the stream for the next start. */
    xfer_free(pc->xfer);
    pc->xfer = NULL;
    pacer_list_free(pc, pc->jobs);
    pacer_list_free(pc, pc->buf);
    pacer_list_free(pc, pc->retry);
    pacer_list_free(pc, pc->armed);
    pacer_list_free(pc, pc->slotted);
    pc->jobs = pc->buf = pc->retry = pc->armed = pc->slotted = NULL;
    queue_free(pc->queue);
    pthread_mutex_destroy(&pc->mu);
    pthread_mutex_destroy(&pc->wmu);
    pthread_cond_destroy(&pc->wcond);
    free(pc);
}

void pacer_stats(struct pacer *pc, struct pacer_stats *out)
{
    pthread_mutex_lock(&pc->mu);
    *out = pc->stats;
    out->depth = pc->depth > 0 ? (uint64_t)pc->depth : 0;
    out->inflight = (uint64_t)pc->inflight;
    pthread_mutex_unlock(&pc->mu);
}

int pacer_full(struct pacer *pc)
{
    int full;

    pacer_depth_refresh(pc); /* afresh when Redis answers (any thread may ask), else the last look */
    pthread_mutex_lock(&pc->mu);
    full = pc->stopping || pc->depth >= pc->cfg->capacity;
    pthread_mutex_unlock(&pc->mu);
    return full;
}

size_t pacer_metrics(struct pacer *pc, char *out, size_t cap)
{
    struct pacer_stats st;
    const char *cur = pc->site.currency[0] ? pc->site.currency : "none";
    size_t n = 0;
    int i, k;

    pacer_stats(pc, &st);
#define PACER_PUT(...)                                                                                                 \
    do {                                                                                                               \
        k = snprintf(out + n, cap - n, __VA_ARGS__);                                                                   \
        if (k < 0 || (size_t)k >= cap - n)                                                                             \
            return n;                                                                                                  \
        n += (size_t)k;                                                                                                \
    } while (0)
    if (cap == 0)
        return 0;
    out[0] = '\0';
    PACER_PUT("# HELP otpd_spend_minor_total Price of provider attempts the provider could bill, each counted "
              "once when it could first be billed: unknown (its request was written, no verdict yet) or "
              "accepted (delivered in place).\n"
              "# TYPE otpd_spend_minor_total counter\n"
              "otpd_spend_minor_total{currency=\"%s\",outcome=\"accepted\"} %llu\n"
              "otpd_spend_minor_total{currency=\"%s\",outcome=\"unknown\"} %llu\n",
              cur, (unsigned long long)st.spend_accepted_minor, cur, (unsigned long long)st.spend_unknown_minor);
    PACER_PUT("# HELP otpd_spend_settled_minor_total The same attempts once their verdict is in: accepted (2xx), "
              "unknown (timeout, reset, 408, 5xx) or unbilled (429, other 4xx).\n"
              "# TYPE otpd_spend_settled_minor_total counter\n"
              "otpd_spend_settled_minor_total{currency=\"%s\",outcome=\"accepted\"} %llu\n"
              "otpd_spend_settled_minor_total{currency=\"%s\",outcome=\"unknown\"} %llu\n"
              "otpd_spend_settled_minor_total{currency=\"%s\",outcome=\"unbilled\"} %llu\n",
              cur, (unsigned long long)st.settled_accepted_minor, cur, (unsigned long long)st.settled_unknown_minor,
              cur, (unsigned long long)st.settled_unbilled_minor);
    PACER_PUT("# HELP otpd_provider_attempts_total Provider attempts by cause (see provider.c).\n"
              "# TYPE otpd_provider_attempts_total counter\n");
    for (i = 0; i < PROVIDER_C_COUNT; i++)
        PACER_PUT("otpd_provider_attempts_total{cause=\"%s\"} %llu\n",
                  provider_cause_row((enum provider_cause)i)->name, (unsigned long long)st.cause[i]);
    PACER_PUT("# HELP otpd_cost_refunds_total Cost reservations given back, by result.\n"
              "# TYPE otpd_cost_refunds_total counter\n"
              "otpd_cost_refunds_total{result=\"refunded\"} %llu\n"
              "otpd_cost_refunds_total{result=\"already\"} %llu\n"
              "otpd_cost_refunds_total{result=\"anomaly\"} %llu\n"
              "otpd_cost_refunds_total{result=\"lost\"} %llu\n"
              "otpd_cost_refunds_total{result=\"kept\"} %llu\n"
              "otpd_cost_refunds_total{result=\"taken_over\"} %llu\n"
              "# HELP otpd_cost_reservations_total Reservations the pacer asked for a retry, by result.\n"
              "# TYPE otpd_cost_reservations_total counter\n"
              "otpd_cost_reservations_total{result=\"taken\"} %llu\n"
              "otpd_cost_reservations_total{result=\"cost_cap\"} %llu\n"
              "# HELP otpd_pacer_paused_total Times a provider 429 paused every send.\n"
              "# TYPE otpd_pacer_paused_total counter\notpd_pacer_paused_total %llu\n"
              "# HELP otpd_pacer_ledger_failures_total Pacer ledger writes that failed twice (logged).\n"
              "# TYPE otpd_pacer_ledger_failures_total counter\notpd_pacer_ledger_failures_total %llu\n",
              (unsigned long long)st.refunds, (unsigned long long)st.refund_dups,
              (unsigned long long)st.refund_anomalies, (unsigned long long)st.refunds_lost,
              (unsigned long long)st.refunds_kept, (unsigned long long)st.refunds_taken_over,
              (unsigned long long)st.reservations, (unsigned long long)st.reserve_refused,
              (unsigned long long)st.paused_429, (unsigned long long)st.ledger_failures);
    PACER_PUT("# HELP otpd_queue_capacity The fleet's queue capacity (pacer.capacity).\n"
              "# TYPE otpd_queue_capacity gauge\notpd_queue_capacity %d\n"
              "# HELP otpd_pacer_claims_total Messages this instance claimed from the fleet's queue, by how: "
              "takeover (from a silent instance), restart (its own, at start).\n"
              "# TYPE otpd_pacer_claims_total counter\n"
              "otpd_pacer_claims_total{how=\"takeover\"} %llu\n"
              "otpd_pacer_claims_total{how=\"restart\"} %llu\n"
              "# HELP otpd_pacer_claims_lost_total Claims another instance took over while this one held them.\n"
              "# TYPE otpd_pacer_claims_lost_total counter\notpd_pacer_claims_lost_total %llu\n"
              "# HELP otpd_pacer_slots_total Send slots this instance took from the fleet's GCRA, by use.\n"
              "# TYPE otpd_pacer_slots_total counter\n"
              "otpd_pacer_slots_total{use=\"taken\"} %llu\n"
              "otpd_pacer_slots_total{use=\"missed\"} %llu\n"
              "otpd_pacer_slots_total{use=\"unplaced\"} %llu\n"
              "# HELP otpd_pacer_slot_wait_seconds_total Time from taking each slot to the slot, summed.\n"
              "# TYPE otpd_pacer_slot_wait_seconds_total counter\notpd_pacer_slot_wait_seconds_total %.6f\n",
              pc->cfg->capacity, (unsigned long long)st.takeovers, (unsigned long long)st.restored,
              (unsigned long long)st.lost, (unsigned long long)st.slots, (unsigned long long)st.slots_missed,
              (unsigned long long)st.slots_refused, (double)st.slot_wait_us / 1e6);
#undef PACER_PUT
    return n;
}

enum otp_rc pacer_states(struct pacer *pc, const char *const *ids, int n,
                         void (*put)(void *ctx, int i, const char *state, const char *detail), void *ctx,
                         char *err)
{
    return queue_states(pc->queue, ids, n, put, ctx, err);
}
