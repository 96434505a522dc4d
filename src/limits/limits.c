/*
 * limits: argument building and reply reading around the Lua scripts. One
 * call per request; the cost is the Redis round trip. The rules snapshot is
 * reference-counted so SIGHUP can swap it under running requests.
 */
#include "limits.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/unittest.h"
#include "issue.lua.h"
#include "refund.lua.h"
#include "verify.lua.h"

#define LIMITS_KEYS_MAX 6
#define LIMITS_ARGS_MAX (8 + 32 * 7 + 8 * 3 + LIMITS_KEYS_MAX)

/* The rules in force; immutable once built. */
struct limits_rules {
    int refs; /* guarded by limits.mu */
    struct cfg_rule *rules;
    size_t n_rules;
    struct cfg_price *prices;
    size_t n_prices;
    struct cfg_cap *caps;
    size_t n_caps;
};

struct limits {
    struct store *store;
    int h_issue, h_verify, h_refund;
    pthread_mutex_t mu;
    struct limits_rules *cur;
};

/* Argument strings of one script call, with room for the numbers. */
struct limits_args {
    const char *v[LIMITS_ARGS_MAX];
    char num[LIMITS_ARGS_MAX][24];
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

static void rules_free(struct limits_rules *r)
{
    if (r == NULL)
        return;
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

static struct limits_rules *rules_new(const struct config *c)
{
    struct limits_rules *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->refs = 1;
    r->rules = dup_array(c->rules, c->n_rules, sizeof(*c->rules));
    r->prices = dup_array(c->prices, c->n_prices, sizeof(*c->prices));
    r->caps = dup_array(c->caps, c->n_caps, sizeof(*c->caps));
    if (!r->rules || !r->prices || !r->caps) {
        rules_free(r);
        return NULL;
    }
    r->n_rules = c->n_rules;
    r->n_prices = c->n_prices;
    r->n_caps = c->n_caps;
    return r;
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

struct limits *limits_new(struct store *s, const struct config *c)
{
    struct limits *l = calloc(1, sizeof(*l));

    if (l == NULL || (l->cur = rules_new(c)) == NULL) {
        free(l);
        return NULL;
    }
    l->store = s;
    l->h_issue = store_script(s, limits_issue_lua);
    l->h_verify = store_script(s, limits_verify_lua);
    l->h_refund = store_script(s, limits_refund_lua);
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void limits_free(struct limits *l)
{
    if (l == NULL)
        return;
    rules_free(l->cur);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

enum otp_rc limits_reload(struct limits *l, const struct config *c)
{
    struct limits_rules *r = rules_new(c), *old;

    if (r == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&l->mu);
    old = l->cur;
    l->cur = r;
    pthread_mutex_unlock(&l->mu);
    rules_put(l, old);
    return OTP_OK;
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
    }
}

/* 1 when rq carries what rule r is keyed on. */
static int rule_applies(const struct cfg_rule *r, const struct limits_request *rq)
{
    switch (r->key) {
    case CFG_KEY_DEVICE:
        return rq->device_id != NULL;
    case CFG_KEY_CLIENT_IP:
        return rq->ip_key != NULL;
    case CFG_KEY_API_KEY:
        return rq->api_key != NULL;
    default:
        return 1;
    }
}

static int64_t price_of(const struct limits_rules *r, const char *phone)
{
    struct config c = {0};

    c.prices = r->prices;
    c.n_prices = r->n_prices;
    return config_price(&c, phone);
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

/* Reads issue.lua's reply into out. A refusal names the lock if there is
 * one, else the enforced rule that refuses longest; its Retry-After is the
 * longest wait of every refusal, cost caps included, so it is never early. */
UNITTEST void issue_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                         struct limits_issue *out)
{
    const struct cfg_rule *lock = NULL, *limit = NULL;
    int64_t best_remaining = INT64_MAX, best_reset = -1, lock_reset = 0, limit_reset = -1;
    int64_t wait_ms = rep->ints[5]; /* the cost caps' wait, 0 when they allow */
    size_t i;

    out->now_ms = rep->ints[1];
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[2] ? rep->strs[2] : "");
    out->expires_in_ms = rep->ints[3];
    /* ints[4] says whether vid is the proposed id; the ledger does not need it
     * (the verification row is inserted or kept with every message). */
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        int ok = rep->ints[6 + i * 3] == 1;
        int64_t remaining = rep->ints[7 + i * 3], reset = rep->ints[8 + i * 3];
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
            if (r->algo == CFG_ALGO_RESEND_DELAY)
                out->resend_after_ms = reset;
        }
    }
    if (rep->ints[0] == 1) {
        out->rc = OTP_OK;
        return;
    }
    out->retry_ms = wait_ms;
    if (lock != NULL || limit != NULL) {
        const struct cfg_rule *why = lock ? lock : limit;
        out->rc = lock ? OTP_ELOCKED : OTP_ELIMITED;
        snprintf(out->reason, sizeof(out->reason), "%s", why->name);
        header_set(&out->header, why, 0, lock ? lock_reset : limit_reset);
    } else {
        out->rc = OTP_ECOST;
    }
}

enum otp_rc limits_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out, char *err)
{
    const struct cfg_rule *used[32];
    char keys[LIMITS_KEYS_MAX][300];
    int key_of[CFG_KEY_COUNT + 1] = {0}; /* 1-based KEYS index per key kind; last: cost */
    struct limits_rules *rs = rules_get(l);
    struct limits_args *a = calloc(1, sizeof(*a));
    struct store_reply *rep = NULL;
    size_t i, n_used = 0;
    int nkeys = 1, k;
    enum otp_rc rc = OTP_ENOMEM;

