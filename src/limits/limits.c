/*
 * limits: argument building and reply reading around the Lua scripts. One
 * call per request; the cost is the Redis round trip. The rules snapshot is
 * reference-counted so SIGHUP can swap it under running requests.
 */
#include "limits.h"

#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/unittest.h"
#include "headroom.lua.h"
#include "issue.lua.h"
#include "rcache.h"
#include "refund.lua.h"
#include "reserve.lua.h"
#include "verify.lua.h"

#define LIMITS_ARGS_MAX (12 + 32 * 7 + 8 * 3 + 8 + LIMITS_IDEM_ARGS + LIMITS_PUMP_ARGS + LIMITS_KEYS_MAX + 1)
/* The pumping guard's ARGV, the last of issue.lua's list (read there from
 * the end): the word "pump", key index (0: off), window_ms, min_sent, min
 * ratio in millionths, hold_ms, shadow. verify.lua takes the first three. */
#define LIMITS_PUMP_ARGS 7
/* An Idempotency-Key's ARGV, before the pumping guard's in both scripts:
 * the KEYS index of its hash (0: none; its count next), the request's
 * hash, claim_ms, max_keys. */
#define LIMITS_IDEM_ARGS 4
#define LIMITS_PENDING_MAX 4096 /* abandons waiting for Redis; beyond, dropped and counted */

/* issue.lua's first value when an Idempotency-Key stopped it before
 * anything was taken: {IR_IDEM_TAKEN, now}, the key is another request's;
 * {IR_IDEM_FULL, now, wait_ms}, the caller holds its most keys. */
#define IR_IDEM_TAKEN (-2)
#define IR_IDEM_FULL (-3)

/* issue.lua's reply (see its header): fixed values, then 3 per rule. */
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
/* The pumping guard's values, the last of issue.lua's reply (counted from
 * its end, so they never depend on the rules' count): state (enum
 * limits_pump), its wait in ms, and the sent and verified counts judged. */
enum { IR_PUMP_STATE, IR_PUMP_RETRY, IR_PUMP_SENT, IR_PUMP_VERIFIED, IR_PUMP_N };
enum { IR_RULE_OK, IR_RULE_REMAINING, IR_RULE_RESET, IR_PER_RULE };

/* verify.lua's reply. */
enum verify_reply { VR_STATUS, VR_VID, VR_ATTEMPTS_LEFT, VR_WINDOW_LEFT, VR_SHADOW_LOCK, VR_WRONG, VR_COUNT };

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

struct limits {
    struct store *store;
    int h_issue, h_verify, h_headroom;
    int64_t capacity; /* pacer.capacity: the fleet's queue */
    int64_t share;    /* pacer.share_per_key as messages; 0 when it is capacity (not tracked) */
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

/* Argument strings of one script call, with room for the numbers. */
struct limits_args {
    const char *v[LIMITS_ARGS_MAX];
    char num[LIMITS_ARGS_MAX][32]; /* numbers, and a rule's mode (args_mode) */
    int n;
};

static void args_str(struct limits_args *a, const char *s)
{
    a->v[a->n++] = s;
}

static void args_int(struct limits_args *a, int64_t x)
{
    snprintf(a->num[a->n], sizeof(a->num[0]), "%lld", (long long)x);
    a->v[a->n] = a->num[a->n];
    a->n++;
}

/* A rule's mode, the last of its 7 values in both scripts: "1" shadow, "0"
 * enforced, or with a penalty "<shadow>:<after>:<within_ms>:<block_ms>"
 * (at most 31 characters). One value, so the rule stride stays 7. */
static void args_mode(struct limits_args *a, const struct cfg_rule *r)
{
    if (r->penalty_after > 0) {
        snprintf(a->num[a->n], sizeof(a->num[0]), "%d:%lld:%lld:%lld", r->shadow ? 1 : 0,
                 (long long)r->penalty_after, (long long)r->penalty_within_ms, (long long)r->penalty_block_ms);
        a->v[a->n] = a->num[a->n];
        a->n++;
    } else {
        args_str(a, r->shadow ? "1" : "0");
    }
}

static void rules_free(struct limits_rules *r)
{
    size_t i;

    if (r == NULL)
        return;
    for (i = 0; i < r->n_ov; i++)
        free(r->ov[i].match);
    free(r->ov);
    free(r->rules);
    free(r->prices);
    free(r->caps);
    free(r);
}

static void *dup_array(const void *src, size_t n, size_t size)
{
    void *p = calloc(n + 1, size);

    if (p != NULL && n > 0)
        memcpy(p, src, n * size);
    return p;
}

static struct limits_rules *rules_new(const struct limits_conf *c)
{
    struct limits_rules *r = calloc(1, sizeof(*r));
    size_t i, j;

    if (r == NULL)
        return NULL;
    r->refs = 1;
    r->rules = dup_array(c->rules, c->n_rules, sizeof(*c->rules));
    r->prices = dup_array(c->prices, c->n_prices, sizeof(*c->prices));
    r->caps = calloc(c->n_caps + 1, sizeof(*c->caps));
    if (!r->rules || !r->prices || !r->caps) {
        rules_free(r);
        return NULL;
    }
    r->n_rules = c->n_rules;
    r->n_prices = c->n_prices;
    r->countries = c->countries;
    r->pumping = c->pumping;
    /* Cap state is named by its window (limits_cap_field), and a caller's
     * by its window and the caller: caps with one window of one kind count
     * one sum, so they become one cap with the tightest max, and every
     * script reads, takes and gives back that sum once. */
    for (i = 0; i < c->n_caps; i++) {
        for (j = 0; j < r->n_caps && (r->caps[j].window_ms != c->caps[i].window_ms ||
                                      r->caps[j].per_key != c->caps[i].per_key);
             j++)
            ;
        if (j == r->n_caps)
            r->caps[r->n_caps++] = c->caps[i];
        else if (c->caps[i].max_minor < r->caps[j].max_minor)
            r->caps[j].max_minor = c->caps[i].max_minor;
    }
    return r;
}

static void rules_put(struct limits *l, struct limits_rules *r);

static int ov_cmp(const void *x, const void *y)
{
    return strcmp(((const struct limits_ov *)x)->match, ((const struct limits_ov *)y)->match);
}

/* The overrides' order: by match, then by limit, so that of two live
 * overrides of one rule and key the lower limit is found first: an
 * emergency tightening is never lost to a partner's raise. */
static int ov_order(const void *x, const void *y)
{
    const struct limits_ov *a = x, *b = y;
    int c = ov_cmp(a, b);

    return c != 0 ? c : (a->limit > b->limit) - (a->limit < b->limit);
}

/* "<rule>\x1e<key>\x1e<field>" into out (LIMITS_KEY_LEN * 2 + CFG_NAME_MAX). */
static void ov_match(const char *rule, const char *key, const char *field, char *out, size_t cap)
{
    snprintf(out, cap, "%s\x1e%s\x1e%s", rule, key, field);
}

/* Matches the overrides raw[0..n-1] to r's rules: each becomes the state
 * it applies to. An override whose rule is gone (a reload) is skipped.
 * -1 when out of memory. */
static int ov_index(struct limits_rules *r, const struct limits_override *raw, size_t n)
{
    char key[LIMITS_KEY_LEN], field[LIMITS_KEY_LEN], m[2 * LIMITS_KEY_LEN + CFG_NAME_MAX], ip[LIMITS_IP_KEY_MAX];
    size_t i, j;

    if ((r->ov = calloc(n + 1, sizeof(*r->ov))) == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        const struct limits_override *o = &raw[i];
        struct limits_request rq = {0};
        for (j = 0; j < r->n_rules && strcmp(r->rules[j].name, o->rule) != 0; j++)
            ;
        if (j == r->n_rules)
            continue;
        if (o->limit > config_limit_max(r->rules[j].algo)) {
            /* Admitted under another algorithm before a reload: a sliding
             * log's memory is bounded by its limit. */
            log_msg(LOG_WARN, "limits: an override of %s (limit %lld) is above what %s takes; ignored", o->rule,
                    (long long)o->limit, config_algo_name(r->rules[j].algo));
            continue;
        }
        /* The request whose values the override names. */
        rq.phone = o->values[CFG_KEY_PHONE][0] ? o->values[CFG_KEY_PHONE] : o->values[CFG_KEY_PHONE_PREFIX];
        rq.device_id = o->values[CFG_KEY_DEVICE];
        rq.ip_key = limits_ip_key(o->values[CFG_KEY_CLIENT_IP], ip, sizeof(ip)) == OTP_OK ? ip : NULL;
        rq.api_key = o->values[CFG_KEY_API_KEY];
        rq.purpose = o->values[CFG_KEY_PURPOSE];
        snprintf(rq.region, sizeof(rq.region), "%s", o->values[CFG_KEY_REGION]);
        if (!limits_rule_key(&r->rules[j], &rq, key, sizeof(key), field, sizeof(field)))
            continue;
        ov_match(o->rule, key, field, m, sizeof(m));
        if ((r->ov[r->n_ov].match = strdup(m)) == NULL)
            return -1;
        r->ov[r->n_ov].limit = o->limit;
        r->ov[r->n_ov].burst = o->burst;
        r->n_ov++;
    }
    qsort(r->ov, r->n_ov, sizeof(*r->ov), ov_order);
    return 0;
}

/* Rule r as it applies to the state at key/field: itself, or a copy in
 * tmp with an override's limit and burst. */
static const struct cfg_rule *rule_eff(const struct limits_rules *rs, const struct cfg_rule *r, const char *key,
                                       const char *field, struct cfg_rule *tmp)
{
    char m[2 * LIMITS_KEY_LEN + CFG_NAME_MAX];
    struct limits_ov want = {0}, *hit;

    if (rs->n_ov == 0)
        return r;
    ov_match(r->name, key, field, m, sizeof(m));
    want.match = m;
    if ((hit = bsearch(&want, rs->ov, rs->n_ov, sizeof(*rs->ov), ov_cmp)) == NULL)
        return r;
    while (hit > rs->ov && ov_cmp(hit - 1, &want) == 0)
        hit--; /* the lowest limit of the rule and key (ov_order) */
    *tmp = *r;
    tmp->limit = hit->limit;
    if (hit->burst > 0)
        tmp->burst = hit->burst;
    else if (r->limit > 0) /* 5x the limit, 5x the burst */
        tmp->burst = r->burst * hit->limit / r->limit > 0 ? r->burst * hit->limit / r->limit : 1;
    return tmp;
}

enum otp_rc limits_overrides_set(struct limits *l, const struct limits_override *ov, size_t n)
{
    struct limits_override *raw = dup_array(ov, n, sizeof(*ov)), *old_raw;
    struct limits_rules *r = calloc(1, sizeof(*r)), *old;

