/*
 * pacer_send: the sender thread, which owns the wire (xfer.c): it takes
 * the armed items in slot order, starts each call ahead of its slot by
 * the time calls take to be ready, and classifies each outcome, counts its
 * money and hands it back to the queue thread as a job. It waits on
 * nothing but its clock and curl: never on Redis, never on a lock held
 * across a call. At most max_inflight calls at once, at the fleet's rate.
 */
#include "pacer_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"

/* The ledger's name of each provider outcome (sends.outcome), and the log's. */
static const char *const pacer_outcome_names[] = {
    [PROVIDER_SENT] = "sent",
    [PROVIDER_TRANSIENT] = "transient",
    [PROVIDER_PERMANENT] = "permanent",
};

/* The ledger's 'sending' row of an attempt: once its request is written,
 * or when it ends without a wire (delivered in place, or failed before
 * writing); never for a call aborted before its slot (no attempt). */
static void pacer_sending(struct pacer *pc, struct pacer_item *it)
{
    if (!it->sending_logged)
        pacer_ledger_state(pc, it->e.id, MSG_SENDING, NULL, NULL, it->attempt);
    it->sending_logged = 1;
}

void pacer_xfer_wrote(void *ctx, void *item)
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
        pacer_end(pc, it, MSG_FAILED, it->detail, NULL);
        return;
    }
    backoff_ms = sched_backoff_ms(it->attempts, pc->cfg->retry_base_ms, (unsigned)rand_r(&pc->seed),
                                  retry_after_ms);
    if (clock_wall_ms() + backoff_ms + pacer_min_life(pc) > it->e.expires_ms) {
        snprintf(it->detail, sizeof(it->detail), "too little life left for a retry: %s", why);
        pacer_end(pc, it, MSG_EXPIRED, it->detail, NULL);
        return;
    }
    if (pacer_move(pc, it, MSG_QUEUED) != 0)
        return;
    snprintf(it->detail, sizeof(it->detail), "retry in %lld ms: %s", (long long)backoff_ms, why);
    pacer_ledger_state(pc, it->e.id, MSG_QUEUED, it->detail, NULL, it->attempt);
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
    const struct provider_result *res = &r->res;
    int auth = r->status == 401 || r->status == 403;

    if (ci->cls == PROVIDER_ACCEPTED)
        return;
    log_event(ci->outcome == PROVIDER_PERMANENT ? LOG_ERROR : LOG_WARN, "provider.failed",
              LOG_FIELDS(LOG_STR("provider", pacer_provider_name(pc)), LOG_INT("status", r->status),
                         LOG_STR("outcome", pacer_outcome_names[ci->outcome]), LOG_STR("cause", ci->name),
                         LOG_STR("reason", res->error), LOG_STR("message_id", it->e.id),
                         LOG_INT("attempt", it->attempt)),
              "provider %s %s message %s (HTTP %ld, %s)%s", pacer_provider_name(pc),
              ci->outcome == PROVIDER_PERMANENT ? "refused for good" : "failed", it->e.id, r->status, ci->name,
              auth ? ": check the credentials" : "");
}

/* The call's row in the ledger (its cost when it may be billed) and its
 * latency, when it reached the wire. */
static void pacer_record_call(struct pacer *pc, const struct pacer_item *it, const struct xfer_result *r,
                              const struct provider_cause_info *ci, int64_t price)
{
    const struct provider_result *res = &r->res;
    struct ledger_send s = {
        .ts_ms = clock_wall_ms(),
        .message_id = it->e.id,
        .attempt = it->attempt,
        .provider = pacer_provider_name(pc),
        .http_status = r->status,
        .latency_ms = r->latency_ms,
        .outcome = pacer_outcome_names[ci->outcome],
        .provider_id = res->provider_id[0] ? res->provider_id : NULL,
        .error = res->error[0] ? res->error : NULL,
        .cost_minor = ci->cls != PROVIDER_UNREACHED ? price : 0,
    };

    pacer_ledger_send(pc, &s);
    if (r->wrote) {
        metrics_observe_us(METRICS_H_PROVIDER, r->latency_us > 0 ? (uint64_t)r->latency_us : 0);
        pthread_mutex_lock(&pc->mu);
        pc->stats.latency_us_sum += r->latency_us > 0 ? (uint64_t)r->latency_us : 0;
        pc->stats.latency_n++;
        pthread_mutex_unlock(&pc->mu);
    }
}

/* Counts the attempt: its cause, its spend when it was billed without a
 * wire (the wire's was counted when written), and its settled money. */
static void pacer_settle(struct pacer *pc, const struct xfer_result *r, const struct provider_cause_info *ci,
                         int64_t price)
{
    enum provider_cause cause = r->res.cause;
    int billed = ci->cls != PROVIDER_UNREACHED;

    pthread_mutex_lock(&pc->mu);
    pc->stats.cause[cause < PROVIDER_C_COUNT ? cause : PROVIDER_C_BROKEN]++;
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
}

/* The breaker hears of one call's cause (PROVIDER_C_COUNT: it never left);
 * a call that says nothing of the provider's health is heard only when it
 * was the probe (it frees the probe for the next). Counts each opening. */
