/* provider: the adapter registry and what the adapters share. */
#include "provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct provider *provider_new(const struct config *c, char *err)
{
    switch (c->provider) {
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

void provider_classify_status(long status, struct provider_result *res)
{
    if (status >= 200 && status < 300) {
        res->outcome = PROVIDER_SENT;
        return;
    }
    if (status == 0 || status == 408 || status == 429 || status >= 500)
        res->outcome = PROVIDER_TRANSIENT;
    else
        res->outcome = PROVIDER_PERMANENT;
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
