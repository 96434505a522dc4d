/*
 * summary: a few grouped scans per ledger (requests by decision and rule,
 * sends by outcome, verifications by status), whatever its size; the
 * groups, not the rows, are held.
 */
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum otp_rc summary_add(struct summary *s, const char *path, int64_t since_ms, int64_t until_ms, char *err)
{
    sqlite3 *db = NULL;
    enum otp_rc rc;
    int version, src;

    if ((rc = ro_open(path, &db, &version, err)) != OTP_OK)
        return rc;
    if (version < SUMMARY_SCHEMA_MIN) {
        snprintf(err, OTP_ERR_LEN,
                 "%s: ledger schema %d is older than otpctl reads (%d); otpd migrates it on open", path,
                 version, SUMMARY_SCHEMA_MIN);
        sqlite3_close(db);
        return OTP_EINVAL;
    }
    if ((src = summary_requests(db, s, since_ms, until_ms)) == SQLITE_OK &&
        (src = summary_sends(db, s, since_ms, until_ms)) == SQLITE_OK)
        src = summary_rest(db, s, since_ms, until_ms);
    rc = OTP_OK;
    if (src != SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "%s: cannot read the ledger: %s", path,
                 src == SQLITE_NOMEM ? "out of memory" : sqlite3_errstr(src));
        rc = src == SQLITE_NOMEM ? OTP_ENOMEM : OTP_EIO;
    }
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
