/*
 * ledger: opening a ledger (its migrations, the writer's start), closing
 * it, and the API, which turns each call into ops for the writer
 * (ledger_queue.c). About three submissions per accepted message and one
 * per refusal, so thousands a second at peak, each a few string copies
 * and one lock; the readers' two reads run at start-up and on the
 * housekeeping tick.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ledger_int.h"
#include "schema.h"

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
        (l->rdb = ledger_db(path, err)) == NULL || ledger_writer_prepare(l, err) < 0)
        goto fail;
    if (pthread_create(&l->writer, NULL, ledger_writer_main, l) != 0) {
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
    if (l == NULL)
        return;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->wake);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->writer, NULL);
    }
    ledger_writer_finalize(l);
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
    struct ledger_op *op = ledger_op_new(LK_REQUEST);

    if (op != NULL) {
        ledger_op_int(op, r->ts_ms);
        ledger_op_text(op, r->kind);
        ledger_op_text(op, r->api_key);
        ledger_op_text(op, r->phone);
        ledger_op_text(op, r->device_id);
        ledger_op_text(op, r->client_ip);
        ledger_op_text(op, r->decision);
        ledger_op_text(op, r->rule);
        ledger_op_text(op, r->shadow);
        ledger_op_text(op, r->verification_id);
        ledger_op_text(op, r->message_id);
        ledger_op_int(op, r->http_status);
        ledger_op_text(op, r->purpose);
        ledger_op_int(op, 1);
    }
    return op;
}

static struct ledger_op *op_verification_new(const char *id, const char *phone, const char *api_key,
                                             int64_t created_ms, int64_t expires_ms)
{
    struct ledger_op *op = ledger_op_new(LK_VER_NEW);

    if (op != NULL) {
        ledger_op_text(op, id);
        ledger_op_text(op, phone);
        ledger_op_text(op, api_key);
        ledger_op_int(op, created_ms);
        ledger_op_int(op, expires_ms);
    }
    return op;
}

static struct ledger_op *op_message_new(const struct ledger_message *m)
{
    struct ledger_op *op = ledger_op_new(LK_MSG_NEW);

    if (op != NULL) {
        ledger_op_text(op, m->id);
        ledger_op_text(op, m->verification_id);
        ledger_op_text(op, m->api_key);
        ledger_op_text(op, m->phone);
        ledger_op_int(op, m->created_ms);
        ledger_op_int(op, m->expires_ms);
        ledger_op_int(op, m->price_minor);
        ledger_op_int(op, m->cost_ms);
        ledger_op_text(op, m->cost_caps);
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
    struct ledger_op *op = ledger_op_new(LK_VER_UPDATE);

    if (op != NULL) {
        ledger_op_text(op, id);
        ledger_op_text(op, status);
        ledger_op_int(op, wrong_delta);
        ledger_op_int(op, ts_ms);
    }
    return ledger_submit_one(l, op);
}

enum otp_rc ledger_message_state(struct ledger *l, const char *id, enum msg_state to, unsigned from,
                                 const char *provider_id, const char *detail, int attempts, int64_t ts_ms)
{
    if (!ledger_move_ok(to, from))
        return OTP_EINVAL;
    return ledger_submit_paced(l, ledger_op_move(id, to, from, provider_id, detail, attempts, ts_ms));
}

enum otp_rc ledger_message_report(struct ledger *l, const char *id, enum msg_state to, unsigned from,
                                  const char *detail, int64_t ts_ms, int *moved)
{
    struct ledger_op *op;

    *moved = 0;
    if (!ledger_move_ok(to, from))
        return OTP_EINVAL;
    op = ledger_op_move(id, to, from, NULL, detail, -1, ts_ms);
    if (op != NULL)
        op->moved = moved;
    return ledger_submit(l, &op, 1, 1, 1);
}

enum otp_rc ledger_send(struct ledger *l, const struct ledger_send *s)
{
    struct ledger_op *op = ledger_op_new(LK_SEND);

    if (op != NULL) {
        ledger_op_int(op, s->ts_ms);
        ledger_op_text(op, s->message_id);
        ledger_op_int(op, s->attempt);
        ledger_op_text(op, s->provider);
        if (s->http_status > 0)
            ledger_op_int(op, s->http_status);
        else
            ledger_op_text(op, NULL);
        ledger_op_int(op, s->latency_ms);
        ledger_op_text(op, s->outcome);
        ledger_op_text(op, s->provider_id);
        ledger_op_text(op, s->error);
        ledger_op_int(op, s->cost_minor);
    }
    return ledger_submit_paced(l, op);
}

enum otp_rc ledger_admin(struct ledger *l, const struct ledger_admin *r)
{
    struct ledger_op *op = ledger_op_new(LK_ADMIN);

    if (op != NULL) {
        ledger_op_int(op, r->ts_ms);
        ledger_op_text(op, r->admin);
        ledger_op_text(op, r->action);
        ledger_op_text(op, r->kind);
        ledger_op_text(op, r->row_id);
        ledger_op_text(op, r->body);
        ledger_op_text(op, r->note);
        if (r->expires_ms > 0)
            ledger_op_int(op, r->expires_ms);
        else
            ledger_op_text(op, NULL);
        ledger_op_int(op, r->result);
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
                              "attempts, price_minor, cost_ms, cost_caps FROM messages WHERE state IN "
                              LEDGER_UNFINISHED_SQL " AND legacy = 1 ORDER BY seq";
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
            .state = MSG_NONE,
            .created_ms = sqlite3_column_int64(st, 6),
            .expires_ms = sqlite3_column_int64(st, 7),
            .attempts = sqlite3_column_int(st, 8),
            .price_minor = sqlite3_column_int64(st, 9),
            .cost_ms = sqlite3_column_int64(st, 10),
            .cost_caps = (const char *)sqlite3_column_text(st, 11),
        };
        /* One of the query's own two words: it parses (else MSG_NONE stays). */
        msg_state_parse((const char *)sqlite3_column_text(st, 5), &m.state);
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
    static const char sql[] = "SELECT seq, id FROM messages WHERE state IN " LEDGER_UNFINISHED_SQL
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
