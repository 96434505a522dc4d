/*
 * v2_json: the resources as Twilio's Verify v2 document shapes them
 * (verify.v2.service, verify.v2.service.verification, ...verification_check
 * and the list envelope). Pure: the caller gives every value, times
 * included; each URL starts with base ("https://otp.example.com").
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "v2.h"

void v2_date(int64_t s, char *out, size_t cap)
{
    time_t t = (time_t)s;
    struct tm tm;

    if (gmtime_r(&t, &tm) == NULL || strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, cap, "1970-01-01T00:00:00Z");
}

/* base, path and tail, as a JSON string. */
static json_t *url(const char *base, const char *path, const char *tail)
{
    char u[512];

    snprintf(u, sizeof(u), "%s%s%s", base, path, tail);
    return json_string(u);
}

json_t *v2_service_json(const struct v2_service *s, const char *account, const char *base)
{
    char created[32], updated[32], svc[128];
    json_t *links;

    v2_date(s->created_s, created, sizeof(created));
    v2_date(s->updated_s, updated, sizeof(updated));
    snprintf(svc, sizeof(svc), "/v2/Services/%s", s->sid);
    links = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "verification_checks",
                      url(base, svc, "/VerificationCheck"), "verifications",
                      url(base, svc, "/Verifications"), "rate_limits", url(base, svc, "/RateLimits"),
                      "messaging_configurations", url(base, svc, "/MessagingConfigurations"), "entities",
                      url(base, svc, "/Entities"), "webhooks", url(base, svc, "/Webhooks"),
                      "access_tokens", url(base, svc, "/AccessTokens"));
    return json_pack("{s:s, s:s, s:s, s:i, s:b, s:b, s:b, s:b, s:n, s:b, s:b,"
                     " s:{s:b, s:n, s:n}, s:{s:n, s:n, s:n, s:n}, s:n, s:{s:n, s:n}, s:n, s:b,"
                     " s:s, s:s, s:o, s:o}",
                     "sid", s->sid, "account_sid", account, "friendly_name", s->friendly_name, "code_length",
                     s->code_length, "lookup_enabled", s->lookup_enabled, "psd2_enabled", 0,
                     "skip_sms_to_landlines", s->skip_landlines, "dtmf_input_required", 0, "tts_name",
                     "do_not_share_warning_enabled", 0, "custom_code_enabled", 0, "push", "include_date", 0,
                     "apn_credential_sid", "fcm_credential_sid", "totp", "issuer", "time_step", "code_length",
                     "skew", "default_template_sid", "whatsapp", "msg_service_sid", "from", "passkeys",
                     "verify_event_subscription_enabled", 0, "date_created", created, "date_updated", updated,
                     "url", url(base, svc, ""), "links", links);
}

json_t *v2_ver_json(const struct v2_verification *v, const char *account, const char *base)
{
    char created[32], updated[32], when[32], path[128];
    json_t *att = json_array();
    size_t i;

    if (att == NULL)
        return NULL;
    for (i = 0; i < v->n_attempts; i++) {
        char sid[V2_SID_LEN + 1];
        v2_date(v->attempts[i].time_s, when, sizeof(when));
        snprintf(sid, sizeof(sid), "VL%s", v->attempts[i].mid);
        json_array_append_new(att, json_pack("{s:s, s:s, s:s}", "time", when, "channel", "sms", "attempt_sid", sid));
    }
    v2_date(v->created_s, created, sizeof(created));
    v2_date(v->updated_s, updated, sizeof(updated));
    snprintf(path, sizeof(path), "/v2/Services/%s/Verifications/%s", v->service, v->sid);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b, s:{}, s:n, s:n, s:o, s:s, s:s, s:n, s:o}", "sid", v->sid,
                     "service_sid", v->service, "account_sid", account, "to", v->to, "channel", "sms", "status",
                     v->status, "valid", strcmp(v->status, "approved") == 0, "lookup", "amount", "payee",
                     "send_code_attempts", att, "date_created", created, "date_updated", updated, "sna", "url",
                     url(base, path, ""));
}

json_t *v2_check_json(const struct v2_verification *v, const char *account)
{
    char created[32], updated[32];

    v2_date(v->created_s, created, sizeof(created));
    v2_date(v->updated_s, updated, sizeof(updated));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b, s:n, s:n, s:[], s:s, s:s}", "sid", v->sid, "service_sid",
                     v->service, "account_sid", account, "to", v->to, "channel", "sms", "status", v->status,
                     "valid", strcmp(v->status, "approved") == 0, "amount", "payee", "sna_attempts_error_codes",
                     "date_created", created, "date_updated", updated);
}

json_t *v2_list_json(const char *key, json_t *items, const char *base, const char *path, long page, long size,
                     int more)
{
    char first[512], cur[512], prev[512], next[512];

    snprintf(first, sizeof(first), "%s%s?PageSize=%ld&Page=0", base, path, size);
    snprintf(cur, sizeof(cur), "%s%s?PageSize=%ld&Page=%ld", base, path, size, page);
    snprintf(prev, sizeof(prev), "%s%s?PageSize=%ld&Page=%ld", base, path, size, page - 1);
    snprintf(next, sizeof(next), "%s%s?PageSize=%ld&Page=%ld", base, path, size, page + 1);
    return json_pack("{s:o, s:{s:i, s:i, s:s, s:o, s:s, s:o, s:s}}", key, items, "meta", "page", (int)page,
                     "page_size", (int)size, "first_page_url", first, "previous_page_url",
                     page > 0 ? json_string(prev) : json_null(), "url", cur, "next_page_url",
                     more ? json_string(next) : json_null(), "key", key);
}

json_t *v2_rl_json(const struct v2_rate_limit *r, const char *svc, const char *account, const char *base)
{
    char created[32], updated[32], path[160];

    v2_date(r->created_s, created, sizeof(created));
    v2_date(r->updated_s, updated, sizeof(updated));
    snprintf(path, sizeof(path), "/v2/Services/%s/RateLimits/%s", svc, r->sid);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:{s:o}}", "sid", r->sid, "service_sid", svc,
                     "account_sid", account, "unique_name", r->unique_name, "description", r->description,
                     "date_created", created, "date_updated", updated, "url", url(base, path, ""), "links",
                     "buckets", url(base, path, "/Buckets"));
}

json_t *v2_bk_json(const struct v2_bucket *b, const char *svc, const char *account, const char *base)
{
    char created[32], updated[32], path[200];

    v2_date(b->created_s, created, sizeof(created));
    v2_date(b->updated_s, updated, sizeof(updated));
    snprintf(path, sizeof(path), "/v2/Services/%s/RateLimits/%s/Buckets/%s", svc, b->rate_limit, b->sid);
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:o}", "sid", b->sid, "rate_limit_sid", b->rate_limit,
                     "service_sid", svc, "account_sid", account, "max", (json_int_t)b->max, "interval",
                     (json_int_t)b->interval_s, "date_created", created, "date_updated", updated, "url",
                     url(base, path, ""));
}
