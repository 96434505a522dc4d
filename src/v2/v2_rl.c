/*
 * v2_rl: a service's rate limits and their buckets (Twilio's RateLimits
 * and Buckets), rows of v2.lua like services, and the one read a
 * verification is decided with (the service, its rate limits, its buckets).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/sha256.h"
#include "v2_int.h"

/* ---- Rate limits: rest "<unique name>\31<description>" ---- */

static enum otp_rc rl_parse(char *value, struct v2_rate_limit *out, char *err)
{
    char *f[2];
    int n = v2_row_split(value, &out->created_s, &out->updated_s, f, 2);

    if (n == 2) {
        snprintf(out->unique_name, sizeof(out->unique_name), "%s", f[0]);
        snprintf(out->description, sizeof(out->description), "%s", f[1]);
    }
    free(value);
    if (n != 2) {
        snprintf(err, OTP_ERR_LEN, "a stored rate limit cannot be read");
        return OTP_ESTORE;
    }
    return OTP_OK;
}

static void rl_rest(const struct v2_rate_limit *r, char *out, size_t cap)
{
    snprintf(out, cap, "%s\037%s", r->unique_name, r->description);
}

enum otp_rc v2_rl_create(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_rate_limit *r, char *err)
{
    char rest[sizeof(r->unique_name) + sizeof(r->description) + 2];
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 0);
    rl_rest(r, rest, sizeof(rest));
    if ((rc = v2_row_create(v, &l, "RK", rest, V2_RATE_LIMITS_MAX, r->unique_name, NULL, r->sid, &r->created_s,
                            err)) != OTP_OK) {
        if (rc == OTP_EFULL)
            snprintf(err, OTP_ERR_LEN, "a service holds at most %d rate limits", V2_RATE_LIMITS_MAX);
        return rc;
    }
    r->updated_s = r->created_s;
    v2_record(v, caller, "add", "rate_limit", r->sid, NULL);
    return OTP_OK;
}

enum otp_rc v2_rl_get(struct v2 *v, const char *account, const char *svc, const char *sid, struct v2_rate_limit *out,
                      char *err)
{
    struct v2_loc l;
    char *value;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 0);
    if ((rc = v2_row_get(v, &l, sid, &value, err)) != OTP_OK)
        return rc;
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "%s", sid);
    return rl_parse(value, out, err);
}

/* The rows of a list reply (taken) as rate limits, in *out. */
static enum otp_rc rl_rows(struct store_reply *rep, size_t from, size_t count, struct v2_rate_limit **out, size_t *n,
                           char *err)
{
    size_t i;

    *n = 0;
    if ((*out = calloc(count + 1, sizeof(**out))) == NULL)
        return OTP_ENOMEM;
    for (i = from; i + 1 < rep->n && *n < count; i += 2) {
        struct v2_rate_limit *r = &(*out)[*n];
        if (rep->strs[i] == NULL || rep->strs[i + 1] == NULL || !v2_sid_ok(rep->strs[i], "RK"))
            continue;
        snprintf(r->sid, sizeof(r->sid), "%s", rep->strs[i]);
        if (rl_parse(rep->strs[i + 1], r, err) == OTP_OK)
            (*n)++;
        rep->strs[i + 1] = NULL;
    }
    return OTP_OK;
}

enum otp_rc v2_rl_list(struct v2 *v, const char *account, const char *svc, struct v2_rate_limit **out, size_t *n,
                       char *err)
{
    struct store_reply *rep;
    struct v2_loc l;
    enum otp_rc rc;

    *out = NULL;
    *n = 0;
    l = v2_loc_child(account, svc, 0);
    if ((rc = v2_row_list(v, &l, &rep, err)) != OTP_OK)
        return rc;
    rc = rl_rows(rep, 1, rep->n / 2, out, n, err);
    store_reply_free(rep);
    return rc;
}

enum otp_rc v2_rl_update(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_rate_limit *r, char *err)
{
    char rest[sizeof(r->unique_name) + sizeof(r->description) + 2], *value;
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 0);
    rl_rest(r, rest, sizeof(rest));
    if ((rc = v2_row_update(v, &l, r->sid, rest, NULL, &value, err)) != OTP_OK ||
        (rc = rl_parse(value, r, err)) != OTP_OK)
        return rc;
    v2_record(v, caller, "update", "rate_limit", r->sid, NULL);
    return OTP_OK;
}

enum otp_rc v2_rl_delete(struct v2 *v, const char *caller, const char *account, const char *svc, const char *sid,
                         char *err)
{
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 0);
    if ((rc = v2_row_delete(v, &l, sid, err)) == OTP_OK)
        v2_record(v, caller, "remove", "rate_limit", sid, NULL);
    return rc;
}

/* ---- Buckets: rest "<rate limit SID>\31<max>\31<interval s>" ---- */

static enum otp_rc bk_parse(char *value, struct v2_bucket *out, char *err)
{
    char *f[3];
    int n = v2_row_split(value, &out->created_s, &out->updated_s, f, 3);

