/*
 * queue: the fleet's send queue in Redis (queue.lua) and its send slots
 * (slot.lua): one stream with a consumer group, each instance a consumer.
 * Every call is one script run with the store's timeout; the pacer calls
 * them from its queue thread only, never from the thread that owns the
 * wire. See queue.lua for the data and issue.lua for how a message gets in.
 */
#ifndef OTPD_QUEUE_H
#define OTPD_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/msgstate.h"
#include "../base/rc.h"
#include "../store/store.h"

#define QUEUE_EID_MAX 48
#define QUEUE_ID_MAX 33
#define QUEUE_KEY_MAX 64
#define QUEUE_CAPS_MAX 192
#define QUEUE_NAME_MAX 96
#define QUEUE_TRIED_MAX 132 /* four provider names and their commas */

struct queue;

/* One entry of the stream: a message's immutable data. */
#define QUEUE_STYLE_MAX 288

struct queue_entry {
    char eid[QUEUE_EID_MAX];   /* the stream entry's id */
    char id[QUEUE_ID_MAX];     /* the message */
    char vid[QUEUE_ID_MAX];    /* its verification */
    char to[20];               /* canonical E.164 */
    char scope[24];            /* the verification's field in the phone's hash */
    char phone_key[QUEUE_KEY_MAX]; /* the phone's hash */
    int64_t expires_ms;        /* Redis's clock */
    int64_t price_minor;       /* -1: no cost caps */
    int64_t cost_ms;           /* Redis time of the reservation */
    char caps[QUEUE_CAPS_MAX]; /* the cap windows it was counted in */
    char style[QUEUE_STYLE_MAX]; /* what its text says beyond the code (src/otp/sms.h); "" for the default */
    /* Failed over from another provider: its latest reservation then (the
     * next attempt needs a later one, at this provider's price; -1: none
     * known, restored as a takeover), and the providers it went to before
     * ("a,b"); 0 and "" for a message that came here first. */
    int moved_r;
    char tried[QUEUE_TRIED_MAX];
    int deliveries;            /* times the group handed it to a consumer */
};

enum queue_mode {
    QUEUE_OWN,      /* this consumer's pending entries (a restart) */
    QUEUE_TAKEOVER, /* entries idle for takeover_ms, any consumer's */
    QUEUE_NEW,      /* entries never delivered */
};

/* What slot.lua says of a message about to be sent. */
enum queue_verdict {
    QUEUE_SEND,    /* it holds a slot: send it at the slot */
    QUEUE_DONE,    /* it was sent already (by another instance) */
    QUEUE_ENDED,   /* it ended unsent already (failed or expired elsewhere) */
    QUEUE_LOST,    /* another instance owns it now (a takeover) */
    QUEUE_GONE,    /* its verification has ended: never send it */
    QUEUE_EXPIRED, /* too little of its code's life is left */
    QUEUE_WAS_SENDING, /* taken over while 'sending', and pacer.on_restart_sending is fail */
};

/* A slot as slot.lua gave it. */
struct queue_slot {
    enum queue_verdict verdict;
    int64_t slot_us; /* Redis's clock */
    int64_t now_us;  /* Redis's clock inside the call */
    int attempt;     /* the attempt this slot is for (1 the first, any instance's) */
};

/* consumer names this instance in the group (copied); lane is the
 * provider whose stream and slot these are (queue_lane_key). NULL when out
 * of memory. */
struct queue *queue_new(struct store *s, const char *consumer, const char *lane);
/* A lane's key: base itself for the lane "default" (the single provider's,
 * as before there were lanes), else "<base>:<lane>". */
void queue_lane_key(const char *base, const char *lane, char *out, size_t cap);
/* The lane's stream key. */
const char *queue_stream(const struct queue *q);
void queue_free(struct queue *q);

/* Claims up to want entries (at most 16) into out; *n is how many, *depth
 * the fleet's queue (stream and holds). cursor (QUEUE_EID_MAX bytes, "0-0"
 * to start) is where QUEUE_OWN and QUEUE_TAKEOVER go on from; it comes
 * back "0-0" once a pass is complete. */
