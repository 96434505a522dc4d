/*
 * config_otp: the keys about who may ask for a code and what it is: the
 * callers (api_keys), otp (its template must hold the code and fit one
 * SMS), and the gates decided before any rule: phone.types, countries and
 * pumping. Runs at start-up and on SIGHUP, never on a request path.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"
#include "phone.h"

const char *const cfg_role_names[] = {"admin", NULL};

/* A caller's name is a metric label, a log field and part of Redis keys. */
#define CFG_CALLER_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

/* 1 when s is a Twilio SID of kind prefix ("AC"): the two letters, then
 * 32 hex digits. */
static int cfg_sid_ok(const char *s, const char *prefix)
{
    return strlen(s) == CFG_SID_LEN && strncmp(s, prefix, 2) == 0 &&
           strspn(s + 2, "0123456789abcdefABCDEF") == CFG_SID_LEN - 2;
}

/* 1 when sid is already an account or API key SID of a caller before a. */
static int cfg_sid_taken(const struct config *c, const struct cfg_api_key *a, const char *sid)
{
    const struct cfg_api_key *b;
    size_t j;

    for (b = c->keys.api_keys; b < a; b++) {
        if (strcasecmp(b->tw_account, sid) == 0)
            return 1;
        for (j = 0; j < b->n_tw_keys; j++)
            if (strcasecmp(b->tw_keys[j].sid, sid) == 0)
                return 1;
    }
    for (j = 0; j < a->n_tw_keys; j++)
        if (strcasecmp(a->tw_keys[j].sid, sid) == 0)
            return 1;
    return 0;
}

/* api_keys[].twilio (at p): the caller's Twilio account on /v2, and the
 * API keys tied to it. */
static void cfg_twilio(struct cfg_ctx *x, struct config *c, struct cfg_api_key *a, json_t *k, const char *p)
{
    json_t *tw = json_object_get(k, "twilio"), *arr, *e;
    char q[96], r[128], sid[CFG_SID_LEN + 2];
    size_t i;

    if (tw == NULL)
        return;
    cfg_path(q, sizeof(q), p, "twilio");
    if (!json_is_object(tw)) {
        cfg_error(x, q, "must be an object");
        return;
    }
    if (a->admin)
        cfg_error(x, q, "an admin key has no Twilio account: /v2 is for callers");
    cfg_unknown(x, tw, q, "api_keys.*.twilio");
    if (cfg_str(x, tw, q, "account_sid", 1, sid, sizeof(sid))) {
        cfg_path(r, sizeof(r), q, "account_sid");
        if (!cfg_sid_ok(sid, "AC"))
            cfg_error(x, r, "must be AC and 32 hex digits");
        else if (cfg_sid_taken(c, a, sid))
            cfg_error(x, r, "%s is used twice", sid);
        else
            memcpy(a->tw_account, sid, CFG_SID_LEN + 1); /* cfg_sid_ok: exactly CFG_SID_LEN */
    }
    if ((arr = json_object_get(tw, "api_keys")) == NULL)
        return;
    cfg_path(r, sizeof(r), q, "api_keys");
    if (!json_is_array(arr) || json_array_size(arr) > CFG_TW_KEYS_MAX) {
        cfg_error(x, r, "must be an array of at most %d keys", CFG_TW_KEYS_MAX);
        return;
    }
    json_array_foreach(arr, i, e) {
        char s[160], t[176];
        snprintf(s, sizeof(s), "%s.%zu", r, i);
        if (!json_is_object(e)) {
            cfg_error(x, s, "must be an object");
            continue;
        }
        cfg_unknown(x, e, s, "api_keys.*.twilio.api_keys.*");
        if (!cfg_str(x, e, s, "sid", 1, sid, sizeof(sid)))
            continue;
        cfg_path(t, sizeof(t), s, "sid");
        if (!cfg_sid_ok(sid, "SK")) {
            cfg_error(x, t, "must be SK and 32 hex digits");
            continue;
        }
        if (cfg_sid_taken(c, a, sid)) {
            cfg_error(x, t, "%s is used twice", sid);
            continue;
        }
        memcpy(a->tw_keys[a->n_tw_keys].sid, sid, CFG_SID_LEN + 1);
        a->tw_keys[a->n_tw_keys++].secret = cfg_env(x, e, s, "secret_env", 1, 16);
    }
}

