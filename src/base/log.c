/*
 * log: thread-safe line logging. A line is built whole in a buffer on the
 * caller's stack and written with one call, so lines never mix. Load: one
 * line per answered request at most (debug for health checks), plus rare
 * operator events; a few microseconds each.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "timestamp.h"
#include "unittest.h"

/* A message is cut here, a string field's value at LOG_VALUE_MAX: a line
 * stays bounded whatever a caller passes. */
#define LOG_MSG_MAX 2048
#define LOG_VALUE_MAX 256
#define LOG_LINE_MAX 8192

static const char *const log_level_names[] = {"debug", "info", "warn", "error"};
static const char *const log_format_names[] = {"text", "json"};

static atomic_int log_min = LOG_INFO;
static atomic_int log_form = LOG_TEXT;
static _Thread_local char log_rid[LOG_REQUEST_ID_MAX + 1];

void log_setup(enum log_format format, enum log_level min)
{
    atomic_store(&log_form, format == LOG_JSON ? LOG_JSON : LOG_TEXT);
    log_set_level(min);
}

void log_set_level(enum log_level min)
{
    atomic_store(&log_min, min < LOG_DEBUG ? LOG_DEBUG : min > LOG_ERROR ? LOG_ERROR : min);
}

/* 1 when a line at level would be printed. */
UNITTEST int log_enabled(enum log_level level)
{
    return level >= (enum log_level)atomic_load(&log_min) && level <= LOG_ERROR;
}

void log_set_request(const char *request_id)
{
    snprintf(log_rid, sizeof(log_rid), "%s", request_id ? request_id : "");
}

static int log_parse(const char *s, const char *const *names, int n)
{
    int i;

    for (i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* Parses "debug", "info", "warn", "error" (and "text", "json"); -1 when
 * not one of them. Only the unit test calls them: the config reads these
 * names through its key table. */
UNITTEST __attribute__((unused)) int log_level_parse(const char *s)
{
    return log_parse(s, log_level_names, 4);
}

UNITTEST __attribute__((unused)) int log_format_parse(const char *s)
{
    return log_parse(s, log_format_names, 2);
}

const char *log_level_name(enum log_level level)
{
    return log_level_names[level < LOG_DEBUG || level > LOG_ERROR ? LOG_ERROR : level];
}

/* The line being built: cap excludes the room kept for its end. */
struct log_buf {
    char *p;
    size_t n, cap;
    int over; /* the last put did not fit; the caller rolls back */
};

static void log_put(struct log_buf *b, const char *s, size_t len)
{
    if (b->over || b->n > b->cap || len > b->cap - b->n) {
        b->over = 1;
        return;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

static void log_puts(struct log_buf *b, const char *s)
{
    log_put(b, s, strlen(s));
}

/* The length of the valid UTF-8 character at s (at most len bytes), with
 * its code point in *cp, or 0: overlong forms, surrogates and code points
 * past U+10FFFF are invalid. */
static size_t log_utf8(const unsigned char *s, size_t len, unsigned *cp)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0, k;

    if (n == 0 || n > len)
        return 0;
    *cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        *cp = *cp << 6 | (s[k] & 0x3f);
    }
    if ((n == 2 && *cp < 0x80) || (n == 3 && *cp < 0x800) || (n == 4 && *cp < 0x10000) || *cp > 0x10ffff ||
        (*cp >= 0xd800 && *cp <= 0xdfff))
        return 0;
    return n;
}

/* 1 for a character a line never carries as it is: the C0 and C1
 * controls and DEL (a newline forges a line, an escape sequence acts on a
 * terminal), the line and paragraph separators (line breaks to some
 * viewers) and the bidirectional controls (they reorder what a reader
 * sees). */
static int log_hidden(unsigned cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* s (at most max bytes of it) as a JSON string: quotes, backslashes and
 * hidden characters (log_hidden) escaped, a byte that is not valid UTF-8
 * as U+FFFD. A string longer than the room left is cut at a character and
 * still closed; returns 1 then. */
static int log_json_str(struct log_buf *b, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strnlen(s, max), i = 0, k;
    unsigned cp = 0;
    char esc[8];
    int cut;

    log_put(b, "\"", 1);
    if (b->over || b->n >= b->cap)
        return 1;
    b->cap--; /* the closing quote's room */
    while (i < len && !b->over) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            log_put(b, esc, 2);
            i++;
        } else if ((k = log_utf8(p + i, len - i, &cp)) == 0) {
            log_puts(b, "\\ufffd");
            i++;
        } else if (log_hidden(cp)) {
            snprintf(esc, sizeof(esc), "\\u%04x", cp);
            log_put(b, esc, 6);
            i += k;
        } else {
            log_put(b, s + i, k);
            i += k;
        }
    }
    cut = b->over;
    b->over = 0;
    b->cap++;
    log_put(b, "\"", 1);
    return cut;
}

/* The message of a text line (at most max bytes of s): as it is, but for
 * each byte of a hidden character (log_hidden) or of what is not UTF-8 as
 * \xHH, so a message never ends its line or acts on a terminal. */
static void log_text_msg(struct log_buf *b, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strnlen(s, max), i = 0, k;
    unsigned cp = 0;
    char esc[8];

    while (i < len && !b->over) {
        if ((k = log_utf8(p + i, len - i, &cp)) != 0 && !log_hidden(cp)) {
            log_put(b, s + i, k);
            i += k;
            continue;
        }
        for (k = k ? k : 1; k > 0; k--, i++) {
            snprintf(esc, sizeof(esc), "\\x%02x", p[i]);
            log_put(b, esc, 4);
        }
    }
}

/* s (at most max bytes) as a text value: bare when it is printable ASCII
 * without spaces, quotes, backslashes or '=', else quoted with those and
 * every other byte outside printable ASCII escaped, so one value never
 * reads as two fields or two lines. */
static void log_text_str(struct log_buf *b, const char *s, size_t max)
{
    size_t len = strnlen(s, max), i;
    int bare = len > 0;
    char esc[8];

    for (i = 0; i < len && bare; i++)
        bare = s[i] > 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\' && s[i] != '=';
    if (bare) {
        log_put(b, s, len);
        return;
    }
    log_put(b, "\"", 1);
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            log_put(b, esc, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            log_put(b, esc, 4);
        } else {
            log_put(b, s + i, 1);
        }
    }
    log_put(b, "\"", 1);
}

