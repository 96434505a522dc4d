/*
 * otp_text: what an issue's message says. At issue, its style (sms.h):
 * the template of its locale, its app hash and its caller's origin line,
 * checked against the one bound every message has (CFG_TEXT_MAX) before
 * anything is taken; at send time, the text in that style, by whichever
 * instance sends it, with the templates it has then (a locale a reload
 * removed falls back to otp.template).
 */
#include <stdio.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/wipe.h"
#include "otp_int.h"

/* A locale as an issue may name it: any tag, matched against
 * otp.templates (itself, then its language); others get otp.template. */
#define OTP_LOCALE_MAX 35
#define OTP_LOCALE_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

/* The caller's origin (api_keys[].webotp_origin), "" when none. */
static const char *origin_of(const struct otp *o, const char *api_key)
{
    const struct keys_conf *k = o->d.cfg.keys;
    size_t i;

    for (i = 0; k != NULL && i < k->n_api_keys; i++)
        if (strcmp(k->api_keys[i].name, api_key) == 0)
            return k->api_keys[i].webotp_origin;
    return "";
}

int otp_style(struct otp *o, const struct otp_req *rq, char *out, size_t cap, struct otp_answer *a)
{
    const struct cfg_template *t;
    char tmpl[CFG_STR_MAX];
    struct sms_style s;
    size_t len;

    memset(&s, 0, sizeof(s));
    out[0] = '\0';
    if (rq->locale != NULL && (rq->locale[0] == '\0' || strlen(rq->locale) > OTP_LOCALE_MAX ||
                               strspn(rq->locale, OTP_LOCALE_CHARS) != strlen(rq->locale))) {
        otp_answer_set(a, OUT_INVALID_REQUEST, "locale must be 1 to %d of A-Z, a-z, 0-9, '-' and '_'",
                       OTP_LOCALE_MAX);
        return -1;
    }
    if (rq->app_hash != NULL) {
        if (!sms_app_hash_ok(rq->app_hash)) {
            otp_answer_set(a, OUT_INVALID_REQUEST, "app_hash must be 11 characters of A-Z, a-z, 0-9, + and /");
            return -1;
        }
        snprintf(s.app_hash, sizeof(s.app_hash), "%s", rq->app_hash);
    }
    snprintf(s.origin, sizeof(s.origin), "%s", origin_of(o, rq->api_key));
    if (rq->name != NULL && strlen(rq->name) >= sizeof(s.name)) {
        otp_answer_set(a, OUT_INVALID_REQUEST, "the name is longer than %d bytes", CFG_MSG_NAME_MAX);
        return -1;
    }
    snprintf(s.name, sizeof(s.name), "%s", rq->name ? rq->name : "");
    pthread_mutex_lock(&o->live_mu);
    t = sms_locale(o->templates, o->n_templates, rq->locale);
    if (t != NULL)
        snprintf(s.locale, sizeof(s.locale), "%s", t->locale);
    snprintf(tmpl, sizeof(tmpl), "%s", t != NULL ? t->tmpl : o->tmpl);
    pthread_mutex_unlock(&o->live_mu);
    if ((len = sms_len_max(tmpl, &s, o->d.cfg.otp->length)) > CFG_TEXT_MAX) {
        otp_answer_set(a, OUT_INVALID_REQUEST, "the message would be up to %zu bytes, over the bound of %d", len,
                       CFG_TEXT_MAX);
        return -1;
    }
    sms_style_text(&s, out, cap);
    return 0;
}

enum otp_rc otp_render_msg(void *ctx, const char *id, const char *vid, const char *style, int64_t expires_ms,
                           int64_t accepted_ms, char *text, size_t cap, char *dlr_query, size_t dlr_cap)
{
    struct otp *o = ctx;
    int64_t now_ms = clock_wall_ms();
    char code[CODE_MAX_DIGITS + 1], tmpl[CFG_STR_MAX];
    const struct cfg_template *t;
    struct sms_style s;
    enum otp_rc rc;

    /* The report URL's expiry counts from the acceptance (Redis's clock,
     * as the ledger's created_ms). */
    if (report_query(o->report, id, accepted_ms > 0 ? accepted_ms : now_ms, dlr_query, dlr_cap) != OTP_OK)
        return OTP_EINVAL;
    sms_style_parse(style ? style : "", &s);
    pthread_mutex_lock(&o->live_mu);
    t = s.locale[0] ? sms_locale(o->templates, o->n_templates, s.locale) : NULL;
    snprintf(tmpl, sizeof(tmpl), "%s", t != NULL ? t->tmpl : o->tmpl);
    pthread_mutex_unlock(&o->live_mu);
    code_derive(o->d.keys, vid, o->d.cfg.otp->length, code);
    rc = sms_render(tmpl, &s, code, code_minutes(expires_ms - now_ms), text, cap);
    wipe(code, sizeof(code));
    return rc;
}
