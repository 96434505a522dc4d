/*
 * admin: the operators' rows (docs/architecture.md, "Limits and rules":
 * overrides and blocks are rows, not code) and the wrong-guess unlock.
 * Rows live in Redis (admin.lua) with an expiry on Redis's clock; every
 * instance keeps a snapshot refreshed at least once a second
 * (admin_refresh, on the main thread), so a change reaches the whole fleet
 * within 2 s; a snapshot whose last read failed or is older than that
 * refuses nothing from memory (admin_blocked, admin_read_ms). Blocks are
 * matched here, in C, before any Redis call; overrides are handed to the
 * limits through the caller (cmd/otpd wires them: admin and limits sit on
 * one level and know nothing of each other). Rare calls: an admin action
 * a minute is a busy day; a block match runs on every request.
 */
#ifndef OTPD_ADMIN_H
#define OTPD_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "../base/conf.h"
#include "../base/rc.h"
#include "../ledger/ledger.h"
#include "../store/store.h"

/* Live rows of each kind in Redis; the one past it is refused. */
#define ADMIN_ROWS_MAX 10000
/* expires_in: at most 30 days. */
#define ADMIN_TTL_MAX_MS (30LL * 86400 * 1000)
#define ADMIN_ID_LEN 16 /* hex characters of a row's id */
#define ADMIN_VALUE_MAX 129 /* one key value or match value and its NUL */
#define ADMIN_NOTE_MAX 256

enum admin_kind { ADMIN_OVERRIDE, ADMIN_BLOCK };

/* What a block matches (the "match" object's one member). */
enum admin_match {
    ADMIN_M_PHONE,
    ADMIN_M_PHONE_PREFIX,
    ADMIN_M_REGION,
    ADMIN_M_DEVICE,
    ADMIN_M_CLIENT_IP,
    ADMIN_M_API_KEY,
};
#define ADMIN_M_COUNT 6

/* A client IP or a CIDR range: IPv4 (family 4, IPv4-mapped IPv6 included)
 * or IPv6 (family 6), its bytes, its prefix length in bits. */
struct admin_net {
    int family;
    unsigned char addr[16];
    int bits;
};

struct admin_block {
    char id[ADMIN_ID_LEN + 1];
    enum admin_match match;
    char value[ADMIN_VALUE_MAX]; /* canonical: E.164 phone, "+digits" prefix, region, device, key name */
    struct admin_net net;        /* ADMIN_M_CLIENT_IP */
    int64_t expires_ms;          /* Redis's clock */
};

/* An override: the rule's limit (and burst) for one value of its key. */
struct admin_override {
    char id[ADMIN_ID_LEN + 1];
    char rule[CFG_NAME_MAX];
    unsigned mask;                           /* key kinds named, 1 << enum cfg_key */
    char values[CFG_KEY_COUNT][ADMIN_VALUE_MAX]; /* per kind; phone canonical, client_ip as given */
    int64_t limit;
    int64_t burst; /* 0: scale the rule's burst with the limit */
    int64_t expires_ms;
};

/* The request a block is matched against; strings may be NULL. */
struct admin_subject {
    const char *phone; /* canonical E.164 */
    const char *region;
    const char *device_id;
    const char *client_ip; /* as the request gave it */
    const char *api_key;   /* the caller's name */
};

struct admin;

/* Registers admin.lua with s (call before s is shared) and copies the
 * rules of c, the limits' section (for validating overrides and for
 * unlock). NULL when out of memory. s and lg outlive the admin. */
struct admin *admin_new(struct store *s, struct ledger *lg, const struct limits_conf *c);
void admin_free(struct admin *a);

/* Takes the rules of c, the limits' section (SIGHUP). */
enum otp_rc admin_reload(struct admin *a, const struct limits_conf *c);

/*
 * POST /v1/admin/overrides or /blocks: validates body (len bytes of JSON),
 * stores the row and records it in the ledger under who (the admin key's
 * name). OTP_OK with the row's id (ADMIN_ID_LEN + 1 bytes) and its
 * expiry (Redis's clock, Unix ms); OTP_EINVAL with a sentence in detail
 * (nothing changed); OTP_EFULL when ADMIN_ROWS_MAX live rows of that kind
 * exist; OTP_ESTORE when Redis failed. Blocks on Redis and the ledger.
 */
