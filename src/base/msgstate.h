/*
 * msgstate: a message's states and the one table of the moves between them
 * (curl's mstate(): a transfer's state changes in one function, which knows
 * the moves that exist). The words are what the ledger stores
 * (messages.state, message_events.state) and what Redis holds in a
 * message's hash (its field s, written by the Lua scripts): a word becomes
 * a state once, where it is read (msg_state_parse), and a word again only
 * where it is written (msg_state_name). Every state change of a message the
 * pacer holds goes through msg_move; every conditional move in the ledger
 * starts from a set of states built from the same table (msg_from).
 *
 * Constant tables and pure functions: any thread, a few calls per message.
 */
#ifndef OTPD_MSGSTATE_H
#define OTPD_MSGSTATE_H

/* The words, spelled here once: the table is built from them, and the
 * ledger's SQL splices them (src/ledger/ledger_state.h). */
#define MSG_WORD_HELD "held"
#define MSG_WORD_QUEUED "queued"
#define MSG_WORD_SENDING "sending"
#define MSG_WORD_SENT "sent"
#define MSG_WORD_DELIVERED "delivered"
#define MSG_WORD_FAILED "failed"
#define MSG_WORD_EXPIRED "expired"

enum msg_state {
    MSG_NONE = -1, /* not a state: Redis does not know the message (its word is "") */
    MSG_HELD,      /* Redis only: accepted, not yet released into the queue (issue.lua's hold) */
    MSG_QUEUED,    /* in the fleet's queue: waiting for a slot, or for a retry */
    MSG_SENDING,   /* armed for a provider call: the provider may have it */
    MSG_SENT,      /* the provider accepted it: only a delivery report moves it on */
    MSG_DELIVERED, /* a delivery report said so */
    MSG_FAILED,    /* refused, cancelled, out of retries or money, or reported undelivered */
    MSG_EXPIRED,   /* too little of its code's life was left to send it */
    MSG_STATES
};

/* Where a state stands in a message's life. */
enum msg_phase {
    MSG_BEFORE,  /* not in the queue yet: held */
    MSG_PENDING, /* in the queue, a sender acts on it: queued, sending (the ledger's unfinished) */
    MSG_ENDED,   /* its sending is over, a delivery report may still move it: sent */
    MSG_FINAL,   /* nothing moves it any more: delivered, failed, expired */
};

/* A set of states: bit MSG_BIT(s) for each state s in it. */
#define MSG_BIT(s) (1u << (unsigned)(s))
#define MSG_ALL ((1u << MSG_STATES) - 1u)

/* s's word, static: "" for MSG_NONE and for any value that is not a state. */
const char *msg_state_name(enum msg_state s);

/* The state whose word is word: 0, with it in *out; -1 for any other text
 * ("" and NULL included), *out untouched. */
int msg_state_parse(const char *word, enum msg_state *out);

/* s's phase; MSG_FINAL for a value that is not a state (nothing moves it). */
enum msg_phase msg_state_phase(enum msg_state s);

/* 1 when s's sending is over (MSG_ENDED or MSG_FINAL): the scripts' FINAL. */
int msg_state_ended(enum msg_state s);

/* The states of phase p, as a set. */
unsigned msg_phase_set(enum msg_phase p);

/* 1 when the table allows a message in state from to move to state to. */
int msg_move_ok(enum msg_state from, enum msg_state to);

/* Moves *state to to when the table allows it: 0. A move the table does
 * not have is refused: -1, *state unchanged; the caller must act on it
 * (it is a bug where it happens, never a move to make anyway). */
int msg_move(enum msg_state *state, enum msg_state to) __attribute__((warn_unused_result));

/* The states of the set among from which the table allows a move to to:
 * what a conditional move (the ledger's) may start from. */
unsigned msg_from(enum msg_state to, unsigned among);

#endif
