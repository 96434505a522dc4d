/*
 * store: otpd's only door to Redis. A small pool of connections (one per
 * thread that needs one at a time), a tight timeout on connect, read and
 * write, scripts run by EVALSHA with one reload on NOSCRIPT, and a circuit
 * breaker so a dead or hung Redis costs callers nothing but a fast 503.
 * The only home of hiredis.
 */
#ifndef OTPD_STORE_H
#define OTPD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/rc.h"

struct store;

#define STORE_SENTINELS_MAX 8

struct store_opts {
    const char *host; /* a single node; ignored with sentinels */
    int port;
    int db;
    const char *password; /* NULL for none */
    int timeout_ms;       /* connect, read and write */
    int breaker_failures; /* consecutive failures that open the breaker */
    int64_t breaker_open_ms;
    /* Sentinels, asked in order where master is each time a connection is
     * made (the node must then say it is a master). n_sentinels 0: none. */
    const char (*sentinel_hosts)[256];
    const int *sentinel_ports;
    size_t n_sentinels;
    const char *master;
    const char *username; /* an ACL user for AUTH with password; NULL or "" for the default user */
    int quiet; /* 1: check Redis's settings, but leave logging them to another store of this process */
};

/* A script reply, copied out of hiredis. Integers and strings only, or an
 * array of them (nested arrays are not needed by our scripts). */
/* Keys more than one module's scripts use: the fleet's send stream and
 * holds (issue.lua writes them, the pacer's queue.lua reads them), the
 * send slots (slot.lua), and each message's hash (issue.lua, queue.lua,
 * slot.lua, reserve.lua, refund.lua). */
#define STORE_QUEUE_KEY "otp:q"
#define STORE_HOLDS_KEY "otp:holds"
/* Each caller's messages not yet ended (pacer.share_per_key): a sorted set
 * of "<caller>\x1f<expiry, 13 digits>\x1f<mid>", all scored 0, so one
 * caller's members are one lexical range (issue.lua, queue.lua). */
#define STORE_SHARE_KEY "otp:share"
#define STORE_SLOT_KEY "otp:slot"
void store_msg_key(const char *id, char *out, size_t cap);

struct store_reply {
    size_t n;           /* elements */
    long long *ints;    /* ints[i] when strs[i] is NULL */
    char **strs;        /* NUL-terminated strings, or NULL */
};

/* Returns a store that connects lazily, or NULL when out of memory. Never
 * blocks. The caller frees with store_free. */
struct store *store_new(const struct store_opts *o);
void store_free(struct store *s);

/* Registers a Lua script; returns its handle (0, 1, ...). Not thread-safe:
 * call before the store is shared. src must outlive the store. */
int store_script(struct store *s, const char *src);

/*
 * Runs script h with keys then args (nkeys of the nargs strings are keys).
 * On OTP_OK *out is a reply the caller frees with store_reply_free. Each
 * Redis step has timeout_ms: a dead Redis costs one connect timeout, a hung
 * one a read timeout, and only a fresh connection to a Redis that lost our
 * scripts takes more (connect, AUTH, SELECT, SCRIPT LOAD, EVALSHA). Returns
 * OTP_ESTORE at once while the breaker is open, and OTP_ESTORE with detail
 * in err on any Redis failure.
 */
enum otp_rc store_eval(struct store *s, int h, int nkeys, int nargs, const char *const *args,
                       struct store_reply **out, char *err);

/*
 * store_eval for a script that is idempotent by a request id among its
 * arguments (a second run returns the first run's recorded outcome). When
 * the call times out or the connection breaks after the command may have
 * been sent, it is retried once on a fresh connection; only then is it
 * OTP_ESTORE. *maybe_ran is 1 when a failed call may still have run (or
 * may run later, when a stalled Redis wakes), so the caller must abandon
 * the request id; 0 when it surely did not (breaker open, no connection).
 */
enum otp_rc store_eval_idem(struct store *s, int h, int nkeys, int nargs, const char *const *args,
                            struct store_reply **out, int *maybe_ran, char *err);

void store_reply_free(struct store_reply *r);

/* PING through the pool; OTP_OK when Redis answers in time. */
enum otp_rc store_ping(struct store *s, char *err);

/* 1 while the breaker is open (failing fast), else 0. */
int store_breaker_open(struct store *s);

/* Milliseconds until the open breaker lets a probe through; 0 when closed
 * or due. A refusal's Retry-After is never earlier than this. */
int64_t store_breaker_left_ms(struct store *s);

/*
 * What Redis says of the two settings otpd's promises rest on (docs/architecture.md,
 * "Redis keys and scripts"): maxmemory-policy must be noeviction (eviction would silently
 * wipe limits, locks and verifications) and appendonly yes (a restart would
 * forget them). Read with CONFIG GET on every new connection, so at start
 * and after every reconnect; a risky value is logged when first seen and
 * again after each reconnect.
 */
struct store_redis_conf {
    int checked;               /* 0 until a connection was made */
    char maxmemory_policy[32]; /* "unknown" when CONFIG GET is refused (renamed, ACL) */
    char appendonly[16];       /* "yes", "no" or "unknown" */
    int policy_risky;          /* 1 unless the policy is known to be noeviction */
    int appendonly_risky;      /* 1 unless appendonly is known to be yes */
};

/* The last check's result (all zero before the first connection). */
void store_redis_conf(struct store *s, struct store_redis_conf *out);

/* Counters for /metrics. */
struct store_stats {
    uint64_t calls, failures, breaker_rejects, breaker_opens;
};
void store_stats(struct store *s, struct store_stats *out);

#endif
