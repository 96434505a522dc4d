/*
 * otp's internals, shared by otp.c (issue, verify, cancel, status),
 * otp_gate.c (what refuses a request before any limit), otp_metrics.c (the
 * counters and the /metrics text) and otp_ready.c (/readyz): nothing
 * outside src/otp/otp*.c includes this.
 */
#ifndef OTPD_OTP_INT_H
#define OTPD_OTP_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "otp.h"
#include "sms.h"

#define OTP_SHADOW_RULES 32
/* The refusals no rule makes (otp_metrics.c's fixed_reasons), each with a
 * label of its own. */
#define OTP_FIXED_REASONS 9
#define OTP_REFUSAL_LABELS (2 * OTP_SHADOW_RULES + OTP_FIXED_REASONS)

/* The operations whose decisions /metrics counts. */
enum otp_op { OTP_OP_ISSUE, OTP_OP_VERIFY, OTP_OP_CANCEL, OTP_OPS };

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
    struct cfg_template templates[CFG_TEMPLATES_MAX]; /* otp.templates */
    size_t n_templates;
};

/* Whole seconds of ms, rounded up; 0 for none. */
static inline int64_t otp_ceil_s(int64_t ms)
{
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* A refusal's Retry-After: whole seconds, rounded up, at least one. */
static inline int64_t otp_retry_s(int64_t ms)
{
    return ms > 1000 ? otp_ceil_s(ms) : 1;
}

/* otp.c: the answer and its record. */

/* Sets out's outcome (and with it its status code, from the one table)
 * and its detail. */
void otp_answer_set(struct otp_answer *out, enum otp_outcome outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fail closed: Redis is slow or gone, so nothing is decided or sent; out
 * says so, with the breaker's Retry-After. op and err go to the log. */
void otp_store_down(struct otp *o, struct otp_answer *out, const char *op, const char *err);

/* Records the decision a of rq in the ledger without waiting for the
 * commit (kind "issue" or "verify"; shadow and vid NULL when none). */
void otp_record(struct otp *o, const struct otp_req *rq, const char *kind, const struct otp_answer *a,
                const char *shadow, const char *vid);

/* otp_gate.c: what the pumping guard said of one issue, counted and
 * logged. */
void otp_pump_note(struct otp *o, const struct otp_req *rq, const struct limits_issue *li);

/* otp_metrics.c: the counters. */

/* The refusal labels and the cost caps /metrics shows from the start. */
void otp_metrics_seed(struct otp *o);

/* Counts op's decision a: by outcome, and a refusal by its rule. */
void otp_count(struct otp *o, enum otp_op op, const struct otp_answer *a);

/* otp_text.c: what an issue's message says (src/otp/sms.h). Its style
 * text (locale, app hash, the caller's origin) into out (cap >=
 * SMS_STYLE_MAX + 1): 0, or -1 with the refusal in a (OUT_INVALID_REQUEST:
 * an app_hash that is none, or a message over CFG_TEXT_MAX bytes). */
int otp_style(struct otp *o, const struct otp_req *rq, char *out, size_t cap, struct otp_answer *a);
/* The provider a new message to rq's phone goes to (lanes_pick): 0, or
 * -1 with the refusal (403 no_route) in out. No Redis call. */
int otp_lane(struct otp *o, const struct otp_req *rq, struct lanes_pick *pk, struct otp_answer *out);

/* The pacer's render hook (struct pacer_render): the text and the
 * delivery-report query of message id of verification vid in style,
 * rendered by whichever instance sends it. */
enum otp_rc otp_render_msg(void *ctx, const char *id, const char *vid, const char *style, int64_t expires_ms,
                           int64_t accepted_ms, char *text, size_t cap, char *dlr_query, size_t dlr_cap);

/* Counts and logs each shadow rule of a comma-separated list (op: "issue"
 * or "verify"). */
void otp_count_shadow(struct otp *o, const char *list, const char *op);

#endif
