/*
 * limits' internals, shared by its files: limits.c (the object, its reload
 * and counters), limits_rules.c (the rules snapshot and the overrides),
 * limits_keys.c (Redis keys, pure), limits_args.c (issue.lua's and
 * verify.lua's arguments, pure), limits_issue.c and limits_verify.c (the
 * calls and their replies), limits_undo.c (abandons, commits, lapsed
 * holds), limits_cache.c (the refusal cache's glue) and limits_money.c
 * (caps, headroom, the pacer's reserve and refund). Nothing outside
 * src/limits/ includes this, but tests/unit/test_limits_args.c and
 * tests/fuzz/fuzz_reply.c.
 *
 * The scripts' layouts are named here, on the C side, by the same names
 * the scripts give them (prelude.lua, issue.lua, verify.lua): each ARGV is
 * an index counted from 1 as Lua counts, each repeated group an offset
 * from its group's first ARGV and a stride (the _N value).
 */
#ifndef OTPD_LIMITS_INT_H
#define OTPD_LIMITS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "limits.h"
#include "rcache.h"

#define LIMITS_RULES_MAX 32  /* rules one script call runs (config_load allows no more) */
#define LIMITS_CAPS_MAX 8    /* cost caps issue.lua counts (LIMITS_CAPS_TEXT's bound) */
#define LIMITS_PENDING_MAX 4096 /* abandons waiting for Redis; beyond, dropped and counted */

/* ---- The scripts' arguments ---- */

/* issue.lua's KEYS: the phone's hash first (ops 'i', 'a', 'd'); the
 * stream, the holds, the message's hash and the undo key last, IK_* from
 * the end (KEYS[#KEYS - IK_x]); the rules', cost's, pumping guard's,
 * shares' and an Idempotency-Key's between. */
enum issue_keys { IK_PHONE = 1 };
enum issue_keys_tail { IK_UNDO, IK_MSG, IK_HOLDS, IK_QUEUE, IK_TAIL };

/* verify.lua's KEYS: the phone's hash first, the undo key last. */
enum verify_keys { VK_PHONE = 1 };

/* issue.lua's ARGV for op 'i' (issue.lua's header): the fixed values, then
 * from IA_RULES the groups: nrules rule_argv, ncaps cap_argv, one
 * msg_argv, one idem_argv, and last one pump_argv. The other ops reuse
 * the first places: IA_HOLD ("<mid>:<rid>": 'a', 'd', 'c', 'C'), IA_ANSWER
 * and IA_KEEP ('C'), IA_HOLDS_MAX ('h'); op 'p' has pen_argv groups from
 * IA_PENALTIES. An abandon sends IA_UNDO_TTL, "" before it. */
enum issue_argv {
    IA_OP = 1,       /* 'i', 'a', 'c', 'C', 'd', 'h', 'k' or 'p' */
    IA_VID,          /* the proposed verification id */
    IA_VHASH,        /* its code's keyed hash */
    IA_TTL,          /* otp.ttl, ms */
    IA_MAX_ATTEMPTS,
    IA_PRICE,        /* minor units; -1 when no cap counts */
    IA_NRULES,
    IA_NCAPS,
    IA_COST_KEY,     /* KEYS index of otp:cost; 0: none */
    IA_UNDO_TTL,     /* ms */
    IA_SCOPE,        /* the verification's field */
    IA_AT,           /* 0: Redis's clock; else the replay clock, Unix ms */
    IA_RULES,        /* the first rule's group */
    IA_HOLD = IA_VID,
    IA_ANSWER = IA_VHASH,
    IA_KEEP = IA_TTL,
    IA_HOLDS_MAX = IA_VID,
    IA_PENALTIES = IA_VID,
};

/* verify.lua's ARGV (verify.lua's header): the fixed values, then from
 * VA_RULES nrules rule_argv, one idem_argv and last the first PA_VERIFY_N
 * of a pump_argv. Op 'a' reads VA_UNDO_TTL, op 'k' (cancel) VA_SCOPE. */
enum verify_argv {
    VA_OP = 1,       /* 'v', 'a' or 'k' */
    VA_GUESS,        /* the guess's keyed hash */
    VA_MAX_ATTEMPTS,
    VA_WRONG_FIELD,  /* the wrong-guess rule's field; "" when none */
    VA_WRONG_LIMIT,
    VA_WRONG_WINDOW, /* ms */
    VA_WRONG_SHADOW, /* "1" or "0" */
    VA_UNDO_TTL,     /* ms */
    VA_SCOPE,
    VA_NRULES,
    VA_AT,           /* as IA_AT */
    VA_RULES,
};

