/*
 * config_net: the keys that say where otpd listens and where its Redis is:
 * listen and listen_internal ("HOST:PORT", "[V6]:PORT"), tls, and redis
 * (its URL, ACL user and sentinels). Runs at start-up and on SIGHUP, never
 * on a request path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"

/* Parses "PORT" fully into 1..65535; -1 otherwise. */
static long cfg_port(const char *s)
{
    char *end;
    long port;

    errno = 0;
    port = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || port < 1 || port > 65535)
        return -1;
    return port;
}

/* Splits "host:port" or "[v6]:port" in place; NULL when malformed. */
static char *cfg_hostport(char *s, long *port)
{
    char *colon = strrchr(s, ':');

    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return NULL;
        *close = '\0';
        colon = close + 1;
        s++;
    } else if (colon == NULL || strchr(s, ':') != colon) {
        return NULL; /* no port, or an IPv6 address without brackets */
    }
    *colon = '\0';
    if ((*port = cfg_port(colon + 1)) < 0)
        return NULL;
    return s;
}

/* "127.0.0.1:8080" or "[::1]:8080". */
static void cfg_listen(struct cfg_ctx *x, struct config *c, json_t *root)
{
    char s[64], *host;
    long port;

    if (!cfg_str(x, root, "", "listen", 1, s, sizeof(s)))
        return;
    if ((host = cfg_hostport(s, &port)) == NULL || host[0] == '\0') {
        cfg_error(x, "listen", "must be HOST:PORT, IPv6 as [ADDR]:PORT; port must be from 1 to 65535");
        return;
    }
    snprintf(c->http.listen_host, sizeof(c->http.listen_host), "%s", host);
    c->http.listen_port = (int)port;
}

/* listen_internal: like listen, and not listen's own address (the
 * second bind would fail later, with a vaguer message). */
static void cfg_listen_internal(struct cfg_ctx *x, struct config *c, json_t *root)
{
    char s[64], *host;
    long port;

    if (!cfg_str(x, root, "", "listen_internal", 0, s, sizeof(s)))
        return;
    if ((host = cfg_hostport(s, &port)) == NULL || host[0] == '\0') {
        cfg_error(x, "listen_internal", "must be HOST:PORT, IPv6 as [ADDR]:PORT; port must be from 1 to 65535");
        return;
    }
    if (port == c->http.listen_port && strcmp(host, c->http.listen_host) == 0) {
        cfg_error(x, "listen_internal", "must differ from listen");
        return;
    }
    snprintf(c->http.listen_internal_host, sizeof(c->http.listen_internal_host), "%s", host);
    c->http.listen_internal_port = (int)port;
}

/* The top level's listeners: listen, then listen_internal, which must
 * differ from it. */
void cfg_listeners(struct cfg_ctx *x, struct config *c, json_t *root)
{
    cfg_listen(x, c, root);
    cfg_listen_internal(x, c, root);
}

/* tls: present means HTTPS; both files are required and named (rows). */
void cfg_tls(struct cfg_ctx *x, struct config *c, json_t *obj)
{
    (void)x;
    (void)obj;
    c->tls.on = 1;
}

/* "redis://host[:port][/db]"; the password comes from redis.password_env. */
static void cfg_redis_url(struct cfg_ctx *x, struct config *c, const char *url)
{
    const char *p = url, *slash;
    char hostport[256], *host = hostport, *end;
    long port = 6379, db = 0;
    size_t n;

    if (strncmp(p, "redis://", 8) != 0) {
        cfg_error(x, "redis.url", "must start with redis://");
        return;
    }
    p += 8;
    if (strchr(p, '@') != NULL) {
        /* Secrets come from the environment, never from the file. */
        cfg_error(x, "redis.url", "must not hold credentials; name them with redis.password_env");
        return;
    }
    slash = strchr(p, '/');
    n = slash ? (size_t)(slash - p) : strlen(p);
    if (n >= sizeof(hostport)) {
        cfg_error(x, "redis.url", "host is too long");
        return;
    }
    memcpy(hostport, p, n);
    hostport[n] = '\0';
    if (strchr(hostport, ':') != NULL && (host = cfg_hostport(hostport, &port)) == NULL) {
        cfg_error(x, "redis.url", "must be redis://HOST[:PORT][/DB]; port must be from 1 to 65535");
        return;
    }
    if (host[0] == '\0') {
        cfg_error(x, "redis.url", "has no host");
        return;
    }
    if (slash != NULL && slash[1] != '\0') {
        errno = 0;
        db = strtol(slash + 1, &end, 10);
        if (errno || *end != '\0' || db < 0 || db > 15) {
            cfg_error(x, "redis.url", "database must be from 0 to 15");
            return;
        }
    }
    snprintf(c->redis.host, sizeof(c->redis.host), "%s", host);
    c->redis.port = (int)port;
    c->redis.db = (int)db;
}

/* redis.sentinel.addrs: ["host:port", ...] (s is redis.sentinel). */
void cfg_sentinel_addrs(struct cfg_ctx *x, struct config *c, json_t *s)
{
    json_t *addrs = json_object_get(s, "addrs"), *a;
    char buf[300], path[64], *host;
    size_t i;
    long port;

    if (!json_is_array(addrs) || json_array_size(addrs) == 0 || json_array_size(addrs) > CFG_SENTINELS_MAX) {
        cfg_error(x, "redis.sentinel.addrs", "must be an array of 1 to %d \"HOST:PORT\"", CFG_SENTINELS_MAX);
        return;
    }
    json_array_foreach(addrs, i, a) {
        snprintf(path, sizeof(path), "redis.sentinel.addrs.%zu", i);
        if (!json_is_string(a) || json_string_length(a) >= sizeof(buf)) {
            cfg_error(x, path, "must be \"HOST:PORT\"");
            continue;
        }
        snprintf(buf, sizeof(buf), "%s", json_string_value(a));
        if ((host = cfg_hostport(buf, &port)) == NULL || host[0] == '\0' || strlen(host) >= 256) {
            cfg_error(x, path, "must be \"HOST:PORT\" with a port from 1 to 65535");
            continue;
        }
        snprintf(c->redis.sentinel_hosts[c->redis.n_sentinels], 256, "%s", host);
        c->redis.sentinel_ports[c->redis.n_sentinels++] = (int)port;
    }
}

/* redis.username: an ACL user, which needs its password. */
static void cfg_redis_user(struct cfg_ctx *x, struct config *c, json_t *r)
{
    const char *u = c->redis.username;
    size_t i;

    if (!cfg_str(x, r, "redis", "username", 0, c->redis.username, sizeof(c->redis.username)))
        return;
    for (i = 0; u[i] > 0x20 && u[i] < 0x7f; i++)
        ;
    if (i == 0 || u[i] != '\0')
        cfg_error(x, "redis.username", "must be 1 to %d printable ASCII bytes without spaces", CFG_NAME_MAX - 1);
    else if (json_object_get(r, "password_env") == NULL)
        cfg_error(x, "redis.username", "needs redis.password_env");
}


/* After redis's rows: the URL (required unless sentinels give the master)
 * and the ACL user. */
void cfg_redis(struct cfg_ctx *x, struct config *c, json_t *r)
{
    json_t *sentinel = json_object_get(r, "sentinel");
    char url[CFG_STR_MAX];

    /* With sentinels the master's address comes from them; the URL, if
     * any, still gives the database. */
    if (cfg_str(x, r, "redis", "url", sentinel == NULL, url, sizeof(url)))
        cfg_redis_url(x, c, url);
    cfg_redis_user(x, c, r);
}