enum otp_rc queue_claim(struct queue *q, enum queue_mode mode, int want, int64_t takeover_ms, char *cursor,
                        struct queue_entry *out, int *n, int64_t *depth, char *err);

/* Checks e on Redis's clock and takes the next slot of the fleet's GCRA
 * (period_us apart) when it may go (see slot.lua). */
enum otp_rc queue_slot(struct queue *q, const struct queue_entry *e, int64_t min_life_ms, int64_t period_us,
                       int fail_if_sending, struct queue_slot *out, char *err);

/* Adds a message an old ledger holds queued (e: id, vid, to, expires_ms,
 * price_minor, cost_ms, caps) to the stream, unless Redis knows it. */
enum otp_rc queue_import(struct queue *q, const struct queue_entry *e, const char *api_key, int *added, char *err);

/* The fleet's queue depth (stream and holds). */
enum otp_rc queue_depth(struct queue *q, int64_t *depth, char *err);

/* Checks e as queue_slot does, again, just before its slot; when it may
 * go, it is 'sending' from here and out->attempt is its attempt number
 * (counted on when new_attempt, else the same one again: its last slot
 * was missed before any byte left). wire_ms: how long its call may be on
 * the wire from now (Redis keeps until when, for a failover elsewhere). */
enum otp_rc queue_arm(struct queue *q, const struct queue_entry *e, int64_t min_life_ms, int fail_if_sending,
                      int new_attempt, int64_t wire_ms, struct queue_slot *out, char *err);

/* A provider 429: no slot before pause_us from now, for the whole fleet. */
enum otp_rc queue_pause(struct queue *q, int64_t pause_us, char *err);

/* What queue_end did. */
enum queue_end_result {
    QUEUE_END_MOVED,   /* it ended as asked */
    QUEUE_END_ALREADY, /* it had ended already (a report, an abandon, this instance's own end) */
    QUEUE_END_LOST,    /* another instance owns it or ended it: nothing changed but a 'sent' */
};

/* The ops that close an attempt (end, retry, move) take attempt: that
 * attempt as "<provider>:<cause>" for the message's history, or NULL when
 * none was made. */

/* Ends e's message as state (sent, failed, expired) and takes its entry
 * out of the stream, while this instance owns the entry; *res says what
 * happened. A message another instance took over is that instance's to
 * end: only a 'sent' is written then, so it is not sent again. */
enum otp_rc queue_end(struct queue *q, const struct queue_entry *e, enum msg_state state, const char *detail,
                      const char *provider_id, const char *attempt, enum queue_end_result *res, char *err);

/* Puts e's message back to 'queued' for a retry this instance makes;
 * *owned 0 when another instance took it over meanwhile (drop it). */
enum otp_rc queue_retry(struct queue *q, const struct queue_entry *e, const char *detail, const char *attempt,
                        int *owned, char *err);

/* Makes this instance the one that may give e's money back (the message's
 * o, as an end does) while it owns e: before a failover gives back a
 * reservation no call was written on. *owned 0: another instance took it;
 * *wait_ms above 0: nothing done, another instance's call of it may be on
 * a wire that long. */
enum otp_rc queue_own(struct queue *q, const struct queue_entry *e, int *owned, int64_t *wait_ms, char *err);

/* What queue_move did. */
enum queue_move_result {
    QUEUE_MOVE_MOVED, /* it is in to_stream, queued for to_lane */
    QUEUE_MOVE_ENDED, /* it had ended already (a report, an old owner's 'sent'): its entry left, nothing moved */
    QUEUE_MOVE_LOST,  /* another instance owns it: nothing moved */
    QUEUE_MOVE_WAIT,  /* another instance's call of it may still be on a wire: nothing moved */
    QUEUE_MOVE_FULL,  /* the other provider's queue holds its capacity: nothing moved */
};

/* Fails e's message over, in one step while this instance owns e: its
 * entry leaves this lane's stream and a copy enters to_stream, carrying
 * moved_r (the latest reservation: the next attempt takes a later one)
 * and tried (the providers it went to, this one included); its hash says
 * queued, for to_lane, with detail. */
