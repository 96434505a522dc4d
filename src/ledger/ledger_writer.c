/*
 * ledger_writer: the writer thread, the only one that writes the file.
 * About three rows per accepted message and one per refusal, so thousands
 * a second at peak: it takes every submission queued since its last
 * commit and commits them in one transaction, so fsync's cost is shared
 * by the whole batch, and a request waits at most one commit plus the one
 * in progress. Each row written is read back and linked into the chain
 * (chain.h) in the same transaction: two SHA-256 and a lookup per row.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "ledger_int.h"

#define LEDGER_BATCH_MAX 1024
/* Pruning runs this often at most (and at least once per retention). */
#define LEDGER_PRUNE_EVERY_MS (3600 * 1000)

/* The transaction's own statements (enum ledger_txn), prepared once. */
static const char *const ledger_txn_sql[LT_COUNT] = {
    [LT_BEGIN] = "BEGIN IMMEDIATE",
    [LT_SAVEPOINT] = "SAVEPOINT grp",
    [LT_ROLLBACK_TO] = "ROLLBACK TO grp",
    [LT_RELEASE] = "RELEASE grp",
    [LT_COMMIT] = "COMMIT",
};

/* Each kind runs one or two statements, bound by parameter number. */
static const char *const ledger_sql[LK_COUNT][2] = {
    [LK_REQUEST] = {"INSERT INTO requests (ts_ms, kind, api_key, phone, device_id, client_ip, decision, rule, "
                    "shadow, verification_id, message_id, http_status, purpose, count) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                    NULL},
    [LK_VER_NEW] = {"INSERT OR IGNORE INTO verifications (id, phone, api_key, created_ms, expires_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?5)",
                    NULL},
    [LK_VER_UPDATE] = {"UPDATE verifications SET status = ?2, wrong = wrong + ?3, "
                       "ended_ms = CASE WHEN ?2 = 'pending' THEN ended_ms ELSE ?4 END WHERE id = ?1",
                       NULL},
    [LK_MSG_NEW] = {"INSERT INTO messages (id, verification_id, api_key, phone, state, created_ms, expires_ms, "
                    "updated_ms, price_minor, cost_ms, cost_caps) "
                    "VALUES (?1, ?2, ?3, ?4, '" LEDGER_QUEUED "', ?5, ?6, ?5, ?7, ?8, ?9)",
                    "INSERT INTO message_events (message_id, ts_ms, state) "
                    "VALUES (?1, ?5, '" LEDGER_QUEUED "')"},
    [LK_MSG_STATE] = {"UPDATE messages SET state = ?2, updated_ms = ?7, provider_id = COALESCE(?4, provider_id), "
                      "detail = COALESCE(?5, detail), attempts = CASE WHEN ?6 < 0 THEN attempts ELSE ?6 END "
                      "WHERE id = ?1 AND " LEDGER_FROM_HAS("state", "?3"),
                      /* A message another instance accepted has no row
                       * here: this instance's events of it are kept all the same. */
                      "INSERT INTO message_events (message_id, ts_ms, state, detail) "
                      "SELECT ?1, ?7, ?2, ?5 WHERE changes() > 0 "
                      "OR NOT EXISTS (SELECT 1 FROM messages WHERE id = ?1)"},
    [LK_SEND] = {"INSERT INTO sends (ts_ms, message_id, attempt, provider, http_status, latency_ms, outcome, "
                 "provider_id, error, cost_minor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                 NULL},
    [LK_ADMIN] = {"INSERT INTO admin_actions (ts_ms, admin, action, kind, row_id, body, note, expires_ms, result) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                  NULL},
};

/* The table each statement writes: the row it wrote is read back and
 * chained (chain.h). Not with RETURNING: SQLite builds an ephemeral table
 * for it at every run, and the malloc churn (glibc giving memory back with
 * madvise, a TLB flush across the request threads each time) cost the
 * writer more than half its throughput. */
static const enum chain_table ledger_tbl[LK_COUNT][2] = {
    [LK_REQUEST] = {CT_REQUESTS, CT_N},
    [LK_VER_NEW] = {CT_VERIFICATIONS, CT_N},
    [LK_VER_UPDATE] = {CT_VERIFICATIONS, CT_N},
    [LK_MSG_NEW] = {CT_MESSAGES, CT_MESSAGE_EVENTS},
    [LK_MSG_STATE] = {CT_MESSAGES, CT_MESSAGE_EVENTS},
    [LK_SEND] = {CT_SENDS, CT_N},
    [LK_ADMIN] = {CT_ADMIN, CT_N},
};

/* Each statement writes at most one row: an insert finds it by its rowid,
 * an update (the op's first argument is the id) by its id. */
static const int ledger_by_id[LK_COUNT][2] = {
    [LK_VER_UPDATE] = {1, 0},
    [LK_MSG_STATE] = {1, 0},
};

/* Prepares sql on the writer's connection into *st, for the ledger's
 * life; -1 with detail in err. */
static int ledger_prepare(struct ledger *l, const char *sql, sqlite3_stmt **st, char *err)
{
    if (sqlite3_prepare_v3(l->wdb, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->wdb));
        return -1;
    }
    return 0;
}

int ledger_writer_prepare(struct ledger *l, char *err)
{
    int k, s;

    for (k = 0; k < LK_COUNT; k++)
        for (s = 0; s < 2 && ledger_sql[k][s]; s++)
            if (ledger_prepare(l, ledger_sql[k][s], &l->stmt[k][s], err) < 0)
                return -1;
    for (k = 0; k < CT_N; k++)
        for (s = 0; s < 1 + chain_tables[k].is_mutable; s++) {
            char sql[512];
            snprintf(sql, sizeof(sql), "SELECT %s FROM %s WHERE %s = ?1", chain_tables[k].cols,
                     chain_tables[k].name, s ? "id" : "rowid");
            if (ledger_prepare(l, sql, &l->row[k][s], err) < 0)
                return -1;
        }
    if (ledger_prepare(l,
                       "INSERT INTO chain (seq, tbl, row_id, ts_ms, digest, hash) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                       &l->link, err) < 0)
        return -1;
    for (k = 0; k < LT_COUNT; k++)
        if (ledger_prepare(l, ledger_txn_sql[k], &l->txn[k], err) < 0)
            return -1;
    return 0;
}

void ledger_writer_finalize(struct ledger *l)
{
    int k, s;

    for (k = 0; k < LK_COUNT; k++)
        for (s = 0; s < 2; s++)
            sqlite3_finalize(l->stmt[k][s]);
    sqlite3_finalize(l->link);
    for (k = 0; k < LT_COUNT; k++)
        sqlite3_finalize(l->txn[k]);
    for (k = 0; k < CT_N; k++)
        for (s = 0; s < 2; s++)
            sqlite3_finalize(l->row[k][s]);
}

int ledger_chain_fresh(struct ledger *l)
{
    int rc = SQLITE_OK;

    if (l->chain_stale && (rc = chain_head(l->wdb, &l->chain_seq, l->chain_prev)) == SQLITE_OK)
        l->chain_stale = 0;
    return rc;
}
/* Appends the link of a row of tbl (or a prune link); on the writer
 * thread, inside its transaction. SQLite's result code. */
int ledger_link(struct ledger *l, const char *tbl, int64_t row_id, int64_t ts_ms,
                const unsigned char digest[SHA256_LEN])
{
    unsigned char hash[SHA256_LEN];
    int64_t seq = l->chain_seq + 1;
    int rc;

    chain_link_hash(l->chain_prev, seq, tbl, row_id, ts_ms, digest, hash);
    sqlite3_bind_int64(l->link, 1, seq);
    sqlite3_bind_text(l->link, 2, tbl, -1, SQLITE_STATIC);
    sqlite3_bind_int64(l->link, 3, row_id);
    sqlite3_bind_int64(l->link, 4, ts_ms);
    sqlite3_bind_blob(l->link, 5, digest, SHA256_LEN, SQLITE_STATIC);
    sqlite3_bind_blob(l->link, 6, hash, SHA256_LEN, SQLITE_STATIC);
    rc = sqlite3_step(l->link);
    sqlite3_reset(l->link);
    if (rc != SQLITE_DONE)
        return rc;
    l->chain_seq = seq;
    memcpy(l->chain_prev, hash, SHA256_LEN);
    return SQLITE_OK;
}

/* A row to link once the op's statements are done: a link in between
 * would change what changes() tells the op's second statement. */
struct ledger_pending_link {
    enum chain_table t;
    int64_t row_id, ts_ms;
    unsigned char digest[SHA256_LEN];
};

/* Runs op's statements and links the rows they wrote; returns the first
 * SQLite error code, or SQLITE_OK. */
int ledger_exec(struct ledger *l, const struct ledger_op *op)
{
    struct ledger_pending_link links[2];
    int s, i, n_links = 0, rc = SQLITE_OK;

    for (s = 0; s < 2 && rc == SQLITE_OK; s++) {
        sqlite3_stmt *st = l->stmt[op->kind][s];
        int nparam;
        if (st == NULL)
            break;
        nparam = sqlite3_bind_parameter_count(st);
        for (i = 0; i < op->n && i < nparam; i++) {
            const struct ledger_arg *a = &op->a[i];
            if (a->is_text && a->s)
                sqlite3_bind_text(st, i + 1, a->s, -1, SQLITE_STATIC);
            else if (a->is_text)
                sqlite3_bind_null(st, i + 1);
            else
                sqlite3_bind_int64(st, i + 1, a->i);
        }
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
        /* The row written, read back as the chain hashes it. A read leaves
         * changes() as it was for the op's next statement. */
        if (rc == SQLITE_OK && sqlite3_changes(l->wdb) > 0) {
            enum chain_table t = ledger_tbl[op->kind][s];
            int by_id = ledger_by_id[op->kind][s];
            sqlite3_stmt *rd = l->row[t][by_id];
            struct ledger_pending_link *k = &links[n_links];
            if (by_id)
                sqlite3_bind_text(rd, 1, op->a[0].s, -1, SQLITE_STATIC);
            else
                sqlite3_bind_int64(rd, 1, sqlite3_last_insert_rowid(l->wdb));
            rc = sqlite3_step(rd);
            if (rc == SQLITE_ROW) {
                k->t = t;
                k->row_id = sqlite3_column_int64(rd, 0);
                k->ts_ms = sqlite3_column_int64(rd, chain_tables[t].ts_col);
                chain_row_digest(t, rd, 0, k->digest);
                n_links++;
                rc = SQLITE_OK;
            } else if (rc == SQLITE_DONE) {
                rc = SQLITE_INTERNAL; /* written, yet not there */
            }
            sqlite3_reset(rd);
            sqlite3_clear_bindings(rd);
        }
        if (s == 0 && rc == SQLITE_OK && op->moved)
            *op->moved = sqlite3_changes(l->wdb) > 0;
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    for (i = 0; i < n_links && rc == SQLITE_OK; i++)
        rc = ledger_link(l, chain_tables[links[i].t].name, links[i].row_id, links[i].ts_ms, links[i].digest);
    return rc;
}

/* Runs one of the transaction's statements; SQLite's result code. Each
 * group (most often one request row) opens and releases a savepoint;
 * through sqlite3_exec each parsed its SQL again, an eighth of the
 * writer's CPU in a flood of distinct-phone verifies. */
static int ledger_txn(struct ledger *l, enum ledger_txn t)
{
    int rc = sqlite3_step(l->txn[t]);

    sqlite3_reset(l->txn[t]);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Commits one batch (whole groups); returns 0, or -1 when it was rolled
 * back. A group whose statement breaks a constraint is rolled back to its
 * savepoint and reported failed; the rest of the batch still commits. Sets
 * each waiter's result; the caller marks them done after the commit. why
 * (cap bytes) gets SQLite's word on the first failure. */
static int ledger_commit(struct ledger *l, struct ledger_op *batch, uint64_t *bad_groups, char *why,
                         size_t cap)
{
    struct ledger_op *op;
    int rc = ledger_txn(l, LT_BEGIN), group_failed = 0;
    int64_t grp_seq = 0;
    unsigned char grp_prev[SHA256_LEN];

    if (rc == SQLITE_OK)
        rc = ledger_chain_fresh(l);
    for (op = batch; op && rc == SQLITE_OK; op = op->next) {
        if (op->first) {
            group_failed = 0;
            rc = ledger_txn(l, LT_SAVEPOINT);
            grp_seq = l->chain_seq;
            memcpy(grp_prev, l->chain_prev, SHA256_LEN);
        }
        if (rc == SQLITE_OK && !group_failed) {
            rc = ledger_exec(l, op);
            if ((rc & 0xff) == SQLITE_CONSTRAINT) {
                if (*bad_groups == 0)
                    snprintf(why, cap, "%s", sqlite3_errmsg(l->wdb));
                group_failed = 1;
                rc = SQLITE_OK;
            }
        }
        if (rc == SQLITE_OK && op->last) {
            if (group_failed) {
                (*bad_groups)++;
                rc = ledger_txn(l, LT_ROLLBACK_TO);
                /* Its links went with it. */
                l->chain_seq = grp_seq;
                memcpy(l->chain_prev, grp_prev, SHA256_LEN);
            }
            if (rc == SQLITE_OK)
                rc = ledger_txn(l, LT_RELEASE);
            if (op->wait)
                op->wait->rc = group_failed ? OTP_EIO : OTP_OK;
        }
    }
    if (rc == SQLITE_OK)
        rc = ledger_txn(l, LT_COMMIT);
    if (rc != SQLITE_OK) {
        snprintf(why, cap, "%s", sqlite3_errmsg(l->wdb));
        sqlite3_exec(l->wdb, "ROLLBACK", NULL, NULL, NULL);
        l->chain_stale = 1;
        return -1;
    }
    return 0;
}

/* A commit that failed, or groups it refused, said in the log: a row
 * submitted without waiting (a send, a state change) has no one else to
 * tell. SQLite's message names the failure, never a row's values. */
static void ledger_log_failure(int failed, uint64_t rows, uint64_t bad_groups, const char *why)
{
    if (failed)
        log_event(LOG_ERROR, "ledger.failed", LOG_FIELDS(LOG_INT("rows", rows), LOG_STR("reason", why)),
                  "ledger: a commit failed, %llu rows not recorded: %s", (unsigned long long)rows, why);
    else if (bad_groups > 0)
        log_event(
            LOG_ERROR, "ledger.failed", LOG_FIELDS(LOG_INT("groups", bad_groups), LOG_STR("reason", why)),
            "ledger: %llu groups of rows refused, not recorded: %s", (unsigned long long)bad_groups, why);
}


/* With no work queued: commits the counted rows of past seconds and prunes
 * when due, else sleeps until one is due or work arrives. Under mu; may
 * drop it. Returns 1 when it did something (look for work again). */
static int ledger_idle(struct ledger *l)
{
    int64_t now_ms = clock_wall_ms(), wake_ms = now_ms + 1000;
    struct timespec ts;

    if (ledger_agg_flush_locked(l, now_ms / 1000) > 0)
        return 1;
    if (l->retention_ms > 0 && now_ms >= l->next_prune_ms) {
        int64_t every_ms = l->retention_ms < LEDGER_PRUNE_EVERY_MS ? l->retention_ms : LEDGER_PRUNE_EVERY_MS;
        l->next_prune_ms = now_ms + every_ms;
        pthread_mutex_unlock(&l->mu);
        ledger_prune(l, now_ms, now_ms - l->retention_ms);
        pthread_mutex_lock(&l->mu);
        return 1;
    }
    if (l->agg != NULL)
        wake_ms = (now_ms / 1000 + 1) * 1000;
    if (l->retention_ms > 0 && l->next_prune_ms < wake_ms)
        wake_ms = l->next_prune_ms;
    ts.tv_sec = (time_t)(wake_ms / 1000);
    ts.tv_nsec = (long)(wake_ms % 1000) * 1000000L;
    pthread_cond_timedwait(&l->wake, &l->mu, &ts);
    return 0;
}

void *ledger_writer_main(void *arg)
{
    struct ledger *l = arg;

    pthread_mutex_lock(&l->mu);
    for (;;) {
        struct ledger_op *batch, *op, *last;
        uint64_t n, bad_groups = 0, t0_ns;
        char why[256] = "";
        int failed;
        /* Past seconds' counted rows, even while work never stops coming. */
        ledger_agg_flush_locked(l, clock_wall_ms() / 1000);
        while (l->head == NULL && !l->stop)
            ledger_idle(l);
        if (l->head == NULL && ledger_agg_flush_locked(l, INT64_MAX) > 0)
            continue; /* stopping: the counted rows still commit */
        if (l->head == NULL)
            break;
        /* Whole groups only: a group is queued at once, so its end is here. */
        batch = last = l->head;
        for (n = 1; last->next && (n < LEDGER_BATCH_MAX || !last->last); n++)
            last = last->next;
        l->head = last->next;
        if (l->head == NULL)
            l->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&l->mu);

        t0_ns = clock_mono_ns();
        failed = ledger_commit(l, batch, &bad_groups, why, sizeof(why)) < 0;
        metrics_observe_us(METRICS_H_LEDGER_COMMIT, (clock_mono_ns() - t0_ns) / 1000);
        ledger_log_failure(failed, n, bad_groups, why);

        pthread_mutex_lock(&l->mu);
        l->stats.queue_depth -= n;
        l->stats.commits++;
        l->stats.rows += n;
        l->stats.failures += bad_groups + (failed ? 1 : 0);
        l->last_commit_ok = !failed;
        for (op = batch; op; op = op->next)
            if (op->wait) {
                if (failed)
                    op->wait->rc = OTP_EIO;
                op->wait->done = 1;
            }
        pthread_cond_broadcast(&l->done);
        pthread_mutex_unlock(&l->mu);
        while ((op = batch) != NULL) {
            batch = op->next;
            ledger_op_free(op);
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}
