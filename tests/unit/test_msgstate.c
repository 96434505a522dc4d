/*
 * Unit tests of a message's state machine (src/base/msgstate.c): every move
 * the table allows is accepted and every other refused (against a table
 * written out here again, by hand), a refused move leaves the state as it
 * was, the words round-trip and are the ones the ledger and the scripts
 * store, unknown words are refused, and the sets built from the table
 * (msg_from, the phases) are the ones the ledger's conditional moves use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/msgstate.h"
#include "../../src/ledger/ledger_state.h"

#define B(s) MSG_BIT(MSG_##s)

/* The moves as the table must have them: from each state, where it may go. */
static const unsigned want_moves[MSG_STATES] = {
    [MSG_HELD] = B(QUEUED),
    [MSG_QUEUED] = B(QUEUED) | B(SENDING) | B(SENT) | B(DELIVERED) | B(FAILED) | B(EXPIRED),
    [MSG_SENDING] = B(QUEUED) | B(SENDING) | B(SENT) | B(DELIVERED) | B(FAILED) | B(EXPIRED),
    [MSG_SENT] = B(DELIVERED) | B(FAILED),
    [MSG_DELIVERED] = 0,
    [MSG_FAILED] = 0,
    [MSG_EXPIRED] = 0,
};

/* The words the ledger's schema and the Lua scripts use, in enum order. */
static const char *const want_words[MSG_STATES] = {"held", "queued", "sending", "sent", "delivered", "failed",
                                                   "expired"};

static void test_every_move(void **state)
{
    int from, to;

    (void)state;
    for (from = 0; from < MSG_STATES; from++)
        for (to = 0; to < MSG_STATES; to++) {
            int want = (want_moves[from] & MSG_BIT(to)) != 0;
            if (msg_move_ok((enum msg_state)from, (enum msg_state)to) != want)
                fail_msg("move %s -> %s: want %s", want_words[from], want_words[to], want ? "allowed" : "refused");
        }
}

static void test_move_changes_state_only_when_allowed(void **state)
{
    enum msg_state s = MSG_HELD;

    (void)state;
    assert_int_equal(msg_move(&s, MSG_QUEUED), 0);
    assert_int_equal(s, MSG_QUEUED);
    assert_int_equal(msg_move(&s, MSG_SENDING), 0);
    assert_int_equal(msg_move(&s, MSG_QUEUED), 0); /* a retry */
    assert_int_equal(msg_move(&s, MSG_SENDING), 0);
    assert_int_equal(msg_move(&s, MSG_SENT), 0);
    assert_int_equal(s, MSG_SENT);
    /* Forbidden: sent goes on only by a delivery report, never back. */
    assert_int_equal(msg_move(&s, MSG_QUEUED), -1);
    assert_int_equal(msg_move(&s, MSG_SENDING), -1);
    assert_int_equal(msg_move(&s, MSG_EXPIRED), -1);
    assert_int_equal(msg_move(&s, MSG_SENT), -1);
    assert_int_equal(s, MSG_SENT);
    assert_int_equal(msg_move(&s, MSG_DELIVERED), 0);
    /* A final state has no move at all. */
    assert_int_equal(msg_move(&s, MSG_FAILED), -1);
    assert_int_equal(msg_move(&s, MSG_QUEUED), -1);
    assert_int_equal(s, MSG_DELIVERED);
    /* Held only goes to the queue; nothing goes to held. */
    s = MSG_HELD;
    assert_int_equal(msg_move(&s, MSG_SENDING), -1);
    assert_int_equal(msg_move(&s, MSG_SENT), -1);
    assert_int_equal(s, MSG_HELD);
    s = MSG_QUEUED;
    assert_int_equal(msg_move(&s, MSG_HELD), -1);
    /* Not a state, either side. */
    s = MSG_NONE;
    assert_int_equal(msg_move(&s, MSG_QUEUED), -1);
    assert_int_equal(s, MSG_NONE);
    s = MSG_QUEUED;
    assert_int_equal(msg_move(&s, MSG_NONE), -1);
    assert_int_equal(msg_move(&s, MSG_STATES), -1);
    assert_int_equal(s, MSG_QUEUED);
}

static void test_names_round_trip(void **state)
{
    int s;

    (void)state;
    for (s = 0; s < MSG_STATES; s++) {
        enum msg_state back = MSG_NONE;
        assert_string_equal(msg_state_name((enum msg_state)s), want_words[s]);
        assert_int_equal(msg_state_parse(want_words[s], &back), 0);
        assert_int_equal(back, s);
    }
    assert_string_equal(msg_state_name(MSG_NONE), "");
    assert_string_equal(msg_state_name(MSG_STATES), "");
    assert_string_equal(msg_state_name((enum msg_state)99), "");
}

