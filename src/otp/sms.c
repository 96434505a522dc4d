/*
 * sms: a message's template, hash and origin line (sms.h).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "code.h"
#include "sms.h"

int sms_app_hash_ok(const char *s)
{
    return s != NULL && strlen(s) == SMS_APP_HASH_LEN &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") == SMS_APP_HASH_LEN;
}

const struct cfg_template *sms_locale(const struct cfg_template *t, size_t n, const char *locale)
{
    size_t i, lang;

    if (locale == NULL || locale[0] == '\0')
        return NULL;
    for (i = 0; i < n; i++)
        if (strcasecmp(t[i].locale, locale) == 0)
            return &t[i];
    lang = strcspn(locale, "-_");
    for (i = 0; i < n; i++)
        if (strlen(t[i].locale) == lang && strncasecmp(t[i].locale, locale, lang) == 0)
            return &t[i];
    return NULL;
}

void sms_style_text(const struct sms_style *s, char *out, size_t cap)
{
    if (s->locale[0] == '\0' && s->app_hash[0] == '\0' && s->origin[0] == '\0' && s->name[0] == '\0')
        snprintf(out, cap, "%s", "");
    else
        snprintf(out, cap, "%s\037%s\037%s\037%s", s->locale, s->app_hash, s->origin, s->name);
}

void sms_style_parse(const char *text, struct sms_style *out)
{
    const char *a = strchr(text, '\037'), *b = a ? strchr(a + 1, '\037') : NULL;
    const char *c = b ? strchr(b + 1, '\037') : NULL;
    size_t origin = c ? (size_t)(c - b - 1) : b ? strlen(b + 1) : 0;

    memset(out, 0, sizeof(*out));
    /* Three fields (before names) or four. */
    if (b == NULL || (c != NULL && strchr(c + 1, '\037') != NULL) || (size_t)(a - text) > CFG_LOCALE_MAX ||
        (b - a - 1 != 0 && b - a - 1 != SMS_APP_HASH_LEN) || origin > CFG_ORIGIN_MAX ||
        (c != NULL && strlen(c + 1) > CFG_MSG_NAME_MAX))
        return;
    memcpy(out->locale, text, (size_t)(a - text));
    memcpy(out->app_hash, a + 1, (size_t)(b - a - 1));
    memcpy(out->origin, b + 1, origin);
    if (c != NULL)
        snprintf(out->name, sizeof(out->name), "%s", c + 1);
}

size_t sms_len_max(const char *tmpl, const struct sms_style *s, int digits)
{
    return config_rendered_max(tmpl, digits) + (s->app_hash[0] ? 1 + SMS_APP_HASH_LEN : 0) +
           config_origin_line(s->origin, digits);
}

enum otp_rc sms_render(const char *tmpl, const struct sms_style *s, const char *code, int minutes, char *out,
                       size_t cap)
{
    size_t n;
    int w;

    if (code_render_named(tmpl, code, minutes, s->name, out, cap) != OTP_OK)
        return OTP_EINVAL;
    n = strlen(out);
    if (s->app_hash[0]) {
        w = snprintf(out + n, cap - n, "\n%s", s->app_hash);
        if (w < 0 || (size_t)w >= cap - n)
            return OTP_EINVAL;
        n += (size_t)w;
    }
    if (s->origin[0]) {
        w = snprintf(out + n, cap - n, "\n@%s #%s", s->origin, code);
        if (w < 0 || (size_t)w >= cap - n)
            return OTP_EINVAL;
    }
    return OTP_OK;
}