/* api_keys[].webotp_origin: a host name (letters, digits, '-' and '.',
 * labels of 1 to 63), as WebOTP's origin-bound line names it. */
static void cfg_origin(struct cfg_ctx *x, struct cfg_api_key *a, json_t *k, const char *p)
{
    char q[96];
    const char *s, *label;

    if (!cfg_str(x, k, p, "webotp_origin", 0, a->webotp_origin, sizeof(a->webotp_origin)) ||
        json_object_get(k, "webotp_origin") == NULL)
        return;
    cfg_path(q, sizeof(q), p, "webotp_origin");
    for (s = label = a->webotp_origin;; s++) {
        if (*s == '.' || *s == '\0') {
            if (s == label || s - label > 63 || *label == '-' || s[-1] == '-')
                break;
            if (*s == '\0')
                return;
            label = s + 1;
        } else if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                     *s == '-')) {
            break;
        }
    }
    cfg_error(x, q, "must be a host name (\"login.example.com\"): labels of letters, digits and '-'");
    a->webotp_origin[0] = '\0';
}

void cfg_api_keys(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *arr = json_object_get(root, "api_keys"), *k;
    size_t i, j;
    char p[64], q[80];
    int role;

    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 256) {
        cfg_error(x, "api_keys", "must be an array of 1 to 256 keys");
        return;
    }
    /* Out of memory is a load error like any other: a config that silently
     * lost its keys, rules, prices or caps must never load. */
    if ((c->keys.api_keys = cfg_calloc(json_array_size(arr), sizeof(*c->keys.api_keys))) == NULL) {
        cfg_error(x, "api_keys", "out of memory");
        return;
    }
    json_array_foreach(arr, i, k) {
        struct cfg_api_key *a = &c->keys.api_keys[c->keys.n_api_keys++];
        snprintf(p, sizeof(p), "api_keys.%zu", i);
        if (!json_is_object(k)) {
            cfg_error(x, p, "must be an object");
            continue;
        }
        cfg_unknown(x, k, p, "api_keys.*");
        cfg_path(q, sizeof(q), p, "name");
        /* The name is a metric label, a log field and part of Redis keys:
         * nothing there may need quoting. */
        if (cfg_str(x, k, p, "name", 1, a->name, sizeof(a->name)) &&
            (a->name[0] == '\0' || strspn(a->name, CFG_CALLER_CHARS) != strlen(a->name))) {
            cfg_error(x, q, "must be 1 to %d of A-Z, a-z, 0-9, '.', '_' and '-'", CFG_NAME_MAX - 1);
            a->name[0] = '\0';
        }
        a->key = cfg_env(x, k, p, "key_env", 1, 16);
        if (cfg_enum(x, k, p, "role", 0, cfg_role_names, &role))
            a->admin = 1;
        cfg_twilio(x, c, a, k, p);
        cfg_origin(x, a, k, p);
        for (j = 0; j + 1 < c->keys.n_api_keys; j++)
            if (a->name[0] && strcmp(c->keys.api_keys[j].name, a->name) == 0)
                cfg_error(x, q, "\"%s\" is used twice", a->name);
    }
}

size_t config_origin_line(const char *origin, int digits)
{
    return origin[0] ? strlen("\n@") + strlen(origin) + strlen(" #") + (size_t)digits : 0;
}

size_t config_rendered_max(const char *tmpl, int digits)
{
    size_t n = 0;

    while (*tmpl) {
        if (strncmp(tmpl, "{code}", 6) == 0)
            n += (size_t)digits, tmpl += 6;
        else if (strncmp(tmpl, "{minutes}", 9) == 0)
            n += 2, tmpl += 9;
        else if (strncmp(tmpl, "{name}", 6) == 0)
            n += CFG_MSG_NAME_MAX, tmpl += 6;
        else
            n++, tmpl++;
    }
    return n;
}

