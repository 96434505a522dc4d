/*
 * otp_gate: what refuses an issue or a verify before any limit is taken,
 * without a Redis call: the number type, the countries, client_ip, the
 * admin blocks and a guess's format (the screens), and the note of what
 * the pumping guard said. On every request, so each check is a table or
 * list look-up; a refusal here takes nothing, so a flood of them costs no
 * Redis round trip.
 */
#include <stdio.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "otp_int.h"

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
        otp_store_down(o, out, "block check", "the admin rows could not be read for 2 s");
        return 1;
    }
    snprintf(rule, CFG_NAME_MAX, "block:%s", what);
    otp_answer_set(out, OUT_BLOCKED, "an operator's block (%s) matches this request", what);
    return 1;
}

/* 1 when rq's number type is one phone.types serves; else 0 with the
 * refusal (403 number_type) in out. Runs before anything is taken. */
static int type_served(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    if ((unsigned)rq->type < PHONE_TYPE_COUNT && (o->d.cfg.limits->phone_types & PHONE_TYPE_BIT(rq->type)) != 0)
        return 1;
    otp_answer_set(out, OUT_NUMBER_TYPE, "phone is a %s number (%s); this service does not send codes to that type",
                   phone_type_name(rq->type), rq->region[0] ? rq->region : "no region");
    return 0;
}

/* Counts an issue for a monitored region; logs it at most once a second
 * per region, with how many came since its last line, so a flood is not a
 * log flood (its region and caller; the number masked). */
static void monitor_note(struct otp *o, const struct otp_req *rq)
{
    char masked[PHONE_MAX];
    uint64_t now_ns = clock_mono_ns(), since = 0;
    int i, log_it = 0;

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
    if (!log_it)
        return;
    phone_mask(rq->phone, masked, sizeof(masked));
    log_event(LOG_INFO, "country.monitored",
              LOG_FIELDS(LOG_STR("region", rq->region), LOG_STR("caller", rq->api_key), LOG_STR("phone", masked),
                         LOG_INT("requests", since)),
              "countries: monitored");
}

/* 1 when countries serves rq's region; else 0 with the refusal (403
 * country_blocked) in out. A monitored region is counted and logged.
 * Runs before any Redis call. */
static int country_served(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    switch (limits_country(o->d.limits, rq->region)) {
    case FRAUD_DENY:
        otp_answer_set(out, OUT_COUNTRY_BLOCKED, "this service does not send codes to %s numbers",
                       rq->region[0] ? rq->region : "non-geographic (no region)");
        return 0;
    case FRAUD_MONITOR:
        monitor_note(o, rq);
        break;
    case FRAUD_SERVE:
        break;
    }
    return 1;
}

int otp_lane(struct otp *o, const struct otp_req *rq, struct lanes_pick *pk, struct otp_answer *out)
{
    if (lanes_pick(o->d.lanes, rq->phone, pk) == 0)
        return 0;
    otp_answer_set(out, OUT_NO_ROUTE, "no route of this service's providers serves %s numbers",
                   rq->region[0] ? rq->region : "these");
    return -1;
}

/* A hold the pumping guard started names the prefix (never a whole
 * number) once, on the instance whose request started it. */
void otp_pump_note(struct otp *o, const struct otp_req *rq, const struct limits_issue *li)
{
    uint64_t *counter = NULL;

    switch (li->pump) {
    case LIMITS_PUMP_STARTED:
        counter = &o->pump_holds;
        log_event(LOG_WARN, "pumping.hold",
                  LOG_FIELDS(LOG_STR("prefix", li->pump_prefix), LOG_INT("hold_s", otp_ceil_s(li->pump_left_ms)),
                             LOG_INT("sent", li->pump_sent), LOG_INT("verified", li->pump_verified),
                             LOG_STR("caller", rq->api_key)),
                  "pumping: prefix %s held for %llds: %lld sent, %lld verified in the window "
                  "(below pumping.min_verified_ratio)", li->pump_prefix, (long long)otp_ceil_s(li->pump_left_ms),
                  (long long)li->pump_sent, (long long)li->pump_verified);
        break;
    case LIMITS_PUMP_SHADOW_START:
        counter = &o->pump_shadow_holds;
        log_event(LOG_WARN, "pumping.shadow_hold",
                  LOG_FIELDS(LOG_STR("prefix", li->pump_prefix), LOG_INT("hold_s", otp_ceil_s(li->pump_left_ms)),
                             LOG_INT("sent", li->pump_sent), LOG_INT("verified", li->pump_verified),
                             LOG_STR("caller", rq->api_key)),
                  "pumping (shadow): prefix %s would be held for %llds: %lld sent, %lld verified in the "
                  "window (below pumping.min_verified_ratio)", li->pump_prefix,
                  (long long)otp_ceil_s(li->pump_left_ms), (long long)li->pump_sent, (long long)li->pump_verified);
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

int otp_issue_screen(struct otp *o, const struct otp_req *rq, struct otp_answer *out)
{
    char ip_key[LIMITS_IP_KEY_MAX], style[SMS_STYLE_MAX + 1];
    int bad_ip;

    memset(out, 0, sizeof(*out));
    if (!type_served(o, rq, out) || !country_served(o, rq, out))
        goto refused;
    if (otp_lane(o, rq, &(struct lanes_pick){0}, out) != 0)
        goto refused;
    bad_ip = rq->client_ip && limits_ip_key(rq->client_ip, ip_key, sizeof(ip_key)) != OTP_OK;
    if (bad_ip)
        otp_answer_set(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
    if (bad_ip || otp_style(o, rq, style, sizeof(style), out) < 0) {
        otp_count(o, OTP_OP_ISSUE, out); /* counted, not recorded: bad input writes no row */
        return 1;
    }
    if (blocked(o, rq, out, out->reason))
        goto refused;
    return 0;
refused:
    otp_record(o, rq, "issue", out, NULL, NULL);
    otp_count(o, OTP_OP_ISSUE, out);
    return 1;
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
        otp_answer_set(out, OUT_INVALID_REQUEST, "client_ip is not an IPv4 or IPv6 address");
        goto refused;
    }
    /* Verify too: a blocked bot network must not go on guessing the codes
     * it already has, and a block that let verifies through would still
     * spend Redis round trips on it. */
    if (blocked(o, rq, out, out->reason))
        goto refused;
    /* A malformed guess is recorded but never counts as an attempt. */
    if (strlen(guess) != (size_t)c->otp->length || !all_digits(guess, (size_t)c->otp->length)) {
        otp_answer_set(out, OUT_INVALID_REQUEST, "code must be %d digits", c->otp->length);
        goto refused;
    }
    return 0;
refused:
    otp_record(o, rq, "verify", out, NULL, NULL);
    otp_count(o, OTP_OP_VERIFY, out);
    return 1;
}
