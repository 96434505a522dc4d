/*
 * kannel: Kannel's sendsms HTTP interface (a GET with the credentials and
 * the message in the query). "0: Accepted for delivery" (202) is sent.
 * Optional smsc (route) and priority as configured; validity always, so
 * that an SMSC never delivers a code after it died. With a callback URL,
 * Kannel calls back with delivery reports (dlr-url, dlr-mask).
 * The URL holds the password: it goes to the transfer and nowhere else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

struct kannel {
    char url[CFG_STR_MAX];
    char from[64];
    char *user;
    char *pass;
    char callback[CFG_STR_MAX]; /* otpd's base URL, "" for no reports */
    char smsc[64];              /* "" = Kannel routes */
    int priority;               /* -1 = not sent */
    int64_t validity_min;       /* 0 = each code's remaining life */
    int dlr_mask;               /* by default delivered (1), undelivered (2), SMSC reject (16): 19 */
};

/* Kannel's validity for m, in minutes: the configured one, else the code's
 * remaining life rounded up (an SMSC that holds the message longer would
 * deliver a dead code; one that gives up sooner wastes a live one), and at
 * least 1, since 0 is not a validity. */
static int64_t kannel_validity_min(const struct kannel *k, const struct sms *m)
{
    int64_t left_ms = m->expires_ms - m->now_ms;

    if (k->validity_min > 0)
        return k->validity_min;
    return left_ms <= 60000 ? 1 : (left_ms + 59999) / 60000;
}

/* Appends "&name=" and the encoded value; -1 on overflow. */
static int kannel_param(char *url, size_t cap, const char *name, const char *value)
{
    size_t n = strlen(url);

    if (snprintf(url + n, cap - n, "%s%s=", strchr(url, '?') ? "&" : "?", name) >= (int)(cap - n))
        return -1;
    return provider_urlencode(url, cap, value);
}

static int kannel_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

static enum otp_rc kannel_prepare(void *self, const struct sms *m, struct provider_http *req, int *done,
                                  struct provider_result *res)
{
    struct kannel *k = self;
    char dlr[1024], num[24];
    int bad;

    (void)res;
    *done = 0;
    snprintf(req->url, sizeof(req->url), "%s", k->url);
    bad = kannel_param(req->url, sizeof(req->url), "username", k->user) ||
          kannel_param(req->url, sizeof(req->url), "password", k->pass) ||
          kannel_param(req->url, sizeof(req->url), "from", k->from) ||
          kannel_param(req->url, sizeof(req->url), "to", m->to) ||
          kannel_param(req->url, sizeof(req->url), "text", m->text);
    if (!bad && !kannel_ascii(m->text))
        bad = kannel_param(req->url, sizeof(req->url), "charset", "UTF-8") ||
              kannel_param(req->url, sizeof(req->url), "coding", "2");
    if (!bad && k->smsc[0])
        bad = kannel_param(req->url, sizeof(req->url), "smsc", k->smsc);
    if (!bad && k->priority >= 0) {
        snprintf(num, sizeof(num), "%d", k->priority);
        bad = kannel_param(req->url, sizeof(req->url), "priority", num);
    }
    if (!bad) {
        snprintf(num, sizeof(num), "%lld", (long long)kannel_validity_min(k, m));
        bad = kannel_param(req->url, sizeof(req->url), "validity", num);
    }
    if (!bad && k->callback[0] && m->dlr_query) {
        snprintf(dlr, sizeof(dlr), "%s/v1/dlr/kannel?%s&status=%%d", k->callback, m->dlr_query);
        snprintf(num, sizeof(num), "%d", k->dlr_mask);
        bad = kannel_param(req->url, sizeof(req->url), "dlr-mask", num) ||
              kannel_param(req->url, sizeof(req->url), "dlr-url", dlr);
    }
    req->post = 0;
    return bad ? OTP_EINVAL : OTP_OK;
}

/* 1 when s (n bytes) holds a run of at least 4 digits: a code has
 * otp.length digits (4 to 10), so a quote of the message would. */
static int kannel_has_digits(const char *s, int n)
{
    int i, run = 0;

    for (i = 0; i < n && run < 4; i++)
        run = s[i] >= '0' && s[i] <= '9' ? run + 1 : 0;
    return run >= 4;
}

static void kannel_classify(void *self, long status, const char *body, size_t len, struct provider_result *res)
{
    struct kannel *k = self;
    int n = (int)(len > 100 ? 100 : len);

    provider_classify_status(status, res);
    if (res->outcome == PROVIDER_SENT || len == 0)
        return;
    /* Kannel's answer when no SMSC takes the destination (bearerbox's
     * "failed" ack, 403): no route here, though another provider may have
     * one. Matched on the text, so that it stays a route refusal whatever
     * the shared rule makes of a 403. */
    if (status >= 400 && status < 500 && status != 429 && n >= 12 && memcmp(body, "Not routable", 12) == 0)
        provider_set_cause(res, PROVIDER_C_ROUTE);
    /* Kannel's own answers ("Authorization failed for sendsms") help the
     * operator; a proxy's error page might echo our URL, which holds the
     * password and the code, and a refusal may quote the message, code and
     * all, so anything that looks like either is dropped: the reason goes
     * to the log and the ledger. */
    if (memmem(body, (size_t)n, k->pass, strlen(k->pass)) || memmem(body, (size_t)n, "password", 8) ||
        memmem(body, (size_t)n, "text=", 5) || kannel_has_digits(body, n))
        snprintf(res->error, sizeof(res->error), "HTTP %ld (answer withheld: it may echo the request)",
                 status);
    else
        snprintf(res->error, sizeof(res->error), "HTTP %ld: %.*s", status, n, body);
}

static void kannel_free(void *self)
{
    free(self);
}

static const struct provider_ops kannel_ops = {"kannel", kannel_prepare, kannel_classify, kannel_free};

struct provider *provider_kannel_new(const struct provider_conf *c, char *err)
{
    struct kannel *k = calloc(1, sizeof(*k));

    if (k != NULL) {
        snprintf(k->url, sizeof(k->url), "%s", c->url);
        snprintf(k->from, sizeof(k->from), "%s", c->from);
        snprintf(k->callback, sizeof(k->callback), "%s", c->callback_url);
        k->user = c->user;
        k->pass = c->pass;
        snprintf(k->smsc, sizeof(k->smsc), "%s", c->smsc);
        k->priority = c->priority;
        k->validity_min = c->validity_ms / 60000;
        k->dlr_mask = c->dlr_mask;
    }
    return provider_wrap(&kannel_ops, k, err);
}
