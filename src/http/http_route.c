/*
 * http_route: the route table and the dispatcher that walks it. Each row
 * holds a path, the methods it answers, its flags (which key it needs,
 * which listener serves it, what body it takes, how it is logged) and its
 * handler; 404 and 405 (with Allow) come from the rows, and a new route is
 * one row. Every request passes here twice (its headers, then its whole
 * body), on its worker; a walk of fifteen rows, no allocation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../admin/admin.h"
#include "http_int.h"

/* What rows repeat. */
#define CALLER (HTTP_AUTH_CALLER | HTTP_ON_API)
#define ADMIN (HTTP_AUTH_ADMIN | HTTP_ON_API)
#define PROBE (HTTP_ON_INTERNAL | HTTP_QUIET)
#define GET_HEAD (HTTP_GET | HTTP_HEAD)

/* The first row whose path matches names the route; the rows after it with
 * the same path are its other methods. "/v1/otp/verify" and
 * "/v1/otp/cancel" come before the prefix "/v1/otp/" that would take them. */
static const struct http_route http_routes[] = {
    {"/v1/otp", HTTP_POST, CALLER | HTTP_BODY_JSON, http_issue, "issue", 0, "issue.accepted",
     "issue.refused"},
    {"/v1/otp/verify", HTTP_POST, CALLER | HTTP_BODY_JSON, http_verify, "verify", 0, "verify.verified",
     "verify.refused"},
    {"/healthz", GET_HEAD, PROBE, http_health, "healthz", 0, NULL, NULL},
    {"/readyz", GET_HEAD, PROBE, http_ready, "readyz", 0, NULL, NULL},
    {"/metrics", GET_HEAD, PROBE, http_metrics, "metrics", 0, NULL, NULL},
    {"/v1/dlr/kannel", GET_HEAD, HTTP_ON_API, http_dlr_kannel, "dlr_kannel", 0, NULL, NULL},
    {"/v1/dlr/twilio", HTTP_POST, HTTP_ON_API | HTTP_BODY_FORM, http_dlr_twilio, "dlr_twilio", 0, NULL, NULL},
    {"/v1/otp/cancel", HTTP_POST, CALLER | HTTP_BODY_JSON, http_cancel, "cancel", 0, NULL, NULL},
    {"/v1/otp/", GET_HEAD, CALLER | HTTP_PREFIX, http_status, "status", 0, NULL, NULL},
    {"/v1/admin/overrides", GET_HEAD, ADMIN, http_admin_list, "admin_overrides", ADMIN_OVERRIDE, NULL, NULL},
    {"/v1/admin/overrides", HTTP_POST, ADMIN | HTTP_BODY_JSON, http_admin_add, "admin_overrides",
     ADMIN_OVERRIDE, NULL, NULL},
    {"/v1/admin/overrides/", HTTP_DELETE, ADMIN | HTTP_PREFIX, http_admin_remove, "admin_override",
     ADMIN_OVERRIDE, NULL, NULL},
    {"/v1/admin/blocks", GET_HEAD, ADMIN, http_admin_list, "admin_blocks", ADMIN_BLOCK, NULL, NULL},
    {"/v1/admin/blocks", HTTP_POST, ADMIN | HTTP_BODY_JSON, http_admin_add, "admin_blocks", ADMIN_BLOCK, NULL,
     NULL},
    {"/v1/admin/blocks/", HTTP_DELETE, ADMIN | HTTP_PREFIX, http_admin_remove, "admin_block", ADMIN_BLOCK,
     NULL, NULL},
    {"/v1/admin/unlock", HTTP_POST, ADMIN | HTTP_BODY_JSON, http_admin_unlock, "admin_unlock", 0, NULL, NULL},
    /* Twilio Verify v2: one row, routed again inside by http_v2. */
    {"/v2", GET_HEAD | HTTP_POST | HTTP_DELETE, HTTP_TWILIO | HTTP_ON_API | HTTP_SUBTREE | HTTP_BODY_FORM, http_v2,
     "v2", 0, NULL, NULL},
};

#define HTTP_N_ROUTES (sizeof(http_routes) / sizeof(http_routes[0]))

/* The methods the table knows, in Allow's order. */
static const struct {
    const char *name;
    unsigned bit;
} http_methods[] = {{"GET", HTTP_GET}, {"HEAD", HTTP_HEAD}, {"POST", HTTP_POST}, {"DELETE", HTTP_DELETE}};

#define HTTP_N_METHODS (sizeof(http_methods) / sizeof(http_methods[0]))

/* method's bit; 0 for a method no row answers. */
static unsigned http_method_bit(const char *method)
{
    size_t i;

    for (i = 0; i < HTTP_N_METHODS; i++)
        if (strcmp(method, http_methods[i].name) == 0)
            return http_methods[i].bit;
    return 0;
}

/* Allow's value for the methods in bits ("GET, HEAD, POST"). */
static void http_allow_text(unsigned bits, char *out, size_t cap)
{
    size_t i, len = 0;

    out[0] = '\0';
    for (i = 0; i < HTTP_N_METHODS; i++)
        if (bits & http_methods[i].bit)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", http_methods[i].name);
}

/* 1 when url is r's path, or for a prefix, its path and one more
 * non-empty segment. */
