/*
 * chaincheck: one pass over the links in order (SQLite sorts them once to
 * mark each row's newest link), one rowid lookup per row, and one anti-join
 * per table for rows without a link: about a million rows a few seconds.
 * Memory stays flat: the sorts spill to SQLite's temp storage.
 */
#include "chaincheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "ro.h"

_Static_assert(CHAINCHECK_HASH_LEN == SHA256_LEN, "a head's hash is a link's hash");

/* Links before the chain existed: a ledger of schema 7 or later has one. */
#define CHAINCHECK_SCHEMA_MIN 7

struct chaincheck_prunes {
    int64_t *seq, *cutoff; /* cutoff[i]: the largest cutoff of prune links i.. */
    size_t n;
};

static void chaincheck_fault(struct chaincheck_result *r, const char *table, int64_t row_id, int64_t seq,
                             const char *why)
{
    r->ok = 0;
    snprintf(r->table, sizeof(r->table), "%s", table);
    r->row_id = row_id;
    r->seq = seq;
    r->why = why;
}

static void chaincheck_hex(const unsigned char *h, char *out)
{
    static const char hex[] = "0123456789abcdef";
    int i;

    for (i = 0; i < SHA256_LEN; i++) {
        out[2 * i] = hex[h[i] >> 4];
        out[2 * i + 1] = hex[h[i] & 15];
    }
    out[2 * SHA256_LEN] = '\0';
}

/* The prune links, with the largest cutoff from each one on. */
static int chaincheck_load_prunes(sqlite3 *db, struct chaincheck_prunes *p)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0, i;
    int rc;

    if ((rc =
             sqlite3_prepare_v2(db, "SELECT seq, ts_ms FROM chain WHERE tbl = '" CHAIN_PRUNE "' ORDER BY seq",
                                -1, &st, NULL)) != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (p->n == cap) {
            int64_t *a, *b;
            cap = cap * 2 + 16;
            a = realloc(p->seq, cap * sizeof(*a));
            if (a)
                p->seq = a;
            b = a ? realloc(p->cutoff, cap * sizeof(*b)) : NULL;
            if (b)
                p->cutoff = b;
            if (!a || !b) {
                rc = SQLITE_NOMEM;
                break;
            }
        }
        p->seq[p->n] = sqlite3_column_int64(st, 0);
        p->cutoff[p->n++] = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    for (i = p->n; i-- > 1;)
        if (p->cutoff[i] > p->cutoff[i - 1])
            p->cutoff[i - 1] = p->cutoff[i];
    return SQLITE_OK;
}

/* 1 when retention may have removed the row of a link at seq with time ts. */
static int chaincheck_was_pruned(const struct chaincheck_prunes *p, int64_t seq, int64_t ts_ms)
{
    size_t lo = 0, hi = p->n;

    /* The first prune link after seq. */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->seq[mid] <= seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && ts_ms < p->cutoff[lo];
}

/* What the walk checks besides links and rows, and what it saw. */
struct chaincheck_walk {
    const struct chaincheck_prunes *p;
    unsigned char marks[SHA256_LEN];    /* a prune link's digest: the genesis hash of chain_start's marks */
    const struct chaincheck_head *head; /* NULL: none given */
    int bound_seen;                     /* a prune link that binds the marks went by */
    int newest_legacy;                  /* the last prune link so far is from before schema 8 */
    int head_seen;                      /* 1: head->seq went by with head's hash; -1: with another */
};

/* A prune link binds the start marks (its digest is their genesis hash),
 * or, before schema 8 and so before any link that binds them, carries
 * zeros. A fault sets r->ok to 0. */