enum otp_rc admin_add(struct admin *a, enum admin_kind kind, const char *who, const char *body, size_t len,
                      char *id, int64_t *expires_ms, char *detail, size_t cap);

/* GET: the live rows of kind, {"items": [...]} as malloc'd JSON text in
 * *out (times in RFC 3339 UTC). OTP_ESTORE with detail in err. */
enum otp_rc admin_list(struct admin *a, enum admin_kind kind, char **out, char *err);

/* DELETE: OTP_OK removed (and recorded under who), OTP_ENOTFOUND when no
 * such live row, OTP_ESTORE. */
enum otp_rc admin_remove(struct admin *a, enum admin_kind kind, const char *who, const char *id, char *err);

/* POST /v1/admin/unlock {phone, api_key?}: clears the wrong-guess state of
 * every wrong_guess_cap rule whose key holds phone (with api_key, only
 * that caller's part of a rule keyed on api_key too). *n: fields cleared.
 * OTP_EINVAL with detail, OTP_ESTORE. Recorded under who. */
enum otp_rc admin_unlock(struct admin *a, const char *who, const char *body, size_t len, int *n, char *detail,
                         size_t cap);

/* What admin_refresh's *changed holds, as bits. */
#define ADMIN_OVERRIDES_CHANGED 1 /* the live overrides differ from the last call's */
#define ADMIN_ROWS_MOVED 2        /* the change counter moved: a row came, went or ended, or an unlock ran */

/*
 * The housekeeping tick (at least once a second): reads the rows from
 * Redis when they changed and drops those past their expiry by the local
 * estimate of Redis's clock (so a Redis that is down keeps the snapshot,
 * less what ends). *changed has ADMIN_OVERRIDES_CHANGED when the live
 * overrides differ from the last call's (hand them to the limits:
 * admin_overrides) and ADMIN_ROWS_MOVED when the change counter moved
 * (clear the refusal cache: limits_cache_clear). OTP_ESTORE with detail in
 * err when Redis failed (the snapshot stays, but admin_read_ms says it
 * failed). Sets admin_read_ms.
 */
enum otp_rc admin_refresh(struct admin *a, int *changed, char *err);

/* Local monotonic ms taken before the last read of the rows, or
 * FRESH_NEVER (src/base/fresh.h) when it failed: what vouches for the
 * snapshot and for the refusal cache (limits_cache_vouch). */
int64_t admin_read_ms(struct admin *a);

/* The live overrides, malloc'd into *out (caller frees); their count. -1
 * when out of memory. */
long admin_overrides(struct admin *a, struct admin_override **out);

/* 1 when a live block matches s (then the match kind's name in what,
 * "phone", "client_ip", ...), else 0. -1 when one matches but the snapshot
 * is stale (fresh_ok of admin_read_ms fails: the block may be gone
 * and this instance could not see it): the caller fails closed, 503
 * store_unavailable, as it would without Redis. A block added while the
 * rows cannot be read is not seen until they can. No Redis call; takes a
 * lock for a reference to the snapshot only. */
int admin_blocked(struct admin *a, const struct admin_subject *s, char *what, size_t cap);

/* Counters for /metrics: blocked requests by match kind, live rows. */
struct admin_stats {
    uint64_t blocked[ADMIN_M_COUNT];
    uint64_t overrides, blocks; /* live in the snapshot */
    uint64_t refresh_failures;
};
void admin_stats(struct admin *a, struct admin_stats *out);
const char *admin_match_name(enum admin_match m);

/* A copy of a's rules, taken under its lock, so that the caller may read
 * it while a reload swaps a's own; malloc'd (the caller frees), its length
 * in *n. NULL when out of memory. */
struct cfg_rule *admin_rules_copy(struct admin *a, size_t *n);

/* Parses "10.0.0.0/8", "2001:db8::/32" or an address (a /32 or /128);
 * IPv4-mapped IPv6 becomes IPv4. Host bits past the prefix are cleared.
 * OTP_EINVAL when malformed. Pure. */
enum otp_rc admin_net_parse(const char *s, struct admin_net *out);
/* 1 when ip (an address) lies in net. Pure. */
int admin_net_match(const struct admin_net *net, const struct admin_net *ip);

#endif
