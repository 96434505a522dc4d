/* metrics: fixed-bucket latency histograms, lock-free (see metrics.h). */
#include "metrics.h"

#include <stdatomic.h>
#include <stdio.h>

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

size_t metrics_hist_text(char *out, size_t cap)
{
    size_t n = 0;
    int h, i, k;

#define METRICS_PUT(...)                                                                                               \
    do {                                                                                                               \
        k = snprintf(out + n, cap - n, __VA_ARGS__);                                                                   \
        if (k < 0 || (size_t)k >= cap - n)                                                                             \
            return n;                                                                                                  \
        n += (size_t)k;                                                                                                \
    } while (0)
    if (cap == 0)
        return 0;
    out[0] = '\0';
    for (h = 0; h < METRICS_H_COUNT; h++) {
        uint64_t cum = 0, total, sum_us;
        /* Read the count first: observations landing during the scrape may
         * make the buckets run ahead of it, never behind, and +Inf is the
         * count, so the series stays monotonic. */
        total = atomic_load_explicit(&hists[h].count, memory_order_relaxed);
        METRICS_PUT("# HELP %s %s\n# TYPE %s histogram\n", hist_names[h].name, hist_names[h].help,
                    hist_names[h].name);
        for (i = 0; i < METRICS_BUCKETS; i++) {
            cum += atomic_load_explicit(&hists[h].bucket[i], memory_order_relaxed);
            METRICS_PUT("%s_bucket{le=\"%s\"} %llu\n", hist_names[h].name, bounds_text[i],
                        (unsigned long long)(cum < total ? cum : total));
        }
        sum_us = atomic_load_explicit(&hists[h].sum_us, memory_order_relaxed);
        METRICS_PUT("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", hist_names[h].name,
                    (unsigned long long)total, hist_names[h].name, (double)sum_us / 1e6, hist_names[h].name,
                    (unsigned long long)total);
    }
#undef METRICS_PUT
    return n;
}