static void chaincheck_prune_link(struct chaincheck_result *r, struct chaincheck_walk *w, int64_t seq,
                                  const unsigned char *digest)
{
    static const unsigned char zero[SHA256_LEN];

    if (memcmp(digest, w->marks, SHA256_LEN) == 0) {
        w->bound_seen = 1;
        w->newest_legacy = 0;
        return;
    }
    if (!w->bound_seen && memcmp(digest, zero, SHA256_LEN) == 0) {
        w->newest_legacy = 1;
        r->unbound_seq = seq;
        return;
    }
    chaincheck_fault(
        r, "chain_start", -1, seq,
        "the start marks are not those the prune links bind (a mark moved to hide rows from the chain)");
}

/* One link, as the walk reads it. */
struct chaincheck_link {
    int64_t seq, row_id, ts_ms;
    const char *tbl;
    const unsigned char *digest, *hash; /* SHA256_LEN bytes each, once checked */
    int newest;                         /* the newest link of its row */
};

/* Checks the row link k names against k's digest, unless a newer link of
 * the same row will. SQLite's result code; a fault sets r->ok to 0. */
static int chaincheck_row(sqlite3_stmt *const row[CT_N], struct chaincheck_result *r,
                          const struct chaincheck_walk *w, const struct chaincheck_link *k)
{
    unsigned char got[SHA256_LEN];
    int t, step;

    if ((t = chain_table_find(k->tbl)) < 0) {
        chaincheck_fault(r, k->tbl, k->row_id, k->seq, "a link names no ledger table");
        return SQLITE_OK;
    }
    /* An in-place row's older links are its history: only the newest
     * matches the row. An append-only row has one link, always checked
     * (so a deleted last row whose rowid came back is seen). */
    if (chain_tables[t].is_mutable && !k->newest)
        return SQLITE_OK;
    sqlite3_bind_int64(row[t], 1, k->row_id);
    step = sqlite3_step(row[t]);
    if (step == SQLITE_ROW) {
        chain_row_digest((enum chain_table)t, row[t], 0, got);
        r->rows++;
    }
    sqlite3_reset(row[t]);
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        return step;
    if (step == SQLITE_DONE) {
        if (chaincheck_was_pruned(w->p, k->seq, k->ts_ms))
            r->pruned++;
        else
            chaincheck_fault(r, k->tbl, k->row_id, k->seq, "the row is missing (deleted)");
        return SQLITE_OK;
    }
    if (memcmp(got, k->digest, SHA256_LEN) != 0)
        chaincheck_fault(r, k->tbl, k->row_id, k->seq,
                         "the row differs from its link (changed, or rows swapped)");
    return SQLITE_OK;
}

/* Checks the link links stands on: that it is the one expected (*expect),
 * that its hash follows prev (which then becomes it), and what it names.
 * SQLite's result code; a fault sets r->ok to 0, which ends the walk. */
static int chaincheck_link(sqlite3_stmt *links, sqlite3_stmt *const row[CT_N], struct chaincheck_result *r,
                           unsigned char prev[SHA256_LEN], int64_t *expect, struct chaincheck_walk *w)
{
    struct chaincheck_link k = {
        .seq = sqlite3_column_int64(links, 0),
        .row_id = sqlite3_column_int64(links, 2),
        .ts_ms = sqlite3_column_int64(links, 3),
        .tbl = (const char *)sqlite3_column_text(links, 1),
        .digest = sqlite3_column_blob(links, 4),
        .hash = sqlite3_column_blob(links, 5),
        .newest = sqlite3_column_int(links, 6),
    };
    unsigned char want[SHA256_LEN];

    if (k.tbl == NULL)
        k.tbl = "";
    if (k.seq != *expect) {
        chaincheck_fault(r, k.tbl, k.row_id, k.seq,
                         k.seq < *expect ? "links out of order" : "a link before this one is missing");
        return SQLITE_OK;
    }
    if (sqlite3_column_bytes(links, 4) != SHA256_LEN || sqlite3_column_bytes(links, 5) != SHA256_LEN) {
        chaincheck_fault(r, k.tbl, k.row_id, k.seq, "a link's digest or hash is not 32 bytes");
        return SQLITE_OK;
    }
    chain_link_hash(prev, k.seq, k.tbl, k.row_id, k.ts_ms, k.digest, want);
    if (memcmp(want, k.hash, SHA256_LEN) != 0) {
        chaincheck_fault(r, k.tbl, k.row_id, k.seq,
                         "the link's hash is wrong: the link, or the one before it, was changed or moved");
        return SQLITE_OK;
    }
    memcpy(prev, want, SHA256_LEN);
    r->links++;
    r->head_seq = k.seq;
    *expect = k.seq + 1;
    if (w->head != NULL && k.seq == w->head->seq)
        w->head_seen = memcmp(want, w->head->hash, SHA256_LEN) == 0 ? 1 : -1;
    if (strcmp(k.tbl, CHAIN_PRUNE) == 0) {
        chaincheck_prune_link(r, w, k.seq, k.digest);
        return SQLITE_OK;
    }
    return chaincheck_row(row, r, w, &k);
}

