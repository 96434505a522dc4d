/*
 * ledger: the SQLite audit ledger and the durable copy of the pacer queue.
 * One writer thread commits whatever has been submitted since its last
 * commit in one transaction (group commit); the calls whose caller must
 * not answer before its rows are durable (ledger_accept, ledger_admin,
 * ledger_message_report) wait for that commit. Reads use their own
 * connection (WAL lets them run beside the writer). The only home of sqlite3.
 */
#ifndef OTPD_LEDGER_H
#define OTPD_LEDGER_H

#include <stdint.h>

#include "../base/msgstate.h"
#include "../base/rc.h"

struct ledger;

/* One issue or verify request and what was decided. Strings may be NULL. */
struct ledger_request {
    int64_t ts_ms;
    const char *kind; /* "issue" or "verify" */
    const char *api_key;
    const char *phone;
    const char *device_id;
    const char *client_ip;
    const char *decision; /* an error code of the contract, or "accepted"/"verified" */
    const char *rule;
    const char *shadow;
    const char *verification_id;
    const char *message_id;
    int http_status;
    const char *purpose;
};

/* A message as queued; also what ledger_pending hands back. */
struct ledger_message {
    int64_t seq; /* filled by ledger_pending */
    const char *id;
    const char *verification_id;
    const char *api_key;
    const char *phone;
    enum msg_state state; /* for ledger_pending: queued or sending; ledger_accept writes queued */
    int64_t created_ms;
    int64_t expires_ms;
    int attempts;
    int64_t price_minor;
    int64_t cost_ms;
    const char *cost_caps; /* the cap windows the reservation was counted in; NULL: unknown */
};

/* One provider call. */
struct ledger_send {
    int64_t ts_ms;
    const char *message_id;
    int attempt;
    const char *provider;
    long http_status; /* 0: no answer */
    int64_t latency_ms;
    const char *outcome; /* "sent", "transient" or "permanent" */
    const char *provider_id;
    const char *error;
    int64_t cost_minor;
};

/* Opens (creating) path, applies the migrations in schema/, starts the
 * writer. Returns NULL with detail in err. The caller frees with
 * ledger_close, which commits everything submitted first. */
struct ledger *ledger_open(const char *path, char *err);
void ledger_close(struct ledger *l);

/* Rows older than retention_ms (0: none) are pruned by the writer, at once
 * and then every retention or hour, whichever is shorter. Messages still
 * queued or sending are kept. */
void ledger_set_retention(struct ledger *l, int64_t retention_ms);

/*
 * Submissions copy their arguments and return at once. A request row with
 * a 4xx status is counted instead: one row per identical key, decision and
 * second (its count column), committed when that second is over or before
 * the next other request row. ledger_request and
 * ledger_verification_update (request threads) wait for the writer's next
 * commit while 65,536 submissions are queued; the pacer's never wait. They
 * fail only when out of memory, or with OTP_EIO once ledger_close began.
 */
enum otp_rc ledger_request(struct ledger *l, const struct ledger_request *r);
/* status: "pending" (a wrong guess), "verified" or "exhausted". */
enum otp_rc ledger_verification_update(struct ledger *l, const char *id, const char *status, int wrong_delta,
                                       int64_t ts_ms);
/*
 * Moves message id to state to, if its state is one of the set from (built
 * with msg_from, base/msgstate.h); the event is recorded when it moved.
 * provider_id and detail may be NULL (kept); attempts < 0 keeps the count.
 * OTP_EINVAL when the table of moves has no move from some state of from to
 * to (or from is empty): nothing is submitted.
 */
enum otp_rc ledger_message_state(struct ledger *l, const char *id, enum msg_state to, unsigned from,
                                 const char *provider_id, const char *detail, int attempts, int64_t ts_ms);
/*
 * ledger_message_state for a delivery report, which must know whether it
 * changed anything: waits for the commit, then *moved is 1 when the message
 * moved (its state was one of from) and 0 when it did not. OTP_EIO (or
 * OTP_ENOMEM) when the change is not durable, OTP_EINVAL for a move the
 * table refuses; *moved is then 0.
 */
enum otp_rc ledger_message_report(struct ledger *l, const char *id, enum msg_state to, unsigned from,
                                  const char *detail, int64_t ts_ms, int *moved);
enum otp_rc ledger_send(struct ledger *l, const struct ledger_send *s);

/*
 * An accepted issue: the verification (if not there yet), the message
 * 'queued' and the request row, in one transaction. Blocks until that
 * transaction commits (group commit shares it with whatever else is
 * waiting) and returns OTP_OK only when all three rows are durable; else
 * OTP_EIO (or OTP_ENOMEM) and none of them is.
 */
enum otp_rc ledger_accept(struct ledger *l, const struct ledger_message *m, int64_t verification_expires_ms,
                          const struct ledger_request *r);

/* One admin action (docs/architecture.md, "Limits and rules"): who did what
 * to which row. */
struct ledger_admin {
    int64_t ts_ms;
    const char *admin;  /* the admin key's name, never the key */
    const char *action; /* "add", "remove" or "unlock" */
    const char *kind;   /* "override", "block" or "lock" */
    const char *row_id; /* NULL for unlock */
    const char *body;   /* JSON; NULL when none */
    const char *note;
    int64_t expires_ms; /* 0: none */
    int64_t result;     /* unlock: fields cleared */
};

/* Records r and waits for its commit: OTP_OK once durable, else OTP_EIO
 * (or OTP_ENOMEM). */
enum otp_rc ledger_admin(struct ledger *l, const struct ledger_admin *r);

/* 0 while the last transaction failed (disk full, I/O error), else 1. */
int ledger_healthy(struct ledger *l);

/* Calls fn for each message in 'queued' or 'sending' that was so before
 * this ledger joined the fleet (schema 005: its queue was the process's
 * own), oldest first. Runs on the caller's thread at start-up. */
enum otp_rc ledger_pending(struct ledger *l, void (*fn)(void *ctx, const struct ledger_message *m), void *ctx,
                           char *err);

/* A message of this ledger's that has not ended: what the sweep (sweep.h)
 * asks the fleet about. */
#define LEDGER_ID_MAX 64
struct ledger_unfinished {
    int64_t seq;
    char id[LEDGER_ID_MAX];
};

/* Up to max messages of this ledger still queued or sending whose code
 * expired before before_ms, of seq after after_seq, in seq order, into
 * out; *n is how many. On the caller's thread, through the readers'
 * connection: one indexed query. OTP_OK, or OTP_EIO with detail in err. */
enum otp_rc ledger_unfinished(struct ledger *l, int64_t before_ms, int64_t after_seq,
                              struct ledger_unfinished *out, int max, int *n, char *err);

/* Counters for /metrics. */
struct ledger_stats {
    uint64_t commits, rows, failures;
    uint64_t queue_depth;
};
void ledger_stats(struct ledger *l, struct ledger_stats *out);

#endif
