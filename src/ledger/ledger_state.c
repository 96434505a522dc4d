/*
 * ledger_state: a move of a message, from msgstate's enum and sets to the
 * values a row holds (ledger_state.h). One call per state change the
 * ledger records.
 */
#include "ledger_state.h"

#include <stdio.h>

#include "ledger_int.h"

int ledger_move_ok(enum msg_state to, unsigned from)
{
    return msg_state_name(to)[0] != '\0' && from != 0 && (from & ~msg_from(to, MSG_ALL)) == 0;
}

/* The set from as the comma list of its words ("queued,sending"), into
 * out (cap bytes: room for every word). */
static void ledger_from_words(unsigned from, char *out, size_t cap)
{
    size_t n = 0;
    int s;

    out[0] = '\0';
    for (s = 0; s < MSG_STATES; s++)
        if ((from & MSG_BIT(s)) && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", msg_state_name((enum msg_state)s));
}

struct ledger_op *ledger_op_move(const char *id, enum msg_state to, unsigned from, const char *provider_id,
                                 const char *detail, int attempts, int64_t ts_ms)
{
    struct ledger_op *op = ledger_op_new(LK_MSG_STATE);
    char words[96];

    ledger_from_words(from, words, sizeof(words));
    if (op != NULL) {
        ledger_op_text(op, id);
        ledger_op_text(op, msg_state_name(to));
        ledger_op_text(op, words);
        ledger_op_text(op, provider_id);
        ledger_op_text(op, detail);
        ledger_op_int(op, attempts);
        ledger_op_int(op, ts_ms);
    }
    return op;
}
