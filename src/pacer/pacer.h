/*
 * pacer: the fleet's leaky bucket in front of the SMS provider
 * (docs/architecture.md, "The pacer and the fleet"). The queue lives in
 * Redis (queue.c: a stream with a consumer group, bounded fleet-wide by
 * issue.lua), the rate too (a GCRA slot per call, on Redis's clock:
 * slot.lua, schedule.c), so any number of instances put at most `rate`
 * calls a second on the wire together.
 *
 * Two threads per instance. The queue thread does every Redis call: it
 * claims messages (new ones, its own after a restart, and those of an
 * instance silent for pacer.takeover), makes sure of each one's cost
 * reservation, takes its slot, and hands it to the sender; it ends
 * messages, gives back unspent reservations, and keeps its own claims
 * alive. The sender thread owns the wire (xfer.c: curl multi, at most
 * max_inflight calls): it waits on nothing but its clock and curl, and
 * writes each request within its slot's bounds or not at all. Every state
 * change (base/msgstate.h's moves) also goes to this instance's ledger.
 * What each thread owns and the locks: pacer_int.h.
 */
#ifndef OTPD_PACER_H
#define OTPD_PACER_H

#include <stdint.h>

#include "../base/conf.h"
#include "../base/metrics.h"
#include "../base/msgstate.h"
#include "../base/rc.h"
#include "../ledger/ledger.h"
#include "../provider/provider.h"
#include "../store/store.h"

#define PACER_TEXT_MAX (CFG_TEXT_MAX + 1)

struct pacer;
struct queue;
struct queue_report_out;

/* What a reserve hook does besides making sure of the reservation. */
enum pacer_use {
    PACER_RESERVE = 0, /* only that */
    PACER_USE = 1,     /* marks it used on the wire, just before the call goes out */
    PACER_RESTORE = 2, /* after a restart: past every reservation marked used */
    PACER_UNUSE = 3,   /* at stop: gives back the use mark of reservation need (no call on it was written);
                        * *ok 1 when it did, 0 when Redis shows a later word on the message (nothing done) */
};

/*
 * The cost caps, as the pacer needs them; called on the pacer's queue
 * thread only, never on the thread that owns the wire (both block on
 * Redis). owner is this instance's consumer name in the fleet's queue:
 * Redis records it with each use mark and each end, so money is given back
 * only by the instance that owns the message. Each returns OTP_OK, or
 * OTP_ESTORE with detail in err (the pacer tries again later).
 */
struct pacer_money {
    /* Makes sure message id holds reservation need or a later one not
     * given back (a new one is taken against every cap if not), then does
     * what use says. *ok 0 when a cap has no room; then why names it. On
     * *ok 1, *idx and *at_ms are the reservation held. */
    enum otp_rc (*reserve)(void *ctx, const char *id, const char *owner, int need, enum pacer_use use,
                           int64_t price_minor, int64_t issue_ms, int *ok, int *idx, int64_t *at_ms, char *why,
                           size_t why_cap, char *err);
    /* Gives back reservation idx of message id (0: its latest), at most
     * once ever, to the cap windows it was counted in (cost_caps, price
     * and cost_ms describe reservation 1).
     * *result: 1 given back, 0 it already was, -1 an anomaly (logged and
     * counted by the pacer), 2 (idx 0) kept: used on the wire before a
     * restart, 3 kept: not owner's (another instance ended the message, or
     * marked that reservation used). */
    enum otp_rc (*refund)(void *ctx, const char *id, const char *owner, int idx, int64_t price_minor,
                          int64_t cost_ms, const char *cost_caps, int *result, char *err);
    void *ctx;
};