    if (raw == NULL || r == NULL) {
        free(raw);
        free(r);
        return OTP_ENOMEM;
    }
    pthread_mutex_lock(&l->mu);
    old = l->cur;
    /* Everything of the rules in force (countries, pumping, ...) but the
     * arrays, which are copied, and the overrides, which are rebuilt. */
    *r = *old;
    r->refs = 1;
    r->ov = NULL;
    r->n_ov = 0;
    r->rules = dup_array(old->rules, old->n_rules, sizeof(*old->rules));
    r->prices = dup_array(old->prices, old->n_prices, sizeof(*old->prices));
    r->caps = dup_array(old->caps, old->n_caps, sizeof(*old->caps));
    if (!r->rules || !r->prices || !r->caps || ov_index(r, raw, n) < 0) {
        pthread_mutex_unlock(&l->mu);
        rules_free(r);
        free(raw);
        return OTP_ENOMEM;
    }
    l->cur = r;
    old_raw = l->ov_raw;
    l->ov_raw = raw;
    l->n_ov_raw = n;
    pthread_mutex_unlock(&l->mu);
    rcache_clear(l->rc); /* a refusal under the old limits may be over under the new */
    free(old_raw);
    rules_put(l, old);
    return OTP_OK;
}

static struct limits_rules *rules_get(struct limits *l)
{
    struct limits_rules *r;

    pthread_mutex_lock(&l->mu);
    r = l->cur;
    r->refs++;
    pthread_mutex_unlock(&l->mu);
    return r;
}

static void rules_put(struct limits *l, struct limits_rules *r)
{
    int last;

    pthread_mutex_lock(&l->mu);
    last = --r->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (last)
        rules_free(r);
}

static int64_t share_max(double share, int64_t capacity);

struct limits *limits_new(struct store *s, const struct limits_conf *c, const struct pacer_conf *pc)
{
    struct limits *l = calloc(1, sizeof(*l));

    if (l == NULL || (l->cur = rules_new(c)) == NULL) {
        free(l);
        return NULL;
    }
    l->store = s;
    l->capacity = pc->capacity;
    /* Read at start, like capacity. A share that cannot bind below the
     * capacity is not tracked: no Redis work when the feature is off. */
    l->share = share_max(pc->share_per_key, l->capacity);
    if (l->share >= l->capacity)
        l->share = 0;
    l->h_issue = store_script(s, limits_issue_lua);
    l->h_verify = store_script(s, limits_verify_lua);
    l->h_headroom = store_script(s, limits_headroom_lua);
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->pmu, NULL);
    if (c->refusal_cache.max_entries > 0 && (l->rc = rcache_new((size_t)c->refusal_cache.max_entries)) == NULL)
        log_msg(LOG_WARN, "limits: out of memory for the refusal cache; it is off");
    return l;
}

void limits_free(struct limits *l)
{
    if (l == NULL)
        return;
    rules_free(l->cur);
    rcache_free(l->rc);
    free(l->ov_raw);
    while (l->n_pending > 0)
        free(l->pending[--l->n_pending]);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->pmu);
    free(l);
}

enum otp_rc limits_reload(struct limits *l, const struct limits_conf *c)
{
    struct limits_rules *r = rules_new(c), *old;

    if (r == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&l->mu);
    if (ov_index(r, l->ov_raw, l->n_ov_raw) < 0) {
        pthread_mutex_unlock(&l->mu);
        rules_free(r);
        return OTP_ENOMEM;
    }
    old = l->cur;
    l->cur = r;
    pthread_mutex_unlock(&l->mu);
    rcache_clear(l->rc); /* the rules changed: no refusal of the old ones is certain */
    rules_put(l, old);
    return OTP_OK;
}

enum fraud_country limits_country(struct limits *l, const char *region)
{
    struct limits_rules *rs = rules_get(l);
    enum fraud_country v = fraud_country(&rs->countries, region);

    rules_put(l, rs);
    return v;
}

/* The Redis key of the pumping guard's state for prefix ("+4474001"). */
static void pump_key(const char *prefix, char *out, size_t cap)
{
    snprintf(out, cap, "otp:pump:{%s}", prefix);
}

/* Appends u's Idempotency-Key's two KEYS (when rq has one) and sets
 * u->idem_at. */
static void idem_keys(const struct limits_request *rq, struct limits_undo *u, int *nkeys)
{
    if (rq->idem == NULL)
        return;
    snprintf(u->keys[*nkeys], sizeof(u->keys[0]), "%s", rq->idem->key);
    u->idem_at = ++*nkeys;
    snprintf(u->keys[(*nkeys)++], sizeof(u->keys[0]), "%s", rq->idem->count);
}

/* Appends an Idempotency-Key's LIMITS_IDEM_ARGS ARGV (all "0" but the
 * hash, "", when rq has none). */
static void idem_args(struct limits_args *a, const struct limits_request *rq, const struct limits_undo *u)
{
    args_int(a, u->idem_at);
    args_str(a, rq->idem ? rq->idem->hash : "");
    args_int(a, rq->idem ? rq->idem->claim_ms : 0);
    args_int(a, rq->idem ? rq->idem->max_keys : 0);
}

/* 1 when rep is a script's refusal for an Idempotency-Key (issue.lua's
 * IR_IDEM_*, verify.lua's 'taken' and 'keys'), then read into taken, rc,
 * reason and retry_ms: nothing was taken. */
static int idem_stopped(const struct store_reply *rep, int *taken, enum otp_rc *rc, char *reason,
                        int64_t *retry_ms)
{
    const char *st = rep->n >= 1 ? rep->strs[0] : NULL;
    long long v = rep->n >= 1 && st == NULL ? rep->ints[0] : 0;

    if ((st != NULL && strcmp(st, "taken") == 0) || (st == NULL && v == IR_IDEM_TAKEN)) {
        *taken = 1;
        *rc = OTP_EINVAL;
        return 1;
    }
    if ((st != NULL && strcmp(st, "keys") == 0 && rep->n >= VR_COUNT) ||
        (st == NULL && v == IR_IDEM_FULL && rep->n >= 3)) {
        *rc = OTP_ELIMITED;
        snprintf(reason, CFG_NAME_MAX, "%s", LIMITS_IDEM_REASON);
        *retry_ms = st != NULL ? rep->ints[VR_WINDOW_LEFT] : rep->ints[2];
        return 1;
    }
    return 0;
}

/* Appends the pumping guard's ARGV (LIMITS_PUMP_ARGS of them for an
 * issue, the first three for a verify); key is its KEYS index, 0 when off. */
static void pump_args(struct limits_args *a, const struct cfg_pumping *g, int key, int verify)
{
    args_str(a, "pump");
    args_int(a, key);
    args_int(a, g->window_ms);
    if (verify)
        return;
    args_int(a, g->min_sent);
    args_int(a, g->min_ratio_ppm);
    args_int(a, g->hold_ms);
    args_str(a, g->shadow ? "1" : "0");
}

enum otp_rc limits_ip_key(const char *ip, char *out, size_t cap)
{
    unsigned char a[16];
    char text[INET6_ADDRSTRLEN];

    if (ip == NULL || strlen(ip) >= INET6_ADDRSTRLEN)
        return OTP_EINVAL;
    if (inet_pton(AF_INET, ip, a) == 1) {
        inet_ntop(AF_INET, a, text, sizeof(text));
    } else if (inet_pton(AF_INET6, ip, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            inet_ntop(AF_INET, a + 12, text, sizeof(text));
        } else {
            memset(a + 8, 0, 8);
            inet_ntop(AF_INET6, a, text, sizeof(text));
            if ((size_t)snprintf(out, cap, "%s/64", text) >= cap)
                return OTP_EINVAL;
            return OTP_OK;
        }
    } else {
        return OTP_EINVAL;
    }
    if ((size_t)snprintf(out, cap, "%s", text) >= cap)
        return OTP_EINVAL;
    return OTP_OK;
}

