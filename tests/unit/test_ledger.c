/*
 * Unit tests of the ledger's counted 4xx rows (src/ledger/ledger.c,
 * ledger_request): many distinct keys refused in one second, each counted
 * into its own row with its exact count, through the writer and SQLite,
 * then read back from the file. The rows' second lies an hour ahead, so
 * the writer never commits them as "past" while the test submits: only
 * ledger_close (which commits everything) and the 1,024-row cap do.
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

#include "../../src/ledger/ledger.h"

/* The ledger's cap on rows counted at once (LEDGER_AGG_MAX in ledger.c). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_distinct_keys_one_second, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distinct_keys_past_the_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_key_other_rule_is_another_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_past_second_commits_alone, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
