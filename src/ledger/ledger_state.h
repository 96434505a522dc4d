/*
 * ledger_state: a message's states as the ledger stores them (the words
 * schema/001_init.sql allows in messages.state and message_events.state,
 * msgstate.h's), and the one place the ledger turns a move into a row's
 * values. Private to src/ledger.
 *
 * The API (ledger.h) takes a state as an enum msg_state and the states a
 * move may start from as a set built from msgstate's table of moves;
 * ledger_op_move writes that set as the comma list LEDGER_FROM_HAS tests
 * in SQL. The writer's statements, the retention and the readers splice
 * the words below.
 */
#ifndef OTPD_LEDGER_STATE_H
#define OTPD_LEDGER_STATE_H

#include <stdint.h>

#include "../base/msgstate.h"

#define LEDGER_QUEUED MSG_WORD_QUEUED
#define LEDGER_SENDING MSG_WORD_SENDING
#define LEDGER_DELIVERED MSG_WORD_DELIVERED
#define LEDGER_FAILED MSG_WORD_FAILED

/* SQL: the states of a message that has not ended (msgstate's MSG_PENDING
 * phase; test_msgstate checks the two agree). */
#define LEDGER_UNFINISHED_SQL "('" MSG_WORD_QUEUED "', '" MSG_WORD_SENDING "')"

/* SQL: whether the column col (a state) is one of the comma list bound at
 * the parameter param. */
#define LEDGER_FROM_HAS(col, param) "instr(',' || " param " || ',', ',' || " col " || ',') > 0"

struct ledger_op;

/* 1 when to is a state and from a set of states that are not empty, each
 * of which msgstate's table lets move to to; else 0: the ledger refuses the
 * move. */
int ledger_move_ok(enum msg_state to, unsigned from);

/* A move of message id to state to, if its state is one of the set from
 * (an op of kind LK_MSG_STATE; the caller owns it, NULL when out of
 * memory; the caller checked the move with ledger_move_ok). provider_id
 * and detail may be NULL (kept); attempts < 0 keeps the count. */
struct ledger_op *ledger_op_move(const char *id, enum msg_state to, unsigned from, const char *provider_id,
                                 const char *detail, int attempts, int64_t ts_ms);

#endif