    memset(out, 0, sizeof(*out));
    if (a == NULL) {
        snprintf(err, OTP_ERR_LEN, "limits: out of memory");
        goto out;
    }
    limits_key(CFG_KEY_PHONE, rq, keys[0], sizeof(keys[0]));
    key_of[CFG_KEY_PHONE] = 1;
    for (i = 0; i < rs->n_rules && n_used < 32; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (!rule_applies(r, rq))
            continue;
        if (key_of[r->key] == 0) {
            limits_key(r->key, rq, keys[nkeys], sizeof(keys[0]));
            key_of[r->key] = ++nkeys;
        }
        used[n_used++] = r;
    }
    out->price_minor = rs->n_caps > 0 ? price_of(rs, rq->phone) : -1;
    if (out->price_minor >= 0) {
        snprintf(keys[nkeys], sizeof(keys[0]), "otp:cost");
        key_of[CFG_KEY_COUNT] = ++nkeys;
    }
    for (k = 0; k < nkeys; k++)
        args_str(a, keys[k]);
    args_str(a, rq->vid);
    args_str(a, rq->vhash);
    args_int(a, rq->ttl_ms);
    args_int(a, rq->max_attempts);
    args_int(a, out->price_minor);
    args_int(a, (int64_t)n_used);
    args_int(a, (int64_t)rs->n_caps);
    args_int(a, key_of[CFG_KEY_COUNT]);
    for (i = 0; i < n_used; i++) {
        const struct cfg_rule *r = used[i];
        args_int(a, (int64_t)r->algo + 1);
        args_int(a, key_of[r->key]);
        args_str(a, r->field);
        args_int(a, r->limit);
        args_int(a, r->window_ms);
        args_int(a, r->burst);
        args_str(a, r->shadow ? "1" : "0");
    }
    for (i = 0; i < rs->n_caps; i++) {
        snprintf(a->num[a->n], sizeof(a->num[0]), "c%zu", i); /* the cap's field */
        args_str(a, a->num[a->n]);
        args_int(a, rs->caps[i].window_ms);
        args_int(a, rs->caps[i].max_minor);
    }
    rc = store_eval(l->store, l->h_issue, nkeys, a->n, a->v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != 6 + n_used * 3 || rep->strs[0] != NULL) {
        snprintf(err, OTP_ERR_LEN, "limits: issue script gave %zu values, want %zu", rep->n, 6 + n_used * 3);
        rc = OTP_ESTORE;
        goto out;
    }
    issue_read(used, n_used, rep, out);
out:
    store_reply_free(rep);
    free(a);
    rules_put(l, rs);
    return rc;
}

