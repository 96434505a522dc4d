/*
 * sweep: ends here the messages the fleet ended (sweep.h). A handful of
 * rows per second at most, and in a steady fleet the messages other
 * instances sent for this one (about half of them with two instances,
 * each once). Most ticks find nothing and ask Redis nothing.
 */
#include "sweep.h"

#include <stdio.h>

#include "ledger_state.h"

#define SWEEP_STATE_MAX 16
#define SWEEP_DETAIL_MAX 160

/* The fleet's record of one message, as read. */
struct sweep_seen {
    char state[SWEEP_STATE_MAX]; /* "" when the fleet does not know it */
    char detail[SWEEP_DETAIL_MAX];
};

static void sweep_put(void *ctx, int i, const char *state, const char *detail)
{
    struct sweep_seen *seen = ctx;

    snprintf(seen[i].state, sizeof(seen[i].state), "%s", state ? state : "");
    snprintf(seen[i].detail, sizeof(seen[i].detail), "%s", detail ? detail : "");
}

/* The end to write for what the fleet says (state and detail, detail_cap
 * bytes), or NULL when it has not ended yet: ask again later. */
static const char *sweep_verdict(const struct sweep_seen *s, char *detail, size_t detail_cap)
{
    const char *end;

    if (s->state[0] == '\0') {
        snprintf(detail, detail_cap,
                 "outcome unknown here: the fleet's record of it is gone (the sending "
                 "instance's ledger has its sends)");
        return LEDGER_EXPIRED;
    }
    if ((end = ledger_state_ended(s->state)) == NULL)
        return NULL;
    snprintf(detail, detail_cap, "ended here by the sweep, from the fleet's record%s%s",
             s->detail[0] ? ": " : "", s->detail);
    return end;
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
        seen[i].state[0] = seen[i].detail[0] = '\0';
    }
    if (read(ctx, ids, n, sweep_put, seen, err) != OTP_OK) {
        sw->next_ms = now_ms + SWEEP_BACKOFF_MS;
        return -1;
    }
    for (i = 0; i < n; i++) {
        char detail[SWEEP_DETAIL_MAX + 64];
        const char *state = sweep_verdict(&seen[i], detail, sizeof(detail));
        /* Only from a state that has not ended: this instance's sender may
         * have ended it meanwhile, and its word stands. */
        if (state != NULL && ledger_message_state(l, ids[i], state, LEDGER_UNFINISHED_FROM, NULL, detail, -1,
                                                  now_ms) == OTP_OK)
            ended++;
    }
    return ended;
}