/* The longest origin-bound line a caller's messages end with. */
static size_t cfg_origin_line_max(const struct config *c)
{
    size_t i, n = 0;

    for (i = 0; i < c->keys.n_api_keys; i++) {
        const char *o = c->keys.api_keys[i].webotp_origin;
        if (o[0] && config_origin_line(o, c->otp.length) > n)
            n = config_origin_line(o, c->otp.length);
    }
    return n;
}

/* A template at path: it must hold the code, and fit one message with the
 * longest origin-bound line a caller adds and an app hash's line (an
 * issue's app_hash: "\n" and 11 characters), so that no message accepted
 * under it fails to render after a reload. */
static void cfg_template_check(struct cfg_ctx *x, const struct config *c, const char *path, const char *tmpl)
{
    size_t origin = cfg_origin_line_max(c);

    if (strstr(tmpl, "{code}") == NULL)
        cfg_error(x, path, "must contain {code}");
    else if (config_rendered_max(tmpl, c->otp.length) + origin + 12 > CFG_TEXT_MAX)
        cfg_error(x, path, "renders longer than %d bytes with an app hash's line%s", CFG_TEXT_MAX,
                  origin ? " and a caller's webotp_origin line" : "");
}

/* After otp's rows: the template must hold the code and fit one message. */
void cfg_otp(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *t = json_object_get(o, "template");

    /* Only a template that was read (a bad one is reported already). */
    if (!json_is_string(t) || strcmp(json_string_value(t), c->otp.tmpl) != 0)
        return;
    cfg_template_check(x, c, "otp.template", c->otp.tmpl);
}

/* otp.templates: "locale": "template" pairs. A locale is a language (2 or
 * 3 letters), then "-" and subtags of 2 to 8 letters or digits ("pt-BR",
 * "zh-Hant"), at most CFG_LOCALE_MAX bytes, each once (any case). */
static int cfg_locale_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"), m;

    if (n < 2 || n > 3 || strlen(s) > CFG_LOCALE_MAX)
        return 0;
    for (s += n; *s == '-'; s += m) {
        m = 1 + strspn(s + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
        if (m < 3 || m > 9)
            return 0;
    }
    return *s == '\0';
}

void cfg_templates(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *t = json_object_get(o, "templates"), *v;
    const char *locale;
    char p[64];
    size_t i;

    if (!json_is_object(t) || json_object_size(t) > CFG_TEMPLATES_MAX) {
        cfg_error(x, "otp.templates", "must be an object of at most %d \"locale\": \"template\" pairs",
                  CFG_TEMPLATES_MAX);
        return;
    }
    json_object_foreach(t, locale, v) {
        struct cfg_template *e = &c->otp.templates[c->otp.n_templates];
        snprintf(p, sizeof(p), "otp.templates.%.32s", locale);
        if (!cfg_locale_ok(locale)) {
            cfg_error(x, p, "must be a locale: a language of 2 or 3 letters, then -subtags (\"pt-BR\")");
            continue;
        }
        for (i = 0; i < c->otp.n_templates && strcasecmp(c->otp.templates[i].locale, locale) != 0; i++)
            ;
        if (i < c->otp.n_templates) {
            cfg_error(x, p, "is given twice");
            continue;
        }
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 320) {
            cfg_error(x, p, "must be a template of 1 to 320 bytes");
            continue;
        }
        snprintf(e->locale, sizeof(e->locale), "%s", locale);
        snprintf(e->tmpl, sizeof(e->tmpl), "%s", json_string_value(v));
        cfg_template_check(x, c, p, e->tmpl);
        c->otp.n_templates++;
    }
}


/* phone.types: a list of libphonenumber's type names; a number of any
 * other type is refused before any rule (403 number_type). */
