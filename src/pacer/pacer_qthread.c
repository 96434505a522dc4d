/*
 * pacer_qthread: the queue thread, which makes every Redis call of the
 * pacer. Per message: a claim (new ones in batches, this instance's own
 * after a restart, and those of an instance silent for pacer.takeover),
 * a slot, an arm just before the slot, then an end or a retry; every
 * takeover_ms / 3 one touch keeps this instance's claims alive. A few
 * script runs per message, a few tens a second at the default rates; an
 * idle thread polls the stream every PACER_POLL_MS.
 */
#include "pacer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"

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

/* Logs the first failure, waits a little and says whether to try again.
 * Once the pacer stops, one more try only; then it logs the loss and says
 * no. */
int pacer_again(struct pacer *pc, int *tries, const char *what, const char *id, const char *err)
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
void pacer_redis(struct pacer *pc, enum otp_rc rc, const char *what, const char *err)
{
    if (rc != OTP_OK && !pc->redis_down)
        log_msg(LOG_WARN, "pacer: %s failed: %s; no sends until Redis answers", what, err);
    else if (rc == OTP_OK && pc->redis_down)
        log_msg(LOG_INFO, "pacer: Redis answers again; sends resume");
    pc->redis_down = rc != OTP_OK;
}

/* ---- claims: new messages, this instance's own, takeovers ---- */

void pacer_depth_refresh(struct pacer *pc)
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

/* ---- preparing: checks, reservation, slot ---- */

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

/* Acts on what slot.lua says of it; returns 1 when it may go on, else it
 * has ended, or left this instance. */