/* One rule's group, both scripts: kind (cfg_algo + 1), the KEYS index of
 * its state, its field, limit, window_ms, burst and mode (args_mode). */
enum rule_argv { RA_KIND, RA_KEY, RA_FIELD, RA_LIMIT, RA_WINDOW, RA_BURST, RA_MODE, RA_N };
/* One cost cap's group (issue.lua, reserve.lua, headroom.lua): its field
 * in otp:cost, window_ms and max. */
enum cap_argv { CA_FIELD, CA_WINDOW, CA_MAX, CA_N };
/* The message's group (issue.lua). */
enum msg_argv {
    MA_CAPACITY,  /* pacer.capacity */
    MA_HOLD_MS,   /* LIMITS_HOLD_MS */
    MA_MID,
    MA_API_KEY,
    MA_CAPS_TEXT, /* limits_caps_text */
    MA_PHONE,
    MA_SHARE,     /* messages not yet ended one caller may hold */
    MA_SHARE_KEY, /* KEYS index of otp:share; 0: not tracked */
    MA_STYLE,     /* the message's style (src/otp/sms.h): "" for the default */
    MA_N,
};
/* An Idempotency-Key's group, both scripts: the KEYS index of its hash (0:
 * none; its count is the next key), the request's hash, claim_ms and
 * max_keys. */
enum idem_argv { XA_KEY, XA_HASH, XA_CLAIM_MS, XA_MAX_KEYS, XA_N };
/* The pumping guard's group, the last of both lists (the scripts count it
 * from the end): the word "pump", its KEYS index (0: off), window_ms;
 * issue.lua's also min_sent, the min ratio in millionths, hold_ms and
 * shadow. verify.lua takes the first PA_VERIFY_N. */
enum pump_argv { PA_WORD, PA_KEY, PA_WINDOW, PA_MIN_SENT, PA_RATIO, PA_HOLD, PA_SHADOW, PA_N };
#define PA_VERIFY_N (PA_WINDOW + 1)
/* One penalty state's group of issue.lua's op 'p': its KEYS index, the
 * rule's field, after, within_ms, block_ms and the refusals to count. */
enum pen_argv { PN_KEY, PN_FIELD, PN_AFTER, PN_WITHIN, PN_BLOCK, PN_COUNT, PN_N };

/* The most one call takes: issue.lua's KEYS and ARGV at their bounds. */
#define LIMITS_ARGS_MAX                                                                                          \
    (LIMITS_KEYS_MAX + 1 + IA_RULES - 1 + LIMITS_RULES_MAX * RA_N + LIMITS_CAPS_MAX * CA_N + MA_N + XA_N + PA_N)

/* ---- The scripts' replies ---- */

/* issue.lua's first value when an Idempotency-Key stopped it before
 * anything was taken: {IR_IDEM_TAKEN, now}, the key is another request's;
 * {IR_IDEM_FULL, now, wait_ms}, the caller holds its most keys. */
#define IR_IDEM_TAKEN (-2)
#define IR_IDEM_FULL (-3)

/* issue.lua's reply (its header): fixed values, then IR_PER_RULE per rule,
 * then IR_PUMP_N. */
enum issue_reply {
    IR_ALLOWED,     /* 1 accepted, 0 refused, -1 abandoned before it ran */
    IR_NOW,         /* Redis's clock, ms */
    IR_VID,         /* the verification to send */
    IR_EXPIRES,     /* its life left, ms */
    IR_IS_NEW,      /* 1 when vid is the proposed id; on a refusal for the queue,
                     * 1 when the caller's share (pacer.share_per_key) refused it */
    IR_COST_RETRY,  /* the cost caps' wait, ms; 0 when they allow */
    IR_NEXT,        /* when a new issue would pass every enforced rule, ms */
    IR_FULL,        /* the queue's depth when it alone refused, else -1 */
    IR_RULES        /* then IR_PER_RULE values per rule, then IR_PUMP_N values */
};
/* IR_IDEM_FULL's reply: {IR_IDEM_FULL, now, wait_ms}. */
enum { IR_IDEM_WAIT = IR_NOW + 1 };
/* The pumping guard's values, the last of issue.lua's reply (counted from
 * its end, so they never depend on the rules' count): state (enum
 * limits_pump), its wait in ms, and the sent and verified counts judged. */
enum { IR_PUMP_STATE, IR_PUMP_RETRY, IR_PUMP_SENT, IR_PUMP_VERIFIED, IR_PUMP_N };
/* One rule's verdict in both scripts' replies. */
enum { IR_RULE_OK, IR_RULE_REMAINING, IR_RULE_RESET, IR_PER_RULE };

