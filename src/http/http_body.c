/*
 * http_body: what a request says, read and checked before any decision.
 * Its body's bytes under the HTTP_BODY_MAX cap, a JSON body of only known
 * string fields, the fields issue, verify and cancel share, a delivery
 * report's form, and a header that must be given once. Every request
 * passes here, a few hundred bytes each; nothing here blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/unittest.h"
#include "http_int.h"

int http_body_take(struct http_req *rq, const char *data, size_t n)
{
    if (rq->len + n > HTTP_BODY_MAX) {
        rq->too_big = 1;
    } else if (rq->len + n > HTTP_BODY_SMALL && rq->body == rq->small) {
        char *big = malloc(HTTP_BODY_MAX + 1);
        if (big == NULL)
            return -1;
        memcpy(big, rq->small, rq->len);
        rq->body = big;
    }
    if (!rq->too_big) {
        memcpy(rq->body + rq->len, data, n);
        rq->len += n;
    }
    return 0;
}

int http_is_json(struct MHD_Connection *con)
{
    const char *ct = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = strlen("application/json");

    return ct != NULL && strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\0' || ct[n] == ';' ||
                                                                           ct[n] == ' ');
}

/* A duplicate key, a value that is not a string, or a string holding a
 * NUL is refused as well as an unknown field. */
json_t *http_body(const char *body, size_t len, const char *const *fields, char *detail, size_t cap)
{
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e), *v;
    const char *key;

    if (j == NULL) {
        snprintf(detail, cap, "body is not JSON: %.100s", e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(detail, cap, "body must be a JSON object");
        goto bad;
    }
    json_object_foreach(j, key, v) {
        const char *const *f;
        for (f = fields; *f && strcmp(*f, key) != 0; f++)
            ;
        if (*f == NULL) {
            snprintf(detail, cap, "unknown field \"%.40s\"", key);
            goto bad;
        }
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
            snprintf(detail, cap, "%.40s must be a string", key);
            goto bad;
        }
    }
    return j;
bad:
    json_decref(j);
    return NULL;
}

const char *http_field(json_t *j, const char *name)
{
    return json_string_value(json_object_get(j, name));
}

/* 1 when s is 1 to max printable ASCII bytes. */
UNITTEST int http_printable(const char *s, size_t max)
{
    size_t n = 0;

    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e)
            return 0;
    return n >= 1 && n <= max;
}

int http_purpose_ok(json_t *j)
{
    const char *purpose = http_field(j, "purpose");

    return purpose == NULL || http_printable(purpose, 32);
}

/* The phone is parsed into *pi and replaced in j by its canonical form, so
 * that everything after this (the decision, the ledger, the provider, the
 * Idempotency-Key's hash of the body) sees one spelling of one number. */
enum otp_outcome http_check_common(json_t *j, struct phone_info *pi, char *detail, size_t cap)
{
    const char *phone = http_field(j, "phone"), *dev = http_field(j, "device_id");
    enum phone_err perr;

    if (phone == NULL) {
        snprintf(detail, cap, "phone is required");
        return OUT_INVALID_REQUEST;
    }
    if ((perr = phone_parse(phone, pi)) != PHONE_OK) {
        phone_why(perr, pi, detail, cap);
        return OUT_INVALID_PHONE;
    }
    if (json_object_set_new(j, "phone", json_string(pi->e164)) != 0) {
        snprintf(detail, cap, "out of memory");
        return OUT_INVALID_REQUEST;
    }
    if (dev != NULL && !http_printable(dev, 128)) {
        snprintf(detail, cap, "device_id must be 1 to 128 printable ASCII bytes");
        return OUT_INVALID_REQUEST;
    }
    return OUT_COUNT;
}

/* Decodes %XX and '+' of a form value in place. */
UNITTEST void http_form_decode(char *s)
{
    char *o = s;

    for (; *s; s++) {
        if (*s == '+') {
            *o++ = ' ';
        } else if (*s == '%' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

/* The first field called name counts. */
int http_form_get(const char *body, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    const char *p = body;

    while (p && *p) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == '=') {
            snprintf(out, cap, "%.*s", (int)(len - n - 1), p + n + 1);
            http_form_decode(out);
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static enum MHD_Result http_header_count(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct http_header_seen *x = cls;

    (void)kind;
    if (strcasecmp(key, x->name) == 0 && x->n++ == 0)
        x->value = value;
    return MHD_YES;
}

struct http_header_seen http_header_first(struct MHD_Connection *con, const char *name)
{
    struct http_header_seen x = {name, NULL, 0};

    MHD_get_connection_values(con, MHD_HEADER_KIND, http_header_count, &x);
    return x;
}
