/*
 * limits: the abuse rules of DESIGN.md ("Limits"), as data. Each issue runs
 * one script (issue.lua) that checks and takes every applicable rule and
 * the cost reservation and starts or continues the phone's verification;
 * each verify runs verify.lua. Rules are swapped whole on reload.
 */
#ifndef OTPD_LIMITS_H
#define OTPD_LIMITS_H

#include <stdint.h>

#include "../base/config.h"
#include "../base/rc.h"
#include "../store/store.h"

#define LIMITS_IP_KEY_MAX 64
#define LIMITS_ID_MAX 33

struct limits;

/* What one issue asks; strings are borrowed for the call. */
struct limits_request {
    const char *phone;     /* E.164, checked */
    const char *device_id; /* NULL when absent */
    const char *ip_key;    /* from limits_ip_key, NULL when absent */
    const char *api_key;   /* the caller's configured name */
    const char *vid;       /* a fresh verification id, used if none is live */
    const char *vhash;     /* the keyed hash of vid's code */
    int64_t ttl_ms;
    int max_attempts;
};

/* The draft-11 RateLimit fields of one rule. */
struct limits_header {
    char name[CFG_NAME_MAX]; /* "" when no rule applied */
    int64_t quota;           /* q: the rule's limit */
    int64_t window_s;        /* w */
    int64_t remaining;       /* r */
    int64_t reset_s;         /* t */
};

struct limits_issue {
    enum otp_rc rc;              /* OK, ELIMITED, ELOCKED or ECOST */
    char reason[CFG_NAME_MAX];   /* the refusing rule, "" for OK and ECOST */
    int64_t retry_ms;            /* when the refusal ends */
    struct limits_header header; /* the tightest (or refusing) enforced rule */
    char shadow[256];            /* shadow rules that would refuse, comma-separated */
    char vid[LIMITS_ID_MAX];     /* the verification to send the code of */
    int64_t expires_in_ms;
    int64_t now_ms;              /* Redis's clock at the decision */
    int64_t resend_after_ms;     /* the resend delay just taken; 0 when none */
    int64_t price_minor;         /* reserved against the caps; -1 when none */
};

struct limits_verify {
    enum otp_rc rc;            /* OK, EBADCODE, ELOCKED or ENOTFOUND */
    char vid[LIMITS_ID_MAX];   /* the verification guessed at, "" when none */
    int attempts_left;
    int64_t retry_ms;          /* until the wrong-guess window ends; the lock for ELOCKED */
    char reason[CFG_NAME_MAX]; /* the wrong-guess rule, for ELOCKED or shadow_lock */
    struct limits_header header;
    int shadow_lock;           /* 1: a shadow wrong-guess rule would lock now */
};

/* Registers the scripts with s and copies c's rules, prices and caps.
 * Returns NULL when out of memory. s must outlive the limits. */
struct limits *limits_new(struct store *s, const struct config *c);
void limits_free(struct limits *l);

/* Replaces the rules with c's; requests in flight finish on the old ones. */
enum otp_rc limits_reload(struct limits *l, const struct config *c);

/* Runs the issue script. Returns OTP_OK with the decision in *out (which
 * may be a refusal), or OTP_ESTORE with detail in err: fail closed. */
enum otp_rc limits_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out, char *err);

/* Runs the verify script for guess_hash. Same return contract. */
enum otp_rc limits_verify(struct limits *l, const char *phone, const char *guess_hash, int max_attempts,
                          struct limits_verify *out, char *err);

/* Gives back price_minor reserved at reserved_ms (Redis time). */
enum otp_rc limits_refund(struct limits *l, int64_t price_minor, int64_t reserved_ms, char *err);

/* The key of a client IP: IPv4 whole, IPv4-mapped IPv6 as IPv4, other IPv6
 * as its /64 ("2001:db8:1:2::/64"). OTP_EINVAL when ip is malformed. */
enum otp_rc limits_ip_key(const char *ip, char *out, size_t cap);

/* Builds the Redis key of a rule's key kind into out; pure, for tests. */
void limits_key(enum cfg_key kind, const struct limits_request *rq, char *out, size_t cap);

#endif
