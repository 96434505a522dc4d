/*
 * limits_rules: the rules snapshot and the admin overrides matched into it.
 * A snapshot is immutable and reference-counted, so SIGHUP (limits_reload)
 * and an admin change (limits_overrides_set) swap it under running
 * requests; each request takes one reference (a lock, a counter) and looks
 * an override up by binary search, cheap next to its Redis round trip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "limits_int.h"

void *limits_dup(const void *src, size_t n, size_t size)
{
    void *p = calloc(n + 1, size);

    if (p != NULL && n > 0)
        memcpy(p, src, n * size);
    return p;
}

void limits_rules_free(struct limits_rules *r)
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

struct limits_rules *limits_rules_new(const struct limits_conf *c)
{
    struct limits_rules *r = calloc(1, sizeof(*r));
    size_t i, j;

    if (r == NULL)
        return NULL;
    r->refs = 1;
    r->rules = limits_dup(c->rules, c->n_rules, sizeof(*c->rules));
    r->prices = limits_dup(c->prices, c->n_prices, sizeof(*c->prices));
    r->caps = calloc(c->n_caps + 1, sizeof(*c->caps));
    if (!r->rules || !r->prices || !r->caps) {
        limits_rules_free(r);
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

/* The request whose values override o names, into rq (ip: room for its
 * client_ip's key). */
static void ov_request(const struct limits_override *o, struct limits_request *rq, char *ip, size_t ip_cap)
{
    memset(rq, 0, sizeof(*rq));
    rq->phone = o->values[CFG_KEY_PHONE][0] ? o->values[CFG_KEY_PHONE] : o->values[CFG_KEY_PHONE_PREFIX];
    rq->device_id = o->values[CFG_KEY_DEVICE];
    rq->ip_key = limits_ip_key(o->values[CFG_KEY_CLIENT_IP], ip, ip_cap) == OTP_OK ? ip : NULL;
    rq->api_key = o->values[CFG_KEY_API_KEY];
    rq->purpose = o->values[CFG_KEY_PURPOSE];
    snprintf(rq->region, sizeof(rq->region), "%s", o->values[CFG_KEY_REGION]);
}

/* Matches the overrides raw[0..n-1] to r's rules: each becomes the state
 * it applies to. An override whose rule is gone (a reload) is skipped.
 * -1 when out of memory. */
int limits_rules_index(struct limits_rules *r, const struct limits_override *raw, size_t n)
{
    char key[LIMITS_KEY_LEN], field[LIMITS_KEY_LEN], m[2 * LIMITS_KEY_LEN + CFG_NAME_MAX], ip[LIMITS_IP_KEY_MAX];
    size_t i, j;

    if ((r->ov = calloc(n + 1, sizeof(*r->ov))) == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        const struct limits_override *o = &raw[i];
        struct limits_request rq;
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
        ov_request(o, &rq, ip, sizeof(ip));
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

const struct cfg_rule *limits_rule_eff(const struct limits_rules *rs, const struct cfg_rule *r, const char *key,
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

struct limits_rules *limits_rules_get(struct limits *l)
{
    struct limits_rules *r;

    pthread_mutex_lock(&l->mu);
    r = l->cur;
    r->refs++;
    pthread_mutex_unlock(&l->mu);
    return r;
}

void limits_rules_put(struct limits *l, struct limits_rules *r)
{
    int last;

    pthread_mutex_lock(&l->mu);
    last = --r->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (last)
        limits_rules_free(r);
}

/* A copy of old's rules, prices and caps (and everything else but the
 * overrides, which the caller matches anew); NULL when out of memory. */
static struct limits_rules *rules_copy(const struct limits_rules *old)
{
    struct limits_rules *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    *r = *old;
    r->refs = 1;
    r->ov = NULL;
    r->n_ov = 0;
    r->rules = limits_dup(old->rules, old->n_rules, sizeof(*old->rules));
    r->prices = limits_dup(old->prices, old->n_prices, sizeof(*old->prices));
    r->caps = limits_dup(old->caps, old->n_caps, sizeof(*old->caps));
    if (!r->rules || !r->prices || !r->caps) {
        limits_rules_free(r);
        return NULL;
    }
    return r;
}

enum otp_rc limits_overrides_set(struct limits *l, const struct limits_override *ov, size_t n)
{
    struct limits_override *raw = limits_dup(ov, n, sizeof(*ov)), *old_raw;
    struct limits_rules *r = NULL, *old;

    if (raw == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&l->mu);
    old = l->cur;
    /* Everything of the rules in force (countries, pumping, ...) but the
     * overrides, which are rebuilt. */
    if ((r = rules_copy(old)) == NULL || limits_rules_index(r, raw, n) < 0) {
        pthread_mutex_unlock(&l->mu);
        limits_rules_free(r);
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
    limits_rules_put(l, old);
    return OTP_OK;
}
