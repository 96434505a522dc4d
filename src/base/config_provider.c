/*
 * config_provider: the provider section: what each type (file, webhook,
 * kannel, twilio) requires, the keys that belong to another type, the
 * credentials each reads from the environment, and the URLs otpd calls or
 * is called back on. Runs at start-up and on SIGHUP, never on a request
 * path.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"

const char *const cfg_provider_names[] = {"file", "webhook", "kannel", "twilio", NULL};

const char *cfg_provider_at(const struct cfg_ctx *x)
{
    return x->provider_path ? x->provider_path : "provider";
}

const char *cfg_provider_key(struct cfg_ctx *x, const char *key)
{
    char *buf = x->provider_key[x->n_provider_key++ % 2];

    return cfg_path(buf, sizeof(x->provider_key[0]), cfg_provider_at(x), key);
}

/* 1 when s is a Twilio SID of kind kind ("AC", "SK", "MG"): the two
 * letters and 32 hex digits, as Twilio's docs define a SID. */
static int cfg_twilio_sid(const char *s, const char *kind)
{
    return strlen(s) == CFG_SID_LEN && strncmp(s, kind, 2) == 0 &&
           strspn(s + 2, "0123456789abcdefABCDEF") == CFG_SID_LEN - 2;
}

/* A SID read from the environment (NULL when secrets are off or it was
 * reported): its value is named by kind only, never printed. */
static void cfg_twilio_env_sid(struct cfg_ctx *x, json_t *o, const char *key, const char *sid, const char *kind,
                               const char *what)
{
    char p[128];

    if (sid != NULL && !cfg_twilio_sid(sid, kind))
        cfg_error(x, cfg_path(p, sizeof(p), cfg_provider_at(x), key),
                  "environment variable %s must hold %s: %s and 32 hex digits",
                  json_string_value(json_object_get(o, key)), what, kind);
}

/* Twilio (its docs: "Make an HTTP request to Twilio"): basic auth with the
 * account SID and auth token, or with an API key SID (SK...) and its
 * secret, the account SID still naming the Messages URL; a sender, From or
 * a Messaging Service (MG...). Twilio signs status callbacks with the
 * account's auth token and never an API key, so with API keys and a
 * callback_url the token is still needed, for that check alone. */
static void cfg_twilio(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct provider_conf *pc = &c->provider;
    int token = json_object_get(o, "auth_token_env") != NULL;
    int key_sid = json_object_get(o, "api_key_sid_env") != NULL;
    int key_secret = json_object_get(o, "api_key_secret_env") != NULL;
    int from = json_object_get(o, "from") != NULL, service = json_object_get(o, "messaging_service_sid") != NULL;

    pc->user = cfg_env(x, o, cfg_provider_at(x), "account_sid_env", 1, 1);
    cfg_twilio_env_sid(x, o, "account_sid_env", pc->user, "AC", "an account SID");
    if (key_sid != key_secret)
        cfg_error(x, key_sid ? cfg_provider_key(x, "api_key_sid_env") : cfg_provider_key(x, "api_key_secret_env"), "needs %s",
                  cfg_provider_key(x, key_sid ? "api_key_secret_env" : "api_key_sid_env"));
    if (!token && !key_sid && !key_secret)
        cfg_error(x, cfg_provider_at(x), "twilio needs auth_token_env, or api_key_sid_env and api_key_secret_env");
    else if (token && (key_sid || key_secret) && pc->callback_url[0] == '\0')
        cfg_error(x, cfg_provider_key(x, "auth_token_env"),
                  "give auth_token_env or the API key (api_key_sid_env, api_key_secret_env), not both; with an "
                  "API key the auth token only checks status callbacks, which needs callback_url");
    else if (!token && key_sid && pc->callback_url[0] != '\0')
        cfg_error(x, cfg_provider_key(x, "callback_url"),
                  "needs auth_token_env with an API key: Twilio signs status callbacks with the account's auth "
                  "token, never an API key");
    if (token)
        pc->pass = cfg_env(x, o, cfg_provider_at(x), "auth_token_env", 1, 1);
    if (key_sid && key_secret) {
        pc->key_sid = cfg_env(x, o, cfg_provider_at(x), "api_key_sid_env", 1, 1);
        cfg_twilio_env_sid(x, o, "api_key_sid_env", pc->key_sid, "SK", "an API key SID");
        pc->key_secret = cfg_env(x, o, cfg_provider_at(x), "api_key_secret_env", 1, 1);
    }
    if (from == service)
        cfg_error(x, cfg_provider_at(x), "twilio needs from or messaging_service_sid (one of them, %s)",
                  from ? "not both" : "none is set");
    if (pc->messaging_service[0] && !cfg_twilio_sid(pc->messaging_service, "MG"))
        cfg_error(x, cfg_provider_key(x, "messaging_service_sid"), "must be a Messaging Service SID: MG and 32 hex digits");
}

