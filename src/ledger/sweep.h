/*
 * sweep: ends the messages this ledger accepted that another instance
 * sent. The sender writes its own ledger; this one's row would stay queued
 * (or sending, when this instance claimed it before a takeover) for ever.
 * Once a message's code has expired and a provider call begun before that
 * has had its timeout to end, its fate is settled in the fleet's record
 * (Redis), and the sweep writes it here as a state change whose detail
 * says where it came from; a message the fleet no longer knows (its record
 * lives 24 h, or its hold lapsed before the 202) ends 'expired' with a
 * detail saying its outcome is unknown here. A message whose record still
 * says queued or sending is asked about again later.
 *
 * Run from the housekeeping tick: one indexed read of the ledger, then at
 * most one batched read of the fleet for up to SWEEP_BATCH messages, and
 * none for a while after that read failed, so a dead Redis costs the tick
 * one store timeout now and then. Ledger writes never wait.
 */
#ifndef OTPD_SWEEP_H
#define OTPD_SWEEP_H

#include <stdint.h>

#include "../base/msgstate.h"
#include "../base/rc.h"
#include "ledger.h"

#define SWEEP_BATCH 64
/* After the fleet's record could not be read, the next try waits this long. */
#define SWEEP_BACKOFF_MS 10000

/* Calls put(put_ctx, i, state, detail) for each message ids[i] (i < n) the
 * fleet knows: its state (MSG_NONE, or no call, when it does not know it)
 * and its detail ("" for none). OTP_OK, or OTP_ESTORE with detail in err. */
typedef enum otp_rc (*sweep_read_fn)(void *ctx, const char *const *ids, int n,
                                     void (*put)(void *put_ctx, int i, enum msg_state state, const char *detail),
                                     void *put_ctx, char *err);

/* Where the sweep is; zero it to start. */
struct sweep {
    int64_t after_seq; /* the next batch starts after this message */
    int64_t next_ms;   /* no read of the fleet before this */
};

/*
 * One step at now_ms: the next batch of this ledger's messages not ended
 * whose code expired more than grace_ms ago (the provider's timeout) is
 * looked up with read (ctx its first argument), and those the fleet has
 * ended, or forgotten, are ended here. Returns how many it ended, or -1
 * with detail in err (the ledger could not be read, or the fleet; the
 * latter waits SWEEP_BACKOFF_MS before trying again).
 */
int sweep_run(struct sweep *sw, struct ledger *l, int64_t now_ms, int64_t grace_ms, sweep_read_fn read,
              void *ctx, char *err);

#endif