void limits_key(enum cfg_key kind, const struct limits_request *rq, char *out, size_t cap)
{
    switch (kind) {
    case CFG_KEY_PHONE:
        snprintf(out, cap, "otp:{%s}", rq->phone);
        break;
    case CFG_KEY_DEVICE:
        snprintf(out, cap, "otp:d:{%s}", rq->device_id);
        break;
    case CFG_KEY_CLIENT_IP:
        snprintf(out, cap, "otp:ip:{%s}", rq->ip_key);
        break;
    case CFG_KEY_API_KEY:
        snprintf(out, cap, "otp:k:{%s}", rq->api_key);
        break;
    case CFG_KEY_GLOBAL:
        snprintf(out, cap, "otp:g");
        break;
    case CFG_KEY_PURPOSE:
        snprintf(out, cap, "otp:pu:{%s}", rq->purpose);
        break;
    case CFG_KEY_PHONE_PREFIX:
        snprintf(out, cap, "otp:pp:{%.3s}", rq->phone + 1);
        break;
    case CFG_KEY_REGION:
        snprintf(out, cap, "otp:r:{%s}", rq->region);
        break;
    }
}

/* rq's value of one key kind, NULL when the request has none; for
 * phone_prefix the whole number (the caller cuts it). */
static const char *key_value(enum cfg_key kind, const struct limits_request *rq)
{
    switch (kind) {
    case CFG_KEY_PHONE:
    case CFG_KEY_PHONE_PREFIX:
        return rq->phone;
    case CFG_KEY_DEVICE:
        return rq->device_id;
    case CFG_KEY_CLIENT_IP:
        return rq->ip_key;
    case CFG_KEY_API_KEY:
        return rq->api_key;
    case CFG_KEY_PURPOSE:
        return rq->purpose;
    case CFG_KEY_REGION:
        return rq->region[0] ? rq->region : NULL;
    case CFG_KEY_GLOBAL:
        return "";
    }
    return NULL;
}

int limits_rule_key(const struct cfg_rule *r, const struct limits_request *rq, char *key, size_t kcap,
                    char *field, size_t fcap)
{
    unsigned mask = r->key_mask ? r->key_mask : 1u << r->key;
    size_t n;
    int kind;

    for (kind = 0; kind < CFG_KEY_COUNT; kind++) {
        const char *v = key_value((enum cfg_key)kind, rq);
        if (!(mask & (1u << kind)))
            continue;
        /* A number shorter than the prefix has no prefix of that length. */
        if (v == NULL || (kind == CFG_KEY_PHONE_PREFIX && strlen(v) < (size_t)r->prefix_digits + 1))
            return 0;
    }
    if (r->key == CFG_KEY_PHONE_PREFIX)
        snprintf(key, kcap, "otp:pp:{%.*s}", r->prefix_digits, rq->phone + 1);
    else
        limits_key(r->key, rq, key, kcap);
    snprintf(field, fcap, "%s", r->field);
    for (kind = (int)r->key + 1; kind < CFG_KEY_COUNT; kind++) {
        const char *v = key_value((enum cfg_key)kind, rq);
        int len = kind == CFG_KEY_PHONE_PREFIX ? r->prefix_digits : (int)strlen(v ? v : "");
        if (!(mask & (1u << kind)))
            continue;
        n = strlen(field);
        if (kind == CFG_KEY_PHONE_PREFIX)
            v++; /* the digits after '+' */
        snprintf(field + n, fcap - n, "\x1f%.*s", len, v);
    }
    return 1;
}

static int64_t price_of(const struct limits_rules *r, const char *phone)
{
    return config_price_in(r->prices, r->n_prices, phone);
}

