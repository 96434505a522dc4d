/*
 * v2_form: reads Twilio's form bodies strictly. A field otpd does not
 * implement is refused by name rather than ignored, so a caller never
 * believes a setting took that did not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "v2_form.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes s[0..n) in place into out ('+' is a space); the decoded length,
 * or -1 on a bad escape. */
static long decode(const char *s, size_t n, char *out)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        if (s[i] == '+') {
            out[o++] = ' ';
        } else if (s[i] == '%') {
            int hi, lo;
            if (i + 2 >= n || (hi = hexval(s[i + 1])) < 0 || (lo = hexval(s[i + 2])) < 0)
                return -1;
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return (long)o;
}

/* 1 when s (len bytes) is UTF-8 without a NUL or control character. */
static int text_ok(const char *s, size_t len)
{
    json_t *j;
    size_t i;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
        /* C1 controls: U+0080 to U+009F, C2 80 to C2 9F in UTF-8. */
        if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f)
            return 0;
    }
    if ((j = json_stringn(s, len)) == NULL)
        return 0;
    json_decref(j);
    return 1;
}

static const struct v2_field *find(const struct v2_field *t, const char *name)
{
    for (; t->name != NULL; t++)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

int v2_form_read(const char *body, size_t len, const struct v2_field *table, struct v2_form *out, char *detail,
                 size_t cap)
{
    size_t pos = 0;
    char *w;

    memset(out, 0, sizeof(*out));
    /* Each pair decodes to at most its own length, NUL included. */
    if ((w = out->buf = malloc(len + 1)) == NULL) {
        snprintf(detail, cap, "out of memory");
        return -1;
    }
    while (pos < len) {
        const char *pair = body + pos, *amp = memchr(pair, '&', len - pos), *eq;
        size_t plen = amp ? (size_t)(amp - pair) : len - pos;
        char name[V2_FIELD_NAME_MAX];
        const struct v2_field *fd;
        long nlen, vlen;

        pos += plen + 1;
        if (plen == 0)
            continue;
        eq = memchr(pair, '=', plen);
        if (eq == NULL || (size_t)(eq - pair) >= V2_FIELD_NAME_MAX * 3) {
            snprintf(detail, cap, "the body must be a form of NAME=VALUE pairs");
            goto bad;
        }
        if ((nlen = decode(pair, (size_t)(eq - pair), w)) < 0 || nlen == 0 || nlen >= V2_FIELD_NAME_MAX ||
            !text_ok(w, (size_t)nlen)) {
            snprintf(detail, cap, "a field's name is not a name Twilio defines");
            goto bad;
        }
        memcpy(name, w, (size_t)nlen + 1);
        if ((fd = find(table, name)) == NULL) {
            snprintf(detail, cap, "%s is not a field of this request", name);
            goto bad;
        }
        if (v2_form_get(out, name) != NULL) {
            snprintf(detail, cap, "%s is given twice", name);
            goto bad;
        }
        if (out->n == V2_FIELDS_MAX) {
            snprintf(detail, cap, "too many fields");
            goto bad;
        }
        if ((vlen = decode(eq + 1, plen - (size_t)(eq - pair) - 1, w)) < 0) {
            snprintf(detail, cap, "%s is not percent-encoded correctly", name);
            goto bad;
        }
        if (!text_ok(w, (size_t)vlen)) {
            snprintf(detail, cap, "%s must be UTF-8 text without control characters", name);
            goto bad;
        }
        if (fd->kind == V2_REFUSE) {
            snprintf(detail, cap, "%s %s", name, fd->why);
            goto bad;
        }
        if (fd->kind == V2_OFF_ONLY) {
            int b;
            if (v2_bool(w, &b) < 0 || b) {
                snprintf(detail, cap, "%s is not supported by otpd: only false is accepted", name);
                goto bad;
            }
        }
        snprintf(out->f[out->n].name, sizeof(out->f[0].name), "%s", name);
        out->f[out->n++].value = w;
        w += vlen + 1;
    }
    return 0;
bad:
    v2_form_free(out);
    return -1;
}

const char *v2_form_get(const struct v2_form *f, const char *name)
{
    size_t i;

    for (i = 0; i < f->n; i++)
        if (strcmp(f->f[i].name, name) == 0)
            return f->f[i].value;
    return NULL;
}

void v2_form_free(struct v2_form *f)
{
    free(f->buf);
    memset(f, 0, sizeof(*f));
}

int v2_bool(const char *s, int *out)
{
    if (s != NULL && strcasecmp(s, "true") == 0)
        return *out = 1, 0;
    if (s != NULL && strcasecmp(s, "false") == 0)
        return *out = 0, 0;
    return -1;
}

int v2_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    if (s == NULL || *s == '\0' || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9)
        return -1;
    v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

size_t v2_chars(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}
