/*
 * otp_metrics: the service's counters and its /metrics page. Every decision
 * is counted here (one mutex, held for a few adds); the page is built once
 * per scrape, seconds apart, from these counters, each module's stats and
 * one Redis call for the cost caps' headroom.
 */
#include <stdarg.h>
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
                                            "share_per_key", LIMITS_IDEM_REASON};
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

/* A growing text buffer for the metrics page. */
struct text {
    char *s;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->s && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        {
            size_t cap = (t->cap + (size_t)n + 1) * 2;
            char *s = realloc(t->s, cap);
            if (s == NULL)
                return;
            t->s = s;
            t->cap = cap;
        }
    }
}

/* The cost caps' max and headroom (one Redis call; on a failure the
 * headroom is left out, never shown stale or as 0). */
static void cap_metrics(struct otp *o, struct text *t)
{
    const char *cur = o->d.cfg.limits->currency[0] ? o->d.cfg.limits->currency : "none";
    int64_t left[LIMITS_HEADROOM_MAX];
    char err[OTP_ERR_LEN] = "";
    int ok = limits_cap_headroom(o->d.limits, o->caps, o->n_caps, left, err) == OTP_OK;
    size_t i;
    int global;

    if (!ok)
        log_msg(LOG_WARN, "metrics: cost cap headroom unread: %s", err);
    for (global = 1; global >= 0; global--) {
        const char *name = global ? "otpd_cost_cap" : "otpd_cost_cap_caller";
        put(t, "# HELP %s_max_minor %s cost cap's budget per window (cost.caps[].max).\n"
               "# TYPE %s_max_minor gauge\n", name, global ? "A global" : "A per-caller", name);
        for (i = 0; i < o->n_caps; i++)
            if ((o->cap_caller[i] == NULL) == global)
                put(t, "%s_max_minor{currency=\"%s\",window=\"%s\"%s%s%s} %lld\n", name, cur, o->cap_window[i],
                    global ? "" : ",api_key=\"", global ? "" : o->cap_caller[i], global ? "" : "\"",
                    (long long)o->caps[i].max_minor);
        put(t, "# HELP %s_headroom_minor What the cap's current window has left (the fleet's, from Redis).\n"
               "# TYPE %s_headroom_minor gauge\n", name, name);
        for (i = 0; ok && i < o->n_caps; i++)
            if ((o->cap_caller[i] == NULL) == global)
                put(t, "%s_headroom_minor{currency=\"%s\",window=\"%s\"%s%s%s} %lld\n", name, cur,
                    o->cap_window[i], global ? "" : ",api_key=\"", global ? "" : o->cap_caller[i],
                    global ? "" : "\"", (long long)left[i]);
    }
}

