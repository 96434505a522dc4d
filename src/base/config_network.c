/*
 * config_network: the providers as a network (docs/providers.md, "Routes
 * and failover"): providers (each a lane: an adapter as the provider
 * section's, its own pacing, prices and breaker), routes (which providers
 * a destination goes to, in order) and failover. The single provider
 * section is the network of one lane, "default", with the route "*".
 * Runs at start-up and on SIGHUP, never on a request path.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"
#include "phone.h"

/* A lane's own keys, read here; every other key of a provider is the
 * provider section's, read by its rows and cfg_provider. */
static const char *const lane_keys[] = {"rate", "capacity", "max_inflight", "timeout", "retry", "prices",
                                        "breaker", NULL};

/* A breaker's defaults: five failed calls in a row open it for 30 s. */
#define LANE_BREAKER_FAILURES 5
#define LANE_BREAKER_OPEN_MS 30000

static const struct cfg_row *provider_row(void)
{
    size_t i;

    for (i = 0; i < cfg_n_rows; i++)
        if (strcmp(cfg_rows[i].path, "provider") == 0)
            return &cfg_rows[i];
    return NULL;
}

/* A provider's name: 1 to 31 bytes of a-z, 0-9, '-' and '_' (it names Redis keys and metric labels). */
static int lane_name_ok(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n < ROUTE_NAME_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-_") == n;
}

/* The lane's pacing keys, defaulting to pacer.*'s. */
static void lane_pacing(struct cfg_ctx *x, json_t *o, const char *path, struct lane_conf *l)
{
    json_t *retry = json_object_get(o, "retry"), *breaker = json_object_get(o, "breaker");
    char p[128];
    int64_t v;

    if (cfg_int(x, o, path, "rate", 0, 1, 10000, &v))
        l->pacer.rate = (int)v;
    if (cfg_int(x, o, path, "capacity", 0, 1, 1000000, &v))
        l->pacer.capacity = (int)v;
    if (cfg_int(x, o, path, "max_inflight", 0, 1, 1024, &v))
        l->pacer.max_inflight = (int)v;
    if (cfg_dur(x, o, path, "timeout", 0, &v))
        l->pacer.timeout_ms = v;
    if (retry != NULL && !json_is_object(retry)) {
        cfg_error(x, cfg_path(p, sizeof(p), path, "retry"), "must be an object");
    } else if (retry != NULL) {
        cfg_path(p, sizeof(p), path, "retry");
        cfg_unknown(x, retry, p, "pacer.retry");
        if (cfg_int(x, retry, p, "max", 0, 0, 20, &v))
            l->pacer.retry_max = (int)v;
        if (cfg_dur(x, retry, p, "base", 0, &v))
            l->pacer.retry_base_ms = v;
    }
    l->breaker_failures = LANE_BREAKER_FAILURES;
    l->breaker_open_ms = LANE_BREAKER_OPEN_MS;
    if (breaker != NULL && !json_is_object(breaker)) {
        cfg_error(x, cfg_path(p, sizeof(p), path, "breaker"), "must be an object");
    } else if (breaker != NULL) {
        const char *const known[] = {"failures", "open", NULL};
        const char *k;
        json_t *m;
        size_t i;
        cfg_path(p, sizeof(p), path, "breaker");
        json_object_foreach(breaker, k, m) {
            for (i = 0; known[i] && strcmp(known[i], k) != 0; i++)
                ;
            if (known[i] == NULL) {
                char q[160];
                snprintf(q, sizeof(q), "%s.%s", p, k);
                cfg_error(x, q, "unknown key (have: failures, open)");
            }
        }
        if (cfg_int(x, breaker, p, "failures", 0, 1, 1000, &v))
            l->breaker_failures = (int)v;
        if (cfg_dur(x, breaker, p, "open", 0, &v)) {
            char q[160];
            if (v < 100 || v > 3600000)
                cfg_error(x, cfg_path(q, sizeof(q), p, "open"), "must be from 100ms to 1h");
            else
                l->breaker_open_ms = v;
        }
    }
    if (json_object_get(o, "prices") != NULL)
        cfg_price_list(x, json_object_get(o, "prices"), cfg_path(p, sizeof(p), path, "prices"), &l->prices,
                       &l->n_prices);
}

/* One named provider into l: its adapter through the provider section's
 * rows (read into c->provider, which is then handed over), then its lane
 * keys. */