/* Kannel's optional sendsms fields: smsc (an smsc-id; Kannel splits its
 * lists of them on ';'), priority (0 to 3, Kannel's bounds), validity (sent
 * in minutes) and dlr_mask (which reports; they go to callback_url). */
static void cfg_kannel(struct cfg_ctx *x, struct config *c, json_t *o)
{
    struct provider_conf *pc = &c->provider;
    const char *s = pc->smsc;
    int64_t v;
    size_t i;

    pc->user = cfg_env(x, o, cfg_provider_at(x), "username_env", 1, 1);
    pc->pass = cfg_env(x, o, cfg_provider_at(x), "password_env", 1, 1);
    for (i = 0; s[i] > 0x20 && s[i] < 0x7f && s[i] != ';'; i++)
        ;
    /* Only an smsc that was read (a bad or empty one is reported already). */
    if (s[0] != '\0' && s[i] != '\0')
        cfg_error(x, cfg_provider_key(x, "smsc"), "must be an smsc-id: 1 to 63 printable ASCII bytes without spaces or ';'");
    if (cfg_int(x, o, cfg_provider_at(x), "priority", 0, 0, 3, &v))
        pc->priority = (int)v;
    if (cfg_dur(x, o, cfg_provider_at(x), "validity", 0, &v)) {
        if (v < 60000 || v > 86400000 || v % 60000 != 0)
            cfg_error(x, cfg_provider_key(x, "validity"), "must be whole minutes from 1m to 1d (Kannel takes minutes)");
        else
            pc->validity_ms = v;
    }
    if (json_object_get(o, "dlr_mask") != NULL && pc->callback_url[0] == '\0')
        cfg_error(x, cfg_provider_key(x, "dlr_mask"), "needs %s, where Kannel sends the reports",
                  cfg_provider_key(x, "callback_url"));
}

/* "webhook and kannel" for a mask of provider types (bit t: type t). */
static const char *cfg_provider_types_text(unsigned types, char *out, size_t cap)
{
    size_t n = 0;
    int t;

    out[0] = '\0';
    for (t = 0; cfg_provider_names[t] && n < cap; t++)
        if (types & (1u << t))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " and " : "", cfg_provider_names[t]);
    return out;
}

/* The keys each type requires beyond its rows' own. */
static void cfg_provider_needs(struct cfg_ctx *x, json_t *o, enum cfg_provider type)
{
    static const char *const need[][3] = {
        [CFG_PROVIDER_FILE] = {"path", NULL, NULL},
        [CFG_PROVIDER_WEBHOOK] = {"url", NULL, NULL},
        [CFG_PROVIDER_KANNEL] = {"url", "from", NULL},
        [CFG_PROVIDER_TWILIO] = {NULL, NULL, NULL},
    };
    char p[128];
    size_t i;

    for (i = 0; i < 3 && need[type][i]; i++)
        if (json_object_get(o, need[type][i]) == NULL)
            cfg_error(x, cfg_path(p, sizeof(p), cfg_provider_at(x), need[type][i]), "is required");
}

/* Keys of some types only (a mask of them): named at once when given to
 * another, rather than ignored. */
