/*
 * otp_metrics: the service's counters and its /metrics page. Every decision
 * is counted here (one mutex, held for a few adds); the page is built once
 * per scrape, seconds apart, from these counters, each module's stats and
 * one Redis call for the cost caps' headroom.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "../base/metrics.h"
#include "otp_int.h"

/* The operations' labels, with the outcome table's bit that says which
 * outcomes each can give. */
static const struct {
    const char *name;
    unsigned bit;
} ops[OTP_OPS] = {{"issue", OUT_OP_ISSUE}, {"verify", OUT_OP_VERIFY}, {"cancel", OUT_OP_CANCEL}};

/* Refusals by rule: the config's rule names (and any a reload of the rules
 * brings, while there is room), then these fixed reasons for refusals that
 * no rule makes. Bounded, so a label never comes from a request. */
static const char *const fixed_reasons[] = {"cost_cap",      "blocked",           "country_blocked",
                                            "number_type",   "suspected_pumping", "queue_full",
                                            "share_per_key", LIMITS_IDEM_REASON, "no_route"};
_Static_assert(sizeof(fixed_reasons) / sizeof(fixed_reasons[0]) == OTP_FIXED_REASONS, "one label each");

/* The refusal labels known from the start, each shown with 0: the
 * config's rules, then the fixed reasons. */
static void refusals_seed(struct otp *o)
{
    size_t i;

    for (i = 0; i < o->d.cfg.limits->n_rules && o->n_refusal < OTP_REFUSAL_LABELS - OTP_FIXED_REASONS; i++)
        snprintf(o->refusal_name[o->n_refusal++], CFG_NAME_MAX, "%s", o->d.cfg.limits->rules[i].name);
    for (i = 0; i < OTP_FIXED_REASONS; i++)
        snprintf(o->refusal_name[o->n_refusal++], CFG_NAME_MAX, "%s", fixed_reasons[i]);
}

/* A window as a label: "1d", "1h", "10m", "30s", or "<n>ms". */
static void window_label(int64_t ms, char *out, size_t cap)
{
    static const struct {
        int64_t ms;
        char unit;
    } units[] = {{86400000, 'd'}, {3600000, 'h'}, {60000, 'm'}, {1000, 's'}};
    size_t i;

    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (ms % units[i].ms == 0) {
            snprintf(out, cap, "%lld%c", (long long)(ms / units[i].ms), units[i].unit);
            return;
        }
    snprintf(out, cap, "%lldms", (long long)ms);
}

/* The caps /metrics shows the headroom of (see struct otp's caps). */
static void caps_seed(struct otp *o)
{
    const struct otp_sections *c = &o->d.cfg;
    size_t i, k;

    for (i = 0; i < c->limits->n_caps; i++) {
        const struct cfg_cap *cp = &c->limits->caps[i];
        for (k = 0; k < (cp->per_key ? c->keys->n_api_keys : 1) && o->n_caps < LIMITS_HEADROOM_MAX; k++) {
            struct limits_cap_ask *a = &o->caps[o->n_caps];
            if (cp->per_key && c->keys->api_keys[k].admin)
                continue; /* an admin key never issues */
            if (cp->per_key) {
                limits_cap_key_field(cp->window_ms, c->keys->api_keys[k].name, a->field, sizeof(a->field));
                o->cap_caller[o->n_caps] = c->keys->api_keys[k].name;
            } else {
                limits_cap_field(cp->window_ms, a->field, sizeof(a->field));
            }
            a->window_ms = cp->window_ms;
            a->max_minor = cp->max_minor;
            window_label(cp->window_ms, o->cap_window[o->n_caps], sizeof(o->cap_window[0]));
            o->n_caps++;
        }
    }
}

void otp_metrics_seed(struct otp *o)
{
    refusals_seed(o);
    caps_seed(o);
}

