/*
 * ledger: about three writes per accepted message and one per refusal, so
 * thousands a second at peak. The writer takes every submission queued
 * since its last commit and commits them in one transaction: fsync cost is
 * shared by the whole batch, and a request waits at most one commit plus
 * the one in progress.
 */
#include "ledger.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "../base/clock.h"
#include "../base/fnv.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "chain.h"
#include "schema.h"

#define LEDGER_ARGS 14
/* A request row's count (the last of its arguments). */
#define LEDGER_COUNT_ARG 13
/* Distinct 4xx rows counted at once; one more flushes them. */
#define LEDGER_AGG_MAX 1024
/* Buckets of the counted rows' index: a power of two, twice the rows, so a
 * chain holds one row or two on average. */
#define LEDGER_AGG_BUCKETS 2048
/* Pruning runs this often at most (and at least once per retention). */
#define LEDGER_PRUNE_EVERY_MS (3600 * 1000)
#define LEDGER_BATCH_MAX 1024
/* Submissions waiting for the writer. Past this, submitters wait for a
 * commit: a stalled disk slows callers down instead of growing memory. */
#define LEDGER_QUEUE_MAX 65536

/* The transaction's own statements, prepared once (ledger_txn). */
enum ledger_txn { LT_BEGIN, LT_SAVEPOINT, LT_ROLLBACK_TO, LT_RELEASE, LT_COMMIT, LT_COUNT };
static const char *const ledger_txn_sql[LT_COUNT] = {
    [LT_BEGIN] = "BEGIN IMMEDIATE",
    [LT_SAVEPOINT] = "SAVEPOINT grp",
    [LT_ROLLBACK_TO] = "ROLLBACK TO grp",
    [LT_RELEASE] = "RELEASE grp",
    [LT_COMMIT] = "COMMIT",
};

