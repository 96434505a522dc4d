/*
 * limits: the object that holds the rules in force and runs the scripts
 * (limits.h): its making, its reload on SIGHUP, the country of a region
 * and its counters. Made once at start; a reload or an admin change swaps
 * the rules snapshot (limits_rules.c) under running requests. The rest of
 * its work is in its rooms: limits_keys.c, limits_args.c, limits_issue.c,
 * limits_verify.c, limits_undo.c, limits_cache.c and limits_money.c.
 */
#include <math.h>
#include <stdlib.h>

#include "../base/log.h"
#include "headroom.lua.h"
#include "issue.lua.h"
#include "limits_int.h"
#include "verify.lua.h"

/* At most how many messages not yet ended one caller may hold: floor(share
 * x capacity), at least 1. The epsilon keeps 0.3 x 10 at 3 although 0.3 is
 * not exact in binary; capacity is at most 10^6 (config_load). */
static int64_t share_max(double share, int64_t capacity)
{
    int64_t m = (int64_t)floor((share > 0 ? share : 1) * (double)capacity + 1e-6);

    return m < 1 ? 1 : m > capacity ? capacity : m;
}

struct limits *limits_new(struct store *s, const struct limits_conf *c, const struct pacer_conf *pc)
{
    struct limits *l = calloc(1, sizeof(*l));

    if (l == NULL || (l->cur = limits_rules_new(c)) == NULL) {
        free(l);
        return NULL;
    }
    l->store = s;
    l->fleet.capacity = pc->capacity;
    /* Read at start, like capacity. A share that cannot bind below the
     * capacity is not tracked: no Redis work when the feature is off. */
    l->fleet.share = share_max(pc->share_per_key, l->fleet.capacity);
    if (l->fleet.share >= l->fleet.capacity)
        l->fleet.share = 0;
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
    limits_rules_free(l->cur);
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
    struct limits_rules *r = limits_rules_new(c), *old;

    if (r == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&l->mu);
    if (limits_rules_index(r, l->ov_raw, l->n_ov_raw) < 0) {
        pthread_mutex_unlock(&l->mu);
        limits_rules_free(r);
        return OTP_ENOMEM;
    }
    old = l->cur;
    l->cur = r;
    pthread_mutex_unlock(&l->mu);
    rcache_clear(l->rc); /* the rules changed: no refusal of the old ones is certain */
    limits_rules_put(l, old);
    return OTP_OK;
}

enum fraud_country limits_country(struct limits *l, const char *region)
{
    struct limits_rules *rs = limits_rules_get(l);
    enum fraud_country v = fraud_country(&rs->countries, region);

    limits_rules_put(l, rs);
    return v;
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
