/*
 * pacer: the bounded leaky-bucket queue in front of the SMS provider
 * (DESIGN.md, "Pacer"). Request threads reserve a slot before the limits
 * run and push the accepted message into it; one pacer thread drains the
 * queue on absolute deadlines at exactly `rate` sends a second, through
 * curl multi so provider latency does not lower the rate, with at most
 * `max_inflight` calls at once. A second thread, the money thread, takes
 * the cost reservations of retries and gives back the reservations of
 * messages that end unbilled (struct pacer_money), so the sending thread
 * never waits on Redis. Every state change goes to the ledger.
 */
#ifndef OTPD_PACER_H
#define OTPD_PACER_H

#include <stdint.h>

#include "../base/config.h"
#include "../base/rc.h"
#include "../ledger/ledger.h"
#include "../provider/provider.h"

#define PACER_TEXT_MAX (CFG_TEXT_MAX + 1)
#define PACER_ID_MAX 33
#define PACER_CAPS_MAX 192 /* the text of the cap windows of a reservation */

struct pacer;

/* One accepted message. */
struct pacer_msg {
    char id[PACER_ID_MAX];
    char vid[PACER_ID_MAX];      /* its verification, for pacer_cancel */
    char to[20];
    char text[PACER_TEXT_MAX];   /* holds the code: memory only, never logged */
    char dlr_query[160];         /* "id=..&exp=..&tag=.." (report.c), "" for none */
    int64_t expires_ms;          /* wall clock; never sent after this */
    int64_t price_minor;         /* cost reserved; -1 none (no cost caps) */
    int64_t cost_ms;             /* Redis time of the reservation held */
    /* The cap windows the issue's reservation (number 1) was counted in,
     * as the limits wrote them ("3600000,86400000"): a refund gives back to
     * those, whatever the caps are by then. */
    char cost_caps[PACER_CAPS_MAX];
    int attempts;                /* provider calls made so far */
    /* Set by the pacer: the reservation the message holds (1 is the
     * issue's) and whether it is still unspent. A call that may have been
     * billed spends it; a retry then needs the next one. */
    int rsv_idx;
    int held;
    int used; /* the highest reservation marked used on the wire (Redis's u) */
};

/* What a reserve hook does besides making sure of the reservation. */
enum pacer_use {
    PACER_RESERVE = 0, /* only that */
    PACER_USE = 1,     /* marks it used on the wire, just before the call goes out */
    PACER_RESTORE = 2, /* after a restart: past every reservation marked used */
};

/*
 * The cost caps, as the pacer needs them; called on the pacer's money
 * thread only, never on the thread that owns the wire (both block on
 * Redis). Each returns OTP_OK, or OTP_ESTORE with detail in err (the pacer
 * tries again later).
 */
struct pacer_money {
    /* Makes sure message id holds reservation need or a later one not
     * given back (a new one is taken against every cap if not), then does
     * what use says. *ok 0 when a cap has no room; then why names it. On
     * *ok 1, *idx and *at_ms are the reservation held. */
    enum otp_rc (*reserve)(void *ctx, const char *id, int need, enum pacer_use use, int64_t price_minor,
                           int64_t issue_ms, int *ok, int *idx, int64_t *at_ms, char *why, size_t why_cap,
                           char *err);
    /* Gives back reservation idx of message id (0: its latest), at most
     * once ever, to the cap windows it was counted in (cost_caps, price
     * and cost_ms describe reservation 1).
     * *result: 1 given back, 0 it already was, -1 an anomaly (logged and
     * counted by the pacer), 2 (idx 0) kept: used on the wire before a
     * restart. */
    enum otp_rc (*refund)(void *ctx, const char *id, int idx, int64_t price_minor, int64_t cost_ms,
                          const char *cost_caps, int *result, char *err);
    void *ctx;
};

struct pacer_stats {
    uint64_t sent, failed, expired, retried, transient, permanent, dropped_full;
    uint64_t depth, inflight;
    uint64_t paused_429;             /* times a 429 paused every send */
    uint64_t refunds, refund_dups, refund_anomalies, refunds_lost, refunds_kept;
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
};

/*
 * Builds a pacer for c's pacer block that sends through p and records in l
 * (both borrowed, outliving the pacer); money (copied; NULL for none) is
 * how it reserves and gives back cost. Does not start the threads. NULL
 * with detail in err on failure.
 */
struct pacer *pacer_new(const struct config *c, struct provider *p, struct ledger *l,
                        const struct pacer_money *money, char *err);

/* Seeds the send spacing from the ledger's last calls (a restart keeps the
 * spacing of the sends before it) and starts the sender and money threads. */
enum otp_rc pacer_start(struct pacer *pc, char *err);

/* Takes a queue slot for a message about to be decided. OTP_EFULL when
 * the queue is full (or stopping); then *retry_after_s is ceil(depth/rate). */
enum otp_rc pacer_reserve(struct pacer *pc, int64_t *retry_after_s);

/* Gives back a reserved slot that will not be used. */
void pacer_release(struct pacer *pc);

/* Puts m in the slot reserved for it. Never blocks for long; never fails. */
void pacer_push(struct pacer *pc, const struct pacer_msg *m);

/* Puts back a message found in the ledger at start-up, in ledger order,
 * without a queue reservation (it was accepted before the restart). It is
 * sent once the money thread has made sure it holds a cost reservation
 * (the one it had may have been spent or given back before the restart). */
void pacer_restore(struct pacer *pc, const struct pacer_msg *m);

/* Stops every message of verification vid that has not gone on the wire
 * yet: each ends 'failed' ("cancelled") before the sender would send it,
 * and its unspent cost reservation goes back once, through the same
 * refund as an expired one. Returns how many were stopped. A message
 * on the money thread (waiting for a retry's reservation, or being marked
 * used before its call) is not seen.
 * Never blocks for long. */
int pacer_cancel(struct pacer *pc, const char *vid);

/* Stops intake, lets calls in flight finish for up to grace_ms, then joins
 * the thread. Queued messages stay 'queued' in the ledger for the next
 * start. */
void pacer_stop(struct pacer *pc, int64_t grace_ms);
void pacer_free(struct pacer *pc);

void pacer_stats(struct pacer *pc, struct pacer_stats *out);

/* Appends the pacer's money metrics (Prometheus text) to out (cap bytes,
 * NUL-terminated); returns the length written. */
size_t pacer_metrics(struct pacer *pc, char *out, size_t cap);

/* 1 while a new message would get queue_full. */
int pacer_full(struct pacer *pc);

#endif
