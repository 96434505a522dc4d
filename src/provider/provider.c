/* provider: the adapter registry and what the adapters share. */
#include "provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct provider *provider_new(const struct provider_conf *c, char *err)
{
    switch (c->type) {
    case CFG_PROVIDER_FILE:
        return provider_file_new(c, err);
    case CFG_PROVIDER_WEBHOOK:
        return provider_webhook_new(c, err);
    case CFG_PROVIDER_KANNEL:
        return provider_kannel_new(c, err);
    case CFG_PROVIDER_TWILIO:
        return provider_twilio_new(c, err);
    }
    snprintf(err, OTP_ERR_LEN, "provider: unknown type");
    return NULL;
}

struct provider *provider_wrap(const struct provider_ops *ops, void *self, char *err)
{
    struct provider *p;

    if (self == NULL || (p = calloc(1, sizeof(*p))) == NULL) {
        if (self)
            ops->free(self);
        snprintf(err, OTP_ERR_LEN, "provider: out of memory");
        return NULL;
    }
    p->ops = ops;
    p->self = self;
    return p;
}

void provider_free(struct provider *p)
{
    if (p == NULL)
        return;
    p->ops->free(p->self);
    free(p);
}

/*
 * Every attempt's cost, in one place. A cause is "unknown" whenever the
 * request may have reached the provider, since that is money that may have
 * been spent: a payment system counts it until it is proved otherwise.
 * The last column is failover: 1 when the cause is about this provider (its
 * health, its transport, its credentials) or this destination on it, so the
 * route's next provider may do better; 0 when it is about the number, the
 * code or our own request (another provider would fail it too), or no
 * verdict on the provider (a 429 is rate; an odd status may have acted).
 */
static const struct provider_cause_info provider_causes[PROVIDER_C_COUNT] = {
    [PROVIDER_C_ACCEPTED] = {"accepted", PROVIDER_ACCEPTED, 0, PROVIDER_SENT, 0, BREAKER_SUCCESS},
    [PROVIDER_C_TIMEOUT] = {"timeout", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
    [PROVIDER_C_BROKEN] = {"broken", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
    [PROVIDER_C_408] = {"http_408", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
    [PROVIDER_C_5XX] = {"http_5xx", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
    [PROVIDER_C_ODD_STATUS] = {"http_other", PROVIDER_UNKNOWN, 1, PROVIDER_TRANSIENT, 0, BREAKER_SUCCESS},
    [PROVIDER_C_429] = {"http_429", PROVIDER_UNREACHED, 1, PROVIDER_TRANSIENT, 0, BREAKER_NEUTRAL},
    [PROVIDER_C_4XX] = {"http_4xx", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_SUCCESS},
    [PROVIDER_C_UNSENT] = {"unsent", PROVIDER_UNREACHED, 1, PROVIDER_TRANSIENT, 1, BREAKER_FAILURE},
    [PROVIDER_C_LOCAL] = {"local", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_NEUTRAL},
    [PROVIDER_C_EXPIRED] = {"expired", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 0, BREAKER_NEUTRAL},
    /* A refusal like http_4xx's, so its money is the same. */
    [PROVIDER_C_ROUTE] = {"route", PROVIDER_UNREACHED, 0, PROVIDER_PERMANENT, 1, BREAKER_SUCCESS},
};

const struct provider_cause_info *provider_cause_row(enum provider_cause c)
{
    return &provider_causes[c < PROVIDER_C_COUNT ? c : PROVIDER_C_BROKEN];
}

void provider_set_cause(struct provider_result *res, enum provider_cause c)
{
    res->cause = c;
    res->outcome = provider_cause_row(c)->outcome;
}

void provider_classify_status(long status, struct provider_result *res)
{
    enum provider_cause c;

    if (status >= 200 && status < 300)
        c = PROVIDER_C_ACCEPTED;
    else if (status == 408)
        c = PROVIDER_C_408;
    else if (status == 429)
        c = PROVIDER_C_429;
    else if (status == 401 || status == 403)
        c = PROVIDER_C_ROUTE; /* the provider's credentials or account: nothing about the number */
    else if (status >= 400 && status < 500)
        c = PROVIDER_C_4XX;
    else if (status >= 500)
        c = PROVIDER_C_5XX;
    else if (status == 0)
        c = PROVIDER_C_BROKEN; /* no status at all: the pacer knows better and overrides */
    else
        c = PROVIDER_C_ODD_STATUS;
    provider_set_cause(res, c);
    if (c == PROVIDER_C_ACCEPTED)
        return;
    if (status == 0)
        snprintf(res->error, sizeof(res->error), "no answer");
    else
        snprintf(res->error, sizeof(res->error), "HTTP %ld", status);
}

int provider_urlencode(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(out);

    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '-' || ch == '_' || ch == '.' || ch == '~';
        if (n + (plain ? 1 : 3) >= cap)
            return -1;
        if (plain) {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    out[n] = '\0';
    return 0;
}

int provider_header(struct provider_http *req, const char *name, const char *value)
{
    char *h;
    int n;

    if (req->n_headers >= PROVIDER_HEADERS_MAX)
        return -1;
    h = req->headers[req->n_headers];
    n = snprintf(h, PROVIDER_HEADER_MAX, "%s: %s", name, value);
    if (n < 0 || n >= PROVIDER_HEADER_MAX) {
        h[0] = '\0';
        return -1;
    }
    req->n_headers++;
    return 0;
}