    if (n == 3) {
        snprintf(out->rate_limit, sizeof(out->rate_limit), "%s", f[0]);
        out->max = strtol(f[1], NULL, 10);
        out->interval_s = strtol(f[2], NULL, 10);
    }
    free(value);
    if (n != 3) {
        snprintf(err, OTP_ERR_LEN, "a stored bucket cannot be read");
        return OTP_ESTORE;
    }
    return OTP_OK;
}

static void bk_rest(const struct v2_bucket *b, char *out, size_t cap)
{
    snprintf(out, cap, "%s\037%ld\037%ld", b->rate_limit, b->max, b->interval_s);
}

static void bk_body(const struct v2_bucket *b, char *out, size_t cap)
{
    snprintf(out, cap, "{\"rate_limit_sid\":\"%s\",\"max\":%ld,\"interval\":%ld}", b->rate_limit, b->max,
             b->interval_s);
}

enum otp_rc v2_bk_create(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_bucket *b, char *err)
{
    char rest[96], body[128];
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 1);
    bk_rest(b, rest, sizeof(rest));
    if ((rc = v2_row_create(v, &l, "BL", rest, V2_BUCKETS_MAX, NULL, b->rate_limit, b->sid, &b->created_s, err)) !=
        OTP_OK) {
        if (rc == OTP_EFULL)
            snprintf(err, OTP_ERR_LEN, "a service holds at most %d buckets", V2_BUCKETS_MAX);
        return rc;
    }
    b->updated_s = b->created_s;
    bk_body(b, body, sizeof(body));
    v2_record(v, caller, "add", "bucket", b->sid, body);
    return OTP_OK;
}

enum otp_rc v2_bk_get(struct v2 *v, const char *account, const char *svc, const char *sid, struct v2_bucket *out,
                      char *err)
{
    struct v2_loc l;
    char *value;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 1);
    if ((rc = v2_row_get(v, &l, sid, &value, err)) != OTP_OK)
        return rc;
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "%s", sid);
    return bk_parse(value, out, err);
}

/* The rows of a list reply from index from as buckets (of rl only when
 * not NULL), in *out. */
static enum otp_rc bk_rows(struct store_reply *rep, size_t from, const char *rl, struct v2_bucket **out, size_t *n,
                           char *err)
{
    size_t i;

    *n = 0;
    if ((*out = calloc((rep->n - from) / 2 + 1, sizeof(**out))) == NULL)
        return OTP_ENOMEM;
    for (i = from; i + 1 < rep->n; i += 2) {
        struct v2_bucket *b = &(*out)[*n];
        if (rep->strs[i] == NULL || rep->strs[i + 1] == NULL || !v2_sid_ok(rep->strs[i], "BL"))
            continue;
        snprintf(b->sid, sizeof(b->sid), "%s", rep->strs[i]);
        if (bk_parse(rep->strs[i + 1], b, err) == OTP_OK && (rl == NULL || strcmp(b->rate_limit, rl) == 0))
            (*n)++;
        rep->strs[i + 1] = NULL;
    }
    return OTP_OK;
}

enum otp_rc v2_bk_list(struct v2 *v, const char *account, const char *svc, const char *rl, struct v2_bucket **out,
                       size_t *n, char *err)
{
    struct store_reply *rep;
    struct v2_loc l;
    enum otp_rc rc;

    *out = NULL;
    *n = 0;
    l = v2_loc_child(account, svc, 1);
    if ((rc = v2_row_list(v, &l, &rep, err)) != OTP_OK)
        return rc;
    rc = bk_rows(rep, 1, rl, out, n, err);
    store_reply_free(rep);
    return rc;
}

enum otp_rc v2_bk_update(struct v2 *v, const char *caller, const char *account, const char *svc,
                         struct v2_bucket *b, char *err)
{
    char rest[96], body[128], *value;
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 1);
    bk_rest(b, rest, sizeof(rest));
    if ((rc = v2_row_update(v, &l, b->sid, rest, NULL, &value, err)) != OTP_OK ||
        (rc = bk_parse(value, b, err)) != OTP_OK)
        return rc;
    bk_body(b, body, sizeof(body));
    v2_record(v, caller, "update", "bucket", b->sid, body);
    return OTP_OK;
}

enum otp_rc v2_bk_delete(struct v2 *v, const char *caller, const char *account, const char *svc, const char *sid,
                         char *err)
{
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_child(account, svc, 1);
    if ((rc = v2_row_delete(v, &l, sid, err)) == OTP_OK)
        v2_record(v, caller, "remove", "bucket", sid, NULL);
    return rc;
}

/* ---- What a verification is decided with ---- */

enum otp_rc v2_rules_get(struct v2 *v, const char *account, const char *svc, struct v2_rules *out, char *err)
{
    struct store_reply *rep;
    struct v2_loc l;
    enum otp_rc rc;
    size_t n_rl;
    char *value;

