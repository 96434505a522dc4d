/*
 * http_v2_ver: a Verify service's verifications and checks. Each is otp's
 * issue, cancel or verify for the caller, with the service's SID as the
 * purpose (so codes never cross services, and no /v1 purpose, at most 32
 * bytes, can name one), plus the verification's record (v2.c) that
 * Twilio's answers read: its number, status, dates and send attempts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "http_int.h"

static const struct v2_field ver_fields[] = {
    {"To", V2_TAKE, NULL},
    {"Channel", V2_TAKE, NULL},
    {"DeviceIp", V2_TAKE, NULL},
    {"Tags", V2_TAKE, NULL},
    {"RiskCheck", V2_TAKE, NULL},
    {"EnableSnaClientToken", V2_OFF_ONLY, NULL},
    {"Locale", V2_TAKE, NULL},
    {"CustomFriendlyName", V2_TAKE, NULL},
    {"CustomMessage", V2_REFUSE, "is not supported: every message is the operator's otp.template"},
    {"CustomCode", V2_REFUSE, "is not supported: otpd derives every code and never stores one"},
    {"SendDigits", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"Amount", V2_REFUSE, "is not supported by otpd: PSD2 verifications are not served"},
    {"Payee", V2_REFUSE, "is not supported by otpd: PSD2 verifications are not served"},
    {"RateLimits", V2_TAKE, NULL},
    {"ChannelConfiguration", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {"AppHash", V2_TAKE, NULL},
    {"TemplateSid", V2_REFUSE, "is not supported by otpd: every message is otp.template"},
    {"TemplateCustomSubstitutions", V2_REFUSE, "is not supported by otpd: every message is otp.template"},
    {NULL, V2_TAKE, NULL},
};

static const struct v2_field update_fields[] = {
    {"Status", V2_TAKE, NULL},
    {NULL, V2_TAKE, NULL},
};

static const struct v2_field check_fields[] = {
    {"Code", V2_TAKE, NULL},
    {"To", V2_TAKE, NULL},
    {"VerificationSid", V2_TAKE, NULL},
    {"Amount", V2_REFUSE, "is not supported by otpd: PSD2 verifications are not served"},
    {"Payee", V2_REFUSE, "is not supported by otpd: PSD2 verifications are not served"},
    {"SnaClientToken", V2_REFUSE, "is not supported by otpd: it sends SMS only"},
    {NULL, V2_TAKE, NULL},
};

#define TAGS_MAX 10
#define TAG_LEN_MAX 128

/* Tags: a JSON object of at most 10 strings, keys and values at most 128
 * characters each. 1 when fine. */
static int tags_ok(const char *text)
{
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL), *v;
    const char *k;
    int ok;

    ok = json_is_object(j) && json_object_size(j) <= TAGS_MAX;
    json_object_foreach(j, k, v) {
        if (!ok)
            break;
        ok = strlen(k) <= TAG_LEN_MAX && json_is_string(v) && json_string_length(v) <= TAG_LEN_MAX;
    }
    json_decref(j);
    return ok;
}

/* The service at svc, into s; else answers 404 or 503 (0). */
static int service(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                   struct v2_service *s, enum MHD_Result *ret)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc = v2_service_get(h->v2, rq->account, svc, s, err);

    if (rc == OTP_OK)
        return 1;
    *ret = http_v2_failed(h, con, rq, rc, "verification", err);
    return 0;
}

/* phone as an otp request of rq's caller for service svc, into r (pi
 * holds what r points to); 0 with the refusal answered when phone is not
 * a valid number. */
static int request(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *phone,
                   const char *svc, struct phone_info *pi, struct otp_req *r, enum MHD_Result *ret)
{
    enum phone_err pe = phone_parse(phone, pi);
    char why[160], detail[200];

    if (pe != PHONE_OK) {
        phone_why(pe, pi, why, sizeof(why));
        snprintf(detail, sizeof(detail), "To must be an E.164 number: %s", why);
        *ret = http_v2_refuse(h, con, OUT_INVALID_PHONE, V2_OP_ANY, NULL, detail, NULL, 1);
        return 0;
    }
    memset(r, 0, sizeof(*r));
    r->api_key = rq->caller;
    r->phone = pi->e164;
    r->purpose = svc;
    memcpy(r->region, pi->region, sizeof(r->region));
    r->type = pi->type;
    return 1;
}

