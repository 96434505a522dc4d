/*
 * history: one or more otpd ledgers read as one history, for the operator
 * (otpctl ledger). Each instance of a fleet keeps its own ledger; this
 * merges their rows by time, so a message accepted by one instance and
 * reported or verified through another reads as one story.
 *
 * Read-only by construction: each file is opened with SQLITE_OPEN_READONLY
 * (a ledger no otpd has open, one without a -wal file, as immutable, so no
 * -wal or -shm file is made beside it), needs no secret and no config, and
 * reads beside a running otpd (WAL: a reader sees the last commit and never
 * blocks the writer). Nothing here writes a ledger. The ledger holds no code
 * and no secret, and nothing here adds one.
 *
 * Not thread-safe: one struct history belongs to one thread.
 */
#ifndef OTPD_HISTORY_H
#define OTPD_HISTORY_H

#include <stdint.h>

#include "../base/rc.h"

struct history;

/* Where a history event comes from. */
enum history_kind {
    HISTORY_REQUEST,      /* a requests row: an issue or verify and its decision */
    HISTORY_VERIFICATION, /* a verification started, or ended (verified or exhausted) */
    HISTORY_MESSAGE,      /* a message's state change (queued, sending, sent; a delivery report's
                           * delivered or failed; expired), from message_events */
    HISTORY_SEND,         /* one provider call, from sends */
};

/* Which events a query returns. */
struct history_filter {
    const char *phone; /* canonical E.164, or NULL: every phone */
    int64_t since_ms;  /* events at or after this Unix ms; INT64_MIN: no bound */
    int64_t until_ms;  /* events before this Unix ms; INT64_MAX: no bound */
};

/*
 * One event. Strings are NULL where the row has no such value (or the event
 * kind no such field); integers are -1 there. Everything lives until the
 * next history_next or history_close.
 */
struct history_event {
    int64_t ts_ms; /* when it happened, Unix ms, on the writing instance's clock */
    int ledger;    /* which file: its index in history_open's paths, from 0 */
    enum history_kind kind;
    int64_t row_id;      /* the row's id in its table of its ledger (a verification: its rowid) */
    const char *request; /* HISTORY_REQUEST: "issue" or "verify" */
    const char *state;   /* request: its decision ("accepted", "rate_limited", ...); verification:
                          * "started", "verified" or "exhausted"; message: its new state; send: its
                          * outcome ("sent", "transient", "permanent") */
    const char *phone;   /* canonical E.164; NULL for a message's event or send whose message row is in
                          * no ledger read, unless the filter named the phone */
    const char *api_key; /* the caller's configured name, never its key */
    const char *purpose;
    const char *device_id;
    const char *client_ip;
    const char *rule;    /* request: the rule that refused */
    const char *shadow;  /* request: shadow rules that would have refused */
    int64_t http_status; /* request: otpd's answer; send: the provider's (-1: no answer) */
    int64_t count;       /* request: how many identical requests the row stands for (4xx rows are
                          * counted per key, decision and second) */
    const char *verification_id;
    const char *message_id;
    const char *provider;    /* send: the adapter ("webhook", "kannel", ...) */
    const char *provider_id; /* send: the provider's id for the message */
    int64_t attempt;         /* send: 1 for the first try */
    int64_t latency_ms;      /* send */
    int64_t cost_minor;      /* send: what it may be billed, in minor units */
    int64_t wrong;           /* verification ended: wrong guesses */
    const char *detail;      /* message: why (a report's text, a failure's reason); send: its error */
};

/*
 * Opens the n ledgers at paths read-only and checks that each is an otpd
 * ledger. On success *out is the caller's, freed with history_close. On
 * failure *out is NULL, err names the file and says why, and the result is
 * OTP_ENOTFOUND (no such file, or it cannot be opened), OTP_EINVAL (not an
 * otpd ledger: not SQLite, no ledger schema, or one older than schema 3) or
 * OTP_ENOMEM. paths must outlive the history.
 */
enum otp_rc history_open(const char *const *paths, int n, struct history **out, char *err);
void history_close(struct history *h);

/*
 * Starts reading the events f selects from every ledger, replacing any
 * query in progress. With f->phone, a message's events and sends are kept
 * when the message row of that phone is in any of the ledgers, so a
 * message's life is followed when another instance sent or reported it.
 * OTP_EIO (with the file in err) when a ledger cannot be read.
 */
enum otp_rc history_query(struct history *h, const struct history_filter *f, char *err);

/*
 * The next event of the query, oldest first: by ts_ms, then for ties in
 * the order otpd writes them (a verification started, a message queued, a
 * verification ended, the request's row, sending, the provider call, the
 * message's later states), then by ledger, then by row id. Sets *got to 1 and fills *ev, or *got to 0 at the
 * end. Events are read as they are returned, so memory stays flat whatever the ledgers' size. OTP_EIO (with
 * the file in err) when a ledger cannot be read.
 */
enum otp_rc history_next(struct history *h, struct history_event *ev, int *got, char *err);

/*
 * Calls fn with the newest n rows of table ("requests", "messages",
 * "sends", "verifications", "message_events" or "admin_actions") of the
 * ledger at path, newest first, optionally only those of phone (where the
 * table has a phone). Opens the file read-only, like history_open. Values
 * are text or NULL and live until fn returns. OTP_EINVAL for another
 * table; else as history_open and history_next.
 */
enum otp_rc history_recent(const char *path, const char *table, const char *phone, int n,
                           void (*fn)(void *ctx, int ncols, const char *const *names, const char *const *values),
                           void *ctx, char *err);

/* The lower-case name of a kind: "request", "verification", "message",
 * "send". */
const char *history_kind_name(enum history_kind k);

#endif
