/*
 * sms: what one message says beyond its code (docs/providers.md,
 * "Messages"): the template of the locale, Android's SMS Retriever
 * hash and the caller's origin-bound line. Chosen at issue, carried with
 * the message through Redis as its style text, and rendered by whichever
 * instance sends it. Pure: no clock, no I/O.
 */
#ifndef OTPD_SMS_H
#define OTPD_SMS_H

#include <stddef.h>

#include "../base/conf.h"
#include "../base/rc.h"

#define SMS_APP_HASH_LEN 11
#define SMS_STYLE_MAX (CFG_LOCALE_MAX + SMS_APP_HASH_LEN + CFG_ORIGIN_MAX + CFG_MSG_NAME_MAX + 4)

/* One message's style. Each "" when none. */
struct sms_style {
    char locale[CFG_LOCALE_MAX + 1]; /* a locale of otp.templates, as configured; "": otp.template */
    char app_hash[SMS_APP_HASH_LEN + 1];
    char origin[CFG_ORIGIN_MAX + 1];
    char name[CFG_MSG_NAME_MAX + 1]; /* a template's {name}: a Verify service's (no control character) */
};

/* 1 when s is an SMS Retriever hash: 11 characters of base64's alphabet. */
int sms_app_hash_ok(const char *s);

/* The configured locale of t (n of them) for an issue's locale: itself
 * (any case), else its language alone ("pt" for "pt-BR"); NULL when none
 * (the default template). */
const struct cfg_template *sms_locale(const struct cfg_template *t, size_t n, const char *locale);

/* The style's text, as the message carries it ("" when all are ""), into
 * out (SMS_STYLE_MAX + 1 bytes); and back. A text that is no style reads
 * as the default one. */
void sms_style_text(const struct sms_style *s, char *out, size_t cap);
void sms_style_parse(const char *text, struct sms_style *out);

/* The longest message tmpl renders to in style s with digits-digit codes. */
size_t sms_len_max(const char *tmpl, const struct sms_style *s, int digits);

/* tmpl with code, minutes and the style's name in style s into out (cap
 * bytes): the text,
 * then the hash on a line of its own, then "@<origin> #<code>" last, as
 * WebOTP wants it. OTP_EINVAL when it does not fit. */
enum otp_rc sms_render(const char *tmpl, const struct sms_style *s, const char *code, int minutes, char *out,
                       size_t cap);

#endif
