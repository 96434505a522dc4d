/* breaker: the circuit breaker of breaker.h. A few comparisons per provider call. */
#include "breaker.h"

static const char *const breaker_names[BREAKER_STATE_COUNT] = {
    [BREAKER_CLOSED] = "closed",
    [BREAKER_OPEN] = "open",
    [BREAKER_HALF_OPEN] = "half_open",
};

void breaker_init(struct breaker *b, int failures_max, uint64_t open_ns)
{
    b->failures_max = failures_max < 1 ? 1 : failures_max;
    b->open_ns = open_ns;
    b->failures = 0;
    b->state = BREAKER_CLOSED;
    b->open_until_ns = 0;
    b->probing = 0;
}

/* Opens it for open_ns from now_ns (saturating: never wraps to the past). */
static void breaker_open(struct breaker *b, uint64_t now_ns)
{
    b->state = BREAKER_OPEN;
    b->open_until_ns = now_ns > UINT64_MAX - b->open_ns ? UINT64_MAX : now_ns + b->open_ns;
    b->probing = 0;
}

enum breaker_state breaker_state(const struct breaker *b, uint64_t now_ns)
{
    if (b->state == BREAKER_OPEN && now_ns >= b->open_until_ns)
        return BREAKER_HALF_OPEN;
    return b->state;
}

int breaker_would_allow(const struct breaker *b, uint64_t now_ns)
{
    switch (breaker_state(b, now_ns)) {
    case BREAKER_CLOSED:
        return 1;
    case BREAKER_HALF_OPEN:
        return b->state == BREAKER_OPEN || !b->probing;
    default:
        return 0;
    }
}

int breaker_allow(struct breaker *b, uint64_t now_ns)
{
    if (!breaker_would_allow(b, now_ns))
        return 0;
    if (b->state != BREAKER_CLOSED) {
        b->state = BREAKER_HALF_OPEN;
        b->probing = 1;
    }
    return 1;
}

void breaker_record(struct breaker *b, enum breaker_event e, uint64_t now_ns)
{
    switch (e) {
    case BREAKER_SUCCESS:
        b->state = BREAKER_CLOSED;
        b->failures = 0;
        b->probing = 0;
        break;
    case BREAKER_FAILURE:
        if (b->failures < b->failures_max)
            b->failures++;
        if (b->state == BREAKER_HALF_OPEN || (b->state == BREAKER_CLOSED && b->failures >= b->failures_max))
            breaker_open(b, now_ns);
        break;
    case BREAKER_NEUTRAL:
        if (b->state == BREAKER_HALF_OPEN)
            b->probing = 0;
        break;
    }
}

const char *breaker_state_name(enum breaker_state s)
{
    return (int)s >= 0 && s < BREAKER_STATE_COUNT ? breaker_names[s] : "";
}