struct pacer_stats {
    uint64_t sent, failed, expired, retried, transient, permanent, dropped_full;
    uint64_t depth, inflight;        /* depth: the fleet's queue, at the queue thread's last look */
    uint64_t takeovers;              /* messages taken over from a silent instance */
    uint64_t restored;               /* this instance's own, taken back at start */
    uint64_t slots, slots_missed;    /* slots taken; missed: too late to write, taken again */
    uint64_t slots_refused;          /* slots not used: their round trip was too long to place them */
    uint64_t slot_wait_us;           /* the sum over slots of slot time minus take time */
    uint64_t lost;                   /* claims another instance took over while this one held them */
    uint64_t paused_429;             /* times a 429 paused every send */
    uint64_t refunds, refund_dups, refund_anomalies, refunds_lost, refunds_kept;
    uint64_t refunds_taken_over;     /* not asked: the message's end was another instance's */
    uint64_t reservations, reserve_refused;
    uint64_t ledger_failures;        /* ledger submissions that failed even when tried again */
    /* Spend, counted once per attempt when it could first be billed: when
     * its request was written (curl's prereq), or delivered in place. */
    uint64_t spend_unknown_minor;    /* written: the outcome is unknown then */
    uint64_t spend_accepted_minor;   /* accepted with no wire (file provider) */
    /* The same attempts once classified (lags by the call's latency). */
    uint64_t settled_accepted_minor; /* 2xx */
    uint64_t settled_unknown_minor;  /* may have been billed: timeout, reset, 408, 5xx */
    uint64_t settled_unbilled_minor; /* written, then answered 429 or 4xx: not billed */
    uint64_t cause[PROVIDER_C_COUNT]; /* attempts by cause */
    /* Messages moved to another provider, by the cause here, and the two
     * moves no cause names: its breaker was open (no call), a delivery
     * report said it failed (sent again on the next). */
#define PACER_FO_BREAKER PROVIDER_C_COUNT
#define PACER_FO_REPORT (PROVIDER_C_COUNT + 1)
#define PACER_FO_N (PROVIDER_C_COUNT + 2)
    uint64_t failed_over[PACER_FO_N];
    uint64_t breaker_opened;         /* times this provider's breaker opened */
    int breaker_state;               /* enum breaker_state, at the look */
    uint64_t latency_us_sum, latency_n; /* calls that reached the wire */
    uint64_t reports_delivered, reports_failed; /* delivery reports that moved one of its messages */
};

/* What the pacer takes from outside its own section (struct pacer_conf),
 * all borrowed: they outlive the pacer. */
struct pacer_site {
    int64_t otp_ttl_ms;             /* a message this close to its code's expiry is not sent (sched_min_life_ms) */
    int listen_port;                /* the default consumer name is HOSTNAME:PORT */
    const char *currency;           /* the spend metrics' label; "" for none */
    const struct cfg_price *prices; /* the list price of a message queued without one */
    size_t n_prices;
    /* The provider (lane) this pacer sends through: its name (its queue's
     * keys: queue_lane_key), its own prices (NULL: each message's issue
     * price; every attempt is reserved and billed at this price) and its
     * breaker. */
    const char *lane;
    int named;                      /* 1: the file names the provider (its ledger rows and logs use the name) */
    const struct cfg_price *lane_prices;
    size_t n_lane_prices;
    int breaker_failures;
    int64_t breaker_open_ms;
};

/* Where a message goes when this provider fails it (src/pacer/lanes.c):
 * next gives the pacer of the next provider of its route that it has not
 * gone to (tried: "a,b", this one included), and whose breaker lets a call
 * through now; NULL when there is none (it then retries or ends here).
 * Any thread; never blocks. */
struct pacer_failover {
    struct pacer *(*next)(void *ctx, const char *to, const char *tried);
    void *ctx;
};

/*
 * Builds a pacer for the pacer section conf (borrowed, outliving the
 * pacer) that sends through p and records in l (both borrowed too); site
 * (copied) is what it needs from the rest of the config; money (copied;
 * NULL for none) is how it reserves and gives back cost. Does not start
 * the threads. NULL with detail in err on failure.
 */
struct pacer *pacer_new(const struct pacer_conf *conf, const struct pacer_site *site, struct store *s,
                        struct provider *p, struct ledger *l, const struct pacer_money *money, char *err);

/* Renders message id's text (it holds the code: memory only, never
 * logged) and its delivery-report query ("" for none), for a code of
 * verification vid expiring at expires_ms, accepted at accepted_ms (0 when
 * unknown: now). */
struct pacer_render {
    enum otp_rc (*render)(void *ctx, const char *id, const char *vid, const char *style, int64_t expires_ms,
                          int64_t accepted_ms, char *text, size_t cap, char *dlr_query, size_t dlr_cap);
    void *ctx;
};

/* Starts the queue and sender threads; render (copied) makes each text.
 * The queue thread first takes back this instance's own messages (a
 * restart: pacer.instance names it). */
enum otp_rc pacer_start(struct pacer *pc, const struct pacer_render *render, char *err);

/* A message a ledger from before the fleet holds as queued or sending:
 * put in the fleet's queue unless Redis knows it (an upgrade loses
 * nothing). Before pacer_start. OTP_OK (*added 0 or 1) or OTP_ESTORE. */
enum otp_rc pacer_import(struct pacer *pc, const struct ledger_message *m, int *added, char *err);

/* SIGHUP changed otp.ttl: the least life a message must have left to be
 * sent follows it (sched_min_life_ms). Any thread. */
