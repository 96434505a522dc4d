/*
 * lanes: the providers as a network (docs/providers.md, "Routes and
 * failover"). One lane per provider: its own pacer (its own stream, GCRA
 * slot, capacity, 429 pause, in-flight bound and breaker: one provider's
 * backlog or outage never slows another's), its own adapter and prices.
 * The routes say which providers a destination goes to, in order: a new
 * message goes to the first whose breaker lets calls through, and a
 * pacer hands a failed one to the next (struct pacer_failover), at most
 * failover.max_providers in all. Routes reload on SIGHUP (lanes_set_routes);
 * the lanes themselves are fixed for the process's life.
 */
#ifndef OTPD_LANES_H
#define OTPD_LANES_H

#include <stddef.h>

#include "../base/conf.h"
#include "../base/metrics.h"
#include "pacer.h"

struct lanes;

/* Builds one adapter and one pacer per lane of n (borrowed; it outlives
 * the lanes), each with site (copied; its lane fields are each lane's),
 * the store s, ledger l and money (as pacer_new). NULL with detail in err. */
struct lanes *lanes_new(const struct network_conf *n, const struct pacer_site *site, struct store *s,
                        struct ledger *l, const struct pacer_money *money, char *err);
void lanes_free(struct lanes *ls);

size_t lanes_count(const struct lanes *ls);
struct pacer *lanes_pacer(struct lanes *ls, size_t i);
const char *lanes_adapter(const struct lanes *ls, size_t i); /* its adapter's name: "twilio" */

/* Where a new message to e164 (canonical) goes: the first provider of its
 * route whose breaker lets calls through (else the route's first: it waits
 * there, or fails over once another recovers). */
struct lanes_pick {
    struct pacer *pacer;
    const struct lane_conf *lane; /* its stream: pacer_stream(pacer) */
};
/* 0, or -1 when no route covers e164 (403 no_route). Any thread. */
int lanes_pick(struct lanes *ls, const char *e164, struct lanes_pick *out);

/* SIGHUP: the routes of n (copied; its providers must be the lanes'). Any thread. */
void lanes_set_routes(struct lanes *ls, const struct network_conf *n);

/* Registers every provider's stream in otp:lanes, then moves the messages
 * of streams no provider of this config reads (a provider removed, or
 * otp:q after the single provider became a network) to the first
 * provider of their routes: at start (lanes_start) and on the tick. */
enum otp_rc lanes_adopt(struct lanes *ls, char *err);

enum otp_rc lanes_start(struct lanes *ls, const struct pacer_render *render, char *err);
void lanes_stop(struct lanes *ls, int64_t grace_ms);
void lanes_set_code_ttl(struct lanes *ls, int64_t otp_ttl_ms);
/* Every lane's messages of vid not yet on a wire (pacer_cancel). */
int lanes_cancel(struct lanes *ls, const char *vid);
/* The sum of every lane's stats (depth and in flight summed too). */
void lanes_stats(struct lanes *ls, struct pacer_stats *out);
/* 1 when every lane's queue is full. */
int lanes_full(struct lanes *ls);
/* A delivery report (pacer_report), counted for the provider that had the
 * message. One that says failed while failover.report_min_life of the
 * code's life is left sends it again on the route's next provider, with
 * the same code: *again names it (else NULL); *moved 1 either way. */
enum otp_rc lanes_report(struct lanes *ls, const char *id, enum msg_state to, int *moved, const char **again,
                         char *err);

/* The pacers' metrics: the money and queue summed, then each provider's own. */
void lanes_metrics(struct lanes *ls, struct metrics_text *t);

#endif