enum ledger_kind { LK_REQUEST, LK_VER_NEW, LK_VER_UPDATE, LK_MSG_NEW, LK_MSG_STATE, LK_SEND, LK_ADMIN, LK_COUNT };

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
                    "VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6, ?5, ?7, ?8, ?9)",
                    "INSERT INTO message_events (message_id, ts_ms, state) VALUES (?1, ?5, 'queued')"},
    [LK_MSG_STATE] = {"UPDATE messages SET state = ?2, updated_ms = ?7, provider_id = COALESCE(?4, provider_id), "
                      "detail = COALESCE(?5, detail), attempts = CASE WHEN ?6 < 0 THEN attempts ELSE ?6 END "
                      "WHERE id = ?1 AND instr(',' || ?3 || ',', ',' || state || ',') > 0",
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

/* One bound value: text (NULL allowed) or integer. */
struct ledger_arg {
    int is_text;
    int64_t i;
    char *s;
};

/* Someone waiting for a group of submissions to be durable. */
struct ledger_wait {
    int done;       /* set by the writer, under ledger.mu */
    enum otp_rc rc; /* OTP_OK, or OTP_EIO when the group did not commit */
};

/* One statement's worth of work. Submissions are groups of one or more
 * ops: a group commits whole or not at all (a savepoint), and the writer
 * never splits a group across transactions. */
struct ledger_op {
    struct ledger_op *next;
    enum ledger_kind kind;
    int first, last;         /* the group's bounds */
    struct ledger_wait *wait; /* on the group's last op, or NULL */
    int64_t agg_s;            /* a counted 4xx row: its second */
    uint64_t hash;            /* a counted 4xx row: of everything but its time and count */
    struct ledger_op *agg_next; /* a counted 4xx row: the next in its index bucket */
    int *moved;               /* LK_MSG_STATE with a waiter: set to 1 when the message moved */
    int n;
    struct ledger_arg a[LEDGER_ARGS];
};

struct ledger {
    sqlite3 *wdb; /* the writer thread's */
    sqlite3 *rdb; /* readers', under rmu */
    pthread_mutex_t rmu;
    sqlite3_stmt *stmt[LK_COUNT][2];
    sqlite3_stmt *link; /* appends a chain link */
    sqlite3_stmt *txn[LT_COUNT]; /* ledger_txn_sql */
    sqlite3_stmt *row[CT_N][2]; /* reads a row back to link it: by rowid, by id (mutable tables) */
    /* The chain's head, the writer's alone: moved by each link, put back
     * when a group rolls back, read from the file again (chain_stale) at the
     * start and after a transaction failed. Reading it per transaction
     * instead cost a prepare each time: malloc churn and a fifth of the
     * writer's throughput. */
    int64_t chain_seq;
    unsigned char chain_prev[SHA256_LEN];
    int chain_stale;
    pthread_t writer;
    int started;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t wake;  /* the writer waits for work */
    pthread_cond_t done;  /* waiters and submitters wait for commits */
    struct ledger_op *head, *tail;
    /* 4xx request rows being counted (ledger_count), in arrival order: a
     * flood of refusals becomes one row per key, reason and second. */
    struct ledger_op *agg, *agg_tail; /* agg_tail: the last of agg, when agg is not NULL */
    size_t n_agg;
    /* The same rows by bucket (ledger_agg_bucket), so counting a refusal
     * costs one short chain, not a walk of up to LEDGER_AGG_MAX rows
     * under mu: that walk was 92 % of ledger_request's samples in a
     * profile of distinct keys refused. The list above keeps the order. */
    struct ledger_op *agg_idx[LEDGER_AGG_BUCKETS];
    int64_t retention_ms; /* 0: keep everything */
    int64_t next_prune_ms;
    int stop;
    int last_commit_ok; /* 0 after a transaction failed, until one commits */
    struct ledger_stats stats;
};

static void op_free(struct ledger_op *op)
{
    int i;

    for (i = 0; i < op->n; i++)
        free(op->a[i].s);
    free(op);
}

static void op_text(struct ledger_op *op, const char *s)
{
    struct ledger_arg *a = &op->a[op->n++];

    a->is_text = 1;
    if (s != NULL && (a->s = strdup(s)) == NULL)
        a->is_text = -1; /* out of memory: noticed in ledger_submit */
}

static void op_int(struct ledger_op *op, int64_t v)
{
    op->a[op->n].is_text = 0;
    op->a[op->n++].i = v;
}

static struct ledger_op *op_new(enum ledger_kind kind)
{
    struct ledger_op *op = calloc(1, sizeof(*op));

    if (op != NULL)
        op->kind = kind;
    return op;
}

static void ops_free(struct ledger_op **ops, int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (ops[i])
            op_free(ops[i]);
}

/* A message's move to state (ledger_message_state). */
static struct ledger_op *op_message_state(const char *id, const char *state, const char *from,
                                          const char *provider_id, const char *detail, int attempts,
                                          int64_t ts_ms)
{
    struct ledger_op *op = op_new(LK_MSG_STATE);

    if (op != NULL) {
        op_text(op, id);
        op_text(op, state);
        op_text(op, from);
        op_text(op, provider_id);
        op_text(op, detail);
        op_int(op, attempts);
        op_int(op, ts_ms);
    }
    return op;
}

/* Appends op (a group of one) to the writer's queue; under mu. */
static void ledger_enqueue_locked(struct ledger *l, struct ledger_op *op)
{
    op->next = NULL;
    if (l->tail)
        l->tail->next = op;
    else
        l->head = op;
    l->tail = op;
    l->stats.queue_depth++;
}

/* The index bucket of a counted row: its hash and its second, mixed
 * (Fibonacci hashing) so that the top bits depend on all of them. */
static size_t ledger_agg_bucket(uint64_t hash, int64_t agg_s)
{
    uint64_t h = (hash ^ (uint64_t)agg_s) * 11400714819323198485ULL;

    return (size_t)(h >> 53) & (LEDGER_AGG_BUCKETS - 1); /* 2^11 buckets */
}

/* Takes op out of the index; under mu. */
static void ledger_agg_unindex_locked(struct ledger *l, const struct ledger_op *op)
{
    struct ledger_op **pp = &l->agg_idx[ledger_agg_bucket(op->hash, op->agg_s)];

    while (*pp != NULL && *pp != op)
        pp = &(*pp)->agg_next;
    if (*pp != NULL)
        *pp = op->agg_next;
}

/* Moves the counted rows of seconds before before_s to the writer's queue,
 * in arrival order; under mu. Returns how many moved. */
static size_t ledger_agg_flush_locked(struct ledger *l, int64_t before_s)
{
    struct ledger_op **pp = &l->agg, *op, *kept = NULL;
    size_t moved = 0;

    while ((op = *pp) != NULL) {
        if (op->agg_s >= before_s) {
            kept = op;
            pp = &op->next;
            continue;
        }
        ledger_agg_unindex_locked(l, op);
        *pp = op->next;
        op->first = op->last = 1;
        ledger_enqueue_locked(l, op);
        l->n_agg--;
        moved++;
    }
    l->agg_tail = kept;
    if (moved > 0)
        pthread_cond_signal(&l->wake);
    return moved;
}

/* Of everything in a request row but its time (0) and count. */
static uint64_t op_agg_hash(const struct ledger_op *op)
{
    uint64_t h = FNV_BASIS;
    int i;

    for (i = 1; i < LEDGER_COUNT_ARG; i++) {
        const struct ledger_arg *a = &op->a[i];
        if (a->is_text)
            h = a->s ? fnv_add(h, a->s, strlen(a->s) + 1) : fnv_add(h, "\1", 1);
        else
            h = fnv_add(h, &a->i, sizeof(a->i));
    }
    return h;
}

static int op_agg_same(const struct ledger_op *x, const struct ledger_op *y)
{
    int i;

    if (x->agg_s != y->agg_s || x->hash != y->hash)
        return 0;
    for (i = 1; i < LEDGER_COUNT_ARG; i++) {
        const struct ledger_arg *a = &x->a[i], *b = &y->a[i];
        if (a->is_text != b->is_text || (!a->is_text && a->i != b->i) || (!a->s != !b->s) ||
            (a->s && strcmp(a->s, b->s) != 0))
            return 0;
    }
    return 1;
}

/*
 * A 4xx request row (taken): counted into the row of the same key,
 * decision and second, which the writer commits once that second is over
 * (or sooner, before a row that must follow it). No fsync per request and
 * no row per request, so a flood of refusals grows the ledger and its WAL
 * with its distinct keys, not its rate.
 */
static enum otp_rc ledger_count(struct ledger *l, struct ledger_op *op)
{
    struct ledger_op *a, **bucket;
    int i;

    if (op == NULL)
        return OTP_ENOMEM;
    for (i = 0; i < op->n; i++)
        if (op->a[i].is_text < 0) {
            op_free(op);
            return OTP_ENOMEM;
        }
    op->agg_s = op->a[0].i / 1000;
    op->hash = op_agg_hash(op);
    pthread_mutex_lock(&l->mu);
    /* As ledger_submit_one: a stalled disk slows a flood of distinct keys
     * down rather than growing the queue. */
    while (l->stats.queue_depth >= LEDGER_QUEUE_MAX && !l->stop)
        pthread_cond_wait(&l->done, &l->mu);
    if (l->stop) {
        pthread_mutex_unlock(&l->mu);
        op_free(op);
        return OTP_EIO;
    }
    bucket = &l->agg_idx[ledger_agg_bucket(op->hash, op->agg_s)];
    for (a = *bucket; a; a = a->agg_next)
        if (op_agg_same(a, op)) {
            a->a[LEDGER_COUNT_ARG].i++;
            pthread_mutex_unlock(&l->mu);
            op_free(op);
            return OTP_OK;
        }
    if (l->n_agg >= LEDGER_AGG_MAX)
        ledger_agg_flush_locked(l, INT64_MAX); /* the bucket too */
    op->next = NULL;
    if (l->agg != NULL)
        l->agg_tail->next = op;
    else
        l->agg = op;
    l->agg_tail = op;
    op->agg_next = *bucket;
    *bucket = op;
    l->n_agg++;
    pthread_mutex_unlock(&l->mu);
    return OTP_OK;
}

/*
 * Queues the group ops[0..n-1] for the writer, taking the ops. With wait,
 * blocks until the group's transaction is settled and returns its result.
 * A NULL op (or a failed string copy) means out of memory: nothing is
 * queued.
 */
static enum otp_rc ledger_submit(struct ledger *l, struct ledger_op **ops, int n, int wait, int may_block)
{
    struct ledger_wait w = {0, OTP_OK};
    int i, j;

    for (i = 0; i < n; i++) {
        int bad = ops[i] == NULL;
        for (j = 0; !bad && j < ops[i]->n; j++)
            bad = ops[i]->a[j].is_text < 0;
        if (bad) {
            ops_free(ops, n);
            return OTP_ENOMEM;
        }
    }
    ops[0]->first = 1;
    ops[n - 1]->last = 1;
    ops[n - 1]->wait = wait ? &w : NULL;
    pthread_mutex_lock(&l->mu);
    while (may_block && l->stats.queue_depth >= LEDGER_QUEUE_MAX && !l->stop)
        pthread_cond_wait(&l->done, &l->mu);
    if (l->stop) {
        /* ledger_close has begun: nothing would commit this any more. */
        pthread_mutex_unlock(&l->mu);
        ops_free(ops, n);
        return OTP_EIO;
    }
    /* Counted refusals go first, so request rows keep their order. */
    if (ops[0]->kind == LK_REQUEST || ops[0]->kind == LK_VER_NEW)
        ledger_agg_flush_locked(l, INT64_MAX);
    for (i = 0; i < n; i++) {
        if (l->tail)
            l->tail->next = ops[i];
        else
            l->head = ops[i];
        l->tail = ops[i];
    }
    l->stats.queue_depth += (uint64_t)n;
    pthread_cond_signal(&l->wake);
    while (wait && !w.done)
        pthread_cond_wait(&l->done, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return w.rc;
}

/* Request threads: they wait at the queue cap, so a flood of refusals
 * cannot outgrow a slow disk. */
static enum otp_rc ledger_submit_one(struct ledger *l, struct ledger_op *op)
{
    return ledger_submit(l, &op, 1, 0, 1);
}

/* The pacer thread: it never waits at the cap, since it drives the provider
 * calls in flight (a stalled pacer would time them out and pay twice); its
 * rows are bounded by the send rate anyway. */
static enum otp_rc ledger_submit_paced(struct ledger *l, struct ledger_op *op)
{
    return ledger_submit(l, &op, 1, 0, 0);
}

/* Appends the link of a row of tbl (or a prune link); on the writer
 * thread, inside its transaction. SQLite's result code. */
static int ledger_link(struct ledger *l, const char *tbl, int64_t row_id, int64_t ts_ms,
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
static int ledger_exec(struct ledger *l, const struct ledger_op *op)
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

    if (rc == SQLITE_OK && l->chain_stale && (rc = chain_head(l->wdb, &l->chain_seq, l->chain_prev)) == SQLITE_OK)
        l->chain_stale = 0;
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
             "SELECT %s, max(updated_ms, expires_ms + ?3) FROM messages WHERE state IN " CHAIN_UNFINISHED_SQL
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
    sqlite3_stmt *st = NULL;
    unsigned char base_hash[SHA256_LEN], marks_digest[SHA256_LEN];
    int64_t keep_from, base_seq, marks[CT_N], from_ms;
    int rc;

    if ((rc = chain_base(l->wdb, &base_seq, base_hash, marks, NULL)) != SQLITE_OK ||
        (rc = ledger_keep_from(l, &from_ms)) != SQLITE_OK ||
        (rc = ledger_keep_unfinished(l, from_ms, cutoff_ms)) != SQLITE_OK)
        return rc;
    chain_genesis(marks, marks_digest);
    keep_from = l->chain_seq + 1;
    /* The first link whose row may still be there. */
    if ((rc = sqlite3_prepare_v2(l->wdb, "SELECT min(seq) FROM chain WHERE ts_ms >= ?1 AND tbl <> 'prune'", -1, &st,
                                 NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, cutoff_ms);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int64(st, 0) < keep_from)
        keep_from = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_ROW)
        return rc;
    /* The new base: the link before keep_from, or the old base. */
    if (keep_from - 1 > base_seq) {
        if ((rc = sqlite3_prepare_v2(l->wdb, "SELECT hash FROM chain WHERE seq = ?1", -1, &st, NULL)) != SQLITE_OK)
            return rc;
        sqlite3_bind_int64(st, 1, keep_from - 1);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == SHA256_LEN) {
            memcpy(base_hash, sqlite3_column_blob(st, 0), SHA256_LEN);
            base_seq = keep_from - 1;
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
        sqlite3_bind_int64(st, 1, base_seq);
        sqlite3_bind_blob(st, 2, base_hash, SHA256_LEN, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        st = NULL;
        if (rc != SQLITE_DONE)
            return rc;
        if ((rc = sqlite3_prepare_v2(l->wdb, "DELETE FROM chain WHERE seq <= ?1", -1, &st, NULL)) !=
            SQLITE_OK)
            return rc;
        sqlite3_bind_int64(st, 1, base_seq);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return rc;
    }
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
             "SELECT seq, id, state FROM messages WHERE state IN " CHAIN_UNFINISHED_SQL
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
        op = op_message_state((const char *)sqlite3_column_text(st, 1), "expired", "queued,sending", NULL,
                              detail, -1, now_ms);
        sqlite3_reset(st);
        rc = op != NULL ? ledger_exec(l, op) : SQLITE_NOMEM;
        if (op != NULL)
            op_free(op);
        if (rc != SQLITE_OK)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Deletes what is older than the retention (cutoff_ms = now_ms minus it);
 * on the writer thread. Messages still queued or sending stay until they
 * end (ledger_prune_unfinished ends those no one can end any more). */
static void ledger_prune(struct ledger *l, int64_t now_ms, int64_t cutoff_ms)
{
    char sql[768];
    int rc;

    snprintf(
        sql, sizeof(sql),
        "DELETE FROM requests WHERE ts_ms < %1$lld; DELETE FROM sends WHERE ts_ms < %1$lld; "
        "DELETE FROM message_events WHERE ts_ms < %1$lld; DELETE FROM messages WHERE updated_ms < %1$lld "
        "AND state NOT IN " CHAIN_UNFINISHED_SQL "; DELETE FROM verifications WHERE expires_ms < %1$lld; "
        "DELETE FROM admin_actions WHERE ts_ms < %1$lld",
        (long long)cutoff_ms);
    rc = sqlite3_exec(l->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK && l->chain_stale &&
        (rc = chain_head(l->wdb, &l->chain_seq, l->chain_prev)) == SQLITE_OK)
        l->chain_stale = 0;
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

static void *ledger_writer(void *arg)
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
            op_free(op);
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static sqlite3 *ledger_db(const char *path, char *err)
{
    sqlite3 *db = NULL;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(db, 5000) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON",
                     NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "ledger %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* Applies the migrations the file has not seen, each in its transaction. */
static int ledger_migrate(sqlite3 *db, char *err)
{
    sqlite3_stmt *st = NULL;
    int version = 0, n = (int)(sizeof(ledger_migrations) / sizeof(ledger_migrations[0])), i;
    char *msg = NULL, pragma[64];

    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version > n) {
        snprintf(err, OTP_ERR_LEN, "ledger: schema version %d is newer than this otpd (%d)", version, n);
        return -1;
    }
    for (i = version; i < n; i++) {
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", i + 1);
        if (sqlite3_exec(db, "BEGIN", NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db, ledger_migrations[i], NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db, pragma, NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
            snprintf(err, OTP_ERR_LEN, "ledger: migration %d: %s", i + 1, msg ? msg : "failed");
            sqlite3_free(msg);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

struct ledger *ledger_open(const char *path, char *err)
{
    struct ledger *l = calloc(1, sizeof(*l));
    int k, s;

    if (l == NULL) {
        snprintf(err, OTP_ERR_LEN, "ledger: out of memory");
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->rmu, NULL);
    pthread_cond_init(&l->wake, NULL);
    pthread_cond_init(&l->done, NULL);
    l->chain_stale = 1;
    if ((l->wdb = ledger_db(path, err)) == NULL || ledger_migrate(l->wdb, err) < 0 ||
        (l->rdb = ledger_db(path, err)) == NULL)
        goto fail;
    for (k = 0; k < LK_COUNT; k++)
        for (s = 0; s < 2 && ledger_sql[k][s]; s++) {
            if (sqlite3_prepare_v3(l->wdb, ledger_sql[k][s], -1, SQLITE_PREPARE_PERSISTENT, &l->stmt[k][s], NULL) !=
                SQLITE_OK) {
                snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->wdb));
                goto fail;
            }
        }
    for (k = 0; k < CT_N; k++)
        for (s = 0; s < 1 + chain_tables[k].is_mutable; s++) {
            char sql[512];
            snprintf(sql, sizeof(sql), "SELECT %s FROM %s WHERE %s = ?1", chain_tables[k].cols, chain_tables[k].name,
                     s ? "id" : "rowid");
            if (sqlite3_prepare_v3(l->wdb, sql, -1, SQLITE_PREPARE_PERSISTENT, &l->row[k][s], NULL) != SQLITE_OK) {
                snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->wdb));
                goto fail;
            }
        }
    if (sqlite3_prepare_v3(l->wdb,
                           "INSERT INTO chain (seq, tbl, row_id, ts_ms, digest, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           -1, SQLITE_PREPARE_PERSISTENT, &l->link, NULL) != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->wdb));
        goto fail;
    }
    for (k = 0; k < LT_COUNT; k++)
        if (sqlite3_prepare_v3(l->wdb, ledger_txn_sql[k], -1, SQLITE_PREPARE_PERSISTENT, &l->txn[k], NULL) !=
            SQLITE_OK) {
            snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->wdb));
            goto fail;
        }
    if (pthread_create(&l->writer, NULL, ledger_writer, l) != 0) {
        snprintf(err, OTP_ERR_LEN, "ledger: cannot start the writer");
        goto fail;
    }
    l->started = 1;
    l->last_commit_ok = 1;
    return l;
fail:
    ledger_close(l);
    return NULL;
}

void ledger_close(struct ledger *l)
{
    int k, s;

    if (l == NULL)
        return;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->wake);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->writer, NULL);
    }
    for (k = 0; k < LK_COUNT; k++)
        for (s = 0; s < 2; s++)
            sqlite3_finalize(l->stmt[k][s]);
    sqlite3_finalize(l->link);
    for (k = 0; k < LT_COUNT; k++)
        sqlite3_finalize(l->txn[k]);
    for (k = 0; k < CT_N; k++)
        for (s = 0; s < 2; s++)
            sqlite3_finalize(l->row[k][s]);
    sqlite3_close(l->rdb);
    sqlite3_close(l->wdb);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->done);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->rmu);
    free(l);
}

