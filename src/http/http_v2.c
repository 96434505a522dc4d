/*
 * http_v2: the Twilio Verify v2 surface (docs/twilio-verify.md). Basic
 * auth names a caller through its Twilio account; one route row takes
 * /v2/... and http_v2 routes it again by its segments. Errors are
 * Twilio's JSON ({code, message, more_info, status}, v2_error.c). This
 * file holds the services; http_v2_ver.c the verifications and checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../admin/admin.h"
#include "http_int.h"

/* ---- Auth, errors and answers ---- */

int http_v2_current(void)
{
    return http_cur != NULL && http_cur->route != NULL && (http_cur->route->flags & HTTP_TWILIO);
}

/* 1 when a equals b, in time that depends on b's length only. */
static int same_secret(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b), j;
    unsigned char diff = n != m;

    for (j = 0; j < m; j++)
        diff |= (unsigned char)(b[j] ^ (n ? a[j % n] : 0));
    return diff == 0;
}

const char *http_v2_auth(struct http *h, struct MHD_Connection *con, const char **account)
{
    char *pass = NULL, *user = MHD_basic_auth_get_username_password(con, &pass);
    const char *name = NULL;
    size_t i, j;

    *account = NULL;
    if (user == NULL || pass == NULL)
        goto out;
    for (i = 0; i < h->keys->n_api_keys; i++) {
        const struct cfg_api_key *k = &h->keys->api_keys[i];
        const char *want = NULL;
        if (k->tw_account[0] == '\0')
            continue;
        if (strcmp(user, k->tw_account) == 0)
            want = k->key;
        for (j = 0; j < k->n_tw_keys; j++)
            if (strcmp(user, k->tw_keys[j].sid) == 0)
                want = k->tw_keys[j].secret;
        if (want != NULL && same_secret(pass, want)) {
            name = k->name;
            *account = k->tw_account;
        }
    }
out:
    if (pass != NULL) {
        explicit_bzero(pass, strlen(pass));
        MHD_free(pass);
    }
    if (user != NULL)
        MHD_free(user);
    return name;
}

/* 405 20004 with Allow, when the route takes other methods. */
static enum MHD_Result wrong_method(struct http *h, struct MHD_Connection *con, const char *allow)
{
    struct http_out out;
    const struct v2_error *e = v2_error_of(OUT_METHOD_NOT_ALLOWED, V2_OP_ANY, V2_RULE_ANY);

    http_count(h, OUT_METHOD_NOT_ALLOWED);
    if (http_cur != NULL)
        snprintf(http_cur->outcome, sizeof(http_cur->outcome), "method_not_allowed");
    http_out_set(&out, e->status, "application/json", v2_error_text(e, NULL), NULL);
    return http_send(con, &out, allow);
}

enum MHD_Result http_v2_problem(struct http *h, struct MHD_Connection *con, enum otp_outcome o, const char *detail,
                                const struct otp_answer *a, const char *allow)
{
    if (o == OUT_METHOD_NOT_ALLOWED && allow != NULL)
        return wrong_method(h, con, allow);
    return http_v2_refuse(h, con, o, V2_OP_ANY, NULL, detail, a, 1);
}

/* The class of the rule called reason (the admin's copy of the rules,
 * current after a reload): keyed on the phone or on something else. */
static enum v2_rule rule_class(struct http *h, const char *reason)
{
    enum v2_rule c = V2_RULE_OTHER;
    struct cfg_rule *rules;
    size_t n, i;

    if (reason == NULL || reason[0] == '\0' || (rules = admin_rules_copy(otp_admin(h->otp), &n)) == NULL)
        return V2_RULE_OTHER;
    for (i = 0; i < n; i++)
        if (strcmp(rules[i].name, reason) == 0 &&
            (rules[i].key_mask & (1u << CFG_KEY_PHONE | 1u << CFG_KEY_PHONE_PREFIX)))
            c = V2_RULE_PHONE;
    free(rules);
    return c;
}

