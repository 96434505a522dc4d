/*
 * history: an operator's reads, a few per incident, over ledgers of up to
 * millions of rows. Each ledger gets one statement that selects its events
 * already in order (SQLite sorts; with a phone the requests_phone and
 * message indexes narrow it), and the files are merged row by row as the
 * caller takes them, so nothing grows with the ledgers' size but SQLite's
 * own sorter.
 */
#include "history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "ledger_state.h"
#include "ro.h"

/* Ledgers older than this lack columns read here (requests.purpose is
 * schema 2, requests.count schema 3). otpd migrates a ledger when it opens
 * it. Newer schemas only add, so they read. */
#define HISTORY_SCHEMA_MIN 3

/* The columns of the events query, in its SELECT order (HISTORY_SQL). */
enum history_col {
    HC_TS,
    HC_RANK, /* the order of ties within one moment, below */
    HC_ROW,
    HC_KIND,
    HC_REQUEST,
    HC_STATE,
    HC_PHONE,
    HC_API_KEY,
    HC_PURPOSE,
    HC_DEVICE,
    HC_IP,
    HC_RULE,
    HC_SHADOW,
    HC_HTTP,
    HC_COUNT,
    HC_VID,
    HC_MID,
    HC_PROVIDER,
    HC_PROVIDER_ID,
    HC_ATTEMPT,
    HC_LATENCY,
    HC_COST,
    HC_WRONG,
    HC_DETAIL,
    HC_N
};

/*
 * Parameters: ?1 the phone or NULL, ?2 since (inclusive), ?3 until
 * (exclusive). temp.history_ids holds the ids of the phone's messages in
 * every ledger read (empty without a phone). The fourth column is enum
 * history_kind's value. The second is the rank that orders ties within one
 * millisecond as otpd writes them (so a tie reads as a 1 ms gap would):
 * an issue starts the verification (0) and queues the message (1), a
 * verify ends the verification (2), then the request's row is written (3);
 * the pacer claims the message (sending, 4), calls the provider (5) and
 * records the outcome (6: sent, failed, a retry's queued, which carries
 * its reason, a report, an expiry).
 */
/* The SQL keeps its own line breaks. */
/* clang-format off */
#define HISTORY_MSG_PHONE(alias) \
    "COALESCE(m.phone, CASE WHEN " alias ".message_id IN temp.history_ids THEN ?1 END)"
#define HISTORY_MSG_WHERE(alias) \
    "(?1 IS NULL OR m.phone = ?1 OR " alias ".message_id IN temp.history_ids) AND " \
    alias ".ts_ms >= ?2 AND " alias ".ts_ms < ?3"
static const char history_sql[] =
    "SELECT r.ts_ms, 3, r.id, 0, r.kind, r.decision, r.phone, r.api_key, r.purpose, r.device_id, r.client_ip, "
    "r.rule, r.shadow, r.http_status, r.count, r.verification_id, r.message_id, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL "
    "FROM requests r WHERE (?1 IS NULL OR r.phone = ?1) AND r.ts_ms >= ?2 AND r.ts_ms < ?3 "
    "UNION ALL "
    "SELECT v.created_ms, 0, v.rowid, 1, NULL, 'started', v.phone, v.api_key, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, v.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
    "FROM verifications v WHERE (?1 IS NULL OR v.phone = ?1) AND v.created_ms >= ?2 AND v.created_ms < ?3 "
    "UNION ALL "
    "SELECT v.ended_ms, 2, v.rowid, 1, NULL, v.status, v.phone, v.api_key, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, v.id, NULL, NULL, NULL, NULL, NULL, NULL, v.wrong, NULL "
    "FROM verifications v WHERE v.ended_ms IS NOT NULL AND (?1 IS NULL OR v.phone = ?1) "
    "AND v.ended_ms >= ?2 AND v.ended_ms < ?3 "
    "UNION ALL "
    "SELECT e.ts_ms, CASE WHEN e.state = '" LEDGER_QUEUED "' AND e.detail IS NULL THEN 1 "
    "WHEN e.state = '" LEDGER_SENDING "' THEN 4 ELSE 6 END, e.id, 2, NULL, e.state, "
    HISTORY_MSG_PHONE("e") ", m.api_key, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, m.verification_id, e.message_id, NULL, NULL, NULL, NULL, NULL, NULL, e.detail "
    "FROM message_events e LEFT JOIN messages m ON m.id = e.message_id "
    "WHERE " HISTORY_MSG_WHERE("e") " "
    "UNION ALL "
    "SELECT s.ts_ms, 5, s.id, 3, NULL, s.outcome, "
    HISTORY_MSG_PHONE("s") ", m.api_key, NULL, NULL, NULL, "
    "NULL, NULL, s.http_status, NULL, m.verification_id, s.message_id, s.provider, s.provider_id, s.attempt, "
    "s.latency_ms, s.cost_minor, NULL, s.error "
    "FROM sends s LEFT JOIN messages m ON m.id = s.message_id "
    "WHERE " HISTORY_MSG_WHERE("s") " "
    "ORDER BY 1, 2, 3";
