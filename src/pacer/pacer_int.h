/*
 * pacer_int: what the pacer's files share (private to src/pacer): the
 * item, the pacer itself, and the one account of its threads and locks.
 *
 *   pacer.c          the object, its API, start and stop; items, their
 *                    moves (msgstate's table) and their ledger rows
 *   pacer_qthread.c  the queue thread: claims, takeovers, touch,
 *                    preparing an item (checks, slot) and arming it
 *   pacer_jobs.c     the outcomes it runs: ends, retries, missed slots
 *   pacer_send.c     the sender thread, which owns the wire (xfer.c)
 *   pacer_money.c    reservations, refunds, use marks and their giving
 *                    back at stop
 *   pacer_metrics.c  the money and queue metrics (/metrics)
 *   queue.c          the scripts' calls (queue.lua, slot.lua)
 *   schedule.c       the slots' arithmetic, pure
 *   xfer.c           the calls in flight, on curl multi
 *
 * Threads. The queue thread (pacer_queue_main) makes every Redis call: the
 * claims, touch, slots, arming, the money hooks (struct pacer_money), the
 * ends and retries; it never touches the wire. The sender thread
 * (pacer_sender_main) owns the xfer and so the wire: it waits on nothing
 * but its clock and curl, and hands every outcome back to the queue thread
 * as a job; once pacer_stop has joined it, the stopping thread owns the
 * xfer (the last calls' outcomes, until grace_ms). Other threads call the
 * API: pacer_cancel and pacer_metrics take mu for a moment;
 * pacer_status, pacer_report and pacer_full (the HTTP workers) and
 * pacer_states (the main thread's sweep) make one store call each, under
 * no lock of the pacer's; the main thread starts and stops.
 *
 * An item is one message this instance has claimed. It is in exactly one
 * place at a time: the queue thread's hands, its claimed buffer (buf) or
 * retry list, the slotted list (holding a slot, its reservation not yet
 * marked used), the sender's armed list, in flight (the xfer), or the job
 * list (an outcome for the queue thread to write to Redis). Whoever holds
 * it alone may change its fields, but for cancelled and lost, which any
 * thread reads and writes under mu. Every item is also on the registry, so
 * the queue thread can keep its claims alive (queue_touch) and cancel can
 * find it.
 *
 * Locks: mu guards the lists, the registry, the counters and the fields
 * marked "under mu"; wmu guards woken, the queue thread's wake-up (with
 * wcond). They never nest, and no Redis call, ledger submission or curl
 * call is made under either.
 */
#ifndef OTPD_PACER_INT_H
#define OTPD_PACER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "../base/breaker.h"
#include "../base/msgstate.h"
#include "pacer.h"
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
/* A call armed now is on the wire at most its timeout after its slot,
 * which is this close: the bound a failover elsewhere waits for. */
#define PACER_WIRE_MARGIN_MS 1000

enum pacer_job {
    PACER_JOB_END,    /* write its end to Redis, give back its reservation if unspent */
    PACER_JOB_RETRY,  /* back to 'queued' in Redis, then on the retry list */
    PACER_JOB_RESLOT, /* missed its slot (late, or a 429 pause): a new slot, no new attempt */
    PACER_JOB_FAILOVER, /* to the next provider of its route (fo_to), with its cause (fo_cause) */
};