enum MHD_Result http_v2_refuse(struct http *h, struct MHD_Connection *con, enum otp_outcome o, enum v2_op op,
                               const char *reason, const char *detail, const struct otp_answer *a, int count)
{
    const struct v2_error *e = v2_error_of(o, op, rule_class(h, reason));
    const struct otp_outcome_row *row = otp_outcome_row(o);

    if (count)
        http_count(h, o);
    if (http_cur != NULL) {
        snprintf(http_cur->outcome, sizeof(http_cur->outcome), "%s", row->error);
        snprintf(http_cur->rule, sizeof(http_cur->rule), "%s", reason ? reason : "");
    }
    return http_reply(con, e->status, "application/json", v2_error_text(e, detail), a, NULL);
}

void http_v2_count(struct http *h, enum http_v2_op op, const struct otp_answer *a)
{
    if ((unsigned)op < HTTP_V2_OPS && (unsigned)a->outcome < OUT_COUNT)
        __atomic_fetch_add(&h->v2_decided[op][a->outcome], 1, __ATOMIC_RELAXED);
}

enum MHD_Result http_v2_json(struct MHD_Connection *con, unsigned status, json_t *j)
{
    return http_reply(con, status, "application/json", http_json_text(j), NULL, NULL);
}

void http_v2_base(struct http *h, struct MHD_Connection *con, char *out, size_t cap)
{
    const char *host = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);

    /* The Host is the client's own, answered only to it; still, only a
     * name, an address and a port make a URL here. */
    if (host == NULL || host[0] == '\0' || strlen(host) > 255 ||
        strspn(host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-:[]") != strlen(host))
        host = "localhost";
    snprintf(out, cap, "%s://%s", h->tls != NULL ? "https" : "http", host);
}

/* A refusal of the form or of a field: 400 60200 with the sentence. */
enum MHD_Result http_v2_invalid(struct http *h, struct MHD_Connection *con, const char *detail)
{
    return http_v2_refuse(h, con, OUT_INVALID_REQUEST, V2_OP_ANY, NULL, detail, NULL, 1);
}

/* 404 20404 naming the path, as Twilio's message does. */
enum MHD_Result http_v2_not_found(struct http *h, struct MHD_Connection *con, const struct http_req *rq)
{
    char d[300];

    snprintf(d, sizeof(d), "%.256s", rq->url);
    return http_v2_refuse(h, con, OUT_NOT_FOUND, V2_OP_ANY, NULL, d, NULL, 1);
}

/* A store failure: 503 20503, Retry-After 1, fail closed. */
enum MHD_Result http_v2_unavailable(struct http *h, struct MHD_Connection *con, const char *what, const char *err)
{
    struct otp_answer a = {.outcome = OUT_STORE_UNAVAILABLE, .rc = OTP_ESTORE, .retry_after_s = 1};

    log_msg(LOG_WARN, "v2: %s refused, store unavailable: %s", what, err);
    return http_v2_refuse(h, con, OUT_STORE_UNAVAILABLE, V2_OP_ANY, NULL, "the store is unavailable; try again",
                          &a, 1);
}

enum MHD_Result http_v2_failed(struct http *h, struct MHD_Connection *con, struct http_req *rq, enum otp_rc rc,
                               const char *what, const char *err)
{
    switch (rc) {
    case OTP_ENOTFOUND:
        return http_v2_not_found(h, con, rq);
    case OTP_EFULL:
    case OTP_EINVAL:
        return http_v2_invalid(h, con, err);
    default:
        return http_v2_unavailable(h, con, what, err);
    }
}

/* ---- Services ---- */

#define PSD2_WHY "is not supported by otpd"
static const struct v2_field svc_fields[] = {
    {"FriendlyName", V2_TAKE, NULL},
    {"CodeLength", V2_TAKE, NULL},
    {"LookupEnabled", V2_TAKE, NULL},
    {"SkipSmsToLandlines", V2_TAKE, NULL},
    {"DtmfInputRequired", V2_OFF_ONLY, NULL},
    {"Psd2Enabled", V2_OFF_ONLY, NULL},
    {"DoNotShareWarningEnabled", V2_OFF_ONLY, NULL},
    {"CustomCodeEnabled", V2_OFF_ONLY, NULL},
    {"VerifyEventSubscriptionEnabled", V2_OFF_ONLY, NULL},
    {"Push.IncludeDate", V2_OFF_ONLY, NULL},
    {"TtsName", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Push.ApnCredentialSid", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Push.FcmCredentialSid", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Totp.Issuer", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Totp.TimeStep", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Totp.CodeLength", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Totp.Skew", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"DefaultTemplateSid", V2_REFUSE, "is not supported by otpd: messages use otp.template"},
    {"Whatsapp.MsgServiceSid", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Whatsapp.From", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.RelyingParty.Id", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.RelyingParty.Name", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.RelyingParty.Origins", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.AuthenticatorAttachment", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.DiscoverableCredentials", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Passkeys.UserVerification", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {NULL, V2_TAKE, NULL},
};

/* The form's service fields over s (a create starts from the defaults);
 * 0, or -1 with a sentence in detail. */
static int svc_read(struct http *h, const struct v2_form *f, int create, struct v2_service *s, char *detail,
                    size_t cap)
{
    const char *name = v2_form_get(f, "FriendlyName"), *len = v2_form_get(f, "CodeLength");
    const char *lookup = v2_form_get(f, "LookupEnabled"), *skip = v2_form_get(f, "SkipSmsToLandlines");
    long n;

    if (create && name == NULL) {
        snprintf(detail, cap, "FriendlyName is required");
        return -1;
    }
    if (name != NULL) {
        if (name[0] == '\0' || v2_chars(name) > V2_NAME_MAX || strlen(name) >= sizeof(s->friendly_name)) {
            snprintf(detail, cap, "FriendlyName must be 1 to %d characters", V2_NAME_MAX);
            return -1;
        }
        snprintf(s->friendly_name, sizeof(s->friendly_name), "%s", name);
    }
    if (len != NULL) {
        if (v2_int(len, 4, 10, &n) < 0) {
            snprintf(detail, cap, "CodeLength must be a whole number from 4 to 10");
            return -1;
        }
        if (n != otp_code_length(h->otp)) {
            snprintf(detail, cap, "CodeLength must be %d: every code of this otpd has otp.length digits",
                     otp_code_length(h->otp));
            return -1;
        }
    }
    s->code_length = otp_code_length(h->otp);
    if ((lookup != NULL && v2_bool(lookup, &s->lookup_enabled) < 0) ||
        (skip != NULL && v2_bool(skip, &s->skip_landlines) < 0)) {
        snprintf(detail, cap, "%s must be true or false", lookup != NULL && v2_bool(lookup, &(int){0}) < 0
                                                               ? "LookupEnabled"
                                                               : "SkipSmsToLandlines");
        return -1;
    }
    if (s->skip_landlines && !s->lookup_enabled) {
        snprintf(detail, cap, "SkipSmsToLandlines needs LookupEnabled");
        return -1;
    }
    return 0;
}

/* Reads rq's body as a form of table into f; else answers the refusal. */
int http_v2_form(struct http *h, struct MHD_Connection *con, struct http_req *rq, const struct v2_field *table,
                 struct v2_form *f, enum MHD_Result *ret)
{
    char detail[200];

    if (v2_form_read(rq->body, rq->len, table, f, detail, sizeof(detail)) == 0)
        return 1;
    *ret = http_v2_invalid(h, con, detail);
    return 0;
}

static enum MHD_Result svc_answer(struct http *h, struct MHD_Connection *con, struct http_req *rq, unsigned status,
                                  const struct v2_service *s)
{
    char base[320];

    http_v2_base(h, con, base, sizeof(base));
    return http_v2_json(con, status, v2_service_json(s, rq->account, base));
}

static enum MHD_Result svc_create(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    struct v2_service s = {0};
    struct v2_form f;
    char detail[200], err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    enum otp_rc rc;
    int bad;

    if (!http_v2_form(h, con, rq, svc_fields, &f, &ret))
        return ret;
    bad = svc_read(h, &f, 1, &s, detail, sizeof(detail));
    v2_form_free(&f);
    if (bad)
        return http_v2_invalid(h, con, detail);
    if ((rc = v2_service_create(h->v2, rq->caller, rq->account, &s, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "service create", err);
    return svc_answer(h, con, rq, 201, &s);
}

static enum MHD_Result svc_update(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                  const char *sid)
{
    struct v2_service s;
    struct v2_form f;
    char detail[200], err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    enum otp_rc rc;
    int bad;

    if (!http_v2_form(h, con, rq, svc_fields, &f, &ret))
        return ret;
    if ((rc = v2_service_get(h->v2, rq->account, sid, &s, err)) != OTP_OK) {
        v2_form_free(&f);
        return http_v2_failed(h, con, rq, rc, "service update", err);
    }
    bad = svc_read(h, &f, 0, &s, detail, sizeof(detail));
    v2_form_free(&f);
    if (bad)
        return http_v2_invalid(h, con, detail);
    if ((rc = v2_service_update(h->v2, rq->caller, rq->account, &s, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "service update", err);
    return svc_answer(h, con, rq, 200, &s);
}

static enum MHD_Result svc_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *sid)
{
    struct v2_service s;
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = v2_service_get(h->v2, rq->account, sid, &s, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "service fetch", err);
    return svc_answer(h, con, rq, 200, &s);
}

static enum MHD_Result svc_delete(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *sid)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if ((rc = v2_service_delete(h->v2, rq->caller, rq->account, sid, err)) != OTP_OK)
        return http_v2_failed(h, con, rq, rc, "service delete", err);
    return http_no_content(con);
}

/* A list's PageSize (1 to 1000, 50 by default) and Page (from 0); 0, or
 * -1 with the refusal sent. PageToken is taken and unused: a page is
 * found by its number. */
static int paging(struct http *h, struct MHD_Connection *con, long *page, long *size, enum MHD_Result *ret)
{
    const char *ps = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "PageSize");
    const char *pg = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "Page");

    *size = 50;
    *page = 0;
    if ((ps != NULL && v2_int(ps, 1, 1000, size) < 0) || (pg != NULL && v2_int(pg, 0, 100000, page) < 0)) {
        *ret = http_v2_invalid(h, con, "PageSize must be 1 to 1000 and Page a whole number from 0");
        return -1;
    }
    return 0;
}

enum MHD_Result http_v2_list(struct http *h, struct MHD_Connection *con, const char *key, const char *path,
                             json_t *all)
{
    char base[320];
    enum MHD_Result ret;
    long page, size;
    json_t *items;
    size_t i, n = json_array_size(all);

    if (paging(h, con, &page, &size, &ret) < 0) {
        json_decref(all);
        return ret;
    }
    http_v2_base(h, con, base, sizeof(base));
    if ((items = json_array()) != NULL)
        for (i = (size_t)(page * size); i < n && i < (size_t)((page + 1) * size); i++)
            json_array_append(items, json_array_get(all, i));
    json_decref(all);
    return http_v2_json(con, 200, v2_list_json(key, items, base, path, page, size, (size_t)((page + 1) * size) < n));
}

static enum MHD_Result svc_list(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    struct v2_service *svcs;
    char err[OTP_ERR_LEN] = "", base[320];
    json_t *all;
    size_t n, i;

    if (v2_service_list(h->v2, rq->account, &svcs, &n, err) != OTP_OK)
        return http_v2_unavailable(h, con, "service list", err);
    http_v2_base(h, con, base, sizeof(base));
    if ((all = json_array()) != NULL)
        for (i = 0; i < n; i++)
            json_array_append_new(all, v2_service_json(&svcs[i], rq->account, base));
    free(svcs);
    return http_v2_list(h, con, "services", "/v2/Services", all);
}

/* ---- The router ---- */

#define V2_SEGMENTS 6

/* Splits the path below /v2/ into at most V2_SEGMENTS segments; their
 * number, or -1 for more or an empty one. */
static int split(const char *path, char seg[V2_SEGMENTS][V2_SID_LEN + 24])
{
    int n = 0;

    while (*path) {
        size_t len = strcspn(path, "/");
        if (n == V2_SEGMENTS || len == 0 || len >= V2_SID_LEN + 24)
            return -1;
        memcpy(seg[n], path, len);
        seg[n++][len] = '\0';
        path += len;
        if (*path == '/' && *++path == '\0')
            return -1;
    }
    return n;
}

/* /v2/Services/VA/RateLimits[/RK[/Buckets[/BL]]] (n segments). */
static enum MHD_Result rate_limits(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                   char seg[V2_SEGMENTS][V2_SID_LEN + 24], int n, int get, int post, int del)
{
    const char *svc = seg[1];

    if (n == 3)
        return get ? http_v2_rl_list(h, con, rq, svc) : post ? http_v2_rl_create(h, con, rq, svc)
                                                           : wrong_method(h, con, "GET, HEAD, POST");
    if (!v2_sid_ok(seg[3], "RK"))
        return http_v2_not_found(h, con, rq);
    if (n == 4)
        return get    ? http_v2_rl_fetch(h, con, rq, svc, seg[3])
               : post ? http_v2_rl_update(h, con, rq, svc, seg[3])
               : del  ? http_v2_rl_delete(h, con, rq, svc, seg[3])
                      : wrong_method(h, con, "GET, HEAD, POST, DELETE");
    if (strcmp(seg[4], "Buckets") != 0)
        return http_v2_not_found(h, con, rq);
    if (n == 5)
        return get ? http_v2_bk_list(h, con, rq, svc, seg[3]) : post ? http_v2_bk_create(h, con, rq, svc, seg[3])
                                                                     : wrong_method(h, con, "GET, HEAD, POST");
    if (!v2_sid_ok(seg[5], "BL"))
        return http_v2_not_found(h, con, rq);
    return get    ? http_v2_bk_fetch(h, con, rq, svc, seg[3], seg[5])
           : post ? http_v2_bk_update(h, con, rq, svc, seg[3], seg[5])
           : del  ? http_v2_bk_delete(h, con, rq, svc, seg[3], seg[5])
                  : wrong_method(h, con, "GET, HEAD, POST, DELETE");
}

enum MHD_Result http_v2(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char seg[V2_SEGMENTS][V2_SID_LEN + 24];
    int n = split(rq->url + strlen("/v2") + (rq->url[3] == '/'), seg);
    const char *method = rq->method;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    int del = strcmp(method, "DELETE") == 0;

    if (n < 1 || strcmp(seg[0], "Services") != 0)
        return http_v2_not_found(h, con, rq);
    if (n == 1)
        return get ? svc_list(h, con, rq) : post ? svc_create(h, con, rq) : wrong_method(h, con, "GET, HEAD, POST");
    if (!v2_sid_ok(seg[1], "VA"))
        return http_v2_not_found(h, con, rq);
    if (n == 2)
        return get    ? svc_fetch(h, con, rq, seg[1])
               : post ? svc_update(h, con, rq, seg[1])
               : del  ? svc_delete(h, con, rq, seg[1])
                      : wrong_method(h, con, "GET, HEAD, POST, DELETE");
    if (n == 3 && strcmp(seg[2], "Verifications") == 0)
        return post ? http_v2_ver_create(h, con, rq, seg[1]) : wrong_method(h, con, "POST");
    if (n == 4 && strcmp(seg[2], "Verifications") == 0)
        return get    ? http_v2_ver_fetch(h, con, rq, seg[1], seg[3])
               : post ? http_v2_ver_update(h, con, rq, seg[1], seg[3])
                      : wrong_method(h, con, "GET, HEAD, POST");
    if (n == 3 && strcmp(seg[2], "VerificationCheck") == 0)
        return post ? http_v2_check(h, con, rq, seg[1]) : wrong_method(h, con, "POST");
    if (n >= 3 && strcmp(seg[2], "RateLimits") == 0)
        return rate_limits(h, con, rq, seg, n, get, post, del);
    return http_v2_not_found(h, con, rq);
}
