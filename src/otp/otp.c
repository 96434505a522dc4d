/*
 * otp: one call per API request, on the HTTP worker threads. Each issue
 * costs one Redis round trip and, when accepted, one ledger commit (shared
 * with whatever else commits in that batch); each verify one Redis round
 * trip. Refusals are recorded without waiting.
 */
#include "otp.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../pacer/schedule.h"

#define OTP_SHADOW_RULES 32
/* A release whose outcome is unknown is tried this often, this far apart. */
#define OTP_RELEASE_TRIES 3
#define OTP_RELEASE_GAP_MS 100

/* The operations whose decisions /metrics counts, with the outcome
 * table's bit that says which outcomes each can give. */
enum otp_op { OTP_OP_ISSUE, OTP_OP_VERIFY, OTP_OP_CANCEL, OTP_OPS };
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
#define OTP_FIXED_REASONS (sizeof(fixed_reasons) / sizeof(fixed_reasons[0]))
#define OTP_REFUSAL_LABELS (2 * OTP_SHADOW_RULES + OTP_FIXED_REASONS)

struct otp {
    struct otp_deps d;
    pthread_mutex_t mu; /* guards the counters */
    uint64_t decided[OTP_OPS][OUT_COUNT];
    /* refusals by rule: names, then counts; n_refusal names in use */
    char refusal_name[OTP_REFUSAL_LABELS][CFG_NAME_MAX];
    uint64_t refusal_count[OTP_REFUSAL_LABELS];
    size_t n_refusal;
    char shadow_name[OTP_SHADOW_RULES][CFG_NAME_MAX];
    uint64_t shadow_count[OTP_SHADOW_RULES];
    uint64_t ledger_errors;  /* ledger submissions that failed even after a retry */
    struct idem *idem;       /* Idempotency-Key state, for the HTTP layer */
    char not_ready[OTP_ERR_LEN]; /* the last /readyz failure logged, under mu */
    struct report *report;       /* delivery reports */
    /* countries.monitor: issue requests per monitored region, under mu.
     * Labels come only from the config's list (fraud_country). */
    char monitor_region[CFG_REGIONS_MAX][CFG_REGION_LEN];
    uint64_t monitor_count[CFG_REGIONS_MAX];
    uint64_t monitor_logged_ns[CFG_REGIONS_MAX]; /* when a line last named the region */
    uint64_t monitor_logged[CFG_REGIONS_MAX];    /* its count then */
    /* The pumping guard, under mu: holds started; in shadow mode, holds
     * that would have started and requests a hold would have refused. */
    uint64_t pump_holds, pump_shadow_holds, pump_shadow_refusals;
    /* The cost caps whose headroom /metrics reads: the global ones, then
     * each per-caller cap for each caller key of the config (a bounded
     * set, so no label comes from a request). Set at start, read only. */
    struct limits_cap_ask caps[LIMITS_HEADROOM_MAX];
    char cap_window[LIMITS_HEADROOM_MAX][24];       /* "1h", for the label */
    const char *cap_caller[LIMITS_HEADROOM_MAX];    /* NULL for a global cap */
    size_t n_caps;
    /* What SIGHUP changes here (otp_reload), under live_mu: a new code's
     * life and the text of messages rendered from then on. */
    pthread_mutex_t live_mu;
    int64_t ttl_ms;
    char tmpl[CFG_STR_MAX];
};

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

struct otp *otp_new(const struct otp_deps *d)
{
    struct otp *o = calloc(1, sizeof(*o));

    if (o == NULL)
        return NULL;
    o->d = *d;
    if ((o->idem = idem_new(d->store, d->keys)) == NULL ||
        (o->report = report_new(d->cfg.provider, d->keys, d->ledger, d->pacer)) == NULL) {
        idem_free(o->idem);
        free(o);
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    refusals_seed(o);
    caps_seed(o);
    pthread_mutex_init(&o->live_mu, NULL);
    otp_reload(o, d->cfg.otp);
    return o;
}

void otp_reload(struct otp *o, const struct otp_conf *c)
{
    pthread_mutex_lock(&o->live_mu);
    o->ttl_ms = c->ttl_ms;
    snprintf(o->tmpl, sizeof(o->tmpl), "%s", c->tmpl);
    pthread_mutex_unlock(&o->live_mu);
}

void otp_free(struct otp *o)
{
    if (o == NULL)
        return;
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->live_mu);
    idem_free(o->idem);
    report_free(o->report);
    free(o);
}

struct idem *otp_idem(struct otp *o)
{
    return o->idem;
}

struct admin *otp_admin(struct otp *o)
{
    return o->d.admin;
}