/* otp's refusal a of a send or a check, in Twilio's words. */
static enum MHD_Result refused(struct http *h, struct MHD_Connection *con, enum v2_op op, const struct otp_answer *a)
{
    const char *detail = strcmp(a->reason, V2_RULE_NAME) == 0 ? "a bucket of a rate limit in RateLimits is full"
                                                                : a->detail;

    return http_v2_refuse(h, con, a->outcome, op, a->reason, detail, a, 0);
}

static enum MHD_Result ver_answer(struct http *h, struct MHD_Connection *con, struct http_req *rq, unsigned status,
                                  const struct v2_verification *v)
{
    char base[320];

    http_v2_base(h, con, base, sizeof(base));
    return http_v2_json(con, status, v2_ver_json(v, rq->account, base));
}

enum MHD_Result http_v2_ver_create(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                   const char *svc)
{
    const char *to, *channel, *tags, *risk, *limits, *custom;
    struct limits_extra extra[LIMITS_EXTRA_MAX];
    struct v2_verification v;
    struct v2_rules rules;
    struct phone_info pi;
    struct otp_req r;
    struct otp_answer a;
    struct v2_form f;
    char err[OTP_ERR_LEN] = "", detail[200] = "", name[sizeof(rules.service.friendly_name)];
    enum MHD_Result ret;
    enum otp_rc rc;
    int bad, landline;

    if (!http_v2_form(h, con, rq, ver_fields, &f, &ret))
        return ret;
    to = v2_form_get(&f, "To");
    channel = v2_form_get(&f, "Channel");
    tags = v2_form_get(&f, "Tags");
    risk = v2_form_get(&f, "RiskCheck");
    if (to == NULL || channel == NULL)
        snprintf(detail, sizeof(detail), "%s is required", to == NULL ? "To" : "Channel");
    else if (strcmp(channel, "sms") != 0)
        snprintf(detail, sizeof(detail), "Channel %.32s is not supported by otpd: it sends sms only", channel);
    else if (tags != NULL && !tags_ok(tags))
        snprintf(detail, sizeof(detail), "Tags must be a JSON object of at most %d strings of at most %d characters",
                 TAGS_MAX, TAG_LEN_MAX);
    else if (risk != NULL && strcmp(risk, "enable") != 0)
        snprintf(detail, sizeof(detail), "RiskCheck must be enable: otpd's guards always apply");
    else if ((custom = v2_form_get(&f, "CustomFriendlyName")) != NULL &&
             (custom[0] == '\0' || v2_chars(custom) > V2_NAME_MAX))
        snprintf(detail, sizeof(detail), "CustomFriendlyName must be 1 to %d characters", V2_NAME_MAX);
    if (detail[0]) {
        v2_form_free(&f);
        return http_v2_invalid(h, con, detail);
    }
    if (!request(h, con, rq, to, svc, &pi, &r, &ret)) {
        v2_form_free(&f);
        return ret;
    }
    /* The service, its rate limits and their buckets: one Redis call. */
    if ((rc = v2_rules_get(h->v2, rq->account, svc, &rules, err)) != OTP_OK) {
        v2_form_free(&f);
        return http_v2_failed(h, con, rq, rc, "verification", err);
    }
    limits = v2_form_get(&f, "RateLimits");
    bad = limits != NULL && v2_extras(&rules, limits, extra, &r.n_extra, detail, sizeof(detail)) < 0;
    landline = rules.service.skip_landlines && pi.type == PHONE_TYPE_FIXED_LINE;
    /* The message's {name}: the verification's own, else its service's. */
    custom = v2_form_get(&f, "CustomFriendlyName");
    snprintf(name, sizeof(name), "%s", custom != NULL ? custom : rules.service.friendly_name);
    v2_rules_free(&rules);
    if (bad || landline) {
        v2_form_free(&f);
        return bad ? http_v2_invalid(h, con, detail)
                   : http_v2_refuse(h, con, OUT_NUMBER_TYPE, V2_OP_SEND, NULL, "the service skips landlines", NULL,
                                    1);
    }
    r.extra = extra;
    r.client_ip = v2_form_get(&f, "DeviceIp");
    r.locale = v2_form_get(&f, "Locale");
    r.app_hash = v2_form_get(&f, "AppHash");
    r.name = name;
    if (!otp_issue_screen(h->otp, &r, &a))
        otp_issue(h->otp, &r, &a);
    http_v2_count(h, HTTP_V2_ISSUE, &a);
    v2_form_free(&f);
    if (a.outcome != OUT_ACCEPTED)
        return refused(h, con, V2_OP_SEND, &a);
    if (v2_ver_sent(h->v2, rq->account, svc, pi.e164, a.verification_id, a.id, a.expires_in_s * 1000, &v, err) !=
        OTP_OK) {
        /* The message is queued: the answer stands, and fetches of this
         * verification will not find it. */
        log_msg(LOG_ERROR, "v2: verification %s sent without its record: %s", a.verification_id, err);
        memset(&v, 0, sizeof(v));
        snprintf(v.sid, sizeof(v.sid), "VE%s", a.verification_id);
        snprintf(v.service, sizeof(v.service), "%s", svc);
        snprintf(v.to, sizeof(v.to), "%s", pi.e164);
        snprintf(v.status, sizeof(v.status), "pending");
        v.created_s = v.updated_s = clock_wall_ms() / 1000;
        v.n_attempts = 1;
        v.attempts[0].time_s = v.created_s;
        snprintf(v.attempts[0].mid, sizeof(v.attempts[0].mid), "%s", a.id);
    }
    return ver_answer(h, con, rq, 201, &v);
}