/* verify.lua's reply: fixed values, then IR_PER_RULE per verify rule. */
enum verify_reply { VR_STATUS, VR_VID, VR_ATTEMPTS_LEFT, VR_WINDOW_LEFT, VR_SHADOW_LOCK, VR_WRONG, VR_COUNT };

/* ---- The object ---- */

/* An override as matched: "<rule>\x1e<key>\x1e<field>", the state it
 * applies to (limits_rule_key), and its numbers. */
struct limits_ov {
    char *match;
    int64_t limit, burst;
};

/* The rules in force; immutable once built. */
struct limits_rules {
    int refs; /* guarded by limits.mu */
    struct cfg_rule *rules;
    size_t n_rules;
    struct cfg_price *prices;
    size_t n_prices;
    struct cfg_cap *caps;
    size_t n_caps;
    struct limits_ov *ov; /* sorted by match */
    size_t n_ov;
    struct cfg_countries countries; /* copied whole: about 4 KB */
    struct cfg_pumping pumping;
};

/* The fleet's queue as issue.lua checks it; read at start. */
struct limits_fleet {
    int64_t capacity; /* pacer.capacity: the fleet's queue */
    int64_t share;    /* pacer.share_per_key as messages; 0 when it is capacity (not tracked) */
};

struct limits {
    struct store *store;
    int h_issue, h_verify, h_headroom;
    struct limits_fleet fleet;
    pthread_mutex_t mu;
    struct limits_rules *cur;
    struct limits_override *ov_raw; /* the overrides as set, under mu: matched again on reload */
    size_t n_ov_raw;
    pthread_mutex_t pmu; /* guards the abandon queue and stats; never held across a Redis call */
    struct limits_undo *pending[LIMITS_PENDING_MAX];
    size_t n_pending;
    struct limits_stats stats;
    struct rcache *rc; /* the refusal cache (rcache.h); NULL when off */
};

/* ---- limits_rules.c ---- */

/* The snapshot of c's rules, prices and caps (caps of one window and kind
 * made one), with no override; NULL when out of memory. */
struct limits_rules *limits_rules_new(const struct limits_conf *c);
void limits_rules_free(struct limits_rules *r);
/* Matches the overrides raw[0..n-1] to r's rules (r has none yet); -1 when
 * out of memory. */
int limits_rules_index(struct limits_rules *r, const struct limits_override *raw, size_t n);
/* The rules in force, held until limits_rules_put. */
struct limits_rules *limits_rules_get(struct limits *l);
void limits_rules_put(struct limits *l, struct limits_rules *r);
/* Rule r as it applies to the state at key/field: itself, or a copy in
 * tmp with an override's limit and burst. */
const struct cfg_rule *limits_rule_eff(const struct limits_rules *rs, const struct cfg_rule *r, const char *key,
                                       const char *field, struct cfg_rule *tmp);
/* calloc of n + 1 elements of size with src's n copied; NULL when out of memory. */
void *limits_dup(const void *src, size_t n, size_t size);

/* ---- limits_keys.c ---- */

/* The phone's hash, otp:{<phone>}: a verification's and the phone rules' state. */
void limits_phone_key(const struct limits_request *rq, char *out, size_t cap);
/* The pumping guard's state for prefix ("+4474001"). */
void limits_pump_key(const char *prefix, char *out, size_t cap);
/* The undo key of request id rid. */
void limits_undo_key(const char *rid, char *out, size_t cap);

/* ---- limits_args.c ---- */

/* Argument strings of one script call, with room for the numbers: KEYS in
 * v[0..nkeys), then ARGV from v[nkeys] (ARGV[i] is v[nkeys + i - 1]), as
 * store_eval takes them. */
struct limits_args {
    const char *v[LIMITS_ARGS_MAX];
    char num[LIMITS_ARGS_MAX][32]; /* numbers, and a rule's mode (args_mode) */
    int nkeys;                     /* KEYS */
    int n;                         /* KEYS and ARGV: one past the last set */
};

/* Starts a with no KEYS and no ARGV. */
void limits_args_init(struct limits_args *a);
/* Appends key (borrowed) to a's KEYS, before any ARGV is set. */
void limits_args_key(struct limits_args *a, const char *key);
/* Starts a with u's KEYS (borrowed). */
void limits_args_keys(struct limits_args *a, const struct limits_undo *u);
/* Sets ARGV[i] (1-based) to s (borrowed), or to x. */
void limits_argv_str(struct limits_args *a, int i, const char *s);
void limits_argv_int(struct limits_args *a, int i, int64_t x);
/* Sets ARGV[i] to a's own buffer for it (sizeof(a->num[0]) bytes), which
 * it returns for the caller to write. */