static struct ledger_op *op_request(const struct ledger_request *r)
{
    struct ledger_op *op = op_new(LK_REQUEST);

    if (op != NULL) {
        op_int(op, r->ts_ms);
        op_text(op, r->kind);
        op_text(op, r->api_key);
        op_text(op, r->phone);
        op_text(op, r->device_id);
        op_text(op, r->client_ip);
        op_text(op, r->decision);
        op_text(op, r->rule);
        op_text(op, r->shadow);
        op_text(op, r->verification_id);
        op_text(op, r->message_id);
        op_int(op, r->http_status);
        op_text(op, r->purpose);
        op_int(op, 1);
    }
    return op;
}

static struct ledger_op *op_verification_new(const char *id, const char *phone, const char *api_key,
                                             int64_t created_ms, int64_t expires_ms)
{
    struct ledger_op *op = op_new(LK_VER_NEW);

    if (op != NULL) {
        op_text(op, id);
        op_text(op, phone);
        op_text(op, api_key);
        op_int(op, created_ms);
        op_int(op, expires_ms);
    }
    return op;
}

static struct ledger_op *op_message_new(const struct ledger_message *m)
{
    struct ledger_op *op = op_new(LK_MSG_NEW);

    if (op != NULL) {
        op_text(op, m->id);
        op_text(op, m->verification_id);
        op_text(op, m->api_key);
        op_text(op, m->phone);
        op_int(op, m->created_ms);
        op_int(op, m->expires_ms);
        op_int(op, m->price_minor);
        op_int(op, m->cost_ms);
        op_text(op, m->cost_caps);
    }
    return op;
}

