/*
 * metrics: what /metrics is written with. A small builder of the Prometheus
 * text format (a growable page with a cap, HELP and TYPE headers, samples
 * whose label values are escaped as the format requires), and the process's
 * latency histograms. One page is built per scrape (seconds apart), so the
 * builder favours plain code over speed; observations come from the HTTP
 * workers (Redis calls), the ledger writer (commits) and the sender
 * (provider calls): each is a few relaxed atomic adds, no lock, so a scrape
 * never stalls a request. Buckets are fixed (seconds, as Prometheus
 * expects), the same for every histogram, so a dashboard can compare them.
 */
#ifndef OTPD_METRICS_H
#define OTPD_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* A page's cap: ample for every series a config can declare (a few hundred
 * lines, some tens of KiB), small enough that a runaway loop fails the
 * scrape instead of filling memory. */
#define METRICS_TEXT_MAX (1024 * 1024)

/* A page being built: zero it (and set max for a smaller cap); nothing is
 * allocated until the first append. An append that would pass max, or that
 * finds no memory, marks the page failed: every later append is ignored
 * and metrics_text_take returns NULL, so a scrape never gets a page with
 * series silently missing. */
struct metrics_text {
    char *s;          /* malloc'd, NUL-terminated; NULL before the first append */
    size_t len, size; /* bytes written (less the NUL), bytes allocated */
    size_t max;       /* the cap on len; 0: METRICS_TEXT_MAX */
    int failed;
};

/* Appends printf-style text as is (no escaping: for fixed text and
 * numbers). */
void metrics_put(struct metrics_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends "# HELP name help" (help escaped: backslash and newline) and
 * "# TYPE name type" (counter, gauge, histogram). */
void metrics_head(struct metrics_text *t, const char *name, const char *type, const char *help);

/* Appends one sample, `name{k1="v1",k2="v2"} value`: after the value come
 * the labels as name and value pairs (metrics_u64(t, "x_total", n, "op",
 * "issue")); without any the braces are left out. Each label value is
 * escaped (backslash, double quote, newline), so any text may be one; none
 * may be NULL. The macros end the list; the functions take it ended with a
 * NULL of type const char *. */
#define metrics_u64(t, ...) metrics_sample_u64((t), __VA_ARGS__, (const char *)NULL)
#define metrics_i64(t, ...) metrics_sample_i64((t), __VA_ARGS__, (const char *)NULL)
void metrics_sample_u64(struct metrics_text *t, const char *name, uint64_t value, ...)
    __attribute__((sentinel));
void metrics_sample_i64(struct metrics_text *t, const char *name, int64_t value, ...)
    __attribute__((sentinel));

/* The page, malloc'd, for the caller to free; NULL when it failed (or is
 * empty). t is empty again after. */
char *metrics_text_take(struct metrics_text *t);

enum metrics_hist {
    METRICS_H_REDIS,         /* one Redis call: a script, a ping, connect included */
    METRICS_H_LEDGER_COMMIT, /* one ledger transaction (a group commit) */
    METRICS_H_PROVIDER,      /* one provider call that reached the wire */
    METRICS_H_COUNT
};

/* The bucket bounds, in microseconds; +Inf follows the last. */
#define METRICS_BUCKETS 14

/* Records one observation of us microseconds in histogram h. Any thread. */
void metrics_observe_us(enum metrics_hist h, uint64_t us);

/* Appends every histogram's text to t: HELP, TYPE, _bucket with le, _sum
 * in seconds, _count. */
void metrics_hist_text(struct metrics_text *t);

#endif