enum otp_rc queue_move(struct queue *q, const struct queue_entry *e, const char *to_stream, const char *to_lane,
                       int64_t to_capacity, int moved_r, const char *tried, const char *detail, const char *attempt,
                       enum queue_move_result *res, int64_t *wait_ms, char *err);

/* Streams no provider of this config reads (a provider removed; otp:q
 * after the single provider became a network): every stream in
 * otp:lanes but streams[0..n), which join it, and otp:q when it exists
 * and is not among them; at most cap into out. */
#define QUEUE_LANES_KEY "otp:lanes"
#define QUEUE_LANES_MAX 16
#define QUEUE_PEEK_MAX 32
enum otp_rc queue_orphans(struct queue *q, const char *const *streams, int n, char (*out)[QUEUE_KEY_MAX], int cap,
                          int *n_out, char *err);
/* Up to QUEUE_PEEK_MAX entries of stream after cursor (QUEUE_EID_MAX
 * bytes, "0-0" first; moved on), their eid, id and to only. */
enum otp_rc queue_peek(const struct queue *q, const char *stream, char *cursor, struct queue_entry *out, int *n,
                       char *err);
/* Moves entry e of stream (no provider reads it) to to_stream, for
 * to_lane, unless a live instance holds it (see queue.lua's adopt):
 * *result 1 moved, 2 it had ended (its entry left), 3 not now, 0 gone. */
enum otp_rc queue_adopt(const struct queue *q, const char *stream, const struct queue_entry *e, const char *to_stream,
                        const char *to_lane, int64_t takeover_ms, int *result, char *err);

/* Keeps this instance's entries eids[0..n) from being taken over; lost[i]
 * is set to 1 for each one another instance has taken. */
enum otp_rc queue_touch(struct queue *q, const char *const *eids, int n, int *lost, char *err);

/* What a message's status shows beyond its state: the provider that has
 * it or sent it, and its attempts ("alpha:timeout,beta:accepted"). */
#define QUEUE_ATTEMPTS_MAX 481
struct queue_view {
    char provider[32];
    char attempts[QUEUE_ATTEMPTS_MAX];
};

/* A message's issuing API key ("" when unknown), state (MSG_NONE when
 * unknown, or held: not visible yet) and view. OTP_ESTORE for a state word
 * the table does not have. */
enum otp_rc queue_get(struct queue *q, const char *id, char *api_key, size_t key_cap, enum msg_state *state,
                      struct queue_view *view, char *err);

/* A delivery report: moves a message that is queued, sending or sent to
 * state (delivered or failed); *moved 0 when it did not (ended, or
 * unknown). */
struct queue_report_out {
    int moved;                      /* 1 it moved to state; 0 not (ended, unknown); 2 see below */
    char provider[32];              /* the provider that had it ("" when Redis does not say) */
    char to[20], tried[QUEUE_TRIED_MAX]; /* moved 2: its phone and the providers it went to before */
};
/* With min_life_ms >= 0, a 'failed' report of a sent message with that
 * much of its code's life left changes nothing and says moved 2: the
 * caller queues it again on the next provider (queue_again), or reports
 * it again with min_life_ms -1. */
enum otp_rc queue_report(struct queue *q, const char *id, enum msg_state state, int64_t min_life_ms,
                         struct queue_report_out *out, char *err);
/* Queues sent message id again on q's stream, for lane, its delivery
 * having failed (attempt: "<provider>:<cause>"): *queued 0 when it is no
 * longer a sent message (a later report, a second failover). */
enum otp_rc queue_again(struct queue *q, const char *id, const char *lane, const char *attempt, const char *detail,
                        int *queued, char *err);

/* The states and details of messages ids[0..n) (n at most QUEUE_STATES_MAX)
 * in one script run: put(ctx, i, state, detail) for each, MSG_NONE and ""
 * when Redis does not know it. OTP_ESTORE (no put) when a state word is
 * not one of the table's. */
#define QUEUE_STATES_MAX 64
enum otp_rc queue_states(struct queue *q, const char *const *ids, int n,
                         void (*put)(void *ctx, int i, enum msg_state state, const char *detail), void *ctx,
                         char *err);

#endif
