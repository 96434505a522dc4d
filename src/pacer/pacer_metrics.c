/*
 * pacer_metrics: the pacer's part of /metrics, from its counters (one
 * look under mu): the spend, the attempts by cause, the reservations and
 * refunds, the queue's claims and slots. Once per scrape, seconds apart.
 */
#include "pacer_int.h"

#include "../base/metrics.h"

/* The money: spend, settled spend, attempts by cause, refunds, reservations. */
static void pacer_metrics_money(const struct pacer_stats *st, const char *cur, struct metrics_text *t)
{
    int i;

    metrics_head(t, "otpd_spend_minor_total", "counter",
                 "Price of provider attempts the provider could bill, each counted once when it could first be "
                 "billed: unknown (its request was written, no verdict yet) or accepted (delivered in place).");
    metrics_u64(t, "otpd_spend_minor_total", st->spend_accepted_minor, "currency", cur, "outcome", "accepted");
    metrics_u64(t, "otpd_spend_minor_total", st->spend_unknown_minor, "currency", cur, "outcome", "unknown");
    metrics_head(t, "otpd_spend_settled_minor_total", "counter",
                 "The same attempts once their verdict is in: accepted (2xx), unknown (timeout, reset, 408, 5xx) "
                 "or unbilled (429, other 4xx).");
    metrics_u64(t, "otpd_spend_settled_minor_total", st->settled_accepted_minor, "currency", cur, "outcome",
                "accepted");
    metrics_u64(t, "otpd_spend_settled_minor_total", st->settled_unknown_minor, "currency", cur, "outcome",
                "unknown");
    metrics_u64(t, "otpd_spend_settled_minor_total", st->settled_unbilled_minor, "currency", cur, "outcome",
                "unbilled");
    metrics_head(t, "otpd_provider_attempts_total", "counter", "Provider attempts by cause (see provider.c).");
    for (i = 0; i < PROVIDER_C_COUNT; i++)
        metrics_u64(t, "otpd_provider_attempts_total", st->cause[i], "cause",
                    provider_cause_row((enum provider_cause)i)->name);
    metrics_head(t, "otpd_cost_refunds_total", "counter", "Cost reservations given back, by result.");
    metrics_u64(t, "otpd_cost_refunds_total", st->refunds, "result", "refunded");
    metrics_u64(t, "otpd_cost_refunds_total", st->refund_dups, "result", "already");
    metrics_u64(t, "otpd_cost_refunds_total", st->refund_anomalies, "result", "anomaly");
    metrics_u64(t, "otpd_cost_refunds_total", st->refunds_lost, "result", "lost");
    metrics_u64(t, "otpd_cost_refunds_total", st->refunds_kept, "result", "kept");
    metrics_u64(t, "otpd_cost_refunds_total", st->refunds_taken_over, "result", "taken_over");
    metrics_head(t, "otpd_cost_reservations_total", "counter",
                 "Reservations the pacer asked for a retry, by result.");
    metrics_u64(t, "otpd_cost_reservations_total", st->reservations, "result", "taken");
    metrics_u64(t, "otpd_cost_reservations_total", st->reserve_refused, "result", "cost_cap");
}

/* The queue: pauses, ledger failures, capacity, claims and slots. */
static void pacer_metrics_queue(const struct pacer_stats *st, int capacity, struct metrics_text *t)
{
    metrics_head(t, "otpd_pacer_paused_total", "counter", "Times a provider 429 paused every send.");
    metrics_u64(t, "otpd_pacer_paused_total", st->paused_429);
    metrics_head(t, "otpd_pacer_ledger_failures_total", "counter",
                 "Pacer ledger writes that failed twice (logged).");
    metrics_u64(t, "otpd_pacer_ledger_failures_total", st->ledger_failures);
    metrics_head(t, "otpd_queue_capacity", "gauge", "The fleet's queue capacity (pacer.capacity).");
    metrics_i64(t, "otpd_queue_capacity", capacity);
    metrics_head(t, "otpd_pacer_claims_total", "counter",
                 "Messages this instance claimed from the fleet's queue, by how: takeover (from a silent "
                 "instance), restart (its own, at start).");
    metrics_u64(t, "otpd_pacer_claims_total", st->takeovers, "how", "takeover");
    metrics_u64(t, "otpd_pacer_claims_total", st->restored, "how", "restart");
    metrics_head(t, "otpd_pacer_claims_lost_total", "counter",
                 "Claims another instance took over while this one held them.");
    metrics_u64(t, "otpd_pacer_claims_lost_total", st->lost);
    metrics_head(t, "otpd_pacer_slots_total", "counter",
                 "Send slots this instance took from the fleet's GCRA, by use.");
    metrics_u64(t, "otpd_pacer_slots_total", st->slots, "use", "taken");
    metrics_u64(t, "otpd_pacer_slots_total", st->slots_missed, "use", "missed");
    metrics_u64(t, "otpd_pacer_slots_total", st->slots_refused, "use", "unplaced");
    metrics_head(t, "otpd_pacer_slot_wait_seconds_total", "counter",
                 "Time from taking each slot to the slot, summed.");
    metrics_put(t, "otpd_pacer_slot_wait_seconds_total %.6f\n", (double)st->slot_wait_us / 1e6);
}