static void lane_read(struct cfg_ctx *x, struct config *c, const char *name, json_t *o, struct lane_conf *l,
                      const struct provider_conf *fresh)
{
    char path[128];
    json_t *adapter;
    size_t i;

    snprintf(path, sizeof(path), "providers.%s", name);
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->pacer = c->pacer;
    if (!json_is_object(o)) {
        cfg_error(x, path, "must be an object");
        return;
    }
    if ((adapter = json_deep_copy(o)) == NULL) {
        cfg_error(x, path, "out of memory");
        return;
    }
    for (i = 0; lane_keys[i]; i++)
        json_object_del(adapter, lane_keys[i]);
    c->provider = *fresh;
    x->provider_path = path;
    cfg_read_section(x, c, provider_row(), adapter, path);
    x->provider_path = NULL;
    json_decref(adapter);
    l->provider = c->provider;
    c->provider = *fresh; /* the secrets are the lane's now */
    lane_pacing(x, o, path, l);
}

void cfg_providers(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *ps = json_object_get(root, "providers"), *o;
    struct provider_conf fresh = c->provider; /* the rows' defaults: the provider section is read after this */
    const char *name;

    if (!json_is_object(ps) || json_object_size(ps) < 1 || json_object_size(ps) > CFG_LANES_MAX) {
        cfg_error(x, "providers", "must be an object of 1 to %d providers by name", CFG_LANES_MAX);
        return;
    }
    c->network.named = 1;
    json_object_foreach(ps, name, o) {
        char p[128];
        if (!lane_name_ok(name)) {
            cfg_error(x, cfg_path(p, sizeof(p), "providers", name),
                      "a provider's name must be 1 to 31 bytes of a-z, 0-9, '-' and '_'");
            continue;
        }
        lane_read(x, c, name, o, &c->network.lanes[c->network.n_lanes++], &fresh);
    }
}

/* routes: [{"match": "IN", "providers": ["local-kannel", "twilio"]}, ...]. */
void cfg_routes(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *rs = json_object_get(root, "routes"), *r;
    size_t i, j;

    if (!json_is_array(rs) || json_array_size(rs) < 1 || json_array_size(rs) > ROUTES_MAX) {
        cfg_error(x, "routes", "must be a list of 1 to %d routes", ROUTES_MAX);
        return;
    }
    json_array_foreach(rs, i, r) {
        struct route *rt = &c->network.routes[c->network.n_routes];
        json_t *m = json_object_get(r, "match"), *ps = json_object_get(r, "providers"), *pv;
        char p[96], why[96] = "";
        const char *k;
        json_t *v;
        snprintf(p, sizeof(p), "routes.%zu", i);
        if (!json_is_object(r)) {
            cfg_error(x, p, "must be an object: {\"match\": ..., \"providers\": [...]}");
            continue;
        }
        json_object_foreach(r, k, v) {
            if (strcmp(k, "match") != 0 && strcmp(k, "providers") != 0) {
                char q[128];
                cfg_error(x, cfg_path(q, sizeof(q), p, k), "unknown key (have: match, providers)");
            }
        }
        if (!json_is_string(m)) {
            char q[128];
            cfg_error(x, cfg_path(q, sizeof(q), p, "match"),
                      "is required: a region (\"IN\"), a prefix (\"+4474\") or \"*\"");
            continue;
        }
        if (route_parse_match(json_string_value(m), rt, why, sizeof(why)) != 0 ||
            (rt->kind == ROUTE_REGION && !phone_region_known(rt->match))) {
            char q[128];
            cfg_error(x, cfg_path(q, sizeof(q), p, "match"), "%s",
                      why[0] != '\0' ? why : "names no region libphonenumber knows");
            continue;
        }
        for (j = 0; j < c->network.n_routes; j++)
            if (strcmp(c->network.routes[j].match, rt->match) == 0)
                break;
        if (j < c->network.n_routes) {
            char q[128];
            cfg_error(x, cfg_path(q, sizeof(q), p, "match"), "\"%s\" is routes.%zu's match already", rt->match, j);
            continue;
        }
        if (!json_is_array(ps) || json_array_size(ps) < 1 || json_array_size(ps) > ROUTE_PROVIDERS_MAX) {
            char q[128];
            cfg_error(x, cfg_path(q, sizeof(q), p, "providers"), "must list 1 to %d providers, in the order to try them",
                      ROUTE_PROVIDERS_MAX);
            continue;
        }
        rt->n_providers = 0;
        json_array_foreach(ps, j, pv) {
            if (!json_is_string(pv) || json_string_length(pv) >= ROUTE_NAME_MAX) {
                char q[128];
                snprintf(q, sizeof(q), "%s.providers.%zu", p, j);
                cfg_error(x, q, "must be a provider's name");
                break;
            }
            snprintf(rt->providers[rt->n_providers++], ROUTE_NAME_MAX, "%s", json_string_value(pv));
        }
        c->network.n_routes++;
    }
}