void cfg_phone(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *types = json_object_get(o, "types"), *t;
    unsigned seen = 0;
    size_t i;
    char p[64];
    int type;

    if (!json_is_array(types) || json_array_size(types) == 0 || json_array_size(types) > PHONE_TYPE_COUNT) {
        cfg_error(x, "phone.types", "must be an array of 1 to %d number types", PHONE_TYPE_COUNT);
        return;
    }
    json_array_foreach(types, i, t) {
        snprintf(p, sizeof(p), "phone.types.%zu", i);
        if (!json_is_string(t) || (type = phone_type_from_name(json_string_value(t))) < 0)
            cfg_error(x, p,
                      "must be one of mobile, fixed_line, fixed_line_or_mobile, toll_free, premium_rate, "
                      "shared_cost, voip, personal_number, pager, uan, voicemail, unknown");
        else if (seen & PHONE_TYPE_BIT(type))
            cfg_error(x, p, "\"%s\" is listed twice", json_string_value(t));
        else
            seen |= PHONE_TYPE_BIT(type);
    }
    c->limits.phone_types = seen;
}

/* One list of countries (allow, deny or monitor): region codes that
 * libphonenumber gives ("IN", "GB", "001"), each at most once. Returns
 * how many were read into out; *present says whether the list was there. */
static size_t cfg_regions(struct cfg_ctx *x, json_t *o, const char *name, char (*out)[CFG_REGION_LEN],
                          int *present)
{
    json_t *arr = cfg_member(x, o, "countries", name, 0), *t;
    size_t i, j, n = 0;
    char p[64];

    *present = arr != NULL;
    if (arr == NULL)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > CFG_REGIONS_MAX) {
        cfg_error(x, cfg_path(p, sizeof(p), "countries", name), "must be an array of at most %d region codes",
                  CFG_REGIONS_MAX);
        return 0;
    }
    json_array_foreach(arr, i, t) {
        const char *r = json_is_string(t) ? json_string_value(t) : NULL;
        snprintf(p, sizeof(p), "countries.%s.%zu", name, i);
        if (r == NULL || !phone_region_known(r)) {
            cfg_error(x, p, "must be a region code as libphonenumber gives it (ISO 3166 alpha-2 in upper case, "
                      "such as \"IN\" or \"GB\", or \"001\" for non-geographic numbers)");
            continue;
        }
        for (j = 0; j < n && strcmp(out[j], r) != 0; j++)
            ;
        if (j < n) {
            cfg_error(x, p, "\"%s\" is listed twice", r);
            continue;
        }
        snprintf(out[n++], CFG_REGION_LEN, "%s", r);
    }
    return n;
}

void cfg_countries_allow(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_allow = cfg_regions(x, o, "allow", c->limits.countries.allow, &present);
    c->limits.countries.has_allow = 1;
    if (c->limits.countries.n_allow == 0)
        cfg_error(x, "countries.allow", "must list at least one region (an empty allow list serves nobody; "
                  "leave it out to serve every region)");
}

void cfg_countries_deny(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_deny = cfg_regions(x, o, "deny", c->limits.countries.deny, &present);
}

void cfg_countries_monitor(struct cfg_ctx *x, struct config *c, json_t *o)
{
    int present;

    c->limits.countries.n_monitor = cfg_regions(x, o, "monitor", c->limits.countries.monitor, &present);
}

/* countries: allow, deny and monitor by region (docs/architecture.md,
 * "Limits and rules"), decided before any rule (src/limits/fraud.c); after
 * the three lists. */
void cfg_countries(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct cfg_countries *k = &c->limits.countries;
    size_t i, j;
    char p[64];

    (void)o;
    for (i = 0; i < k->n_deny; i++)
        for (j = 0; j < k->n_allow; j++)
            if (strcmp(k->deny[i], k->allow[j]) == 0) {
                snprintf(p, sizeof(p), "countries.deny.%zu", i);
                cfg_error(x, p, "\"%s\" is in both allow and deny", k->deny[i]);
            }
}

/* pumping: the SMS pumping guard (docs/architecture.md, "Limits and
 * rules"); absent = off, and present (even {}) = on with the table's
 * defaults. */
void cfg_pumping(struct cfg_ctx *x, struct config *c, json_t *o)
{
    (void)x;
    (void)o;
    c->limits.pumping.on = 1;
}