/* clang-format on */

/* One ledger file. */
struct history_src {
    const char *path; /* borrowed from history_open's caller */
    sqlite3 *db;
    sqlite3_stmt *st; /* the query in progress, or NULL */
    int has_row;      /* st stands on a row not yet returned */
};

struct history {
    int n;
    struct history_src *src;
    int last; /* the source whose row history_next returned last, or -1 */
};

static const char *const history_kind_names[] = {
    [HISTORY_REQUEST] = "request",
    [HISTORY_VERIFICATION] = "verification",
    [HISTORY_MESSAGE] = "message",
    [HISTORY_SEND] = "send",
};

const char *history_kind_name(enum history_kind k)
{
    return (unsigned)k < sizeof(history_kind_names) / sizeof(history_kind_names[0]) ? history_kind_names[k]
                                                                                    : "unknown";
}

/* Opens s->path read-only (ro.h) and checks it is a ledger otpctl reads. */
static enum otp_rc history_src_open(struct history_src *s, char *err)
{
    enum otp_rc rc;
    int version;

    if ((rc = ro_open(s->path, &s->db, &version, err)) != OTP_OK)
        return rc;
    if (version < HISTORY_SCHEMA_MIN) {
        snprintf(err, OTP_ERR_LEN,
                 "%s: ledger schema %d is older than otpctl reads (%d); otpd migrates it on open", s->path,
                 version, HISTORY_SCHEMA_MIN);
        return OTP_EINVAL;
    }
    /* The only table this connection writes is its own temporary one, in
     * SQLite's temp storage (TMPDIR), never beside the ledger. Temp storage
     * stays on disk: the query's sorter spills there, so memory stays flat
     * on a big ledger (a sort in memory took 500 MB for 3 million rows). */
    if (sqlite3_exec(s->db, "CREATE TEMP TABLE history_ids (id TEXT PRIMARY KEY)", NULL, NULL, NULL) !=
        SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "%s: %s", s->path, sqlite3_errmsg(s->db));
        return OTP_EIO;
    }
    return OTP_OK;
}

enum otp_rc history_open(const char *const *paths, int n, struct history **out, char *err)
{
    struct history *h = calloc(1, sizeof(*h));
    enum otp_rc rc = OTP_ENOMEM;
    int i;

    *out = NULL;
    if (h == NULL || n < 1 || (h->src = calloc((size_t)n, sizeof(*h->src))) == NULL) {
        snprintf(err, OTP_ERR_LEN, n < 1 ? "no ledger to read" : "out of memory");
        rc = n < 1 ? OTP_EINVAL : OTP_ENOMEM;
        goto fail;
    }
    h->n = n;
    h->last = -1;
    for (i = 0; i < n; i++) {
        h->src[i].path = paths[i];
        if ((rc = history_src_open(&h->src[i], err)) != OTP_OK)
            goto fail;
    }
    *out = h;
    return OTP_OK;
fail:
    history_close(h);
    return rc;
}

void history_close(struct history *h)
{
    int i;

    if (h == NULL)
        return;
    for (i = 0; h->src && i < h->n; i++) {
        sqlite3_finalize(h->src[i].st);
        sqlite3_close(h->src[i].db);
    }
    free(h->src);
    free(h);
}