void pacer_set_code_ttl(struct pacer *pc, int64_t otp_ttl_ms);

/* Sets the failover hook (copied); before pacer_start. */
void pacer_set_failover(struct pacer *pc, const struct pacer_failover *f);

/* The provider's name, its stream, and 1 while its breaker lets calls
 * through (closed, or ready for its probe). Any thread. */
const char *pacer_lane(const struct pacer *pc);
const char *pacer_stream(const struct pacer *pc);
struct queue *pacer_queue(struct pacer *pc); /* its queue.c handle (lanes.c's adoption) */
int pacer_healthy(struct pacer *pc);

/* A new message may be in the queue: claim now rather than at the next poll. */
void pacer_wake(struct pacer *pc);

/* Message id's state, as its word (msg_state_name: "queued", "sending",
 * "sent", "delivered", "failed", "expired"; PACER_STATE_MAX bytes), for the
 * API key that issued it: OTP_OK, OTP_ENOTFOUND (unknown, or another
 * key's), OTP_ESTORE with detail in err. */
#define PACER_STATE_MAX 16
#define PACER_ATTEMPTS_MAX 481
struct pacer_view {
    char state[PACER_STATE_MAX];
    char provider[32];                 /* the provider that has it or sent it; "" when Redis does not say */
    char attempts[PACER_ATTEMPTS_MAX]; /* its attempts, "alpha:timeout,beta:accepted" (provider:cause) */
};
enum otp_rc pacer_status(struct pacer *pc, const char *api_key, const char *id, struct pacer_view *out, char *err);

/* What the fleet's record says of messages ids[0..n) (n at most 64), any
 * instance's, in one Redis call: put(ctx, i, state, detail) for each, state
 * MSG_NONE when Redis does not know it. Any thread; blocks for one store
 * call. OTP_OK, or OTP_ESTORE with detail in err (a state word this build
 * does not know among them too: then no put). */
enum otp_rc pacer_states(struct pacer *pc, const char *const *ids, int n,
                         void (*put)(void *ctx, int i, enum msg_state state, const char *detail), void *ctx,
                         char *err);

/* A delivery report moving message id to state to (MSG_DELIVERED or
 * MSG_FAILED; else OTP_EINVAL), for any instance's message: queue_report's
 * out (moved 1 when it changed its state in Redis: queued, sending or sent
 * to to; provider the one that had it). */
enum otp_rc pacer_report(struct pacer *pc, const char *id, enum msg_state to, int64_t min_life_ms,
                         struct queue_report_out *out, char *err);
/* Counts a report that moved one of this provider's messages to state to
 * (delivered or failed), and a failed one that sent it again elsewhere. Any thread. */
void pacer_count_report(struct pacer *pc, enum msg_state to);
void pacer_count_report_again(struct pacer *pc);


/* Stops this instance's messages of verification vid that have not gone
 * on the wire yet: each ends 'failed' ("cancelled") before the sender
 * would send it, and its unspent cost reservation goes back once. Returns
 * how many it marked. Messages of vid not claimed here end the same way
 * when any instance claims them: slot.lua finds their verification gone.
 * Never blocks for long. */
int pacer_cancel(struct pacer *pc, const char *vid);

/* Stops claiming, lets calls in flight finish for up to grace_ms, then
 * joins the threads. Messages claimed and not ended stay in the stream,
 * this instance's: its next start takes them back, or another instance
 * after pacer.takeover. A message marked used whose reservation no call
 * was written on gets that mark back (PACER_UNUSE), so that start does not
 * count its price again. */
void pacer_stop(struct pacer *pc, int64_t grace_ms);
void pacer_free(struct pacer *pc);

void pacer_stats(struct pacer *pc, struct pacer_stats *out);

/* Adds every counter of st to sum (breaker_state is each lane's own: not summed). */
void pacer_stats_add(struct pacer_stats *sum, const struct pacer_stats *st);

/* Appends the money and queue metrics of st (every lane's summed:
 * lanes_stats; capacity, theirs summed) to t; pc gives the currency. Any thread. */
void pacer_metrics_sum(const struct pacer *pc, const struct pacer_stats *st, int64_t capacity, struct metrics_text *t);
/* Appends each of pcs[0..n)'s own series, labelled provider="<name>". */
void pacer_metrics_lanes(struct pacer *const *pcs, size_t n, struct metrics_text *t);

/* 1 while the fleet's queue is full (asked of Redis; when it does not
 * answer, as the queue thread last saw it). */
int pacer_full(struct pacer *pc);

#endif
