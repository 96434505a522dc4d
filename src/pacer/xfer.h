/*
 * xfer: the provider calls in flight, on curl multi. One thread (the
 * pacer's sender) owns an xfer and everything in it; any thread may wake
 * it. Each call carries the slot it was given: its request is written
 * (curl's prereq) only within the slot's bounds (schedule.h), else it is
 * aborted before any byte leaves and reported as a missed slot.
 */
#ifndef OTPD_XFER_H
#define OTPD_XFER_H

#include <stdint.h>

#include "../base/conf.h"
#include "../base/rc.h"
#include "../provider/provider.h"
#include "schedule.h"

struct xfer;

/* How one call ended. */
struct xfer_result {
    int wrote;       /* 1 once its request was written: from then it may be billed */
    int missed;      /* 1: aborted before writing, too late for its slot */
    long status;     /* HTTP status, 0 for none */
    int64_t latency_ms;
    int64_t latency_us; /* the same, finer; set for calls that reached curl */
    struct provider_result res; /* classified (provider.c's causes) */
};

struct xfer_hooks {
    /* Its request is about to be written: from here the provider may bill it. */
    void (*wrote)(void *ctx, void *item);
    /* It ended (res is valid during the call only). */
    void (*done)(void *ctx, void *item, const struct xfer_result *res);
    void *ctx;
};

/* NULL with detail in err on failure. p is borrowed. */
struct xfer *xfer_new(const struct pacer_conf *c, struct provider *p, const struct xfer_hooks *hooks, char *err);

/* Aborts the calls still in flight (their items go back through done, as
 * unknown when their request was written) and frees x. */
void xfer_free(struct xfer *x);

/* Starts the call for sms at slot; item is handed back to the hooks. A
 * provider that delivers in place (the file sink), or a call that cannot
 * start, ends through done before this returns. */
void xfer_start(struct xfer *x, const struct sms *sms, const struct sched_slot *slot, void *item);

/* Waits up to wait_ms for transfers or a wake-up, then runs them and ends
 * the finished ones (through done). */
void xfer_poll(struct xfer *x, int wait_ms);

/* Ends a wait in xfer_poll; any thread. */
void xfer_wakeup(struct xfer *x);

/* Calls in flight. The owning thread only. */
int xfer_inflight(const struct xfer *x);

/* How long before its slot a call should start: the time calls have been
 * taking from their start to being ready to write (a new connection's
 * handshake), averaged, at most half a second. The call then waits for its
 * slot in curl's prereq (blocking the owning thread that long). Any thread. */
uint64_t xfer_lead_ns(const struct xfer *x);

#endif
