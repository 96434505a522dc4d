/*
 * ledger_state: a message's states as the ledger stores them (the words
 * schema/001_init.sql allows in messages.state and message_events.state),
 * and the one place the ledger's code spells them or reads a "from" list.
 * Private to src/ledger.
 *
 * The API (ledger.h) takes a state as a word and the states a move may
 * start from as a comma list ("queued,sending"); ledger_op_move is the one
 * function that turns those into a row's values, and LEDGER_FROM_HAS the
 * one SQL test of a list. A message state enum with its table of allowed
 * moves changes this header and ledger_state.c, not the writer's
 * statements, the retention or the readers, which splice the words below.
 */
#ifndef OTPD_LEDGER_STATE_H
#define OTPD_LEDGER_STATE_H

#include <stdint.h>

#define LEDGER_QUEUED "queued"
#define LEDGER_SENDING "sending"
#define LEDGER_SENT "sent"
#define LEDGER_DELIVERED "delivered"
#define LEDGER_FAILED "failed"
#define LEDGER_EXPIRED "expired"

/* The states of a message that has not ended: as a from list, and as an
 * SQL list. */
#define LEDGER_UNFINISHED_FROM LEDGER_QUEUED "," LEDGER_SENDING
#define LEDGER_UNFINISHED_SQL "('" LEDGER_QUEUED "', '" LEDGER_SENDING "')"

/* SQL: whether the column col (a state) is one of the from list bound at
 * the parameter param. */
#define LEDGER_FROM_HAS(col, param) "instr(',' || " param " || ',', ',' || " col " || ',') > 0"

struct ledger_op;

/* A move of message id to state, if its state is one of from (an op of
 * kind LK_MSG_STATE; the caller owns it, NULL when out of memory).
 * provider_id and detail may be NULL (kept); attempts < 0 keeps the count. */
struct ledger_op *ledger_op_move(const char *id, const char *state, const char *from, const char *provider_id,
                                 const char *detail, int attempts, int64_t ts_ms);

/* state's own static word when a message ends in it (sent, delivered,
 * failed, expired), else NULL. */
const char *ledger_state_ended(const char *state);

#endif
