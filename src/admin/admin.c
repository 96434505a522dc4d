/*
 * admin: the module's object: made once at start-up with admin.lua
 * registered, the limits' rules it checks overrides and unlocks against
 * (swapped on SIGHUP), and its counters for /metrics. The rest lives in
 * admin_net.c (addresses), admin_body.c (bodies into rows), admin_rows.c
 * (the rows in Redis and the ledger) and admin_snap.c (the snapshot every
 * instance refreshes, and block matching). Runs at start-up, on SIGHUP,
 * per /metrics scrape (admin_stats), and per admin request that reads the
 * rules (a copy of a few rules).
 */
#include <stdlib.h>
#include <string.h>

#include "admin_int.h"
#include "admin.lua.h"

static struct cfg_rule *rules_copy(const struct cfg_rule *rules, size_t n)
{
    struct cfg_rule *r = calloc(n + 1, sizeof(*r));

    if (r != NULL && n > 0)
        memcpy(r, rules, n * sizeof(*r));
    return r;
}

struct admin *admin_new(struct store *s, struct ledger *lg, const struct limits_conf *c)
{
    struct admin *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    if ((a->rules = rules_copy(c->rules, c->n_rules)) == NULL ||
        (a->snap = calloc(1, sizeof(*a->snap))) == NULL) {
        free(a->rules);
        free(a);
        return NULL;
    }
    a->snap->refs = 1;
    a->read_ms = FRESH_NEVER;
    a->n_rules = c->n_rules;
    a->store = s;
    a->ledger = lg;
    a->h = store_script(s, admin_admin_lua);
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    admin_snap_free(a->snap);
    free(a->rules);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

enum otp_rc admin_reload(struct admin *a, const struct limits_conf *c)
{
    struct cfg_rule *r = rules_copy(c->rules, c->n_rules), *old;

    if (r == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&a->mu);
    old = a->rules;
    a->rules = r;
    a->n_rules = c->n_rules;
    pthread_mutex_unlock(&a->mu);
    free(old);
    return OTP_OK;
}

struct cfg_rule *admin_rules_copy(struct admin *a, size_t *n)
{
    struct cfg_rule *r;

    pthread_mutex_lock(&a->mu);
    *n = a->n_rules;
    r = rules_copy(a->rules, a->n_rules);
    pthread_mutex_unlock(&a->mu);
    return r;
}

void admin_stats(struct admin *a, struct admin_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}
