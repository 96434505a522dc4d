/*
 * twilio: the Messages API, a form POST to the account's Messages URL with
 * basic auth: the account SID and auth token, or an API key SID and its
 * secret (what Twilio tells its users to run in production). The sender is
 * From, or a Messaging Service (MessagingServiceSid) that picks one from its
 * pool. 201 with a JSON body carrying "sid" is sent. With a callback URL,
 * Twilio posts status callbacks to it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "provider.h"

struct twilio {
    char base[CFG_STR_MAX];
    char from[64];
    char service[CFG_SID_LEN + 1]; /* MessagingServiceSid; "" = From */
    char *sid;                     /* the account's: names the Messages URL */
    const char *user, *pass;       /* basic auth: the account SID and token, or the API key's SID and secret */
    char callback[CFG_STR_MAX];
};

/* Appends "name=value" (encoded) to a form body; -1 on overflow. */
static int twilio_field(char *body, size_t cap, const char *name, const char *value)
{
    size_t n = strlen(body);

    if (snprintf(body + n, cap - n, "%s%s=", n ? "&" : "", name) >= (int)(cap - n))
        return -1;
    return provider_urlencode(body, cap, value);
}

static enum otp_rc twilio_prepare(void *self, const struct sms *m, struct provider_http *req, int *done,
                                  struct provider_result *res)
{
    struct twilio *t = self;
    char cb[1024];
    int bad;

    (void)res;
    *done = 0;
    req->body[0] = '\0';
    snprintf(req->url, sizeof(req->url), "%s/2010-04-01/Accounts/", t->base);
    bad = provider_urlencode(req->url, sizeof(req->url), t->sid) ||
          strlen(req->url) + 14 >= sizeof(req->url);
    if (!bad)
        memcpy(req->url + strlen(req->url), "/Messages.json", 15);
    bad = bad || twilio_field(req->body, sizeof(req->body), "To", m->to) ||
          (t->service[0] ? twilio_field(req->body, sizeof(req->body), "MessagingServiceSid", t->service)
                         : twilio_field(req->body, sizeof(req->body), "From", t->from)) ||
          twilio_field(req->body, sizeof(req->body), "Body", m->text);
    if (!bad && t->callback[0] && m->dlr_query) {
        snprintf(cb, sizeof(cb), "%s/v1/dlr/twilio?%s", t->callback, m->dlr_query);
        bad = twilio_field(req->body, sizeof(req->body), "StatusCallback", cb);
    }
    req->post = 1;
    req->content_type = "application/x-www-form-urlencoded";
    req->user = t->user;
    req->pass = t->pass;
    return bad ? OTP_EINVAL : OTP_OK;
}

/*
 * 1 when Twilio's error code refuses this destination from this account or
 * sender, not the number: 21408, the account may not send to the number's
 * region (Geo permissions); 21612, no route from this From or service to
 * the number; 21606, the From number cannot send to it. Another provider
 * may reach it. The number's own faults stay http_4xx: 21211 (not a valid
 * number), 21610 (it unsubscribed), 21614 (not a mobile number).
 */
static int twilio_route_code(json_int_t code)
{
    return code == 21408 || code == 21612 || code == 21606;
}

static void twilio_classify(void *self, long status, const char *body, size_t len, struct provider_result *res)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *code = j != NULL ? json_object_get(j, "code") : NULL;

    (void)self;
    provider_classify_status(status, res);
    if (res->cause == PROVIDER_C_4XX && json_is_integer(code) && twilio_route_code(json_integer_value(code)))
        provider_set_cause(res, PROVIDER_C_ROUTE);
    if (j != NULL && res->outcome == PROVIDER_SENT && json_is_string(json_object_get(j, "sid")))
        snprintf(res->provider_id, sizeof(res->provider_id), "%s", json_string_value(json_object_get(j, "sid")));
    if (res->outcome != PROVIDER_SENT && json_is_integer(code))
        snprintf(res->error, sizeof(res->error), "HTTP %ld: twilio error %lld", status,
                 (long long)json_integer_value(code));
    json_decref(j);
}

static void twilio_free(void *self)
{
    free(self);
}

static const struct provider_ops twilio_ops = {"twilio", twilio_prepare, twilio_classify, twilio_free};

struct provider *provider_twilio_new(const struct provider_conf *c, char *err)
{
    struct twilio *t = calloc(1, sizeof(*t));

    if (t != NULL) {
        snprintf(t->base, sizeof(t->base), "%s", c->base_url);
        snprintf(t->from, sizeof(t->from), "%s", c->from);
        snprintf(t->service, sizeof(t->service), "%s", c->messaging_service);
        snprintf(t->callback, sizeof(t->callback), "%s", c->callback_url);
        t->sid = c->user;
        /* An API key, when configured, authenticates; the auth token then
         * only checks status callbacks (src/otp/report.c). */
        t->user = c->key_sid ? c->key_sid : c->user;
        t->pass = c->key_sid ? c->key_secret : c->pass;
    }
    return provider_wrap(&twilio_ops, t, err);
}
