/*
 * summary: a few grouped scans per ledger (requests by decision and rule,
 * sends by outcome, verifications by status), whatever its size; the
 * groups, not the rows, are held in memory. The groups by provider and
 * region join rows of several ledgers: those rows are copied to a private
 * temporary file first, and grouped there once all are read.
 */
#include "summary.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/phone.h"
#include "ledger_state.h"
#include "ro.h"

/* Schema 3 has requests.count; older ledgers are migrated by otpd. */
#define SUMMARY_SCHEMA_MIN 3

/* The verifications of every ledger read, by id: status 0 pending, 1
 * exhausted, 2 verified (the furthest a ledger saw wins). */
struct summary_merge {
    sqlite3 *db; /* a private temporary file ("" as its name) */
    sqlite3_stmt *put;
};

static const char *const summary_outcomes[3] = {"sent", "transient", "permanent"};

static char *summary_dup(const unsigned char *s)
{
    return strdup(s ? (const char *)s : "");
}

/* Adds count to the refusal kind/decision/rule; -1 out of memory. */
static int summary_refusal_add(struct summary *s, const unsigned char *kind, const unsigned char *decision,
                               const unsigned char *rule, int64_t count)
{
    const char *k = kind ? (const char *)kind : "", *d = decision ? (const char *)decision : "",
               *r = rule ? (const char *)rule : "";
    struct summary_refusal *grown, *x;
    size_t i;

    for (i = 0; i < s->n_refusals; i++) {
        x = &s->refusals[i];
        if (strcmp(x->kind, k) == 0 && strcmp(x->decision, d) == 0 && strcmp(x->rule, r) == 0) {
            x->count += count;
            return 0;
        }
    }
    if ((grown = realloc(s->refusals, (s->n_refusals + 1) * sizeof(*grown))) == NULL)
        return -1;
    s->refusals = grown;
    x = &s->refusals[s->n_refusals];
    x->kind = summary_dup(kind);
    x->decision = summary_dup(decision);
    x->rule = summary_dup(rule);
    x->count = count;
    if (!x->kind || !x->decision || !x->rule) {
        free(x->kind);
        free(x->decision);
        free(x->rule);
        return -1;
    }
    s->n_refusals++;
    return 0;
}

