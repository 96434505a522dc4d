/*
 * otpctl's HTTP/1.1 client: one request per TCP connection (Connection:
 * close), http:// only, for the admin commands (admin.c). Small on purpose:
 * STYLE.md keeps libcurl in src/pacer and src/provider, and an operator's
 * tool sends a handful of requests to one server. Every wait is bounded (a
 * connect timeout and a deadline for the whole exchange) and so is the
 * answer (OTPCTL_HTTP_BODY_MAX).
 */
#ifndef OTPD_OTPCTL_HTTP_H
#define OTPD_OTPCTL_HTTP_H

#include <stddef.h>

/* The largest answer body taken. A list of the server's 10,000 live rows of
 * one kind is about 7 MB (a row with a 255-byte note, a composite key and
 * its times is under 700 bytes); 16 MiB leaves room and still bounds what a
 * wrong server can make otpctl hold. */
#define OTPCTL_HTTP_BODY_MAX (16u << 20)
/* The status line and headers of an answer. */
#define OTPCTL_HTTP_HEAD_MAX (16u << 10)
#define OTPCTL_HTTP_HOST_MAX 256
#define OTPCTL_HTTP_PATH_MAX 1024

enum otpctl_http_rc {
    OTPCTL_HTTP_OK = 0,
    OTPCTL_HTTP_EURL,         /* the URL is not one this client can use (https://, a query, ...) */
    OTPCTL_HTTP_EUNREACHABLE, /* the name did not resolve, or no address took the connection */
    OTPCTL_HTTP_ETIMEOUT,     /* connect or the exchange ran past its bound */
    OTPCTL_HTTP_EPROTO,       /* the answer is not HTTP/1.x as this client reads it, or too big */
    OTPCTL_HTTP_ENOMEM,
};

/* A parsed http:// URL: host (a name, an IPv4 address, or an IPv6 address
 * without its brackets), port, and a base path with no trailing slash
 * ("" for none) that every request path is appended to. */
struct otpctl_http_url {
    char host[OTPCTL_HTTP_HOST_MAX];
    char port[8];
    char base[OTPCTL_HTTP_PATH_MAX];
    int ipv6; /* host was written in brackets */
};

/* An answer: status, Content-Type (lower case, parameters kept; "" when
 * absent) and the body (NUL-terminated, len bytes, owned: free with
 * otpctl_http_answer_free). */
struct otpctl_http_answer {
    int status;
    char content_type[128];
    char *body;
    size_t len;
};

/* Parses url into *out. OTPCTL_HTTP_EURL with a sentence in err (cap bytes)
 * when it is not http://HOST[:PORT][/PATH]. */
enum otpctl_http_rc otpctl_http_parse_url(const char *url, struct otpctl_http_url *out, char *err, size_t cap);

/* 1 when the URL's host is a loopback address or "localhost". */
int otpctl_http_is_loopback(const struct otpctl_http_url *u);

/*
 * Sends method path (appended to u's base path) with "Authorization: Bearer
 * bearer" (none when NULL), and body as application/json (none when NULL),
 * and reads the answer into *out. Blocks up to connect_ms to connect (each
 * address) and up to total_ms for the whole call; name resolution is the
 * system's and is not bounded by them. Every copy of bearer made here is
 * wiped before return (the caller wipes its own). On failure *out is empty and err says why,
 * naming the host but never the bearer.
 */
enum otpctl_http_rc otpctl_http_call(const struct otpctl_http_url *u, const char *method, const char *path,
                                     const char *bearer, const char *body, int connect_ms, int total_ms,
                                     struct otpctl_http_answer *out, char *err, size_t cap);

void otpctl_http_answer_free(struct otpctl_http_answer *a);

#endif