static int http_path_matches(const struct http_route *r, const char *url)
{
    size_t n = strlen(r->path);

    if (r->flags & HTTP_SUBTREE)
        return strncmp(url, r->path, n) == 0 && (url[n] == '\0' || url[n] == '/');
    if (!(r->flags & HTTP_PREFIX))
        return strcmp(url, r->path) == 0;
    return strncmp(url, r->path, n) == 0 && url[n] != '\0' && !strchr(url + n, '/');
}

/* Which listener serves which rows. With listen_internal set, the probes
 * and the metrics are its alone and it serves nothing else; the other
 * listener answers 404 there, as for any path it does not know. */
static int http_route_serves(const struct http *h, const struct http_route *r, int internal)
{
    return h->di == NULL || (r->flags & (internal ? HTTP_ON_INTERNAL : HTTP_ON_API));
}

/* Picks rq's row for url and method on rq's listener: NULL when no path
 * matches; the route's first row with rq->allow set when none of its rows
 * answers the method. */
void http_route_pick(const struct http *h, struct http_req *rq, const char *method)
{
    const struct http_route *first = NULL, *r;
    unsigned bit = http_method_bit(method), allowed = 0;

    for (r = http_routes; r < http_routes + HTTP_N_ROUTES; r++) {
        if (!http_route_serves(h, r, rq->internal))
            continue;
        if (first == NULL ? !http_path_matches(r, rq->url) : strcmp(r->path, first->path) != 0)
            continue;
        if (first == NULL)
            first = r;
        if (r->methods & bit) {
            rq->route = r;
            return;
        }
        allowed |= r->methods;
    }
    rq->route = first;
    if (first != NULL)
        http_allow_text(allowed, rq->allow, sizeof(rq->allow));
}

enum MHD_Result http_route_begin(struct http *h, struct MHD_Connection *con, struct http_req *rq,
                                 const char *method)
{
    const char *cl;

    if (http_method_bit(method) != 0)
        snprintf(rq->method, sizeof(rq->method), "%s", method);
    http_route_pick(h, rq, method);
    if (rq->route == NULL)
        return http_problem(h, con, OUT_NOT_FOUND, "no such route", NULL, NULL);
    /* The Twilio surface routes again inside, and knows each resource's
     * methods: it answers a method no row takes itself. */
    if (rq->allow[0] && (rq->route->flags & HTTP_TWILIO))
        rq->allow[0] = '\0';
    else if (rq->allow[0])
        return http_problem(h, con, OUT_METHOD_NOT_ALLOWED, "method not allowed here", NULL, rq->allow);
    if (rq->route->flags & (HTTP_BODY_JSON | HTTP_BODY_FORM)) {
        cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoll(cl, NULL, 10) > HTTP_BODY_MAX)
            return http_problem(h, con, OUT_PAYLOAD_TOO_LARGE, "the body is larger than 4 KiB", NULL, NULL);
        if ((rq->route->flags & HTTP_BODY_JSON) && !http_is_json(con))
            return http_problem(h, con, OUT_UNSUPPORTED_MEDIA, "the body must be application/json", NULL,
                                NULL);
    }
    return MHD_YES;
}

/* Compares a presented key with each configured one in constant time;
 * returns the matching key's name or NULL, and in *admin its role (1 for
 * "admin"). */
static const char *http_auth(struct http *h, struct MHD_Connection *con, int *admin)
{
    const char *hdr = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *name = NULL, *key;
    size_t i, n, j;

    if (hdr == NULL || strncasecmp(hdr, "Bearer ", 7) != 0 || hdr[7] == '\0')
        return NULL;
    key = hdr + 7;
    n = strlen(key);
    for (i = 0; i < h->keys->n_api_keys; i++) {
        const char *want = h->keys->api_keys[i].key;
        size_t m = strlen(want);
        unsigned char diff = n != m;
        for (j = 0; j < m; j++)
            diff |= (unsigned char)(want[j] ^ key[j % n]);
        if (diff == 0) {
            name = h->keys->api_keys[i].name;
            *admin = h->keys->api_keys[i].admin;
        }
    }
    return name;
}

enum MHD_Result http_route_run(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    unsigned need = rq->route->flags & (HTTP_AUTH_CALLER | HTTP_AUTH_ADMIN);
    int admin = 0;

    if (rq->route->flags & HTTP_TWILIO) {
        if ((rq->caller = http_v2_auth(h, con, &rq->account)) == NULL)
            return http_problem(h, con, OUT_UNAUTHORIZED,
                                "Basic auth with an account SID and its key, or an API key SID and its secret", NULL,
                                NULL);
        return rq->route->handler(h, con, rq);
    }
    if (need == 0)
        return rq->route->handler(h, con, rq);
    if ((rq->caller = http_auth(h, con, &admin)) == NULL)
        return http_problem(h, con, OUT_UNAUTHORIZED, "a valid Authorization: Bearer key is required", NULL,
                            NULL);
    /* Roles: an admin key manages rows and never asks for codes; a caller
     * never touches the rows. */
    if (admin != (need == HTTP_AUTH_ADMIN))
        return http_problem(h, con, OUT_FORBIDDEN,
                            admin ? "an admin key may not use the OTP routes"
                                  : "only an admin key (api_keys[].role \"admin\") may use /v1/admin",
                            NULL, NULL);
    return rq->route->handler(h, con, rq);
}
