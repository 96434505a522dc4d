/*
 * config_cost: the cost section: the price of one SMS per destination
 * prefix, the spend caps, the currency, and the price lookups the limits
 * make over them. The readers run at start-up and on SIGHUP; config_price_in
 * runs on every issue (a scan of at most 1000 prefixes).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"
#include "unittest.h"

const char *const cfg_cap_key_names[] = {"api_key", NULL};

/* cost.prices: {"+91": 20, "*": 500}, minor units per SMS. */
void cfg_price_list(struct cfg_ctx *x, json_t *prices, const char *path, struct cfg_price **out, size_t *n)
{
    json_t *v;
    const char *prefix;
    char p[128];

    if (!json_is_object(prices) || json_object_size(prices) > 1000) {
        cfg_error(x, path, "must be an object of at most 1000 prefixes");
        return;
    }
    if ((*out = cfg_calloc(json_object_size(prices) + 1, sizeof(**out))) == NULL) {
        cfg_error(x, path, "out of memory");
        return;
    }
    json_object_foreach(prices, prefix, v) {
        struct cfg_price *pr = &(*out)[*n];
        cfg_path(p, sizeof(p), path, prefix);
        if (strcmp(prefix, "*") != 0 && (strlen(prefix) > 16 || strlen(prefix) < 2 || prefix[0] != '+' ||
                                         strspn(prefix + 1, "0123456789") != strlen(prefix) - 1)) {
            cfg_error(x, p, "must be \"*\" or \"+\" and digits");
            continue;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
            cfg_error(x, p, "must be an integer price in minor units");
            continue;
        }
        snprintf(pr->prefix, sizeof(pr->prefix), "%s", prefix);
        pr->price_minor = json_integer_value(v);
        (*n)++;
    }
}

void cfg_prices(struct cfg_ctx *x, struct config *c, json_t *o)
{
    cfg_price_list(x, json_object_get(o, "prices"), "cost.prices", &c->limits.prices, &c->limits.n_prices);
}

/* cost.caps: [{"window": "1h", "max": 500000, "key": "api_key"}]. */
void cfg_caps(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *caps = json_object_get(o, "caps"), *v;
    size_t i;
    int kind = 0;
    char p[96];

    if (!json_is_array(caps) || json_array_size(caps) > 8) {
        cfg_error(x, "cost.caps", "must be an array of at most 8 caps");
        return;
    }
    if ((c->limits.caps = cfg_calloc(json_array_size(caps) + 1, sizeof(*c->limits.caps))) == NULL) {
        cfg_error(x, "cost.caps", "out of memory");
        return;
    }
    json_array_foreach(caps, i, v) {
        struct cfg_cap *cap = &c->limits.caps[c->limits.n_caps++];
        snprintf(p, sizeof(p), "cost.caps.%zu", i);
        if (!json_is_object(v)) {
            cfg_error(x, p, "must be an object");
            continue;
        }
        cfg_unknown(x, v, p, "cost.caps.*");
        cfg_dur(x, v, p, "window", 1, &cap->window_ms);
        cfg_int(x, v, p, "max", 1, 0, INT64_MAX / 4, &cap->max_minor);
        /* Absent: the fleet's one budget. "api_key": a budget per
         * caller, taken with the global ones (one caller cannot spend
         * the others' budget). */
        if (cfg_enum(x, v, p, "key", 0, cfg_cap_key_names, &kind))
            cap->per_key = 1;
    }
}

/* After cost's rows. */
void cfg_cost(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *prices = json_object_get(o, "prices");
    const char *cur = c->limits.currency;

    /* A metric label and the ledger's unit: ISO 4217's three letters. */
    if (cur[0] && (strlen(cur) != 3 || strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3))
        cfg_error(x, "cost.currency", "must be a currency code: three capital letters (ISO 4217)");

    /* A destination without a price would escape every cap: SMS pumping to
     * unpriced routes is the attack the caps exist for. */
    if (c->limits.n_caps > 0 && prices != NULL && json_object_get(prices, "*") == NULL)
        cfg_error(x, "cost.prices", "must have a \"*\" price for other destinations when cost.caps are set");
}

/* The price of one SMS to phone: the longest matching prefix, else "*",
 * else -1 when no price applies (no cost block). The product prices over
 * its limits section (config_price_in); tests and the fuzzer over a whole
 * config. */
UNITTEST __attribute__((unused)) int64_t config_price(const struct config *c, const char *phone)
{
    return config_price_in(c->limits.prices, c->limits.n_prices, phone);
}

int64_t config_price_in(const struct cfg_price *prices, size_t n_prices, const char *phone)
{
    size_t i, best_len = 0;
    int64_t best = -1;

    for (i = 0; i < n_prices; i++) {
        const struct cfg_price *p = &prices[i];
        size_t n = strlen(p->prefix);
        if (strcmp(p->prefix, "*") == 0) {
            if (best_len == 0)
                best = p->price_minor;
        } else if (strncmp(phone, p->prefix, n) == 0 && n > best_len) {
            best_len = n;
            best = p->price_minor;
        }
    }
    return best;
}
