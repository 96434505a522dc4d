/*
 * http_v2_rl: a Verify service's rate limits and their buckets (Twilio's
 * RateLimits and Buckets). A verification that names a rate limit in its
 * RateLimits field is limited per value by each of its buckets, on the
 * same atomic step and Redis clock as the config's rules (v2_extras).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

static const struct v2_field rl_fields[] = {
    {"UniqueName", V2_TAKE, NULL},
    {"Description", V2_TAKE, NULL},
    {NULL, V2_TAKE, NULL},
};

static const struct v2_field rl_update_fields[] = {
    {"Description", V2_TAKE, NULL},
    {NULL, V2_TAKE, NULL},
};

static const struct v2_field bk_fields[] = {
    {"Max", V2_TAKE, NULL},
    {"Interval", V2_TAKE, NULL},
    {NULL, V2_TAKE, NULL},
};

static enum MHD_Result rl_answer(struct http *h, struct MHD_Connection *con, struct http_req *rq, unsigned status,
                                 const char *svc, const struct v2_rate_limit *r)
{
    char base[320];

    http_v2_base(h, con, base, sizeof(base));
    return http_v2_json(con, status, v2_rl_json(r, svc, rq->account, base));
}

static enum MHD_Result bk_answer(struct http *h, struct MHD_Connection *con, struct http_req *rq, unsigned status,
                                 const char *svc, const struct v2_bucket *b)
{
    char base[320];

    http_v2_base(h, con, base, sizeof(base));
    return http_v2_json(con, status, v2_bk_json(b, svc, rq->account, base));
}

/* Description from f into r when given; -1 when too long. */
static int description(const struct v2_form *f, struct v2_rate_limit *r)
{
    const char *d = v2_form_get(f, "Description");

    if (d == NULL)
        return 0;
    if (v2_chars(d) > V2_DESC_MAX || strlen(d) >= sizeof(r->description))
        return -1;
    snprintf(r->description, sizeof(r->description), "%s", d);
    return 0;
}

enum MHD_Result http_v2_rl_create(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc)
{
    struct v2_rate_limit r = {0};
    struct v2_form f;
    char err[OTP_ERR_LEN] = "";
    const char *name;
    enum MHD_Result ret;
    enum otp_rc rc;
    int bad;

