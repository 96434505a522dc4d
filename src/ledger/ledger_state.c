/*
 * ledger_state: a message's states, from the words the API hands over to
 * the values a row holds (ledger_state.h). A few calls per message: one
 * per state change, and one per message the sweep asks the fleet about.
 */
#include "ledger_state.h"

#include <string.h>

#include "ledger_int.h"

struct ledger_op *ledger_op_move(const char *id, const char *state, const char *from, const char *provider_id,
                                 const char *detail, int attempts, int64_t ts_ms)
{
    struct ledger_op *op = ledger_op_new(LK_MSG_STATE);

    if (op != NULL) {
        ledger_op_text(op, id);
        ledger_op_text(op, state);
        ledger_op_text(op, from);
        ledger_op_text(op, provider_id);
        ledger_op_text(op, detail);
        ledger_op_int(op, attempts);
        ledger_op_int(op, ts_ms);
    }
    return op;
}

const char *ledger_state_ended(const char *state)
{
    static const char *const ended[] = {LEDGER_SENT, LEDGER_DELIVERED, LEDGER_FAILED, LEDGER_EXPIRED};
    size_t i;

    for (i = 0; i < sizeof(ended) / sizeof(ended[0]); i++)
        if (strcmp(state, ended[i]) == 0)
            return ended[i];
    return NULL;
}
