/*
 * sweep: ends here the messages the fleet ended (sweep.h). A handful of
 * rows per second at most, and in a steady fleet the messages other
 * instances sent for this one (about half of them with two instances,
 * each once). Most ticks find nothing and ask Redis nothing.
 */
#include "sweep.h"

#include <stdio.h>

#define SWEEP_DETAIL_MAX 160

/* The fleet's record of one message, as read. */
struct sweep_seen {
    enum msg_state state; /* MSG_NONE when the fleet does not know it */
    char detail[SWEEP_DETAIL_MAX];
};

static void sweep_put(void *ctx, int i, enum msg_state state, const char *detail)
{
    struct sweep_seen *seen = ctx;

    seen[i].state = state;
    snprintf(seen[i].detail, sizeof(seen[i].detail), "%s", detail ? detail : "");
}

/* The end to write for what the fleet says (into *end, its detail into
 * detail, detail_cap bytes): 1, or 0 when it has not ended yet: ask again
 * later. */
static int sweep_verdict(const struct sweep_seen *s, enum msg_state *end, char *detail, size_t detail_cap)
{
    if (s->state == MSG_NONE) {
        snprintf(detail, detail_cap,
                 "outcome unknown here: the fleet's record of it is gone (the sending "
                 "instance's ledger has its sends)");
        *end = MSG_EXPIRED;
        return 1;
    }
    if (!msg_state_ended(s->state))
        return 0;
    snprintf(detail, detail_cap, "ended here by the sweep, from the fleet's record%s%s",
             s->detail[0] ? ": " : "", s->detail);
    *end = s->state;
    return 1;
}

int sweep_run(struct sweep *sw, struct ledger *l, int64_t now_ms, int64_t grace_ms, sweep_read_fn read,
              void *ctx, char *err)
{
    struct ledger_unfinished batch[SWEEP_BATCH];
    struct sweep_seen seen[SWEEP_BATCH];
    const char *ids[SWEEP_BATCH];
    int n = 0, i, ended = 0;

    if (now_ms < sw->next_ms)
        return 0;
    if (ledger_unfinished(l, now_ms - grace_ms, sw->after_seq, batch, SWEEP_BATCH, &n, err) != OTP_OK)
        return -1;
    /* A short batch is the end of a pass: the next one starts over. */
    sw->after_seq = n == SWEEP_BATCH ? batch[n - 1].seq : 0;
    if (n == 0)
        return 0;
    for (i = 0; i < n; i++) {
        ids[i] = batch[i].id;
        seen[i].state = MSG_NONE;
        seen[i].detail[0] = '\0';
    }
    if (read(ctx, ids, n, sweep_put, seen, err) != OTP_OK) {
        sw->next_ms = now_ms + SWEEP_BACKOFF_MS;
        return -1;
    }
    for (i = 0; i < n; i++) {
        char detail[SWEEP_DETAIL_MAX + 64];
        enum msg_state end;
        /* Only from a state that has not ended: this instance's sender may
         * have ended it meanwhile, and its word stands. */
        if (sweep_verdict(&seen[i], &end, detail, sizeof(detail)) &&
            ledger_message_state(l, ids[i], end, msg_from(end, msg_phase_set(MSG_PENDING)), NULL, detail, -1,
                                 now_ms) == OTP_OK)
            ended++;
    }
    return ended;
}
