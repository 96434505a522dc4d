/*
 * otpctl's HTTP/1.1 client (http.h). One request per connection with
 * Connection: close, so an answer ends at its Content-Length, at the end of
 * its chunks, or when the server closes. The load is a few requests per
 * command; nothing here is reused between calls.
 *
 * Bounds: connecting to each address waits at most connect_ms; the whole
 * call (connect, send, read) ends by one deadline of total_ms, checked
 * before every wait; the head is at most OTPCTL_HTTP_HEAD_MAX bytes and the
 * body at most OTPCTL_HTTP_BODY_MAX.
 */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/base/clock.h"

/* Chunk framing a chunked answer may spend beyond its body: sizes and line
 * ends of ordinary chunks are a few bytes per KiB, so 1 MiB is only reached
 * by a server dribbling tiny chunks, which is refused. */
#define HC_FRAMING_MAX (1u << 20)
#define HC_RAW_MAX ((size_t)OTPCTL_HTTP_HEAD_MAX + OTPCTL_HTTP_BODY_MAX + HC_FRAMING_MAX)

/* The bytes read so far (raw: head and framed body). */
struct hc_buf {
    char *p;
    size_t len, cap;
};

/* What the head says about the body. */
struct hc_head {
    int status;
    size_t head_len;    /* bytes up to and including the blank line */
    int chunked;        /* Transfer-Encoding ends in chunked */
    int has_length;     /* Content-Length given */
    size_t length;      /* its value */
    char content_type[128];
};

enum otpctl_http_rc otpctl_http_parse_url(const char *url, struct otpctl_http_url *out, char *err, size_t cap)
{
    const char *p, *host, *host_end, *port = NULL, *port_end = NULL, *path;
    size_t n;

