/*
 * v2: the Twilio Verify v2 surface's own records and words
 * (docs/twilio-verify.md). Services and verification records live in
 * Redis for the whole fleet (v2.c, v2.lua); every change to a service is
 * an admin-action row in the ledger. v2_form.c reads Twilio's form
 * bodies, v2_error.c maps otpd's outcomes to Twilio's error codes. The
 * codes, limits, pacer and ledger rows of a verification stay otp's: a
 * service is a purpose of its caller, and a verification's SID is otp's
 * verification id.
 */
#ifndef OTPD_V2_H
#define OTPD_V2_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../base/conf.h"
#include "../base/phone.h"
#include "../base/rc.h"
#include "../limits/limits.h"

struct store;
struct ledger;
struct v2;

#define V2_SID_LEN CFG_SID_LEN
#define V2_NAME_MAX 32      /* FriendlyName's characters */
#define V2_SERVICES_MAX 100 /* services one account may hold */
#define V2_ATTEMPTS_MAX 10  /* send attempts a verification record keeps */
#define V2_ID_LEN 32        /* hex characters after a SID's two letters */

/* One Verify service. */
struct v2_service {
    char sid[V2_SID_LEN + 1];
    char friendly_name[4 * V2_NAME_MAX + 1]; /* UTF-8 */
    int code_length;
    int lookup_enabled;
    int skip_landlines; /* SkipSmsToLandlines: fixed-line numbers refused (60205) */
    int64_t created_s, updated_s;
};

/* A service's rate limit (Twilio's RateLimits): a name that a
 * verification's RateLimits field gives a value for. */
#define V2_UNIQUE_MAX 64    /* UniqueName: A-Z, a-z, 0-9, '.', '_', '-' */
#define V2_DESC_MAX 255     /* Description's characters */
#define V2_RATE_LIMITS_MAX 10 /* rate limits of one service */
#define V2_BUCKETS_MAX 10     /* buckets of one service */
struct v2_rate_limit {
    char sid[V2_SID_LEN + 1]; /* "RK..." */
    char unique_name[V2_UNIQUE_MAX + 1];
    char description[4 * V2_DESC_MAX + 1];
    int64_t created_s, updated_s;
};
/* One of its buckets: at most max verifications per interval_s for one
 * value. */
#define V2_BUCKET_MAX_MAX 1000000
#define V2_INTERVAL_MAX (30 * 86400L)
struct v2_bucket {
    char sid[V2_SID_LEN + 1];        /* "BL..." */
    char rate_limit[V2_SID_LEN + 1]; /* its rate limit's SID */
    long max;
    long interval_s;
    int64_t created_s, updated_s;
};

/* One verification's record (the code is otp's, never here). */
struct v2_attempt {
    int64_t time_s;
    char mid[V2_ID_LEN + 1]; /* otp's message id: the attempt's SID is "VL" + mid */
};
struct v2_verification {
    char sid[V2_SID_LEN + 1];     /* "VE" + otp's verification id */
    char service[V2_SID_LEN + 1];
    char to[PHONE_MAX];
    char status[24];              /* pending, approved, canceled, max_attempts_reached, expired */
    int64_t created_s, updated_s;
    size_t n_attempts;
    struct v2_attempt attempts[V2_ATTEMPTS_MAX];
};

/* Registers v2.lua with s (before s is shared between threads); s and lg
 * are borrowed. NULL when out of memory. */
struct v2 *v2_new(struct store *s, struct ledger *lg);
void v2_free(struct v2 *v);

/* 1 when sid is prefix ("VA") and 32 hex digits. */
int v2_sid_ok(const char *sid, const char *prefix);
/* A fresh random SID of kind prefix into out (V2_SID_LEN + 1 bytes). */
void v2_sid_new(const char *prefix, char *out);

/*
 * Services of account (caller: the name the ledger row gives). Each blocks
 * for one Redis call, and a change for its ledger commit too (a ledger
 * failure is logged; the change stands). OTP_ESTORE (err says why),
 * OTP_ENOTFOUND, or for a create OTP_EFULL at V2_SERVICES_MAX.
 */
enum otp_rc v2_service_create(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err);
enum otp_rc v2_service_get(struct v2 *v, const char *account, const char *sid, struct v2_service *out, char *err);
/* Every service of account, oldest first, in *out (malloc'd, *n of them). */
enum otp_rc v2_service_list(struct v2 *v, const char *account, struct v2_service **out, size_t *n, char *err);
/* s->sid's fields become s's; its dates are set from the store. */
enum otp_rc v2_service_update(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err);
enum otp_rc v2_service_delete(struct v2 *v, const char *caller, const char *account, const char *sid, char *err);

