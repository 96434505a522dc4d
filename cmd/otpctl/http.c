/*
 * otpctl's HTTP client (http.h): one libcurl easy handle per call, which
 * is one per run. libcurl does the protocol (HTTP/1.1 framing, chunks,
 * interim answers, TLS and the certificate's check against the system's
 * CAs or --cacert's); this file sets the bounds (the deadlines, the body's
 * cap counted as it arrives), keeps proxies and redirects out, and turns
 * libcurl's errors into otpctl's sentences and codes.
 */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

/* Where the answer's body goes as it arrives. */
struct hc_sink {
    struct otpctl_http_answer *out;
    size_t cap;  /* bytes allocated for out->body */
    int too_big; /* the body passed OTPCTL_HTTP_BODY_MAX */
    int nomem;
};

enum otpctl_http_rc otpctl_http_parse_url(const char *url, struct otpctl_http_url *out, char *err, size_t cap)
{
    static const CURLUPart refused[] = {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS,
                                        CURLUPART_QUERY, CURLUPART_FRAGMENT};
    enum otpctl_http_rc rc = OTPCTL_HTTP_EURL;
    char *scheme = NULL, *host = NULL, *full = NULL, *part = NULL;
    CURLU *u = curl_url();
    CURLUcode uc = CURLUE_OK;
    const char *p;
    size_t i, n;

    memset(out, 0, sizeof(*out));
    snprintf(err, cap, "-s %s: a URL of the form http[s]://HOST[:PORT][/PATH] is needed", url);
    if (u == NULL) {
        snprintf(err, cap, "out of memory");
        return OTPCTL_HTTP_ENOMEM;
    }
    for (p = url; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '\\')
            goto out;
    if ((uc = curl_url_set(u, CURLUPART_URL, url, 0)) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        goto out;
    for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (curl_url_get(u, refused[i], &part, 0) == CURLUE_OK) {
            snprintf(err, cap,
                     "-s %s: a URL of the form http[s]://HOST[:PORT][/PATH] is needed (no user, "
                     "query or fragment)",
                     url);
            goto out;
        }
    if (curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK)
        goto out;
    /* No query and no fragment: the URL ends with its path. */
    for (n = strlen(full); n > 0 && full[n - 1] == '/'; n--)
        ;
    if (n + 512 >= sizeof(out->base) || strlen(host) >= sizeof(out->host)) {
        snprintf(err, cap, "-s: the URL is too long");
        goto out;
    }
    memcpy(out->base, full, n);
    memcpy(out->host, host, strlen(host) + 1);
    out->https = strcmp(scheme, "https") == 0;
    rc = OTPCTL_HTTP_OK;
out:
    if (uc != CURLUE_OK)
        snprintf(err, cap, "-s %s: %s; a URL of the form http[s]://HOST[:PORT][/PATH] is needed", url,
                 curl_url_strerror(uc));
    curl_free(scheme);
    curl_free(host);
    curl_free(full);
    curl_free(part);
    curl_url_cleanup(u);
    return rc;
}

int otpctl_http_is_loopback(const struct otpctl_http_url *u)
{
    /* 127.0.0.0/8 written as an address: digits and dots only (127.example.com is a name). */
    return strcasecmp(u->host, "localhost") == 0 || strcmp(u->host, "[::1]") == 0 ||
           (strncmp(u->host, "127.", 4) == 0 && u->host[strspn(u->host, "0123456789.")] == '\0');
}

void otpctl_http_answer_free(struct otpctl_http_answer *a)
{
    if (a == NULL)
        return;
    free(a->body);
    a->body = NULL;
    a->len = 0;
}

/* libcurl's write callback: appends to the body, up to the cap. Fewer
 * bytes than given (0) stop the transfer with CURLE_WRITE_ERROR. */
static size_t hc_write(char *p, size_t size, size_t n, void *ctx)
{
    struct hc_sink *s = ctx;
    struct otpctl_http_answer *a = s->out;
    size_t len = size * n, ncap;
    char *grown;

    if (len > OTPCTL_HTTP_BODY_MAX - a->len) {
        s->too_big = 1;
        return 0;
    }
    if (a->len + len + 1 > s->cap) {
        for (ncap = s->cap ? s->cap : 16384; ncap < a->len + len + 1; ncap *= 2)
            ;
        if ((grown = realloc(a->body, ncap)) == NULL) {
            s->nomem = 1;
            return 0;
        }
        a->body = grown;
        s->cap = ncap;
    }
    memcpy(a->body + a->len, p, len);
    a->len += len;
    a->body[a->len] = '\0';
    return len;
}

/* The request's headers; *auth is the Authorization line (the caller
 * wipes and frees it). -1 when out of memory. */
static int hc_headers(const struct otpctl_http_req *rq, struct curl_slist **list, char **auth)
{
    static const char *const fixed[] = {"Accept: application/json", "Connection: close", "Expect:"};
    static const char bearer[] = "Authorization: Bearer ";
    struct curl_slist *l = NULL, *next;
    size_t i, n;

    for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if ((next = curl_slist_append(l, fixed[i])) == NULL)
            goto fail;
        l = next;
    }
    if (rq->body != NULL) {
        if ((next = curl_slist_append(l, "Content-Type: application/json")) == NULL)
            goto fail;
        l = next;
    }
    if (rq->bearer != NULL) {
        n = sizeof(bearer) + strlen(rq->bearer);
        if ((*auth = malloc(n)) == NULL)
            goto fail;
        snprintf(*auth, n, "%s%s", bearer, rq->bearer);
        if ((next = curl_slist_append(l, *auth)) == NULL)
            goto fail;
        l = next;
    }
    *list = l;
    return 0;
fail:
    curl_slist_free_all(l);
    return -1;
}