    memset(out, 0, sizeof(*out));
    l = v2_loc_service(account, svc);
    if ((rc = v2_eval(v, (const char *[]){l.keys[0], l.keys[1], l.keys[2]}, 3, (const char *[]){"sx", svc, ""}, 3,
                      &rep, err)) != OTP_OK)
        return rc;
    if (rep->n < 1 || rep->strs[0] != NULL)
        return v2_bad_reply(rep, err);
    if (rep->ints[0] != 1) {
        store_reply_free(rep);
        return OTP_ENOTFOUND;
    }
    if (rep->n < 3 || rep->strs[1] == NULL || rep->strs[2] != NULL || rep->ints[2] < 0 ||
        3 + 2 * (size_t)rep->ints[2] > rep->n || (rep->n - 3) % 2 != 0)
        return v2_bad_reply(rep, err);
    n_rl = (size_t)rep->ints[2];
    snprintf(out->service.sid, sizeof(out->service.sid), "%s", svc);
    value = rep->strs[1];
    rep->strs[1] = NULL;
    if ((rc = v2_service_parse(value, &out->service, err)) != OTP_OK) {
        store_reply_free(rep);
        return rc;
    }
    if ((rc = rl_rows(rep, 3, n_rl, &out->rl, &out->n_rl, err)) == OTP_OK)
        rc = bk_rows(rep, 3 + 2 * n_rl, NULL, &out->bk, &out->n_bk, err);
    store_reply_free(rep);
    if (rc != OTP_OK)
        v2_rules_free(out);
    return rc;
}

void v2_rules_free(struct v2_rules *r)
{
    free(r->rl);
    free(r->bk);
    r->rl = NULL;
    r->bk = NULL;
    r->n_rl = r->n_bk = 0;
}

/* ---- A verification's RateLimits, as rules of its issue ---- */

/* The rate limit of r called name; NULL when none. */
static const struct v2_rate_limit *rl_named(const struct v2_rules *r, const char *name)
{
    size_t i;

    for (i = 0; i < r->n_rl; i++)
        if (strcmp(r->rl[i].unique_name, name) == 0)
            return &r->rl[i];
    return NULL;
}

/* One bucket of rate limit rl for value as an issue's rule into x: its
 * state under the service, the rate limit and a hash of the value (no
 * value, an address or a user id, is kept in a key as it is). */
static void extra_of(const struct v2_bucket *b, const char *svc, const char *value, struct limits_extra *x)
{
    unsigned char h[SHA256_LEN];
    struct sha256 s;
    char hex[2 * 16 + 1];
    int i;

    sha256_init(&s);
    sha256_update(&s, value, strlen(value));
    sha256_final(&s, h);
    for (i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    memset(x, 0, sizeof(*x));
    snprintf(x->rule.name, sizeof(x->rule.name), "%s", V2_RULE_NAME);
    /* A sliding log is exact over any window; past its bound, the
     * weighted counters. */
    x->rule.algo = b->max <= config_limit_max(CFG_ALGO_SLIDING_LOG) ? CFG_ALGO_SLIDING_LOG
                                                                   : CFG_ALGO_SLIDING_WINDOW_COUNTER;
    x->rule.limit = b->max;
    x->rule.burst = b->max;
    x->rule.window_ms = (int64_t)b->interval_s * 1000;
    x->rule.on = CFG_ON_ISSUE;
    snprintf(x->key, sizeof(x->key), "otp:v2:rv:%s:%s:%s", svc, b->rate_limit, hex);
    snprintf(x->field, sizeof(x->field), "b%.12s", b->sid + 2);
}

int v2_extras(const struct v2_rules *r, const char *text, struct limits_extra *out, size_t *n, char *detail,
              size_t cap)
{
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL), *v;
    const char *name;
    size_t i;
    int bad = 0;

    *n = 0;
    if (!json_is_object(j)) {
        snprintf(detail, cap, "RateLimits must be a JSON object of rate limits' unique names and their values");
        json_decref(j);
        return -1;
    }
    json_object_foreach(j, name, v) {
        const struct v2_rate_limit *rl = rl_named(r, name);
        char value[256];
        if (rl == NULL) {
            snprintf(detail, cap, "RateLimits names %.64s, which is no rate limit of this service", name);
            bad = 1;
            break;
        }
        if (json_is_string(v) && json_string_length(v) > 0 && json_string_length(v) < sizeof(value))
            snprintf(value, sizeof(value), "%s", json_string_value(v));
        else if (json_is_integer(v))
            snprintf(value, sizeof(value), "%lld", (long long)json_integer_value(v));
        else {
            snprintf(detail, cap, "RateLimits' value for %.64s must be a string of 1 to 255 bytes or a number", name);
            bad = 1;
            break;
        }
        for (i = 0; i < r->n_bk; i++) {
            if (strcmp(r->bk[i].rate_limit, rl->sid) != 0)
                continue;
            if (*n == LIMITS_EXTRA_MAX) {
                snprintf(detail, cap, "RateLimits name more than %d buckets", LIMITS_EXTRA_MAX);
                bad = 1;
                break;
            }
            extra_of(&r->bk[i], r->service.sid, value, &out[(*n)++]);
        }
        if (bad)
            break;
    }
    json_decref(j);
    return bad ? -1 : 0;
}