/* The refusal label of an answer: the rule that refused, or the fixed
 * reason of a refusal no rule makes; NULL for an answer that is no
 * refusal by a rule or a guard (a store failure, a wrong code). */
static const char *refusal_label(const struct otp_answer *a)
{
    switch (a->outcome) {
    case OUT_RATE_LIMITED:
    case OUT_LOCKED:
        return a->reason[0] ? a->reason : NULL;
    case OUT_QUEUE_FULL:
        return a->reason[0] ? "share_per_key" : "queue_full";
    case OUT_COST_CAP: return "cost_cap";
    case OUT_BLOCKED: return "blocked";
    case OUT_COUNTRY_BLOCKED: return "country_blocked";
    case OUT_NO_ROUTE: return "no_route";
    case OUT_NUMBER_TYPE: return "number_type";
    case OUT_SUSPECTED_PUMPING: return "suspected_pumping";
    default: return NULL;
    }
}

/* A rule name not seen before (a reload of the rules) takes a free label
 * while there is one; past that it is logged, not counted. */
void otp_count(struct otp *o, enum otp_op op, const struct otp_answer *a)
{
    const char *rule = refusal_label(a);
    size_t i;

    pthread_mutex_lock(&o->mu);
    if ((unsigned)a->outcome < OUT_COUNT)
        o->decided[op][a->outcome]++;
    if (rule != NULL) {
        for (i = 0; i < o->n_refusal && strcmp(o->refusal_name[i], rule) != 0; i++)
            ;
        if (i == o->n_refusal && i < OTP_REFUSAL_LABELS)
            snprintf(o->refusal_name[o->n_refusal++], CFG_NAME_MAX, "%s", rule);
        if (i < o->n_refusal)
            o->refusal_count[i]++;
    }
    pthread_mutex_unlock(&o->mu);
}

void otp_count_shadow(struct otp *o, const char *list, const char *op)
{
    char copy[256], *save = NULL, *name;
    int i;

    snprintf(copy, sizeof(copy), "%s", list);
    for (name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        log_event(LOG_INFO, "rule.shadow_refused", LOG_FIELDS(LOG_STR("rule", name), LOG_STR("op", op)),
                  "shadow rule would refuse");
        pthread_mutex_lock(&o->mu);
        for (i = 0; i < OTP_SHADOW_RULES; i++) {
            if (o->shadow_name[i][0] == '\0')
                snprintf(o->shadow_name[i], sizeof(o->shadow_name[i]), "%s", name);
            if (strcmp(o->shadow_name[i], name) == 0) {
                o->shadow_count[i]++;
                break;
            }
        }
        pthread_mutex_unlock(&o->mu);
    }
}

/* Decisions by operation and outcome, and refusals by rule. Under o->mu. */
static void decisions_text(struct otp *o, struct metrics_text *t)
{
    int i, op;

    metrics_head(t, "otpd_requests_total", "counter",
                 "API decisions by operation and outcome (each pair that can occur).");
    for (op = 0; op < OTP_OPS; op++)
        for (i = 0; i < OUT_COUNT; i++)
            if (otp_outcome_row((enum otp_outcome)i)->ops & ops[op].bit)
                metrics_u64(t, "otpd_requests_total", o->decided[op][i], "op", ops[op].name, "decision",
                            otp_outcome_row((enum otp_outcome)i)->error);
    metrics_head(t, "otpd_refusals_total", "counter",
                 "Issues and verifies refused, by the rule (or the guard) that refused.");
    for (i = 0; i < (int)o->n_refusal; i++)
        metrics_u64(t, "otpd_refusals_total", o->refusal_count[i], "rule", o->refusal_name[i]);
    metrics_head(t, "otpd_shadow_refusals_total", "counter", "Refusals a shadow rule would have made.");
    for (i = 0; i < OTP_SHADOW_RULES && o->shadow_name[i][0]; i++)
        metrics_u64(t, "otpd_shadow_refusals_total", o->shadow_count[i], "rule", o->shadow_name[i]);
}

