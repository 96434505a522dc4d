/*
 * log: one line per event on stderr. Used by cmd/ and by the service
 * threads for events an operator must see. Callers never pass a code, a
 * secret or a credential.
 *
 * Every line carries its time (RFC 3339, UTC, milliseconds), its level
 * and, for structured events, a stable event name ("issue.refused",
 * "provider.failed", ...), the request id of the request this thread is
 * serving (log_set_request) and the event's key=value fields. Two forms
 * (the config's log.format): text, "TIME LEVEL MESSAGE key=value...", the
 * readable form; json, one object per line with "time", "level", "event",
 * "msg", "request_id" and the fields as members. In either, a control
 * character of any string (C0, DEL, C1, line separators, bidirectional
 * controls) is escaped, so what a client sent never forges a line.
 */
#ifndef OTPD_LOG_H
#define OTPD_LOG_H

#include <stddef.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

/* The longest request id a line carries (the HTTP layer bounds what it
 * accepts to this). */
#define LOG_REQUEST_ID_MAX 128

/* One key=value of an event: a string (NULL or "" leaves the field out)
 * or an integer. key is a plain identifier. */
struct log_field {
    const char *key;
    const char *str;
    long long num;
    int is_num;
};

#define LOG_STR(k, v) ((struct log_field){(k), (v), 0, 0})
#define LOG_INT(k, v) ((struct log_field){(k), NULL, (long long)(v), 1})
/* The fields argument pair of log_event: LOG_FIELDS(LOG_STR(...), ...). */
#define LOG_FIELDS(...)                                                                                            \
    (const struct log_field[]){__VA_ARGS__},                                                                       \
        sizeof((const struct log_field[]){__VA_ARGS__}) / sizeof(struct log_field)

/* Sets the form and the lowest level printed (default text, info). Safe to
 * call while other threads log: a line is written whole in one form. */
void log_setup(enum log_format format, enum log_level min);

/* The lowest level printed; SIGHUP changes it. Thread-safe. */
void log_set_level(enum log_level min);

/* The request this thread now serves (NULL or "": none); every line the
 * thread writes until the next call carries it. The id is copied, cut to
 * LOG_REQUEST_ID_MAX bytes. */
void log_set_request(const char *request_id);

/* A structured event: name is a stable dotted name, fields (n of them)
 * its key=values, fmt the readable message. */
void log_event(enum log_level level, const char *event, const struct log_field *fields, size_t n, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));

/* A plain line (event "message" in JSON). */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "debug", "info", "warn" or "error". */
const char *log_level_name(enum log_level level);

/* The least buffer log.c formats a line into (its unit test's bound). */
#define LOG_LINE_MIN 256

#endif
