/*
 * chain: the format of the ledger's hash chain (schema/007_chain.sql), one
 * definition shared by the writer (ledger_writer.c and ledger_retention.c),
 * which appends links, and the checker (chaincheck.c), which recomputes
 * them. Private to src/ledger.
 *
 * A row's digest is SHA-256 over "otpd-row-v1", NUL, the table's name, NUL,
 * then each column of chain_tables[t].cols in order, each as one tag byte
 * and its value: 'N' (NULL); 'I' and 8 bytes big-endian (an integer); 'T'
 * or 'B', 4 bytes big-endian length and the bytes (text, blob); 'R' and the
 * 8 bytes of the IEEE double, big-endian (none is written today).
 *
 * A link's hash is SHA-256 over the previous link's hash (32 bytes), then
 * seq, the table name and NUL, row_id, ts_ms (each integer 8 bytes
 * big-endian) and the digest. Before link 1 stands the genesis hash:
 * SHA-256 over "otpd-chain-v1", NUL, then for each table in chain_tables'
 * order its name, NUL and its start mark (8 bytes big-endian).
 *
 * Immutable tables (requests, message_events, sends, admin_actions) get one
 * link per row. messages and verifications are updated in place: each
 * insert or update that changed the row appends a link with the row as it
 * now is, so only a row's newest link can be checked against the row;
 * older ones are history the chain itself protects. Row ids are never
 * reused (AUTOINCREMENT, schema 008), so a link names one row for ever.
 *
 * A link's ts_ms is the time retention may delete its row by (the row's
 * chain_tables[].ts_col), and retention deletes a row only once its newest
 * link's ts_ms is before the cutoff. Messages still queued or sending are
 * kept whatever their time: the prune whose cutoff first passes such a
 * message's time links it once more (a keep link) dated its code's expiry
 * plus CHAIN_UNFINISHED_MS, and a prune whose cutoff passes that ends it
 * ('expired', its outcome unknown here). So a row missing while no later
 * prune link's cutoff is past its newest link's time was deleted by hand.
 *
 * A prune link (tbl "prune", row_id the new base's seq, ts_ms the cutoff)
 * carries the genesis hash as its digest: every prune binds the start
 * marks again, which the base's hash alone would not do once the genesis
 * is pruned away. Prune links written before schema 008 carry 32 zero
 * bytes instead (`otpctl verify` says the marks are unbound until the next
 * prune).
 *
 * SHA-256 rather than libsodium's BLAKE2b: libsodium lives in src/otp,
 * above the ledger, and SHA-256 is in every standard library, so a chain
 * can be checked without otpd's code (tests/integration does, in Python).
 * The chain has no key: it proves that a ledger is the one otpd wrote only
 * up to its newest link. Keep `otpctl verify`'s head hash somewhere else
 * to know that no tail was cut or rewritten (`otpctl verify --head`).
 */
#ifndef OTPD_CHAIN_H
#define OTPD_CHAIN_H

#include <stdint.h>

#include <sqlite3.h>

#include "../base/sha256.h"

enum chain_table { CT_REQUESTS, CT_VERIFICATIONS, CT_MESSAGES, CT_MESSAGE_EVENTS, CT_SENDS, CT_ADMIN, CT_N };

/* The tag of a prune link (tbl), which no table has. */
#define CHAIN_PRUNE "prune"

/* How long past its code's expiry a message that never ended is kept as it
 * is: the life of its hash in Redis (queue.lua), after which no instance
 * can say what became of it. */
#define CHAIN_UNFINISHED_MS (24 * 3600 * 1000LL)

struct chain_table_info {
    const char *name;
    /* The columns hashed, rowid first: a SELECT list and a RETURNING list. */
    const char *cols;
    int ts_col;     /* which of cols is the retention time */
    int is_mutable; /* updated in place: only the newest link of a row is checkable */
};

extern const struct chain_table_info chain_tables[CT_N];

/* The table named name, or -1. */
int chain_table_find(const char *name);

/* The digest of the row st stands on, whose columns first..first+n-1 are
 * table t's cols (n as counted in cols). */
void chain_row_digest(enum chain_table t, sqlite3_stmt *st, int first, unsigned char out[SHA256_LEN]);

/* The hash of a link after prev. */
void chain_link_hash(const unsigned char prev[SHA256_LEN], int64_t seq, const char *tbl, int64_t row_id,
                     int64_t ts_ms, const unsigned char digest[SHA256_LEN], unsigned char out[SHA256_LEN]);

/* The hash before link 1, from the start marks (one per table). */
void chain_genesis(const int64_t marks[CT_N], unsigned char out[SHA256_LEN]);

/* How many columns table t hashes. */
int chain_ncols(enum chain_table t);

/*
 * The link before the first one kept: *seq (0 at the start) and its hash
 * (the genesis hash for seq 0, from chain_start's marks, which go to marks
 * and *started_ms when not NULL). SQLITE_OK, or SQLite's error code
 * (SQLITE_CORRUPT when a table holds no row or a hash is not 32 bytes).
 */
int chain_base(sqlite3 *db, int64_t *seq, unsigned char hash[SHA256_LEN], int64_t marks[CT_N],
               int64_t *started_ms);

/* The newest link (*seq, its hash), or the base when the chain is empty. */
int chain_head(sqlite3 *db, int64_t *seq, unsigned char hash[SHA256_LEN]);

#endif