/* The record of ve (a "VE..." SID) in service svc, into v; else answers
 * 404 or 503 (0). */
static int record(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc, const char *ve,
                  struct v2_verification *v, enum MHD_Result *ret)
{
    char err[OTP_ERR_LEN] = "";
    enum otp_rc rc;

    if (!v2_sid_ok(ve, "VE")) {
        *ret = http_v2_not_found(h, con, rq);
        return 0;
    }
    if ((rc = v2_ver_get(h->v2, rq->account, svc, ve + 2, v, err)) == OTP_OK)
        return 1;
    *ret = rc == OTP_ESTORE ? http_v2_unavailable(h, con, "verification fetch", err) : http_v2_not_found(h, con, rq);
    return 0;
}

enum MHD_Result http_v2_ver_fetch(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                  const char *ve)
{
    struct v2_verification v;
    enum MHD_Result ret;

    if (!record(h, con, rq, svc, ve, &v, &ret))
        return ret;
    return ver_answer(h, con, rq, 200, &v);
}

enum MHD_Result http_v2_ver_update(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc,
                                   const char *ve)
{
    struct v2_verification v;
    struct phone_info pi;
    struct otp_req r;
    struct otp_answer a;
    struct v2_form f;
    char status[16], err[OTP_ERR_LEN] = "";
    enum MHD_Result ret;
    const char *st;

    if (!http_v2_form(h, con, rq, update_fields, &f, &ret))
        return ret;
    st = v2_form_get(&f, "Status");
    if (st == NULL || (strcmp(st, "canceled") != 0 && strcmp(st, "approved") != 0)) {
        v2_form_free(&f);
        return http_v2_invalid(h, con, "Status must be canceled or approved");
    }
    snprintf(status, sizeof(status), "%s", st);
    v2_form_free(&f);
    if (!record(h, con, rq, svc, ve, &v, &ret))
        return ret;
    if (strcmp(v.status, "pending") != 0)
        return http_v2_not_found(h, con, rq);
    if (!request(h, con, rq, v.to, svc, &pi, &r, &ret))
        return ret;
    /* Either way its code stops working now, and its queued messages stop. */
    otp_cancel(h->otp, &r, &a);
    http_v2_count(h, HTTP_V2_CANCEL, &a);
    if (a.rc == OTP_ENOTFOUND)
        return http_v2_not_found(h, con, rq);
    if (a.rc != OTP_OK)
        return refused(h, con, V2_OP_ANY, &a);
    if (strcmp(a.verification_id, ve + 2) != 0)
        log_msg(LOG_WARN, "v2: %s of %s ended verification %s, the live one", status, ve, a.verification_id);
    if (v2_ver_status(h->v2, rq->account, svc, ve + 2, status, &v, err) != OTP_OK) {
        log_msg(LOG_ERROR, "v2: verification %s %s, its record not updated: %s", ve, status, err);
        snprintf(v.status, sizeof(v.status), "%s", status);
    }
    return ver_answer(h, con, rq, 200, &v);
}