    if (!http_v2_form(h, con, rq, rl_fields, &f, &ret))
        return ret;
    name = v2_form_get(&f, "UniqueName");
    bad = name == NULL || name[0] == '\0' || strlen(name) > V2_UNIQUE_MAX || strspn(name, NAME_CHARS) != strlen(name);
    if (!bad)
        snprintf(r.unique_name, sizeof(r.unique_name), "%s", name);
    bad = bad ? 1 : description(&f, &r) < 0 ? 2 : 0;
    v2_form_free(&f);
    if (bad)
        return http_v2_invalid(h, con,
                               bad == 1 ? "UniqueName must be 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'"
                                        : "Description must be at most 255 characters");
    if ((rc = v2_rl_create(h->v2, rq->caller, rq->account, svc, &r, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "rate limit create", err);
    return rl_answer(h, con, rq, 201, svc, &r);
}

enum MHD_Result http_v2_rl_list(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc)
{
    struct v2_rate_limit *rls;
    char err[OTP_ERR_LEN] = "", base[320], path[96];
    enum otp_rc rc;
    json_t *all;
    size_t n, i;

    if ((rc = v2_rl_list(h->v2, rq->account, svc, &rls, &n, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "rate limit list", err);
    http_v2_base(h, con, base, sizeof(base));
    if ((all = json_array()) != NULL)
        for (i = 0; i < n; i++)
            json_array_append_new(all, v2_rl_json(&rls[i], svc, rq->account, base));
    free(rls);
    snprintf(path, sizeof(path), "/v2/Services/%s/RateLimits", svc);
    return http_v2_list(h, con, "rate_limits", path, all);
}

enum MHD_Result http_v2_rl_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                 const char *rl)
{
    struct v2_rate_limit r;
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = v2_rl_get(h->v2, rq->account, svc, rl, &r, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "rate limit fetch", err);
    return rl_answer(h, con, rq, 200, svc, &r);
}

enum MHD_Result http_v2_rl_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl)
{
    struct v2_rate_limit r;
    struct v2_form f;
    char err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    enum otp_rc rc;
    int bad;

    if (!http_v2_form(h, con, rq, rl_update_fields, &f, &ret))
        return ret;
    if ((rc = v2_rl_get(h->v2, rq->account, svc, rl, &r, err)) != OTP_OK) {
        v2_form_free(&f);
        return http_v2_failed(h, con, rq, rc, "rate limit update", err);
    }
    bad = description(&f, &r) < 0;
    v2_form_free(&f);
    if (bad)
        return http_v2_invalid(h, con, "Description must be at most 255 characters");
    if ((rc = v2_rl_update(h->v2, rq->caller, rq->account, svc, &r, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "rate limit update", err);
    return rl_answer(h, con, rq, 200, svc, &r);
}

enum MHD_Result http_v2_rl_delete(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = v2_rl_delete(h->v2, rq->caller, rq->account, svc, rl, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "rate limit delete", err);
    return http_no_content(con);
}

/* Max and Interval from f into b (create: both required); NULL, or why
 * not. */
static const char *bucket_read(const struct v2_form *f, int create, struct v2_bucket *b)
{
    const char *max = v2_form_get(f, "Max"), *interval = v2_form_get(f, "Interval");
    enum cfg_algo algo;
    const char *why;

    if (create && (max == NULL || interval == NULL))
        return "Max and Interval are required";
    if (max != NULL && v2_int(max, 1, V2_BUCKET_MAX_MAX, &b->max) < 0)
        return "Max must be a whole number from 1 to 1000000";
    if (interval != NULL && v2_int(interval, 1, V2_INTERVAL_MAX, &b->interval_s) < 0)
        return "Interval must be a whole number of seconds from 1 to 2592000 (30 days)";
    algo = b->max <= config_limit_max(CFG_ALGO_SLIDING_LOG) ? CFG_ALGO_SLIDING_LOG : CFG_ALGO_SLIDING_WINDOW_COUNTER;
    why = config_limit_why(algo, (int64_t)b->interval_s * 1000, b->max);
    return why;
}

enum MHD_Result http_v2_bk_create(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl)
{
    struct v2_bucket b = {0};
    struct v2_form f;
    char err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    enum otp_rc rc;
    const char *why;

    if (!http_v2_form(h, con, rq, bk_fields, &f, &ret))
        return ret;
    why = bucket_read(&f, 1, &b);
    v2_form_free(&f);
    if (why != NULL)
        return http_v2_invalid(h, con, why);
    snprintf(b.rate_limit, sizeof(b.rate_limit), "%s", rl);
    if ((rc = v2_bk_create(h->v2, rq->caller, rq->account, svc, &b, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "bucket create", err);
    return bk_answer(h, con, rq, 201, svc, &b);
}

enum MHD_Result http_v2_bk_list(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                const char *rl)
{
    struct v2_rate_limit r;
    struct v2_bucket *bks;
    char err[OTP_ERR_LEN] = "", base[320], path[160];
    enum otp_rc rc;
    json_t *all;
    size_t n, i;

    if ((rc = v2_rl_get(h->v2, rq->account, svc, rl, &r, err)) != OTP_OK ||
        (rc = v2_bk_list(h->v2, rq->account, svc, rl, &bks, &n, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "bucket list", err);
    http_v2_base(h, con, base, sizeof(base));
    if ((all = json_array()) != NULL)
        for (i = 0; i < n; i++)
            json_array_append_new(all, v2_bk_json(&bks[i], svc, rq->account, base));
    free(bks);
    snprintf(path, sizeof(path), "/v2/Services/%s/RateLimits/%s/Buckets", svc, rl);
    return http_v2_list(h, con, "buckets", path, all);
}

/* Bucket bk of rate limit rl into b: OTP_ENOTFOUND when it is another's. */
static enum otp_rc bucket_of(struct http *h, struct http_req *rq, const char *svc, const char *rl, const char *bk,
                             struct v2_bucket *b, char *err)
{
    enum otp_rc rc = v2_bk_get(h->v2, rq->account, svc, bk, b, err);

    return rc == OTP_OK && strcmp(b->rate_limit, rl) != 0 ? OTP_ENOTFOUND : rc;
}

enum MHD_Result http_v2_bk_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                 const char *rl, const char *bk)
{
    struct v2_bucket b;
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = bucket_of(h, rq, svc, rl, bk, &b, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "bucket fetch", err);
    return bk_answer(h, con, rq, 200, svc, &b);
}

enum MHD_Result http_v2_bk_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl, const char *bk)
{
    struct v2_bucket b;
    struct v2_form f;
    char err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    enum otp_rc rc;
    const char *why;

    if (!http_v2_form(h, con, rq, bk_fields, &f, &ret))
        return ret;
    if ((rc = bucket_of(h, rq, svc, rl, bk, &b, err)) != OTP_OK) {
        v2_form_free(&f);
        return http_v2_failed(h, con, rq, rc, "bucket update", err);
    }
    why = bucket_read(&f, 0, &b);
    v2_form_free(&f);
    if (why != NULL)
        return http_v2_invalid(h, con, why);
    if ((rc = v2_bk_update(h->v2, rq->caller, rq->account, svc, &b, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "bucket update", err);
    return bk_answer(h, con, rq, 200, svc, &b);
}

enum MHD_Result http_v2_bk_delete(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *rl, const char *bk)
{
    struct v2_bucket b;
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = bucket_of(h, rq, svc, rl, bk, &b, err)) != OTP_OK ||
        (rc = v2_bk_delete(h->v2, rq->caller, rq->account, svc, bk, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "bucket delete", err);
    return http_no_content(con);
}
