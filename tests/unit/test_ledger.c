/*
 * Unit tests of the ledger's counted 4xx rows (src/ledger/ledger_queue.c,
 * ledger_request): many distinct keys refused in one second, each counted
 * into its own row with its exact count, through the writer and SQLite,
 * then read back from the file. The rows' second lies an hour ahead, so
 * the writer never commits them as "past" while the test submits: only
 * ledger_close (which commits everything) and the 1,024-row cap do.
 *
 * Then the messages that never end here: the sweep (src/ledger/sweep.c)
 * against a fake fleet and a fake clock, and retention's keep links and
 * last resort end, each checked with `otpctl verify`'s chaincheck_run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "../../src/ledger/chaincheck.h"
#include "../../src/ledger/ledger.h"
#include "../../src/ledger/sweep.h"

/* The ledger's cap on rows counted at once (LEDGER_AGG_MAX in ledger_int.h). */
#define AGG_MAX 1024

struct ledger_fixture {
    char dir[64];
    char path[96];
};

static int setup(void **state)
{
    struct ledger_fixture *f = calloc(1, sizeof(*f));

    snprintf(f->dir, sizeof(f->dir), "/tmp/otpd-test-ledger-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/ledger.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    struct ledger_fixture *f = *state;
    char p[128];
    size_t i;

    for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", f->path, suffixes[i]);
        unlink(p);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Refusal i of key k: a 429 on phone k, at a millisecond of the second s. */
static void refuse(struct ledger *l, int k, int64_t s, int i)
{
    char phone[32];
    struct ledger_request r = {0};

    snprintf(phone, sizeof(phone), "+9198%08d", k);
    r.ts_ms = s * 1000 + (i * 7) % 1000;
    r.kind = "issue";
    r.api_key = "login-web";
    r.phone = phone;
    r.client_ip = "192.0.2.1";
    r.decision = "rate_limited";
    r.rule = "phone_resend";
    r.http_status = 429;
    assert_int_equal(ledger_request(l, &r), OTP_OK);
}

/* How many times key k is refused: 1 to 5, so counts differ by key. */
static int times_of(int k)
{
    return 1 + (k * 7919) % 5;
}

/*
 * Refuses keys 0..n-1, each times_of(k) times, interleaved (round after
 * round over all keys, as a flood of distinct phones arrives), all in one
 * second; closes the ledger; checks every key's count and returns how
 * many rows the file has.
 */
static int flood(const char *path, int n)
{
    char err[OTP_ERR_LEN];
    struct ledger *l = ledger_open(path, err);
    int64_t s = wall_ms() / 1000 + 3600;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int round, k, seen = 0, rows = -1;

    assert_non_null(l);
    for (round = 0; round < 5; round++)
        for (k = 0; k < n; k++)
            if (round < times_of(k))
                refuse(l, k, s, round * n + k);
    ledger_close(l);

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT phone, SUM(count), MIN(ts_ms / 1000), MAX(ts_ms / 1000), "
                                        "MIN(decision = 'rate_limited' AND http_status = 429 AND rule = "
                                        "'phone_resend') FROM requests GROUP BY phone ORDER BY phone",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *phone = (const char *)sqlite3_column_text(st, 0);
        k = (int)strtol(phone + 5, NULL, 10);
        assert_int_equal(k, seen); /* every key, once each, in order */
        assert_int_equal(sqlite3_column_int(st, 1), times_of(k));
        assert_int_equal(sqlite3_column_int64(st, 2), s);
        assert_int_equal(sqlite3_column_int64(st, 3), s);
        assert_int_equal(sqlite3_column_int(st, 4), 1);
        seen++;
    }
    assert_int_equal(seen, n);
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM requests", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    rows = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
}

/* Up to the cap: one row per key, its count exact. 1,000 keys in 2,048
 * buckets share buckets, so chains of two and more are walked. */
static void test_distinct_keys_one_second(void **state)
{
    struct ledger_fixture *f = *state;

    assert_int_equal(flood(f->path, 1000), 1000);
}

/* Past the cap: the counted rows are committed and counting starts over,
 * so a key may have more than one row, but every key's total is exact and
 * the rows are those of the cap's rule: a key not being counted opens a
 * row, and opening the 1,025th commits the 1,024 being counted first. */
static void test_distinct_keys_past_the_cap(void **state)
{
    struct ledger_fixture *f = *state;
    enum { N = 3000 };
    static char counting[N];
    int round, k, n_counting = 0, want = 0;

    for (round = 0; round < 5; round++)
        for (k = 0; k < N; k++) {
            if (round >= times_of(k) || counting[k])
                continue;
            if (n_counting == AGG_MAX) {
                memset(counting, 0, sizeof(counting));
                n_counting = 0;
            }
            counting[k] = 1;
            n_counting++;
            want++;
        }
    assert_true(want > N); /* the cap was reached and some keys have two rows */
    assert_int_equal(flood(f->path, N), want);
}

/* Rows of one key that differ in anything but their time and count are
 * not one row: the same phone refused by two rules. */
static void test_same_key_other_rule_is_another_row(void **state)
{
    struct ledger_fixture *f = *state;
    char err[OTP_ERR_LEN];
    struct ledger *l = ledger_open(f->path, err);
    int64_t s = wall_ms() / 1000 + 3600;
    struct ledger_request r = {0};
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int i, n = 0;

    assert_non_null(l);
    r.kind = "issue";
    r.api_key = "login-web";
    r.phone = "+919812345699";
    r.decision = "rate_limited";
    r.http_status = 429;
    for (i = 0; i < 10; i++) {
        r.ts_ms = s * 1000 + i;
        r.rule = i % 2 ? "phone_resend" : "phone_daily";
        assert_int_equal(ledger_request(l, &r), OTP_OK);
    }
    ledger_close(l);
    assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT rule, count FROM requests ORDER BY id", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        /* Arrival order: the daily cap's row was counted first. */
        assert_string_equal((const char *)sqlite3_column_text(st, 0), n == 0 ? "phone_daily" : "phone_resend");
        assert_int_equal(sqlite3_column_int(st, 1), 5);
        n++;
    }
    assert_int_equal(n, 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Sums count per phone of the ledger at path into counts[k] for phones
 * +9198000000k (k < n); returns the number of request rows. */
static int counts_of(const char *path, int *counts, int n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rows = 0;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT phone, count FROM requests", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int k = (int)strtol((const char *)sqlite3_column_text(st, 0) + 5, NULL, 10);
        assert_true(k >= 0 && k < n);
        counts[k] += sqlite3_column_int(st, 1);
        rows++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
}

/*
 * A past second's row commits (the writer's own flush of seconds that are
 * over) while a later second's row keeps counting, and rows counted after
 * that commit are still found, counted and committed: the rows being
 * counted stay one list, whichever of them left.
 */
static void test_past_second_commits_alone(void **state)
{
    struct ledger_fixture *f = *state;
    char err[OTP_ERR_LEN];
    struct ledger *l = ledger_open(f->path, err);
    int64_t now_s = wall_ms() / 1000, deadline_ms;
    struct ledger_stats st;
    int counts[3] = {0, 0, 0};

    assert_non_null(l);
    refuse(l, 1, now_s + 3600, 0); /* counting until the ledger closes */
    refuse(l, 2, now_s - 10, 0);   /* the last one counted, and already over */
    /* Any submission wakes the writer, which first commits what is over. */
    assert_int_equal(ledger_verification_update(l, "no-such-verification", "pending", 1, now_s * 1000), OTP_OK);
    deadline_ms = wall_ms() + 10000; /* a loaded machine: a commit takes well under a second */
    do {
        ledger_stats(l, &st);
        if (st.rows >= 2)
            break;
        usleep(1000);
    } while (wall_ms() < deadline_ms);
    assert_true(st.rows >= 2);
    refuse(l, 0, now_s + 3600, 1);
    refuse(l, 1, now_s + 3600, 2);
    refuse(l, 0, now_s + 3600, 3);
    ledger_close(l);
    assert_int_equal(counts_of(f->path, counts, 3), 3);
    assert_int_equal(counts[0], 2);
    assert_int_equal(counts[1], 2);
    assert_int_equal(counts[2], 1);
}

/* An accepted message "m<k>" (verification "v<k>"), created and expiring
 * at the times given. */
static void accept_msg(struct ledger *l, int k, int64_t created_ms, int64_t expires_ms)
{
    char id[16], vid[16];
    struct ledger_message m = {0};
    struct ledger_request r = {0};

    snprintf(id, sizeof(id), "m%03d", k);
    snprintf(vid, sizeof(vid), "v%03d", k);
    m.id = r.message_id = id;
    m.verification_id = r.verification_id = vid;
    m.api_key = r.api_key = "login-web";
    m.phone = r.phone = "+919812345678";
    m.created_ms = r.ts_ms = created_ms;
    m.expires_ms = expires_ms;
    m.price_minor = -1;
    r.kind = "issue";
    r.decision = "accepted";
    r.http_status = 202;
    assert_int_equal(ledger_accept(l, &m, expires_ms, &r), OTP_OK);
}

/* The fleet, as the sweep reads it: m<k> with k % 3 == 0 was sent by another
 * instance, k % 3 == 1 is forgotten (no record), k % 3 == 2 is still
 * sending. fail: Redis does not answer. */
struct fake_fleet {
    int fail, calls, asked;
};

static enum otp_rc fake_read(void *ctx, const char *const *ids, int n,
                             void (*put)(void *put_ctx, int i, enum msg_state state, const char *detail),
                             void *put_ctx, char *err)
{
    struct fake_fleet *f = ctx;
    int i;

    f->calls++;
    if (f->fail) {
        snprintf(err, OTP_ERR_LEN, "redis: connection refused");
        return OTP_ESTORE;
    }
    f->asked += n;
    for (i = 0; i < n; i++) {
        int k = (int)strtol(ids[i] + 1, NULL, 10);
        if (k % 3 == 0)
            put(put_ctx, i, MSG_SENT, "provider 200");
        else if (k % 3 == 2)
            put(put_ctx, i, MSG_SENDING, "");
    }
    return OTP_OK;
}

/* One value of the ledger at path: the first column of sql's first row, as
 * text into out (cap bytes; "" for none). */
static void query(const char *path, const char *sql, char *out, size_t cap)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;

    out[0] = '\0';
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void assert_chain(const char *path, int ok, const char *why)
{
    struct chaincheck_result r;
    char err[OTP_ERR_LEN];

    assert_int_equal(chaincheck_run(path, NULL, &r, err), OTP_OK);
    if (r.ok != ok)
        fail_msg("chain %s: %s %lld: %s", ok ? "broken" : "holds", r.table, (long long)r.row_id,
                 r.why ? r.why : "");
    if (!ok)
        assert_non_null(strstr(r.why, why));
}

/* Waits (10 s at most) until the writer committed at least rows rows. */
static void wait_rows(struct ledger *l, uint64_t rows)
{
    int64_t deadline_ms = wall_ms() + 10000;
    struct ledger_stats st;

    do {
        ledger_stats(l, &st);
        if (st.rows >= rows)
            return;
        usleep(1000);
    } while (wall_ms() < deadline_ms);
    fail_msg("%llu rows committed, not %llu", (unsigned long long)st.rows, (unsigned long long)rows);
}

/*
 * 70 messages whose code expired a minute ago, and one not yet: the sweep
 * asks the fleet about the 70 in two batches (64, then 6) and ends those
 * sent elsewhere ('sent', the fleet's detail) and those forgotten
 * ('expired', outcome unknown); the ones still sending wait for a later
 * pass, which starts over. A fleet that does not answer costs one read,
 * then none for SWEEP_BACKOFF_MS.
 */
static void test_sweep_ends_what_the_fleet_ended(void **state)
{
    struct ledger_fixture *f = *state;
    struct fake_fleet fleet = {0, 0, 0};
    struct sweep sw = {0, 0};
    char err[OTP_ERR_LEN], v[256];
    struct ledger *l = ledger_open(f->path, err);
    int64_t now = 1700000000000LL, grace = 10000;
    int k, n;

    assert_non_null(l);
    for (k = 0; k < 70; k++)
        accept_msg(l, k, now - 120000, now - 60000);
    accept_msg(l, 70, now - 5000, now - 5000); /* within its grace: not asked yet */
    n = sweep_run(&sw, l, now, grace, fake_read, &fleet, err);
    assert_int_equal(n, 22 + 21); /* of m000 to m063: 22 sent, 21 forgotten */
    assert_int_equal(fleet.asked, 64);
    n = sweep_run(&sw, l, now, grace, fake_read, &fleet, err);
    assert_int_equal(fleet.asked, 70);
    assert_int_equal(n, 4); /* m064, m066, m067, m069 */
    wait_rows(l, 71 * 3 + 47);
    /* A new pass, 11 s on: the ones still sending, and m070 (its grace is
     * over: forgotten). */
    fleet.fail = 1;
    assert_int_equal(sweep_run(&sw, l, now + 1000, grace, fake_read, &fleet, err), -1);
    assert_non_null(strstr(err, "connection refused"));
    assert_int_equal(sweep_run(&sw, l, now + 2000, grace, fake_read, &fleet, err), 0);
    assert_int_equal(fleet.calls, 3); /* backing off */
    fleet.fail = 0;
    assert_int_equal(sweep_run(&sw, l, now + 1000 + SWEEP_BACKOFF_MS, grace, fake_read, &fleet, err), 1);
    assert_int_equal(fleet.asked, 70 + 23 + 1);
    ledger_close(l);
    query(f->path,
          "SELECT group_concat(state || ' ' || count, ', ') FROM (SELECT state, count(*) AS count "
          "FROM messages GROUP BY state ORDER BY state)",
          v, sizeof(v));
    assert_string_equal(v, "expired 24, queued 23, sent 24");
    query(f->path, "SELECT detail FROM messages WHERE id = 'm003'", v, sizeof(v));
    assert_string_equal(v, "ended here by the sweep, from the fleet's record: provider 200");
    query(f->path,
          "SELECT detail || ' ' || ts_ms FROM message_events WHERE message_id = 'm004' AND "
          "state = 'expired'",
          v, sizeof(v));
    assert_non_null(strstr(v, "outcome unknown here"));
    assert_non_null(strstr(v, " 1700000000000"));
    assert_chain(f->path, 1, NULL);
}

/*
 * Retention and messages that do not end: one waiting two hours (its code
 * still has ten minutes) gets one keep link from the first prune past its
 * time and none from later ones, so deleting it is seen; one whose code
 * died two days ago is ended by the prune, as no one can say any more what
 * became of it.
 */
static void test_retention_keeps_then_ends_unfinished(void **state)
{
    struct ledger_fixture *f = *state;
    char err[OTP_ERR_LEN], v[256], ended[256] = "";
    struct ledger *l = ledger_open(f->path, err);
    int64_t now = wall_ms(), deadline_ms;

    assert_non_null(l);
    accept_msg(l, 1, now - 7200000, now + 600000);
    accept_msg(l, 2, now - 2 * 86400000LL, now - 2 * 86400000LL + 600000);
    wait_rows(l, 6);
    ledger_set_retention(l, 1000);
    /* The writer prunes every second (the retention): m002's end is pruned
     * a second or two after the prune that ended it, so it is read as it
     * goes by; then three prunes. */
    deadline_ms = wall_ms() + 10000;
    do {
        usleep(20000);
        if (ended[0] == '\0')
            query(f->path,
                  "SELECT state || ': ' || detail FROM messages WHERE id = 'm002' AND state <> 'queued'",
                  ended, sizeof(ended));
        query(f->path, "SELECT count(*) FROM chain WHERE tbl = 'prune'", v, sizeof(v));
    } while ((strtol(v, NULL, 10) < 3 || ended[0] == '\0') && wall_ms() < deadline_ms);
    ledger_close(l);
    query(f->path, "SELECT count(*) FROM chain WHERE tbl = 'messages' AND row_id = 1", v, sizeof(v));
    assert_string_equal(v, "2"); /* its insert and one keep link */
    query(f->path,
          "SELECT c.ts_ms = m.expires_ms + 86400000 FROM chain c, messages m WHERE c.tbl = 'messages' "
          "AND c.row_id = m.seq AND m.seq = 1 ORDER BY c.seq DESC",
          v, sizeof(v));
    assert_string_equal(v, "1");
    assert_string_equal(ended,
                        "expired: ended by retention: still queued a day after its code's expiry, outcome "
                        "unknown here");
    assert_chain(f->path, 1, NULL);
    query(f->path, "DELETE FROM messages WHERE id = 'm001' RETURNING id", v, sizeof(v));
    assert_chain(f->path, 0, "missing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_distinct_keys_one_second, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distinct_keys_past_the_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_key_other_rule_is_another_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_past_second_commits_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_ends_what_the_fleet_ended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_keeps_then_ends_unfinished, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