enum otp_rc ledger_request(struct ledger *l, const struct ledger_request *r)
{
    if (r->http_status >= 400 && r->http_status < 500)
        return ledger_count(l, op_request(r));
    return ledger_submit_one(l, op_request(r));
}

void ledger_set_retention(struct ledger *l, int64_t retention_ms)
{
    pthread_mutex_lock(&l->mu);
    l->retention_ms = retention_ms > 0 ? retention_ms : 0;
    l->next_prune_ms = 0;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
}

enum otp_rc ledger_accept(struct ledger *l, const struct ledger_message *m, int64_t verification_expires_ms,
                          const struct ledger_request *r)
{
    struct ledger_op *ops[3];
    int n = 0;

    /* The verification row goes in every time (INSERT OR IGNORE): if the
     * group that should have created it failed, a resend creates it. */
    ops[n++] = op_verification_new(m->verification_id, m->phone, m->api_key, m->created_ms,
                                   verification_expires_ms);
    ops[n++] = op_message_new(m);
    ops[n++] = op_request(r);
    return ledger_submit(l, ops, n, 1, 1);
}

enum otp_rc ledger_verification_update(struct ledger *l, const char *id, const char *status, int wrong_delta,
                                       int64_t ts_ms)
{
    struct ledger_op *op = op_new(LK_VER_UPDATE);

    if (op != NULL) {
        op_text(op, id);
        op_text(op, status);
        op_int(op, wrong_delta);
        op_int(op, ts_ms);
    }
    return ledger_submit_one(l, op);
}

