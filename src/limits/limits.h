/*
 * limits: the abuse rules (docs/architecture.md, "Limits and rules"), as
 * data. Each issue runs one script (issue.lua) that checks and takes every
 * applicable rule and the cost reservation and starts or continues the
 * phone's verification; each verify runs verify.lua. Rules are swapped
 * whole on reload. limits_int.h holds what the module's files share.
 */
#ifndef OTPD_LIMITS_H
#define OTPD_LIMITS_H

#include <stdint.h>

#include "../base/conf.h"
#include "../base/phone.h"
#include "../base/rc.h"
#include "../store/store.h"
#include "fraud.h"

#define LIMITS_IP_KEY_MAX 64
#define LIMITS_ID_MAX 33
/* Redis keys of one issue, the undo key aside: the phone's and up to 10
 * other rule keys (the 7 kinds but phone_prefix, and 4 phone_prefix
 * lengths: config.c bounds them), the cost, the pumping guard's, the
 * shares, an Idempotency-Key's two, the stream, the holds and the message. */
#define LIMITS_KEYS_MAX 20
#define LIMITS_SCOPE_LEN 12 /* characters of a verification's field in the phone's hash */
#define LIMITS_KEY_LEN 300
/* How long a script's undo record (and a tombstone) lives in Redis: long
 * enough for the instance that answered 503 to abandon the request once
 * Redis answers again, short enough to cost no memory worth counting. */
#define LIMITS_UNDO_TTL_MS 30000
/* The cap windows a reservation was counted in, as text (limits_caps_text):
 * window_ms of each global cap, comma-separated ("3600000,86400000"), then,
 * when per-caller caps counted it, ";" CALLER ":" WINDOWS with no digit in
 * either; at most 8 caps in all. */
#define LIMITS_CAPS_TEXT 192
/* How long an accepted message may stay held before any instance drops it
 * (issue.lua, "Holds"): the accepting instance's ledger commit must land
 * within it. */
#define LIMITS_HOLD_MS 10000

struct limits;

/* An Idempotency-Key's part in one decision (src/otp/idem.h; issue.lua,
 * "Idempotency-Key"): a decision that takes something claims the key in
 * the same step, owned by its request id, unless another request holds
 * it (nothing is decided: idem_taken) or the caller holds max_keys keys
 * already (refused: ELIMITED, reason LIMITS_IDEM_REASON). Borrowed. */
#define LIMITS_IDEM_REASON "idempotency_keys"
struct limits_idem {
    const char *key;   /* the key's hash */
    const char *count; /* the caller's keys held (a sorted set) */
    const char *hash;  /* the request's keyed hash */
    int64_t claim_ms;  /* how long a claim lives without an answer */
    int64_t max_keys;  /* keys the caller may hold at once */
};

/* What one issue asks; strings are borrowed for the call. */
/* A rule an issue brings with it rather than the config (the Twilio
 * surface's buckets, src/v2): its state is at key, field; it runs on
 * issue only, after the config's rules, on the same call and clock, and
 * its refusals are never cached. */
#define LIMITS_EXTRA_MAX 16
struct limits_extra {
    struct cfg_rule rule; /* name, algo, limit, window_ms, burst */
    char key[LIMITS_KEY_LEN];
    char field[24];
};

/* The provider an issue's message goes to (src/pacer/lanes.h): its
 * stream, its queue's capacity and its prices (NULL: cost.prices). */
struct limits_lane {
    const char *stream;
    int64_t capacity;
    const struct cfg_price *prices;
    size_t n_prices;
};

