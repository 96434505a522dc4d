/*
 * problem: see problem.h. The writer escapes as jansson does without
 * flags: '"' and '\\' with a backslash, \b \f \n \r \t by name, any other
 * byte below 0x20 as \u00XX (upper-case hex), and everything else,
 * UTF-8 included, as is.
 */
#include "problem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for every field escaped at worst (6 bytes per byte) and the keys. */
#define PROBLEM_TEXT_MAX (6 * (PROBLEM_DETAIL_MAX + 4 * PROBLEM_NAME_MAX) + 256)

struct problem_buf {
    char s[PROBLEM_TEXT_MAX];
    size_t n;
};

static void problem_raw(struct problem_buf *b, const char *s, size_t len)
{
    memcpy(b->s + b->n, s, len);
    b->n += len;
}

/* s (at most max bytes of it) as a JSON string. */
static void problem_str(struct problem_buf *b, const char *s, size_t max)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i;

    b->s[b->n++] = '"';
    for (i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *name = c == '"'    ? "\\\""
                           : c == '\\' ? "\\\\"
                           : c == '\b' ? "\\b"
                           : c == '\f' ? "\\f"
                           : c == '\n' ? "\\n"
                           : c == '\r' ? "\\r"
                           : c == '\t' ? "\\t"
                                       : NULL;
        if (name != NULL)
            problem_raw(b, name, 2);
        else if (c < 0x20) {
            problem_raw(b, "\\u00", 4);
            b->s[b->n++] = hex[c >> 4];
            b->s[b->n++] = hex[c & 15];
        } else
            b->s[b->n++] = (char)c;
    }
    b->s[b->n++] = '"';
}

/* ,"key": */
static void problem_key(struct problem_buf *b, const char *key)
{
    b->s[b->n++] = ',';
    problem_str(b, key, PROBLEM_NAME_MAX);
    b->s[b->n++] = ':';
}

static void problem_int(struct problem_buf *b, const char *key, int64_t v)
{
    problem_key(b, key);
    b->n += (size_t)snprintf(b->s + b->n, 24, "%" PRId64, v);
}

char *problem_text(const struct problem *p)
{
    /* On the stack: a heap block this size would be a large-bin request,
     * which makes glibc consolidate its fast bins each time. */
    struct problem_buf buf, *b = &buf;
    char type[32 + PROBLEM_NAME_MAX], *text;

    b->n = 0;
    snprintf(type, sizeof(type), "urn:otpd:problem:%.*s", PROBLEM_NAME_MAX, p->error);
    problem_raw(b, "{\"type\":", 8);
    problem_str(b, type, sizeof(type));
    problem_key(b, "title");
    problem_str(b, p->title, PROBLEM_NAME_MAX);
    problem_int(b, "status", p->status);
    problem_key(b, "detail");
    problem_str(b, p->detail, PROBLEM_DETAIL_MAX);
    problem_key(b, "error");
    problem_str(b, p->error, PROBLEM_NAME_MAX);
    if (p->reason != NULL && p->reason[0]) {
        problem_key(b, "reason");
        problem_str(b, p->reason, PROBLEM_NAME_MAX);
    }
    if (p->retry_after_s > 0)
        problem_int(b, "retry_after", p->retry_after_s);
    if (p->show_attempts)
        problem_int(b, "attempts_left", p->attempts_left);
    b->s[b->n++] = '}';
    if ((text = malloc(b->n + 1)) != NULL) {
        memcpy(text, b->s, b->n);
        text[b->n] = '\0';
    }
    return text;
}