enum otp_rc ledger_message_state(struct ledger *l, const char *id, const char *state, const char *from,
                                 const char *provider_id, const char *detail, int attempts, int64_t ts_ms)
{
    return ledger_submit_paced(l, op_message_state(id, state, from, provider_id, detail, attempts, ts_ms));
}

enum otp_rc ledger_message_report(struct ledger *l, const char *id, const char *state, const char *from,
                                  const char *detail, int64_t ts_ms, int *moved)
{
    struct ledger_op *op = op_message_state(id, state, from, NULL, detail, -1, ts_ms);

    *moved = 0;
    if (op != NULL)
        op->moved = moved;
    return ledger_submit(l, &op, 1, 1, 1);
}

enum otp_rc ledger_send(struct ledger *l, const struct ledger_send *s)
{
    struct ledger_op *op = op_new(LK_SEND);

    if (op != NULL) {
        op_int(op, s->ts_ms);
        op_text(op, s->message_id);
        op_int(op, s->attempt);
        op_text(op, s->provider);
        if (s->http_status > 0)
            op_int(op, s->http_status);
        else
            op_text(op, NULL);
        op_int(op, s->latency_ms);
        op_text(op, s->outcome);
        op_text(op, s->provider_id);
        op_text(op, s->error);
        op_int(op, s->cost_minor);
    }
    return ledger_submit_paced(l, op);
}