static int64_t ceil_s(int64_t ms)
{
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

static void header_set(struct limits_header *h, const struct cfg_rule *r, int64_t remaining, int64_t reset_ms)
{
    snprintf(h->name, sizeof(h->name), "%s", r->name);
    h->quota = r->limit;
    h->window_s = ceil_s(r->window_ms);
    h->remaining = remaining < 0 ? 0 : remaining;
    h->reset_s = ceil_s(reset_ms);
}

static void append_name(char *list, size_t cap, const char *name)
{
    size_t n = strlen(list);

    snprintf(list + n, cap - n, "%s%s", n ? "," : "", name);
}

enum otp_rc limits_cap_headroom(struct limits *l, const struct limits_cap_ask *ask, size_t n, int64_t *left_minor,
                                char *err)
{
    const char *args[1 + 3 * LIMITS_HEADROOM_MAX];
    char nums[LIMITS_HEADROOM_MAX][2][24];
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    size_t i;

    if (n == 0)
        return OTP_OK;
    if (n > LIMITS_HEADROOM_MAX)
        return OTP_EINVAL;
    args[0] = "otp:cost";
    for (i = 0; i < n; i++) {
        snprintf(nums[i][0], sizeof(nums[i][0]), "%lld", (long long)ask[i].window_ms);
        snprintf(nums[i][1], sizeof(nums[i][1]), "%lld", (long long)ask[i].max_minor);
        args[1 + 3 * i] = ask[i].field;
        args[2 + 3 * i] = nums[i][0];
        args[3 + 3 * i] = nums[i][1];
    }
    if ((rc = store_eval(l->store, l->h_headroom, 1, (int)(1 + 3 * n), args, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n != n) {
        snprintf(err, OTP_ERR_LEN, "headroom.lua: %zu values for %zu caps", rep->n, n);
        rc = OTP_ESTORE;
    }
    for (i = 0; rc == OTP_OK && i < n; i++)
        left_minor[i] = rep->strs[i] ? 0 : rep->ints[i];
    store_reply_free(rep);
    return rc;
}

void limits_cap_field(int64_t window_ms, char *out, size_t cap)
{
    snprintf(out, cap, "c%lld", (long long)window_ms); /* refund.lua builds the same name */
}

void limits_cap_key_field(int64_t window_ms, const char *api_key, char *out, size_t cap)
{
    /* reserve.lua, refund.lua and issue.lua's abandon build the same name. */
    snprintf(out, cap, "k%lld:%s", (long long)window_ms, api_key ? api_key : "");
}

/* Appends what snprintf wrote, or nothing when it did not fit. */
static void text_add(char *out, size_t cap, size_t *n, int k)
{
    if (k > 0 && (size_t)k < cap - *n)
        *n += (size_t)k;
    else
        out[*n] = '\0';
}

void limits_caps_text(const struct cfg_cap *caps, size_t n_caps, const char *api_key, char *out, size_t cap)
{
    size_t i, n = 0, first = 1;
    const unsigned char *p;

    out[0] = '\0';
    for (i = 0; i < n_caps; i++)
        if (!caps[i].per_key) {
            text_add(out, cap, &n, snprintf(out + n, cap - n, "%s%lld", first ? "" : ",",
                                            (long long)caps[i].window_ms));
            first = 0;
        }
    for (i = 0; i < n_caps && caps[i].per_key == 0; i++)
        ;
    if (i == n_caps)
        return;
    /* The caller's part carries no digit, so a parser of the old text
     * (Lua's gmatch('%d+') in an older instance of a rolling upgrade)
     * reads only the global windows: it then leaves the caller's money
     * counted, more than was spent, never less. */
    text_add(out, cap, &n, snprintf(out + n, cap - n, ";"));
    for (p = (const unsigned char *)(api_key ? api_key : ""); *p; p++)
        text_add(out, cap, &n, snprintf(out + n, cap - n, "%c%c", 'a' + (*p >> 4), 'a' + (*p & 15)));
    text_add(out, cap, &n, snprintf(out + n, cap - n, ":"));
    for (first = 1, i = 0; i < n_caps; i++) {
        char w[24], *d;
        if (!caps[i].per_key)
            continue;
        snprintf(w, sizeof(w), "%lld", (long long)caps[i].window_ms);
        for (d = w; *d; d++)
            *d = (char)('a' + (*d - '0'));
        text_add(out, cap, &n, snprintf(out + n, cap - n, "%s%s", first ? "" : ",", w));
        first = 0;
    }
}

/* The windows of rs's caps as text (limits_caps_text): what a reservation
 * taken on rs by api_key is counted in, for refund.lua. */
static void caps_text(const struct limits_rules *rs, const char *api_key, char *out, size_t cap)
{
    limits_caps_text(rs->caps, rs->n_caps, api_key, out, cap);
}

/* At most how many messages not yet ended one caller may hold: floor(share
 * x capacity), at least 1. The epsilon keeps 0.3 x 10 at 3 although 0.3 is
 * not exact in binary; capacity is at most 10^6 (config_load). */
static int64_t share_max(double share, int64_t capacity)
{
    int64_t m = (int64_t)floor((share > 0 ? share : 1) * (double)capacity + 1e-6);

    return m < 1 ? 1 : m > capacity ? capacity : m;
}

/* The undo key of request id rid. */
static void undo_key(const char *rid, char *out, size_t cap)
{
    snprintf(out, cap, "otp:u:%s", rid);
}

/* Reads one JSON string of a key name at p (past its opening quote) into
 * out, undoing the escapes Redis's cjson writes: a key may hold a caller's
 * bytes (a device_id's '/', '"' or '\\' are printable ASCII). Returns the
 * byte after the closing quote, or NULL when it is not such a string or
 * does not fit. */
static const char *undo_key_read(const char *p, char *out, size_t cap)
{
    static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
    size_t n = 0;

    for (; *p != '"'; p++) {
        char c = *p;
        const char *e;
        unsigned v = 0;
        if (c == '\0' || (unsigned char)c < 0x20)
            return NULL;
        if (c == '\\' && *++p == 'u') {
            /* cjson writes a control byte as \u00XX; nothing of ours is
             * outside ASCII. */
            if (strspn(p + 1, "0123456789abcdefABCDEF") < 4 || sscanf(p + 1, "%4x", &v) != 1 || v == 0 ||
                v > 0x7f)
                return NULL;
            c = (char)v;
            p += 4;
        } else if (c == '\\') {
            if (*p == '\0' || (e = strchr(esc, *p)) == NULL)
                return NULL;
            c = val[e - esc];
        }
        if (n + 1 >= cap)
            return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return p + 1;
}

/* Reads the JSON list of key names op 'k' returns into u's keys; returns
 * how many, 0 when it is not such a list. */
static int undo_keys_read(const char *json, struct limits_undo *u)
{
    const char *p = json;
    int n = 0;

    if (*p++ != '[')
        return 0;
    while (*p == '"' && n <= LIMITS_KEYS_MAX) {
        if ((p = undo_key_read(p + 1, u->keys[n], sizeof(u->keys[n]))) == NULL)
            return 0;
        n++;
        if (*p == ',')
            p++;
    }
    return *p == ']' && n >= 4 ? n : 0;
}

/* Runs one abandon (op 'a' of issue.lua or verify.lua; or op 'd', the
 * drop of a lapsed hold) for u. */
static enum otp_rc undo_op(struct limits *l, const struct limits_undo *u, const char *op, long long *result,
                           char *err)
{
    struct limits_args a = {0};
    struct store_reply *rep = NULL;
    int k, maybe_ran, nargs = u->verify ? 7 : 9; /* ARGV before undo_ttl_ms */
    enum otp_rc rc;

    for (k = 0; k < u->nkeys; k++)
        args_str(&a, u->keys[k]);
    args_str(&a, op);
    args_str(&a, u->hold);
    for (k = 2; k < nargs; k++)
        args_str(&a, "");
    args_int(&a, LIMITS_UNDO_TTL_MS);
    rc = store_eval_idem(l->store, u->verify ? l->h_verify : l->h_issue, u->nkeys, a.n, a.v, &rep, &maybe_ran,
                         err);
    if (rc == OTP_OK && result != NULL)
        *result = rep->n == 1 && rep->strs[0] == NULL ? rep->ints[0] : -1;
    store_reply_free(rep);
    if (rc == OTP_OK) {
        /* It gave takes back: a refusal cached on any of its keys may have
         * ended with them. (An abandon run by another instance cannot reach
         * here: README, "The refusal cache".) */
        for (k = 0; k < u->nkeys; k++)
            rcache_clear_key(l->rc, u->keys[k]);
        pthread_mutex_lock(&l->pmu);
        l->stats.abandoned++;
        pthread_mutex_unlock(&l->pmu);
    }
    return rc;
}

/* Queues u (copied) for the next flush. */
static void undo_queue(struct limits *l, const struct limits_undo *u)
{
    struct limits_undo *c = malloc(sizeof(*c));
    int queued = 0;

    if (c != NULL)
        *c = *u;
    pthread_mutex_lock(&l->pmu);
    if (c != NULL && l->n_pending < LIMITS_PENDING_MAX) {
        l->pending[l->n_pending++] = c;
        queued = 1;
    } else {
        l->stats.dropped++;
    }
    pthread_mutex_unlock(&l->pmu);
    if (!queued) {
        free(c);
        log_msg(LOG_ERROR, "limits: abandon queue full; a 503'd request may keep its takes for %d s",
                LIMITS_UNDO_TTL_MS / 1000);
    }
}

size_t limits_flush(struct limits *l)
{
    char err[OTP_ERR_LEN];
    size_t left;

    for (;;) {
        struct limits_undo *u = NULL;
        pthread_mutex_lock(&l->pmu);
        if (l->n_pending > 0)
            u = l->pending[--l->n_pending];
        pthread_mutex_unlock(&l->pmu);
        if (u == NULL)
            break;
        if (undo_op(l, u, "a", NULL, err) != OTP_OK) {
            undo_queue(l, u); /* Redis still away: try again on the next flush */
            free(u);
            break;
        }
        free(u);
    }
    pthread_mutex_lock(&l->pmu);
    left = l->n_pending;
    pthread_mutex_unlock(&l->pmu);
    return left;
}

void limits_abandon(struct limits *l, const struct limits_undo *u)
{
    char err[OTP_ERR_LEN];

    if (u->nkeys == 0)
        return;
    if (undo_op(l, u, "a", NULL, err) != OTP_OK) {
        log_msg(LOG_WARN, "limits: abandon deferred until Redis answers: %s", err);
        undo_queue(l, u);
    }
}

enum otp_rc limits_commit(struct limits *l, const struct limits_undo *u, const char *answer, int64_t keep_ms,
                          char *err)
{
    struct store_reply *rep = NULL;
    const char *args[10];
    char keep[24];
    int n = 0, k, nkeys, maybe_ran = 0, idem = u->idem_at > 0 && answer != NULL;
    enum otp_rc rc;

    if (u->nkeys == 0)
        return OTP_OK;
    /* An Idempotency-Key's hash and count first; then verify.lua's record
     * is its undo key alone; an issue's commit names the stream, the holds
     * and the message too, and releases its hold. */
    if (idem) {
        args[n++] = u->keys[u->idem_at - 1];
        args[n++] = u->keys[u->idem_at];
    }
    for (k = u->verify ? u->nkeys - 1 : u->nkeys - 4; k < u->nkeys; k++)
        args[n++] = u->keys[k];
    nkeys = n;
    args[n++] = idem ? "C" : "c";
    args[n++] = u->hold;
    if (idem) {
        snprintf(keep, sizeof(keep), "%lld", (long long)keep_ms);
        args[n++] = answer;
        args[n++] = keep;
    }
    /* A commit that already ran finds the message queued and says so again. */
    rc = store_eval_idem(l->store, l->h_issue, nkeys, n, args, &rep, &maybe_ran, err);
    if (rc == OTP_OK && (rep->n != 1 || rep->strs[0] != NULL || rep->ints[0] != 1)) {
        snprintf(err, OTP_ERR_LEN, "%s lapsed before the commit",
                 rep->n == 1 && rep->strs[0] == NULL && rep->ints[0] == -1 ? "its Idempotency-Key's claim"
                                                                           : "its hold");
        rc = OTP_ENOTFOUND;
    }
    store_reply_free(rep);
    return rc;
}

enum otp_rc limits_holds(struct limits *l, size_t *dropped, char *err)
{
    struct store_reply *rep = NULL, *keys = NULL;
    const char *args[3];
    long long result = 0;
    enum otp_rc rc;
    size_t i;

    *dropped = 0;
    args[0] = STORE_HOLDS_KEY;
    args[1] = "h";
    args[2] = "16";
    if ((rc = store_eval(l->store, l->h_issue, 1, 3, args, &rep, err)) != OTP_OK)
        return rc;
    for (i = 0; i < rep->n && rc == OTP_OK; i++) {
        struct limits_undo u = {0};
        const char *member = rep->strs[i], *colon = member ? strchr(member, ':') : NULL;
        char mid[LIMITS_ID_MAX] = "";
        if (colon == NULL || colon - member >= LIMITS_ID_MAX)
            continue;
        memcpy(mid, member, (size_t)(colon - member));
        undo_key(colon + 1, u.keys[0], sizeof(u.keys[0]));
        args[0] = u.keys[0];
        args[1] = "k";
        if ((rc = store_eval(l->store, l->h_issue, 1, 2, args, &keys, err)) != OTP_OK)
            break;
        if (keys->n == 1 && keys->strs[0] != NULL)
            u.nkeys = undo_keys_read(keys->strs[0], &u);
        if (u.nkeys == 0) {
            /* Its record expired: only the hold, the held message and its share go. */
            snprintf(u.keys[0], sizeof(u.keys[0]), "%s", STORE_SHARE_KEY);
            snprintf(u.keys[1], sizeof(u.keys[0]), "%s", STORE_QUEUE_KEY);
            snprintf(u.keys[2], sizeof(u.keys[0]), "%s", STORE_HOLDS_KEY);
            store_msg_key(mid, u.keys[3], sizeof(u.keys[0]));
            undo_key(colon + 1, u.keys[4], sizeof(u.keys[0]));
            u.nkeys = 5;
        }
        snprintf(u.hold, sizeof(u.hold), "%s", member);
        store_reply_free(keys);
        keys = NULL;
        if ((rc = undo_op(l, &u, "d", &result, err)) == OTP_OK && result == 1) {
            (*dropped)++;
            pthread_mutex_lock(&l->pmu);
            l->stats.holds_dropped++;
            pthread_mutex_unlock(&l->pmu);
            log_msg(LOG_WARN, "limits: dropped message %s: its hold lapsed before its instance committed it", mid);
        }
    }
    store_reply_free(keys);
    store_reply_free(rep);
    return rc;
}

void limits_stats(struct limits *l, struct limits_stats *out)
{
    struct rcache_stats rs;

    pthread_mutex_lock(&l->pmu);
    *out = l->stats;
    out->pending = l->n_pending;
    pthread_mutex_unlock(&l->pmu);
    rcache_stats(l->rc, &rs);
    out->cache_hits[0] = rs.hits[RCACHE_ISSUE];
    out->cache_hits[1] = rs.hits[RCACHE_VERIFY];
    out->cache_entries = rs.entries;
    out->cache_evictions = rs.evictions;
}

/* Runs the queued abandons before a new decision, cheaply when none. */
static void flush_first(struct limits *l)
{
    size_t n;

    pthread_mutex_lock(&l->pmu);
    n = l->n_pending;
    pthread_mutex_unlock(&l->pmu);
    if (n > 0)
        limits_flush(l);
}

/* ---- The refusal cache (rcache.h; README, "The refusal cache") ---- */

/* Local monotonic ms: the refusal cache's clock. */
static int64_t mono_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000);
}

/* Remembers one refusal of rule r (as in force, with an override) at
 * key/field, which ends reset_ms after Redis decided, for a script call
 * begun at t0 and answered at t1 under generation gen. penalty: hits count
 * toward r's, but none before block_ms (a penalty block's length left, 0:
 * none) has surely passed since Redis decided, at t1 at the latest: Redis
 * counts no refusal during a block. */
static void cache_put(struct limits *l, uint64_t gen, enum rcache_op op, const struct cfg_rule *r, int locked,
                      const char *key, const char *field, int64_t t0, int64_t t1, int64_t reset_ms, int penalty,
                      int64_t block_ms)
{
    struct rcache_value v = {0};

    v.outcome = locked ? RCACHE_LOCKED : RCACHE_RATE_LIMITED;
    snprintf(v.rule, sizeof(v.rule), "%s", r->name);
    v.quota = r->limit;
    v.window_s = ceil_s(r->window_ms);
    v.deadline_ms = rcache_deadline_ms(t0, reset_ms);
    v.end_ms = t0 + reset_ms;
    v.penalty = penalty;
    v.count_from_ms = block_ms > 0 ? t1 + block_ms : 0;
    rcache_put(l->rc, gen, op, key, field, &v, mono_ms());
}

/* Remembers each cacheable enforced refusal among a script's verdicts (v:
 * IR_PER_RULE per rule of used, in order; key_of: each one's 1-based index
 * in keys), for a call begun at t0 and answered at t1. A refusal counts
 * toward its rule's penalty in both scripts, except during a block (a
 * refusal's remaining is minus the block's ms left). */
static void cache_verdicts(struct limits *l, uint64_t gen, enum rcache_op op, const struct cfg_rule *const *used,
                           size_t n_used, const int *key_of, char (*keys)[LIMITS_KEY_LEN], char (*fields)[LIMITS_KEY_LEN],
                           const long long *v, int64_t t0, int64_t t1)
{
    size_t i;

    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        const long long *x = v + i * IR_PER_RULE;
        if (x[IR_RULE_OK] == 1 || !rcache_cacheable(r))
            continue;
        cache_put(l, gen, op, r, r->algo == CFG_ALGO_WRONG_GUESS_CAP, keys[key_of[i] - 1], fields[i], t0, t1,
                  x[IR_RULE_RESET], r->penalty_after > 0, x[IR_RULE_REMAINING] < 0 ? -x[IR_RULE_REMAINING] : 0);
    }
}

/* The RateLimit fields of a cached refusal: the rule's, nothing left,
 * reset when the refusal ends as Redis gave it (rounded as header_set
 * rounds Redis's). */
static void cached_header(struct limits_header *h, const struct rcache_value *v, int64_t left_ms)
{
    snprintf(h->name, sizeof(h->name), "%s", v->rule);
    h->quota = v->quota;
    h->window_s = v->window_s;
    h->remaining = 0;
    h->reset_s = ceil_s(left_ms);
}

/* 1 when rule r's state for rq has a refusal of op in the cache at now,
 * into v; 0 when r is not cacheable or nothing is remembered. */
static int cached_rule(struct limits *l, const struct cfg_rule *r, enum rcache_op op,
                       const struct limits_request *rq, int64_t now, struct rcache_value *v)
{
    char key[LIMITS_KEY_LEN], field[LIMITS_KEY_LEN];

    return rcache_cacheable(r) && limits_rule_key(r, rq, key, sizeof(key), field, sizeof(field)) &&
           rcache_get(l->rc, op, key, field, now, v);
}

int limits_cached_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out)
{
    struct rcache_value v, why = {0};
    struct limits_rules *rs;
    int64_t now, wait = 0;
    size_t i;
    int hits = 0, locked = 0;

    if (l->rc == NULL)
        return 0;
    now = mono_ms();
    rs = rules_get(l);
    /* Every rule is looked up, not only until a hit: each hit counts toward
     * its rule's penalty, as each refusing rule would in the script. */
    for (i = 0; i < rs->n_rules; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->on == CFG_ON_VERIFY || !cached_rule(l, r, RCACHE_ISSUE, rq, now, &v))
            continue;
        hits++;
        if (v.end_ms - now > wait)
            wait = v.end_ms - now;
        /* As issue_read names it: the lock, else the longest refusal. */
        if ((v.outcome == RCACHE_LOCKED && !locked) || (locked == (v.outcome == RCACHE_LOCKED) && v.end_ms > why.end_ms)) {
            why = v;
            locked = v.outcome == RCACHE_LOCKED;
        }
    }
    rules_put(l, rs);
    if (hits == 0)
        return 0;
    out->rc = locked ? OTP_ELOCKED : OTP_ELIMITED;
    snprintf(out->reason, sizeof(out->reason), "%s", why.rule);
    out->retry_ms = wait;
    cached_header(&out->header, &why, why.end_ms - now);
    rcache_count_hit(l->rc, RCACHE_ISSUE);
    return 1;
}