char *otp_metrics(struct otp *o)
{
    struct text t = {0};
    struct store_redis_conf rconf;
    struct store_stats ss;
    struct idem_stats is;
    struct pacer_stats ps;
    struct ledger_stats ls;
    struct limits_stats lst;
    int i, op;

    store_stats(o->d.store, &ss);
    store_redis_conf(o->d.store, &rconf);
    idem_stats(o->idem, &is);
    pacer_stats(o->d.pacer, &ps);
    ledger_stats(o->d.ledger, &ls);
    limits_stats(o->d.limits, &lst);
    put(&t, "# HELP otpd_build_info The running build: its version (git describe).\n"
            "# TYPE otpd_build_info gauge\notpd_build_info{version=\"%s\"} 1\n",
        o->d.version ? o->d.version : "unknown");
    put(&t, "# HELP otpd_requests_total API decisions by operation and outcome (each pair that can occur).\n"
            "# TYPE otpd_requests_total counter\n");
    pthread_mutex_lock(&o->mu);
    for (op = 0; op < OTP_OPS; op++)
        for (i = 0; i < OUT_COUNT; i++)
            if (otp_outcome_row((enum otp_outcome)i)->ops & ops[op].bit)
                put(&t, "otpd_requests_total{op=\"%s\",decision=\"%s\"} %llu\n", ops[op].name,
                    otp_outcome_row((enum otp_outcome)i)->error, (unsigned long long)o->decided[op][i]);
    put(&t, "# HELP otpd_refusals_total Issues and verifies refused, by the rule (or the guard) that refused.\n"
            "# TYPE otpd_refusals_total counter\n");
    for (i = 0; i < (int)o->n_refusal; i++)
        put(&t, "otpd_refusals_total{rule=\"%s\"} %llu\n", o->refusal_name[i],
            (unsigned long long)o->refusal_count[i]);
    put(&t, "# HELP otpd_shadow_refusals_total Refusals a shadow rule would have made.\n"
            "# TYPE otpd_shadow_refusals_total counter\n");
    for (i = 0; i < OTP_SHADOW_RULES && o->shadow_name[i][0]; i++)
        put(&t, "otpd_shadow_refusals_total{rule=\"%s\"} %llu\n", o->shadow_name[i],
            (unsigned long long)o->shadow_count[i]);
    put(&t, "# HELP otpd_country_monitored_total Issue requests for numbers of a region on countries.monitor.\n"
            "# TYPE otpd_country_monitored_total counter\n");
    for (i = 0; i < CFG_REGIONS_MAX && o->monitor_region[i][0]; i++)
        put(&t, "otpd_country_monitored_total{region=\"%s\"} %llu\n", o->monitor_region[i],
            (unsigned long long)o->monitor_count[i]);
    put(&t, "# HELP otpd_pumping_holds_total Alert: phone prefixes the pumping guard held (started here).\n"
            "# TYPE otpd_pumping_holds_total counter\notpd_pumping_holds_total %llu\n"
            "# HELP otpd_pumping_shadow_holds_total Holds the pumping guard in shadow mode would have started.\n"
            "# TYPE otpd_pumping_shadow_holds_total counter\notpd_pumping_shadow_holds_total %llu\n"
            "# HELP otpd_pumping_shadow_refusals_total Issues a shadow hold would have refused (served).\n"
            "# TYPE otpd_pumping_shadow_refusals_total counter\notpd_pumping_shadow_refusals_total %llu\n",
        (unsigned long long)o->pump_holds, (unsigned long long)o->pump_shadow_holds,
        (unsigned long long)o->pump_shadow_refusals);
    put(&t, "# HELP otpd_ledger_submit_failures_total Ledger writes that could not be submitted (logged).\n"
            "# TYPE otpd_ledger_submit_failures_total counter\notpd_ledger_submit_failures_total %llu\n",
        (unsigned long long)o->ledger_errors);
    pthread_mutex_unlock(&o->mu);
    put(&t, "# HELP otpd_store_abandons_total Script calls abandoned after a 503 (their takes given back).\n"
            "# TYPE otpd_store_abandons_total counter\notpd_store_abandons_total %llu\n"
            "# HELP otpd_store_abandons_pending Abandons waiting for Redis to answer.\n"
            "# TYPE otpd_store_abandons_pending gauge\notpd_store_abandons_pending %llu\n"
            "# HELP otpd_store_abandons_dropped_total Abandons dropped because their queue was full.\n"
            "# TYPE otpd_store_abandons_dropped_total counter\notpd_store_abandons_dropped_total %llu\n"
            "# HELP otpd_queue_holds_dropped_total Accepted messages dropped by this instance because their "
            "instance never released them (their takes given back).\n"
            "# TYPE otpd_queue_holds_dropped_total counter\notpd_queue_holds_dropped_total %llu\n",
        (unsigned long long)lst.abandoned, (unsigned long long)lst.pending, (unsigned long long)lst.dropped,
        (unsigned long long)lst.holds_dropped);
    put(&t, "# HELP otpd_refusal_cache_hits_total Requests refused from the refusal cache, without a Redis call.\n"
            "# TYPE otpd_refusal_cache_hits_total counter\n"
            "otpd_refusal_cache_hits_total{op=\"issue\"} %llu\notpd_refusal_cache_hits_total{op=\"verify\"} %llu\n"
            "# HELP otpd_refusal_cache_entries Refusals the refusal cache holds (expired ones not yet dropped "
            "included).\n# TYPE otpd_refusal_cache_entries gauge\notpd_refusal_cache_entries %llu\n"
            "# HELP otpd_refusal_cache_evictions_total Refusals the refusal cache dropped for room (LRU).\n"
            "# TYPE otpd_refusal_cache_evictions_total counter\notpd_refusal_cache_evictions_total %llu\n",
        (unsigned long long)lst.cache_hits[0], (unsigned long long)lst.cache_hits[1],
        (unsigned long long)lst.cache_entries, (unsigned long long)lst.cache_evictions);
    put(&t, "# HELP otpd_store_calls_total Redis calls.\n# TYPE otpd_store_calls_total counter\n"
            "otpd_store_calls_total %llu\n"
            "# HELP otpd_store_failures_total Redis calls that failed or timed out.\n"
            "# TYPE otpd_store_failures_total counter\notpd_store_failures_total %llu\n"
            "# HELP otpd_store_breaker_rejects_total Calls refused at once by the open breaker.\n"
            "# TYPE otpd_store_breaker_rejects_total counter\notpd_store_breaker_rejects_total %llu\n"
            "# HELP otpd_store_breaker_open 1 while the Redis circuit breaker is open.\n"
            "# TYPE otpd_store_breaker_open gauge\notpd_store_breaker_open %d\n",
        (unsigned long long)ss.calls, (unsigned long long)ss.failures, (unsigned long long)ss.breaker_rejects,
        store_breaker_open(o->d.store));
    put(&t,
        "# HELP otpd_idempotency_total Requests with an Idempotency-Key, by what became of them.\n"
        "# TYPE otpd_idempotency_total counter\n"
        "otpd_idempotency_total{result=\"decided\"} %llu\n"
        "otpd_idempotency_total{result=\"replayed\"} %llu\n"
        "otpd_idempotency_total{result=\"reused\"} %llu\n"
        "otpd_idempotency_total{result=\"in_use\"} %llu\n",
        (unsigned long long)is.decided, (unsigned long long)is.replayed, (unsigned long long)is.mismatched,
        (unsigned long long)is.busy);
    put(&t, "# HELP otpd_redis_config_risky 1 when a Redis setting otpd relies on is risky or unreadable "
            "(maxmemory-policy must be noeviction, appendonly yes); absent before the first connection.\n"
            "# TYPE otpd_redis_config_risky gauge\n");
    if (rconf.checked)
        put(&t,
            "otpd_redis_config_risky{setting=\"maxmemory-policy\"} %d\n"
            "otpd_redis_config_risky{setting=\"appendonly\"} %d\n",
            rconf.policy_risky, rconf.appendonly_risky);
    put(&t, "# HELP otpd_queue_depth Messages accepted and not ended, the whole fleet's (stream and holds), "
            "at most a second old.\n# TYPE otpd_queue_depth gauge\n"
            "otpd_queue_depth %llu\n"
            "# HELP otpd_provider_inflight Provider calls in flight.\n# TYPE otpd_provider_inflight gauge\n"
            "otpd_provider_inflight %llu\n"
            "# HELP otpd_messages_total Messages that ended, by state.\n# TYPE otpd_messages_total counter\n"
            "otpd_messages_total{state=\"sent\"} %llu\notpd_messages_total{state=\"failed\"} %llu\n"
            "otpd_messages_total{state=\"expired\"} %llu\n"
            "# HELP otpd_provider_calls_total Provider calls that did not succeed, by kind.\n"
            "# TYPE otpd_provider_calls_total counter\n"
            "otpd_provider_calls_total{outcome=\"transient\"} %llu\n"
            "otpd_provider_calls_total{outcome=\"permanent\"} %llu\n"
            "# HELP otpd_provider_permanent_failures_total Alert: the provider refused for good "
            "(bad credentials?).\n# TYPE otpd_provider_permanent_failures_total counter\n"
            "otpd_provider_permanent_failures_total %llu\n",
        (unsigned long long)ps.depth, (unsigned long long)ps.inflight, (unsigned long long)ps.sent,
        (unsigned long long)ps.failed, (unsigned long long)ps.expired, (unsigned long long)ps.transient,
        (unsigned long long)ps.permanent, (unsigned long long)ps.permanent);
    put(&t, "# HELP otpd_ledger_commits_total Ledger transactions committed.\n"
            "# TYPE otpd_ledger_commits_total counter\notpd_ledger_commits_total %llu\n"
            "# HELP otpd_ledger_rows_total Ledger writes committed.\n"
            "# TYPE otpd_ledger_rows_total counter\notpd_ledger_rows_total %llu\n"
            "# HELP otpd_ledger_failures_total Ledger writes or commits that failed.\n"
            "# TYPE otpd_ledger_failures_total counter\notpd_ledger_failures_total %llu\n",
        (unsigned long long)ls.commits, (unsigned long long)ls.rows, (unsigned long long)ls.failures);
    cap_metrics(o, &t);
    {
        char money[4096];
        if (pacer_metrics(o->d.pacer, money, sizeof(money)) > 0)
            put(&t, "%s", money);
        char hist[8192];
        if (metrics_hist_text(hist, sizeof(hist)) > 0)
            put(&t, "%s", hist);
        if (report_metrics(o->report, money, sizeof(money)) > 0)
            put(&t, "%s", money);
    }
    if (o->d.admin != NULL) {
        struct admin_stats as;
        admin_stats(o->d.admin, &as);
        put(&t, "# HELP otpd_blocked_total Requests refused by an admin block, by what the block matched.\n"
                "# TYPE otpd_blocked_total counter\n");
        for (i = 0; i < ADMIN_M_COUNT; i++)
            put(&t, "otpd_blocked_total{match=\"%s\"} %llu\n", admin_match_name((enum admin_match)i),
                (unsigned long long)as.blocked[i]);
        put(&t, "# HELP otpd_admin_rows Live admin rows in this instance's snapshot, by kind.\n"
                "# TYPE otpd_admin_rows gauge\notpd_admin_rows{kind=\"override\"} %llu\n"
                "otpd_admin_rows{kind=\"block\"} %llu\n"
                "# HELP otpd_admin_refresh_failures_total Snapshot refreshes that could not read Redis.\n"
                "# TYPE otpd_admin_refresh_failures_total counter\notpd_admin_refresh_failures_total %llu\n",
            (unsigned long long)as.overrides, (unsigned long long)as.blocks,
            (unsigned long long)as.refresh_failures);
    }
    return t.s;
}