struct limits_request {
    const char *phone;     /* canonical E.164 (phone_parse) */
    const char *device_id; /* NULL when absent */
    const char *ip_key;    /* from limits_ip_key, NULL when absent */
    const char *api_key;   /* the caller's configured name */
    const char *purpose;   /* never NULL: "default" when the request named none */
    /* From phone_parse, for rules keyed on them (docs/architecture.md,
     * "Limits and rules"): the phone's region ("IN", "001") and its number
     * type. region is "" when the number has none (rules keyed on it
     * skipped). */
    char region[PHONE_REGION_MAX];
    enum phone_type type;
    const char *scope;     /* the verification's field (LIMITS_SCOPE_LEN characters): names
                            * (caller, purpose) within the phone's hash */
    const char *rid;       /* this request's id (random, LIMITS_ID_MAX - 1 hex) */
    const char *vid;       /* a fresh verification id, used if none is live */
    const char *vhash;     /* the keyed hash of vid's code */
    const char *mid;       /* the id of the message an accepted issue queues */
    int64_t ttl_ms;
    int max_attempts;
    int64_t at_ms; /* 0: decide on Redis's clock (otpd, always); else on this
                    * Unix time in ms (otpctl simulate replays a ledger) */
    const struct limits_idem *idem; /* NULL: no Idempotency-Key */
    const char *style; /* issue: its message's style text (src/otp/sms.h); NULL: the default */
    const struct limits_extra *extra; /* issue only; n_extra of them (at most LIMITS_EXTRA_MAX) */
    size_t n_extra;
    const struct limits_lane *lane; /* issue only; NULL: the single provider's (otp:q, pacer.capacity) */
};

/* The draft-11 RateLimit fields of one rule. */
struct limits_header {
    char name[CFG_NAME_MAX]; /* "" when no rule applied */
    int64_t quota;           /* q: the rule's limit */
    int64_t window_s;        /* w */
    int64_t remaining;       /* r */
    int64_t reset_s;         /* t */
};

/* What an instance needs to abandon one script call: its request id and
 * the keys it ran on (the undo key last). */
struct limits_undo {
    int verify; /* 0: issue.lua, 1: verify.lua */
    int nkeys;  /* 0: nothing to abandon */
    int idem_at; /* 1-based index in keys of an Idempotency-Key's hash (its count next); 0: none */
    char keys[LIMITS_KEYS_MAX + 1][LIMITS_KEY_LEN];
    char hold[2 * LIMITS_ID_MAX]; /* an issue's hold, "<mid>:<rid>"; "" for verify */
};

/* What the pumping guard (issue.lua) said of one issue. */
enum limits_pump {
    LIMITS_PUMP_NONE = 0,     /* off, or nothing to say */
    LIMITS_PUMP_HELD,         /* refused: the prefix is held */
    LIMITS_PUMP_STARTED,      /* refused: this request started a hold */
    LIMITS_PUMP_SHADOW_START, /* shadow mode: a hold would start now (served) */
    LIMITS_PUMP_SHADOW_HELD,  /* shadow mode: a hold would refuse this request (served) */
};

struct limits_issue {
    enum otp_rc rc;              /* OK, ELIMITED, ELOCKED, ECOST, EFULL (the fleet's queue) or EPUMPING;
                                  * EINVAL with idem_taken */
    int idem_taken;              /* 1: another request holds the Idempotency-Key; nothing decided */
    enum limits_pump pump;       /* the pumping guard's word */
    char pump_prefix[PHONE_MAX]; /* the prefix it judged ("+4474001"), "" when the guard is off */
    int64_t pump_sent, pump_verified; /* LIMITS_PUMP_STARTED and _SHADOW_START: the counts it judged */
    int64_t pump_left_ms;        /* any state but NONE: until the hold ends */
    char reason[CFG_NAME_MAX];   /* the refusing rule, "" for OK and ECOST */
    int64_t retry_ms;            /* when the refusal ends */
    struct limits_header header; /* the tightest (or refusing) enforced rule */
    char shadow[256];            /* shadow rules that would refuse, comma-separated */
    char vid[LIMITS_ID_MAX];     /* the verification to send the code of */
    int64_t expires_in_ms;
    int64_t now_ms;              /* Redis's clock at the decision */
    int64_t resend_after_ms;     /* until a new issue would pass every enforced rule and cap */
    int64_t price_minor;         /* reserved against the caps; -1 when none */
    char cost_caps[LIMITS_CAPS_TEXT]; /* the windows it was counted in (limits_caps_text) */
    int64_t depth;               /* OTP_EFULL: the fleet's queue depth */
    struct limits_undo undo;     /* for limits_abandon when the issue cannot be completed */
};