static int pacer_verdict(struct pacer *pc, struct pacer_item *it, enum queue_verdict v)
{
    switch (v) {
    case QUEUE_DONE:
        /* Sent elsewhere (a takeover raced a slow owner): its entry
         * leaves; the reservation the call used stays counted, and one
         * this instance took since (a retry's, a restore's) goes back:
         * refund.lua keeps any another instance marked used. */
        if (pacer_move(pc, it, MSG_SENT) != 0)
            return 0;
        it->refund = pacer_unspent(pc, it);
        pacer_job(pc, it, PACER_JOB_END);
        return 0;
    case QUEUE_ENDED:
        /* Ended unsent elsewhere (an abandon after its commit): what it
         * holds never left, and refund.lua gives it back once at most. */
        if (pacer_move(pc, it, MSG_FAILED) != 0)
            return 0;
        it->refund = pacer_unspent(pc, it);
        pacer_job(pc, it, PACER_JOB_END);
        return 0;
    case QUEUE_LOST:
        PACER_COUNT(pc, lost, 1);
        pacer_taken_over(pc, it); /* its new owner sends or ends it */
        return 0;
    case QUEUE_GONE:
        /* Cancelled, verified or replaced before it was sent. */
        pacer_end(pc, it, MSG_FAILED, "cancelled", NULL);
        return 0;
    case QUEUE_EXPIRED:
        pacer_end(pc, it, MSG_EXPIRED, "too little life left in the queue", NULL);
        return 0;
    case QUEUE_WAS_SENDING:
        pacer_end(pc, it, MSG_FAILED, "its instance stopped while sending (on_restart_sending: fail)", NULL);
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

/* The checks before a slot: 1 when it may take one, else it ended or left. */
static int pacer_may_go(struct pacer *pc, struct pacer_item *it)
{
    int cancelled, lost;

    pthread_mutex_lock(&pc->mu);
    cancelled = it->cancelled;
    lost = it->lost;
    pthread_mutex_unlock(&pc->mu);
    if (lost) {
        pacer_taken_over(pc, it); /* another instance has it */
        return 0;
    }
    if (cancelled) {
        pacer_end(pc, it, MSG_FAILED, "cancelled", NULL);
        return 0;
    }
    if (sched_too_late(it->e.expires_ms, clock_wall_ms(), pacer_min_life(pc))) {
        pacer_end(pc, it, MSG_EXPIRED, "too little life left in the queue", NULL);
        return 0;
    }
    if (!it->rendered) {
        if (pc->render.render(pc->render.ctx, it->e.id, it->e.vid, it->e.style, it->e.expires_ms, it->e.cost_ms,
                              it->text, sizeof(it->text), it->dlr_query, sizeof(it->dlr_query)) != OTP_OK) {
            pacer_end(pc, it, MSG_FAILED, "cannot render the message", NULL);
            return 0;
        }
        it->rendered = 1;
    }
    return 1;
}

/* Prepares one item: its checks, its reservation and its slot; then the
 * sender has it, or it ended, or it waits (Redis failed: back on the retry
 * list a little later). */
static void pacer_prepare(struct pacer *pc, struct pacer_item *it)
{
    struct queue_slot qs;
    char err[OTP_ERR_LEN] = "";
    int tries, r;

    if (!pacer_may_go(pc, it))
        return;
    if (it->fo_pending) {
        /* A failover that waited: it again, to the route's next healthy
         * provider; with none left, it goes on here. */
        it->fo_pending = 0;
        if ((it->fo_to = pacer_failover_to(pc, it)) != NULL) {
            pacer_fail_over(pc, it);
            return;
        }
    }
    if (!pacer_healthy(pc)) {
        /* Its breaker is open: the next provider of its route, before
         * anything goes on this one's wire, once slot.lua's checks pass (a
         * period of 0 takes no slot: sent or ended elsewhere, its
         * verification gone, on_restart_sending); else it waits for the probe. */
        if ((it->fo_to = pacer_failover_to(pc, it)) == NULL) {
            it->not_before_ns = clock_mono_ns() + (uint64_t)PACER_RETRY_MS * SCHED_NS_PER_MS;
            pacer_retry_list(pc, it);
            return;
        }
        if (queue_slot(pc->queue, &it->e, pacer_min_life(pc), 0,
                       it->adopted && pc->cfg->on_restart_sending == CFG_SENDING_FAIL, &qs, err) != OTP_OK) {
            pacer_redis(pc, OTP_ESTORE, "checking a message before its failover", err);
            goto later;
        }
        if (pacer_verdict(pc, it, qs.verdict)) {
            it->fo_cause = PACER_FO_BREAKER; /* no call */
            pacer_fail_over(pc, it);
        }
        return;
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

/* ---- arming: the use mark, then the sender ---- */

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

/* The slotted item whose slot is near (within lead of now), taken off the
 * list; else NULL, and *wait_ns lowered to the time until the first is. */
static struct pacer_item *pacer_next_due(struct pacer *pc, uint64_t now, uint64_t lead, uint64_t *wait_ns)
{
    struct pacer_item *it;

    pthread_mutex_lock(&pc->mu);
    it = pc->stopping ? NULL : pc->slotted; /* stopping: nothing more goes to the sender */
    if (it != NULL && it->slot.due_ns > now + lead) {
        if (it->slot.due_ns - now - lead < *wait_ns)
            *wait_ns = it->slot.due_ns - now - lead;
        it = NULL;
    }
    if (it != NULL) {
        pc->slotted = it->next;
        if (pc->slotted == NULL)
            pc->slotted_tail = NULL;
        it->next = NULL;
    }
    pthread_mutex_unlock(&pc->mu);
    return it;
}

/* Arms it in Redis (slot.lua 'arm': checked again now, not only when its
 * slot was taken, so a cancel on any instance meanwhile stops it; then
 * 'sending') and marks its reservation used: 1 ready for the sender, 0 it
 * ended or left, -1 Redis failed. */
static int pacer_arm_one(struct pacer *pc, struct pacer_item *it)
{
    struct queue_slot qs;
    char err[OTP_ERR_LEN] = "";
    int r;

    if (queue_arm(pc->queue, &it->e, pacer_min_life(pc),
                  it->adopted && pc->cfg->on_restart_sending == CFG_SENDING_FAIL, !it->missed,
                  pc->cfg->timeout_ms + PACER_WIRE_MARGIN_MS, &qs, err) != OTP_OK)
        r = -1;
    else if (!pacer_verdict(pc, it, qs.verdict))
        r = 0;
    else if (pacer_move(pc, it, MSG_SENDING) != 0)
        r = 0;
    else if ((it->attempt = qs.attempt), (it->missed = 0), pacer_priced(pc, it))
        r = pacer_reserve(pc, it, PACER_USE);
    else
        r = 1;
    pacer_redis(pc, r < 0 ? OTP_ESTORE : OTP_OK, "arming a message", err);
    return r;
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
        uint64_t lead = PACER_MARK_LEAD_NS + xfer_lead_ns(pc->xfer);
        struct pacer_item *it = pacer_next_due(pc, clock_mono_ns(), lead, &wait_ns);
        int r;
        if (it == NULL)
            return wait_ns;
        if ((r = pacer_arm_one(pc, it)) <= 0) {
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

/* ---- the loop ---- */

/* 1 while the sender could use another slot. */
static int pacer_room(struct pacer *pc)
{
    int room;

    pthread_mutex_lock(&pc->mu);
    room = !pc->stopping && pc->n_armed < PACER_AHEAD && pc->n_armed + pc->inflight < pc->cfg->max_inflight;
    pthread_mutex_unlock(&pc->mu);
    return room;
}

/* A 429's pause the sender asked for: every slot of the fleet waits. */
static void pacer_apply_pause(struct pacer *pc)
{
    char err[OTP_ERR_LEN] = "";
    int64_t pause_ms;

    pthread_mutex_lock(&pc->mu);
    pause_ms = pc->pause_ms;
    pc->pause_ms = 0;
    pthread_mutex_unlock(&pc->mu);
    if (pause_ms > 0 && queue_pause(pc->queue, pause_ms * 1000, err) != OTP_OK)
        log_msg(LOG_WARN, "pacer: cannot pause the fleet's slots (this instance's sends pause): %s", err);
}

/* The claims other than new messages, at now: this instance's own that it
 * does not hold (from before a restart, or handed over by a claim whose
 * reply was lost), else those of silent instances, when due. None once
 * stopping: what this instance holds stays its own. */
static void pacer_claim_others(struct pacer *pc, uint64_t now, uint64_t touch_ns, uint64_t *next_takeover)
{
    if (pacer_stopping(pc))
        return;
    if (pc->resync) {
        if (pacer_claim(pc, QUEUE_OWN, 16) >= 0 && strcmp(pc->own_cursor, "0-0") == 0)
            pc->resync = 0;
    } else if (now >= *next_takeover) {
        if (pacer_claim(pc, QUEUE_TAKEOVER, 16) >= 0)
            *next_takeover = now + touch_ns;
    }
}

/* Prepares items while the sender has room: due retries and claimed ones,
 * claiming new ones (no more often than PACER_POLL_MS while the stream is
 * empty). Returns how long the thread may wait (at most wait_ns). */
static uint64_t pacer_fill(struct pacer *pc, uint64_t *idle_until, uint64_t wait_ns)
{
    while (pacer_room(pc)) {
        struct pacer_item *it = pacer_pick(pc, clock_mono_ns(), &wait_ns);
        if (it == NULL && clock_mono_ns() >= *idle_until) {
            if (pacer_claim(pc, QUEUE_NEW, PACER_AHEAD) <= 0) {
                *idle_until = clock_mono_ns() + (uint64_t)PACER_POLL_MS * SCHED_NS_PER_MS;
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
    return pacer_arm_due(pc, wait_ns);
}

void *pacer_queue_main(void *arg)
{
    struct pacer *pc = arg;
    uint64_t next_touch = 0, next_takeover = 0, idle_until = 0, next_depth = 0;
    uint64_t touch_ns = (uint64_t)pc->cfg->takeover_ms * SCHED_NS_PER_MS / 3;
    int stop = 0;

    while (!stop) {
        uint64_t now, wait_ns;
        pacer_jobs(pc);
        pacer_apply_pause(pc);
        now = clock_mono_ns();
        if (now >= next_depth) {
            pacer_depth_refresh(pc); /* for /metrics: claims read it too, but not while the bulkhead is full */
            next_depth = now + SCHED_NS_PER_S;
        }
        if (now >= next_touch) {
            pacer_touch(pc);
            next_touch = now + touch_ns;
        }
        pacer_claim_others(pc, now, touch_ns, &next_takeover);
        wait_ns = pacer_fill(pc, &idle_until, (uint64_t)PACER_POLL_MS * SCHED_NS_PER_MS);
        stop = pacer_qwait(pc, (int64_t)(wait_ns / SCHED_NS_PER_MS) + 1);
        if (stop) {
            pacer_jobs(pc); /* a missed slot's job puts it on the retry list, for pacer_unarm */
            pacer_unarm(pc);
            pacer_jobs(pc); /* the last outcomes: one more try each if Redis fails */
        }
    }
    return NULL;
}