/* One field, whole or not at all: 0 when it did not fit. */
static int log_field(struct log_buf *b, enum log_format format, const char *key, const char *str, long long num,
                     int is_num)
{
    size_t mark = b->n;
    char digits[24];

    if (!is_num && (str == NULL || str[0] == '\0'))
        return 1;
    if (is_num)
        snprintf(digits, sizeof(digits), "%lld", num);
    if (format == LOG_JSON) {
        log_put(b, ",", 1);
        if (log_json_str(b, key, 64))
            b->over = 1;
        log_put(b, ":", 1);
        if (is_num)
            log_puts(b, digits);
        else if (log_json_str(b, str, LOG_VALUE_MAX))
            b->over = 1; /* a value is whole or absent */
    } else {
        log_put(b, " ", 1);
        log_put(b, key, strnlen(key, 64));
        log_put(b, "=", 1);
        if (is_num)
            log_puts(b, digits);
        else
            log_text_str(b, str, LOG_VALUE_MAX);
    }
    if (b->over) {
        b->n = mark;
        b->over = 0;
        return 0;
    }
    return 1;
}

/* Formats one line, newline included, into out (cap bytes, at least
 * LOG_LINE_MIN) and returns its length. Pure: the time is wall_ms (Unix
 * ms). event NULL: a plain line. A line longer than cap loses its last
 * fields (JSON then says "truncated": true), never its form. */
UNITTEST size_t log_format_line(char *out, size_t cap, enum log_format format, long long wall_ms,
                                enum log_level level, const char *event, const char *request_id,
                                const struct log_field *fields, size_t n, const char *msg)
{
    /* The room kept for the end: ',"truncated":true}\n' and the NUL. */
    static const size_t reserve = 24;
    struct log_buf b = {out, 0, cap - reserve, 0};
    const char *lv = log_level_names[level < LOG_DEBUG || level > LOG_ERROR ? LOG_ERROR : level];
    char ts[TIMESTAMP_LEN];
    size_t i, room;
    int whole = 1;

    if (cap < LOG_LINE_MIN) { /* a caller's bug: write nothing rather than past out */
        if (cap > 0)
            out[0] = '\0';
        return 0;
    }
    if (timestamp_format(wall_ms, ts, sizeof(ts)) != OTP_OK)
        snprintf(ts, sizeof(ts), "0000-00-00T00:00:00.000Z");
    if (msg == NULL)
        msg = "";
    if (format == LOG_JSON) {
        log_puts(&b, "{\"time\":\"");
        log_puts(&b, ts);
        log_puts(&b, "\",\"level\":\"");
        log_puts(&b, lv);
        log_puts(&b, "\",\"event\":");
        log_json_str(&b, event ? event : "message", 64);
        log_puts(&b, ",\"msg\":");
    } else {
        log_puts(&b, ts);
        log_puts(&b, " ");
        log_puts(&b, lv);
        log_puts(&b, " ");
    }
    /* A message too long for the line is cut, not dropped; escaped, it
     * takes at most half the room left, so fields still fit. */
    room = b.cap;
    b.cap = b.n + (room - b.n) / 2;
    if (format == LOG_JSON)
        log_json_str(&b, msg, LOG_MSG_MAX);
    else
        log_text_msg(&b, msg, LOG_MSG_MAX);
    b.cap = room;
    b.over = 0; /* the head fits: cap is at least LOG_LINE_MIN */
    if (event != NULL && format == LOG_TEXT)
        whole = log_field(&b, format, "event", event, 0, 0);
    if (whole)
        whole = log_field(&b, format, "request_id", request_id, 0, 0);
    for (i = 0; i < n && whole; i++)
        whole = log_field(&b, format, fields[i].key, fields[i].str, fields[i].num, fields[i].is_num);
    /* The reserve is now the line's: the end always fits. */
    b.cap += reserve - 1;
    if (format == LOG_JSON)
        log_puts(&b, whole ? "}\n" : ",\"truncated\":true}\n");
    else
        log_puts(&b, whole ? "\n" : " truncated=true\n");
    out[b.n] = '\0';
    return b.n;
}

static void log_write(enum log_level level, const char *event, const struct log_field *fields, size_t n,
                      const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void log_write(enum log_level level, const char *event, const struct log_field *fields, size_t n,
                      const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX], msg[LOG_MSG_MAX + 1];
    struct timespec now;
    size_t len;

    clock_gettime(CLOCK_REALTIME, &now);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    len = log_format_line(line, sizeof(line), (enum log_format)atomic_load(&log_form),
                          (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, level, event, log_rid, fields, n,
                          msg);
    fwrite(line, 1, len, stderr);
}

void log_event(enum log_level level, const char *event, const struct log_field *fields, size_t n, const char *fmt,
               ...)
{
    va_list ap;

    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    log_write(level, event, fields, n, fmt, ap);
    va_end(ap);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    log_write(level, NULL, NULL, 0, fmt, ap);
    va_end(ap);
}