/* The walk over the links; SQLite's result code (SQLITE_OK when the walk
 * ended, at the end or at a fault). */
static int chaincheck_walk(sqlite3 *db, struct chaincheck_result *r, unsigned char prev[SHA256_LEN],
                           struct chaincheck_walk *w)
{
    sqlite3_stmt *links = NULL, *row[CT_N] = {NULL};
    int64_t expect = r->base_seq + 1;
    int rc, t;

    for (t = 0; t < CT_N; t++) {
        char sql[512];
        snprintf(sql, sizeof(sql), "SELECT %s FROM %s WHERE rowid = ?1", chain_tables[t].cols,
                 chain_tables[t].name);
        if ((rc = sqlite3_prepare_v2(db, sql, -1, &row[t], NULL)) != SQLITE_OK)
            goto out;
    }
    if ((rc = sqlite3_prepare_v2(db,
                                 "SELECT seq, tbl, row_id, ts_ms, digest, hash, "
                                 "seq = max(seq) OVER (PARTITION BY tbl, row_id) FROM chain ORDER BY seq",
                                 -1, &links, NULL)) != SQLITE_OK)
        goto out;
    while (r->ok && (rc = sqlite3_step(links)) == SQLITE_ROW)
        if ((rc = chaincheck_link(links, row, r, prev, &expect, w)) != SQLITE_OK)
            goto out;
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        rc = SQLITE_OK;
out:
    sqlite3_finalize(links);
    for (t = 0; t < CT_N; t++)
        sqlite3_finalize(row[t]);
    return rc;
}

/* Whether the base is where the last prune link put it: retention moves
 * the base and says so in a prune link; nothing else does. */
static void chaincheck_base(sqlite3 *db, struct chaincheck_result *r, const struct chaincheck_prunes *p)
{
    sqlite3_stmt *st = NULL;

    if (p->n == 0 && r->base_seq != 0) {
        chaincheck_fault(r, "chain", -1, -1, "the chain's base moved without a prune link");
    } else if (p->n > 0 &&
               sqlite3_prepare_v2(db, "SELECT row_id FROM chain WHERE seq = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, p->seq[p->n - 1]);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) != r->base_seq)
            chaincheck_fault(r, "chain", -1, p->seq[p->n - 1],
                             "the chain's base is not where the last prune put it (links removed)");
    }
    sqlite3_finalize(st);
}

/* Rows without a link: the first after each table's mark, and how many at
 * or below it (older than the chain). */
static int chaincheck_unlinked(sqlite3 *db, struct chaincheck_result *r)
{
    int t, rc = SQLITE_OK;

    for (t = 0; t < CT_N && rc == SQLITE_OK && r->ok; t++) {
        sqlite3_stmt *st = NULL;
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "SELECT (SELECT count(*) FROM %1$s WHERE rowid <= ?1), (SELECT min(rowid) FROM %1$s "
                 "WHERE rowid > ?1 AND rowid NOT IN (SELECT row_id FROM chain WHERE tbl = '%1$s'))",
                 chain_tables[t].name);
        if ((rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL)) != SQLITE_OK)
            break;
        sqlite3_bind_int64(st, 1, r->marks[t]);
        if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            r->unchained[t] = sqlite3_column_int64(st, 0);
            if (sqlite3_column_type(st, 1) != SQLITE_NULL)
                chaincheck_fault(r, chain_tables[t].name, sqlite3_column_int64(st, 1), -1,
                                 "the row has no link (added behind otpd's back, or its link removed)");
            rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
    }
    return rc;
}