static void pacer_health(struct pacer *pc, struct pacer_item *it, enum provider_cause cause)
{
    enum breaker_event ev = cause < PROVIDER_C_COUNT ? provider_cause_row(cause)->health : BREAKER_NEUTRAL;
    uint64_t now = clock_mono_ns();
    int was_open, open;

    if (ev == BREAKER_NEUTRAL && !it->probe)
        return;
    it->probe = 0;
    pthread_mutex_lock(&pc->mu);
    was_open = breaker_state(&pc->breaker, now) == BREAKER_OPEN;
    breaker_record(&pc->breaker, ev, now);
    open = breaker_state(&pc->breaker, now) == BREAKER_OPEN;
    pc->stats.breaker_opened += open && !was_open;
    pthread_mutex_unlock(&pc->mu);
    if (open && !was_open)
        log_event(LOG_ERROR, "provider.breaker_open", LOG_FIELDS(LOG_STR("provider", pacer_lane(pc))),
                  "provider %s: breaker open after its calls failed; its messages fail over where a route "
                  "allows, the rest wait for its probe", pacer_lane(pc));
}

/* Hands it to the queue thread to move to it->fo_to, after cause. */
static void pacer_failover_job(struct pacer *pc, struct pacer_item *it, enum provider_cause cause)
{
    if (pacer_move(pc, it, MSG_QUEUED) != 0)
        return;
    it->fo_cause = cause;
    pacer_job(pc, it, PACER_JOB_FAILOVER);
}

/* One call ended (the sender thread, inside xfer_poll or xfer_start). */
void pacer_xfer_done(void *ctx, void *item, const struct xfer_result *r)
{
    struct pacer *pc = ctx;
    struct pacer_item *it = item;
    const struct provider_result *res = &r->res;
    const struct provider_cause_info *ci = provider_cause_row(res->cause);
    int64_t price = pacer_price(pc, it);

    pthread_mutex_lock(&pc->mu);
    pc->inflight--;
    pthread_mutex_unlock(&pc->mu);
    if (r->missed) {
        /* Never written: no attempt, no cost; a new slot. (A probe it
         * carried is free for the next call.) */
        pacer_health(pc, it, PROVIDER_C_COUNT);
        it->attempts--;
        it->missed = 1;
        PACER_COUNT(pc, slots_missed, 1);
        pacer_job(pc, it, PACER_JOB_RESLOT);
        return;
    }
    pacer_sending(pc, it);
    snprintf(it->attempt_rec, sizeof(it->attempt_rec), "%s:%s", pacer_lane(pc), ci->name);
    pacer_record_call(pc, it, r, ci, price);
    pacer_settle(pc, r, ci, price);
    if (ci->cls != PROVIDER_UNREACHED)
        it->held = 0; /* spent: the provider may bill it */
    if (res->cause == PROVIDER_C_429)
        pacer_pause(pc, res->retry_after_ms);
    else if (ci->cls == PROVIDER_ACCEPTED)
        pc->n429 = 0;
    pacer_log_failure(pc, it, r, ci);
    pacer_health(pc, it, res->cause);
    if (ci->cls == PROVIDER_ACCEPTED)
        pacer_end(pc, it, MSG_SENT, NULL, res->provider_id[0] ? res->provider_id : NULL);
    else if (ci->failover && (it->fo_to = pacer_failover_to(pc, it)) != NULL)
        pacer_failover_job(pc, it, res->cause);
    else if (ci->retry)
        pacer_retry(pc, it, res->retry_after_ms, res->error);
    else
        pacer_end(pc, it, MSG_FAILED, res->error, NULL);
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

/* Starts its call: one more attempt, in flight from here. */
static void pacer_launch(struct pacer *pc, struct pacer_item *it)
{
    struct sms sms = {it->e.id, it->e.to, it->text, it->dlr_query[0] ? it->dlr_query : NULL, clock_wall_ms(),
                      it->e.expires_ms};

    it->attempts++;
    it->sending_logged = 0;
    pthread_mutex_lock(&pc->mu);
    pc->inflight++;
    pthread_mutex_unlock(&pc->mu);
    xfer_start(pc->xfer, &sms, &it->slot, it);
}

/* 1 when the breaker lets its call go; it->probe says it is the half-open probe. */
static int pacer_breaker_allows(struct pacer *pc, struct pacer_item *it)
{
    uint64_t now = clock_mono_ns();
    int ok;

    pthread_mutex_lock(&pc->mu);
    it->probe = breaker_state(&pc->breaker, now) != BREAKER_CLOSED;
    ok = breaker_allow(&pc->breaker, now);
    pthread_mutex_unlock(&pc->mu);
    return ok;
}

void *pacer_sender_main(void *arg)
{
    struct pacer *pc = arg;

    while (!pacer_stopping(pc)) {
        struct pacer_item *it = pacer_next_armed(pc);
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
            pacer_end(pc, it, MSG_FAILED, "cancelled", NULL);
        } else if (pc->pause_until_ns > clock_mono_ns()) {
            /* A 429 came in after its slot was taken: a slot after the pause. */
            it->missed = 1;
            PACER_COUNT(pc, slots_missed, 1);
            pacer_job(pc, it, PACER_JOB_RESLOT);
        } else if (sched_too_late(it->e.expires_ms, clock_wall_ms(), pacer_min_life(pc))) {
            pacer_end(pc, it, MSG_EXPIRED, "too little life left when it would go on the wire", NULL);
        } else if (!pacer_breaker_allows(pc, it)) {
            /* Its breaker opened (or its one probe is out) after its slot
             * was taken: a slot later, no attempt; the queue thread fails
             * it over if a route allows. */
            it->missed = 1;
            PACER_COUNT(pc, slots_missed, 1);
            pacer_job(pc, it, PACER_JOB_RESLOT);
        } else {
            pacer_launch(pc, it);
        }
        xfer_poll(pc->xfer, 0);
    }
    return NULL;
}
