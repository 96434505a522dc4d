/*
 * v2_form: Twilio's request bodies, application/x-www-form-urlencoded
 * (v2_form.c). Pure: no I/O, no clock.
 */
#ifndef OTPD_V2_FORM_H
#define OTPD_V2_FORM_H

#include <stddef.h>

#define V2_FIELDS_MAX 32
#define V2_FIELD_NAME_MAX 48

/* What a route does with a field Twilio defines. */
enum v2_field_kind {
    V2_TAKE,       /* read */
    V2_OFF_ONLY,   /* a boolean otpd has no use for: accepted only as false */
    V2_REFUSE,     /* not supported: any value is refused, saying why */
};

/* One field a route knows; a table ends with a NULL name. */
struct v2_field {
    const char *name;
    enum v2_field_kind kind;
    const char *why; /* V2_REFUSE: the sentence's end ("is not supported: ...") */
};

/* A body read: each field once, decoded, NUL-terminated. */
struct v2_form {
    size_t n;
    struct {
        char name[V2_FIELD_NAME_MAX];
        char *value; /* into buf */
    } f[V2_FIELDS_MAX];
    char *buf; /* malloc'd */
};

/*
 * Reads body (len bytes) as a form of the fields in table. Refused, with
 * a sentence naming the field in detail: a field not in the table, one
 * given twice, bad percent-encoding, a value that is not UTF-8 or holds a
 * control character, a V2_OFF_ONLY field that is not false, and any
 * V2_REFUSE field. Returns 0, or -1 (out->buf NULL; nothing to free).
 */
int v2_form_read(const char *body, size_t len, const struct v2_field *table, struct v2_form *out, char *detail,
                 size_t cap);
/* name's value, or NULL when absent. */
const char *v2_form_get(const struct v2_form *f, const char *name);
void v2_form_free(struct v2_form *f);

/* Twilio's booleans as both SDKs send them: "true"/"false" in any case.
 * Returns 0 with *out set, or -1. */
int v2_bool(const char *s, int *out);

/* A whole decimal number from lo to hi into *out: 0, or -1. */
int v2_int(const char *s, long lo, long hi, long *out);

/* Characters (code points) of UTF-8 text s. */
size_t v2_chars(const char *s);

#endif
