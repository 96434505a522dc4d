/*
 * webhook: POSTs {to, text, id} as JSON to one URL; any 2xx is sent.
 * Optionally with a bearer token (Authorization: Bearer) and a signature
 * of the exact body sent, so a receiver can tell our requests from forged
 * ones and refuse a replayed one by its age:
 *   X-Otpd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 * (docs/providers.md, "Webhook signatures", has a receiver's check.) One HMAC per
 * request on the sender thread: a few microseconds.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../base/sha256.h"
#include "provider.h"

struct webhook {
    char url[CFG_STR_MAX];
    const char *token;          /* the config's; NULL: no Authorization */
    const char *signing_secret; /* the config's; NULL: unsigned */
};

/* Writes "t=<t>,v1=<hex>" for body sent at unix second t into out (cap
 * bytes); -1 when it does not fit. */
static int webhook_sign(const char *secret, int64_t t, const char *body, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char mac[SHA256_LEN];
    char head[32], *signed_text;
    size_t nh, nb = strlen(body), i;
    int n;

    nh = (size_t)snprintf(head, sizeof(head), "%" PRId64 ".", t);
    if ((signed_text = malloc(nh + nb + 1)) == NULL)
        return -1;
    memcpy(signed_text, head, nh);
    memcpy(signed_text + nh, body, nb + 1);
    sha256_hmac(secret, strlen(secret), signed_text, nh + nb, mac);
    explicit_bzero(signed_text, nh + nb); /* the body holds the code */
    free(signed_text);
    n = snprintf(out, cap, "t=%" PRId64 ",v1=", t);
    if (n < 0 || (size_t)n + 2 * SHA256_LEN >= cap)
        return -1;
    for (i = 0; i < SHA256_LEN; i++) {
        out[n + 2 * i] = hex[mac[i] >> 4];
        out[n + 2 * i + 1] = hex[mac[i] & 15];
    }
    out[n + 2 * SHA256_LEN] = '\0';
    return 0;
}

static enum otp_rc webhook_prepare(void *self, const struct sms *m, struct provider_http *req, int *done,
                                   struct provider_result *res)
{
    struct webhook *w = self;
    json_t *body = json_pack("{s:s, s:s, s:s}", "to", m->to, "text", m->text, "id", m->id);
    char value[PROVIDER_HEADER_MAX];
    enum otp_rc rc = OTP_EINVAL;
    size_t n;

    (void)res;
    *done = 0;
    if (body == NULL)
        return OTP_ENOMEM;
    n = json_dumpb(body, req->body, sizeof(req->body) - 1, JSON_COMPACT);
    json_decref(body);
    if (n == 0 || n >= sizeof(req->body))
        return OTP_EINVAL;
    req->body[n] = '\0';
    req->post = 1;
    req->content_type = "application/json";
    snprintf(req->url, sizeof(req->url), "%s", w->url);
    if (w->token != NULL) {
        snprintf(value, sizeof(value), "Bearer %s", w->token);
        if (provider_header(req, "Authorization", value) < 0)
            goto out;
    }
    /* Signed last, over the body exactly as it goes on the wire. */
    if (w->signing_secret != NULL &&
        (webhook_sign(w->signing_secret, m->now_ms / 1000, req->body, value, sizeof(value)) < 0 ||
         provider_header(req, "X-Otpd-Signature", value) < 0))
        goto out;
    rc = OTP_OK;
out:
    explicit_bzero(value, sizeof(value)); /* it may hold the token */
    return rc;
}

static void webhook_classify(void *self, long status, const char *body, size_t len, struct provider_result *res)
{
    json_t *j;

    (void)self;
    provider_classify_status(status, res);
    if (res->outcome != PROVIDER_SENT || (j = json_loadb(body, len, 0, NULL)) == NULL)
        return;
    if (json_is_string(json_object_get(j, "id")))
        snprintf(res->provider_id, sizeof(res->provider_id), "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
}

static void webhook_free(void *self)
{
    free(self);
}

static const struct provider_ops webhook_ops = {"webhook", webhook_prepare, webhook_classify, webhook_free};

struct provider *provider_webhook_new(const struct provider_conf *c, char *err)
{
    struct webhook *w = calloc(1, sizeof(*w));

    if (w != NULL) {
        snprintf(w->url, sizeof(w->url), "%s", c->url);
        w->token = c->token;
        w->signing_secret = c->signing_secret;
    }
    return provider_wrap(&webhook_ops, w, err);
}
