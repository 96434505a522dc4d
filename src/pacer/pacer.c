/*
 * pacer: the object and its API, start and stop; the items (one per
 * message claimed), their moves through msgstate's table and their ledger
 * rows. The threads, the lists and the locks: pacer_int.h. A few calls per
 * message from either thread; the API's calls from the HTTP workers are
 * one store call or a moment under mu each.
 */
#include "pacer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/wipe.h"

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
    breaker_init(&pc->breaker, site->breaker_failures, (uint64_t)site->breaker_open_ms * SCHED_NS_PER_MS);
    if ((pc->queue = queue_new(s, pc->consumer, site->lane)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "pacer: out of memory");
        pacer_free(pc);
        return NULL;
    }
    snprintf(pc->stream, sizeof(pc->stream), "%s", queue_stream(pc->queue));
    if ((pc->xfer = xfer_new(c, p, &hooks, err)) == NULL) {
        pacer_free(pc);
        return NULL;
    }
    return pc;
}

void pacer_set_failover(struct pacer *pc, const struct pacer_failover *f)
{
    pc->failover = *f;
}

const char *pacer_lane(const struct pacer *pc)
{
    return pc->site.lane ? pc->site.lane : "default";
}

const char *pacer_provider_name(const struct pacer *pc)
{
    return pc->site.named ? pacer_lane(pc) : pc->provider->ops->name;
}

const char *pacer_stream(const struct pacer *pc)
{
    return pc->stream;
}

struct queue *pacer_queue(struct pacer *pc)
{
    return pc->queue;
}

int pacer_healthy(struct pacer *pc)
{
    int ok;

    pthread_mutex_lock(&pc->mu);
    ok = breaker_would_allow(&pc->breaker, clock_mono_ns());
    pthread_mutex_unlock(&pc->mu);
    return ok;
}

void pacer_kick(struct pacer *pc)
{
    pthread_mutex_lock(&pc->wmu);
    pc->woken = 1;
    pthread_cond_signal(&pc->wcond);
    pthread_mutex_unlock(&pc->wmu);
}

int64_t pacer_min_life(const struct pacer *pc)
{
    return __atomic_load_n(&pc->min_life_ms, __ATOMIC_RELAXED);
}