static int summary_requests(sqlite3 *db, struct summary *s, int64_t since_ms, int64_t until_ms)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = sqlite3_prepare_v2(db,
                                 "SELECT kind, decision, rule, sum(count) FROM requests "
                                 "WHERE ts_ms >= ?1 AND ts_ms < ?2 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
                                 -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, since_ms);
    sqlite3_bind_int64(st, 2, until_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *kind = sqlite3_column_text(st, 0), *decision = sqlite3_column_text(st, 1);
        int64_t n = sqlite3_column_int64(st, 3);
        int issue = kind && strcmp((const char *)kind, "issue") == 0;
        if (issue)
            s->issue_requests += n;
        else
            s->verify_requests += n;
        if (decision && strcmp((const char *)decision, issue ? "accepted" : "verified") == 0) {
            if (issue)
                s->accepted += n;
            else
                s->verified_requests += n;
            continue;
        }
        s->refused += n;
        if (summary_refusal_add(s, kind, decision, sqlite3_column_text(st, 2), n) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int summary_sends(sqlite3 *db, struct summary *s, int64_t since_ms, int64_t until_ms)
{
    sqlite3_stmt *st = NULL;
    int rc, i;

    if ((rc = sqlite3_prepare_v2(db,
                                 "SELECT outcome, count(*), COALESCE(sum(cost_minor), 0) FROM sends "
                                 "WHERE ts_ms >= ?1 AND ts_ms < ?2 GROUP BY 1",
                                 -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, since_ms);
    sqlite3_bind_int64(st, 2, until_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *o = (const char *)sqlite3_column_text(st, 0);
        for (i = 0; i < 3; i++)
            if (o && strcmp(o, summary_outcomes[i]) == 0)
                s->calls[i] += sqlite3_column_int64(st, 1);
        s->spend_minor += sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int summary_merge_open(struct summary *s)
{
    struct summary_merge *m;
    int rc;

    if (s->merge != NULL)
        return SQLITE_OK;
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return SQLITE_NOMEM;
    s->merge = m;
    if ((rc = sqlite3_open_v2("", &m->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL)) != SQLITE_OK ||
        (rc = sqlite3_exec(m->db, "CREATE TABLE v (id TEXT PRIMARY KEY, status INTEGER NOT NULL)", NULL, NULL,
                           NULL)) != SQLITE_OK ||
        (rc = sqlite3_exec(m->db, "BEGIN", NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    return sqlite3_prepare_v2(m->db,
                              "INSERT INTO v (id, status) VALUES (?1, ?2) "
                              "ON CONFLICT (id) DO UPDATE SET status = max(status, excluded.status)",
                              -1, &m->put, NULL);
}

/* Verifications started in the range, merged by id; then the totals. */
static int summary_verifications(sqlite3 *db, struct summary *s, int64_t since_ms, int64_t until_ms)
{
    sqlite3_stmt *st = NULL, *tot = NULL;
    int rc;

    if ((rc = summary_merge_open(s)) != SQLITE_OK)
        return rc;
    if ((rc = sqlite3_prepare_v2(
             db,
             "SELECT id, CASE status WHEN 'verified' THEN 2 WHEN 'exhausted' THEN 1 ELSE 0 END "
             "FROM verifications WHERE created_ms >= ?1 AND created_ms < ?2",
             -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, since_ms);
    sqlite3_bind_int64(st, 2, until_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_bind_text(s->merge->put, 1, (const char *)sqlite3_column_text(st, 0), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s->merge->put, 2, sqlite3_column_int(st, 1));
        rc = sqlite3_step(s->merge->put);
        sqlite3_reset(s->merge->put);
        if (rc != SQLITE_DONE)
            break;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if ((rc = sqlite3_prepare_v2(
             s->merge->db,
             "SELECT count(*), COALESCE(sum(status = 2), 0), COALESCE(sum(status = 1), 0) FROM v", -1, &tot,
             NULL)) != SQLITE_OK)
        return rc;
    if ((rc = sqlite3_step(tot)) == SQLITE_ROW) {
        s->verifications = sqlite3_column_int64(tot, 0);
        s->verified = sqlite3_column_int64(tot, 1);
        s->exhausted = sqlite3_column_int64(tot, 2);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(tot);
    return rc;
}

static int summary_rest(sqlite3 *db, struct summary *s, int64_t since_ms, int64_t until_ms)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = sqlite3_prepare_v2(db,
                                 "SELECT (SELECT count(*) FROM message_events "
                                 "WHERE state = '" LEDGER_DELIVERED "' AND ts_ms >= ?1 AND ts_ms < ?2), "
                                 "(SELECT count(*) FROM message_events "
                                 "WHERE state = '" LEDGER_FAILED "' AND ts_ms >= ?1 AND ts_ms < ?2)",
                                 -1, &st, NULL)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, since_ms);
    sqlite3_bind_int64(st, 2, until_ms);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        s->delivered += sqlite3_column_int64(st, 0);
        s->failed += sqlite3_column_int64(st, 1);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = summary_verifications(db, s, since_ms, until_ms);
    return rc;
}

/* Opens the ledger at path read-only, refusing a schema older than
 * SUMMARY_SCHEMA_MIN; errors as ro_open's. */
static enum otp_rc summary_open(const char *path, sqlite3 **db, char *err)
{
    enum otp_rc rc;
    int version;

    if ((rc = ro_open(path, db, &version, err)) != OTP_OK)
        return rc;
    if (version < SUMMARY_SCHEMA_MIN) {
        snprintf(err, OTP_ERR_LEN,
                 "%s: ledger schema %d is older than otpctl reads (%d); otpd migrates it on open", path,
                 version, SUMMARY_SCHEMA_MIN);
        sqlite3_close(*db);
        *db = NULL;
        return OTP_EINVAL;
    }
    return OTP_OK;
}

/* The result of reading path that ended with the SQLite code src. */
static enum otp_rc summary_read_rc(const char *path, int src, char *err)
{
    if (src == SQLITE_OK)
        return OTP_OK;
    snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", path,
             src == SQLITE_NOMEM ? "out of memory" : sqlite3_errstr(src));
    return src == SQLITE_NOMEM ? OTP_ENOMEM : OTP_EIO;
}

enum otp_rc summary_add(struct summary *s, const char *path, int64_t since_ms, int64_t until_ms, char *err)
{
    sqlite3 *db = NULL;
    enum otp_rc rc;
    int src;

    if ((rc = summary_open(path, &db, err)) != OTP_OK)
        return rc;
    if ((src = summary_requests(db, s, since_ms, until_ms)) == SQLITE_OK &&
        (src = summary_sends(db, s, since_ms, until_ms)) == SQLITE_OK)
        src = summary_rest(db, s, since_ms, until_ms);
    rc = summary_read_rc(path, src, err);
    sqlite3_close(db);
    return rc;
}

void summary_free(struct summary *s)
{
    size_t i;

    for (i = 0; i < s->n_refusals; i++) {
        free(s->refusals[i].kind);
        free(s->refusals[i].decision);
        free(s->refusals[i].rule);
    }
    free(s->refusals);
    s->refusals = NULL;
    s->n_refusals = 0;
    if (s->merge) {
        sqlite3_finalize(s->merge->put);
        sqlite3_close(s->merge->db);
        free(s->merge);
        s->merge = NULL;
    }
}

/* ---- groups: calls by provider and region (otpctl stats --by) ---- */

/* A message's calls, delivery and verification are stamped by the clocks
 * of the instances that made them: the rows that may join a call in the
 * range are read a minute wider than it. */
#define SUMMARY_SKEW_MS 60000

/* The join's tables, one per read of a ledger. */
enum summary_join_table { SJ_SEND, SJ_MESSAGE, SJ_DELIVERED, SJ_VERIFIED, SJ_N };

/* Every ledger's rows the groups need, in a private temporary file: s the
 * calls in the range (its rowid is the order read: ledgers as given, rows
 * as written), m the messages that may own them with their region, d the
 * messages delivered, v the verifications verified. */
struct summary_join {
    sqlite3 *db; /* a private temporary file ("" as its name) */
    sqlite3_stmt *put[SJ_N];
};

static const char summary_join_schema[] =
    "CREATE TABLE s (provider TEXT, message_id TEXT, ts_ms INTEGER, outcome TEXT, cost INTEGER);"
    "CREATE TABLE m (id TEXT PRIMARY KEY, vid TEXT, region TEXT);"
    "CREATE TABLE d (id TEXT PRIMARY KEY);"
    "CREATE TABLE v (id TEXT PRIMARY KEY);"
    "BEGIN";

static const char *const summary_join_puts[SJ_N] = {
    [SJ_SEND] = "INSERT INTO s VALUES (?1, ?2, ?3, ?4, ?5)",
    [SJ_MESSAGE] = "INSERT OR IGNORE INTO m VALUES (?1, ?2, ?3)",
    [SJ_DELIVERED] = "INSERT OR IGNORE INTO d VALUES (?1)",
    [SJ_VERIFIED] = "INSERT OR IGNORE INTO v VALUES (?1)",
};

/* What each ledger gives each table, column for column. ?1 since, ?2
 * until, ?3 and ?4 the same a minute wider. A message's calls fall within
 * its life (created_ms to expires_ms); its delivery and its verification
 * come after its call. */
static const char *const summary_join_reads[SJ_N] = {
    [SJ_SEND] = "SELECT provider, message_id, ts_ms, outcome, cost_minor FROM sends "
                "WHERE ts_ms >= ?1 AND ts_ms < ?2 ORDER BY id",
    [SJ_MESSAGE] = "SELECT id, verification_id, summary_region(phone) FROM messages "
                   "WHERE expires_ms >= ?3 AND created_ms < ?4",
    [SJ_DELIVERED] = "SELECT id FROM messages "
                     "WHERE state = '" LEDGER_DELIVERED "' AND expires_ms >= ?3 AND created_ms < ?4 "
                     "UNION SELECT message_id FROM message_events "
                     "WHERE state = '" LEDGER_DELIVERED "' AND ts_ms >= ?3",
    [SJ_VERIFIED] =
        "SELECT id FROM verifications WHERE status = 'verified' AND ended_ms >= ?3 "
        "UNION SELECT verification_id FROM requests WHERE kind = 'verify' AND decision = 'verified' "
        "AND verification_id IS NOT NULL AND ts_ms >= ?3",
};

/* The groups from the join, by cols (two columns: the provider and the
 * region, or NULL for either). c is every call with its message's region
 * and verification; a the accepted ones, numbered from the last (by time,
 * then by the order read) within their message (nth_m) and within their
 * verification (nth_v); x a row per call, per delivered message's last
 * accepted call and per verified verification's. */
#define SUMMARY_GROUPS_SQL(cols)                                                                             \
    "WITH c AS (SELECT s.rowid AS k, s.provider AS p, COALESCE(m.region, '') AS r, s.message_id AS mid, "    \
    "m.vid AS vid, s.ts_ms AS ts, s.outcome AS outcome, s.cost AS cost "                                     \
    "FROM s LEFT JOIN m ON m.id = s.message_id), "                                                           \
    "a AS (SELECT p, r, mid, vid, "                                                                          \
    "row_number() OVER (PARTITION BY mid ORDER BY ts DESC, k DESC) AS nth_m, "                               \
    "row_number() OVER (PARTITION BY vid ORDER BY ts DESC, k DESC) AS nth_v "                                \
    "FROM c WHERE outcome = 'sent'), "                                                                       \
    "x (p, r, calls, ok, cost, delivered, verified) AS ("                                                    \
    "SELECT p, r, 1, outcome = 'sent', COALESCE(cost, 0), 0, 0 FROM c "                                      \
    "UNION ALL SELECT p, r, 0, 0, 0, 1, 0 FROM a WHERE nth_m = 1 AND mid IN d "                              \
    "UNION ALL SELECT p, r, 0, 0, 0, 0, 1 FROM a WHERE nth_v = 1 AND vid IN v) "                             \
    "SELECT " cols ", sum(calls), sum(ok), sum(cost), sum(delivered), sum(verified) FROM x "                 \
    "GROUP BY 1, 2 ORDER BY 1, 2"

static const char *const summary_groups_sql[] = {
    [SUMMARY_BY_PROVIDER] = SUMMARY_GROUPS_SQL("p, NULL"),
    [SUMMARY_BY_REGION] = SUMMARY_GROUPS_SQL("NULL, r"),
    [SUMMARY_BY_PROVIDER | SUMMARY_BY_REGION] = SUMMARY_GROUPS_SQL("p, r"),
};

/* t moved by by, held within int64_t (since and until may be its ends). */
static int64_t summary_widen(int64_t t, int64_t by)
{
    if (by < 0)
        return t < INT64_MIN - by ? INT64_MIN : t + by;
    return t > INT64_MAX - by ? INT64_MAX : t + by;
}

/* SQL summary_region(phone): the region of a stored number (canonical
 * E.164), "" when its country is unknown. */
static void summary_region(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    struct phone_info info;

    (void)argc;
    memset(&info, 0, sizeof(info));
    phone_parse((const char *)sqlite3_value_text(argv[0]), &info);
    sqlite3_result_text(cx, info.region, -1, SQLITE_TRANSIENT);
}

static int summary_join_open(struct summary_groups *g)
{
    struct summary_join *j;
    int rc, t;

    if (g->join != NULL)
        return SQLITE_OK;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return SQLITE_NOMEM;
    g->join = j;
    if ((rc = sqlite3_open_v2("", &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL)) != SQLITE_OK ||
        (rc = sqlite3_exec(j->db, summary_join_schema, NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    for (t = 0; t < SJ_N; t++)
        if ((rc = sqlite3_prepare_v2(j->db, summary_join_puts[t], -1, &j->put[t], NULL)) != SQLITE_OK)
            return rc;
    return SQLITE_OK;
}

/* Copies the rows of the ledger's read into the join through put, column
 * for column; bounds are ?1 to ?4. */
static int summary_join_copy(sqlite3 *db, const char *read, sqlite3_stmt *put, const int64_t *bounds)
{
    sqlite3_stmt *st = NULL;
    int rc, i, n;

    if ((rc = sqlite3_prepare_v2(db, read, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    for (i = 0; i < sqlite3_bind_parameter_count(st); i++)
        sqlite3_bind_int64(st, i + 1, bounds[i]);
    n = sqlite3_column_count(st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (i = 0; i < n; i++)
            sqlite3_bind_value(put, i + 1, sqlite3_column_value(st, i));
        rc = sqlite3_step(put);
        sqlite3_reset(put);
        if (rc != SQLITE_DONE)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

enum otp_rc summary_groups_add(struct summary_groups *g, const char *path, int64_t since_ms, int64_t until_ms,
                               char *err)
{
    const int64_t bounds[4] = {since_ms, until_ms, summary_widen(since_ms, -SUMMARY_SKEW_MS),
                               summary_widen(until_ms, SUMMARY_SKEW_MS)};
    sqlite3 *db = NULL;
    enum otp_rc rc;
    int src, t;

    if ((rc = summary_open(path, &db, err)) != OTP_OK)
        return rc;
    if ((src = summary_join_open(g)) == SQLITE_OK)
        src = sqlite3_create_function_v2(db, "summary_region", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                         summary_region, NULL, NULL, NULL);
    for (t = 0; t < SJ_N && src == SQLITE_OK; t++)
        src = summary_join_copy(db, summary_join_reads[t], g->join->put[t], bounds);
    rc = summary_read_rc(path, src, err);
    sqlite3_close(db);
    return rc;
}

/* text as a string of the caller's, NULL staying NULL; -1 out of memory. */
static int summary_group_text(const unsigned char *text, char **out)
{
    *out = NULL;
    return text == NULL || (*out = summary_dup(text)) != NULL ? 0 : -1;
}

/* Appends the group of the result row st; -1 out of memory. */
static int summary_group_add(struct summary_groups *g, sqlite3_stmt *st)
{
    struct summary_group *grown, *x;

    if ((grown = realloc(g->v, (g->n + 1) * sizeof(*grown))) == NULL)
        return -1;
    g->v = grown;
    x = &g->v[g->n];
    memset(x, 0, sizeof(*x));
    if (summary_group_text(sqlite3_column_text(st, 0), &x->provider) < 0 ||
        summary_group_text(sqlite3_column_text(st, 1), &x->region) < 0) {
        free(x->provider);
        return -1;
    }
    x->attempts = sqlite3_column_int64(st, 2);
    x->sent = sqlite3_column_int64(st, 3);
    x->failed = x->attempts - x->sent;
    x->spend_minor = sqlite3_column_int64(st, 4);
    x->delivered = sqlite3_column_int64(st, 5);
    x->verified = sqlite3_column_int64(st, 6);
    g->n++;
    return 0;
}

enum otp_rc summary_groups_end(struct summary_groups *g, char *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if (g->by == 0 || g->by > (SUMMARY_BY_PROVIDER | SUMMARY_BY_REGION)) {
        snprintf(err, OTP_ERR_LEN, "no grouping asked for");
        return OTP_EINVAL;
    }
    if ((rc = summary_join_open(g)) == SQLITE_OK &&
        (rc = sqlite3_prepare_v2(g->join->db, summary_groups_sql[g->by], -1, &st, NULL)) == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            if (summary_group_add(g, st) < 0) {
                rc = SQLITE_NOMEM;
                break;
            }
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        return OTP_OK;
    snprintf(err, OTP_ERR_LEN, "cannot group the calls: %s",
             rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errstr(rc));
    return rc == SQLITE_NOMEM ? OTP_ENOMEM : OTP_EIO;
}

void summary_groups_free(struct summary_groups *g)
{
    size_t i;
    int t;

    for (i = 0; i < g->n; i++) {
        free(g->v[i].provider);
        free(g->v[i].region);
    }
    free(g->v);
    g->v = NULL;
    g->n = 0;
    if (g->join) {
        for (t = 0; t < SJ_N; t++)
            sqlite3_finalize(g->join->put[t]);
        sqlite3_close(g->join->db);
        free(g->join);
        g->join = NULL;
    }
}