    memset(out, 0, sizeof(*out));
    if (strncasecmp(url, "https://", 8) == 0) {
        snprintf(err, cap, "%s: https:// is not supported yet (otpctl speaks plain HTTP until TLS lands); use "
                           "http:// on loopback or through a tunnel such as ssh -L", url);
        return OTPCTL_HTTP_EURL;
    }
    if (strncasecmp(url, "http://", 7) != 0) {
        snprintf(err, cap, "-s: a URL of the form http://HOST[:PORT][/PATH] is needed");
        return OTPCTL_HTTP_EURL;
    }
    for (p = url; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '?' || *p == '#' || *p == '@' || *p == '\\') {
            snprintf(err, cap, "-s: a URL of the form http://HOST[:PORT][/PATH] is needed (no user, query, "
                               "fragment, space or control character)");
            return OTPCTL_HTTP_EURL;
        }
    host = url + 7;
    path = host + strcspn(host, "/");
    if (*host == '[') {
        host++;
        if ((host_end = memchr(host, ']', (size_t)(path - host))) == NULL)
            goto bad_host;
        out->ipv6 = 1;
        p = host_end + 1;
    } else {
        host_end = host + strcspn(host, ":/");
        p = host_end;
    }
    if (p < path) {
        if (*p != ':')
            goto bad_host;
        port = p + 1;
        port_end = path;
    }
    n = (size_t)(host_end - host);
    if (n == 0 || n >= sizeof(out->host))
        goto bad_host;
    for (p = host; p < host_end; p++) {
        int ok = out->ipv6 ? strchr("0123456789abcdefABCDEF:.", *p) != NULL
                           : (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                 *p == '-' || *p == '.';
        if (!ok)
            goto bad_host;
    }
    memcpy(out->host, host, n);
    if (port != NULL) {
        long v = 0;
        if (port == port_end || port_end - port > 5)
            goto bad_port;
        for (p = port; p < port_end; p++) {
            if (*p < '0' || *p > '9')
                goto bad_port;
            v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > 65535)
            goto bad_port;
        snprintf(out->port, sizeof(out->port), "%ld", v);
    } else {
        snprintf(out->port, sizeof(out->port), "80");
    }
    n = strlen(path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    if (n >= sizeof(out->base) - 64) {
        snprintf(err, cap, "-s: the URL's path is too long");
        return OTPCTL_HTTP_EURL;
    }
    memcpy(out->base, path, n);
    return OTPCTL_HTTP_OK;
bad_host:
    snprintf(err, cap, "-s: the URL's host is not a name, an IPv4 address or a bracketed IPv6 address");
    return OTPCTL_HTTP_EURL;
bad_port:
    snprintf(err, cap, "-s: the URL's port is not a number from 1 to 65535");
    return OTPCTL_HTTP_EURL;
}

int otpctl_http_is_loopback(const struct otpctl_http_url *u)
{
    /* 127.0.0.0/8 written as an address: digits and dots only (127.example.com is a name). */
    return strcasecmp(u->host, "localhost") == 0 || strcmp(u->host, "::1") == 0 ||
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

/* Milliseconds left until deadline_ns (0 when past). */
static int hc_left_ms(uint64_t deadline_ns)
{
    uint64_t now = clock_mono_ns();

    if (now >= deadline_ns)
        return 0;
    return (int)((deadline_ns - now + 999999) / 1000000);
}

/* Waits for events on fd until deadline_ns: 1 ready, 0 timed out, -1 error. */
static int hc_wait(int fd, short events, uint64_t deadline_ns)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int left, r;

    for (;;) {
        if ((left = hc_left_ms(deadline_ns)) == 0)
            return 0;
        r = poll(&pfd, 1, left);
        if (r > 0)
            return 1;
        if (r == 0)
            continue; /* the loop re-reads the clock: poll may wake a little early */
        if (errno != EINTR)
            return -1;
    }
}

/* Connects to the first address of u that takes the connection; returns
 * the non-blocking socket or -1 with err set. */
static int hc_connect(const struct otpctl_http_url *u, int connect_ms, uint64_t deadline_ns,
                      enum otpctl_http_rc *rc, char *err, size_t cap)
{
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1, gai, timed_out = 0, saved = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    *rc = OTPCTL_HTTP_EUNREACHABLE;
    if ((gai = getaddrinfo(u->host, u->port, &hints, &res)) != 0) {
        snprintf(err, cap, "%s: %s", u->host, gai_strerror(gai));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        uint64_t until = clock_mono_ns() + (uint64_t)connect_ms * 1000000u;
        int soerr = 0, w;
        socklen_t sl = sizeof(soerr);

        if (until > deadline_ns)
            until = deadline_ns;
        if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol)) < 0) {
            saved = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            w = hc_wait(fd, POLLOUT, until);
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                break;
            if (w == 0)
                timed_out = 1;
            else
                saved = soerr ? soerr : errno;
        } else {
            saved = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (timed_out && saved == 0) {
            *rc = OTPCTL_HTTP_ETIMEOUT;
            snprintf(err, cap, "%s port %s: no connection within %d ms", u->host, u->port, connect_ms);
        } else {
            snprintf(err, cap, "%s port %s: %s", u->host, u->port, saved ? strerror(saved) : "cannot connect");
        }
    }
    return fd;
}

/* Sends len bytes of p by deadline_ns. */
static enum otpctl_http_rc hc_send(int fd, const char *p, size_t len, uint64_t deadline_ns, char *err, size_t cap)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = hc_wait(fd, POLLOUT, deadline_ns);
            if (w == 1)
                continue;
            if (w == 0) {
                snprintf(err, cap, "sending the request timed out");
                return OTPCTL_HTTP_ETIMEOUT;
            }
        }
        snprintf(err, cap, "sending the request: %s", strerror(errno));
        return OTPCTL_HTTP_EUNREACHABLE;
    }
    return OTPCTL_HTTP_OK;
}

/* Parses a decimal Content-Length; -1 when it is not one. */
static int hc_parse_size(const char *p, const char *end, size_t *out)
{
    size_t v = 0;

    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p == end)
        return -1;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > (SIZE_MAX - 9) / 10)
            return -1;
        v = v * 10 + (size_t)(*p - '0');
    }
    *out = v;
    return 0;
}

/* A header line "name: value": 1 when its name is want (any case); *value
 * is set to the value, trimmed on the left. */
static int hc_header_is(const char *line, const char *end, const char *want, const char **value)
{
    size_t n = strlen(want);

    if ((size_t)(end - line) <= n || strncasecmp(line, want, n) != 0 || line[n] != ':')
        return 0;
    for (*value = line + n + 1; *value < end && (**value == ' ' || **value == '\t'); (*value)++)
        ;
    return 1;
}