/* What the fraud guards saw, and the ledger submissions lost. Under o->mu. */
static void guards_text(struct otp *o, struct metrics_text *t)
{
    int i;

    metrics_head(t, "otpd_country_monitored_total", "counter",
                 "Issue requests for numbers of a region on countries.monitor.");
    for (i = 0; i < CFG_REGIONS_MAX && o->monitor_region[i][0]; i++)
        metrics_u64(t, "otpd_country_monitored_total", o->monitor_count[i], "region", o->monitor_region[i]);
    metrics_head(t, "otpd_pumping_holds_total", "counter",
                 "Alert: phone prefixes the pumping guard held (started here).");
    metrics_u64(t, "otpd_pumping_holds_total", o->pump_holds);
    metrics_head(t, "otpd_pumping_shadow_holds_total", "counter",
                 "Holds the pumping guard in shadow mode would have started.");
    metrics_u64(t, "otpd_pumping_shadow_holds_total", o->pump_shadow_holds);
    metrics_head(t, "otpd_pumping_shadow_refusals_total", "counter",
                 "Issues a shadow hold would have refused (served).");
    metrics_u64(t, "otpd_pumping_shadow_refusals_total", o->pump_shadow_refusals);
    metrics_head(t, "otpd_ledger_submit_failures_total", "counter",
                 "Ledger writes that could not be submitted (logged).");
    metrics_u64(t, "otpd_ledger_submit_failures_total", o->ledger_errors);
}

/* The limits' abandons and refusal cache. */
static void limits_text(struct otp *o, struct metrics_text *t)
{
    struct limits_stats st;

    limits_stats(o->d.limits, &st);
    metrics_head(t, "otpd_store_abandons_total", "counter",
                 "Script calls abandoned after a 503 (their takes given back).");
    metrics_u64(t, "otpd_store_abandons_total", st.abandoned);
    metrics_head(t, "otpd_store_abandons_pending", "gauge", "Abandons waiting for Redis to answer.");
    metrics_u64(t, "otpd_store_abandons_pending", st.pending);
    metrics_head(t, "otpd_store_abandons_dropped_total", "counter",
                 "Abandons dropped because their queue was full.");
    metrics_u64(t, "otpd_store_abandons_dropped_total", st.dropped);
    metrics_head(t, "otpd_queue_holds_dropped_total", "counter",
                 "Accepted messages dropped by this instance because their instance never released them "
                 "(their takes given back).");
    metrics_u64(t, "otpd_queue_holds_dropped_total", st.holds_dropped);
    metrics_head(t, "otpd_refusal_cache_hits_total", "counter",
                 "Requests refused from the refusal cache, without a Redis call.");
    metrics_u64(t, "otpd_refusal_cache_hits_total", st.cache_hits[0], "op", "issue");
    metrics_u64(t, "otpd_refusal_cache_hits_total", st.cache_hits[1], "op", "verify");
    metrics_head(t, "otpd_refusal_cache_entries", "gauge",
                 "Refusals the refusal cache holds (expired ones not yet dropped included).");
    metrics_u64(t, "otpd_refusal_cache_entries", st.cache_entries);
    metrics_head(t, "otpd_refusal_cache_evictions_total", "counter",
                 "Refusals the refusal cache dropped for room (LRU).");
    metrics_u64(t, "otpd_refusal_cache_evictions_total", st.cache_evictions);
}

/* Redis: calls, the breaker, the Idempotency-Keys and the settings otpd
 * relies on. */