/* Reads verify.lua's reply into out (zeroed by the caller); wrong is the
 * wrong-guess rule, or NULL. OTP_ESTORE with detail in err when the reply
 * is not the script's. */
UNITTEST enum otp_rc verify_read(const struct cfg_rule *wrong, const struct store_reply *rep,
                                 struct limits_verify *out, char *err)
{
    const char *status;

    if (rep->n != 6 || (status = rep->strs[0]) == NULL) {
        snprintf(err, OTP_ERR_LEN, "limits: verify script gave a bad reply");
        return OTP_ESTORE;
    }
    snprintf(out->vid, sizeof(out->vid), "%s", rep->strs[1] ? rep->strs[1] : "");
    out->attempts_left = (int)rep->ints[2];
    out->retry_ms = rep->ints[3];
    out->shadow_lock = rep->ints[4] == 1;
    if (strcmp(status, "ok") == 0)
        out->rc = OTP_OK;
    else if (strcmp(status, "wrong") == 0)
        out->rc = OTP_EBADCODE;
    else if (strcmp(status, "locked") == 0)
        out->rc = OTP_ELOCKED;
    else
        out->rc = OTP_ENOTFOUND;
    if (wrong != NULL && !wrong->shadow) {
        header_set(&out->header, wrong, wrong->limit - rep->ints[5], out->retry_ms);
        if (out->rc == OTP_ELOCKED)
            snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    }
    if (wrong != NULL && out->shadow_lock)
        snprintf(out->reason, sizeof(out->reason), "%s", wrong->name);
    return OTP_OK;
}

enum otp_rc limits_verify(struct limits *l, const char *phone, const char *guess_hash, int max_attempts,
                          struct limits_verify *out, char *err)
{
    struct limits_rules *rs = rules_get(l);
    struct limits_request rq = {0};
    const struct cfg_rule *wrong = NULL;
    struct limits_args a = {0};
    struct store_reply *rep = NULL;
    char key[64];
    size_t i;
    enum otp_rc rc;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < rs->n_rules; i++)
        if (rs->rules[i].algo == CFG_ALGO_WRONG_GUESS_CAP)
            wrong = &rs->rules[i];
    rq.phone = phone;
    limits_key(CFG_KEY_PHONE, &rq, key, sizeof(key));
    args_str(&a, key);
    args_str(&a, guess_hash);
    args_int(&a, max_attempts);
    args_str(&a, wrong ? wrong->field : "");
    args_int(&a, wrong ? wrong->limit : 0);
    args_int(&a, wrong ? wrong->window_ms : 1);
    args_str(&a, wrong && wrong->shadow ? "1" : "0");
    rc = store_eval(l->store, l->h_verify, 1, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    rc = verify_read(wrong, rep, out, err);
out:
    store_reply_free(rep);
    rules_put(l, rs);
    return rc;
}

enum otp_rc limits_refund(struct limits *l, int64_t price_minor, int64_t reserved_ms, char *err)
{
    struct limits_rules *rs = rules_get(l);
    struct limits_args a = {0};
    struct store_reply *rep = NULL;
    size_t i;
    enum otp_rc rc = OTP_OK;

    if (price_minor <= 0 || rs->n_caps == 0)
        goto out;
    args_str(&a, "otp:cost");
    args_int(&a, price_minor);
    args_int(&a, reserved_ms);
    args_int(&a, (int64_t)rs->n_caps);
    for (i = 0; i < rs->n_caps; i++) {
        snprintf(a.num[a.n], sizeof(a.num[0]), "c%zu", i);
        args_str(&a, a.num[a.n]);
        args_int(&a, rs->caps[i].window_ms);
    }
    rc = store_eval(l->store, l->h_refund, 1, a.n, a.v, &rep, err);
out:
    store_reply_free(rep);
    rules_put(l, rs);
    return rc;
}
