/*
 * chain: the digests and link hashes of chain.h's format, and the reads of
 * the chain's base and head. Two SHA-256 per row written (the row's digest
 * and its link), and the same again per row when `otpctl verify` reads a
 * ledger.
 */
#include "chain.h"

#include <string.h>

const struct chain_table_info chain_tables[CT_N] = {
    [CT_REQUESTS] = {"requests",
                     "id, ts_ms, kind, api_key, phone, device_id, client_ip, decision, rule, shadow, "
                     "verification_id, message_id, http_status, purpose, count",
                     1, 0},
    [CT_VERIFICATIONS] = {"verifications",
                          "rowid, id, phone, api_key, created_ms, expires_ms, status, wrong, ended_ms", 5, 1},
    [CT_MESSAGES] = {"messages",
                     "seq, id, verification_id, api_key, phone, state, created_ms, expires_ms, updated_ms, "
                     "attempts, price_minor, cost_ms, provider_id, detail, cost_caps, legacy",
                     8, 1},
    [CT_MESSAGE_EVENTS] = {"message_events", "id, message_id, ts_ms, state, detail", 2, 0},
    [CT_SENDS] = {"sends",
                  "id, message_id, ts_ms, attempt, provider, http_status, latency_ms, outcome, provider_id, "
                  "error, cost_minor",
                  2, 0},
    [CT_ADMIN] = {"admin_actions", "id, ts_ms, admin, action, kind, row_id, body, note, expires_ms, result",
                  1, 0},
};

int chain_table_find(const char *name)
{
    int t;

    for (t = 0; t < CT_N; t++)
        if (strcmp(chain_tables[t].name, name) == 0)
            return t;
    return -1;
}

int chain_ncols(enum chain_table t)
{
    const char *p;
    int n = 1;

    for (p = chain_tables[t].cols; *p; p++)
        n += *p == ',';
    return n;
}

static void chain_be64(struct sha256 *s, int64_t v)
{
    unsigned char b[8];
    uint64_t u = (uint64_t)v;
    int i;

    for (i = 0; i < 8; i++)
        b[i] = (unsigned char)(u >> (56 - 8 * i));
    sha256_update(s, b, 8);
}

static void chain_bytes(struct sha256 *s, char tag, const void *p, int n)
{
    unsigned char b[5];
    uint32_t u = n > 0 ? (uint32_t)n : 0;

    b[0] = (unsigned char)tag;
    b[1] = (unsigned char)(u >> 24);
    b[2] = (unsigned char)(u >> 16);
    b[3] = (unsigned char)(u >> 8);
    b[4] = (unsigned char)u;
    sha256_update(s, b, 5);
    if (u > 0)
        sha256_update(s, p, u);
}

void chain_row_digest(enum chain_table t, sqlite3_stmt *st, int first, unsigned char out[SHA256_LEN])
{
    struct sha256 s;
    int i, n = chain_ncols(t);

    sha256_init(&s);
    sha256_update(&s, "otpd-row-v1", 12);
    sha256_update(&s, chain_tables[t].name, strlen(chain_tables[t].name) + 1);
    for (i = first; i < first + n; i++) {
        switch (sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER:
            sha256_update(&s, "I", 1);
            chain_be64(&s, sqlite3_column_int64(st, i));
            break;
        case SQLITE_FLOAT: {
            double d = sqlite3_column_double(st, i);
            int64_t bits;
            memcpy(&bits, &d, sizeof(bits));
            sha256_update(&s, "R", 1);
            chain_be64(&s, bits);
            break;
        }
        case SQLITE_TEXT:
            /* text before bytes: SQLite converts in place on the first call. */
            chain_bytes(&s, 'T', sqlite3_column_text(st, i), sqlite3_column_bytes(st, i));
            break;
        case SQLITE_BLOB:
            chain_bytes(&s, 'B', sqlite3_column_blob(st, i), sqlite3_column_bytes(st, i));
            break;
        default:
            sha256_update(&s, "N", 1);
        }
    }
    sha256_final(&s, out);
}

void chain_link_hash(const unsigned char prev[SHA256_LEN], int64_t seq, const char *tbl, int64_t row_id,
                     int64_t ts_ms, const unsigned char digest[SHA256_LEN], unsigned char out[SHA256_LEN])
{
    struct sha256 s;

    sha256_init(&s);
    sha256_update(&s, prev, SHA256_LEN);
    chain_be64(&s, seq);
    sha256_update(&s, tbl, strlen(tbl) + 1);
    chain_be64(&s, row_id);
    chain_be64(&s, ts_ms);
    sha256_update(&s, digest, SHA256_LEN);
    sha256_final(&s, out);
}

void chain_genesis(const int64_t marks[CT_N], unsigned char out[SHA256_LEN])
{
    struct sha256 s;
    int t;

    sha256_init(&s);
    sha256_update(&s, "otpd-chain-v1", 14);
    for (t = 0; t < CT_N; t++) {
        sha256_update(&s, chain_tables[t].name, strlen(chain_tables[t].name) + 1);
        chain_be64(&s, marks[t]);
    }
    sha256_final(&s, out);
}

int chain_base(sqlite3 *db, int64_t *seq, unsigned char hash[SHA256_LEN], int64_t marks[CT_N],
               int64_t *started_ms)
{
    static const char sql[] = "SELECT b.seq, b.hash, s.started_ms, s.requests, s.verifications, s.messages, "
                              "s.message_events, s.sends, s.admin_actions FROM chain_base b, chain_start s";
    sqlite3_stmt *st = NULL;
    int64_t m[CT_N];
    int rc, t;

    if ((rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
        goto out;
    }
    *seq = sqlite3_column_int64(st, 0);
    for (t = 0; t < CT_N; t++)
        m[t] = sqlite3_column_int64(st, 3 + t);
    if (marks)
        memcpy(marks, m, sizeof(m));
    if (started_ms)
        *started_ms = sqlite3_column_int64(st, 2);
    rc = SQLITE_OK;
    if (*seq == 0)
        chain_genesis(m, hash);
    else if (sqlite3_column_bytes(st, 1) == SHA256_LEN)
        memcpy(hash, sqlite3_column_blob(st, 1), SHA256_LEN);
    else
        rc = SQLITE_CORRUPT;
out:
    sqlite3_finalize(st);
    return rc;
}

int chain_head(sqlite3 *db, int64_t *seq, unsigned char hash[SHA256_LEN])
{
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = sqlite3_prepare_v2(db, "SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1", -1, &st,
                                 NULL)) != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 1) == SHA256_LEN) {
        *seq = sqlite3_column_int64(st, 0);
        memcpy(hash, sqlite3_column_blob(st, 1), SHA256_LEN);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_ROW) {
        rc = SQLITE_CORRUPT;
    } else if (rc == SQLITE_DONE) {
        rc = chain_base(db, seq, hash, NULL, NULL);
    }
    sqlite3_finalize(st);
    return rc;
}