static void store_text(struct otp *o, struct metrics_text *t)
{
    struct store_stats ss;
    struct store_redis_conf rconf;
    struct idem_stats is;

    store_stats(o->d.store, &ss);
    store_redis_conf(o->d.store, &rconf);
    idem_stats(o->idem, &is);
    metrics_head(t, "otpd_store_calls_total", "counter", "Redis calls.");
    metrics_u64(t, "otpd_store_calls_total", ss.calls);
    metrics_head(t, "otpd_store_failures_total", "counter", "Redis calls that failed or timed out.");
    metrics_u64(t, "otpd_store_failures_total", ss.failures);
    metrics_head(t, "otpd_store_breaker_rejects_total", "counter",
                 "Calls refused at once by the open breaker.");
    metrics_u64(t, "otpd_store_breaker_rejects_total", ss.breaker_rejects);
    metrics_head(t, "otpd_store_breaker_open", "gauge", "1 while the Redis circuit breaker is open.");
    metrics_i64(t, "otpd_store_breaker_open", store_breaker_open(o->d.store));
    metrics_head(t, "otpd_idempotency_total", "counter",
                 "Requests with an Idempotency-Key, by what became of them.");
    metrics_u64(t, "otpd_idempotency_total", is.decided, "result", "decided");
    metrics_u64(t, "otpd_idempotency_total", is.replayed, "result", "replayed");
    metrics_u64(t, "otpd_idempotency_total", is.mismatched, "result", "reused");
    metrics_u64(t, "otpd_idempotency_total", is.busy, "result", "in_use");
    metrics_head(t, "otpd_redis_config_risky", "gauge",
                 "1 when a Redis setting otpd relies on is risky or unreadable (maxmemory-policy must be "
                 "noeviction, appendonly yes); absent before the first connection.");
    if (rconf.checked) {
        metrics_i64(t, "otpd_redis_config_risky", rconf.policy_risky, "setting", "maxmemory-policy");
        metrics_i64(t, "otpd_redis_config_risky", rconf.appendonly_risky, "setting", "appendonly");
    }
}

/* The queue, the messages and the provider calls (the pacer's), then the
 * ledger's commits. */
static void flow_text(struct otp *o, struct metrics_text *t)
{
    struct pacer_stats ps;
    struct ledger_stats ls;

    lanes_stats(o->d.lanes, &ps);
    ledger_stats(o->d.ledger, &ls);
    metrics_head(t, "otpd_queue_depth", "gauge",
                 "Messages accepted and not ended, the whole fleet's (stream and holds), at most a second "
                 "old.");
    metrics_u64(t, "otpd_queue_depth", ps.depth);
    metrics_head(t, "otpd_provider_inflight", "gauge", "Provider calls in flight.");
    metrics_u64(t, "otpd_provider_inflight", ps.inflight);
    metrics_head(t, "otpd_messages_total", "counter", "Messages that ended, by state.");
    metrics_u64(t, "otpd_messages_total", ps.sent, "state", "sent");
    metrics_u64(t, "otpd_messages_total", ps.failed, "state", "failed");
    metrics_u64(t, "otpd_messages_total", ps.expired, "state", "expired");
    metrics_head(t, "otpd_provider_calls_total", "counter", "Provider calls that did not succeed, by kind.");
    metrics_u64(t, "otpd_provider_calls_total", ps.transient, "outcome", "transient");
    metrics_u64(t, "otpd_provider_calls_total", ps.permanent, "outcome", "permanent");
    metrics_head(t, "otpd_provider_permanent_failures_total", "counter",
                 "Alert: the provider refused for good (bad credentials?).");
    metrics_u64(t, "otpd_provider_permanent_failures_total", ps.permanent);
    metrics_head(t, "otpd_ledger_commits_total", "counter", "Ledger transactions committed.");
    metrics_u64(t, "otpd_ledger_commits_total", ls.commits);
    metrics_head(t, "otpd_ledger_rows_total", "counter", "Ledger writes committed.");
    metrics_u64(t, "otpd_ledger_rows_total", ls.rows);
    metrics_head(t, "otpd_ledger_failures_total", "counter", "Ledger writes or commits that failed.");
    metrics_u64(t, "otpd_ledger_failures_total", ls.failures);
}

/* One cost cap's sample: the global ones by currency and window, a
 * per-caller one by its caller too. */