/* Steps s's query; OTP_EIO with the file in err when the read fails. */
static enum otp_rc history_step(struct history_src *s, char *err)
{
    int step = sqlite3_step(s->st);

    s->has_row = step == SQLITE_ROW;
    if (step == SQLITE_ROW || step == SQLITE_DONE)
        return OTP_OK;
    snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", s->path, sqlite3_errmsg(s->db));
    return OTP_EIO;
}

static enum otp_rc history_fail(struct history_src *s, char *err)
{
    snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", s->path, sqlite3_errmsg(s->db));
    return OTP_EIO;
}

/* Copies the ids of phone's messages in ledger from into every ledger's
 * temp.history_ids. */
static enum otp_rc history_collect_ids(struct history *h, int from, const char *phone, char *err)
{
    struct history_src *s = &h->src[from];
    sqlite3_stmt *sel = NULL, **ins = NULL;
    enum otp_rc rc = OTP_OK;
    int i, step;

    if ((ins = calloc((size_t)h->n, sizeof(*ins))) == NULL) {
        snprintf(err, OTP_ERR_LEN, "out of memory");
        return OTP_ENOMEM;
    }
    for (i = 0; i < h->n; i++)
        if (sqlite3_prepare_v2(h->src[i].db, "INSERT OR IGNORE INTO temp.history_ids (id) VALUES (?1)", -1,
                               &ins[i], NULL) != SQLITE_OK) {
            rc = history_fail(&h->src[i], err);
            goto out;
        }
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM messages WHERE phone = ?1", -1, &sel, NULL) != SQLITE_OK) {
        rc = history_fail(s, err);
        goto out;
    }
    sqlite3_bind_text(sel, 1, phone, -1, SQLITE_STATIC);
    while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
        for (i = 0; i < h->n; i++) {
            sqlite3_bind_text(ins[i], 1, (const char *)sqlite3_column_text(sel, 0), -1, SQLITE_TRANSIENT);
            if (sqlite3_step(ins[i]) != SQLITE_DONE) {
                rc = history_fail(&h->src[i], err);
                goto out;
            }
            sqlite3_reset(ins[i]);
        }
    }
    if (step != SQLITE_DONE)
        rc = history_fail(s, err);
out:
    sqlite3_finalize(sel);
    for (i = 0; i < h->n; i++)
        sqlite3_finalize(ins[i]);
    free(ins);
    return rc;
}

enum otp_rc history_query(struct history *h, const struct history_filter *f, char *err)
{
    enum otp_rc rc;
    int i;

    h->last = -1;
    for (i = 0; i < h->n; i++) {
        struct history_src *s = &h->src[i];
        sqlite3_finalize(s->st);
        s->st = NULL;
        s->has_row = 0;
        if (sqlite3_exec(s->db, "DELETE FROM temp.history_ids", NULL, NULL, NULL) != SQLITE_OK)
            return history_fail(s, err);
    }
    for (i = 0; f->phone && i < h->n; i++)
        if ((rc = history_collect_ids(h, i, f->phone, err)) != OTP_OK)
            return rc;
    for (i = 0; i < h->n; i++) {
        struct history_src *s = &h->src[i];
        if (sqlite3_prepare_v2(s->db, history_sql, -1, &s->st, NULL) != SQLITE_OK) {
            /* The schema version said ledger, but a table or column is missing. */
            snprintf(err, OTP_ERR_LEN, "%s: not a ledger (%s)", s->path, sqlite3_errmsg(s->db));
            return OTP_EINVAL;
        }
        if (f->phone)
            sqlite3_bind_text(s->st, 1, f->phone, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(s->st, 1);
        sqlite3_bind_int64(s->st, 2, f->since_ms);
        sqlite3_bind_int64(s->st, 3, f->until_ms);
        if ((rc = history_step(s, err)) != OTP_OK)
            return rc;
    }
    return OTP_OK;
}

/* 1 when source a's row comes before source b's (a < b as indexes). */
static int history_before(const struct history_src *a, const struct history_src *b)
{
    int64_t ta = sqlite3_column_int64(a->st, HC_TS), tb = sqlite3_column_int64(b->st, HC_TS);

    if (ta != tb)
        return ta < tb;
    /* Same moment: by rank, then the earlier ledger. */
    return sqlite3_column_int(a->st, HC_RANK) < sqlite3_column_int(b->st, HC_RANK);
}

static const char *col_text(sqlite3_stmt *st, int col)
{
    return (const char *)sqlite3_column_text(st, col);
}

static int64_t col_int(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, col);
}