/*
 * Rate limits and buckets of service svc of account, as services are: one
 * Redis call each, a ledger row each change. OTP_ENOTFOUND also when svc
 * (or a bucket's rate limit) is not there; OTP_EFULL at the caps; OTP_EINVAL
 * for a unique name the service already has (err says so).
 */
enum otp_rc v2_rl_create(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_rate_limit *r, char *err);
enum otp_rc v2_rl_get(struct v2 *v, const char *account, const char *svc, const char *sid, struct v2_rate_limit *out,
                      char *err);
enum otp_rc v2_rl_list(struct v2 *v, const char *account, const char *svc, struct v2_rate_limit **out, size_t *n,
                       char *err);
enum otp_rc v2_rl_update(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_rate_limit *r, char *err);
/* Its buckets go with it. */
enum otp_rc v2_rl_delete(struct v2 *v, const char *caller, const char *account, const char *svc, const char *sid,
                         char *err);
enum otp_rc v2_bk_create(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_bucket *b, char *err);
enum otp_rc v2_bk_get(struct v2 *v, const char *account, const char *svc, const char *sid, struct v2_bucket *out,
                      char *err);
/* Every bucket of svc; of rate limit rl only when rl is not NULL. */
enum otp_rc v2_bk_list(struct v2 *v, const char *account, const char *svc, const char *rl, struct v2_bucket **out,
                       size_t *n, char *err);
enum otp_rc v2_bk_update(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_bucket *b, char *err);
enum otp_rc v2_bk_delete(struct v2 *v, const char *caller, const char *account, const char *svc, const char *sid,
                         char *err);

/* What a verification of service svc is decided with, in one Redis call:
 * the service, its rate limits and their buckets (malloc'd arrays the
 * caller frees). */
struct v2_rules {
    struct v2_service service;
    struct v2_rate_limit *rl;
    size_t n_rl;
    struct v2_bucket *bk;
    size_t n_bk;
};
enum otp_rc v2_rules_get(struct v2 *v, const char *account, const char *svc, struct v2_rules *out, char *err);
void v2_rules_free(struct v2_rules *r);

/* The rule name every bucket refuses as (a bounded metric label). */
#define V2_RULE_NAME "v2_rate_limit"

/* A verification's RateLimits field (text: a JSON object of unique names
 * and values) as its issue's extra rules, one per bucket of each rate
 * limit it names, into out (LIMITS_EXTRA_MAX of them) and *n. Pure. 0, or
 * -1 with a sentence in detail: not an object, a name r does not have, a
 * value that is not a string or a number, too many buckets. */
int v2_extras(const struct v2_rules *r, const char *text, struct limits_extra *out, size_t *n, char *detail,
              size_t cap);

/*
 * Verification records, keyed by otp's verification id vid. v2_ver_sent
 * adds a send attempt (message mid) to vid's record, making it if new; the
 * code has life_ms left. OTP_EFORBIDDEN when vid is another account's or
 * service's (never expected: otp scopes it to both).
 */
enum otp_rc v2_ver_sent(struct v2 *v, const char *account, const char *service, const char *to, const char *vid,
                        const char *mid, int64_t life_ms, struct v2_verification *out, char *err);
enum otp_rc v2_ver_get(struct v2 *v, const char *account, const char *service, const char *vid,
                       struct v2_verification *out, char *err);
/* Service's latest verification record for number to (its code may have
 * ended: approved, canceled, max_attempts_reached). */
enum otp_rc v2_ver_by_phone(struct v2 *v, const char *account, const char *service, const char *to,
                            struct v2_verification *out, char *err);
/* Sets vid's status ("approved", "canceled", "max_attempts_reached"). */
enum otp_rc v2_ver_status(struct v2 *v, const char *account, const char *service, const char *vid,
                          const char *status, struct v2_verification *out, char *err);

/* v2_json.c: the resources in Twilio's shapes (jansson objects, NULL when
 * out of memory); every URL starts with base. */
/* s seconds as Twilio writes dates ("2015-07-30T20:00:00Z"), cap >= 21. */
void v2_date(int64_t s, char *out, size_t cap);
json_t *v2_service_json(const struct v2_service *s, const char *account, const char *base);
json_t *v2_ver_json(const struct v2_verification *v, const char *account, const char *base);
json_t *v2_check_json(const struct v2_verification *v, const char *account);
json_t *v2_rl_json(const struct v2_rate_limit *r, const char *svc, const char *account, const char *base);
json_t *v2_bk_json(const struct v2_bucket *b, const char *svc, const char *account, const char *base);
/* A list page: items (taken) under key, and meta with page's URLs for path
 * ("/v2/Services"); more: a next page exists. */
json_t *v2_list_json(const char *key, json_t *items, const char *base, const char *path, long page, long size,
                     int more);

#endif