/* The options of one call. CURLE_OK, or the first option refused. */
static CURLcode hc_options(CURL *h, const char *url, const struct otpctl_http_req *rq,
                           struct curl_slist *headers, char *errbuf, struct hc_sink *sink)
{
    CURLcode cc = CURLE_OK;

    /* Each setting fails only for lack of memory or support; the first failure is kept. */
#define HC_SET(opt, val)                                                                                     \
    do {                                                                                                     \
        if (cc == CURLE_OK)                                                                                  \
            cc = curl_easy_setopt(h, opt, val);                                                              \
    } while (0)
    HC_SET(CURLOPT_URL, url);
    HC_SET(CURLOPT_PROTOCOLS_STR, "http,https");
    HC_SET(CURLOPT_PROXY, "");      /* no proxy, whatever the environment says */
    HC_SET(CURLOPT_PATH_AS_IS, 1L); /* an ID of ".." must not become the parent route */
    HC_SET(CURLOPT_NOSIGNAL, 1L);
    HC_SET(CURLOPT_CONNECTTIMEOUT_MS, rq->connect_ms);
    HC_SET(CURLOPT_TIMEOUT_MS, rq->total_ms);
    HC_SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)OTPCTL_HTTP_BODY_MAX);
    HC_SET(CURLOPT_SSL_VERIFYPEER, 1L);
    HC_SET(CURLOPT_SSL_VERIFYHOST, 2L);
    if (rq->cacert != NULL)
        HC_SET(CURLOPT_CAINFO, rq->cacert);
    HC_SET(CURLOPT_USERAGENT, "otpctl");
    HC_SET(CURLOPT_CUSTOMREQUEST, rq->method);
    HC_SET(CURLOPT_HTTPHEADER, headers);
    if (rq->body != NULL) {
        HC_SET(CURLOPT_POSTFIELDS, rq->body);
        HC_SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(rq->body));
    }
    HC_SET(CURLOPT_ERRORBUFFER, errbuf);
    HC_SET(CURLOPT_WRITEFUNCTION, hc_write);
    HC_SET(CURLOPT_WRITEDATA, sink);
#undef HC_SET
    return cc;
}

