/*
 * otpctl's HTTP client, on libcurl, for the admin commands (admin.c): one
 * request per run to one otpd, over http:// or https://. Every wait is
 * bounded (a connect timeout and a deadline for the whole call, name
 * resolution included) and so is the answer (OTPCTL_HTTP_BODY_MAX). It uses
 * no proxy (the environment's http_proxy and kin are ignored: the admin key
 * goes to otpd and nowhere else) and follows no redirect.
 */
#ifndef OTPD_OTPCTL_HTTP_H
#define OTPD_OTPCTL_HTTP_H

#include <stddef.h>

/* The largest answer body taken. A list of the server's 10,000 live rows of
 * one kind is about 7 MB (a row with a 255-byte note, a composite key and
 * its times is under 700 bytes); 16 MiB leaves room and still bounds what a
 * wrong server can make otpctl hold. */
#define OTPCTL_HTTP_BODY_MAX (16u << 20)
#define OTPCTL_HTTP_URL_MAX 2048

enum otpctl_http_rc {
    OTPCTL_HTTP_OK = 0,
    OTPCTL_HTTP_EURL,         /* the URL is not http[s]://HOST[:PORT][/PATH] */
    OTPCTL_HTTP_EUNREACHABLE, /* the name did not resolve, or no address took the connection */
    OTPCTL_HTTP_ETIMEOUT,     /* connect or the whole call ran past its bound */
    OTPCTL_HTTP_ETLS,         /* the TLS handshake failed: most often a certificate not trusted */
    OTPCTL_HTTP_ECAFILE,      /* --cacert's file could not be read as PEM certificates */
    OTPCTL_HTTP_EPROTO,       /* the answer is not HTTP as libcurl reads it, or too big */
    OTPCTL_HTTP_ENOMEM,
};

/* A checked URL: base, the scheme, host and port as given, its path
 * without a trailing slash, that every request path is appended to; host,
 * the host alone (an IPv6 address in its brackets). */
struct otpctl_http_url {
    char base[OTPCTL_HTTP_URL_MAX];
    char host[256];
    int https;
};

/* One request: method and path (appended to the URL's), "Authorization:
 * Bearer bearer" (none when NULL), body as application/json (none when
 * NULL), the CA certificates an https:// server's must chain to (NULL: the
 * system's), and the bounds: connect_ms to connect, total_ms for all. */
struct otpctl_http_req {
    const char *method, *path, *bearer, *body, *cacert;
    long connect_ms, total_ms;
};

/* An answer: the status and the body (NUL-terminated, len bytes, owned:
 * free with otpctl_http_answer_free). */
struct otpctl_http_answer {
    int status;
    char *body;
    size_t len;
};

/* Checks url into *out. OTPCTL_HTTP_EURL with a sentence in err (cap bytes)
 * when it is not http[s]://HOST[:PORT][/PATH] (no user, query or fragment). */
enum otpctl_http_rc otpctl_http_parse_url(const char *url, struct otpctl_http_url *out, char *err,
                                          size_t cap);

/* 1 when the URL's host is a loopback address or "localhost". */
int otpctl_http_is_loopback(const struct otpctl_http_url *u);

/*
 * Sends rq to u and reads the answer into *out; blocks up to rq->total_ms.
 * The copy of the bearer made here is wiped before return (the caller
 * wipes its own; libcurl's lives in its heap until exit). On failure *out
 * is empty and err says why, naming the URL but never the bearer.
 */
enum otpctl_http_rc otpctl_http_call(const struct otpctl_http_url *u, const struct otpctl_http_req *rq,
                                     struct otpctl_http_answer *out, char *err, size_t cap);

void otpctl_http_answer_free(struct otpctl_http_answer *a);

#endif
