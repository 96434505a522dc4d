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
 * included, even when a new connection is slow to open. At start the ring
 * is seeded from the ledger, so a restart keeps the spacing of the sends
 * before it. A provider 429 pauses every send, not only its message's.
 *
 * Money. Each attempt is classified by provider_cause_row: never reached
 * (not billed: the message keeps its reservation for a retry, or gives it
 * back when it ends), outcome unknown or accepted (billed: the reservation
 * is spent and counted in otpd_spend_minor_total). A retry after a billed
 * attempt needs a new reservation, taken against every cap; refunds and
 * reservations run on a second thread (the money thread, a FIFO bounded by
 * the queue's capacity), so the thread that owns the wire waits on nothing
 * but its clock and curl. A message goes back to the ready list only once
 * it holds its reservation. When it is due, a priced message goes to the
 * money thread once more, to mark that reservation used in Redis (a
 * restart reads the mark, since the ledger's 'sending' row is written
 * asynchronously), and comes back to be sent next; meanwhile the sender
 * picks nothing else but keeps serving curl. The spend is counted when a
 * request is written (curl's prereq), once per call.
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
#include "../base/log.h"
#include "../otp/code.h"

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

/* A pause after a 429 without Retry-After: base << n, within these. */
#define PACER_PAUSE_MIN_MS 1000
#define PACER_PAUSE_MAX_MS 60000
/* The money thread's wait before it asks a failing Redis again. */
#define PACER_MONEY_RETRY_MS 500

/* What the money thread is asked to do with an item: take (or find) its
 * reservation, mark it used just before its call goes out, or give it
 * back. */
enum pacer_job { PACER_JOB_RESERVE, PACER_JOB_USE, PACER_JOB_REFUND };

/* A queued or waiting message. */
struct pacer_item {
    struct pacer_item *next;
    struct pacer_msg m;
    uint64_t not_before_ns; /* retries only: not sent before this */
    int64_t issue_ms;       /* Redis time of the issue's reservation (number 1) */
    enum pacer_job job;     /* on the money thread's list */
    int need;               /* PACER_JOB_RESERVE: the reservation asked for */
    int cancelled;          /* 1: its verification was cancelled; guarded by pacer.mu */
    int restored;           /* put back at start: its first reservation looks past Redis's u */
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
    int wrote;              /* 1 once curl was about to write the request: from then it may be billed */
    char errbuf[CURL_ERROR_SIZE];
};

struct pacer {
    const struct config *cfg;
    struct provider *provider;
    struct ledger *ledger;
    struct pacer_money money;
    int has_money;
    int64_t min_life_ms; /* min(30 s, ttl / 4): less than this left, a code is not sent */
    CURLM *multi;
    pthread_t thread;
    int started;
    uint64_t period_ns;
    uint64_t *ring; /* when each of the last `rate` requests went out; 0 none, PACER_PENDING not yet */
    struct pacer_xfer **owner; /* the transfer still in flight for each ring entry, or NULL */
    size_t ring_pos;
    struct pacer_xfer *xfers; /* calls in flight; pacer thread only */
    unsigned seed;
    uint64_t pause_until_ns;  /* after a 429: no send before this; pacer thread only */
    int n429;                 /* 429s in a row; pacer thread only */

    /* The money thread's FIFO; wmu is never held with mu. */
    pthread_t money_thread;
    int money_started;
    pthread_mutex_t wmu;
    pthread_cond_t wcond;
    struct pacer_item *jhead, *jtail;
    int jobs, jobs_max;
    int wstop;

    pthread_mutex_t mu; /* guards everything below */
    struct pacer_item *head, *tail; /* the queue, oldest first */
    struct pacer_item *retry;       /* waiting retries, by not_before_ns */
    struct pacer_item *pacing;      /* picked by the sender, not yet on the wire or ended */
    /* At most one message is marked used at a time, once it is due: while
     * arming, the sender picks nothing else; armed is the one back from the
     * money thread, sent next. */
    int arming;
    struct pacer_item *armed;
    int used;    /* reserved slots, queued, waiting retries and the one being paced */
    int queued;  /* in the queue proper */
    int stopping;
    int inflight; /* written by the pacer thread only */
    struct pacer_stats stats;
};

struct pacer *pacer_new(const struct config *c, struct provider *p, struct ledger *l,
                        const struct pacer_money *money, char *err)
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
    if (money != NULL) {
        pc->money = *money;
        pc->has_money = 1;
    }
    pc->min_life_ms = c->otp_ttl_ms / 4 < 30000 ? c->otp_ttl_ms / 4 : 30000;
    /* Every item is in one place at a time and items are bounded by the
     * queue's capacity (restored ones aside), so this bound is never the
     * limit in practice; reaching it is handled, not assumed away. */
    pc->jobs_max = 2 * c->pacer_capacity + c->pacer_max_inflight + 16;
    pc->period_ns = NS_PER_S / (uint64_t)c->pacer_rate;
    pc->seed = (unsigned)clock_mono_ns();
    pthread_mutex_init(&pc->mu, NULL);
    pthread_mutex_init(&pc->wmu, NULL);
    pthread_cond_init(&pc->wcond, NULL);
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

/* Counts one stat under the lock. */
#define PACER_COUNT(pc, field, n)                                                                                      \
    do {                                                                                                               \
        pthread_mutex_lock(&(pc)->mu);                                                                                 \
        (pc)->stats.field += (n);                                                                                      \
        pthread_mutex_unlock(&(pc)->mu);                                                                               \
    } while (0)

/*
 * Ledger writes of the pacer. A submission fails only when out of memory
 * or once the ledger is closing; it is tried once more, then logged and
 * counted (otpd_pacer_ledger_failures_total), never dropped silently. A
 * state change that never lands leaves the message 'queued' or 'sending',
 * which the next start settles (sent again, at least once).
 */
/* Wipes a message (its text holds the code) before it is freed; a memset
 * there is a dead store the optimiser drops. */
static void pacer_wipe(struct pacer_msg *m)
{
    code_wipe(m, sizeof(*m));
}

static void pacer_ledger_failed(struct pacer *pc, const char *what, const char *id)
{
    log_msg(LOG_ERROR, "ledger: cannot record %s of message %s; the next start settles it", what, id);
    PACER_COUNT(pc, ledger_failures, 1);
}

static void pacer_ledger_state(struct pacer *pc, const char *id, const char *state, const char *from,
                               const char *provider_id, const char *detail, int attempts, int64_t ts_ms)
{
    int tries;

    for (tries = 0; tries < 2; tries++)
        if (ledger_message_state(pc->ledger, id, state, from, provider_id, detail, attempts, ts_ms) == OTP_OK)
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

/* 1 when its code has too little life left to go on the wire now. */
static int pacer_too_late(const struct pacer *pc, const struct pacer_item *it, int64_t now_ms)
{
    return it->m.expires_ms - now_ms < pc->min_life_ms;
}

/* The price an attempt of it may cost: its reservation, else the list
 * price (no caps configured), else 0. */
static int64_t pacer_price(const struct pacer *pc, const struct pacer_item *it)
{
    int64_t p = it->m.price_minor >= 0 ? it->m.price_minor : config_price(pc->cfg, it->m.to);

    return p > 0 ? p : 0;
}

/* 1 when its cost is tracked against the caps. */
static int pacer_priced(const struct pacer *pc, const struct pacer_item *it)
{
    return pc->has_money && it->m.price_minor >= 0;
}

/* Ends an arming (pacer_arm): it, marked used, is sent next; NULL when the
 * message ended instead. The money thread (or the sender, on overflow). */
static void pacer_armed(struct pacer *pc, struct pacer_item *it)
{
    pthread_mutex_lock(&pc->mu);
    pc->arming = 0;
    pc->armed = it;
    pthread_mutex_unlock(&pc->mu);
    curl_multi_wakeup(pc->multi);
}

/* Hands it to the money thread; never blocks for long. On overflow a
 * reservation is not asked for (the message ends) and a refund is lost
 * (counted: the caps then hold more than was spent, never less). */
static void pacer_job(struct pacer *pc, struct pacer_item *it, enum pacer_job job)
{
    pthread_mutex_lock(&pc->wmu);
    if (pc->jobs < pc->jobs_max && !pc->wstop) {
        it->job = job;
        it->next = NULL;
        if (pc->jtail)
            pc->jtail->next = it;
        else
            pc->jhead = it;
        pc->jtail = it;
        pc->jobs++;
        pthread_cond_signal(&pc->wcond);
        pthread_mutex_unlock(&pc->wmu);
        return;
    }
    pthread_mutex_unlock(&pc->wmu);
    if (job == PACER_JOB_REFUND) {
        log_msg(LOG_ERROR, "pacer: refund of message %s dropped (money queue full or stopping)", it->m.id);
        PACER_COUNT(pc, refunds_lost, 1);
    } else {
        pacer_ledger_state(pc, it->m.id, "failed", "queued,sending", NULL, "no room to reserve its cost", -1,
                           clock_wall_ms());
        pthread_mutex_lock(&pc->mu);
        pc->used--;
        pc->stats.failed++;
        pthread_mutex_unlock(&pc->mu);
        if (job == PACER_JOB_USE)
            pacer_armed(pc, NULL);
    }
    pacer_wipe(&it->m);
    free(it);
}

/* Hands a due message to the money thread, which marks its reservation
 * used in Redis and gives it back through pacer_armed; the sender picks
 * nothing else meanwhile, so at most one message is marked and not yet on
 * the wire. The sender thread only. */
static void pacer_arm(struct pacer *pc, struct pacer_item *it)
{
    pthread_mutex_lock(&pc->mu);
    pc->arming = 1;
    pthread_mutex_unlock(&pc->mu);
    pacer_job(pc, it, PACER_JOB_USE);
}

/* Appends it to the queue; reserved says whether a slot is already taken. */
static void pacer_append(struct pacer *pc, struct pacer_item *it, int reserved)
{
    pthread_mutex_lock(&pc->mu);
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

static struct pacer_item *pacer_item_new(const struct pacer_msg *m)
{
    struct pacer_item *it = calloc(1, sizeof(*it));

    if (it != NULL) {
        it->m = *m;
        it->issue_ms = m->cost_ms;
    }
    return it;
}

void pacer_push(struct pacer *pc, const struct pacer_msg *m)
{
    struct pacer_item *it = pacer_item_new(m);

    if (it == NULL) {
        /* The message is 'queued' in the ledger: a restart sends it. */
        pacer_release(pc);
        return;
    }
    it->m.rsv_idx = 1; /* issue.lua's */
    it->m.held = 1;
    pacer_append(pc, it, 1);
}

void pacer_restore(struct pacer *pc, const struct pacer_msg *m)
{
    struct pacer_item *it = pacer_item_new(m);

    if (it == NULL)
        return; /* still 'queued' or 'sending' in the ledger: the next start */
    if (!pacer_priced(pc, it)) {
        it->m.held = 1;
        pacer_append(pc, it, 0);
        return;
    }
    /* What the message held before the restart is not known here: the call
     * of a 'sending' message may have been billed, and a reservation may
     * have been given back with its ledger row lost. Ask for one past every
     * attempt made; reserve.lua takes nothing when the issue's is still held
     * (no attempt yet). */
    it->m.held = 0;
    it->m.rsv_idx = 0;
    it->m.used = 0;
    it->need = it->m.attempts + 1; /* and past u: a call whose 'sending' row never landed */
    it->restored = 1;
    pthread_mutex_lock(&pc->mu);
    pc->used++;
    pthread_mutex_unlock(&pc->mu);
    pacer_job(pc, it, PACER_JOB_RESERVE);
}

/* Takes the next message to send: a due retry first, then the queue's
 * head. NULL when none; then *wait_ns is how long until a retry is due. */
static struct pacer_item *pacer_pick(struct pacer *pc, uint64_t now, uint64_t *wait_ns)
{
    struct pacer_item *it = NULL;

    *wait_ns = 200 * NS_PER_MS;
    pthread_mutex_lock(&pc->mu);
    if (pc->armed) {
        it = pc->armed;
        pc->armed = NULL;
    } else if (pc->arming) {
        /* One is being marked used: it goes next (curl_multi_wakeup ends the wait). */
    } else if (pc->retry && pc->retry->not_before_ns <= now) {
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

int pacer_cancel(struct pacer *pc, const char *vid)
{
    struct pacer_item *lists[2], *it;
    int i, n = 0;

    pthread_mutex_lock(&pc->mu);
    lists[0] = pc->head;
    lists[1] = pc->retry;
    for (i = 0; i < 2; i++)
        for (it = lists[i]; it; it = it->next)
            if (strcmp(it->m.vid, vid) == 0 && !it->cancelled)
                it->cancelled = 1, n++;
    if (pc->pacing && strcmp(pc->pacing->m.vid, vid) == 0 && !pc->pacing->cancelled)
        pc->pacing->cancelled = 1, n++;
    /* Back from being marked used, not yet on the wire: the sender picks
     * it next and ends it, and its reservation goes back like any unsent
     * one's (refund.lua gives a named reservation back, used mark or not). */
    if (pc->armed && strcmp(pc->armed->m.vid, vid) == 0 && !pc->armed->cancelled)
        pc->armed->cancelled = 1, n++;
    pthread_mutex_unlock(&pc->mu);
    return n;
}

/* The sender takes (it) or gives up (NULL) the item it paces; returns 1
 * when the item it gives up was cancelled meanwhile. */
static int pacer_pacing(struct pacer *pc, struct pacer_item *it)
{
    int cancelled = 0;

    pthread_mutex_lock(&pc->mu);
    if (it == NULL && pc->pacing != NULL)
        cancelled = pc->pacing->cancelled;
    pc->pacing = it;
    pthread_mutex_unlock(&pc->mu);
    return cancelled;
}

/* Frees the slot of a picked item that leaves the queue for good. */
static void pacer_slot_free(struct pacer *pc)
{
    pthread_mutex_lock(&pc->mu);
    pc->used--;
    pthread_mutex_unlock(&pc->mu);
}

/* Puts an item back at the queue's head (on stop, or a pause). */
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

/* Puts it on the retry list, in not_before order; its slot is counted. */
static void pacer_ready(struct pacer *pc, struct pacer_item *it)
{
    struct pacer_item **pp;

    pthread_mutex_lock(&pc->mu);
    for (pp = &pc->retry; *pp && (*pp)->not_before_ns <= it->not_before_ns; pp = &(*pp)->next)
        ;
    it->next = *pp;
    *pp = it;
    pthread_mutex_unlock(&pc->mu);
    curl_multi_wakeup(pc->multi);
}

/* Ends a message unsent or failed: ledger, counters, and its reservation
 * back if it still holds one (on the money thread). Its slot is already
 * free. Any thread. */
static void pacer_end(struct pacer *pc, struct pacer_item *it, const char *state, const char *detail)
{
    pacer_ledger_state(pc, it->m.id, state, "queued,sending", NULL, detail, it->m.attempts, clock_wall_ms());
    pthread_mutex_lock(&pc->mu);
    if (strcmp(state, "expired") == 0) {
        pc->stats.expired++;
        pc->stats.cause[PROVIDER_C_EXPIRED]++; /* never reached: not billed */
    } else {
        pc->stats.failed++;
    }
    pthread_mutex_unlock(&pc->mu);
    if (it->m.held && pacer_priced(pc, it) && it->m.price_minor > 0) {
        pacer_job(pc, it, PACER_JOB_REFUND);
        return;
    }
    pacer_wipe(&it->m);
    free(it);
}

/* Schedules a retry, or ends the message when retries or its life run out.
 * A retry after a call that may have been billed goes to the money thread
 * first for its reservation. */
static void pacer_retry(struct pacer *pc, struct pacer_item *it, int64_t retry_after_ms, const char *why)
{
    int64_t base = pc->cfg->pacer_retry_base_ms, backoff_ms, now_ms = clock_wall_ms();
    char detail[PROVIDER_ERR_MAX + 48];
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
    if (now_ms + backoff_ms + pc->min_life_ms > it->m.expires_ms) {
        snprintf(detail, sizeof(detail), "too little life left for a retry: %s", why);
        pacer_end(pc, it, "expired", detail);
        return;
    }
    snprintf(detail, sizeof(detail), "retry in %lld ms: %s", (long long)backoff_ms, why);
    pacer_ledger_state(pc, it->m.id, "queued", "sending", NULL, detail, it->m.attempts, now_ms);
    it->not_before_ns = clock_mono_ns() + (uint64_t)backoff_ms * NS_PER_MS;
    pthread_mutex_lock(&pc->mu);
    pc->used++;
    pc->stats.retried++;
    pthread_mutex_unlock(&pc->mu);
    if (pacer_priced(pc, it) && !it->m.held) {
        it->need = it->m.rsv_idx + 1;
        pacer_job(pc, it, PACER_JOB_RESERVE);
        return;
    }
    pacer_ready(pc, it);
}

/* A 429 pauses every send: for its Retry-After, else a backoff that grows
 * with each 429 in a row. The sender thread only. */
static void pacer_pause(struct pacer *pc, int64_t retry_after_ms)
{
    int64_t ms = retry_after_ms;
    uint64_t until;

    if (ms <= 0) {
        int shift = pc->n429 < 6 ? pc->n429 : 6;
        ms = pc->cfg->pacer_retry_base_ms << shift;
        if (ms < PACER_PAUSE_MIN_MS)
            ms = PACER_PAUSE_MIN_MS;
        if (ms > PACER_PAUSE_MAX_MS)
            ms = PACER_PAUSE_MAX_MS;
    }
    pc->n429++;
    until = clock_mono_ns() + (uint64_t)ms * NS_PER_MS;
    if (until > pc->pause_until_ns)
        pc->pause_until_ns = until;
    log_msg(LOG_WARN, "provider answered 429: every send paused for %lld ms", (long long)ms);
    PACER_COUNT(pc, paused_429, 1);
}

/* Records the outcome of one provider call and moves the message on.
 * written: its request was written, so its spend was counted then
 * (pacer_on_prereq); else a billed outcome (a delivery in place) counts
 * it now. */
static void pacer_outcome(struct pacer *pc, struct pacer_item *it, int written, long status, int64_t latency_ms,
                          struct provider_result *res)
{
    static const char *const outcome_names[] = {"sent", "transient", "permanent"};
    const struct provider_cause_info *ci = provider_cause_row(res->cause);
    int64_t price = pacer_price(pc, it);
    int billed = ci->cls != PROVIDER_UNREACHED;
    struct ledger_send s = {
        .ts_ms = clock_wall_ms(),
        .message_id = it->m.id,
        .attempt = it->m.attempts,
        .provider = pc->provider->ops->name,
        .http_status = status,
        .latency_ms = latency_ms,
        .outcome = outcome_names[ci->outcome],
        .provider_id = res->provider_id[0] ? res->provider_id : NULL,
        .error = res->error[0] ? res->error : NULL,
        .cost_minor = billed ? price : 0,
    };

    pacer_ledger_send(pc, &s);
    pthread_mutex_lock(&pc->mu);
    pc->stats.cause[res->cause < PROVIDER_C_COUNT ? res->cause : PROVIDER_C_BROKEN]++;
    if (!written && ci->cls == PROVIDER_ACCEPTED)
        pc->stats.spend_accepted_minor += (uint64_t)price;
    else if (!written && ci->cls == PROVIDER_UNKNOWN)
        pc->stats.spend_unknown_minor += (uint64_t)price;
    if (written || billed) {
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
        it->m.held = 0; /* spent: the provider may bill it */
    if (res->cause == PROVIDER_C_429)
        pacer_pause(pc, res->retry_after_ms);
    else if (ci->cls == PROVIDER_ACCEPTED)
        pc->n429 = 0;
    if (res->cause == PROVIDER_C_4XX)
        log_msg(LOG_ERROR, "provider refused message %s for good (%s): check the credentials", it->m.id,
                res->error);
    if (ci->cls == PROVIDER_ACCEPTED) {
        pacer_ledger_state(pc, it->m.id, "sent", "queued,sending", s.provider_id, NULL, it->m.attempts, s.ts_ms);
        PACER_COUNT(pc, sent, 1);
        pacer_wipe(&it->m);
        free(it);
    } else if (ci->retry) {
        pacer_retry(pc, it, res->retry_after_ms, res->error);
    } else {
        pacer_end(pc, it, "failed", res->error);
    }
}

/* The money thread's wait between tries while Redis fails; 1 if stopping. */
static int pacer_money_nap(struct pacer *pc)
{
    struct timespec ts;
    int stop;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(PACER_MONEY_RETRY_MS * (int64_t)NS_PER_MS);
    ts.tv_sec += ts.tv_nsec / (long)NS_PER_S;
    ts.tv_nsec %= (long)NS_PER_S;
    pthread_mutex_lock(&pc->wmu);
    if (!pc->wstop)
        pthread_cond_timedwait(&pc->wcond, &pc->wmu, &ts);
    stop = pc->wstop;
    pthread_mutex_unlock(&pc->wmu);
    return stop;
}

/* Gives back its reservation (once: refund.lua marks it), then frees it.
 * While Redis fails it tries again; when stopping, once more only. */
static void pacer_refund_now(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "";
    int result = 0, warned = 0, stopping = 0;

    for (;;) {
        if (pc->money.refund(pc->money.ctx, it->m.id, it->m.rsv_idx, it->m.price_minor, it->issue_ms,
                             it->m.cost_caps, &result, err) == OTP_OK)
            break;
        if (stopping) {
            /* The caps then hold more than was spent, never less. */
            log_msg(LOG_ERROR, "pacer: refund of message %s lost at stop: %s", it->m.id, err);
            PACER_COUNT(pc, refunds_lost, 1);
            goto out;
        }
        if (!warned++)
            log_msg(LOG_WARN, "pacer: refund of message %s waits for Redis: %s", it->m.id, err);
        stopping = pacer_money_nap(pc); /* when stopping, one more try */
    }
    if (result == 1) {
        PACER_COUNT(pc, refunds, 1);
    } else if (result == 2) {
        log_msg(LOG_INFO, "pacer: message %s ended after a restart; its cost is kept: its call may have left",
                it->m.id);
        PACER_COUNT(pc, refunds_kept, 1);
    } else if (result == 0) {
        PACER_COUNT(pc, refund_dups, 1);
    } else {
        log_msg(LOG_ERROR, "pacer: refund of message %s reservation %d refused: not its latest (anomaly)",
                it->m.id, it->m.rsv_idx);
        PACER_COUNT(pc, refund_anomalies, 1);
    }
out:
    pacer_wipe(&it->m);
    free(it);
}

/* Gets it the reservation it needs, then makes it ready; or ends it when a
 * cap has no room or its code runs out of life first. For PACER_JOB_USE the
 * reservation it holds is marked used and it goes back to the sender
 * (pacer_armed), which sends it next. */
static void pacer_reserve_now(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "", why[96] = "", detail[160];
    int ok = 0, idx = 0, warned = 0, arming = it->job == PACER_JOB_USE;
    int need = arming ? it->m.rsv_idx : it->need;
    enum pacer_use use = arming ? PACER_USE : it->restored ? PACER_RESTORE : PACER_RESERVE;
    int64_t at_ms = 0;

    for (;;) {
        if (pacer_too_late(pc, it, clock_wall_ms())) {
            /* A restored message never tried has spent nothing: its latest
             * reservation goes back (once), unless Redis shows it was used
             * on the wire (refund.lua). One that was tried may have
             * spent it, and what may be spent is never given back. */
            if (it->m.attempts == 0) {
                it->m.rsv_idx = 0; /* its latest, whatever a restart took */
                it->m.held = 1;
            }
            pacer_slot_free(pc);
            pacer_end(pc, it, "expired", "too little life left while its cost was reserved");
            goto ended;
        }
        if (pc->money.reserve(pc->money.ctx, it->m.id, need, use, it->m.price_minor, it->issue_ms, &ok, &idx,
                              &at_ms, why, sizeof(why), err) == OTP_OK)
            break;
        if (!warned++)
            log_msg(LOG_WARN, "pacer: cost reservation of message %s waits for Redis: %s", it->m.id, err);
        if (pacer_money_nap(pc)) {
            /* Stopping: the message stays 'queued' in the ledger for the next start. */
            pacer_slot_free(pc);
            pacer_wipe(&it->m);
            free(it);
            goto ended;
        }
    }
    if (!ok) {
        PACER_COUNT(pc, reserve_refused, 1);
        snprintf(detail, sizeof(detail), "cost_cap: %s", why);
        pacer_slot_free(pc);
        pacer_end(pc, it, "failed", detail);
        goto ended;
    }
    if (idx != it->m.rsv_idx)
        PACER_COUNT(pc, reservations, 1);
    it->m.rsv_idx = idx;
    it->m.cost_ms = at_ms;
    it->m.held = 1;
    it->restored = 0;
    if (arming) {
        it->m.used = idx;
        pacer_armed(pc, it);
        return;
    }
    pacer_ready(pc, it);
    return;
ended:
    if (arming)
        pacer_armed(pc, NULL);
}

static void *pacer_money_main(void *arg)
{
    struct pacer *pc = arg;
    int stop;

    for (;;) {
        struct pacer_item *it;
        pthread_mutex_lock(&pc->wmu);
        while (pc->jhead == NULL && !pc->wstop)
            pthread_cond_wait(&pc->wcond, &pc->wmu);
        if ((it = pc->jhead) == NULL) {
            pthread_mutex_unlock(&pc->wmu);
            break;
        }
        pc->jhead = it->next;
        if (pc->jhead == NULL)
            pc->jtail = NULL;
        pc->jobs--;
        stop = pc->wstop;
        pthread_mutex_unlock(&pc->wmu);
        it->next = NULL;
        if (stop && it->job != PACER_JOB_REFUND) {
            /* Stopping: the message is 'queued' in the ledger; the next start reserves. */
            if (it->job == PACER_JOB_USE)
                pacer_armed(pc, NULL);
            pacer_slot_free(pc);
            pacer_wipe(&it->m);
            free(it);
        } else if (it->job == PACER_JOB_REFUND)
            pacer_refund_now(pc, it);
        else
            pacer_reserve_now(pc, it);
    }
    return NULL;
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
    if (!x->wrote) {
        /* From here the provider may bill it: counted now, once per call,
         * so the spend never reads less than what could be billed, even
         * while the call is on the wire or cut off by a stop. */
        int64_t price = pacer_price(x->pc, x->item);
        PACER_COUNT(x->pc, spend_unknown_minor, (uint64_t)price);
    }
    x->wrote = 1;
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
    code_wipe(&x->req, sizeof(x->req)); /* its body or URL holds the code */
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
    pacer_ledger_state(pc, it->m.id, "sending", "queued,sending", NULL, NULL, it->m.attempts, clock_wall_ms());
    if (x == NULL) {
        pacer_ring_unsent(pc, slot);
        snprintf(res.error, sizeof(res.error), "out of memory");
        provider_set_cause(&res, PROVIDER_C_UNSENT);
        pacer_outcome(pc, it, 0, 0, 0, &res);
        return;
    }
    rc = pc->provider->ops->prepare(pc->provider->self, &sms, &x->req, &done, &res);
    if (rc != OTP_OK || done) {
        if (done)
            pc->ring[slot] = t0; /* delivered in place, as of now */
        else
            pacer_ring_unsent(pc, slot);
        if (rc != OTP_OK) {
            provider_set_cause(&res, PROVIDER_C_LOCAL);
            snprintf(res.error, sizeof(res.error), "cannot build the request (%s)", otp_rc_str(rc));
        }
        pacer_outcome(pc, it, 0, 0, (int64_t)((clock_mono_ns() - t0) / NS_PER_MS), &res);
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
        provider_set_cause(&res, PROVIDER_C_UNSENT);
        pacer_outcome(pc, it, 0, 0, 0, &res);
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
        provider_set_cause(&res, PROVIDER_C_UNSENT);
        pacer_outcome(pc, it, 0, 0, 0, &res);
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
        if (msg->data.result != CURLE_OK) {
            /* No answer. Once curl was about to write the request, the
             * provider may have it: billed, whatever the error says. */
            if (!x->wrote)
                provider_set_cause(&res, PROVIDER_C_UNSENT);
            else if (msg->data.result == CURLE_OPERATION_TIMEDOUT)
                provider_set_cause(&res, PROVIDER_C_TIMEOUT);
            else
                provider_set_cause(&res, PROVIDER_C_BROKEN);
            snprintf(res.error, sizeof(res.error), "%s", curl_easy_strerror(msg->data.result));
        }
        if (res.retry_after_ms == 0)
            res.retry_after_ms = x->retry_after_ms;
        pacer_detach(pc, x);
        pacer_ring_release(pc, x);
        pacer_outcome(pc, x->item, x->wrote, status, (int64_t)((clock_mono_ns() - x->start_ns) / NS_PER_MS),
                      &res);
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

static int pacer_stopping(struct pacer *pc);

/* Sleeps until the absolute monotonic time due_ns, serving transfers; a stop
 * ends the sleep (a 429's pause can be a minute long). */
static void pacer_sleep_until(struct pacer *pc, uint64_t due_ns)
{
    for (;;) {
        uint64_t now = clock_mono_ns();
        struct timespec ts;
        if (now >= due_ns || pacer_stopping(pc))
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
        pacer_pacing(pc, it);
        if (pacer_pacing(pc, NULL)) {
            pacer_slot_free(pc);
            pacer_end(pc, it, "failed", "cancelled");
            continue;
        }
        if (pacer_too_late(pc, it, clock_wall_ms())) {
            pacer_slot_free(pc);
            pacer_end(pc, it, "expired", "too little life left in the queue");
            continue;
        }
        pacer_pacing(pc, it); /* a cancel from here on marks it */
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
        if (pc->pause_until_ns > due)
            due = pc->pause_until_ns; /* a 429 holds every send */
        pacer_sleep_until(pc, due);
        while (pc->inflight >= pc->cfg->pacer_max_inflight && !pacer_stopping(pc))
            pacer_wait(pc, 50 * NS_PER_MS); /* the bulkhead is full: wait, then send one */
        if (pacer_pacing(pc, NULL)) {
            pacer_slot_free(pc);
            pacer_end(pc, it, "failed", "cancelled");
            continue;
        }
        if (pacer_stopping(pc)) {
            pacer_unpick(pc, it);
            break;
        }
        if (pc->pause_until_ns > clock_mono_ns()) {
            /* A 429 came in while this one waited: it goes when the pause ends. */
            it->not_before_ns = pc->pause_until_ns;
            pacer_ready(pc, it);
            continue;
        }
        if (pacer_priced(pc, it) && it->m.used < it->m.rsv_idx) {
            /* Due: its reservation is marked used in Redis (on the money
             * thread) before the call goes out, so a restart after a crash
             * that lost the 'sending' row never sends again on it. */
            pacer_arm(pc, it);
            continue;
        }
        pacer_slot_free(pc);
        if (pacer_too_late(pc, it, clock_wall_ms())) {
            pacer_end(pc, it, "expired", "too little life left when it would go on the wire");
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

/* Fills the ring with the ledger's last calls, so the first sends after a
 * start keep their spacing: each entry is a time the call had surely left,
 * moved onto the monotonic clock. */
static void pacer_seed(struct pacer *pc)
{
    int64_t now_ms = clock_wall_ms(), *times = calloc((size_t)pc->cfg->pacer_rate, sizeof(*times));
    uint64_t now_ns = clock_mono_ns();
    char err[OTP_ERR_LEN] = "";
    int got = 0, i, rate = pc->cfg->pacer_rate;

    if (times == NULL || ledger_wire_times(pc->ledger, now_ms - pc->cfg->pacer_timeout_ms - 2000, now_ms, rate,
                                           times, &got, err) != OTP_OK) {
        /* Without the history, wait a second before the first send. */
        log_msg(LOG_WARN, "pacer: cannot read the last sends (%s); the first send waits a second",
                err[0] ? err : "out of memory");
        pc->pause_until_ns = now_ns + NS_PER_S + PACER_MARGIN_NS;
        free(times);
        return;
    }
    /* Newest first in times; the ring's oldest entry is at ring_pos 0. */
    for (i = 0; i < got; i++) {
        int64_t age_ms = now_ms - times[i] > 0 ? now_ms - times[i] : 0;
        uint64_t age_ns = (uint64_t)age_ms * NS_PER_MS;
        pc->ring[rate - 1 - i] = age_ns < now_ns ? now_ns - age_ns : 0;
    }
    pc->ring_pos = 0;
    free(times);
}

enum otp_rc pacer_start(struct pacer *pc, char *err)
{
    pacer_seed(pc);
    if (pthread_create(&pc->money_thread, NULL, pacer_money_main, pc) != 0) {
        snprintf(err, OTP_ERR_LEN, "pacer: cannot start the money thread");
        return OTP_EIO;
    }
    pc->money_started = 1;
    if (pthread_create(&pc->thread, NULL, pacer_main, pc) != 0) {
        snprintf(err, OTP_ERR_LEN, "pacer: cannot start the thread");
        return OTP_EIO;
    }
    pc->started = 1;
    return OTP_OK;
}

/* Stops the money thread once the sender is done: refunds queued by then
 * are tried (once more if Redis fails); reservations wait for the next
 * start (their messages are 'queued' in the ledger). */
static void pacer_money_stop(struct pacer *pc)
{
    if (!pc->money_started)
        return;
    pthread_mutex_lock(&pc->wmu);
    pc->wstop = 1;
    pthread_cond_broadcast(&pc->wcond);
    pthread_mutex_unlock(&pc->wmu);
    pthread_join(pc->money_thread, NULL);
    pc->money_started = 0;
}

void pacer_stop(struct pacer *pc, int64_t grace_ms)
{
    uint64_t deadline = clock_mono_ns() + (uint64_t)grace_ms * NS_PER_MS;

    if (pc == NULL)
        return;
    if (!pc->started) {
        pacer_money_stop(pc);
        return;
    }
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
    pacer_money_stop(pc);
}

static void pacer_list_free(struct pacer_item *it)
{
    while (it) {
        struct pacer_item *next = it->next;
        pacer_wipe(&it->m);
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
    pacer_list_free(pc->armed); /* back from the money thread after the sender stopped */
    pacer_list_free(pc->jhead); /* jobs never taken: the money thread never started */
    pthread_mutex_destroy(&pc->mu);
    pthread_mutex_destroy(&pc->wmu);
    pthread_cond_destroy(&pc->wcond);
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

size_t pacer_metrics(struct pacer *pc, char *out, size_t cap)
{
    struct pacer_stats st;
    const char *cur = pc->cfg->currency[0] ? pc->cfg->currency : "none";
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
              (unsigned long long)st.refunds_kept,
              (unsigned long long)st.reservations, (unsigned long long)st.reserve_refused,
              (unsigned long long)st.paused_429, (unsigned long long)st.ledger_failures);
#undef PACER_PUT
    return n;
}
