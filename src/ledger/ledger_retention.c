/*
 * ledger_retention: pruning the rows past the retention, on the writer
 * thread between its batches, once an hour (or once per retention, if
 * shorter): a few DELETEs by indexed time, the keep links of the messages
 * still waiting (a handful), the end of those no one can end any more
 * (rarer still), and the chain's base moved past the links of the rows
 * deleted, all in one transaction that holds the writer up while it runs.
 */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

/*
 * The keep links (chain.h): each message still queued or sending whose
 * time (updated_ms) the cutoff has passed since the last prune (from_ms
 * on) is linked once more, dated its code's expiry plus
 * CHAIN_UNFINISHED_MS, so that `otpctl verify` does not take it for pruned.
 * Once per row and change: the next prune's window starts at this cutoff.
 */
static int ledger_keep_unfinished(struct ledger *l, int64_t from_ms, int64_t cutoff_ms)
{
    sqlite3_stmt *st = NULL;
    char sql[512];
    int rc, ncols = chain_ncols(CT_MESSAGES);

    snprintf(sql, sizeof(sql),
             "SELECT %s, max(updated_ms, expires_ms + ?3) FROM messages WHERE state IN " LEDGER_UNFINISHED_SQL
             " AND updated_ms >= ?1 AND updated_ms < ?2",
             chain_tables[CT_MESSAGES].cols);
    if ((rc = sqlite3_prepare_v2(l->wdb, sql, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, from_ms);
    sqlite3_bind_int64(st, 2, cutoff_ms);
    sqlite3_bind_int64(st, 3, CHAIN_UNFINISHED_MS);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        unsigned char digest[SHA256_LEN];
        chain_row_digest(CT_MESSAGES, st, 0, digest);
        if ((rc = ledger_link(l, chain_tables[CT_MESSAGES].name, sqlite3_column_int64(st, 0),
                              sqlite3_column_int64(st, ncols), digest)) != SQLITE_OK)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Where the last prune's keep links stopped: its cutoff (INT64_MIN before
 * any prune). A last prune from before schema 008 (its digest zeros, not
 * the marks) linked waiting messages again at each prune with their own
 * time: then every waiting message is linked once more (INT64_MIN). The
 * newest prune link lies within the last prune period of links, so the
 * backward scan is short. */
static int ledger_keep_from(struct ledger *l, int64_t *from_ms)
{
    static const unsigned char zero[SHA256_LEN];
    sqlite3_stmt *st = NULL;
    int rc;

    *from_ms = INT64_MIN;
    if ((rc = sqlite3_prepare_v2(l->wdb,
                                 "SELECT ts_ms, digest FROM chain WHERE tbl = '" CHAIN_PRUNE
                                 "' ORDER BY seq DESC LIMIT 1",
                                 -1, &st, NULL)) != SQLITE_OK)
        return rc;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && !(sqlite3_column_bytes(st, 1) == SHA256_LEN &&
                                                   memcmp(sqlite3_column_blob(st, 1), zero, SHA256_LEN) == 0))
        *from_ms = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The first link whose row may still be there (*keep_from): the first
 * row link whose time is not past the cutoff, else the next link to be
 * written. SQLite's result code. */
static int ledger_first_kept(struct ledger *l, int64_t cutoff_ms, int64_t *keep_from)
{
    sqlite3_stmt *st = NULL;
    int rc;

    *keep_from = l->chain_seq + 1;
    if ((rc = sqlite3_prepare_v2(l->wdb, "SELECT min(seq) FROM chain WHERE ts_ms >= ?1 AND tbl <> 'prune'",
                                 -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, cutoff_ms);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int64(st, 0) < *keep_from)
        *keep_from = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Moves the chain's base (*base_seq and base_hash: the old base on entry)
 * to the link before keep_from, if that is past it, and deletes the links
 * up to the new base. SQLite's result code. */
static int ledger_move_base(struct ledger *l, int64_t keep_from, int64_t *base_seq,
                            unsigned char base_hash[SHA256_LEN])
{
    sqlite3_stmt *st = NULL;
    int rc;

    if (keep_from - 1 <= *base_seq)
        return SQLITE_OK;
    if ((rc = sqlite3_prepare_v2(l->wdb, "SELECT hash FROM chain WHERE seq = ?1", -1, &st, NULL)) !=
        SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, keep_from - 1);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == SHA256_LEN) {
        memcpy(base_hash, sqlite3_column_blob(st, 0), SHA256_LEN);
        *base_seq = keep_from - 1;
        rc = SQLITE_OK;
    } else {
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_OK)
        return rc;
    if ((rc = sqlite3_prepare_v2(l->wdb, "UPDATE chain_base SET seq = ?1, hash = ?2", -1, &st, NULL)) !=
        SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, *base_seq);
    sqlite3_bind_blob(st, 2, base_hash, SHA256_LEN, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_DONE)
        return rc;
    if ((rc = sqlite3_prepare_v2(l->wdb, "DELETE FROM chain WHERE seq <= ?1", -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, *base_seq);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * The chain's part of a prune (chain.h), inside its transaction, after the
 * rows went: the keep links first; then every link before the first one
 * whose time is not past the cutoff goes (a row still there needs its
 * newest link, and retention keeps exactly the rows whose newest link is
 * that recent), the base moves to the link before it, and a prune link
 * records the cutoff and the new base and binds the start marks (its
 * digest is the genesis hash). `otpctl verify` accepts a missing row whose
 * newest link's time is before a later prune link's cutoff.
 */
static int ledger_prune_chain(struct ledger *l, int64_t cutoff_ms)
{
    unsigned char base_hash[SHA256_LEN], marks_digest[SHA256_LEN];
    int64_t keep_from, base_seq, marks[CT_N], from_ms;
    int rc;

    if ((rc = chain_base(l->wdb, &base_seq, base_hash, marks, NULL)) != SQLITE_OK ||
        (rc = ledger_keep_from(l, &from_ms)) != SQLITE_OK ||
        (rc = ledger_keep_unfinished(l, from_ms, cutoff_ms)) != SQLITE_OK)
        return rc;
    chain_genesis(marks, marks_digest);
    if ((rc = ledger_first_kept(l, cutoff_ms, &keep_from)) != SQLITE_OK ||
        (rc = ledger_move_base(l, keep_from, &base_seq, base_hash)) != SQLITE_OK)
        return rc;
    return ledger_link(l, CHAIN_PRUNE, base_seq, cutoff_ms, marks_digest);
}

/* Ends each message still queued or sending whose keep link's time (a day
 * past its code's expiry, or its last change if later) is before
 * cutoff_ms: no instance can say any more what became of it, and the chain
 * must not keep it for ever. Inside the prune's transaction; now_ms is its
 * time. */
static int ledger_prune_unfinished(struct ledger *l, int64_t now_ms, int64_t cutoff_ms)
{
    sqlite3_stmt *st = NULL;
    int64_t after = 0;
    int rc;

    if ((rc = sqlite3_prepare_v2(
             l->wdb,
             "SELECT seq, id, state FROM messages WHERE state IN " LEDGER_UNFINISHED_SQL
             " AND max(updated_ms, expires_ms + ?2) < ?1 AND seq > ?3 ORDER BY seq LIMIT 1",
             -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, cutoff_ms);
    sqlite3_bind_int64(st, 2, CHAIN_UNFINISHED_MS);
    /* One at a time, each read after the last one's update. */
    while (sqlite3_bind_int64(st, 3, after), (rc = sqlite3_step(st)) == SQLITE_ROW) {
        char detail[128];
        struct ledger_op *op;
        after = sqlite3_column_int64(st, 0);
        snprintf(detail, sizeof(detail),
                 "ended by retention: still %s a day after its code's expiry, outcome unknown here",
                 (const char *)sqlite3_column_text(st, 2));
        op = ledger_op_move((const char *)sqlite3_column_text(st, 1), MSG_EXPIRED,
                            msg_from(MSG_EXPIRED, msg_phase_set(MSG_PENDING)), NULL, detail, -1, now_ms);
        sqlite3_reset(st);
        rc = op != NULL ? ledger_exec(l, op) : SQLITE_NOMEM;
        ledger_op_free(op);
        if (rc != SQLITE_OK)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Deletes what is older than the retention (cutoff_ms = now_ms minus it);
 * on the writer thread. Messages still queued or sending stay until they
 * end (ledger_prune_unfinished ends those no one can end any more). */
void ledger_prune(struct ledger *l, int64_t now_ms, int64_t cutoff_ms)
{
    char sql[768];
    int rc;

    snprintf(
        sql, sizeof(sql),
        "DELETE FROM requests WHERE ts_ms < %1$lld; DELETE FROM sends WHERE ts_ms < %1$lld; "
        "DELETE FROM message_events WHERE ts_ms < %1$lld; DELETE FROM messages WHERE updated_ms < %1$lld "
        "AND state NOT IN " LEDGER_UNFINISHED_SQL "; DELETE FROM verifications WHERE expires_ms < %1$lld; "
        "DELETE FROM admin_actions WHERE ts_ms < %1$lld",
        (long long)cutoff_ms);
    rc = sqlite3_exec(l->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = ledger_chain_fresh(l);
    if (rc == SQLITE_OK)
        rc = ledger_prune_unfinished(l, now_ms, cutoff_ms);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(l->wdb, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = ledger_prune_chain(l, cutoff_ms);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(l->wdb, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_exec(l->wdb, "ROLLBACK", NULL, NULL, NULL);
        l->chain_stale = 1;
        pthread_mutex_lock(&l->mu);
        l->stats.failures++;
        pthread_mutex_unlock(&l->mu);
    }
}
