/*
 * logsum: keeps a flood of alike refusals (401, 403, 404) from writing one
 * log line each. Of each kind (status, outcome, route) the first answer of
 * a window is logged in full at once; the others of that window are only
 * counted, and their count comes as one summary line when the window ends.
 * Pure: the caller passes the time. Thread-safe (one mutex, a leaf lock).
 *
 * Load: one call per refusal of those kinds, a short scan of at most
 * LOGSUM_KINDS entries under the mutex; a flush every few hundred ms.
 */
#ifndef OTPD_LOGSUM_H
#define OTPD_LOGSUM_H

#include <stdint.h>

#define LOGSUM_KINDS 64 /* kinds counted at once; a kind beyond is logged in full */
#define LOGSUM_NAME_MAX 32

struct logsum;

/* One kind's summary at the end of its window. */
struct logsum_row {
    unsigned status;
    char outcome[LOGSUM_NAME_MAX]; /* the problem's error code */
    char route[LOGSUM_NAME_MAX];   /* which route, never the path a client sent */
    uint64_t count;                /* answers counted and not logged in full */
    int64_t window_ms;
};

/* A new counter with windows of window_ms; NULL when out of memory. */
struct logsum *logsum_new(int64_t window_ms);

/* One answer of a kind at now_ms (monotonic). 1: log it in full (the
 * first of its kind in a window, or no room to count a new kind); 0: it
 * is counted for the kind's summary. Names are cut to LOGSUM_NAME_MAX - 1. */
int logsum_note(struct logsum *s, unsigned status, const char *outcome, const char *route, int64_t now_ms);

/* Calls emit (outside the mutex) for each kind whose window ended by
 * now_ms and that counted answers, then forgets every ended kind, so the
 * next answer of it is logged in full again. now_ms INT64_MAX ends all. */
void logsum_flush(struct logsum *s, int64_t now_ms, void (*emit)(void *ctx, const struct logsum_row *r),
                  void *ctx);

/* Frees s (NULL allowed); what it still counts is lost: flush first. */
void logsum_free(struct logsum *s);

#endif