/*
 * Parses the head at p (len bytes read so far). Returns 0 when more bytes
 * are needed, 1 when the head is whole (in *h), -1 on a malformed or too
 * long head (err set).
 */
static int hc_parse_head(const char *p, size_t len, struct hc_head *h, char *err, size_t cap)
{
    const char *end = NULL, *line, *eol, *v;
    size_t i;

    for (i = 3; i < len; i++)
        if (p[i - 3] == '\r' && p[i - 2] == '\n' && p[i - 1] == '\r' && p[i] == '\n') {
            end = p + i + 1;
            break;
        }
    if (end == NULL) {
        if (len > OTPCTL_HTTP_HEAD_MAX) {
            snprintf(err, cap, "the answer's headers are longer than %u bytes", OTPCTL_HTTP_HEAD_MAX);
            return -1;
        }
        return 0;
    }
    memset(h, 0, sizeof(*h));
    h->head_len = (size_t)(end - p);
    if (h->head_len < 12 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' || p[9] < '1' || p[9] > '5' ||
        p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9' || (p[12] != ' ' && p[12] != '\r')) {
        snprintf(err, cap, "the answer is not HTTP/1.x");
        return -1;
    }
    h->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    /* memmem, not strstr: a NUL byte in a wrong server's head must not end the search early. */
    line = (const char *)memmem(p, h->head_len, "\r\n", 2) + 2;
    for (; line < end - 2; line = eol + 2) {
        eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (hc_header_is(line, eol, "content-length", &v)) {
            size_t n;
            if (hc_parse_size(v, eol, &n) < 0 || (h->has_length && n != h->length)) {
                snprintf(err, cap, "the answer's Content-Length is not one number");
                return -1;
            }
            h->has_length = 1;
            h->length = n;
        } else if (hc_header_is(line, eol, "transfer-encoding", &v)) {
            const char *e = eol;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            h->chunked = e - v >= 7 && strncasecmp(e - 7, "chunked", 7) == 0;
            if (!h->chunked) {
                snprintf(err, cap, "the answer's Transfer-Encoding is not chunked");
                return -1;
            }
        } else if (hc_header_is(line, eol, "content-type", &v)) {
            size_t n = (size_t)(eol - v), k;
            if (n >= sizeof(h->content_type))
                n = sizeof(h->content_type) - 1;
            for (k = 0; k < n; k++)
                h->content_type[k] = (char)((v[k] >= 'A' && v[k] <= 'Z') ? v[k] + 32 : v[k]);
            h->content_type[n] = '\0';
        }
    }
    return 1;
}

/*
 * Decodes a chunked body from p (len bytes, all that was read) into a new
 * buffer. Returns 1 with *out and *out_len when the last chunk was read, 0
 * when the bytes end before it, -1 when the framing is wrong or the body
 * is too big (err set).
 */
static int hc_unchunk(const char *p, size_t len, char **out, size_t *out_len, char *err, size_t cap)
{
    const char *end = p + len;
    char *body = NULL;
    size_t n = 0;

    for (;;) {
        const char *eol = NULL, *q;
        size_t size = 0;
        for (q = p; q + 1 < end; q++)
            if (q[0] == '\r' && q[1] == '\n') {
                eol = q;
                break;
            }
        if (eol == NULL)
            goto more;
        for (q = p; q < eol && *q != ';'; q++) {
            int d = (*q >= '0' && *q <= '9') ? *q - '0'
                    : (*q >= 'a' && *q <= 'f') ? *q - 'a' + 10
                    : (*q >= 'A' && *q <= 'F') ? *q - 'A' + 10
                                               : -1;
            if (d < 0 || size > OTPCTL_HTTP_BODY_MAX) {
                snprintf(err, cap, "the answer's chunk framing is wrong");
                free(body);
                return -1;
            }
            size = size * 16 + (size_t)d;
        }
        if (q == p) {
            snprintf(err, cap, "the answer's chunk framing is wrong");
            free(body);
            return -1;
        }
        p = eol + 2;
        if (size == 0)
            break; /* trailers, if any, are not read: Connection: close ends them */
        if (n + size > OTPCTL_HTTP_BODY_MAX) {
            snprintf(err, cap, "the answer is larger than %u bytes", OTPCTL_HTTP_BODY_MAX);
            free(body);
            return -1;
        }
        if ((size_t)(end - p) < size + 2)
            goto more;
        if (p[size] != '\r' || p[size + 1] != '\n') {
            snprintf(err, cap, "the answer's chunk framing is wrong");
            free(body);
            return -1;
        }
        {
            char *nb = realloc(body, n + size + 1);
            if (nb == NULL) {
                free(body);
                snprintf(err, cap, "out of memory");
                return -1;
            }
            body = nb;
        }
        memcpy(body + n, p, size);
        n += size;
        p += size + 2;
    }
    if (body == NULL && (body = malloc(1)) == NULL) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    body[n] = '\0';
    *out = body;
    *out_len = n;
    return 1;
more:
    free(body);
    return 0;
}