/* Whether the chain still holds the head given (w->head): at the base, or
 * seen with its hash on the walk. */
static void chaincheck_head(struct chaincheck_result *r, const struct chaincheck_walk *w,
                            const unsigned char base_hash[SHA256_LEN])
{
    const struct chaincheck_head *h = w->head;

    if (h->seq < r->base_seq)
        r->head_found = CHAINCHECK_HEAD_PRUNED;
    else if (h->seq == r->base_seq ? memcmp(h->hash, base_hash, SHA256_LEN) == 0 : w->head_seen == 1)
        r->head_found = CHAINCHECK_HEAD_HELD;
    else
        chaincheck_fault(r, "chain", -1, h->seq,
                         "the chain does not hold the head given (--head): its tail was cut or rewritten");
}

enum otp_rc chaincheck_run(const char *path, const struct chaincheck_head *head, struct chaincheck_result *r,
                           char *err)
{
    struct chaincheck_prunes p = {NULL, NULL, 0};
    struct chaincheck_walk w = {.p = &p, .head = head};
    unsigned char prev[SHA256_LEN], base_hash[SHA256_LEN];
    sqlite3 *db = NULL;
    enum otp_rc rc;
    int version, t, src;

    memset(r, 0, sizeof(*r));
    r->ok = 1;
    r->row_id = r->seq = -1;
    for (t = 0; t < CT_N; t++)
        r->tables[t] = chain_tables[t].name;
    if ((rc = ro_open(path, &db, &version, err)) != OTP_OK)
        return rc;
    if (version < CHAINCHECK_SCHEMA_MIN) {
        snprintf(err, OTP_ERR_LEN,
                 "%s: ledger schema %d has no hash chain (schema %d adds it: start otpd on it)", path,
                 version, CHAINCHECK_SCHEMA_MIN);
        rc = OTP_EINVAL;
        goto out;
    }
    if ((src = chain_base(db, &r->base_seq, prev, r->marks, &r->started_ms)) != SQLITE_OK) {
        if (src == SQLITE_CORRUPT) {
            /* chain_start or chain_base emptied or garbled. */
            chaincheck_fault(r, "chain", -1, -1, "the chain's start or base row is missing or garbled");
            rc = OTP_OK;
            goto out;
        }
        goto fail;
    }
    r->head_seq = r->base_seq;
    memcpy(base_hash, prev, SHA256_LEN);
    chain_genesis(r->marks, w.marks);
    if ((src = chaincheck_load_prunes(db, &p)) != SQLITE_OK)
        goto fail;
    if ((src = chaincheck_walk(db, r, prev, &w)) != SQLITE_OK)
        goto fail;
    chaincheck_hex(prev, r->head);
    r->marks_bound = r->base_seq == 0 || !w.newest_legacy;
    if (r->ok)
        chaincheck_base(db, r, &p);
    if (r->ok && (src = chaincheck_unlinked(db, r)) != SQLITE_OK)
        goto fail;
    if (r->ok && head != NULL)
        chaincheck_head(r, &w, base_hash);
    rc = OTP_OK;
out:
    free(p.seq);
    free(p.cutoff);
    sqlite3_close(db);
    return rc;
fail:
    snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", path,
             src == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
    rc = src == SQLITE_NOMEM ? OTP_ENOMEM : OTP_EIO;
    goto out;
}
