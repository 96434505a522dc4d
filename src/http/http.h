/*
 * http: the REST API (docs/architecture.md, "HTTP"), on libmicrohttpd's
 * internal thread pool. Authentication, body caps, JSON in and out,
 * problem+json errors and rate-limit headers live here; decisions are the
 * otp module's. The only home of microhttpd.h. Its files and what they
 * share: http_int.h.
 */
#ifndef OTPD_HTTP_H
#define OTPD_HTTP_H

#include "../base/conf.h"
#include "../otp/otp.h"

#define HTTP_BODY_MAX 4096

struct http;
struct tls;
struct v2;

/* Binds c's listen address (and listen_internal's, when set) and starts
 * serving with o (and v2's records on /v2), checking callers against k's
 * API keys; HTTPS with tls's certificate when tls is not NULL (see tls.h).
 * All are borrowed and outlive the server. NULL with detail in err. */
struct http *http_new(const struct http_conf *c, const struct keys_conf *k, struct otp *o, struct v2 *v2,
                      struct tls *tls, char *err);

/* Stops accepting new connections on both listeners; requests in progress
 * finish. */
void http_quiesce(struct http *h);

/* Stops the server (waiting for its threads) and frees it. */
void http_free(struct http *h);

#endif
