/*
 * summary: `otpctl stats`'s figures over one or more ledgers in a time
 * range: requests, refusals by rule and decision, provider calls and their
 * cost, conversion. Read-only (ro.h), no secret, no config: the ledger does
 * not know the currency, so spend is in the config's minor units.
 *
 * Memory stays flat: verifications are merged by id in a private SQLite
 * file in temp storage, deleted at summary_free.
 *
 * Times: a request, send or message event counts by its own time; a
 * verification by when it started (created_ms), so conversion is the share
 * of the codes issued in the range that were verified (at any time).
 */
#ifndef OTPD_SUMMARY_H
#define OTPD_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "../base/rc.h"

struct summary_merge;

/* Refused requests of one kind, decision and rule ("" when none). */
struct summary_refusal {
    char *kind, *decision, *rule;
    int64_t count; /* requests (a counted 4xx row stands for count) */
};

struct summary {
    int64_t issue_requests, verify_requests; /* requests, each counted row as its count */
    int64_t accepted;                        /* issues accepted (a code sent or queued) */
    int64_t verified_requests;               /* verify requests that verified */
    struct summary_refusal *refusals;        /* every other decision, by kind, decision, rule */
    size_t n_refusals;
    int64_t refused;                            /* their sum */
    int64_t calls[3];                           /* provider calls: sent, transient, permanent */
    int64_t spend_minor;                        /* sum of the calls' cost_minor */
    int64_t delivered, failed;                  /* delivery reports and final failures (message events) */
    int64_t verifications, verified, exhausted; /* verifications started, and how they ended; one
                                                 * verification in several ledgers (a resend through
                                                 * another instance) counts once, by its furthest state */
    struct summary_merge *merge;                /* the verifications seen so far, by id (summary.c) */
};

/*
 * Adds the figures of the ledger at path for [since_ms, until_ms) to *s
 * (zeroed by the caller at first). OTP_OK, or as ro_open's errors
 * (OTP_ENOTFOUND, OTP_EINVAL: not a ledger, OTP_ENOMEM) and OTP_EIO when it
 * cannot be read; err names the file.
 */
enum otp_rc summary_add(struct summary *s, const char *path, int64_t since_ms, int64_t until_ms, char *err);
void summary_free(struct summary *s);

/*
 * Groups: `otpctl stats --by`. Every provider call in the range, grouped
 * by the provider's name (sends.provider) and/or the region of the
 * message's phone (libphonenumber's, through phone_parse; "" when the
 * message is in none of the ledgers read or its country is unknown).
 *
 * A message is joined to its accepted call (outcome 'sent'; the last one,
 * by time, should it have two) across every ledger read: the instance that
 * accepted a message holds its messages row, the one that sent it its
 * sends row. delivered counts the messages delivered (their row, or a
 * delivery report's event in any ledger) by that call's group; verified
 * the verifications verified (their row, or a verify request that
 * verified, in any ledger) by the group of the last accepted call of any
 * of their messages. Both count the accepted calls in the range only, so
 * they are shares of sent. Held in a private SQLite file in temp storage
 * until summary_groups_free, like the verifications of struct summary.
 */
#define SUMMARY_BY_PROVIDER 1u
#define SUMMARY_BY_REGION 2u

struct summary_join;

/* One group and its figures. */
struct summary_group {
    char *provider;                 /* NULL unless grouped by provider */
    char *region;                   /* NULL unless grouped by region; "" when unknown */
    int64_t attempts, sent, failed; /* provider calls; sent: accepted; failed: transient or permanent */
    int64_t spend_minor;            /* sum of the calls' cost_minor */
    int64_t delivered, verified;    /* messages and verifications, by their accepted call */
};

struct summary_groups {
    unsigned by;             /* SUMMARY_BY_PROVIDER, SUMMARY_BY_REGION or both; set by the caller */
    struct summary_group *v; /* by summary_groups_end: sorted by provider, then region */
    size_t n;
    struct summary_join *join; /* the rows read so far (summary.c) */
};

/* Reads the rows of the ledger at path that the groups need (calls in
 * [since_ms, until_ms), the messages, deliveries and verifications they
 * may join) into g (zeroed by the caller at first, but for by). Errors as
 * summary_add's. */
enum otp_rc summary_groups_add(struct summary_groups *g, const char *path, int64_t since_ms, int64_t until_ms,
                               char *err);

/* Makes g->v from every ledger added. OTP_OK, or OTP_ENOMEM / OTP_EIO with
 * err saying why. */
enum otp_rc summary_groups_end(struct summary_groups *g, char *err);
void summary_groups_free(struct summary_groups *g);

#endif