char *limits_argv_buf(struct limits_args *a, int i);

/* One issue.lua or verify.lua call as built from a request: the rules it
 * runs, in the script's order, where each keeps its state, and the
 * arguments. Built only as far as it is read (a verify's is on the stack,
 * uncleared). */
struct limits_call {
    struct limits_args args;
    const struct cfg_rule *used[LIMITS_RULES_MAX]; /* each rule run, an override's in eff */
    struct cfg_rule eff[LIMITS_RULES_MAX];
    int key_of[LIMITS_RULES_MAX];                  /* 1-based KEYS index of each */
    char fields[LIMITS_RULES_MAX][LIMITS_KEY_LEN]; /* its field in that key */
    size_t n_used;
    size_t n_config; /* used[] from here on are the request's extra rules */
    int overflow;    /* an extra rule found no room: the call must not run */
    char capf[LIMITS_CAPS_MAX][CFG_NAME_MAX + 32]; /* issue: the per-caller caps' fields */
    /* verify: the wrong-guess rule (NULL: none), and its state's key and field */
    const struct cfg_rule *wrong;
    struct cfg_rule wrong_eff;
    char wkey[LIMITS_KEY_LEN], wfield[LIMITS_KEY_LEN];
};

/* issue.lua's call for rq under the rules rs and the fleet's queue q, into
 * c and out->undo (its KEYS, request id and hold: what an abandon needs);
 * out->price_minor, out->cost_caps and out->pump_prefix too. Pure. */
void limits_issue_args(const struct limits_rules *rs, const struct limits_request *rq, const struct limits_fleet *q,
                       struct limits_issue *out, struct limits_call *c);
/* verify.lua's call of guess_hash for rq under rs, into c and u (its KEYS). Pure. */
void limits_verify_args(const struct limits_rules *rs, const struct limits_request *rq, const char *guess_hash,
                        int max_attempts, struct limits_undo *u, struct limits_call *c);

/* ---- limits_issue.c: reading replies ---- */

/* The RateLimit fields of rule r with remaining left and a reset in reset_ms. */
void limits_header_set(struct limits_header *h, const struct cfg_rule *r, int64_t remaining, int64_t reset_ms);
/* Appends name to the comma-separated list (cap bytes). */
void limits_name_append(char *list, size_t cap, const char *name);
/* 1 when rep is a script's refusal for an Idempotency-Key (issue.lua's
 * IR_IDEM_*, verify.lua's 'taken' and 'keys'), then read into taken, rc,
 * reason and retry_ms: nothing was taken. */
int limits_idem_stopped(const struct store_reply *rep, int *taken, enum otp_rc *rc, char *reason, int64_t *retry_ms);

/* Whole seconds of ms, rounded up; 0 for none. */
static inline int64_t limits_ceil_s(int64_t ms)
{
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* ---- limits_undo.c ---- */

/* Queues u (copied) for the next flush. */
void limits_undo_queue(struct limits *l, const struct limits_undo *u);
/* Runs the queued abandons before a new decision, cheaply when none. */
void limits_flush_first(struct limits *l);

/* ---- limits_cache.c ---- */

/* Local monotonic ms: the refusal cache's clock. */
int64_t limits_mono_ms(void);
/* Remembers one refusal of rule r (as in force, with an override) at
 * key/field, which ends reset_ms after Redis decided, for a script call
 * begun at t0 and answered at t1 under generation gen. penalty: hits count
 * toward r's, but none before block_ms (a penalty block's length left, 0:
 * none) has surely passed since Redis decided, at t1 at the latest: Redis
 * counts no refusal during a block. */
void limits_cache_put(struct limits *l, uint64_t gen, enum rcache_op op, const struct cfg_rule *r, int locked,
                      const char *key, const char *field, int64_t t0, int64_t t1, int64_t reset_ms, int penalty,
                      int64_t block_ms);
/* Remembers each cacheable enforced refusal among the verdicts v of call
 * c (IR_PER_RULE per used rule; keys: its KEYS), for a call begun at t0 and
 * answered at t1 under generation gen. */
void limits_cache_verdicts(struct limits *l, uint64_t gen, enum rcache_op op, const struct limits_call *c,
                           char (*keys)[LIMITS_KEY_LEN], const long long *v, int64_t t0, int64_t t1);

/* ---- limits_money.c ---- */

/* The windows of rs's caps as text (limits_caps_text): what a reservation
 * taken on rs by api_key is counted in. */
void limits_cost_caps(const struct limits_rules *rs, const char *api_key, char *out, size_t cap);

#endif