/* A check of a verification whose code has ended (record v): 429 60202
 * when its wrong guesses spent it, as Twilio answers; else 404 20404 (an
 * approved, canceled or expired one). */
static enum MHD_Result ended(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                             const struct v2_verification *v)
{
    if (strcmp(v->status, "max_attempts_reached") == 0)
        return http_v2_refuse(h, con, OUT_LOCKED, V2_OP_CHECK, NULL, "every attempt of this verification is spent",
                              NULL, 1);
    return http_v2_not_found(h, con, rq);
}

enum MHD_Result http_v2_check(struct http *h, struct MHD_Connection *con, struct http_req *rq, const char *svc)
{
    const char *code, *to, *sid;
    struct v2_verification v = {0};
    struct v2_service s;
    struct phone_info pi;
    struct otp_req r;
    struct otp_answer a;
    struct v2_form f;
    char err[OTP_ERR_LEN] = "", phone[PHONE_MAX], guess[CODE_MAX_DIGITS + 2], status[24];
    enum MHD_Result ret;
    int known = 0;

    if (!http_v2_form(h, con, rq, check_fields, &f, &ret))
        return ret;
    code = v2_form_get(&f, "Code");
    to = v2_form_get(&f, "To");
    sid = v2_form_get(&f, "VerificationSid");
    if (code == NULL || (to == NULL) == (sid == NULL) || strlen(code) >= sizeof(guess) ||
        (to != NULL && strlen(to) >= sizeof(phone))) {
        v2_form_free(&f);
        return http_v2_invalid(h, con,
                       code == NULL ? "Code is required"
                       : (to == NULL) == (sid == NULL) ? "give either To or VerificationSid"
                                                         : "Code must be 4 to 10 digits and To an E.164 number");
    }
    snprintf(guess, sizeof(guess), "%s", code);
    if (to != NULL)
        snprintf(phone, sizeof(phone), "%s", to);
    if (sid != NULL)
        snprintf(v.sid, sizeof(v.sid), "%.34s", sid);
    v2_form_free(&f);
    if (!service(h, con, rq, svc, &s, &ret))
        return ret;
    if (v.sid[0]) {
        if (!record(h, con, rq, svc, v.sid, &v, &ret))
            return ret;
        if (strcmp(v.status, "pending") != 0)
            return ended(h, con, rq, &v);
        snprintf(phone, sizeof(phone), "%s", v.to);
        known = 1;
    }
    if (!request(h, con, rq, phone, svc, &pi, &r, &ret))
        return ret;
    if (!otp_verify_screen(h->otp, &r, guess, &a))
        otp_verify(h->otp, &r, guess, &a);
    http_v2_count(h, HTTP_V2_VERIFY, &a);
    if (a.outcome == OUT_NO_ACTIVE_CODE) {
        /* No live code: why, from the number's latest record. */
        if (v2_ver_by_phone(h->v2, rq->account, svc, pi.e164, &v, err) == OTP_OK)
            return ended(h, con, rq, &v);
        return http_v2_not_found(h, con, rq);
    }
    if (a.outcome != OUT_VERIFIED && a.outcome != OUT_INVALID_CODE)
        return refused(h, con, V2_OP_CHECK, &a);
    /* The record as it is now: approved when the code was right, spent
     * when this was its last wrong guess. */
    snprintf(status, sizeof(status), "%s",
             a.outcome == OUT_VERIFIED ? "approved" : a.attempts_left <= 0 ? "max_attempts_reached" : "pending");
    if ((strcmp(status, "pending") != 0 ? v2_ver_status(h->v2, rq->account, svc, a.verification_id, status, &v, err)
                                        : v2_ver_get(h->v2, rq->account, svc, a.verification_id, &v, err)) != OTP_OK) {
        if (!known) {
            memset(&v, 0, sizeof(v));
            v.created_s = v.updated_s = clock_wall_ms() / 1000;
        }
        snprintf(v.sid, sizeof(v.sid), "VE%s", a.verification_id);
        snprintf(v.service, sizeof(v.service), "%s", svc);
        snprintf(v.to, sizeof(v.to), "%s", pi.e164);
        log_msg(LOG_WARN, "v2: check of %s answered without its record: %s", v.sid, err[0] ? err : "none");
    }
    snprintf(v.status, sizeof(v.status), "%s", status);
    return http_v2_json(con, 200, v2_check_json(&v, rq->account));
}
