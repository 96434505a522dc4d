/*
 * store: Redis calls for every issue and verify request, so a hot path: one
 * EVALSHA per request, on a pooled connection, under a mutex held only to
 * take or give back a connection. A broken connection is dropped, never
 * reused; the pool refills by connecting again.
 */
#include "store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"

#define STORE_POOL_MAX 64
#define STORE_SCRIPTS_MAX 16 /* 7 in use: issue, verify, refund, reserve, money refund, two of idem */
#define STORE_ARGS_MAX 400

struct store_script {
    const char *src;
    char sha[41]; /* "" until loaded once */
};

struct store {
    struct store_opts o;
    char *host;
    char *password;
    char sentinel_hosts[STORE_SENTINELS_MAX][256];
    int sentinel_ports[STORE_SENTINELS_MAX];
    char master[64];
    pthread_mutex_t mu; /* guards everything below */
    redisContext *idle[STORE_POOL_MAX];
    size_t n_idle;
    struct store_script scripts[STORE_SCRIPTS_MAX];
    int n_scripts;
    int failures;          /* consecutive */
    uint64_t open_until_ns; /* breaker open while now < this; 0 when closed */
    int probing;           /* 1 while the one half-open probe runs */
    struct store_stats stats;
    struct store_redis_conf conf; /* the last CONFIG GET check */
    int conf_relog; /* 1: log a risky setting at the next check (start, after a broken connection) */
};

struct store *store_new(const struct store_opts *o)
{
    struct store *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->o = *o;
    s->host = strdup(o->host);
    s->password = o->password ? strdup(o->password) : NULL;
    if (s->host == NULL || (o->password && s->password == NULL)) {
        store_free(s);
        return NULL;
    }
    s->o.host = s->host;
    s->o.password = s->password;
    if (o->n_sentinels > STORE_SENTINELS_MAX)
        s->o.n_sentinels = STORE_SENTINELS_MAX;
    for (size_t i = 0; i < s->o.n_sentinels; i++) {
        snprintf(s->sentinel_hosts[i], sizeof(s->sentinel_hosts[i]), "%s", o->sentinel_hosts[i]);
        s->sentinel_ports[i] = o->sentinel_ports[i];
    }
    snprintf(s->master, sizeof(s->master), "%s", o->master ? o->master : "");
    s->o.sentinel_hosts = (const char(*)[256])s->sentinel_hosts; /* our copies, not the caller's */
    s->o.sentinel_ports = s->sentinel_ports;
    s->o.master = s->master;
    s->conf_relog = 1;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void store_free(struct store *s)
{
    size_t i;

    if (s == NULL)
        return;
    for (i = 0; i < s->n_idle; i++)
        redisFree(s->idle[i]);
    pthread_mutex_destroy(&s->mu);
    free(s->host);
    free(s->password);
    free(s);
}

int store_script(struct store *s, const char *src)
{
    if (s->n_scripts == STORE_SCRIPTS_MAX)
        return -1;
    s->scripts[s->n_scripts].src = src;
    return s->n_scripts++;
}

/* Runs one command; on a reply of type error copies it to err and returns
 * the reply anyway (the connection is fine). NULL means the connection is
 * broken and must be dropped. */
static redisReply *store_cmd(redisContext *c, int argc, const char **argv, const size_t *lens, char *err)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);

    if (r == NULL)
        snprintf(err, OTP_ERR_LEN, "redis: %s", c->errstr[0] ? c->errstr : "no reply");
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(err, OTP_ERR_LEN, "redis: %.*s", (int)(r->len > 200 ? 200 : r->len), r->str);
    return r;
}

