/*
 * pacer_money: the pacer's side of the cost caps, through the money hooks
 * (struct pacer_money), on the queue thread: making sure of a message's
 * reservation, marking it used just before its call, giving it back at
 * the end when no call could have spent it, and at stop the use marks no
 * call was written on. One or two script runs per message; a stop gives
 * back at most the few marks of the messages about to go.
 *
 * Each attempt is classified by provider_cause_row: never reached (not
 * billed: the message keeps its reservation for a retry, or gives it back
 * when it ends), outcome unknown or accepted (billed: the reservation is
 * spent and counted in otpd_spend_minor_total). Before a slot is taken,
 * the message's reservation is made sure of, and just before the slot it
 * is marked used in Redis (reserve.lua): a retry after a billed attempt
 * takes a new one against every cap, and a message taken over (or back
 * after a restart) never goes out again on a reservation an earlier call
 * may have spent. The spend is counted when a request is written (curl's
 * prereq, pacer_send.c). A stop gives back the mark of a message whose
 * reservation no call was ever written on (marked, then stopped before its
 * call went out, or held by a 429's pause, or its slot missed): else the
 * next start would reserve again for a price never spent. Only the
 * instance that owns a message ends it and gives its money back
 * (queue.lua's end and refund.lua check it): one cut off from Redis while
 * another took its messages over and sent them gives nothing back when it
 * has Redis again, and its ledger says the message was taken over rather
 * than claim an end that was not its own.
 */
#include "pacer_int.h"

#include <stdio.h>

#include "../base/log.h"

int pacer_priced(const struct pacer *pc, const struct pacer_item *it)
{
    return pc->has_money && it->e.price_minor >= 0;
}

int pacer_unspent(const struct pacer *pc, const struct pacer_item *it)
{
    return it->held && pacer_priced(pc, it) && it->e.price_minor > 0;
}

/* A reservation's price on this provider: its own price for the
 * destination when it has prices; else, for a named provider, cost.prices
 * (a message failed over from a provider with other prices must not keep
 * that one's); else (the single provider) the issue's. */
int64_t pacer_rsv_price(const struct pacer *pc, const struct pacer_item *it)
{
    int64_t p = -1;

    if (pc->site.lane_prices)
        p = config_price_in(pc->site.lane_prices, pc->site.n_lane_prices, it->e.to);
    else if (pc->site.named)
        p = config_price_in(pc->site.prices, pc->site.n_prices, it->e.to);
    return p >= 0 ? p : it->e.price_minor;
}

/* What an attempt costs here: its reservation's price, else the list
 * price (no caps configured), else 0. */
int64_t pacer_price(const struct pacer *pc, const struct pacer_item *it)
{
    int64_t p = it->e.price_minor >= 0 ? pacer_rsv_price(pc, it) : -1;

    if (p < 0 && pc->site.lane_prices)
        p = config_price_in(pc->site.lane_prices, pc->site.n_lane_prices, it->e.to);
    if (p < 0)
        p = config_price_in(pc->site.prices, pc->site.n_prices, it->e.to);
    return p > 0 ? p : 0;
}

/* Gives back its reservation (once: refund.lua marks it). */
void pacer_refund(struct pacer *pc, struct pacer_item *it)
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
void pacer_unmark(struct pacer *pc, struct pacer_item *it)
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

/* Makes sure it holds an unspent reservation (use: PACER_RESERVE), or
 * marks the one it holds used (PACER_USE: its call goes out next); 0 when
 * it ended (no room in a cap), -1 when Redis failed (it waits), 1 when
 * ready. A message holding the reservation asks nothing to be sure. */
int pacer_reserve(struct pacer *pc, struct pacer_item *it, enum pacer_use use)
{
    char err[OTP_ERR_LEN] = "", why[96] = "", detail[160];
    int ok = 0, idx = 0;
    int64_t at_ms = 0;

    if (use == PACER_RESERVE && it->held)
        return 1;
    if (it->adopted && !it->held) {
        /* Taken over: what it holds is not known here (an earlier call may
         * have spent it). Past every reservation used on the wire. */
        if (pc->money.reserve(pc->money.ctx, it->e.id, pc->consumer, 1, PACER_RESTORE, pacer_rsv_price(pc, it),
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
                          pacer_rsv_price(pc, it), it->e.cost_ms, &ok, &idx, &at_ms, why, sizeof(why), err) != OTP_OK)
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
    pacer_end(pc, it, MSG_FAILED, detail, NULL);
    return 0;
down:
    pacer_redis(pc, OTP_ESTORE, "a cost reservation", err);
    return -1;
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
void pacer_unarm(struct pacer *pc)
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
            if (pacer_move(pc, it, MSG_QUEUED) != 0)
                continue;
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