enum otp_rc ledger_admin(struct ledger *l, const struct ledger_admin *r)
{
    struct ledger_op *op = op_new(LK_ADMIN);

    if (op != NULL) {
        op_int(op, r->ts_ms);
        op_text(op, r->admin);
        op_text(op, r->action);
        op_text(op, r->kind);
        op_text(op, r->row_id);
        op_text(op, r->body);
        op_text(op, r->note);
        if (r->expires_ms > 0)
            op_int(op, r->expires_ms);
        else
            op_text(op, NULL);
        op_int(op, r->result);
    }
    /* Rare, and the answer says it was done: wait until it is durable. */
    return ledger_submit(l, &op, 1, 1, 1);
}

int ledger_healthy(struct ledger *l)
{
    int ok;

    pthread_mutex_lock(&l->mu);
    ok = l->last_commit_ok;
    pthread_mutex_unlock(&l->mu);
    return ok;
}


enum otp_rc ledger_pending(struct ledger *l, void (*fn)(void *ctx, const struct ledger_message *m), void *ctx,
                           char *err)
{
    static const char sql[] = "SELECT seq, id, verification_id, api_key, phone, state, created_ms, expires_ms, "
                              "attempts, price_minor, cost_ms, cost_caps FROM messages "
                              "WHERE state IN ('queued', 'sending') AND legacy = 1 ORDER BY seq";
    sqlite3_stmt *st = NULL;
    enum otp_rc rc = OTP_OK;
    int step;

    pthread_mutex_lock(&l->rmu);
    if (sqlite3_prepare_v2(l->rdb, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->rdb));
        rc = OTP_EIO;
        goto out;
    }
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct ledger_message m = {
            .seq = sqlite3_column_int64(st, 0),
            .id = (const char *)sqlite3_column_text(st, 1),
            .verification_id = (const char *)sqlite3_column_text(st, 2),
            .api_key = (const char *)sqlite3_column_text(st, 3),
            .phone = (const char *)sqlite3_column_text(st, 4),
            .state = (const char *)sqlite3_column_text(st, 5),
            .created_ms = sqlite3_column_int64(st, 6),
            .expires_ms = sqlite3_column_int64(st, 7),
            .attempts = sqlite3_column_int(st, 8),
            .price_minor = sqlite3_column_int64(st, 9),
            .cost_ms = sqlite3_column_int64(st, 10),
            .cost_caps = (const char *)sqlite3_column_text(st, 11),
        };
        fn(ctx, &m);
    }
    if (step != SQLITE_DONE) {
        snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->rdb));
        rc = OTP_EIO;
    }
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&l->rmu);
    return rc;
}