void pacer_metrics_sum(const struct pacer *pc, const struct pacer_stats *st, int64_t capacity, struct metrics_text *t)
{
    pacer_metrics_money(st, pc->site.currency[0] ? pc->site.currency : "none", t);
    pacer_metrics_queue(st, capacity, t);
}

/* Each provider's own series, labelled with its name. */
void pacer_metrics_lanes(struct pacer *const *pcs, size_t n, struct metrics_text *t)
{
    struct pacer_stats st[CFG_LANES_MAX];
    size_t i;
    int c;

    for (i = 0; i < n && i < CFG_LANES_MAX; i++)
        pacer_stats(pcs[i], &st[i]);
    metrics_head(t, "otpd_provider_sends_total", "counter", "Attempts on each provider, by cause (see provider.c).");
    for (i = 0; i < n; i++)
        for (c = 0; c < PROVIDER_C_COUNT; c++)
            metrics_u64(t, "otpd_provider_sends_total", st[i].cause[c], "provider", pacer_lane(pcs[i]), "cause",
                        provider_cause_row((enum provider_cause)c)->name);
    metrics_head(t, "otpd_provider_failovers_total", "counter",
                 "Messages moved from each provider to the next of their route, by the cause there "
                 "(breaker_open: no call was made; report: a delivery report said it failed).");
    for (i = 0; i < n; i++)
        for (c = 0; c < PACER_FO_N; c++)
            if (c >= PROVIDER_C_COUNT || provider_cause_row((enum provider_cause)c)->failover)
                metrics_u64(t, "otpd_provider_failovers_total", st[i].failed_over[c], "provider", pacer_lane(pcs[i]),
                            "cause", c == PACER_FO_BREAKER ? "breaker_open"
                                     : c == PACER_FO_REPORT ? "report"
                                                            : provider_cause_row((enum provider_cause)c)->name);
    metrics_head(t, "otpd_provider_breaker_state", "gauge",
                 "Each provider's breaker: 0 closed, 1 open, 2 half open (its probe may go).");
    for (i = 0; i < n; i++)
        metrics_i64(t, "otpd_provider_breaker_state", st[i].breaker_state, "provider", pacer_lane(pcs[i]));
    metrics_head(t, "otpd_provider_breaker_opened_total", "counter", "Times each provider's breaker opened.");
    for (i = 0; i < n; i++)
        metrics_u64(t, "otpd_provider_breaker_opened_total", st[i].breaker_opened, "provider", pacer_lane(pcs[i]));
    metrics_head(t, "otpd_provider_queue_depth", "gauge", "Each provider's queue, fleet-wide, at the last look.");
    for (i = 0; i < n; i++)
        metrics_u64(t, "otpd_provider_queue_depth", st[i].depth, "provider", pacer_lane(pcs[i]));
    metrics_head(t, "otpd_provider_queue_capacity", "gauge", "Each provider's queue capacity.");
    for (i = 0; i < n; i++)
        metrics_i64(t, "otpd_provider_queue_capacity", pcs[i]->cfg->capacity, "provider", pacer_lane(pcs[i]));
    metrics_head(t, "otpd_provider_gcra_wait_seconds_total", "counter",
                 "Each provider's GCRA lag: time from taking each send slot to the slot, summed.");
    for (i = 0; i < n; i++)
        metrics_put(t, "otpd_provider_gcra_wait_seconds_total{provider=\"%s\"} %.6f\n", pacer_lane(pcs[i]),
                    (double)st[i].slot_wait_us / 1e6);
    metrics_head(t, "otpd_provider_reports_total", "counter",
                 "Delivery reports that moved one of each provider's messages, by state (any instance's "
                 "messages, counted where the report arrived).");
    for (i = 0; i < n; i++) {
        metrics_u64(t, "otpd_provider_reports_total", st[i].reports_delivered, "provider", pacer_lane(pcs[i]), "state",
                    "delivered");
        metrics_u64(t, "otpd_provider_reports_total", st[i].reports_failed, "provider", pacer_lane(pcs[i]), "state",
                    "failed");
    }
    metrics_head(t, "otpd_provider_latency_seconds", "summary", "Each provider's call latency, calls on its wire.");
    for (i = 0; i < n; i++) {
        metrics_put(t, "otpd_provider_latency_seconds_sum{provider=\"%s\"} %.6f\n", pacer_lane(pcs[i]),
                    (double)st[i].latency_us_sum / 1e6);
        metrics_u64(t, "otpd_provider_latency_seconds_count", st[i].latency_n, "provider", pacer_lane(pcs[i]));
    }
}
