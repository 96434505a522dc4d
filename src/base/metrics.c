/*
 * metrics: the Prometheus text builder and the fixed-bucket latency
 * histograms, lock-free (see metrics.h).
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for need more bytes and the NUL; 0 when t has failed. The
 * size doubles, so a page costs a few reallocations. */
static int metrics_room(struct metrics_text *t, size_t need)
{
    size_t max = t->max ? t->max : METRICS_TEXT_MAX, size;
    char *s;

    if (t->failed)
        return 0;
    if (need > max - t->len) {
        t->failed = 1;
        return 0;
    }
    if (t->len + need < t->size)
        return 1;
    for (size = t->size ? t->size : 1024; size <= t->len + need; size *= 2)
        ;
    if ((s = realloc(t->s, size)) == NULL) {
        t->failed = 1;
        return 0;
    }
    t->s = s;
    t->size = size;
    return 1;
}

static void metrics_vput(struct metrics_text *t, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void metrics_vput(struct metrics_text *t, const char *fmt, va_list ap)
{
    va_list again;
    int n;

    va_copy(again, ap);
    n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0) {
        t->failed = 1;
        return;
    }
    if (!metrics_room(t, (size_t)n))
        return;
    vsnprintf(t->s + t->len, t->size - t->len, fmt, ap);
    t->len += (size_t)n;
}

void metrics_put(struct metrics_text *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    metrics_vput(t, fmt, ap);
    va_end(ap);
}

/* Appends s with the text format's escapes: a backslash and a newline
 * always, a double quote too inside a label value (quote 1). */
static void metrics_escaped(struct metrics_text *t, const char *s, int quote)
{
    for (; *s; s++) {
        const char *esc = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : *s == '"' && quote ? "\\\"" : NULL;
        size_t n = esc ? 2 : 1;
        if (!metrics_room(t, n))
            return;
        memcpy(t->s + t->len, esc ? esc : s, n);
        t->len += n;
        t->s[t->len] = '\0';
    }
}

void metrics_head(struct metrics_text *t, const char *name, const char *type, const char *help)
{
    metrics_put(t, "# HELP %s ", name);
    metrics_escaped(t, help, 0);
    metrics_put(t, "\n# TYPE %s %s\n", name, type);
}

/* name and its labels (the pairs of ap, then NULL) in braces, if any. */
static void metrics_series(struct metrics_text *t, const char *name, va_list ap)
{
    const char *key, *sep = "{";

    metrics_put(t, "%s", name);
    while ((key = va_arg(ap, const char *)) != NULL) {
        metrics_put(t, "%s%s=\"", sep, key);
        metrics_escaped(t, va_arg(ap, const char *), 1);
        metrics_put(t, "\"");
        sep = ",";
    }
    if (sep[0] == ',')
        metrics_put(t, "}");
}

void metrics_sample_u64(struct metrics_text *t, const char *name, uint64_t value, ...)
{
    va_list ap;

    va_start(ap, value);
    metrics_series(t, name, ap);
    va_end(ap);
    metrics_put(t, " %llu\n", (unsigned long long)value);
}

void metrics_sample_i64(struct metrics_text *t, const char *name, int64_t value, ...)
{
    va_list ap;

    va_start(ap, value);
    metrics_series(t, name, ap);
    va_end(ap);
    metrics_put(t, " %lld\n", (long long)value);
}

char *metrics_text_take(struct metrics_text *t)
{
    char *s = t->failed ? NULL : t->s;

    if (s == NULL)
        free(t->s);
    memset(t, 0, sizeof(*t));
    return s;
}

/* 0.5 ms to 10 s: a Redis call is well under a millisecond on a LAN, a
 * ledger commit a few, a provider call tens to hundreds, and its timeout
 * (pacer.timeout, 10 s by default) ends the scale. */
static const uint64_t bounds_us[METRICS_BUCKETS] = {500,    1000,   2500,    5000,    10000,   25000,   50000,
                                                    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
static const char *const bounds_text[METRICS_BUCKETS] = {"0.0005", "0.001", "0.0025", "0.005", "0.01",
                                                         "0.025",  "0.05",  "0.1",    "0.25",  "0.5",
                                                         "1",      "2.5",   "5",      "10"};

static const struct {
    const char *name, *help;
} hist_names[METRICS_H_COUNT] = {
    {"otpd_redis_call_duration_seconds", "Redis calls (a script or a ping, with a connect when one was needed)."},
    {"otpd_ledger_commit_duration_seconds", "Ledger transactions (one group commit each)."},
    {"otpd_provider_call_duration_seconds", "Provider calls that reached the wire, to their answer or timeout."},
};

/* Per bucket the observations at most its bound (not cumulative: the text
 * adds them up), then the ones past the last bound. */
static struct {
    _Atomic uint64_t bucket[METRICS_BUCKETS + 1];
    _Atomic uint64_t sum_us, count;
} hists[METRICS_H_COUNT];

void metrics_observe_us(enum metrics_hist h, uint64_t us)
{
    int i;

    if ((unsigned)h >= METRICS_H_COUNT)
        return;
    for (i = 0; i < METRICS_BUCKETS && us > bounds_us[i]; i++)
        ;
    atomic_fetch_add_explicit(&hists[h].bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hists[h].sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&hists[h].count, 1, memory_order_relaxed);
}

void metrics_hist_text(struct metrics_text *t)
{
    char bucket[64];
    int h, i;

    for (h = 0; h < METRICS_H_COUNT; h++) {
        const char *name = hist_names[h].name;
        uint64_t cum = 0, total, sum_us;
        /* Read the count first: observations landing during the scrape may
         * make the buckets run ahead of it, never behind, and +Inf is the
         * count, so the series stays monotonic. */
        total = atomic_load_explicit(&hists[h].count, memory_order_relaxed);
        metrics_head(t, name, "histogram", hist_names[h].help);
        snprintf(bucket, sizeof(bucket), "%s_bucket", name);
        for (i = 0; i < METRICS_BUCKETS; i++) {
            cum += atomic_load_explicit(&hists[h].bucket[i], memory_order_relaxed);
            metrics_u64(t, bucket, cum < total ? cum : total, "le", bounds_text[i]);
        }
        metrics_u64(t, bucket, total, "le", "+Inf");
        sum_us = atomic_load_explicit(&hists[h].sum_us, memory_order_relaxed);
        metrics_put(t, "%s_sum %.6f\n%s_count %llu\n", name, (double)sum_us / 1e6, name,
                    (unsigned long long)total);
    }
}