enum otp_rc history_next(struct history *h, struct history_event *ev, int *got, char *err)
{
    sqlite3_stmt *st;
    enum otp_rc rc;
    int i, best = -1;

    *got = 0;
    /* The row returned last is read: only now may its strings go. */
    if (h->last >= 0 && (rc = history_step(&h->src[h->last], err)) != OTP_OK)
        return rc;
    h->last = -1;
    for (i = 0; i < h->n; i++)
        if (h->src[i].has_row && (best < 0 || history_before(&h->src[i], &h->src[best])))
            best = i;
    if (best < 0)
        return OTP_OK;
    st = h->src[best].st;
    *ev = (struct history_event){
        .ts_ms = sqlite3_column_int64(st, HC_TS),
        .ledger = best,
        .kind = (enum history_kind)sqlite3_column_int(st, HC_KIND),
        .row_id = sqlite3_column_int64(st, HC_ROW),
        .request = col_text(st, HC_REQUEST),
        .state = col_text(st, HC_STATE),
        .phone = col_text(st, HC_PHONE),
        .api_key = col_text(st, HC_API_KEY),
        .purpose = col_text(st, HC_PURPOSE),
        .device_id = col_text(st, HC_DEVICE),
        .client_ip = col_text(st, HC_IP),
        .rule = col_text(st, HC_RULE),
        .shadow = col_text(st, HC_SHADOW),
        .http_status = col_int(st, HC_HTTP),
        .count = col_int(st, HC_COUNT),
        .verification_id = col_text(st, HC_VID),
        .message_id = col_text(st, HC_MID),
        .provider = col_text(st, HC_PROVIDER),
        .provider_id = col_text(st, HC_PROVIDER_ID),
        .attempt = col_int(st, HC_ATTEMPT),
        .latency_ms = col_int(st, HC_LATENCY),
        .cost_minor = col_int(st, HC_COST),
        .wrong = col_int(st, HC_WRONG),
        .detail = col_text(st, HC_DETAIL),
    };
    h->last = best;
    *got = 1;
    return OTP_OK;
}

enum otp_rc history_recent(const char *path, const char *table, const char *phone, int n,
                           void (*fn)(void *ctx, int ncols, const char *const *names, const char *const *values),
                           void *ctx, char *err)
{
    static const char *const tables[] = {"requests",       "messages", "sends", "verifications",
                                         "message_events", "admin_actions", NULL};
    const char *names[32], *values[32];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    enum otp_rc rc;
    char sql[256];
    int i, cols, step, version, has_phone;

    for (i = 0; tables[i] && strcmp(tables[i], table) != 0; i++)
        ;
    if (tables[i] == NULL) {
        snprintf(err, OTP_ERR_LEN, "no ledger table %s", table);
        return OTP_EINVAL;
    }
    if ((rc = ro_open(path, &db, &version, err)) != OTP_OK)
        return rc;
    has_phone = strcmp(table, "requests") == 0 || strcmp(table, "messages") == 0 ||
                strcmp(table, "verifications") == 0;
    snprintf(sql, sizeof(sql), "SELECT * FROM %s %s ORDER BY rowid DESC LIMIT ?2", table,
             phone && has_phone ? "WHERE phone = ?1" : "");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "%s: not a ledger (%s)", path, sqlite3_errmsg(db));
        rc = OTP_EINVAL;
        goto out;
    }
    if (phone && has_phone)
        sqlite3_bind_text(st, 1, phone, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, n);
    cols = sqlite3_column_count(st) < 32 ? sqlite3_column_count(st) : 32;
    for (i = 0; i < cols; i++)
        names[i] = sqlite3_column_name(st, i);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        for (i = 0; i < cols; i++)
            values[i] = (const char *)sqlite3_column_text(st, i);
        fn(ctx, cols, names, values);
    }
    if (step != SQLITE_DONE) {
        snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", path, sqlite3_errmsg(db));
        rc = OTP_EIO;
    }
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}