int limits_cached_verify(struct limits *l, const struct limits_request *rq, struct limits_verify *out)
{
    struct rcache_value v, why = {0};
    const struct cfg_rule *wrong = NULL;
    struct limits_rules *rs;
    int64_t now;
    size_t i;
    int hits = 0;

    if (l->rc == NULL)
        return 0;
    now = mono_ms();
    rs = rules_get(l);
    for (i = 0; i < rs->n_rules; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->algo == CFG_ALGO_WRONG_GUESS_CAP)
            wrong = r; /* the one limits_verify uses: the last */
        if (r->on == CFG_ON_ISSUE || r->algo == CFG_ALGO_WRONG_GUESS_CAP ||
            !cached_rule(l, r, RCACHE_VERIFY, rq, now, &v))
            continue;
        hits++;
        if (v.end_ms > why.end_ms)
            why = v; /* as verify_rules_read: the longest refusal, and its wait */
    }
    /* verify.lua checks the verify rules first, then the lock. */
    if (hits == 0 && wrong != NULL && cached_rule(l, wrong, RCACHE_VERIFY, rq, now, &why))
        hits++;
    rules_put(l, rs);
    if (hits == 0)
        return 0;
    out->rc = why.outcome == RCACHE_LOCKED ? OTP_ELOCKED : OTP_ELIMITED;
    snprintf(out->reason, sizeof(out->reason), "%s", why.rule);
    out->retry_ms = why.end_ms - now;
    cached_header(&out->header, &why, why.end_ms - now);
    rcache_count_hit(l->rc, RCACHE_VERIFY);
    return 1;
}

void limits_cache_clear(struct limits *l)
{
    rcache_clear(l->rc);
}

void limits_cache_vouch(struct limits *l, int64_t read_ms)
{
    rcache_vouch(l->rc, read_ms);
}

/* Penalty states per op 'p' call: 1 + 6 * 32 arguments, within LIMITS_ARGS_MAX. */
#define LIMITS_PEN_BATCH 32

void limits_penalties_flush(struct limits *l)
{
    struct rcache_hits *h = NULL;
    struct limits_args *a = NULL;
    struct limits_rules *rs;
    struct store_reply *rep = NULL;
    char err[OTP_ERR_LEN];
    size_t n, i, j;
    int nkeys;

    if (l->rc == NULL)
        return;
    h = calloc(LIMITS_PEN_BATCH, sizeof(*h));
    a = calloc(1, sizeof(*a));
    rs = rules_get(l);
    while (h != NULL && a != NULL && (n = rcache_take_hits(l->rc, h, LIMITS_PEN_BATCH)) > 0) {
        a->n = 0;
        nkeys = 0;
        for (i = 0; i < n; i++)
            args_str(a, h[i].key);
        args_str(a, "p");
        for (i = 0; i < n; i++) {
            const struct cfg_rule *r = NULL;
            for (j = 0; j < rs->n_rules && r == NULL; j++)
                if (strcmp(rs->rules[j].name, h[i].rule) == 0)
                    r = &rs->rules[j];
            /* A rule gone, or without a penalty since (a reload): nothing to count. */
            if (r == NULL || r->shadow || r->penalty_after <= 0)
                continue;
            args_int(a, (int64_t)i + 1);
            args_str(a, h[i].field);
            args_int(a, r->penalty_after);
            args_int(a, r->penalty_within_ms);
            args_int(a, r->penalty_block_ms);
            args_int(a, (int64_t)h[i].n);
            nkeys++;
        }
        if (nkeys == 0)
            continue;
        if (store_eval(l->store, l->h_issue, (int)n, a->n, a->v, &rep, err) != OTP_OK)
            log_msg(LOG_WARN, "limits: %zu cached refusals not counted toward their penalties: %s", n, err);
        store_reply_free(rep);
        rep = NULL;
    }
    rules_put(l, rs);
    free(a);
    free(h);
}

/* Reads issue.lua's reply into out. A refusal names the lock if there is
 * one, else the enforced rule that refuses longest; its Retry-After is the
 * longest wait of every refusal, cost caps included, so it is never early. */