/* The lane named name, or -1. */
static int lane_index(const struct network_conf *n, const char *name)
{
    size_t i;

    for (i = 0; i < n->n_lanes; i++)
        if (strcmp(n->lanes[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* "local-kannel, twilio": the providers' names, for an error. */
static const char *lane_names(const struct network_conf *n, char *out, size_t cap)
{
    size_t i, k = 0;

    out[0] = '\0';
    for (i = 0; i < n->n_lanes && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? ", " : "", n->lanes[i].name);
    return out;
}

/* The one route of a network of one provider: "*" to it. */
static void route_everything(struct network_conf *n)
{
    n->n_routes = 1;
    snprintf(n->routes[0].match, sizeof(n->routes[0].match), "*");
    n->routes[0].kind = ROUTE_ANY;
    snprintf(n->routes[0].providers[0], ROUTE_NAME_MAX, "%s", n->lanes[0].name);
    n->routes[0].n_providers = 1;
}

/* After every row: provider or providers (one of them), the single
 * provider as the lane "default", each route's providers known and no
 * provider twice in one route, and prices that can price what the caps
 * count. */
void cfg_network(struct cfg_ctx *x, struct config *c, json_t *root)
{
    struct network_conf *n = &c->network;
    int has_one = json_object_get(root, "provider") != NULL, has_many = json_object_get(root, "providers") != NULL;
    size_t i;
    int j, k;

    if (has_one && has_many) {
        cfg_error(x, "providers", "provider and providers: give one (provider is the network of one)");
        return;
    }
    if (!has_one && !has_many) {
        cfg_error(x, "provider", "is required (or providers, with routes)");
        return;
    }
    if (has_one) {
        if (json_object_get(root, "routes") != NULL)
            cfg_error(x, "routes", "needs providers: the single provider takes every destination");
        n->named = 0;
        n->n_lanes = 1;
        snprintf(n->lanes[0].name, sizeof(n->lanes[0].name), "%s", CFG_LANE_DEFAULT);
        n->lanes[0].provider = c->provider; /* borrowed: c->provider owns its secrets */
        n->lanes[0].pacer = c->pacer;
        n->lanes[0].breaker_failures = LANE_BREAKER_FAILURES;
        n->lanes[0].breaker_open_ms = LANE_BREAKER_OPEN_MS;
        route_everything(n);
        return;
    }
    if (n->n_lanes == 0)
        return; /* each one was refused, and said why */
    if (json_object_get(root, "routes") == NULL) {
        if (n->n_lanes != 1) {
            cfg_error(x, "routes", "is required with more than one provider");
            return;
        }
        route_everything(n);
    }
    for (i = 0; i < n->n_routes; i++) {
        const struct route *rt = &n->routes[i];
        for (j = 0; j < rt->n_providers; j++) {
            char p[96], have[CFG_LANES_MAX * ROUTE_NAME_MAX];
            snprintf(p, sizeof(p), "routes.%zu.providers.%d", i, j);
            if (lane_index(n, rt->providers[j]) < 0)
                cfg_error(x, p, "names no provider (have: %s)", lane_names(n, have, sizeof(have)));
            for (k = 0; k < j; k++)
                if (strcmp(rt->providers[k], rt->providers[j]) == 0)
                    cfg_error(x, p, "names %s twice", rt->providers[j]);
        }
    }
    for (i = 1; i < n->n_lanes; i++)
        if (n->lanes[i].provider.callback_url[0] != '\0') {
            char p[128];
            snprintf(p, sizeof(p), "providers.%s.callback_url", n->lanes[i].name);
            cfg_error(x, p, "delivery reports are the first provider's only (%s): leave it out here",
                      n->lanes[0].name);
        }
    for (i = 0; i < n->n_lanes; i++) {
        const struct lane_conf *l = &n->lanes[i];
        size_t k2;
        for (k2 = 0; l->prices != NULL && k2 < l->n_prices && strcmp(l->prices[k2].prefix, "*") != 0; k2++)
            ;
        if (l->prices != NULL && c->limits.n_caps > 0 && k2 == l->n_prices) {
            char p[128];
            snprintf(p, sizeof(p), "providers.%s.prices", l->name);
            cfg_error(x, p, "needs a \"*\" price: the cost caps count every message (cost.caps)");
        }
    }
}
