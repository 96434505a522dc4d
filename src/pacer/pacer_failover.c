/*
 * pacer_failover: a message leaves this provider for the next one of its
 * route (docs/providers.md, "Failover"): when the provider's breaker is
 * open before the message goes on its wire, or when an attempt ends for a
 * cause about this provider or this destination on it (provider.c's
 * failover column). The move is one script run (queue.lua's move) while
 * this instance owns the message, so it is never in two queues nor on two
 * wires; a reservation no call was written on goes back first (queue.lua's
 * own, then refund.lua), so the next provider reserves its own price.
 * Rare: only on failover, two or three script runs.
 */
#include "pacer_int.h"

#include <stdio.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"

/* "a,b,this": the providers it went to, this one last. */
static void pacer_tried(const struct pacer *pc, const struct pacer_item *it, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s%s", it->e.tried, it->e.tried[0] ? "," : "", pacer_lane(pc));
}

struct pacer *pacer_failover_to(struct pacer *pc, const struct pacer_item *it)
{
    char tried[QUEUE_TRIED_MAX + ROUTE_NAME_MAX];

    if (pc->failover.next == NULL)
        return NULL;
    pacer_tried(pc, it, tried, sizeof(tried));
    return pc->failover.next(pc->failover.ctx, it->e.to, tried);
}

/* Gives back the reservation it holds, which no call was written on,
 * before it leaves: 1 done (or nothing to give), 0 it is another
 * instance's now (it left), -1 Redis did not answer, -2 another
 * instance's call of it may still be on a wire for *wait_ms (nothing done). */
static int pacer_give_back(struct pacer *pc, struct pacer_item *it, int64_t *wait_ms)
{
    char err[OTP_ERR_LEN] = "";
    int owned = 0;

    *wait_ms = 0;
    if (!pacer_unspent(pc, it))
        return 1;
    if (queue_own(pc->queue, &it->e, &owned, wait_ms, err) != OTP_OK) {
        pacer_redis(pc, OTP_ESTORE, "a failover", err);
        return -1;
    }
    if (!owned) {
        PACER_COUNT(pc, lost, 1);
        pacer_taken_over(pc, it);
        return 0;
    }
    if (*wait_ms > 0)
        return -2;
    pacer_refund(pc, it);
    it->held = 0;
    return 1;
}

/* Another instance's call of it may still be on a wire (a takeover while
 * it was sending): it waits here, queued, until that call is over. */
static void pacer_wire_wait(struct pacer *pc, struct pacer_item *it, int64_t wait_ms)
{
    it->fo_pending = 1; /* its next turn is this failover again, not a call here */
    it->not_before_ns = clock_mono_ns() + (uint64_t)wait_ms * SCHED_NS_PER_MS;
    pacer_retry_list(pc, it);
}

/* The reservation the next provider's first attempt comes after: the
 * latest this one knows of; -1 when it holds none it knows (taken over,
 * never reserved here): the next provider then restores past every one
 * used on a wire, as a takeover does. */
static int pacer_moved_r(const struct pacer_item *it)
{
    return it->adopted && !it->held && it->rsv_idx == 0 ? -1 : it->rsv_idx;
}

void pacer_fail_over(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "", tried[QUEUE_TRIED_MAX + ROUTE_NAME_MAX], detail[160];
    struct pacer *to = it->fo_to;
    enum queue_move_result res = QUEUE_MOVE_LOST;
    const char *cause = it->fo_cause < PROVIDER_C_COUNT ? provider_cause_row(it->fo_cause)->name : "breaker_open";
    enum otp_rc rc;
    int64_t wait_ms = 0;
    int r, tries = 0;

    while ((r = pacer_give_back(pc, it, &wait_ms)) == -1)
        if (!pacer_again(pc, &tries, "a failover", it->e.id, err)) {
            pacer_item_free(pc, it); /* at the stop: still this instance's in the stream, for its next start */
            return;
        }
    if (r == -2) {
        pacer_wire_wait(pc, it, wait_ms);
        return;
    }
    if (r == 0)
        return;
    it->fo_pending = 0;
    pacer_tried(pc, it, tried, sizeof(tried));
    snprintf(detail, sizeof(detail), "failed over from %s to %s: %s", pacer_lane(pc), pacer_lane(to), cause);
    tries = 0;
    while ((rc = queue_move(pc->queue, &it->e, pacer_stream(to), pacer_lane(to), to->cfg->capacity, pacer_moved_r(it),
                            tried, detail, it->attempt_rec, &res, &wait_ms, err)) != OTP_OK &&
           pacer_again(pc, &tries, "a failover", it->e.id, err))
        ;
    if (rc != OTP_OK) {
        pacer_item_free(pc, it);
        return;
    }
    if (res == QUEUE_MOVE_WAIT) {
        pacer_wire_wait(pc, it, wait_ms);
        return;
    }
    if (res == QUEUE_MOVE_FULL) {
        /* The next provider's queue is full: behind an open breaker it
         * waits here; after a failed attempt it ends (as it would with no
         * provider left), so no queue ever passes its capacity. */
        if (it->fo_cause == PACER_FO_BREAKER) {
            pacer_wire_wait(pc, it, PACER_RETRY_MS);
            return;
        }
        snprintf(detail, sizeof(detail), "%s: %s's queue is full, no failover", cause, pacer_lane(to));
        pacer_end(pc, it, MSG_FAILED, detail, NULL);
        return;
    }
    if (res == QUEUE_MOVE_LOST) {
        PACER_COUNT(pc, lost, 1);
        pacer_taken_over(pc, it);
        return;
    }
    if (res == QUEUE_MOVE_MOVED) {
        log_event(LOG_WARN, "provider.failover",
                  LOG_FIELDS(LOG_STR("message_id", it->e.id), LOG_STR("from", pacer_lane(pc)),
                             LOG_STR("to", pacer_lane(to)), LOG_STR("cause", cause)),
                  "message %s %s", it->e.id, detail);
        pacer_ledger_state(pc, it->e.id, MSG_QUEUED, detail, NULL, it->attempt);
        pthread_mutex_lock(&pc->mu);
        pc->stats.failed_over[it->fo_cause]++;
        if (pc->depth > 0)
            pc->depth--;
        pthread_mutex_unlock(&pc->mu);
        pacer_wake(to);
    }
    /* It had ended meanwhile (a report, an old owner's 'sent'): its entry
     * left; a reservation it still holds unspent goes back (queue.lua made
     * this instance the one that may). */
    if (res == QUEUE_MOVE_ENDED) {
        if (pacer_unspent(pc, it))
            pacer_refund(pc, it);
        pthread_mutex_lock(&pc->mu);
        if (pc->depth > 0)
            pc->depth--;
        pthread_mutex_unlock(&pc->mu);
    }
    pacer_item_free(pc, it);
}