UNITTEST void issue_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                         struct limits_issue *out)
{
    const struct cfg_rule *lock = NULL, *limit = NULL;
    int64_t best_remaining = INT64_MAX, best_reset = -1, lock_reset = 0, limit_reset = -1;
    int64_t wait_ms = rep->ints[IR_COST_RETRY];
    size_t i;

    const long long *pump = rep->ints + rep->n - IR_PUMP_N;

    out->now_ms = rep->ints[IR_NOW];
    out->pump = (enum limits_pump)pump[IR_PUMP_STATE];
    out->pump_sent = pump[IR_PUMP_SENT];
    out->pump_verified = pump[IR_PUMP_VERIFIED];
    out->pump_left_ms = pump[IR_PUMP_RETRY];
    if (out->pump == LIMITS_PUMP_HELD || out->pump == LIMITS_PUMP_STARTED) {
        /* Checked before the rules: they were not run, nothing was taken,
         * and no rule's RateLimit fields apply. */
        out->rc = OTP_EPUMPING;
        out->retry_ms = pump[IR_PUMP_RETRY];
        return;
    }
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[IR_VID] ? rep->strs[IR_VID] : "");
    out->expires_in_ms = rep->ints[IR_EXPIRES];
    out->resend_after_ms = rep->ints[IR_NEXT];
    /* IR_IS_NEW says whether vid is the proposed id; the ledger does not
     * need it (the verification row is inserted or kept with every message). */
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        const long long *v = rep->ints + IR_RULES + i * IR_PER_RULE;
        int ok = v[IR_RULE_OK] == 1;
        int64_t remaining = v[IR_RULE_REMAINING], reset = v[IR_RULE_RESET];
        if (!ok && r->shadow) {
            append_name(out->shadow, sizeof(out->shadow), r->name);
        } else if (!ok) {
            if (reset > wait_ms)
                wait_ms = reset;
            if (r->algo == CFG_ALGO_WRONG_GUESS_CAP)
                lock = r, lock_reset = reset;
            else if (reset > limit_reset)
                limit = r, limit_reset = reset;
        } else if (!r->shadow) {
            if (remaining < best_remaining || (remaining == best_remaining && reset > best_reset)) {
                best_remaining = remaining;
                best_reset = reset;
                header_set(&out->header, r, remaining, reset);
            }
        }
    }
    if (rep->ints[IR_ALLOWED] == 1) {
        out->rc = OTP_OK;
        return;
    }
    out->retry_ms = wait_ms;
    out->depth = rep->ints[IR_FULL];
    if (out->depth >= 0 && lock == NULL && limit == NULL && wait_ms == 0) {
        out->rc = OTP_EFULL;
        if (rep->ints[IR_IS_NEW] == 1)
            snprintf(out->reason, sizeof(out->reason), "share_per_key");
        memset(&out->header, 0, sizeof(out->header)); /* a 503, like cost_cap: no RateLimit headers */
        return;
    }
    if (lock != NULL || limit != NULL) {
        const struct cfg_rule *why = lock ? lock : limit;
        out->rc = lock ? OTP_ELOCKED : OTP_ELIMITED;
        snprintf(out->reason, sizeof(out->reason), "%s", why->name);
        header_set(&out->header, why, 0, lock ? lock_reset : limit_reset);
    } else {
        out->rc = OTP_ECOST;
    }
}

/* 1 when rep has issue.lua's layout for n_used rules: the fixed values,
 * the rules' verdicts and the pumping guard's values; or, for a refusal by
 * the guard (checked before the rules), no verdicts. */
static int issue_reply_ok(const struct store_reply *rep, size_t n_used)
{
    long long state;

    if (rep->n < IR_RULES + IR_PUMP_N || rep->strs[IR_ALLOWED] != NULL || rep->ints[IR_ALLOWED] < 0)
        return 0;
    state = rep->ints[rep->n - IR_PUMP_N + IR_PUMP_STATE];
    if (rep->n == IR_RULES + IR_PUMP_N && (state == LIMITS_PUMP_HELD || state == LIMITS_PUMP_STARTED))
        return 1;
    return rep->n == IR_RULES + n_used * IR_PER_RULE + IR_PUMP_N;
}

enum otp_rc limits_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out, char *err)
{
    const struct cfg_rule *used[32];
    struct cfg_rule eff[32]; /* used rules with an override */
    int key_of[32];  /* 1-based KEYS index of each used rule */
    int cost_key = 0; /* KEYS index of the cost caps; 0: none */
    int pump_at = 0;  /* KEYS index of the pumping guard's state; 0: off */
    int share_key = 0; /* KEYS index of each caller's messages not yet ended; 0: not tracked */
    char capf[8][CFG_NAME_MAX + 32]; /* the per-caller caps' fields */
    struct limits_rules *rs;
    struct limits_args *a = calloc(1, sizeof(*a));
    char(*fields)[LIMITS_KEY_LEN] = calloc(32, LIMITS_KEY_LEN), key[LIMITS_KEY_LEN];
    struct store_reply *rep = NULL;
    struct limits_undo *u = &out->undo;
    size_t i, n_used = 0;
    int nkeys = 1, k, maybe_ran = 0;
    enum otp_rc rc = OTP_ENOMEM;
    uint64_t gen;
    int64_t t0;

    memset(out, 0, sizeof(*out));
    flush_first(l);
    /* Before the rules: a reload or an override swaps them, then clears,
     * so a refusal under rules it retired can never be stored after its
     * clear (read after the snapshot, the generation could be the new one). */
    gen = rcache_gen(l->rc);
    rs = rules_get(l);
    if (a == NULL || fields == NULL) {
        snprintf(err, OTP_ERR_LEN, "limits: out of memory");
        goto out;
    }
    limits_key(CFG_KEY_PHONE, rq, u->keys[0], sizeof(u->keys[0]));
    for (i = 0; i < rs->n_rules && n_used < 32; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->on == CFG_ON_VERIFY || !limits_rule_key(r, rq, key, sizeof(key), fields[n_used], LIMITS_KEY_LEN))
            continue;
        r = rule_eff(rs, r, key, fields[n_used], &eff[n_used]);
        for (k = 0; k < nkeys && strcmp(u->keys[k], key) != 0; k++)
            ;
        if (k == nkeys) {
            if (nkeys == LIMITS_KEYS_MAX - 9) /* 11 rule keys */
                continue; /* config_load bounds rules' keys; never here */
            snprintf(u->keys[nkeys++], sizeof(u->keys[0]), "%s", key);
        }
        key_of[n_used] = k + 1;
        used[n_used++] = r;
    }
    out->price_minor = rs->n_caps > 0 ? price_of(rs, rq->phone) : -1;
    caps_text(rs, rq->api_key, out->cost_caps, sizeof(out->cost_caps));
    if (out->price_minor >= 0) {
        snprintf(u->keys[nkeys], sizeof(u->keys[0]), "otp:cost");
        cost_key = ++nkeys;
    }
    if (rs->pumping.on && fraud_prefix(rq->phone, rs->pumping.prefix_digits, out->pump_prefix,
                                       sizeof(out->pump_prefix))) {
        pump_key(out->pump_prefix, u->keys[nkeys], sizeof(u->keys[0]));
        pump_at = ++nkeys;
    }
    if (l->share > 0) {
        snprintf(u->keys[nkeys], sizeof(u->keys[0]), "%s", STORE_SHARE_KEY);
        share_key = ++nkeys;
    }
    idem_keys(rq, u, &nkeys);
    snprintf(u->keys[nkeys++], sizeof(u->keys[0]), "%s", STORE_QUEUE_KEY);
    snprintf(u->keys[nkeys++], sizeof(u->keys[0]), "%s", STORE_HOLDS_KEY);
    store_msg_key(rq->mid, u->keys[nkeys++], sizeof(u->keys[0]));
    undo_key(rq->rid, u->keys[nkeys], sizeof(u->keys[0]));
    nkeys++;
    for (k = 0; k < nkeys; k++)
        args_str(a, u->keys[k]);
    args_str(a, "i");
    args_str(a, rq->vid);
    args_str(a, rq->vhash);
    args_int(a, rq->ttl_ms);
    args_int(a, rq->max_attempts);
    args_int(a, out->price_minor);
    args_int(a, (int64_t)n_used);
    args_int(a, (int64_t)rs->n_caps);
    args_int(a, cost_key);
    args_int(a, LIMITS_UNDO_TTL_MS);
    args_str(a, rq->scope);
    args_int(a, rq->at_ms);
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        args_int(a, (int64_t)r->algo + 1);
        args_int(a, key_of[i]);
        args_str(a, fields[i]);
        args_int(a, r->limit);
        args_int(a, r->window_ms);
        args_int(a, r->burst);
        args_mode(a, r);
    }
    for (i = 0; i < rs->n_caps && i < 8; i++) {
        if (rs->caps[i].per_key) {
            limits_cap_key_field(rs->caps[i].window_ms, rq->api_key, capf[i], sizeof(capf[i]));
            args_str(a, capf[i]);
            args_int(a, rs->caps[i].window_ms);
            args_int(a, rs->caps[i].max_minor);
            continue;
        }
        limits_cap_field(rs->caps[i].window_ms, a->num[a->n], sizeof(a->num[0]));
        args_str(a, a->num[a->n]);
        args_int(a, rs->caps[i].window_ms);
        args_int(a, rs->caps[i].max_minor);
    }
    args_int(a, l->capacity);
    args_int(a, LIMITS_HOLD_MS);
    args_str(a, rq->mid);
    args_str(a, rq->api_key);
    args_str(a, out->cost_caps);
    args_str(a, rq->phone);
    args_int(a, l->share);
    args_int(a, share_key);
    idem_args(a, rq, u);
    pump_args(a, &rs->pumping, pump_at, 0); /* last: issue.lua reads them from the end */
    snprintf(u->hold, sizeof(u->hold), "%s:%s", rq->mid, rq->rid);
    u->nkeys = nkeys;
    t0 = mono_ms(); /* before the call: Redis decides after this (rcache_deadline_ms) */
    rc = store_eval_idem(l->store, l->h_issue, nkeys, a->n, a->v, &rep, &maybe_ran, err);
    if (rc != OTP_OK) {
        if (maybe_ran)
            undo_queue(l, u);
        goto out;
    }
    if (idem_stopped(rep, &out->idem_taken, &out->rc, out->reason, &out->retry_ms))
        goto out;
    if (!issue_reply_ok(rep, n_used)) {
        snprintf(err, OTP_ERR_LEN, "limits: issue script gave %zu values (want %zu) or was abandoned", rep->n,
                 IR_RULES + n_used * IR_PER_RULE + IR_PUMP_N);
        undo_queue(l, u);
        rc = OTP_ESTORE;
        goto out;
    }
    issue_read(used, n_used, rep, out);
    /* Not on a replay clock (otpctl simulate): the deadlines are on ours. */
    if (l->rc != NULL && rq->at_ms == 0 && (out->rc == OTP_ELIMITED || out->rc == OTP_ELOCKED))
        cache_verdicts(l, gen, RCACHE_ISSUE, used, n_used, key_of, u->keys, fields, rep->ints + IR_RULES, t0,
                       mono_ms());