struct limits_verify {
    enum otp_rc rc;            /* OK, EBADCODE, ELOCKED, ELIMITED (a verify rule) or ENOTFOUND;
                                * EINVAL with idem_taken */
    int idem_taken;            /* 1: another request holds the Idempotency-Key; nothing decided */
    char vid[LIMITS_ID_MAX];   /* the verification guessed at, "" when none */
    int attempts_left;
    int64_t retry_ms;          /* until the wrong-guess window ends; the lock for ELOCKED */
    char reason[CFG_NAME_MAX]; /* the wrong-guess rule, for ELOCKED or shadow_lock */
    struct limits_header header;
    int shadow_lock;           /* 1: a shadow wrong-guess rule would lock now */
    char shadow[256];          /* shadow verify rules that would refuse, comma-separated */
    /* With an Idempotency-Key, a guess that changed something (and so
     * claimed the key) is committed by the caller, with its answer
     * (limits_commit), or abandoned; nkeys 0 when there is nothing to. */
    struct limits_undo undo;
};

/* Registers the scripts with s and copies c's rules, prices and caps; of
 * the pacer's section it reads the queue's capacity and share_per_key
 * (start-up only). Returns NULL when out of memory. s must outlive the
 * limits. */
struct limits *limits_new(struct store *s, const struct limits_conf *c, const struct pacer_conf *pc);
void limits_free(struct limits *l);

/* Replaces the rules with c's; requests in flight finish on the old ones. */
enum otp_rc limits_reload(struct limits *l, const struct limits_conf *c);

/* An admin override (docs/architecture.md, "Limits and rules"): another
 * limit (and burst) for rule for one value of its key. values holds each
 * kind of the rule's key as the admin body gave it, checked: the canonical phone, "+" and the
 * prefix's digits for phone_prefix, an address for client_ip (keyed here
 * as limits_ip_key keys a request's), "" for the others. */
#define LIMITS_VALUE_MAX 129
struct limits_override {
    char rule[CFG_NAME_MAX];
    char values[CFG_KEY_COUNT][LIMITS_VALUE_MAX];
    int64_t limit;
    int64_t burst; /* 0: the rule's burst, scaled with the limit (token_bucket only) */
};

/* Replaces the overrides in force with ov[0..n-1] (copied); requests in
 * flight finish on the old ones. Kept across limits_reload, and matched
 * against the new rules then. OTP_ENOMEM leaves the old ones. */
enum otp_rc limits_overrides_set(struct limits *l, const struct limits_override *ov, size_t n);

/* countries of the rules in force for region (fraud_country); pure but
 * for the snapshot, so SIGHUP applies to the next request. */
enum fraud_country limits_country(struct limits *l, const char *region);

/* Runs the issue script. Returns OTP_OK with the decision in *out (which
 * may be a refusal), or OTP_ESTORE with detail in err: fail closed. A
 * timeout is retried once on a fresh connection (the request id makes the
 * retry return the first run's outcome); a call that then fails but may
 * have run, now or when a stalled Redis wakes, is queued for abandoning,
 * so its takes are given back. Queued abandons of this instance run first,
 * so a retry after a 503 is decided as if that attempt had not happened. */
enum otp_rc limits_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out, char *err);

/* Runs the verify script for guess_hash against rq's verification (phone,
 * caller, purpose: rq->scope) under request id rq->rid; rq->vid and
 * rq->vhash are unused. Same return contract, retry and abandon as
 * limits_issue. */
enum otp_rc limits_verify(struct limits *l, const struct limits_request *rq, const char *guess_hash,
                          int max_attempts, struct limits_verify *out, char *err);

/* Ends rq's live verification (rq->scope of rq->phone): OTP_OK with its id
 * in vid (LIMITS_ID_MAX bytes), OTP_ENOTFOUND when none is live, or
 * OTP_ESTORE with detail in err. Nothing to undo: a cancel that ran but
 * whose answer was lost is a 404 when retried. */
enum otp_rc limits_cancel(struct limits *l, const struct limits_request *rq, char *vid, char *err);

/* Gives back everything an accepted issue (or a verify) took, its
 * Idempotency-Key's claim included while the claim is still its own: now
 * if Redis answers, else queued for the next flush. */
void limits_abandon(struct limits *l, const struct limits_undo *u);

/* Commits an accepted issue once its ledger rows are durable: releases
 * its message's hold into the fleet's send stream and discards its undo
 * record (for a verify, only the record). With u->idem_at, answer (the
 * text a replay sends) is stored for keep_ms in the same step, and only
 * while the key's claim is still this request's: the fence. OTP_OK once
 * the message is visible to the senders (and the answer stored);
 * OTP_ENOTFOUND when its hold lapsed first (it was dropped with everything
 * it took: answer 503) or its claim did (nothing done: the caller
 * abandons); OTP_ESTORE with detail in err when Redis failed (the caller
 * abandons, which ends the message unsent if the commit ran after all and
 * no sender has started it). */