static void test_unknown_names_refused(void **state)
{
    static const char *const bad[] = {"", "QUEUED", "queued ", " sent", "sendin", "sending,sent", "cancelled",
                                      "unknown"};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        enum msg_state s = MSG_SENT;
        assert_int_equal(msg_state_parse(bad[i], &s), -1);
        assert_int_equal(s, MSG_SENT); /* untouched */
    }
    {
        enum msg_state s = MSG_SENT;
        assert_int_equal(msg_state_parse(NULL, &s), -1);
        assert_int_equal(s, MSG_SENT);
    }
}

static void test_phases(void **state)
{
    (void)state;
    assert_int_equal(msg_phase_set(MSG_BEFORE), B(HELD));
    assert_int_equal(msg_phase_set(MSG_PENDING), B(QUEUED) | B(SENDING));
    assert_int_equal(msg_phase_set(MSG_ENDED), B(SENT));
    assert_int_equal(msg_phase_set(MSG_FINAL), B(DELIVERED) | B(FAILED) | B(EXPIRED));
    assert_false(msg_state_ended(MSG_HELD));
    assert_false(msg_state_ended(MSG_QUEUED));
    assert_false(msg_state_ended(MSG_SENDING));
    assert_true(msg_state_ended(MSG_SENT));
    assert_true(msg_state_ended(MSG_DELIVERED));
    assert_true(msg_state_ended(MSG_FAILED));
    assert_true(msg_state_ended(MSG_EXPIRED));
    assert_int_equal(msg_state_phase(MSG_NONE), MSG_FINAL);
}

/* The sets the ledger's conditional moves start from. */
static void test_from_sets(void **state)
{
    unsigned pending = msg_phase_set(MSG_PENDING);

    (void)state;
    /* A delivery report: from anything not final but held (the ledger never holds). */
    assert_int_equal(msg_from(MSG_DELIVERED, MSG_ALL), B(QUEUED) | B(SENDING) | B(SENT));
    assert_int_equal(msg_from(MSG_FAILED, MSG_ALL), B(QUEUED) | B(SENDING) | B(SENT));
    /* The pacer's, the sweep's and retention's: from what has not ended. */
    assert_int_equal(msg_from(MSG_EXPIRED, pending), B(QUEUED) | B(SENDING));
    assert_int_equal(msg_from(MSG_SENT, pending), B(QUEUED) | B(SENDING));
    assert_int_equal(msg_from(MSG_QUEUED, pending), B(QUEUED) | B(SENDING));
    /* Expired is never reached from sent; nothing reaches held. */
    assert_int_equal(msg_from(MSG_EXPIRED, B(SENT)), 0);
    assert_int_equal(msg_from(MSG_HELD, MSG_ALL), 0);
    assert_int_equal(msg_from(MSG_QUEUED, MSG_ALL), B(HELD) | B(QUEUED) | B(SENDING));
}

/* The ledger refuses a move the table does not have, and spells the
 * unfinished states as the table's pending phase. */
static void test_ledger_agrees(void **state)
{
    char sql[64];
    size_t n = 0;
    int s;

    (void)state;
    assert_true(ledger_move_ok(MSG_FAILED, B(QUEUED)));
    assert_true(ledger_move_ok(MSG_DELIVERED, B(QUEUED) | B(SENDING) | B(SENT)));
    assert_false(ledger_move_ok(MSG_EXPIRED, B(QUEUED) | B(SENT)));
    assert_false(ledger_move_ok(MSG_QUEUED, 0));
    assert_false(ledger_move_ok(MSG_NONE, B(QUEUED)));
    n += (size_t)snprintf(sql + n, sizeof(sql) - n, "(");
    for (s = 0; s < MSG_STATES; s++)
        if (msg_phase_set(MSG_PENDING) & MSG_BIT(s))
            n += (size_t)snprintf(sql + n, sizeof(sql) - n, "%s'%s'", n > 1 ? ", " : "",
                                  msg_state_name((enum msg_state)s));
    snprintf(sql + n, sizeof(sql) - n, ")");
    assert_string_equal(sql, LEDGER_UNFINISHED_SQL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_move),
        cmocka_unit_test(test_move_changes_state_only_when_allowed),
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_unknown_names_refused),
        cmocka_unit_test(test_phases),
        cmocka_unit_test(test_from_sets),
        cmocka_unit_test(test_ledger_agrees),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