out:
    if (rc != OTP_OK || out->rc != OTP_OK)
        u->nkeys = 0; /* nothing taken that the caller could abandon */
    store_reply_free(rep);
    free(a);
    free(fields);
    rules_put(l, rs);
    return rc;
}

/* Reads verify.lua's reply into out (zeroed by the caller); wrong is the
 * wrong-guess rule, or NULL. OTP_ESTORE with detail in err when the reply
 * is not the script's, or is an abandoned call's. */
UNITTEST enum otp_rc verify_read(const struct cfg_rule *wrong, const struct store_reply *rep,
                                 struct limits_verify *out, char *err)
{
    const char *status;

    if (rep->n < VR_COUNT || (status = rep->strs[VR_STATUS]) == NULL || strcmp(status, "abandoned") == 0) {
        snprintf(err, OTP_ERR_LEN, "limits: verify script gave a bad reply");
        return OTP_ESTORE;
    }
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[VR_VID] ? rep->strs[VR_VID] : "");
    out->attempts_left = (int)rep->ints[VR_ATTEMPTS_LEFT];
    out->retry_ms = rep->ints[VR_WINDOW_LEFT];
    out->shadow_lock = rep->ints[VR_SHADOW_LOCK] == 1;
    if (strcmp(status, "ok") == 0)
        out->rc = OTP_OK;
    else if (strcmp(status, "wrong") == 0)
        out->rc = OTP_EBADCODE;
    else if (strcmp(status, "locked") == 0)
        out->rc = OTP_ELOCKED;
    else if (strcmp(status, "limited") == 0)
        out->rc = OTP_ELIMITED;
    else
        out->rc = OTP_ENOTFOUND;
    if (wrong != NULL && !wrong->shadow) {
        header_set(&out->header, wrong, wrong->limit - rep->ints[VR_WRONG], out->retry_ms);
        if (out->rc == OTP_ELOCKED)
            snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    }
    if (wrong != NULL && out->shadow_lock)
        snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    return OTP_OK;
}

/* Reads the verdicts of the verify rules (used, in the script's order)
 * after verify.lua's fixed values. A refusal names the enforced rule that
 * refuses longest, and its Retry-After is the longest wait; without a
 * wrong-guess rule, an answer's RateLimit fields are the tightest rule's. */
static void verify_rules_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                              struct limits_verify *out)
{
    const struct cfg_rule *why = NULL;
    int64_t why_reset = -1, best_remaining = INT64_MAX;
    size_t i;

    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        const long long *v = rep->ints + VR_COUNT + i * IR_PER_RULE;
        if (v[IR_RULE_OK] != 1 && r->shadow) {
            append_name(out->shadow, sizeof(out->shadow), r->name);
        } else if (v[IR_RULE_OK] != 1) {
            if (v[IR_RULE_RESET] > why_reset)
                why = r, why_reset = v[IR_RULE_RESET];
        } else if (!r->shadow && out->rc != OTP_ELIMITED && v[IR_RULE_REMAINING] < best_remaining &&
                   (best_remaining != INT64_MAX || out->header.name[0] == '\0')) {
            best_remaining = v[IR_RULE_REMAINING];
            header_set(&out->header, r, v[IR_RULE_REMAINING], v[IR_RULE_RESET]);
        }
    }
    if (out->rc == OTP_ELIMITED && why != NULL) {
        snprintf(out->reason, sizeof(out->reason), "%s", why->name);
        out->retry_ms = why_reset;
        header_set(&out->header, why, 0, why_reset);
    }
}

/*
 * Whether the verify.lua run read into out (verify_read) left an undo
 * record that limits_commit must delete. The script writes one (its
 * done()) exactly when the guess changed something: it met a live
 * verification (its id is in the reply: 'ok', 'wrong', or a 'locked' that
 * counted this guess), or a verify rule took (a verdict of 1 in the reply)
 * without the reply being 'limited' (a refusal takes nothing). 'none' and
 * an early 'locked' that took nothing write no record: nothing to abandon
 * and nothing to commit, so such a verify is one EVALSHA, not two. A
 * verdict of 1 that took nothing (no counter kind) errs on the side of a
 * commit. A replay of a recorded run returns its recorded reply, which
 * says the same.
 */
static int verify_recorded(const struct limits_verify *out, const struct store_reply *rep, size_t n_used)
{
    size_t i;

    if (out->rc == OTP_ELIMITED)
        return 0;
    if (out->vid[0] != '\0')
        return 1;
    for (i = 0; i < n_used; i++)
        if (rep->ints[VR_COUNT + i * IR_PER_RULE + IR_RULE_OK] == 1)
            return 1;
    return 0;
}