#define CFG_PT(t) (1u << (t))
static const struct {
    const char *key;
    unsigned types;
} cfg_provider_only[] = {
    {"path", CFG_PT(CFG_PROVIDER_FILE)},
    {"url", CFG_PT(CFG_PROVIDER_WEBHOOK) | CFG_PT(CFG_PROVIDER_KANNEL)},
    {"from", CFG_PT(CFG_PROVIDER_KANNEL) | CFG_PT(CFG_PROVIDER_TWILIO)},
    {"base_url", CFG_PT(CFG_PROVIDER_TWILIO)},
    {"token_env", CFG_PT(CFG_PROVIDER_WEBHOOK)},
    {"signing_secret_env", CFG_PT(CFG_PROVIDER_WEBHOOK)},
    {"smsc", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"priority", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"validity", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"dlr_mask", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"username_env", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"password_env", CFG_PT(CFG_PROVIDER_KANNEL)},
    {"account_sid_env", CFG_PT(CFG_PROVIDER_TWILIO)},
    {"auth_token_env", CFG_PT(CFG_PROVIDER_TWILIO)},
    {"api_key_sid_env", CFG_PT(CFG_PROVIDER_TWILIO)},
    {"api_key_secret_env", CFG_PT(CFG_PROVIDER_TWILIO)},
    {"messaging_service_sid", CFG_PT(CFG_PROVIDER_TWILIO)},
};

/* Reports each key of o that belongs to other types than type. */
static void cfg_provider_foreign(struct cfg_ctx *x, json_t *o, enum cfg_provider type)
{
    char p[128], names[64];
    size_t i;

    for (i = 0; i < sizeof(cfg_provider_only) / sizeof(cfg_provider_only[0]); i++) {
        const char *key = cfg_provider_only[i].key;
        unsigned types = cfg_provider_only[i].types;
        if (!(types & CFG_PT(type)) && json_object_get(o, key) != NULL)
            cfg_error(x, cfg_path(p, sizeof(p), cfg_provider_at(x), key), "applies to %s only, not %s",
                      cfg_provider_types_text(types, names, sizeof(names)), cfg_provider_names[type]);
    }
}
#undef CFG_PT

/* The webhook's secrets: a bearer token fit for a header line, and the key
 * that signs each body. */
static void cfg_webhook(struct cfg_ctx *x, struct config *c, json_t *o)
{
    size_t i;

    c->provider.token = cfg_env(x, o, cfg_provider_at(x), "token_env", 0, 16);
    /* It goes in a header line: no spaces, controls or CR LF to split it. */
    if (c->provider.token != NULL) {
        const char *k = c->provider.token;
        for (i = 0; k[i] > 0x20 && k[i] < 0x7f; i++)
            ;
        if (k[i] != '\0' || i > 1000)
            cfg_error(x, cfg_provider_key(x, "token_env"),
                      "environment variable %s must hold 16 to 1000 printable ASCII bytes without spaces",
                      json_string_value(json_object_get(o, "token_env")));
    }
    /* An HMAC key as strong as the hash: 32 bytes. */
    c->provider.signing_secret = cfg_env(x, o, cfg_provider_at(x), "signing_secret_env", 0, 32);
}

/* The URLs otpd calls, or gives the provider to call it back on: each
 * one given must be http:// or https://. */
static void cfg_provider_urls(struct cfg_ctx *x, const struct config *c)
{
    static const struct {
        const char *key;
        size_t off;
    } urls[] = {
        {"url", offsetof(struct provider_conf, url)},
        {"base_url", offsetof(struct provider_conf, base_url)},
        {"callback_url", offsetof(struct provider_conf, callback_url)},
    };
    char p[128];
    size_t i;

    for (i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        const char *u = (const char *)&c->provider + urls[i].off;
        if (u[0] && strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
            cfg_error(x, cfg_path(p, sizeof(p), cfg_provider_at(x), urls[i].key),
                      "must be an http:// or https:// URL");
    }
}

/* After provider's rows: what each type requires, its secrets, and the
 * keys that belong to another type. */
void cfg_provider(struct cfg_ctx *x, struct config *c, json_t *o)
{
    json_t *t = json_object_get(o, "type");

    /* A missing or unknown type is reported already; nothing else means anything then. */
    if (!json_is_string(t) || strcmp(json_string_value(t), cfg_provider_names[c->provider.type]) != 0)
        return;
    cfg_provider_needs(x, o, c->provider.type);
    cfg_provider_foreign(x, o, c->provider.type);
    switch (c->provider.type) {
    case CFG_PROVIDER_FILE:
        break;
    case CFG_PROVIDER_WEBHOOK:
        cfg_webhook(x, c, o);
        break;
    case CFG_PROVIDER_KANNEL:
        cfg_kannel(x, c, o);
        break;
    case CFG_PROVIDER_TWILIO:
        cfg_twilio(x, c, o);
        break;
    }
    cfg_provider_urls(x, c);
}