enum otp_rc ledger_unfinished(struct ledger *l, int64_t before_ms, int64_t after_seq,
                              struct ledger_unfinished *out, int max, int *n, char *err)
{
    static const char sql[] = "SELECT seq, id FROM messages WHERE state IN " CHAIN_UNFINISHED_SQL
                              " AND seq > ?2 AND expires_ms < ?1 ORDER BY seq LIMIT ?3";
    sqlite3_stmt *st = NULL;
    enum otp_rc rc = OTP_OK;
    int step = SQLITE_DONE;

    *n = 0;
    pthread_mutex_lock(&l->rmu);
    if (sqlite3_prepare_v2(l->rdb, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, before_ms);
        sqlite3_bind_int64(st, 2, after_seq);
        sqlite3_bind_int(st, 3, max);
        while (*n < max && (step = sqlite3_step(st)) == SQLITE_ROW) {
            out[*n].seq = sqlite3_column_int64(st, 0);
            snprintf(out[*n].id, sizeof(out[*n].id), "%s", (const char *)sqlite3_column_text(st, 1));
            (*n)++;
        }
    }
    if (st == NULL || (step != SQLITE_DONE && step != SQLITE_ROW)) {
        snprintf(err, OTP_ERR_LEN, "ledger: %s", sqlite3_errmsg(l->rdb));
        rc = OTP_EIO;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&l->rmu);
    return rc;
}

void ledger_stats(struct ledger *l, struct ledger_stats *out)
{
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    pthread_mutex_unlock(&l->mu);
}