enum otp_rc limits_verify(struct limits *l, const struct limits_request *rq, const char *guess_hash,
                          int max_attempts, struct limits_verify *out, char *err)
{
    struct limits_rules *rs;
    const struct cfg_rule *wrong = NULL, *used[32] = {NULL};
    struct cfg_rule eff[33]; /* used rules with an override, and the wrong-guess rule's */
    int key_of[32];
    /* On the stack and not cleared (the frame is about 33 KB; an HTTP
     * worker's stack is the default 8 MB): each is read only as far as it
     * was written (a.n, ub.nkeys, fields[0..n_used)). Calloc'd, they cost
     * every verify 27 KB of clearing, and the worker arenas' heaps grew
     * and shrank around them (mprotect). */
    struct limits_args a;
    struct limits_undo ub, *u = &ub;
    struct store_reply *rep = NULL;
    char cerr[OTP_ERR_LEN];
    char wkey[LIMITS_KEY_LEN], wfield[LIMITS_KEY_LEN] = "", key[LIMITS_KEY_LEN], prefix[PHONE_MAX];
    char fields[32][LIMITS_KEY_LEN];
    size_t i, n_used = 0;
    int maybe_ran = 0, k, pump_at = 0;
    enum otp_rc rc;
    uint64_t gen;
    int64_t t0;

    memset(out, 0, sizeof(*out));
    a.n = 0;
    if (rq->idem != NULL)
        u = &out->undo; /* the caller commits it, with its answer */
    u->hold[0] = '\0';  /* a verify holds nothing (limits_commit, undo_op send it) */
    u->idem_at = 0;
    flush_first(l);
    gen = rcache_gen(l->rc); /* before the rules, as in limits_issue */
    rs = rules_get(l);
    for (i = 0; i < rs->n_rules; i++)
        if (rs->rules[i].algo == CFG_ALGO_WRONG_GUESS_CAP)
            wrong = &rs->rules[i];
    /* Its key holds phone (config_load), so its state is in the phone's
     * hash; a composite key (["phone", "api_key"]) gives each caller its
     * own count and lock. */
    if (wrong != NULL && !limits_rule_key(wrong, rq, wkey, sizeof(wkey), wfield, sizeof(wfield)))
        wrong = NULL;
    if (wrong != NULL)
        wrong = rule_eff(rs, wrong, wkey, wfield, &eff[32]);
    u->verify = 1;
    u->nkeys = 1;
    limits_key(CFG_KEY_PHONE, rq, u->keys[0], sizeof(u->keys[0]));
    for (i = 0; i < rs->n_rules && n_used < 32; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->on == CFG_ON_ISSUE || !limits_rule_key(r, rq, key, sizeof(key), fields[n_used], LIMITS_KEY_LEN))
            continue;
        r = rule_eff(rs, r, key, fields[n_used], &eff[n_used]);
        for (k = 0; k < u->nkeys && strcmp(u->keys[k], key) != 0; k++)
            ;
        if (k == u->nkeys) {
            /* config_load bounds rules' keys (never here); room stays for
             * the pump's, an Idempotency-Key's two and the undo key. */
            if (u->nkeys == LIMITS_KEYS_MAX - 3)
                continue;
            snprintf(u->keys[u->nkeys++], sizeof(u->keys[0]), "%s", key);
        }
        key_of[n_used] = k + 1;
        used[n_used++] = r;
    }
    if (rs->pumping.on && fraud_prefix(rq->phone, rs->pumping.prefix_digits, prefix, sizeof(prefix))) {
        pump_key(prefix, u->keys[u->nkeys], sizeof(u->keys[0]));
        pump_at = ++u->nkeys;
    }
    idem_keys(rq, u, &u->nkeys);
    undo_key(rq->rid, u->keys[u->nkeys], sizeof(u->keys[0]));
    u->nkeys++;
    for (k = 0; k < u->nkeys; k++)
        args_str(&a, u->keys[k]);
    args_str(&a, "v");
    args_str(&a, guess_hash);
    args_int(&a, max_attempts);
    args_str(&a, wrong ? wfield : "");
    args_int(&a, wrong ? wrong->limit : 0);
    args_int(&a, wrong ? wrong->window_ms : 1);
    args_str(&a, wrong && wrong->shadow ? "1" : "0");
    args_int(&a, LIMITS_UNDO_TTL_MS);
    args_str(&a, rq->scope);
    args_int(&a, (int64_t)n_used);
    args_int(&a, rq->at_ms);
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        args_int(&a, (int64_t)r->algo + 1);
        args_int(&a, key_of[i]);
        args_str(&a, fields[i]);
        args_int(&a, r->limit);
        args_int(&a, r->window_ms);
        args_int(&a, r->burst);
        args_mode(&a, r);
    }
    idem_args(&a, rq, u);
    pump_args(&a, &rs->pumping, pump_at, 1); /* last: verify.lua reads them from the end */
    t0 = mono_ms(); /* before the call (rcache_deadline_ms) */
    rc = store_eval_idem(l->store, l->h_verify, u->nkeys, a.n, a.v, &rep, &maybe_ran, err);
    if (rc != OTP_OK) {
        if (maybe_ran)
            undo_queue(l, u);
        goto out;
    }
    if (idem_stopped(rep, &out->idem_taken, &out->rc, out->reason, &out->retry_ms))
        goto out;
    if ((rc = verify_read(wrong, rep, out, err)) != OTP_OK || rep->n != VR_COUNT + n_used * IR_PER_RULE) {
        if (rc == OTP_OK)
            snprintf(err, OTP_ERR_LEN, "limits: verify script gave %zu values (want %zu)", rep->n,
                     VR_COUNT + n_used * IR_PER_RULE);
        rc = OTP_ESTORE;
        undo_queue(l, u);
        goto out;
    }
    verify_rules_read(used, n_used, rep, out);
    if (l->rc != NULL && rq->at_ms == 0 && out->rc == OTP_ELIMITED)
        cache_verdicts(l, gen, RCACHE_VERIFY, used, n_used, key_of, u->keys, fields, rep->ints + VR_COUNT, t0,
                       mono_ms());
    /* A lock: verify.lua counts no penalty for it. */
    if (l->rc != NULL && rq->at_ms == 0 && out->rc == OTP_ELOCKED && wrong != NULL && rcache_cacheable(wrong))
        cache_put(l, gen, RCACHE_VERIFY, wrong, 1, wkey, wfield, t0, t0, out->retry_ms, 0, 0);
    /* Answered: nobody will abandon it; a lost commit's record expires.
     * With an Idempotency-Key, the caller commits it with its answer. */
    if (!verify_recorded(out, rep, n_used))
        u->nkeys = 0;
    else if (rq->idem == NULL)
        limits_commit(l, u, NULL, 0, cerr);
out:
    if (rq->idem != NULL && (rc != OTP_OK || out->idem_taken || out->rc == OTP_ELIMITED))
        u->nkeys = 0; /* nothing claimed: nothing to commit or abandon */
    store_reply_free(rep);
    rules_put(l, rs);
    return rc;
}

enum otp_rc limits_cancel(struct limits *l, const struct limits_request *rq, char *vid, char *err)
{
    struct store_reply *rep = NULL;
    char key[LIMITS_KEY_LEN], undo[LIMITS_KEY_LEN];
    const char *args[11];
    enum otp_rc rc;
    int k;

    vid[0] = '\0';
    flush_first(l);
    limits_key(CFG_KEY_PHONE, rq, key, sizeof(key));
    undo_key(rq->rid, undo, sizeof(undo));
    /* verify.lua's op 'k' reads ARGV[1] and the scope field (ARGV[9]) only. */
    args[0] = key;
    args[1] = undo;
    args[2] = "k";
    for (k = 3; k < 10; k++)
        args[k] = "";
    args[10] = rq->scope;
    rc = store_eval(l->store, l->h_verify, 2, 11, args, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != 1 || rep->strs[0] == NULL || strlen(rep->strs[0]) >= LIMITS_ID_MAX) {
        snprintf(err, OTP_ERR_LEN, "limits: cancel gave a bad reply");
        rc = OTP_ESTORE;
        goto out;
    }
    snprintf(vid, LIMITS_ID_MAX, "%s", rep->strs[0]);
    rc = vid[0] ? OTP_OK : OTP_ENOTFOUND;
out:
    store_reply_free(rep);
    return rc;
}

struct limits_money {
    struct limits *l;
    struct store *store;
    int h_reserve, h_refund;
};

struct limits_money *limits_money_new(struct limits *l, struct store *s)
{
    struct limits_money *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->l = l;
    m->store = s;
    m->h_reserve = store_script(s, limits_reserve_lua);
    m->h_refund = store_script(s, limits_refund_lua);
    return m;
}

void limits_money_free(struct limits_money *m)
{
    free(m);
}

enum otp_rc limits_reserve(struct limits_money *m, const char *id, const char *owner, int need,
                           enum limits_use use, int64_t price_minor, int64_t issue_ms, struct limits_grant *out,
                           char *err)
{
    struct limits_rules *rs = rules_get(m->l);
    struct limits_args a = {0};
    struct store_reply *rep = NULL;
    char key[64];
    size_t i;
    enum otp_rc rc;

    /* reserve.lua's reply: {ok, idx, at_ms, retry_ms, cap}. */
    enum { R_OK, R_IDX, R_AT, R_RETRY, R_CAP, R_N };

    memset(out, 0, sizeof(*out));
    store_msg_key(id, key, sizeof(key));
    args_str(&a, "otp:cost");
    args_str(&a, key);
    args_int(&a, need);
    args_int(&a, price_minor);
    args_int(&a, issue_ms);
    args_int(&a, (int64_t)use);
    args_int(&a, (int64_t)rs->n_caps);
    for (i = 0; i < rs->n_caps; i++) {
        /* A caller's cap: reserve.lua names it for the message's caller. */
        if (rs->caps[i].per_key)
            snprintf(a.num[a.n], sizeof(a.num[0]), "k%lld", (long long)rs->caps[i].window_ms);
        else
            limits_cap_field(rs->caps[i].window_ms, a.num[a.n], sizeof(a.num[0]));
        args_str(&a, a.num[a.n]);
        args_int(&a, rs->caps[i].window_ms);
        args_int(&a, rs->caps[i].max_minor);
    }
    args_str(&a, owner);
    rc = store_eval(m->store, m->h_reserve, 2, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != R_N) {
        snprintf(err, OTP_ERR_LEN, "limits: reserve script gave %zu values, want %d", rep->n, (int)R_N);
        rc = OTP_ESTORE;
        goto out;
    }
    out->ok = rep->ints[R_OK] == 1;
    out->idx = (int)rep->ints[R_IDX];
    out->at_ms = rep->ints[R_AT];
    out->retry_ms = rep->ints[R_RETRY];
    if (!out->ok && rep->ints[R_CAP] >= 0 && (size_t)rep->ints[R_CAP] < rs->n_caps)
        out->cap_window_ms = rs->caps[rep->ints[R_CAP]].window_ms;
out:
    store_reply_free(rep);
    rules_put(m->l, rs);
    return rc;
}

enum otp_rc limits_refund_once(struct limits_money *m, const char *id, const char *owner, int idx,
                               int64_t price_minor, int64_t cost_ms, const char *windows, int *result,
                               int *anomalies, char *err)
{
    struct limits_args a = {0};
    struct store_reply *rep = NULL;
    char key[64];
    enum otp_rc rc;

    /* refund.lua's reply: {status, anomalies}. */
    enum { F_STATUS, F_ANOMALIES, F_N };

    *result = 0;
    *anomalies = 0;
    store_msg_key(id, key, sizeof(key));
    args_str(&a, "otp:cost");
    args_str(&a, key);
    args_int(&a, price_minor);
    args_int(&a, cost_ms);
    /* Not the caps in force now: the windows this money was counted in. */
    args_str(&a, windows != NULL ? windows : "");
    args_int(&a, idx);
    args_str(&a, owner);
    rc = store_eval(m->store, m->h_refund, 2, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != F_N) {
        snprintf(err, OTP_ERR_LEN, "limits: refund script gave %zu values, want %d", rep->n, (int)F_N);
        rc = OTP_ESTORE;
        goto out;
    }
    *result = (int)rep->ints[F_STATUS];
    *anomalies = (int)rep->ints[F_ANOMALIES];
out:
    store_reply_free(rep);
    return rc;
}