enum otp_rc limits_commit(struct limits *l, const struct limits_undo *u, const char *answer, int64_t keep_ms,
                          char *err);

/* Drops up to 16 lapsed holds (issue.lua, "Holds"): messages whose
 * instance never committed them; each abandon gives back what its issue
 * took. Any instance may run it; *dropped says how many went. */
enum otp_rc limits_holds(struct limits *l, size_t *dropped, char *err);

/* Runs the queued abandons; returns how many are still queued. Each
 * request does this first; a caller with no traffic (/readyz) may too. */
size_t limits_flush(struct limits *l);

/*
 * The refusal cache (rcache.h; README, "The refusal cache"). limits_issue
 * and limits_verify remember the enforced refusals that only time (or an
 * admin change, or a reload, which clear them) can end; these answer a
 * repeat from memory, with no Redis call, until the moment the refusal
 * could end at the earliest.
 */

/* 1 when an enforced issue rule's state for rq is a cached refusal: then
 * out (zeroed by the caller) holds the refusal as issue_read would give it
 * (rc OTP_ELIMITED or OTP_ELOCKED, reason, retry_ms, header), and each hit
 * of a rule with a penalty is counted for limits_penalties_flush. 0 on a
 * miss (out untouched) or when the cache is off. rq needs only the values
 * rules are keyed on (no scope, ids or hashes). Never blocks but on a lock. */
int limits_cached_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out);

/* The same for a verify: a cached refusal of an enforced verify rule
 * (OTP_ELIMITED), else of the wrong-guess lock (OTP_ELOCKED, vid "",
 * attempts_left 0), into out (zeroed by the caller). */
int limits_cached_verify(struct limits *l, const struct limits_request *rq, struct limits_verify *out);

/* Drops every cached refusal (an admin change seen by the refresh). */
void limits_cache_clear(struct limits *l);

/* The admin rows' last whole read, which vouches for the cache: read_ms
 * as rcache_fresh takes it (local monotonic ms taken before the read, or
 * RCACHE_NEVER when it failed). Call once the changes that read saw are
 * applied (limits_cache_clear, limits_overrides_set). While it is more
 * than 2 s old, or failed, limits_cached_issue and limits_cached_verify
 * answer nothing: an unlock or a removal made meanwhile on another
 * instance could not have been seen. */
void limits_cache_vouch(struct limits *l, int64_t read_ms);

/* Counts the refusals answered from the cache since the last call toward
 * their rules' penalties in Redis (issue.lua's op 'p', on Redis's clock).
 * For the main thread's tick; blocks on Redis. Counts that Redis does not
 * take are logged and lost. */
void limits_penalties_flush(struct limits *l);

/* Counters for /metrics. */
struct limits_stats {
    uint64_t abandoned; /* abandons that ran (gave back, or left a tombstone) */
    uint64_t dropped;   /* abandons dropped because the queue was full */
    uint64_t pending;   /* abandons waiting for Redis */
    uint64_t holds_dropped; /* lapsed holds dropped (their instance never committed them) */
    uint64_t cache_hits[2]; /* requests answered by the refusal cache: issue, verify */
    uint64_t cache_entries; /* refusals it holds */
    uint64_t cache_evictions; /* refusals it dropped for room */
};
void limits_stats(struct limits *l, struct limits_stats *out);

/* One cost cap whose headroom /metrics shows: its Redis field
 * (limits_cap_field or limits_cap_key_field), window and max. */
#define LIMITS_HEADROOM_MAX 128
struct limits_cap_ask {
    char field[CFG_NAME_MAX + 24];
    int64_t window_ms, max_minor;
};

/* What each of the n caps in ask has left in its current window (Redis's
 * clock), into left_minor[n]: one Redis call (headroom.lua). OTP_ESTORE
 * when Redis did not answer; OTP_EINVAL past LIMITS_HEADROOM_MAX caps. */
enum otp_rc limits_cap_headroom(struct limits *l, const struct limits_cap_ask *ask, size_t n, int64_t *left_minor,
                                char *err);