static void cap_sample(struct otp *o, struct metrics_text *t, const char *name, size_t i, int64_t v)
{
    const char *cur = o->d.cfg.limits->currency[0] ? o->d.cfg.limits->currency : "none";

    if (o->cap_caller[i] == NULL)
        metrics_i64(t, name, v, "currency", cur, "window", o->cap_window[i]);
    else
        metrics_i64(t, name, v, "currency", cur, "window", o->cap_window[i], "api_key", o->cap_caller[i]);
}

/* The cost caps' max and headroom (one Redis call; on a failure the
 * headroom is left out, never shown stale or as 0). */
static void caps_text(struct otp *o, struct metrics_text *t)
{
    int64_t left[LIMITS_HEADROOM_MAX];
    char err[OTP_ERR_LEN] = "", name[64];
    int ok = limits_cap_headroom(o->d.limits, o->caps, o->n_caps, left, err) == OTP_OK;
    size_t i;
    int global;

    if (!ok)
        log_msg(LOG_WARN, "metrics: cost cap headroom unread: %s", err);
    for (global = 1; global >= 0; global--) {
        const char *cap = global ? "otpd_cost_cap" : "otpd_cost_cap_caller";
        snprintf(name, sizeof(name), "%s_max_minor", cap);
        metrics_head(t, name, "gauge",
                     global ? "A global cost cap's budget per window (cost.caps[].max)."
                            : "A per-caller cost cap's budget per window (cost.caps[].max).");
        for (i = 0; i < o->n_caps; i++)
            if ((o->cap_caller[i] == NULL) == global)
                cap_sample(o, t, name, i, o->caps[i].max_minor);
        snprintf(name, sizeof(name), "%s_headroom_minor", cap);
        metrics_head(t, name, "gauge", "What the cap's current window has left (the fleet's, from Redis).");
        for (i = 0; ok && i < o->n_caps; i++)
            if ((o->cap_caller[i] == NULL) == global)
                cap_sample(o, t, name, i, left[i]);
    }
}

/* The admin rows and what their blocks refused. */
static void admin_text(struct otp *o, struct metrics_text *t)
{
    struct admin_stats as;
    int i;

    admin_stats(o->d.admin, &as);
    metrics_head(t, "otpd_blocked_total", "counter",
                 "Requests refused by an admin block, by what the block matched.");
    for (i = 0; i < ADMIN_M_COUNT; i++)
        metrics_u64(t, "otpd_blocked_total", as.blocked[i], "match", admin_match_name((enum admin_match)i));
    metrics_head(t, "otpd_admin_rows", "gauge", "Live admin rows in this instance's snapshot, by kind.");
    metrics_u64(t, "otpd_admin_rows", as.overrides, "kind", "override");
    metrics_u64(t, "otpd_admin_rows", as.blocks, "kind", "block");
    metrics_head(t, "otpd_admin_refresh_failures_total", "counter",
                 "Snapshot refreshes that could not read Redis.");
    metrics_u64(t, "otpd_admin_refresh_failures_total", as.refresh_failures);
}

char *otp_metrics(struct otp *o)
{
    struct metrics_text t = {0};

    metrics_head(&t, "otpd_build_info", "gauge", "The running build: its version (git describe).");
    metrics_u64(&t, "otpd_build_info", 1, "version", o->d.version ? o->d.version : "unknown");
    pthread_mutex_lock(&o->mu);
    decisions_text(o, &t);
    guards_text(o, &t);
    pthread_mutex_unlock(&o->mu);
    limits_text(o, &t);
    store_text(o, &t);
    flow_text(o, &t);
    caps_text(o, &t);
    lanes_metrics(o->d.lanes, &t);
    metrics_hist_text(&t);
    report_metrics(o->report, &t);
    if (o->d.admin != NULL)
        admin_text(o, &t);
    return metrics_text_take(&t);
}
