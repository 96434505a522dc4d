/*
 * lanes: one pacer per provider, and the routes between them (lanes.h).
 * The routes are read under a lock held for a scan of at most ROUTES_MAX
 * routes, by an issue (lanes_pick) and by a pacer failing a message over
 * (lanes_next); SIGHUP swaps them. Nothing here calls Redis.
 */
#include "lanes.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/phone.h"
#include "../provider/provider.h"
#include "queue.h"

struct lanes {
    const struct network_conf *conf;
    struct provider *providers[CFG_LANES_MAX];
    struct pacer *pacers[CFG_LANES_MAX];
    size_t n;
    pthread_mutex_t mu; /* guards the routes below */
    struct route routes[ROUTES_MAX];
    size_t n_routes;
    int max_providers;
    double report_min_life; /* failover.report_min_life */
    int64_t otp_ttl_ms;     /* otp.ttl */
};

static int lanes_index(const struct lanes *ls, const char *name)
{
    size_t i;

    for (i = 0; i < ls->n; i++)
        if (strcmp(ls->conf->lanes[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The route of e164, copied into *out under mu: 0, or -1 when none covers it. */
static int lanes_route(struct lanes *ls, const char *e164, struct route *out, int *max_providers)
{
    struct phone_info pi;
    const struct route *r;
    int cc_digits;

    memset(&pi, 0, sizeof(pi));
    phone_parse(e164, &pi); /* the region and code are known for any number an issue took */
    cc_digits = pi.country_code >= 100 ? 3 : pi.country_code >= 10 ? 2 : 1;
    pthread_mutex_lock(&ls->mu);
    r = route_match(ls->routes, ls->n_routes, e164, pi.region, cc_digits);
    if (r != NULL)
        *out = *r;
    *max_providers = ls->max_providers;
    pthread_mutex_unlock(&ls->mu);
    return r ? 0 : -1;
}

/* 1 when name is one of tried ("a,b"). */
static int lanes_tried(const char *tried, const char *name)
{
    size_t n = strlen(name);
    const char *p = tried;

    while ((p = strstr(p, name)) != NULL) {
        if ((p == tried || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p += n;
    }
    return 0;
}

/* struct pacer_failover's next: the route's next provider it has not gone
 * to, healthy now, while fewer than max_providers have had it. */
static struct pacer *lanes_next(void *ctx, const char *to, const char *tried)
{
    struct lanes *ls = ctx;
    struct route rt;
    int i, max, count = 1;
    const char *c;

    if (lanes_route(ls, to, &rt, &max) != 0)
        return NULL;
    for (c = tried; *c; c++)
        count += *c == ',';
    if (count >= max)
        return NULL;
    for (i = 0; i < rt.n_providers; i++) {
        int k = lanes_index(ls, rt.providers[i]);
        if (k >= 0 && !lanes_tried(tried, rt.providers[i]) && pacer_healthy(ls->pacers[k]))
            return ls->pacers[k];
    }
    return NULL;
}

struct lanes *lanes_new(const struct network_conf *n, const struct pacer_site *site, struct store *s,
                        struct ledger *l, const struct pacer_money *money, char *err)
{
    struct lanes *ls = calloc(1, sizeof(*ls));
    struct pacer_failover fo;
    size_t i;

    if (ls == NULL) {
        snprintf(err, OTP_ERR_LEN, "lanes: out of memory");
        return NULL;
    }
    ls->conf = n;
    ls->otp_ttl_ms = site->otp_ttl_ms;
    pthread_mutex_init(&ls->mu, NULL);
    lanes_set_routes(ls, n);
    fo = (struct pacer_failover){lanes_next, ls};
    for (i = 0; i < n->n_lanes; i++) {
        const struct lane_conf *lc = &n->lanes[i];
        struct pacer_site ps = *site;
        ps.lane = lc->name;
        ps.named = n->named;
        ps.lane_prices = lc->prices;
        ps.n_lane_prices = lc->n_prices;
        /* A breaker stops a provider's queue so its messages go to the next
         * one; a network of one has no next: it retries with backoff, as
         * the single provider always did. */
        ps.breaker_failures = n->n_lanes > 1 ? lc->breaker_failures : INT_MAX;
        ps.breaker_open_ms = lc->breaker_open_ms;
        if ((ls->providers[i] = provider_new(&lc->provider, err)) == NULL ||
            (ls->pacers[i] = pacer_new(&lc->pacer, &ps, s, ls->providers[i], l, money, err)) == NULL) {
            provider_free(ls->providers[i]);
            ls->providers[i] = NULL;
            lanes_free(ls);
            return NULL;
        }
        ls->n++;
        if (n->n_lanes > 1)
            pacer_set_failover(ls->pacers[i], &fo);
    }
    return ls;
}

void lanes_free(struct lanes *ls)
{
    size_t i;

    if (ls == NULL)
        return;
    for (i = 0; i < ls->n; i++) {
        pacer_free(ls->pacers[i]);
        provider_free(ls->providers[i]);
    }
    pthread_mutex_destroy(&ls->mu);
    free(ls);
}

size_t lanes_count(const struct lanes *ls)
{
    return ls->n;
}

struct pacer *lanes_pacer(struct lanes *ls, size_t i)
{
    return i < ls->n ? ls->pacers[i] : NULL;
}

const char *lanes_adapter(const struct lanes *ls, size_t i)
{
    return i < ls->n ? ls->providers[i]->ops->name : "";
}

int lanes_pick(struct lanes *ls, const char *e164, struct lanes_pick *out)
{
    struct route rt;
    int i, max, first = -1;

    if (lanes_route(ls, e164, &rt, &max) != 0)
        return -1;
    for (i = 0; i < rt.n_providers; i++) {
        int k = lanes_index(ls, rt.providers[i]);
        if (k < 0)
            continue;
        if (first < 0)
            first = k;
        if (pacer_healthy(ls->pacers[k])) {
            first = k;
            break;
        }
    }
    if (first < 0)
        return -1;
    out->pacer = ls->pacers[first];
    out->lane = &ls->conf->lanes[first];
    return 0;
}

void lanes_set_routes(struct lanes *ls, const struct network_conf *n)
{
    pthread_mutex_lock(&ls->mu);
    memcpy(ls->routes, n->routes, n->n_routes * sizeof(n->routes[0]));
    ls->n_routes = n->n_routes;
    ls->max_providers = n->max_providers > 0 ? n->max_providers : 1;
    ls->report_min_life = n->report_min_life;
    pthread_mutex_unlock(&ls->mu);
}

/* Moves what stream (no provider of this config reads it) holds to the
 * first provider of each message's route; *moved, *left counted. */
static enum otp_rc lanes_adopt_stream(struct lanes *ls, const char *stream, int *moved, int *left, char *err)
{
    char cursor[QUEUE_EID_MAX] = "0-0";
    struct queue_entry es[QUEUE_PEEK_MAX];
    struct pacer *p0 = ls->pacers[0];
    enum otp_rc rc;
    int n, i, result;

    do {
        if ((rc = queue_peek(pacer_queue(p0), stream, cursor, es, &n, err)) != OTP_OK)
            return rc;
        for (i = 0; i < n; i++) {
            struct lanes_pick pk;
            if (lanes_pick(ls, es[i].to, &pk) != 0) {
                pk.pacer = ls->pacers[0]; /* no route covers it any more: the first provider ends or sends it */
                pk.lane = &ls->conf->lanes[0];
            }
            if ((rc = queue_adopt(pacer_queue(p0), stream, &es[i], pacer_stream(pk.pacer), pk.lane->name,
                                  pk.lane->pacer.takeover_ms, &result, err)) != OTP_OK)
                return rc;
            *moved += result == 1;
            *left += result == 3;
            if (result == 1)
                pacer_wake(pk.pacer);
        }
    } while (n == QUEUE_PEEK_MAX);
    return OTP_OK;
}

enum otp_rc lanes_adopt(struct lanes *ls, char *err)
{
    char orphans[QUEUE_LANES_MAX][QUEUE_KEY_MAX];
    const char *mine[CFG_LANES_MAX];
    enum otp_rc rc;
    size_t i;
    int n = 0, k;

    for (i = 0; i < ls->n; i++)
        mine[i] = pacer_stream(ls->pacers[i]);
    if ((rc = queue_orphans(pacer_queue(ls->pacers[0]), mine, (int)ls->n, orphans, QUEUE_LANES_MAX, &n, err)) !=
        OTP_OK)
        return rc;
    for (k = 0; k < n && rc == OTP_OK; k++) {
        int moved = 0, left = 0;
        rc = lanes_adopt_stream(ls, orphans[k], &moved, &left, err);
        if (moved > 0 || left > 0)
            log_event(left > 0 ? LOG_WARN : LOG_INFO, "lanes.adopted",
                      LOG_FIELDS(LOG_STR("stream", orphans[k]), LOG_INT("moved", moved), LOG_INT("left", left)),
                      "%s: no provider of this config reads it; %d messages moved to their routes' providers%s",
                      orphans[k], moved, left > 0 ? ", some held by a live instance: moved once it is silent" : "");
    }
    return rc;
}

enum otp_rc lanes_start(struct lanes *ls, const struct pacer_render *render, char *err)
{
    size_t i;
    enum otp_rc rc = OTP_OK;

    if (lanes_adopt(ls, err) != OTP_OK)
        log_msg(LOG_ERROR, "lanes: the streams of providers no longer configured were not checked (%s): the next "
                "start or tick tries again", err);

    for (i = 0; i < ls->n && rc == OTP_OK; i++)
        rc = pacer_start(ls->pacers[i], render, err);
    return rc;
}

void lanes_stop(struct lanes *ls, int64_t grace_ms)
{
    int64_t deadline = clock_mono_ns() / 1000000 + grace_ms;
    size_t i;

    for (i = 0; i < ls->n; i++) {
        int64_t left = deadline - (int64_t)(clock_mono_ns() / 1000000);
        pacer_stop(ls->pacers[i], left > 0 ? left : 0);
    }
}

void lanes_set_code_ttl(struct lanes *ls, int64_t otp_ttl_ms)
{
    size_t i;

    pthread_mutex_lock(&ls->mu);
    ls->otp_ttl_ms = otp_ttl_ms;
    pthread_mutex_unlock(&ls->mu);
    for (i = 0; i < ls->n; i++)
        pacer_set_code_ttl(ls->pacers[i], otp_ttl_ms);
}

int lanes_cancel(struct lanes *ls, const char *vid)
{
    size_t i;
    int n = 0;

    for (i = 0; i < ls->n; i++)
        n += pacer_cancel(ls->pacers[i], vid);
    return n;
}

void lanes_stats(struct lanes *ls, struct pacer_stats *out)
{
    size_t i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < ls->n; i++) {
        struct pacer_stats st;
        pacer_stats(ls->pacers[i], &st);
        pacer_stats_add(out, &st);
    }
}

/* A failed report of a sent message (out: moved 2): queued again on the
 * route's next provider, with the same code; 1 done (*next names it), 0
 * none left (or it changed meanwhile), -1 Redis failed. */
static int lanes_report_again(struct lanes *ls, const char *id, const struct queue_report_out *out,
                              const char **next, char *err)
{
    char tried[QUEUE_TRIED_MAX + ROUTE_NAME_MAX], attempt[64], detail[96];
    const char *from = out->provider[0] ? out->provider : ls->conf->lanes[0].name;
    struct pacer *to;
    int queued = 0;

    snprintf(tried, sizeof(tried), "%s%s%s", out->tried, out->tried[0] ? "," : "", from);
    if ((to = lanes_next(ls, out->to, tried)) == NULL)
        return 0;
    snprintf(attempt, sizeof(attempt), "%s:undelivered", from);
    snprintf(detail, sizeof(detail), "report failed at %s: again on %s", from, pacer_lane(to));
    if (queue_again(pacer_queue(to), id, pacer_lane(to), attempt, detail, &queued, err) != OTP_OK)
        return -1;
    if (queued) {
        *next = pacer_lane(to);
        pacer_wake(to);
    }
    return queued;
}

enum otp_rc lanes_report(struct lanes *ls, const char *id, enum msg_state to, int *moved, const char **again,
                         char *err)
{
    struct queue_report_out out;
    int64_t min_life_ms;
    enum otp_rc rc;
    int k, r;

    *again = NULL;
    pthread_mutex_lock(&ls->mu);
    min_life_ms = ls->n > 1 ? (int64_t)(ls->report_min_life * (double)ls->otp_ttl_ms) : -1;
    pthread_mutex_unlock(&ls->mu);
    if ((rc = pacer_report(ls->pacers[0], id, to, min_life_ms, &out, err)) != OTP_OK)
        return rc;
    if (out.moved == 2) {
        /* Its delivery failed with life left: the next provider, else failed as reported. */
        if ((r = lanes_report_again(ls, id, &out, again, err)) < 0)
            return OTP_ESTORE;
        if (r == 0 && (rc = pacer_report(ls->pacers[0], id, to, -1, &out, err)) != OTP_OK)
            return rc;
    }
    *moved = *again != NULL || out.moved == 1;
    if (*moved && (k = lanes_index(ls, out.provider[0] ? out.provider : ls->conf->lanes[0].name)) >= 0) {
        pacer_count_report(ls->pacers[k], to);
        if (*again != NULL)
            pacer_count_report_again(ls->pacers[k]);
    }
    return OTP_OK;
}

int lanes_full(struct lanes *ls)
{
    size_t i;

    for (i = 0; i < ls->n; i++)
        if (!pacer_full(ls->pacers[i]))
            return 0;
    return 1;
}

void lanes_metrics(struct lanes *ls, struct metrics_text *t)
{
    struct pacer_stats sum;
    int64_t capacity = 0;
    size_t i;

    lanes_stats(ls, &sum);
    for (i = 0; i < ls->n; i++)
        capacity += ls->conf->lanes[i].pacer.capacity;
    pacer_metrics_sum(ls->pacers[0], &sum, capacity, t);
    pacer_metrics_lanes(ls->pacers, ls->n, t);
}
