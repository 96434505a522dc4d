/*
 * metrics: the process's latency histograms, for /metrics. Observations
 * come from the HTTP workers (Redis calls), the ledger writer (commits) and
 * the sender (provider calls): each is a few relaxed atomic adds, no lock,
 * so a scrape never stalls a request. Buckets are fixed (seconds, as
 * Prometheus expects), the same for every histogram, so a dashboard can
 * compare them.
 */
#ifndef OTPD_METRICS_H
#define OTPD_METRICS_H

#include <stddef.h>
#include <stdint.h>

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

/* Writes every histogram's Prometheus text (HELP, TYPE, _bucket with le,
 * _sum in seconds, _count) into out (cap bytes, NUL-terminated); returns
 * the bytes written, less than the whole when cap is too small. */
size_t metrics_hist_text(char *out, size_t cap);

#endif
