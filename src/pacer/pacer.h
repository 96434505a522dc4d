/*
 * pacer: the bounded leaky-bucket queue in front of the SMS provider
 * (DESIGN.md, "Pacer"). Request threads reserve a slot before the limits
 * run and push the accepted message into it; one pacer thread drains the
 * queue on absolute deadlines at exactly `rate` sends a second, through
 * curl multi so provider latency does not lower the rate, with at most
 * `max_inflight` calls at once. Every state change goes to the ledger.
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

struct pacer;

/* One accepted message. */
struct pacer_msg {
    char id[PACER_ID_MAX];
    char to[20];
    char text[PACER_TEXT_MAX];   /* holds the code: memory only, never logged */
    char dlr_query[160];         /* "id=..&tag=..", "" for none */
    int64_t expires_ms;          /* wall clock; never sent after this */
    int64_t price_minor;         /* cost reserved; -1 none */
    int64_t cost_ms;             /* Redis time of the reservation */
    int attempts;                /* provider calls made so far */
};

/* Called on the pacer thread when a message ends unsent or failed for
 * good, so its cost reservation can be given back. */
typedef void (*pacer_refund_fn)(void *ctx, int64_t price_minor, int64_t cost_ms);

struct pacer_stats {
    uint64_t sent, failed, expired, retried, transient, permanent, dropped_full;
    uint64_t depth, inflight;
};

/*
 * Builds a pacer for c's pacer block that sends through p and records in l
 * (both borrowed, outliving the pacer). Does not start the thread. NULL
 * with detail in err on failure.
 */
struct pacer *pacer_new(const struct config *c, struct provider *p, struct ledger *l, pacer_refund_fn refund,
                        void *refund_ctx, char *err);

/* Starts the pacer thread. */
enum otp_rc pacer_start(struct pacer *pc, char *err);

/* Takes a queue slot for a message about to be decided. OTP_EFULL when
 * the queue is full (or stopping); then *retry_after_s is ceil(depth/rate). */
enum otp_rc pacer_reserve(struct pacer *pc, int64_t *retry_after_s);

/* Gives back a reserved slot that will not be used. */
void pacer_release(struct pacer *pc);

/* Puts m in the slot reserved for it. Never blocks for long; never fails. */
void pacer_push(struct pacer *pc, const struct pacer_msg *m);

/* Puts back a message found in the ledger at start-up, in ledger order,
 * without a reservation (it was accepted before the restart). */
void pacer_restore(struct pacer *pc, const struct pacer_msg *m);

/* Stops intake, lets calls in flight finish for up to grace_ms, then joins
 * the thread. Queued messages stay 'queued' in the ledger for the next
 * start. */
void pacer_stop(struct pacer *pc, int64_t grace_ms);
void pacer_free(struct pacer *pc);

void pacer_stats(struct pacer *pc, struct pacer_stats *out);

/* 1 while a new message would get queue_full. */
int pacer_full(struct pacer *pc);

#endif