struct pacer_item {
    struct pacer_item *next;          /* in the list that holds it */
    struct pacer_item *rprev, *rnext; /* the registry */
    struct queue_entry e;
    char text[PACER_TEXT_MAX];        /* holds the code: memory only, never logged */
    char dlr_query[160];
    int rendered;
    struct sched_slot slot;
    uint64_t not_before_ns;           /* a retry: not before this */
    int attempts;                     /* calls this instance made (retry.max counts them) */
    int attempt;                      /* slot.lua's attempt number, any instance's */
    /* The state this instance gave it, moved only by pacer_move: queued
     * when claimed (whatever Redis says: a takeover's may be sending),
     * sending once armed, queued again for a retry, then its end (for
     * PACER_JOB_END). */
    enum msg_state state;
    /* The reservation it holds (1 is the issue's), whether it is unspent,
     * and whether it was taken over (its first reservation looks past
     * Redis's use mark). */
    int rsv_idx, held, adopted;
    int cancelled, lost;              /* under mu */
    int sending_logged;               /* this attempt's 'sending' row is submitted; the sender only */
    int missed;                       /* its last slot was missed: the next arm is the same attempt */
    /* The reservation the queue thread last marked used, and the one a call
     * of it was last written on (curl's prereq, on the sender; 0: none). A
     * stop gives a mark back only when no call on it may have been written
     * (unmark): one that missed its slot, or was refused a connection, never
     * was; one in flight at the stop is never given back. */
    int marked, written, unmark;
    enum pacer_job job;
    char detail[PROVIDER_ERR_MAX + 64];
    char provider_id[PROVIDER_ID_MAX];
    int refund;                       /* PACER_JOB_END: give back its reservation */
    int ledger_end;                   /* PACER_JOB_END: its state goes to the ledger once Redis ends it here */
    int probe;                        /* its call is its provider's half-open probe; the sender only */
    char attempt_rec[64];             /* its last attempt, "<provider>:<cause>", until Redis has it; "" none */
    struct pacer *fo_to;              /* PACER_JOB_FAILOVER: the next provider's pacer */
    int fo_cause;                     /* a provider_cause, or PACER_FO_BREAKER: its breaker was open, no call */
    int fo_pending;                   /* its failover waits (another's call on a wire, a full queue) */
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
    char stream[QUEUE_KEY_MAX];      /* the lane's stream (queue_lane_key) */
    struct pacer_failover failover;  /* NULL next: no failover */
    struct breaker breaker;          /* under mu */
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

/* pacer.c: the object, items and their records. */
/* Its provider as the ledger and the logs name it: the configured name, or
 * the single provider's adapter ("webhook"), as before there were several. */
const char *pacer_provider_name(const struct pacer *pc);
void pacer_kick(struct pacer *pc);                 /* wakes the queue thread; any thread */
int64_t pacer_min_life(const struct pacer *pc);    /* the least life a message must have left to go on the wire */
int pacer_stopping(struct pacer *pc);              /* 1 once pacer_stop began */
/* A new item for entry e (adopted: taken over, or back after a restart),
 * on the registry; NULL when out of memory (the entry stays claimed). */
struct pacer_item *pacer_item_new(struct pacer *pc, const struct queue_entry *e, int adopted);
/* Takes it off the registry, wipes it (its text holds the code) and frees it. */
void pacer_item_free(struct pacer *pc, struct pacer_item *it);
/* Moves it to state to, if msgstate's table allows it: 0. A move the
 * table refuses is a bug: it is logged, the item is let go (freed; its
 * entry stays this instance's in the stream, for a takeover or the next
 * start) and -1 returned: the caller must not touch it again. */
int pacer_move(struct pacer *pc, struct pacer_item *it, enum msg_state to);
/* Records message id's move to state to in the ledger, from the states
 * that have not ended (never waits; tried twice, then counted). */
void pacer_ledger_state(struct pacer *pc, const char *id, enum msg_state to, const char *detail,
                        const char *provider_id, int attempts);
/* Records one provider call in the ledger (never waits; tried twice). */
void pacer_ledger_send(struct pacer *pc, const struct ledger_send *s);

/* pacer_qthread.c: the queue thread. */
void *pacer_queue_main(void *arg);
/* After a failed Redis step of the queue thread: 1 to try again (after a
 * wait), 0 to give up (at stop); *tries starts at 0. */
int pacer_again(struct pacer *pc, int *tries, const char *what, const char *id, const char *err);
/* Logs once when the queue thread loses Redis, and once when it is back. */
void pacer_redis(struct pacer *pc, enum otp_rc rc, const char *what, const char *err);
/* Reads the fleet's queue depth into pc->depth (the last look stays when
 * Redis does not answer). Any thread. */
void pacer_depth_refresh(struct pacer *pc);

/* pacer_jobs.c: handed over from any thread, run on the queue thread. */
/* Hands it to the queue thread as job; any thread. */
void pacer_job(struct pacer *pc, struct pacer_item *it, enum pacer_job job);
/* Ends it as state (sent, failed, expired; detail and provider_id may be
 * NULL): a job for the queue thread. */
void pacer_end(struct pacer *pc, struct pacer_item *it, enum msg_state state, const char *detail,
               const char *provider_id);
/* Another instance took it over: the ledger says so, and it leaves. */
void pacer_taken_over(struct pacer *pc, struct pacer_item *it);
/* Inserts it in the retry list, by not_before_ns. */
void pacer_retry_list(struct pacer *pc, struct pacer_item *it);
/* Runs the jobs handed over, until none is left; the queue thread only. */
void pacer_jobs(struct pacer *pc);

/* pacer_send.c: the sender thread and the xfer's hooks (on it). */
void *pacer_sender_main(void *arg);
void pacer_xfer_wrote(void *ctx, void *item);
void pacer_xfer_done(void *ctx, void *item, const struct xfer_result *r);

/* pacer_money.c: on the queue thread, but pacer_priced and pacer_price. */
int pacer_priced(const struct pacer *pc, const struct pacer_item *it);   /* its cost is tracked against caps */
int64_t pacer_price(const struct pacer *pc, const struct pacer_item *it); /* what an attempt of it may cost */
/* 1 when it holds a reservation no call spent that has money to give back. */
int pacer_unspent(const struct pacer *pc, const struct pacer_item *it);
/* Makes sure it holds an unspent reservation (PACER_RESERVE), or marks it
 * used (PACER_USE): 1 ready, 0 it ended (a cap has no room), -1 Redis
 * failed (it waits). */
int pacer_reserve(struct pacer *pc, struct pacer_item *it, enum pacer_use use);
void pacer_refund(struct pacer *pc, struct pacer_item *it);   /* gives its reservation back, once */
void pacer_unmark(struct pacer *pc, struct pacer_item *it);   /* gives its use mark back (at stop) */
void pacer_unarm(struct pacer *pc);                           /* at stop: what never left goes back */
int64_t pacer_rsv_price(const struct pacer *pc, const struct pacer_item *it); /* a reservation's price here */

/* pacer_failover.c: on the queue thread, but pacer_failover_to (any thread). */
/* The next provider for it (pacer_failover's next), or NULL. */
struct pacer *pacer_failover_to(struct pacer *pc, const struct pacer_item *it);
/* Moves it to the next provider (a PACER_JOB_FAILOVER): gives back the
 * reservation it holds unspent, then queue_move. */
void pacer_fail_over(struct pacer *pc, struct pacer_item *it);


#endif