/* The Redis field of a cost cap: named by its window, not its position in
 * the file, so reordering caps changes nothing. Pure, for tests. */
void limits_cap_field(int64_t window_ms, char *out, size_t cap);

/* The Redis field (in otp:cost) of a per-caller cap ("key": "api_key"):
 * "k<window_ms>:<api_key>", so reordering caps changes nothing. Pure. */
void limits_cap_key_field(int64_t window_ms, const char *api_key, char *out, size_t cap);

/* The key of a client IP: IPv4 whole, IPv4-mapped IPv6 as IPv4, other IPv6
 * as its /64 ("2001:db8:1:2::/64"). OTP_EINVAL when ip is malformed. */
enum otp_rc limits_ip_key(const char *ip, char *out, size_t cap);

/* Where rule r keeps its state for rq: the Redis key of its first key kind
 * (the phone's hash whenever the key holds phone) and the field, which is
 * the rule's field followed, for a composite key, by each other kind's
 * value after a 0x1f byte (no value of a request holds one). Returns 0
 * when rq lacks one of the values (the rule is skipped), else 1. Pure. */
int limits_rule_key(const struct cfg_rule *r, const struct limits_request *rq, char *key, size_t kcap,
                    char *field, size_t fcap);

/*
 * The pacer's side of the cost caps (docs/architecture.md, "Money": what a
 * failure costs), run on the pacer's money thread: reserve.lua and
 * refund.lua on a per-message money hash, so each reservation is taken and
 * given back at most once. Build with limits_money_new before s is shared (it registers
 * a script); it reads l's caps at each call, so SIGHUP applies.
 */
struct limits_money;

struct limits_money *limits_money_new(struct limits *l, struct store *s);
void limits_money_free(struct limits_money *m);

/* What reserve.lua decided. */
struct limits_grant {
    int ok;          /* 1: the message holds reservation idx; 0: a cap has no room */
    int idx;         /* the reservation held (1 is the issue's) */
    int64_t at_ms;   /* Redis time it was taken: its cap windows */
    int64_t retry_ms; /* when refused: until the full cap's window ends */
    int64_t cap_window_ms; /* when refused: the full cap's window */
};

/* What limits_reserve does besides making sure of the reservation. */
enum limits_use {
    LIMITS_RESERVE = 0, /* only that */
    LIMITS_USE = 1,     /* then marks it used on the wire: the call goes out next */
    LIMITS_RESTORE = 2, /* after a restart: past every reservation marked used */
    LIMITS_UNUSE = 3,   /* at stop: gives back the use mark of reservation need (reserve.lua's mode 3) */
};

/* Makes sure message id holds reservation need or a later one not given
 * back, taking a new one of price_minor against every cap if not (and
 * recording the cap windows it was counted in), then does what use says;
 * owner is the asking instance's consumer name (a use mark records it, and
 * a reservation another instance marked is never used again). issue_ms is
 * the Redis time of the issue's reservation. OTP_OK with the decision in
 * *out, or OTP_ESTORE with detail in err. Blocks on Redis. */
enum otp_rc limits_reserve(struct limits_money *m, const char *id, const char *owner, int need,
                           enum limits_use use, int64_t price_minor, int64_t issue_ms, struct limits_grant *out,
                           char *err);

/* Gives back reservation idx of message id (0: its latest, for a message
 * that was never tried), at most once ever, to the cap windows it was
 * counted in, whatever the caps are now: for reservation 1, windows (the
 * issue's cost_caps, at price_minor and Redis time cost_ms); later ones
 * recorded theirs in Redis. Only for owner, the consumer that ended the
 * message (refund.lua). *result: 1 given back, 0 it already was (nothing
 * done), -1 idx is not the message's latest reservation (nothing done), 2
 * (idx 0) the latest was used on the wire before a restart and is kept, 3
 * not owner's to give back (another instance ended the message or marked
 * the reservation used: kept). *anomalies counts cap windows whose sum was
 * below the price (left as they were). OTP_ESTORE with detail in err when
 * Redis fails. Blocks on Redis. */
enum otp_rc limits_refund_once(struct limits_money *m, const char *id, const char *owner, int idx,
                               int64_t price_minor, int64_t cost_ms, const char *windows, int *result,
                               int *anomalies, char *err);

#endif
