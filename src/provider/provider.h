/*
 * provider: one small interface in front of every SMS provider, like
 * Redis's rio. An HTTP adapter describes the request (provider_http) and
 * classifies the answer; the pacer owns the transfer. The file adapter
 * delivers at once. Credentials live in the adapter and never in a log:
 * a provider_http's fields are for the transfer only.
 */
#ifndef OTPD_PROVIDER_H
#define OTPD_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/breaker.h"
#include "../base/conf.h"
#include "../base/rc.h"

#define PROVIDER_URL_MAX 4096
#define PROVIDER_BODY_MAX 4096
#define PROVIDER_ID_MAX 64
#define PROVIDER_ERR_MAX 160

/* Extra request headers an adapter may set ("Name: value"), and each one's
 * room: a bearer token and a signature fit (the config bounds the token). */
#define PROVIDER_HEADERS_MAX 2
#define PROVIDER_HEADER_MAX 1100

/* One SMS to send. The times come from the caller, so that an adapter
 * reads no clock (a signature's time, Kannel's validity). */
struct sms {
    const char *id;        /* our message id */
    const char *to;        /* E.164 */
    const char *text;
    const char *dlr_query; /* "id=..&exp=..&tag=.." for delivery-report URLs, or NULL */
    int64_t now_ms;        /* Unix ms when the request is built */
    int64_t expires_ms;    /* Unix ms when the code dies */
};

/* An HTTP request for the pacer to run. Wiped once the call ends: the URL
 * or body holds the code, and the headers may hold a token. */
struct provider_http {
    char url[PROVIDER_URL_MAX];
    char body[PROVIDER_BODY_MAX]; /* "" with post == 0 for a GET */
    int post;
    const char *content_type;     /* static */
    const char *user;             /* basic auth, or NULL; owned by the adapter */
    const char *pass;
    char headers[PROVIDER_HEADERS_MAX][PROVIDER_HEADER_MAX]; /* the first n_headers are sent */
    int n_headers;
};

/* The ledger's name for an attempt ("sent", "transient", "permanent"). */
enum provider_outcome { PROVIDER_SENT, PROVIDER_TRANSIENT, PROVIDER_PERMANENT };

/*
 * What one attempt costs (docs/architecture.md, "Money"). Never reached: the provider
 * cannot bill it, and the message's reservation is kept for a retry or
 * given back. Unknown: the request left, so the provider may bill it; a
 * retry needs a reservation of its own. Accepted: billed.
 */
enum provider_class { PROVIDER_UNREACHED, PROVIDER_UNKNOWN, PROVIDER_ACCEPTED };

/* Why an attempt ended; each has one row in provider_cause_row's table. */
enum provider_cause {
    PROVIDER_C_ACCEPTED,     /* 2xx */
    PROVIDER_C_TIMEOUT,      /* no answer in time after the request was written */
    PROVIDER_C_BROKEN,       /* reset or other transport error after the request was written */
    PROVIDER_C_408,          /* the provider timed out reading: it may have acted */
    PROVIDER_C_5XX,          /* a server error: it may have acted */
    PROVIDER_C_ODD_STATUS,   /* 1xx or 3xx: not a refusal, so it may have acted */
    PROVIDER_C_429,          /* refused for rate: retried after Retry-After, pauses every send */
    PROVIDER_C_4XX,          /* refused for good, about the number or the request (a bad number) */
    PROVIDER_C_UNSENT,       /* failed before the request was written (refused, DNS, connect timeout) */
    PROVIDER_C_LOCAL,        /* our side could not make the request */
    PROVIDER_C_EXPIRED,      /* the code had too little life left to go on the wire */
    PROVIDER_C_ROUTE,        /* refused for good, about this provider: its credentials or account (401, 403),
                              * or no route to this destination on it (Twilio's region permissions, Kannel's
                              * "Not routable"); another provider may take it */
    PROVIDER_C_COUNT
};

struct provider_cause_info {
    const char *name;              /* a metric label */
    enum provider_class cls;
    int retry;                     /* 1: try again (within retry.max and the code's life) */
    enum provider_outcome outcome; /* for the ledger */
    int failover;                  /* 1: about this provider, or this destination on it, not about the number:
                                    * the message may go on to the route's next provider rather than retry
                                    * here or fail (the pacer decides, when there is a next one) */
    enum breaker_event health;     /* the provider's breaker's word on it: failing (a timeout, a reset, 408,
                                    * 5xx, unsent), answering and meaning it, or nothing of its health (429) */
};

struct provider_result {
    enum provider_outcome outcome; /* from cause, through provider_set_cause */
    enum provider_cause cause;
    char provider_id[PROVIDER_ID_MAX]; /* the provider's message id, "" when none */
    char error[PROVIDER_ERR_MAX];      /* a short, secret-free reason */
    int64_t retry_after_ms;            /* from a Retry-After header; 0 when none */
};

/* The row of cause c. */
const struct provider_cause_info *provider_cause_row(enum provider_cause c);

/* Sets res->cause and res->outcome from cause c. */
void provider_set_cause(struct provider_result *res, enum provider_cause c);

struct provider_ops {
    const char *name;
    /* Describes the request for m in *req and returns OTP_OK; or, for an
     * adapter without HTTP, delivers m, sets *done = 1 and fills *res. */
    enum otp_rc (*prepare)(void *self, const struct sms *m, struct provider_http *req, int *done,
                           struct provider_result *res);
    /* Classifies an answer; status 0 means no answer (transport error). */
    void (*classify)(void *self, long status, const char *body, size_t len, struct provider_result *res);
    void (*free)(void *self);
};

struct provider {
    const struct provider_ops *ops;
    void *self;
};

/* Builds the adapter the config names. Returns NULL with detail in err.
 * The caller frees with provider_free. Called by one thread at a time. */
struct provider *provider_new(const struct provider_conf *c, char *err);
void provider_free(struct provider *p);

/* The classification every HTTP adapter shares, for an answer with a
 * status (the pacer classifies transport errors itself): see the table in
 * provider.c. A 401 or 403 is about the provider's credentials or account,
 * never the number: PROVIDER_C_ROUTE, for every adapter. */
void provider_classify_status(long status, struct provider_result *res);

/* Appends s percent-encoded (RFC 3986 unreserved kept) to out; returns -1
 * when out (cap bytes, NUL-terminated) would overflow. */
int provider_urlencode(char *out, size_t cap, const char *s);

/* Adds the header "name: value" to req; -1 when there is no room. */
int provider_header(struct provider_http *req, const char *name, const char *value);

/* Adapter constructors, each in its own file. */
struct provider *provider_file_new(const struct provider_conf *c, char *err);
struct provider *provider_webhook_new(const struct provider_conf *c, char *err);
struct provider *provider_kannel_new(const struct provider_conf *c, char *err);
struct provider *provider_twilio_new(const struct provider_conf *c, char *err);

/* Wraps self and ops; frees self with ops->free when out of memory. */
struct provider *provider_wrap(const struct provider_ops *ops, void *self, char *err);

#endif
