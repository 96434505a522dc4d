/*
 * msgstate: the table of a message's states and the table of its moves
 * (msgstate.h). A lookup per state change of a message, and one word
 * parsed per state read from Redis or the ledger.
 */
#include "msgstate.h"

#include <string.h>

/* Each state's word and phase. */
static const struct {
    const char *word;
    enum msg_phase phase;
} msg_rows[MSG_STATES] = {
    [MSG_HELD] = {MSG_WORD_HELD, MSG_BEFORE},
    [MSG_QUEUED] = {MSG_WORD_QUEUED, MSG_PENDING},
    [MSG_SENDING] = {MSG_WORD_SENDING, MSG_PENDING},
    [MSG_SENT] = {MSG_WORD_SENT, MSG_ENDED},
    [MSG_DELIVERED] = {MSG_WORD_DELIVERED, MSG_FINAL},
    [MSG_FAILED] = {MSG_WORD_FAILED, MSG_FINAL},
    [MSG_EXPIRED] = {MSG_WORD_EXPIRED, MSG_FINAL},
};

/*
 * The moves: from each state, the set of states a message may go to.
 * held: its commit releases it into the queue (issue.lua); a hold that
 *   lapses is deleted, which is no state.
 * queued and sending: armed for a call (sending again: a new attempt after
 *   a restart, or the same one after a missed slot), back to queued (a
 *   retry, a stop before the slot, a takeover; queued again: one more
 *   event of the same state), and every end: sent, failed, expired, and
 *   delivered or failed by a delivery report (a retry may wait after a call
 *   the provider took but whose answer was lost) or by the sweep, from the
 *   fleet's record of a message another instance sent.
 * sent: only a delivery report moves it: delivered or failed.
 * The final states have no move.
 */
#define MSG_ANY_END (MSG_BIT(MSG_SENT) | MSG_BIT(MSG_DELIVERED) | MSG_BIT(MSG_FAILED) | MSG_BIT(MSG_EXPIRED))
static const unsigned msg_moves[MSG_STATES] = {
    [MSG_HELD] = MSG_BIT(MSG_QUEUED),
    [MSG_QUEUED] = MSG_BIT(MSG_QUEUED) | MSG_BIT(MSG_SENDING) | MSG_ANY_END,
    [MSG_SENDING] = MSG_BIT(MSG_QUEUED) | MSG_BIT(MSG_SENDING) | MSG_ANY_END,
    [MSG_SENT] = MSG_BIT(MSG_DELIVERED) | MSG_BIT(MSG_FAILED),
    [MSG_DELIVERED] = 0,
    [MSG_FAILED] = 0,
    [MSG_EXPIRED] = 0,
};

/* 1 when s is one of the states (not MSG_NONE, not out of range). */
static int msg_is_state(enum msg_state s)
{
    return (int)s >= 0 && s < MSG_STATES;
}

const char *msg_state_name(enum msg_state s)
{
    return msg_is_state(s) ? msg_rows[s].word : "";
}

int msg_state_parse(const char *word, enum msg_state *out)
{
    int s;

    if (word == NULL)
        return -1;
    for (s = 0; s < MSG_STATES; s++)
        if (strcmp(word, msg_rows[s].word) == 0) {
            *out = (enum msg_state)s;
            return 0;
        }
    return -1;
}

enum msg_phase msg_state_phase(enum msg_state s)
{
    return msg_is_state(s) ? msg_rows[s].phase : MSG_FINAL;
}

int msg_state_ended(enum msg_state s)
{
    return msg_state_phase(s) >= MSG_ENDED;
}

unsigned msg_phase_set(enum msg_phase p)
{
    unsigned set = 0;
    int s;

    for (s = 0; s < MSG_STATES; s++)
        if (msg_rows[s].phase == p)
            set |= MSG_BIT(s);
    return set;
}

int msg_move_ok(enum msg_state from, enum msg_state to)
{
    return msg_is_state(from) && msg_is_state(to) && (msg_moves[from] & MSG_BIT(to)) != 0;
}

int msg_move(enum msg_state *state, enum msg_state to)
{
    if (!msg_move_ok(*state, to))
        return -1;
    *state = to;
    return 0;
}

unsigned msg_from(enum msg_state to, unsigned among)
{
    unsigned set = 0;
    int s;

    for (s = 0; s < MSG_STATES; s++)
        if ((among & MSG_BIT(s)) && msg_move_ok((enum msg_state)s, to))
            set |= MSG_BIT(s);
    return set;
}