int pacer_stopping(struct pacer *pc)
{
    int s;

    pthread_mutex_lock(&pc->mu);
    s = pc->stopping;
    pthread_mutex_unlock(&pc->mu);
    return s;
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

struct pacer_item *pacer_item_new(struct pacer *pc, const struct queue_entry *e, int adopted)
{
    struct pacer_item *it = calloc(1, sizeof(*it));

    if (it == NULL)
        return NULL; /* it stays claimed in the stream: this instance's next start, or a takeover */
    if (e->moved_r < 0)
        adopted = 1; /* failed over holding no reservation it knew of: restored as a takeover is */
    it->e = *e;
    it->adopted = adopted;
    it->state = MSG_QUEUED;
    /* A new message holds the reservation, unspent; a taken-over
     * one holds nothing it knows of until reserve.lua says. */
    it->rsv_idx = adopted ? 0 : 1;
    it->held = !adopted;
    /* Failed over to this provider: its latest reservation was spent or
     * given back where it was; the next attempt takes a later one, at this
     * provider's price. */
    if (!adopted && e->moved_r > 0) {
        it->rsv_idx = e->moved_r;
        it->held = 0;
    }
    pthread_mutex_lock(&pc->mu);
    it->rnext = pc->registry;
    if (pc->registry)
        pc->registry->rprev = it;
    pc->registry = it;
    pthread_mutex_unlock(&pc->mu);
    return it;
}

void pacer_item_free(struct pacer *pc, struct pacer_item *it)
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

int pacer_move(struct pacer *pc, struct pacer_item *it, enum msg_state to)
{
    enum msg_state from = it->state;

    if (msg_move(&it->state, to) == 0)
        return 0;
    log_msg(LOG_ERROR, "pacer: message %s cannot move from %s to %s (no such move): left to a takeover or "
            "the next start", it->e.id, msg_state_name(from), msg_state_name(to));
    pacer_item_free(pc, it);
    return -1;
}

/* ---- the ledger (asynchronous submissions: no wait) ---- */

static void pacer_ledger_failed(struct pacer *pc, const char *what, const char *id)
{
    log_msg(LOG_ERROR, "ledger: cannot record %s of message %s", what, id);
    PACER_COUNT(pc, ledger_failures, 1);
}

void pacer_ledger_state(struct pacer *pc, const char *id, enum msg_state to, const char *detail,
                        const char *provider_id, int attempts)
{
    unsigned from = msg_from(to, msg_phase_set(MSG_PENDING));
    int tries;

    for (tries = 0; tries < 2; tries++)
        if (ledger_message_state(pc->ledger, id, to, from, provider_id, detail, attempts, clock_wall_ms()) ==
            OTP_OK)
            return;
    pacer_ledger_failed(pc, msg_state_name(to), id);
}

void pacer_ledger_send(struct pacer *pc, const struct ledger_send *s)
{
    int tries;

    for (tries = 0; tries < 2; tries++)
        if (ledger_send(pc->ledger, s) == OTP_OK)
            return;
    pacer_ledger_failed(pc, "a provider call", s->message_id);
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

enum otp_rc pacer_status(struct pacer *pc, const char *api_key, const char *id, struct pacer_view *out, char *err)
{
    char key[QUEUE_NAME_MAX];
    enum msg_state st = MSG_NONE;
    struct queue_view v;
    enum otp_rc rc = queue_get(pc->queue, id, key, sizeof(key), &st, &v, err);

    memset(out, 0, sizeof(*out));
    if (rc != OTP_OK)
        return rc;
    if (st == MSG_NONE || strcmp(key, api_key) != 0)
        return OTP_ENOTFOUND;
    snprintf(out->state, sizeof(out->state), "%s", msg_state_name(st));
    snprintf(out->provider, sizeof(out->provider), "%s", v.provider);
    snprintf(out->attempts, sizeof(out->attempts), "%s", v.attempts);
    return OTP_OK;
}

enum otp_rc pacer_states(struct pacer *pc, const char *const *ids, int n,
                         void (*put)(void *ctx, int i, enum msg_state state, const char *detail), void *ctx,
                         char *err)
{
    return queue_states(pc->queue, ids, n, put, ctx, err);
}

enum otp_rc pacer_report(struct pacer *pc, const char *id, enum msg_state to, int64_t min_life_ms,
                         struct queue_report_out *out, char *err)
{
    memset(out, 0, sizeof(*out));
    if (to != MSG_DELIVERED && to != MSG_FAILED) {
        snprintf(err, OTP_ERR_LEN, "pacer: a delivery report ends a message delivered or failed, not %s",
                 msg_state_name(to));
        return OTP_EINVAL;
    }
    return queue_report(pc->queue, id, to, min_life_ms, out, err);
}

void pacer_count_report_again(struct pacer *pc)
{
    PACER_COUNT(pc, failed_over[PACER_FO_REPORT], 1);
}

void pacer_count_report(struct pacer *pc, enum msg_state to)
{
    pthread_mutex_lock(&pc->mu);
    if (to == MSG_DELIVERED)
        pc->stats.reports_delivered++;
    else
        pc->stats.reports_failed++;
    pthread_mutex_unlock(&pc->mu);
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

void pacer_stats(struct pacer *pc, struct pacer_stats *out)
{
    pthread_mutex_lock(&pc->mu);
    *out = pc->stats;
    out->depth = pc->depth > 0 ? (uint64_t)pc->depth : 0;
    out->inflight = (uint64_t)pc->inflight;
    out->breaker_state = (int)breaker_state(&pc->breaker, clock_mono_ns());
    pthread_mutex_unlock(&pc->mu);
}

void pacer_stats_add(struct pacer_stats *sum, const struct pacer_stats *st)
{
    size_t i;

#define PACER_ADD(f) sum->f += st->f
    PACER_ADD(sent); PACER_ADD(failed); PACER_ADD(expired); PACER_ADD(retried); PACER_ADD(transient);
    PACER_ADD(permanent); PACER_ADD(dropped_full); PACER_ADD(depth); PACER_ADD(inflight); PACER_ADD(takeovers);
    PACER_ADD(restored); PACER_ADD(slots); PACER_ADD(slots_missed); PACER_ADD(slots_refused);
    PACER_ADD(slot_wait_us); PACER_ADD(lost); PACER_ADD(paused_429); PACER_ADD(refunds); PACER_ADD(refund_dups);
    PACER_ADD(refund_anomalies); PACER_ADD(refunds_lost); PACER_ADD(refunds_kept); PACER_ADD(refunds_taken_over);
    PACER_ADD(reservations); PACER_ADD(reserve_refused); PACER_ADD(ledger_failures); PACER_ADD(spend_unknown_minor);
    PACER_ADD(spend_accepted_minor); PACER_ADD(settled_accepted_minor); PACER_ADD(settled_unknown_minor);
    PACER_ADD(settled_unbilled_minor); PACER_ADD(breaker_opened); PACER_ADD(latency_us_sum); PACER_ADD(latency_n);
    PACER_ADD(reports_delivered); PACER_ADD(reports_failed);
#undef PACER_ADD
    for (i = 0; i < PROVIDER_C_COUNT; i++)
        sum->cause[i] += st->cause[i];
    for (i = 0; i < PACER_FO_N; i++)
        sum->failed_over[i] += st->failed_over[i];
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

/* ---- stop ---- */

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

static void pacer_list_free(struct pacer *pc, struct pacer_item *it)
{
    while (it) {
        struct pacer_item *next = it->next;
        pacer_item_free(pc, it);
        it = next;
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
