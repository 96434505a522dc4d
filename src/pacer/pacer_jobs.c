/*
 * pacer_jobs: the outcomes handed to the queue thread (by the sender, by
 * the stop, and by the queue thread's own checks), run there: an end
 * written to Redis with its reservation given back when unspent, a retry
 * put back to 'queued', a missed slot back for a new one. One job per
 * attempt's outcome; each is one or two script runs.
 */
#include "pacer_int.h"

#include <stdio.h>

#include "../base/log.h"

void pacer_job(struct pacer *pc, struct pacer_item *it, enum pacer_job job)
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
void pacer_end(struct pacer *pc, struct pacer_item *it, enum msg_state state, const char *detail,
               const char *provider_id)
{
    if (pacer_move(pc, it, state) != 0)
        return;
    it->ledger_end = state != MSG_SENT;
    if (!it->ledger_end) {
        pacer_ledger_state(pc, it->e.id, state, detail, provider_id, it->attempt);
        PACER_COUNT(pc, sent, 1);
    }
    snprintf(it->detail, sizeof(it->detail), "%s", detail ? detail : "");
    snprintf(it->provider_id, sizeof(it->provider_id), "%s", provider_id ? provider_id : "");
    /* What it holds unspent goes back. One taken over (or back after a
     * restart) before it reserved anything here gives back its latest
     * reservation only if Redis shows it was never used on the wire
     * (refund.lua's reservation 0). */
    it->refund = (it->held || (it->adopted && it->rsv_idx == 0)) && pacer_priced(pc, it) && it->e.price_minor > 0;
    pacer_job(pc, it, PACER_JOB_END);
}

/* Its end (failed or expired) is this instance's: in the ledger and the stats. */
static void pacer_ended(struct pacer *pc, struct pacer_item *it)
{
    pacer_ledger_state(pc, it->e.id, it->state, it->detail, it->provider_id[0] ? it->provider_id : NULL,
                       it->attempt);
    pthread_mutex_lock(&pc->mu);
    if (it->state == MSG_EXPIRED) {
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
void pacer_taken_over(struct pacer *pc, struct pacer_item *it)
{
    if (it->state != MSG_SENT)
        pacer_ledger_state(pc, it->e.id, MSG_QUEUED, "taken over by another instance", NULL, it->attempt);
    pacer_item_free(pc, it);
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
    if (!lost || it->state == MSG_SENT)
        while ((rc = queue_end(pc->queue, &it->e, it->state, it->detail, it->provider_id, it->attempt_rec, &res,
                               err)) != OTP_OK &&
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

void pacer_retry_list(struct pacer *pc, struct pacer_item *it)
{
    struct pacer_item **pp;

    pthread_mutex_lock(&pc->mu);
    for (pp = &pc->retry; *pp && (*pp)->not_before_ns <= it->not_before_ns; pp = &(*pp)->next)
        ;
    it->next = *pp;
    *pp = it;
    pthread_mutex_unlock(&pc->mu);
}

/* Puts it back to 'queued' in Redis for its retry (it moved there when
 * the retry was decided), then on the retry list; unless another instance
 * took it over meanwhile. */
static void pacer_requeue(struct pacer *pc, struct pacer_item *it)
{
    char err[OTP_ERR_LEN] = "";
    int owned = 1, tries = 0;
    enum otp_rc rc;

    while ((rc = queue_retry(pc->queue, &it->e, it->detail, it->attempt_rec, &owned, err)) != OTP_OK &&
           pacer_again(pc, &tries, "a retry", it->e.id, err))
        ;
    it->attempt_rec[0] = '\0';
    if (rc != OTP_OK) {
        pacer_item_free(pc, it); /* lost at the stop: the next start takes it back */
        return;
    }
    if (!owned) {
        PACER_COUNT(pc, lost, 1);
        pacer_taken_over(pc, it);
        return;
    }
    if (it->unmark)
        pacer_unmark(pc, it);
    pacer_retry_list(pc, it);
}

void pacer_jobs(struct pacer *pc)
{
    for (;;) {
        struct pacer_item *it;
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
            pacer_requeue(pc, it);
            break;
        case PACER_JOB_RESLOT:
            it->not_before_ns = 0;
            pacer_retry_list(pc, it);
            break;
        case PACER_JOB_FAILOVER:
            pacer_fail_over(pc, it);
            break;
        }
    }
}
