/*
 * admin's internals, shared by its files: admin.c (the object, its rules
 * and counters), admin_net.c (addresses and ranges), admin_body.c (request
 * bodies into rows), admin_rows.c (the rows in Redis and the ledger) and
 * admin_snap.c (the snapshot and block matching). Nothing outside
 * src/admin/ includes this, but tests/unit/test_admin.c.
 */
#ifndef OTPD_ADMIN_INT_H
#define OTPD_ADMIN_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../base/fresh.h"
#include "../base/phone.h"
#include "admin.h"

/* The rows in force on this instance; immutable once built. */
struct admin_snap {
    int refs; /* guarded by admin.mu */
    struct admin_block *blocks;
    size_t n_blocks;
    struct admin_override *ov;
    size_t n_ov;
};

struct admin {
    struct store *store;
    struct ledger *ledger;
    int h;
    pthread_mutex_t mu; /* guards everything below; never held across a call into another module */
    struct cfg_rule *rules;
    size_t n_rules;
    struct admin_snap *snap;
    char version[32];     /* the change counter the snapshot was read at; "" before the first read */
    int64_t offset_ms;    /* Redis's clock minus ours, at the last read */
    int64_t read_ms;      /* local monotonic, taken before the last read of the rows: FRESH_NEVER
                           * when it failed (fresh_ok says whether the snapshot may answer) */
    char pushed[64];      /* a digest of the overrides last reported changed */
    struct admin_stats stats;
};

/* admin.lua's 'snap' reply, as admin_rows_read checks it: the change
 * counter (a string), Redis's now (ms), the number of override rows, then
 * the override rows and the block rows (JSON text each). */
enum admin_snap_reply {
    ADMIN_SNAP_COUNTER = 0,
    ADMIN_SNAP_NOW = 1,
    ADMIN_SNAP_N_OV = 2,
    ADMIN_SNAP_ROWS = 3,
};

/* An unlock's body, checked. */
struct admin_unlock_req {
    char phone[PHONE_MAX]; /* canonical E.164 */
    const char *api_key;   /* "" for every caller; borrowed from the body's JSON */
    const char *note;      /* NULL when none; borrowed from the body's JSON */
};

/* admin_net.c: the canonical text of net ("10.0.0.0/8", "2001:db8::/32"). */
void admin_net_text(const struct admin_net *net, char *out, size_t cap);

/* admin_body.c: a match kind by its name ("phone", ...); -1 when none. */
int admin_match_find(const char *name);
/* Checks and canonicalizes one value of kind m into out (ADMIN_VALUE_MAX
 * bytes; a client_ip range also into *net); 0 with a sentence in detail
 * when it is not one. */
int admin_match_value(enum admin_match m, const char *v, char *out, struct admin_net *net, char *detail,
                      size_t cap);
/* The kinds of r's key, bit 1 << kind each. */
unsigned admin_rule_mask(const struct cfg_rule *r);

/*
 * admin_body.c: a request body (len bytes of JSON) into the row to store,
 * a new JSON object the caller releases, with the row's time to live in
 * *ttl_ms; NULL with a sentence in detail when the body is refused. An
 * override is checked against rules (n_rules of them) and parsed into *ov
 * too. Pure.
 */
json_t *admin_block_body(const char *body, size_t len, int64_t *ttl_ms, char *detail, size_t cap);
json_t *admin_override_body(const struct cfg_rule *rules, size_t n_rules, const char *body, size_t len,
                            struct admin_override *ov, int64_t *ttl_ms, char *detail, size_t cap);
/* An unlock's body into *u, and the body with its phone canonical (the
 * ledger's record: the caller releases it; u borrows from it); NULL with
 * a sentence in detail when it is refused. Pure. */
json_t *admin_unlock_body(const char *body, size_t len, struct admin_unlock_req *u, char *detail, size_t cap);

/* admin_rows.c: reads every live row (enum admin_snap_reply); known is the
 * counter already held ("" for none), then only the counter and Redis's now
 * may come. OTP_ESTORE with err when Redis failed or the reply is
 * malformed. Blocks on Redis. */
enum otp_rc admin_rows_read(struct admin *a, const char *known, struct store_reply **rep, char *err);

/* admin_snap.c: frees s (NULL is fine) whatever its references. */
void admin_snap_free(struct admin_snap *s);

#endif