/*
 * Looks at what was read: 1 when a whole final answer is there (*out
 * filled), 0 when more is needed, -1 on error (*rc, err). eof: the server
 * closed, so an answer without length ends here.
 */
static int hc_answer(struct hc_buf *b, int eof, struct otpctl_http_answer *out, enum otpctl_http_rc *rc, char *err,
                     size_t cap)
{
    struct hc_head h;
    const char *body;
    size_t avail;
    int r;

    *rc = OTPCTL_HTTP_EPROTO;
    for (;;) {
        if ((r = hc_parse_head(b->p, b->len, &h, err, cap)) <= 0) {
            if (r == 0 && eof)
                snprintf(err, cap, "the server closed the connection before a whole answer");
            return r == 0 && !eof ? 0 : -1;
        }
        /* An interim answer (100 Continue and kin) is dropped; the final one follows. */
        if (h.status >= 200 || h.status == 101)
            break;
        memmove(b->p, b->p + h.head_len, b->len - h.head_len);
        b->len -= h.head_len;
        b->p[b->len] = '\0';
    }
    body = b->p + h.head_len;
    avail = b->len - h.head_len;
    out->status = h.status;
    memcpy(out->content_type, h.content_type, sizeof(out->content_type));
    if (h.status == 204 || h.status == 304) {
        avail = 0;
    } else if (h.chunked) {
        /* Decoding starts over on each call, so it waits for what can be the
         * end (a blank line last, or the close): a long answer read in many
         * pieces is then decoded once or twice, not once per piece. */
        if (!eof && (avail < 5 || memcmp(b->p + b->len - 4, "\r\n\r\n", 4) != 0))
            return 0;
        if ((r = hc_unchunk(body, avail, &out->body, &out->len, err, cap)) < 0)
            return -1;
        if (r == 0 && eof) {
            snprintf(err, cap, "the server closed the connection before the answer's last chunk");
            return -1;
        }
        return r;
    } else if (h.has_length) {
        if (h.length > OTPCTL_HTTP_BODY_MAX) {
            snprintf(err, cap, "the answer is larger than %u bytes", OTPCTL_HTTP_BODY_MAX);
            return -1;
        }
        if (avail < h.length) {
            if (eof)
                snprintf(err, cap, "the server closed the connection before the answer's Content-Length");
            return eof ? -1 : 0;
        }
        avail = h.length;
    } else {
        if (avail > OTPCTL_HTTP_BODY_MAX) {
            snprintf(err, cap, "the answer is larger than %u bytes", OTPCTL_HTTP_BODY_MAX);
            return -1;
        }
        if (!eof)
            return 0;
    }
    if ((out->body = malloc(avail + 1)) == NULL) {
        *rc = OTPCTL_HTTP_ENOMEM;
        snprintf(err, cap, "out of memory");
        return -1;
    }
    memcpy(out->body, body, avail);
    out->body[avail] = '\0';
    out->len = avail;
    return 1;
}