/* One command expecting no error reply; 0 on success. */
static int store_simple(redisContext *c, int argc, const char **argv, char *err)
{
    redisReply *r = store_cmd(c, argc, argv, NULL, err);
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;

    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Asks the sentinels in turn where the master is; 0 with its address in
 * host (256 bytes) and *port, or -1 with detail in err. */
static int store_master_addr(struct store *s, char *host, int *port, char *err)
{
    struct timeval tv = {s->o.timeout_ms / 1000, (s->o.timeout_ms % 1000) * 1000};
    size_t i;

    snprintf(err, OTP_ERR_LEN, "redis: no sentinel answered for master %s", s->master);
    for (i = 0; i < s->o.n_sentinels; i++) {
        redisContext *c = redisConnectWithTimeout(s->sentinel_hosts[i], s->sentinel_ports[i], tv);
        redisReply *r = NULL;
        int found = 0;
        if (c != NULL && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
            r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", s->master);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[0]->len < 256) {
            snprintf(host, 256, "%s", r->element[0]->str);
            *port = (int)strtol(r->element[1]->str, NULL, 10);
            found = *port > 0;
        }
        if (r)
            freeReplyObject(r);
        if (c)
            redisFree(c);
        if (found)
            return 0;
    }
    return -1;
}

/* 0 when c's node says it is a master (a sentinel's answer may be stale). */
static int store_is_master(redisContext *c, char *err)
{
    redisReply *r = redisCommand(c, "ROLE");
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;

    if (!ok)
        snprintf(err, OTP_ERR_LEN, "redis: the node the sentinels named is not a master");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Copies the value of a CONFIG GET reply ({name, value}) into out, or
 * "unknown" when Redis refused (CONFIG renamed away, an ACL without
 * +config): then nothing proves the setting is safe. */
static void store_conf_value(const redisReply *r, char *out, size_t cap)
{
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, cap, "%.*s", (int)r->element[1]->len, r->element[1]->str);
    else
        snprintf(out, cap, "unknown");
}

/* Reads maxmemory-policy and appendonly on the new connection c (one round
 * trip) and logs a risky value. -1 with detail in err when the connection
 * broke: the caller drops it. */
static int store_conf_check(struct store *s, redisContext *c, char *err)
{
    struct store_redis_conf conf = {.checked = 1};
    redisReply *policy = NULL, *aof = NULL;
    int changed, relog, rc = -1;

    if (redisAppendCommand(c, "CONFIG GET maxmemory-policy") != REDIS_OK ||
        redisAppendCommand(c, "CONFIG GET appendonly") != REDIS_OK ||
        redisGetReply(c, (void **)&policy) != REDIS_OK || redisGetReply(c, (void **)&aof) != REDIS_OK) {
        snprintf(err, OTP_ERR_LEN, "redis: %s", c->errstr[0] ? c->errstr : "no reply to CONFIG GET");
        goto out;
    }
    store_conf_value(policy, conf.maxmemory_policy, sizeof(conf.maxmemory_policy));
    store_conf_value(aof, conf.appendonly, sizeof(conf.appendonly));
    conf.policy_risky = strcmp(conf.maxmemory_policy, "noeviction") != 0;
    conf.appendonly_risky = strcmp(conf.appendonly, "yes") != 0;
    pthread_mutex_lock(&s->mu);
    changed = strcmp(conf.maxmemory_policy, s->conf.maxmemory_policy) != 0 ||
              strcmp(conf.appendonly, s->conf.appendonly) != 0;
    relog = s->conf_relog || changed;
    s->conf_relog = 0;
    s->conf = conf;
    pthread_mutex_unlock(&s->mu);
    if (s->o.quiet)
        relog = 0;
    if (relog && conf.policy_risky)
        log_msg(LOG_WARN,
                "redis: maxmemory-policy is %s, not noeviction: eviction would silently wipe limits, "
                "locks and verifications",
                conf.maxmemory_policy);
    if (relog && conf.appendonly_risky)
        log_msg(LOG_WARN,
                "redis: appendonly is %s, not yes: a Redis restart would forget every limit, lock and "
                "verification",
                conf.appendonly);
    rc = 0;
out:
    if (policy)
        freeReplyObject(policy);
    if (aof)
        freeReplyObject(aof);
    return rc;
}

static redisContext *store_connect(struct store *s, char *err)
{
    struct timeval tv = {s->o.timeout_ms / 1000, (s->o.timeout_ms % 1000) * 1000};
    char db[16], host[256];
    int port = s->o.port;
    redisContext *c = NULL;

    snprintf(host, sizeof(host), "%s", s->o.host);
    if (s->o.n_sentinels > 0 && store_master_addr(s, host, &port, err) < 0)
        return NULL;
    c = redisConnectWithTimeout(host, port, tv);

    if (c == NULL || c->err) {
        snprintf(err, OTP_ERR_LEN, "redis connect %.100s:%d: %s", host, port, c ? c->errstr : "no memory");
        goto fail;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        snprintf(err, OTP_ERR_LEN, "redis: cannot set timeout");
        goto fail;
    }
    if (s->o.password && s->o.username && s->o.username[0]) {
        const char *argv[] = {"AUTH", s->o.username, s->o.password};
        if (store_simple(c, 3, argv, err) < 0)
            goto fail;
    } else if (s->o.password) {
        const char *argv[] = {"AUTH", s->o.password};
        if (store_simple(c, 2, argv, err) < 0)
            goto fail;
    }
    if (s->o.db) {
        const char *argv[] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", s->o.db);
        if (store_simple(c, 2, argv, err) < 0)
            goto fail;
    }
    if (s->o.n_sentinels > 0 && store_is_master(c, err) < 0)
        goto fail;
    if (store_conf_check(s, c, err) < 0) /* at start and after every reconnect */
        goto fail;
    return c;
fail:
    if (c)
        redisFree(c);
    return NULL;
}

/* Gives back c and updates the breaker: c returns to the pool unless it is
 * broken (c->err set); NULL stands for a connection that never was. */
static void store_release(struct store *s, redisContext *c, int ok)
{
    redisContext *dead[STORE_POOL_MAX];
    size_t n_dead = 0;
    int broken = c == NULL || c->err != 0; /* an error reply leaves the connection fine */

    pthread_mutex_lock(&s->mu);
    if (ok) {
        s->failures = 0;
        s->open_until_ns = 0;
        s->probing = 0;
    } else {
        s->stats.failures++;
        s->failures++;
        if (s->probing || (s->open_until_ns == 0 && s->failures >= s->o.breaker_failures)) {
            s->open_until_ns = clock_mono_ns() + (uint64_t)s->o.breaker_open_ms * 1000000u;
            s->probing = 0;
            s->stats.breaker_opens++;
        }
    }
    if (!broken && s->n_idle < STORE_POOL_MAX) {
        s->idle[s->n_idle++] = c;
        c = NULL;
    }
    /* A broken connection usually means Redis went away: the idle ones are
     * as dead, and reusing them would fail the next calls and the breaker's
     * probe once more. Drop them all; the next call connects afresh. */
    if (broken) {
        s->conf_relog = 1;
        while (s->n_idle > 0)
            dead[n_dead++] = s->idle[--s->n_idle];
    }
    pthread_mutex_unlock(&s->mu);
    if (c != NULL)
        redisFree(c);
    while (n_dead > 0)
        redisFree(dead[--n_dead]);
}

/* Takes a connection, or refuses fast while the breaker is open. */
static redisContext *store_acquire(struct store *s, char *err)
{
    redisContext *c = NULL;
    uint64_t now = clock_mono_ns();
    int refuse = 0;

    pthread_mutex_lock(&s->mu);
    s->stats.calls++;
    if (s->open_until_ns != 0) {
        if (now < s->open_until_ns || s->probing)
            refuse = 1;
        else
            s->probing = 1; /* half-open: this call is the probe */
    }
    if (refuse)
        s->stats.breaker_rejects++;
    else if (s->n_idle > 0)
        c = s->idle[--s->n_idle];
    pthread_mutex_unlock(&s->mu);
    if (refuse) {
        snprintf(err, OTP_ERR_LEN, "redis: circuit breaker open");
        return NULL;
    }
    if (c == NULL && (c = store_connect(s, err)) == NULL)
        store_release(s, NULL, 0);
    return c;
}

/* Copies a script's reply into our own type. */
static struct store_reply *store_copy(const redisReply *r)
{
    struct store_reply *out = calloc(1, sizeof(*out));
    const redisReply *const *elems = (const redisReply *const *)r->element;
    size_t i, n = r->type == REDIS_REPLY_ARRAY ? r->elements : 1;

    if (r->type != REDIS_REPLY_ARRAY)
        elems = &r;
    if (out == NULL || (out->ints = calloc(n + 1, sizeof(*out->ints))) == NULL ||
        (out->strs = calloc(n + 1, sizeof(*out->strs))) == NULL)
        goto fail;
    out->n = n;
    for (i = 0; i < n; i++) {
        const redisReply *e = elems[i];
        if (e->type == REDIS_REPLY_INTEGER)
            out->ints[i] = e->integer;
        else if ((e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) &&
                 (out->strs[i] = strndup(e->str, e->len)) == NULL)
            goto fail;
    }
    return out;
fail:
    store_reply_free(out);
    return NULL;
}

void store_reply_free(struct store_reply *r)
{
    size_t i;

    if (r == NULL)
        return;
    for (i = 0; r->strs && i < r->n; i++)
        free(r->strs[i]);
    free(r->strs);
    free(r->ints);
    free(r);
}

/* SCRIPT LOAD of script h on c; records its SHA. 0 on success. */
static int store_load(struct store *s, redisContext *c, int h, char *err)
{
    const char *argv[] = {"SCRIPT", "LOAD", s->scripts[h].src};
    redisReply *r = store_cmd(c, 3, argv, NULL, err);
    int rc = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40) {
        pthread_mutex_lock(&s->mu);
        memcpy(s->scripts[h].sha, r->str, 41);
        pthread_mutex_unlock(&s->mu);
        rc = 0;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Copies script h's SHA into sha ("" when not loaded yet). */
static void store_sha(struct store *s, int h, char *sha)
{
    pthread_mutex_lock(&s->mu);
    memcpy(sha, s->scripts[h].sha, 41);
    pthread_mutex_unlock(&s->mu);
}

/* EVALSHA argv (argv[1] is filled here) on c, loading the script first when
 * its SHA is unknown and once more on NOSCRIPT. NULL when nothing came back:
 * then c->err tells whether the connection is broken. */
static redisReply *store_evalsha(struct store *s, redisContext *c, int h, int argc, const char **argv, char *err)
{
    char sha[41];
    redisReply *r;
    int loaded = 0;

    store_sha(s, h, sha);
    if (sha[0] == '\0') {
        if (store_load(s, c, h, err) < 0)
            return NULL;
        store_sha(s, h, sha);
        loaded = 1;
    }
    argv[1] = sha;
    r = store_cmd(c, argc, argv, NULL, err);
    if (r != NULL && !loaded && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        if (store_load(s, c, h, err) < 0)
            return NULL;
        store_sha(s, h, sha);
        r = store_cmd(c, argc, argv, NULL, err);
    }
    return r;
}

/* Fills argv (room for nargs + 3) for EVALSHA of script h: argv[1], the
 * script's SHA, is set by store_evalsha; nk holds the key count's text.
 * OTP_EINVAL when h or nargs is out of range. */
/* A call that reached Redis (or tried to: a timeout counts, at its
 * length), from the moment it asked for a connection; a call the breaker
 * refused at once is not one. */
static void store_observe(uint64_t t0_ns)
{
    metrics_observe_us(METRICS_H_REDIS, (clock_mono_ns() - t0_ns) / 1000);
}

static enum otp_rc store_eval_argv(const struct store *s, int h, int nkeys, int nargs, const char *const *args,
                                   const char **argv, char nk[16], char *err)
{
    if (h < 0 || h >= s->n_scripts || nargs > STORE_ARGS_MAX) {
        snprintf(err, OTP_ERR_LEN, "store: bad script call");
        return OTP_EINVAL;
    }
    snprintf(nk, 16, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[2] = nk;
    memcpy(argv + 3, args, (size_t)nargs * sizeof(*args));
    return OTP_OK;
}

enum otp_rc store_eval(struct store *s, int h, int nkeys, int nargs, const char *const *args,
                       struct store_reply **out, char *err)
{
    const char *argv[STORE_ARGS_MAX + 3];
    char nk[16];
    redisContext *c;
    redisReply *r;
    uint64_t t0 = clock_mono_ns();
    int ok;

    *out = NULL;
    if (store_eval_argv(s, h, nkeys, nargs, args, argv, nk, err) != OTP_OK)
        return OTP_EINVAL;
    if ((c = store_acquire(s, err)) == NULL)
        return OTP_ESTORE;
    r = store_evalsha(s, c, h, nargs + 3, argv, err);
    ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    store_observe(t0);
    if (ok && (*out = store_copy(r)) == NULL)
        snprintf(err, OTP_ERR_LEN, "store: out of memory");
    if (r)
        freeReplyObject(r);
    store_release(s, c, ok);
    return *out != NULL ? OTP_OK : OTP_ESTORE;
}

/* Drops c (broken by a timeout or a reset) and every idle connection with
 * it, without counting a failure: the caller retries once and counts the
 * outcome of the retry. */
static void store_drop(struct store *s, redisContext *c)
{
    redisContext *dead[STORE_POOL_MAX];
    size_t n_dead = 0;

    pthread_mutex_lock(&s->mu);
    while (s->n_idle > 0)
        dead[n_dead++] = s->idle[--s->n_idle];
    pthread_mutex_unlock(&s->mu);
    redisFree(c);
    while (n_dead > 0)
        redisFree(dead[--n_dead]);
}

enum otp_rc store_eval_idem(struct store *s, int h, int nkeys, int nargs, const char *const *args,
                            struct store_reply **out, int *maybe_ran, char *err)
{
    const char *argv[STORE_ARGS_MAX + 3];
    char nk[16];
    redisContext *c;
    redisReply *r = NULL;
    uint64_t t0 = clock_mono_ns();
    int ok, try;

    *out = NULL;
    *maybe_ran = 0;
    if (store_eval_argv(s, h, nkeys, nargs, args, argv, nk, err) != OTP_OK)
        return OTP_EINVAL;
    if ((c = store_acquire(s, err)) == NULL)
        return OTP_ESTORE;
    for (try = 0; try < 2; try++) {
        r = store_evalsha(s, c, h, nargs + 3, argv, err);
        if (r != NULL || !c->err)
            break;
        /* Timed out or reset: the script may have run. The request id in
         * its arguments makes a second run return the recorded outcome, so
         * one retry on a fresh connection is safe. */
        *maybe_ran = 1;
        if (try == 1)
            break;
        store_drop(s, c);
        if ((c = store_connect(s, err)) == NULL) {
            store_release(s, NULL, 0);
            return OTP_ESTORE;
        }
    }
    ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    store_observe(t0);
    if (ok && (*out = store_copy(r)) == NULL)
        snprintf(err, OTP_ERR_LEN, "store: out of memory");
    if (r)
        freeReplyObject(r);
    store_release(s, c, ok);
    return *out != NULL ? OTP_OK : OTP_ESTORE;
}

enum otp_rc store_ping(struct store *s, char *err)
{
    const char *argv[] = {"PING"};
    uint64_t t0 = clock_mono_ns();
    redisContext *c = store_acquire(s, err);
    int ok;

    if (c == NULL)
        return OTP_ESTORE;
    ok = store_simple(c, 1, argv, err) == 0;
    store_observe(t0);
    store_release(s, c, ok);
    return ok ? OTP_OK : OTP_ESTORE;
}

int store_breaker_open(struct store *s)
{
    int open;

    pthread_mutex_lock(&s->mu);
    open = s->open_until_ns != 0;
    pthread_mutex_unlock(&s->mu);
    return open;
}

int64_t store_breaker_left_ms(struct store *s)
{
    uint64_t now = clock_mono_ns();
    int64_t left = 0;

    pthread_mutex_lock(&s->mu);
    if (s->open_until_ns > now)
        left = (int64_t)((s->open_until_ns - now) / 1000000u);
    pthread_mutex_unlock(&s->mu);
    return left;
}

void store_redis_conf(struct store *s, struct store_redis_conf *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->conf;
    pthread_mutex_unlock(&s->mu);
}

void store_stats(struct store *s, struct store_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void store_msg_key(const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "otp:msg:%s", id);
}