/* The sentence and code for a call that failed with cc. */
static enum otpctl_http_rc hc_error(CURL *h, CURLcode cc, const struct hc_sink *sink,
                                    const struct otpctl_http_url *u, const struct otpctl_http_req *rq,
                                    const char *errbuf, char *err, size_t cap)
{
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(cc);
    char os[128] = "";
    long oserr = 0;

    if (curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &oserr) == CURLE_OK && oserr != 0)
        snprintf(os, sizeof(os), " (%s)", strerror((int)oserr));
    if (sink->too_big || cc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(err, cap, "%s: the answer is larger than %u bytes", u->base, OTPCTL_HTTP_BODY_MAX);
        return OTPCTL_HTTP_EPROTO;
    }
    switch (cc) {
    case CURLE_OUT_OF_MEMORY:
        snprintf(err, cap, "out of memory");
        return OTPCTL_HTTP_ENOMEM;
    case CURLE_WRITE_ERROR:
        snprintf(err, cap, "out of memory");
        return sink->nomem ? OTPCTL_HTTP_ENOMEM : OTPCTL_HTTP_EPROTO;
    case CURLE_OPERATION_TIMEDOUT:
        snprintf(err, cap, "%s: no whole answer within %ld ms (--timeout): %s", u->base, rq->total_ms, why);
        return OTPCTL_HTTP_ETIMEOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
        snprintf(err, cap, "%s: %s%s", u->base, why, os);
        return OTPCTL_HTTP_EUNREACHABLE;
    case CURLE_SSL_CACERT_BADFILE:
        snprintf(err, cap, "--cacert %s: not a file of PEM certificates that can be read: %s", rq->cacert,
                 why);
        return OTPCTL_HTTP_ECAFILE;
    case CURLE_PEER_FAILED_VERIFICATION:
        snprintf(err, cap,
                 "%s: the server's certificate is not trusted: %s (--cacert FILE names the CA that "
                 "signed it)",
                 u->base, why);
        return OTPCTL_HTTP_ETLS;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ISSUER_ERROR:
        snprintf(err, cap, "%s: the TLS handshake failed (does the port speak TLS?): %s", u->base, why);
        return OTPCTL_HTTP_ETLS;
    case CURLE_GOT_NOTHING:
        snprintf(err, cap, "%s: %s%s", u->base, why, u->https ? "" : " (a port that speaks https://?)");
        return OTPCTL_HTTP_EPROTO;
    default:
        snprintf(err, cap, "%s: %s", u->base, why);
        return OTPCTL_HTTP_EPROTO;
    }
}

enum otpctl_http_rc otpctl_http_call(const struct otpctl_http_url *u, const struct otpctl_http_req *rq,
                                     struct otpctl_http_answer *out, char *err, size_t cap)
{
    struct hc_sink sink = {out, 0, 0, 0};
    struct curl_slist *headers = NULL;
    enum otpctl_http_rc rc = OTPCTL_HTTP_ENOMEM;
    char errbuf[CURL_ERROR_SIZE] = "", *auth = NULL, *url = NULL;
    size_t n = strlen(u->base) + strlen(rq->path) + 1;
    CURL *h = NULL;
    CURLcode cc;
    long status = 0;

    memset(out, 0, sizeof(*out));
    snprintf(err, cap, "out of memory");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return OTPCTL_HTTP_ENOMEM;
    if ((h = curl_easy_init()) == NULL || (url = malloc(n)) == NULL || hc_headers(rq, &headers, &auth) < 0)
        goto out;
    snprintf(url, n, "%s%s", u->base, rq->path);
    if ((cc = hc_options(h, url, rq, headers, errbuf, &sink)) != CURLE_OK) {
        snprintf(err, cap, "libcurl: %s", curl_easy_strerror(cc));
        rc = OTPCTL_HTTP_EPROTO;
        goto out;
    }
    if ((cc = curl_easy_perform(h)) != CURLE_OK) {
        rc = hc_error(h, cc, &sink, u, rq, errbuf, err, cap);
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    out->status = (int)status;
    /* A body-less answer (204) is an empty text. */
    if (out->body == NULL && (out->body = calloc(1, 1)) == NULL)
        goto out;
    rc = OTPCTL_HTTP_OK;
out:
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    if (auth != NULL) {
        explicit_bzero(auth, strlen(auth)); /* it holds the bearer */
        free(auth);
    }
    free(url);
    curl_global_cleanup();
    if (rc != OTPCTL_HTTP_OK)
        otpctl_http_answer_free(out);
    return rc;
}