/* Reads until a whole answer is in *out, by deadline_ns. */
static enum otpctl_http_rc hc_read(int fd, uint64_t deadline_ns, struct otpctl_http_answer *out, char *err,
                                   size_t cap)
{
    struct hc_buf b = {0};
    enum otpctl_http_rc rc = OTPCTL_HTTP_OK;
    int eof = 0, r;

    for (;;) {
        ssize_t n;
        if (b.cap - b.len < 4096 + 1) {
            size_t ncap = b.cap ? b.cap * 2 : 16384;
            char *np;
            if (ncap > HC_RAW_MAX + 1)
                ncap = HC_RAW_MAX + 1;
            if (ncap - b.len < 2) {
                rc = OTPCTL_HTTP_EPROTO;
                snprintf(err, cap, "the answer is larger than %u bytes", OTPCTL_HTTP_BODY_MAX);
                break;
            }
            if ((np = realloc(b.p, ncap)) == NULL) {
                rc = OTPCTL_HTTP_ENOMEM;
                snprintf(err, cap, "out of memory");
                break;
            }
            b.p = np;
            b.cap = ncap;
        }
        n = recv(fd, b.p + b.len, b.cap - b.len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = hc_wait(fd, POLLIN, deadline_ns);
            if (w == 1)
                continue;
            rc = w == 0 ? OTPCTL_HTTP_ETIMEOUT : OTPCTL_HTTP_EUNREACHABLE;
            if (w == 0)
                snprintf(err, cap, "no whole answer within the time allowed");
            else
                snprintf(err, cap, "reading the answer: %s", strerror(errno));
            break;
        }
        if (n < 0) {
            rc = OTPCTL_HTTP_EUNREACHABLE;
            snprintf(err, cap, "reading the answer: %s", strerror(errno));
            break;
        }
        if (n == 0)
            eof = 1;
        b.len += (size_t)n;
        b.p[b.len] = '\0';
        if ((r = hc_answer(&b, eof, out, &rc, err, cap)) != 0) {
            if (r < 0 && rc == OTPCTL_HTTP_OK)
                rc = OTPCTL_HTTP_EPROTO;
            if (r > 0)
                rc = OTPCTL_HTTP_OK;
            break;
        }
    }
    free(b.p);
    return rc;
}

enum otpctl_http_rc otpctl_http_call(const struct otpctl_http_url *u, const char *method, const char *path,
                                     const char *bearer, const char *body, int connect_ms, int total_ms,
                                     struct otpctl_http_answer *out, char *err, size_t cap)
{
    uint64_t deadline_ns = clock_mono_ns() + (uint64_t)total_ms * 1000000u;
    enum otpctl_http_rc rc;
    char *req = NULL, port[16] = "";
    size_t blen = body ? strlen(body) : 0, need;
    int fd, n;

    memset(out, 0, sizeof(*out));
    if ((fd = hc_connect(u, connect_ms, deadline_ns, &rc, err, cap)) < 0)
        return rc;
    if (strcmp(u->port, "80") != 0)
        snprintf(port, sizeof(port), ":%s", u->port);
    need = strlen(method) + strlen(u->base) + strlen(path) + strlen(u->host) + (bearer ? strlen(bearer) : 0) + blen +
           256;
    if ((req = malloc(need)) == NULL) {
        rc = OTPCTL_HTTP_ENOMEM;
        snprintf(err, cap, "out of memory");
        goto out;
    }
    n = snprintf(req, need,
                 "%s %s%s HTTP/1.1\r\nHost: %s%s%s%s\r\nUser-Agent: otpctl\r\nAccept: application/json\r\n"
                 "Connection: close\r\n%s%s%s",
                 method, u->base, path, u->ipv6 ? "[" : "", u->host, u->ipv6 ? "]" : "", port,
                 bearer ? "Authorization: Bearer " : "", bearer ? bearer : "", bearer ? "\r\n" : "");
    if (n > 0 && (size_t)n < need && body != NULL)
        n += snprintf(req + n, need - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                      blen);
    if (n > 0 && (size_t)n + 2 + blen < need) {
        memcpy(req + n, "\r\n", 2);
        if (blen)
            memcpy(req + n + 2, body, blen);
        n += 2 + (int)blen;
    } else {
        rc = OTPCTL_HTTP_ENOMEM;
        snprintf(err, cap, "the request does not fit its buffer");
        goto out;
    }
    if ((rc = hc_send(fd, req, (size_t)n, deadline_ns, err, cap)) != OTPCTL_HTTP_OK)
        goto out;
    rc = hc_read(fd, deadline_ns, out, err, cap);
out:
    if (req != NULL) {
        explicit_bzero(req, need); /* it holds the bearer */
        free(req);
    }
    close(fd);
    if (rc != OTPCTL_HTTP_OK)
        otpctl_http_answer_free(out);
    return rc;
}
