/* webhook: POSTs {to, text, id} as JSON to one URL; any 2xx is sent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "provider.h"

struct webhook {
    char url[CFG_STR_MAX];
};

static enum otp_rc webhook_prepare(void *self, const struct sms *m, struct provider_http *req, int *done,
                                   struct provider_result *res)
{
    struct webhook *w = self;
    json_t *body = json_pack("{s:s, s:s, s:s}", "to", m->to, "text", m->text, "id", m->id);
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
    return OTP_OK;
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

    if (w != NULL)
        snprintf(w->url, sizeof(w->url), "%s", c->url);
    return provider_wrap(&webhook_ops, w, err);
}