void otp_admin_changed(struct otp *o)
{
    limits_cache_clear(o->d.limits);
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

/* Counts op's decision a: by outcome, and a refusal by its rule. A rule
 * name not seen before (a reload of the rules) takes a free label while
 * there is one; past that it is logged, not counted. */
static void count(struct otp *o, enum otp_op op, const struct otp_answer *a)
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

/* Counts and logs each shadow rule in a comma-separated list. */
static void count_shadow(struct otp *o, const char *list, const char *phone_kind)
{
    char copy[256], *save = NULL, *name;
    int i;

    snprintf(copy, sizeof(copy), "%s", list);
    for (name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        log_event(LOG_INFO, "rule.shadow_refused", LOG_FIELDS(LOG_STR("rule", name), LOG_STR("op", phone_kind)),
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

static int64_t ceil_s(int64_t ms)
{
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* A refusal's Retry-After: whole seconds, rounded up, at least one. */
static int64_t retry_s(int64_t ms)
{
    return ms > 1000 ? ceil_s(ms) : 1;
}

/* Sets out's outcome (and with it its status code, from the one table)
 * and its detail. */
static void answer(struct otp_answer *out, enum otp_outcome outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void answer(struct otp_answer *out, enum otp_outcome outcome, const char *fmt, ...)
{
    va_list ap;

    out->outcome = outcome;
    out->rc = otp_outcome_row(outcome)->rc;
    va_start(ap, fmt);
    vsnprintf(out->detail, sizeof(out->detail), fmt, ap);
    va_end(ap);
}

/* Fail closed: Redis is slow or gone, so nothing is decided or sent. The
 * caller may retry once the breaker lets a probe through, not before. */
static void store_down(struct otp *o, struct otp_answer *out, const char *op, const char *err)
{
    log_event(LOG_WARN, "store.unavailable", LOG_FIELDS(LOG_STR("op", op), LOG_STR("outcome", "store_unavailable")),
              "%s refused, store unavailable: %s", op, err);
    answer(out, OUT_STORE_UNAVAILABLE, "the rate-limit store is unavailable");
    out->retry_after_s = retry_s(store_breaker_left_ms(o->d.store));
}

/* 1 when an admin block matches rq; then the refusal (403 blocked) is in
 * out and which kind of block in rule (CFG_NAME_MAX bytes), or 503
 * store_unavailable when the admin rows are stale (the block may be gone).
 * No Redis call: a blocked request takes nothing. */
static int blocked(struct otp *o, const struct otp_req *rq, struct otp_answer *out, char *rule)
{
    struct admin_subject s = {rq->phone, rq->region, rq->device_id, rq->client_ip, rq->api_key};
    char what[16];
    int hit;

    if (o->d.admin == NULL || (hit = admin_blocked(o->d.admin, &s, what, sizeof(what))) == 0)
        return 0;
    if (hit < 0) {
        store_down(o, out, "block check", "the admin rows could not be read for 2 s");
        return 1;
    }
    snprintf(rule, CFG_NAME_MAX, "block:%s", what);
    answer(out, OUT_BLOCKED, "an operator's block (%s) matches this request", what);
    return 1;
}

/* 1 when rq's number type is one phone.types serves; else 0 with the
 * refusal (403 number_type) in out. Runs before anything is taken. */
static int type_served(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    if ((unsigned)rq->type < PHONE_TYPE_COUNT && (o->d.cfg.limits->phone_types & PHONE_TYPE_BIT(rq->type)) != 0)
        return 1;
    answer(out, OUT_NUMBER_TYPE, "phone is a %s number (%s); this service does not send codes to that type", phone_type_name(rq->type),
           rq->region[0] ? rq->region : "no region");
    return 0;
}

/* 1 when countries serves rq's region; else 0 with the refusal (403
 * country_blocked) in out. A monitored region is counted and logged (its
 * region and caller; the number masked). Runs before any Redis call. */
static int country_served(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    char masked[PHONE_MAX];
    int i;

    switch (limits_country(o->d.limits, rq->region)) {
    case FRAUD_DENY:
        answer(out, OUT_COUNTRY_BLOCKED, "this service does not send codes to %s numbers",
               rq->region[0] ? rq->region : "non-geographic (no region)");
        return 0;
    case FRAUD_MONITOR: {
        /* Counted always; logged at most once a second per region, with
         * how many came since its last line, so a flood is not a log flood. */
        uint64_t now_ns = clock_mono_ns(), since = 0;
        int log_it = 0;
        pthread_mutex_lock(&o->mu);
        for (i = 0; i < CFG_REGIONS_MAX; i++) {
            if (o->monitor_region[i][0] == '\0')
                snprintf(o->monitor_region[i], sizeof(o->monitor_region[i]), "%s", rq->region);
            if (strcmp(o->monitor_region[i], rq->region) == 0) {
                o->monitor_count[i]++;
                if (o->monitor_logged_ns[i] == 0 || now_ns - o->monitor_logged_ns[i] >= 1000000000ULL) {
                    log_it = 1;
                    since = o->monitor_count[i] - o->monitor_logged[i];
                    o->monitor_logged_ns[i] = now_ns;
                    o->monitor_logged[i] = o->monitor_count[i];
                }
                break;
            }
        }
        pthread_mutex_unlock(&o->mu);
        if (log_it) {
            fraud_mask(rq->phone, masked, sizeof(masked));
            log_event(LOG_INFO, "country.monitored",
                      LOG_FIELDS(LOG_STR("region", rq->region), LOG_STR("caller", rq->api_key), LOG_STR("phone", masked),
                                 LOG_INT("requests", since)),
                      "countries: monitored");
        }
        return 1;
    }
    case FRAUD_SERVE:
        break;
    }
    return 1;
}

/* Counts and logs what the pumping guard said of one issue: a hold it
 * started names the prefix (never a whole number) once, on the instance
 * whose request started it. */
static void pump_note(struct otp *o, const struct otp_req *rq, const struct limits_issue *li)
{
    uint64_t *counter = NULL;

    switch (li->pump) {
    case LIMITS_PUMP_STARTED:
        counter = &o->pump_holds;
        log_event(LOG_WARN, "pumping.hold",
                  LOG_FIELDS(LOG_STR("prefix", li->pump_prefix), LOG_INT("hold_s", ceil_s(li->pump_left_ms)),
                             LOG_INT("sent", li->pump_sent), LOG_INT("verified", li->pump_verified),
                             LOG_STR("caller", rq->api_key)),
                  "pumping: prefix %s held for %llds: %lld sent, %lld verified in the window "
                  "(below pumping.min_verified_ratio)", li->pump_prefix, (long long)ceil_s(li->pump_left_ms),
                  (long long)li->pump_sent, (long long)li->pump_verified);
        break;
    case LIMITS_PUMP_SHADOW_START:
        counter = &o->pump_shadow_holds;
        log_event(LOG_WARN, "pumping.shadow_hold",
                  LOG_FIELDS(LOG_STR("prefix", li->pump_prefix), LOG_INT("hold_s", ceil_s(li->pump_left_ms)),
                             LOG_INT("sent", li->pump_sent), LOG_INT("verified", li->pump_verified),
                             LOG_STR("caller", rq->api_key)),
                  "pumping (shadow): prefix %s would be held for %llds: %lld sent, %lld verified in the "
                  "window (below pumping.min_verified_ratio)", li->pump_prefix, (long long)ceil_s(li->pump_left_ms),
                  (long long)li->pump_sent, (long long)li->pump_verified);
        break;
    case LIMITS_PUMP_SHADOW_HELD:
        counter = &o->pump_shadow_refusals;
        break;
    case LIMITS_PUMP_HELD:
    case LIMITS_PUMP_NONE:
        break;
    }
    if (counter != NULL) {
        pthread_mutex_lock(&o->mu);
        (*counter)++;
        pthread_mutex_unlock(&o->mu);
    }
}

/* The message text for verification vid, expiring in expires_in_ms. */
static enum otp_rc render(struct otp *o, const char *vid, int64_t expires_in_ms, char *text, size_t cap)
{
    char code[CODE_MAX_DIGITS + 1], tmpl[CFG_STR_MAX];
    enum otp_rc rc;

    pthread_mutex_lock(&o->live_mu);
    memcpy(tmpl, o->tmpl, sizeof(tmpl));
    pthread_mutex_unlock(&o->live_mu);
    code_derive(o->d.keys, vid, o->d.cfg.otp->length, code);
    rc = code_render(tmpl, code, (int)((expires_in_ms + 59999) / 60000), text, cap);
    code_wipe(code, sizeof(code));
    return rc;
}

/* The pacer's render hook (struct pacer_render): the text and the
 * delivery-report query of message id of verification vid, rendered by
 * whichever instance sends it. The report URL's expiry counts from the
 * acceptance (Redis's clock, as the ledger's created_ms). */
static enum otp_rc render_msg(void *ctx, const char *id, const char *vid, int64_t expires_ms, int64_t accepted_ms,
                              char *text, size_t cap, char *dlr_query, size_t dlr_cap)
{
    struct otp *o = ctx;
    int64_t now_ms = clock_wall_ms();

    if (report_query(o->report, id, accepted_ms > 0 ? accepted_ms : now_ms, dlr_query, dlr_cap) != OTP_OK)
        return OTP_EINVAL;
    return render(o, vid, expires_ms - now_ms, text, cap);
}

/* The purpose of rq: "default" when the request named none. */
static const char *purpose_of(const struct otp_req *rq)
{
    return rq->purpose ? rq->purpose : "default";
}

/* The values of rq that rules are keyed on, into lr (no HMAC: the refusal
 * cache's lookup needs only these); ip_key is limits_ip_key's, or NULL. */
static void keys_fill(const struct otp_req *rq, const char *ip_key, struct limits_request *lr)
{
    lr->phone = rq->phone;
    lr->device_id = rq->device_id;
    lr->api_key = rq->api_key;
    lr->purpose = purpose_of(rq);
    lr->ip_key = ip_key;
    memcpy(lr->region, rq->region, sizeof(lr->region));
    lr->type = rq->type;
}

/* The parts of a limits request that name rq's verification (phone,
 * caller, purpose) and its keys (lr->ip_key kept); scope holds
 * CODE_SCOPE_LEN + 1 bytes. */
static void scope_fill(struct otp *o, const struct otp_req *rq, struct limits_request *lr, char *scope)
{
    code_scope(o->d.keys, rq->api_key, purpose_of(rq), scope);
    keys_fill(rq, lr->ip_key, lr);
    lr->scope = scope;
}

static struct ledger_request request_row(const struct otp_req *rq, const char *kind, const char *decision,
                                         const char *rule, const char *shadow, const char *vid, const char *mid,
                                         int status)
{
    struct ledger_request r = {
        .ts_ms = clock_wall_ms(),
        .kind = kind,
        .api_key = rq->api_key,
        .phone = rq->phone,
        .device_id = rq->device_id,
        .client_ip = rq->client_ip,
        .decision = decision,
        .rule = rule && rule[0] ? rule : NULL,
        .shadow = shadow && shadow[0] ? shadow : NULL,
        .verification_id = vid && vid[0] ? vid : NULL,
        .message_id = mid && mid[0] ? mid : NULL,
        .http_status = status,
        .purpose = purpose_of(rq),
    };

    return r;
}

/* Every ledger submission's status goes through here: a failure (out of
 * memory, or the ledger closing) is logged and counted, never dropped
 * silently. Submissions only fail before anything was queued, so the
 * caller may retry once. Returns rc. */
static enum otp_rc ledger_checked(struct otp *o, enum otp_rc rc, const char *what, const char *id)
{
    if (rc == OTP_OK)
        return rc;
    log_msg(LOG_ERROR, "ledger: %s failed for %s: %s", what, id && id[0] ? id : "-", otp_rc_str(rc));
    pthread_mutex_lock(&o->mu);
    o->ledger_errors++;
    pthread_mutex_unlock(&o->mu);
    return rc;
}

/* Records the decision a without waiting for the commit. */
static void record(struct otp *o, const struct otp_req *rq, const char *kind, const struct otp_answer *a,
                   const char *shadow, const char *vid)
{
    const struct otp_outcome_row *row = otp_outcome_row(a->outcome);
    struct ledger_request r = request_row(rq, kind, row->error, a->reason, shadow, vid, NULL, row->http_status);
    enum otp_rc rc = ledger_request(o->d.ledger, &r);

    if (rc != OTP_OK)
        rc = ledger_request(o->d.ledger, &r);
    ledger_checked(o, rc, kind, vid);
}

/* A verification's new state after a guess; retried once, then counted. */
static void verification_update(struct otp *o, const char *vid, const char *status, int wrong_delta)
{
    enum otp_rc rc = ledger_verification_update(o->d.ledger, vid, status, wrong_delta, clock_wall_ms());

    if (rc != OTP_OK)
        rc = ledger_verification_update(o->d.ledger, vid, status, wrong_delta, clock_wall_ms());
    ledger_checked(o, rc, "verification update", vid);
}

/* Releases an accepted issue's message to the senders (limits_commit),
 * with answer (or NULL) stored for its Idempotency-Key in the same step.
 * The commit is idempotent, so a failure whose outcome is unknown is tried
 * again a few times (Redis blips are short): the answer, 202 or 503, should
 * rest on a known outcome. OTP_OK once released. */
static enum otp_rc release(struct otp *o, const struct limits_undo *u, const char *answer, char *err)
{
    enum otp_rc rc = OTP_ESTORE;
    int tries;

    for (tries = 0; tries < OTP_RELEASE_TRIES &&
                    (rc = limits_commit(o->d.limits, u, answer, IDEM_KEEP_MS, err)) == OTP_ESTORE;
         tries++)
        nanosleep(&(struct timespec){0, OTP_RELEASE_GAP_MS * 1000000L}, NULL);
    return rc;
}

/* The Idempotency-Key's part of lr (none without one), in li. */
static void idem_fill(struct otp *o, const struct otp_req *rq, struct limits_idem *li,
                      struct limits_request *lr)
{
    if (rq->idem == NULL)
        return;
    li->key = rq->idem->claim->rkey;
    li->count = rq->idem->claim->ckey;
    li->hash = rq->idem->claim->hash;
    li->claim_ms = IDEM_PENDING_MS;
    li->max_keys = o->d.cfg.otp->idem_keys;
    lr->idem = li;
}

/* rq's Idempotency-Key is another request's, or this request's claim on it
 * lapsed before its commit (its decision is given back): nothing of this
 * attempt stands, so it is neither recorded nor counted, and the HTTP
 * layer looks the key up again. */
static void idem_again(struct otp_answer *out)
{
    memset(out, 0, sizeof(*out));
    answer(out, OUT_IDEM_IN_USE, "a request with this Idempotency-Key is still being decided");
    out->retry_after_s = 1;
}

/* An accepted message that will never be released: its ledger row ends
 * 'failed' with why. */
static void unreleased(struct otp *o, const char *id, const char *why)
{
    ledger_checked(o,
                   ledger_message_state(o->d.ledger, id, "failed", "queued", NULL, why, -1, clock_wall_ms()),
                   "release failure", id);
}

int otp_issue_screen(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    char ip_key[LIMITS_IP_KEY_MAX];

    memset(out, 0, sizeof(*out));
    if (!type_served(o, rq, out) || !country_served(o, rq, out))
        goto refused;
    if (rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK) {
        answer(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        count(o, OTP_OP_ISSUE, out); /* counted, not recorded: bad input writes no row */
        return 1;
    }
    if (blocked(o, rq, out, out->reason))
        goto refused;
    return 0;
refused:
    record(o, rq, "issue", out, NULL, NULL);
    count(o, OTP_OP_ISSUE, out);
    return 1;
}

void otp_issue(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    const struct otp_sections *c = &o->d.cfg;
    char ip_key[LIMITS_IP_KEY_MAX], vid[CODE_ID_LEN + 1], vhash[CODE_HASH_LEN + 1], *packed = NULL;
    char code[CODE_MAX_DIGITS + 1], err[OTP_ERR_LEN] = "", rid[CODE_ID_LEN + 1], scope[CODE_SCOPE_LEN + 1];
    struct limits_request lr = {0};
    struct limits_idem lid = {0};
    struct limits_issue li;
    struct ledger_message lm;
    struct ledger_request row;
    int64_t now_ms, exp_ms;
    enum otp_rc rc;

    memset(out, 0, sizeof(*out));
    memset(&li, 0, sizeof(li));
    /* otp_issue_screen refused a bad client_ip already. */
    if (rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK) {
        answer(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        return;
    }
    /* A refusal remembered from Redis: answered before any code work. */
    keys_fill(rq, rq->client_ip ? ip_key : NULL, &lr);
    if ((out->cached = limits_cached_issue(o->d.limits, &lr, &li)) != 0)
        goto decided;
    code_new_id(vid);
    code_derive(o->d.keys, vid, c->otp->length, code);
    code_hash(o->d.keys, rq->phone, code, vhash);
    code_wipe(code, sizeof(code));
    scope_fill(o, rq, &lr, scope);
    code_new_id(rid); /* names this request's script call, for its retry and its abandon */
    lr.rid = rid;
    code_new_id(out->id); /* the message an accepted issue queues */
    lr.mid = out->id;
    lr.vid = vid;
    lr.vhash = vhash;
    pthread_mutex_lock(&o->live_mu);
    lr.ttl_ms = o->ttl_ms;
    pthread_mutex_unlock(&o->live_mu);
    lr.max_attempts = c->otp->max_attempts;
    idem_fill(o, rq, &lid, &lr);
    if (limits_issue(o->d.limits, &lr, &li, err) != OTP_OK) {
        store_down(o, out, "issue", err);
        goto refused;
    }
    if (li.idem_taken) {
        idem_again(out);
        return;
    }
decided:
    out->header = li.header;
    pump_note(o, rq, &li);
    if (li.shadow[0])
        count_shadow(o, li.shadow, "issue");
    if (li.rc != OTP_OK) {
        out->retry_after_s = retry_s(li.retry_ms);
        snprintf(out->reason, sizeof(out->reason), "%s", li.reason);
        if (li.rc == OTP_EFULL) {
            answer(out, OUT_QUEUE_FULL, "the send queue is full");
            out->retry_after_s = sched_full_retry_s(li.depth, c->pacer->rate);
        } else if (li.rc == OTP_ECOST) {
            answer(out, OUT_COST_CAP, "the SMS budget is spent for now");
        } else if (li.rc == OTP_ELOCKED) {
            answer(out, OUT_LOCKED, "too many wrong codes for this phone");
        } else if (li.rc == OTP_EPUMPING) {
            answer(out, OUT_SUSPECTED_PUMPING,
                   "codes to numbers starting %s are paused: too few of them are verified (suspected SMS pumping)",
                   li.pump_prefix);
            snprintf(out->reason, sizeof(out->reason), "pumping");
        } else if (strcmp(li.reason, LIMITS_IDEM_REASON) == 0) {
            answer(out, OUT_RATE_LIMITED, "this caller holds otp.idempotency_keys Idempotency-Keys already");
        } else {
            answer(out, OUT_RATE_LIMITED, "limit %s reached", li.reason);
        }
        goto refused;
    }

    /* Accepted: the message is held in Redis (issue.lua, "Holds") until
     * its rows are durable here; only then does the commit make it visible
     * to the fleet's senders, and only then is it 202. Its expiry is on
     * Redis's clock, as the senders check it. */
    now_ms = li.now_ms;
    exp_ms = li.now_ms + li.expires_in_ms;
    lm = (struct ledger_message){0, out->id, li.vid, rq->api_key, rq->phone, "queued", now_ms, exp_ms, 0,
                                 li.price_minor, li.now_ms, li.cost_caps};
    row = request_row(rq, "issue", otp_outcome_row(OUT_ACCEPTED)->error, NULL, li.shadow, li.vid, out->id,
                      otp_outcome_row(OUT_ACCEPTED)->http_status);
    /* The verification, message and request rows commit together before the 202. */
    if (ledger_accept(o->d.ledger, &lm, exp_ms, &row) != OTP_OK) {
        log_msg(LOG_ERROR, "ledger commit failed; issue refused");
        answer(out, OUT_LEDGER_UNAVAILABLE, "the audit ledger cannot commit");
        goto undo;
    }
    answer(out, OUT_ACCEPTED, "accepted");
    snprintf(out->verification_id, sizeof(out->verification_id), "%s", li.vid);
    out->expires_in_s = li.expires_in_ms / 1000;
    out->resend_after_s = ceil_s(li.resend_after_ms);
    /* With an Idempotency-Key, this 202 is stored with the release. */
    if (rq->idem != NULL && (packed = rq->idem->pack(rq->idem->ctx, out)) == NULL) {
        unreleased(o, out->id, "never released: out of memory for its answer");
        answer(out, OUT_INTERNAL, "out of memory");
        goto undo;
    }
    rc = release(o, &li.undo, packed, err);
    free(packed);
    if (rc == OTP_ENOTFOUND && rq->idem != NULL) {
        /* Fenced: our claim lapsed (this instance stalled) and the key may
         * be another request's by now; ours is given back, unsent. */
        log_msg(LOG_WARN, "message %s not released: %s", out->id, err);
        unreleased(o, out->id, "never released: its Idempotency-Key's claim lapsed first");
        limits_abandon(o->d.limits, &li.undo);
        idem_again(out);
        return;
    }
    if (rc != OTP_OK) {
        /* Not visible to the senders; or, if a commit ran after all and its
         * answers were lost, ended unsent by the abandon below unless a
         * sender started it in between (README, "A fleet"). */
        log_msg(LOG_ERROR, "cannot release message %s to the senders: %s", out->id, err);
        unreleased(o, out->id, "never released to the senders: answered 503");
        answer(out, OUT_STORE_UNAVAILABLE, "the store did not confirm the message");
        goto undo;
    }
    pacer_wake(o->d.pacer);
    count(o, OTP_OP_ISSUE, out);
    return;

undo:
    /* Our own failure after the limits were taken: no SMS, and everything
     * the script took (quota, cost, the verification it started, the
     * message's hold, the Idempotency-Key's claim) goes back through its
     * undo record. */
    limits_abandon(o->d.limits, &li.undo);
    out->retry_after_s = 1;
refused:
    record(o, rq, "issue", out, li.shadow, NULL);
    count(o, OTP_OP_ISSUE, out);
}

static int all_digits(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return s[n] == '\0';
}

int otp_verify_screen(struct otp *o, const struct otp_req *rq, const char *guess, struct otp_answer *out)
{
    const struct otp_sections *c = &o->d.cfg;
    char ip_key[LIMITS_IP_KEY_MAX];

    memset(out, 0, sizeof(*out));
    if (!type_served(o, rq, out))
        goto refused;
    if (rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK) {
        answer(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        goto refused;
    }
    /* Verify too: a blocked bot network must not go on guessing the codes
     * it already has, and a block that let verifies through would still
     * spend Redis round trips on it. */
    if (blocked(o, rq, out, out->reason))
        goto refused;
    /* A malformed guess is recorded but never counts as an attempt. */
    if (strlen(guess) != (size_t)c->otp->length || !all_digits(guess, (size_t)c->otp->length)) {
        answer(out, OUT_INVALID_REQUEST, "code must be %d digits", c->otp->length);
        goto refused;
    }
    return 0;
refused:
    record(o, rq, "verify", out, NULL, NULL);
    count(o, OTP_OP_VERIFY, out);
    return 1;
}

/* The answer to a guess, from what verify.lua said of it. */
static void verify_answer(const struct limits_verify *lv, struct otp_answer *out)
{
    out->header = lv->header;
    out->attempts_left = lv->attempts_left;
    switch (lv->rc) {
    case OTP_OK:
        answer(out, OUT_VERIFIED, "verified");
        snprintf(out->verification_id, sizeof(out->verification_id), "%s", lv->vid);
        break;
    case OTP_EBADCODE:
        answer(out, OUT_INVALID_CODE, "the code is wrong");
        break;
    case OTP_ELOCKED:
        answer(out, OUT_LOCKED, "too many wrong codes for this phone");
        snprintf(out->reason, sizeof(out->reason), "%s", lv->reason);
        out->retry_after_s = retry_s(lv->retry_ms);
        break;
    case OTP_ELIMITED:
        if (strcmp(lv->reason, LIMITS_IDEM_REASON) == 0)
            answer(out, OUT_RATE_LIMITED, "this caller holds otp.idempotency_keys Idempotency-Keys already");
        else
            answer(out, OUT_RATE_LIMITED, "limit %s reached", lv->reason);
        snprintf(out->reason, sizeof(out->reason), "%s", lv->reason);
        out->retry_after_s = retry_s(lv->retry_ms);
        break;
    default:
        answer(out, OUT_NO_ACTIVE_CODE, "no live code for this phone");
        break;
    }
}

/* The verification's ledger row after a guess that stands. */
static void verify_note(struct otp *o, const struct limits_verify *lv)
{
    if (lv->rc == OTP_OK)
        verification_update(o, lv->vid, "verified", 0);
    else if (lv->rc == OTP_EBADCODE || (lv->rc == OTP_ELOCKED && lv->vid[0]))
        verification_update(o, lv->vid, lv->attempts_left > 0 ? "pending" : "exhausted", 1);
}

/* Commits a guess that claimed rq's Idempotency-Key, with its answer out.
 * Returns 1 when it stands; else the guess is given back and out says
 * why: idem_again (the claim lapsed first) or a 503. */
static int verify_commit(struct otp *o, const struct otp_req *rq, const struct limits_verify *lv,
                         struct otp_answer *out)
{
    char err[OTP_ERR_LEN] = "out of memory", *packed = rq->idem->pack(rq->idem->ctx, out);
    enum otp_rc rc = packed ? limits_commit(o->d.limits, &lv->undo, packed, IDEM_KEEP_MS, err) : OTP_ENOMEM;

    free(packed);
    if (rc == OTP_OK)
        return 1;
    limits_abandon(o->d.limits, &lv->undo);
    memset(out, 0, sizeof(*out));
    if (rc == OTP_ENOTFOUND)
        idem_again(out);
    else
        store_down(o, out, "verify", err);
    return 0;
}

void otp_verify(struct otp *o, const struct otp_req *rq, const char *guess, struct otp_answer *out)
{
    const struct otp_sections *c = &o->d.cfg;
    char hash[CODE_HASH_LEN + 1], ip_key[LIMITS_IP_KEY_MAX], err[OTP_ERR_LEN] = "", rid[CODE_ID_LEN + 1];
    char scope[CODE_SCOPE_LEN + 1];
    struct limits_request lr = {0};
    struct limits_idem lid = {0};
    struct limits_verify lv;

    memset(out, 0, sizeof(*out));
    memset(&lv, 0, sizeof(lv));
    /* otp_verify_screen refused a bad client_ip already. */
    if (rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK) {
        answer(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        return;
    }
    keys_fill(rq, rq->client_ip ? ip_key : NULL, &lr);
    if (!(out->cached = limits_cached_verify(o->d.limits, &lr, &lv))) {
        code_hash(o->d.keys, rq->phone, guess, hash);
        code_new_id(rid);
        scope_fill(o, rq, &lr, scope);
        lr.rid = rid;
        idem_fill(o, rq, &lid, &lr);
        if (limits_verify(o->d.limits, &lr, hash, c->otp->max_attempts, &lv, err) != OTP_OK) {
            store_down(o, out, "verify", err);
            goto done;
        }
        if (lv.idem_taken) {
            idem_again(out);
            return;
        }
    }
    verify_answer(&lv, out);
    /* With an Idempotency-Key, a guess that changed something stands only
     * once its answer is stored. */
    if (lv.undo.nkeys > 0 && !verify_commit(o, rq, &lv, out)) {
        if (out->outcome == OUT_IDEM_IN_USE)
            return;
        goto done;
    }
    if (lv.shadow_lock)
        count_shadow(o, lv.reason, "verify");
    if (lv.shadow[0])
        count_shadow(o, lv.shadow, "verify");
    verify_note(o, &lv);
done:
    record(o, rq, "verify", out, lv.shadow_lock ? lv.reason : NULL, lv.vid);
    count(o, OTP_OP_VERIFY, out);
}

void otp_cancel(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    char err[OTP_ERR_LEN] = "", rid[CODE_ID_LEN + 1], scope[CODE_SCOPE_LEN + 1], vid[LIMITS_ID_MAX];
    struct limits_request lr = {0};
    int stopped;

    memset(out, 0, sizeof(*out));
    code_new_id(rid);
    scope_fill(o, rq, &lr, scope);
    lr.rid = rid;
    switch (limits_cancel(o->d.limits, &lr, vid, err)) {
    case OTP_OK:
        break;
    case OTP_ENOTFOUND:
        answer(out, OUT_NO_ACTIVE_CODE, "no live code for this phone, caller and purpose");
        count(o, OTP_OP_CANCEL, out);
        return;
    default:
        store_down(o, out, "cancel", err);
        count(o, OTP_OP_CANCEL, out);
        return;
    }
    /* The verification is gone, so no code of it verifies any more; its
     * messages still queued end unsent and give their reservation back. */
    stopped = pacer_cancel(o->d.pacer, vid);
    log_msg(LOG_INFO, "verification %s cancelled by %s; %d queued messages stopped", vid, rq->api_key, stopped);
    answer(out, OUT_CANCELLED, "cancelled");
    snprintf(out->verification_id, sizeof(out->verification_id), "%s", vid);
    count(o, OTP_OP_CANCEL, out);
}

enum otp_rc otp_status(struct otp *o, const char *api_key, const char *id, char *state)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc = pacer_status(o->d.pacer, api_key, id, state, err);

    if (rc == OTP_ESTORE)
        log_msg(LOG_WARN, "status of message %s: %s", id, err);
    return rc;
}

struct import_ctx {
    struct otp *o;
    int64_t now_ms;
    int added, failed;
    char err[OTP_ERR_LEN];
};

/* One message this ledger holds queued or sending. Those of the fleet are
 * in Redis already (their hash lives a day, longer than any code); a
 * ledger from before the fleet holds its queue alone. Dead codes stay. */
static void import_one(void *arg, const struct ledger_message *m)
{
    struct import_ctx *x = arg;
    int added = 0;

    if (m->expires_ms - x->now_ms < sched_min_life_ms(x->o->d.cfg.otp->ttl_ms))
        return;
    if (pacer_import(x->o->d.pacer, m, &added, x->err) != OTP_OK)
        x->failed++;
    x->added += added;
}

enum otp_rc otp_start_pacer(struct otp *o, char *err)
{
    struct pacer_render r = {render_msg, o};
    struct import_ctx x = {o, clock_wall_ms(), 0, 0, ""};

    if (ledger_pending(o->d.ledger, import_one, &x, err) != OTP_OK)
        return OTP_EIO;
    if (x.failed > 0)
        log_msg(LOG_WARN, "%d queued messages of this ledger could not be checked against Redis (%s): the next "
                "start tries again", x.failed, x.err);
    if (x.added > 0)
        log_msg(LOG_INFO, "%d queued messages of a ledger from before the fleet joined the fleet's queue", x.added);
    return pacer_start(o->d.pacer, &r, err);
}

enum report_verdict otp_delivery(struct otp *o, const struct report_in *in)
{
    return report_handle(o->report, in);
}

/* Appends the risky Redis settings of the last check to why ("" when
 * none): a warning only, readiness stays (a fleet must not go down on it). */
static void redis_conf_warnings(struct otp *o, char *why, size_t cap)
{
    struct store_redis_conf rc;
    size_t n = strlen(why);

    store_redis_conf(o->d.store, &rc);
    if (rc.policy_risky && n < cap)
        n += (size_t)snprintf(why + n, cap - n, "; redis: maxmemory-policy is %s, must be noeviction",
                              rc.maxmemory_policy);
    if (rc.appendonly_risky && n < cap)
        snprintf(why + n, cap - n, "; redis: appendonly is %s, must be yes", rc.appendonly);
}

/*
 * /readyz is often reachable by more than the operator: its detail says
 * what is wrong but names no address. The whole error goes to the log,
 * once each time it changes. Store errors name an address only as
 * "redis connect HOST:PORT: why" (an IPv6 HOST holds no ": ").
 */
static void not_ready(struct otp *o, const char *what, const char *err, char *why, size_t cap)
{
    static const char connect[] = "redis connect ";
    const char *sep = strncmp(err, connect, strlen(connect)) == 0 ? strstr(err, ": ") : NULL;

    pthread_mutex_lock(&o->mu);
    if (strcmp(o->not_ready, err) != 0) {
        snprintf(o->not_ready, sizeof(o->not_ready), "%s", err);
        log_msg(LOG_WARN, "not ready: %s: %s", what, err);
    }
    pthread_mutex_unlock(&o->mu);
    if (sep != NULL)
        snprintf(why, cap, "%s: cannot connect to redis%s", what, sep);
    else
        snprintf(why, cap, "%s: %s", what, err);
}

int otp_ready(struct otp *o, char *why, size_t cap)
{
    char err[OTP_ERR_LEN];

    /* The ping goes through the breaker: refused at once while it is open,
     * and the half-open probe once it is due, so readiness comes back
     * without API traffic. */
    limits_flush(o->d.limits); /* abandons of 503'd requests, even without API traffic */
    if (store_ping(o->d.store, err) != OTP_OK) {
        not_ready(o, "redis", err, why, cap);
        return 0;
    }
    if (!ledger_healthy(o->d.ledger)) {
        snprintf(why, cap, "ledger: the last transaction failed");
        return 0;
    }
    if (pacer_full(o->d.pacer)) {
        snprintf(why, cap, "the send queue is full");
        return 0;
    }
    snprintf(why, cap, "ok");
    redis_conf_warnings(o, why, cap);
    return 1;
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
