/*
 * ledger_queue: what the request threads and the pacer hand the writer.
 * Every submission (about three per accepted message, one per refusal,
 * thousands a second at peak) takes mu once to append its group of ops;
 * a refusal (4xx) is counted instead, one hash lookup under mu, into a row
 * per key, decision and second, so a flood of distinct refusals costs a
 * short bucket walk each and a row per key, not a row per request.
 */
#include <stdlib.h>
#include <string.h>

#include "../base/fnv.h"
#include "ledger_int.h"

/* A request row's count (the last of its arguments). */
#define LEDGER_COUNT_ARG 13
/* Submissions waiting for the writer. Past this, submitters wait for a
 * commit: a stalled disk slows callers down instead of growing memory. */
#define LEDGER_QUEUE_MAX 65536

void ledger_op_free(struct ledger_op *op)
{
    int i;

    for (i = 0; op != NULL && i < op->n; i++)
        free(op->a[i].s);
    free(op);
}

void ledger_op_text(struct ledger_op *op, const char *s)
{
    struct ledger_arg *a = &op->a[op->n++];

    a->is_text = 1;
    if (s != NULL && (a->s = strdup(s)) == NULL)
        a->is_text = -1; /* out of memory: noticed in ledger_submit */
}

void ledger_op_int(struct ledger_op *op, int64_t v)
{
    op->a[op->n].is_text = 0;
    op->a[op->n++].i = v;
}

struct ledger_op *ledger_op_new(enum ledger_kind kind)
{
    struct ledger_op *op = calloc(1, sizeof(*op));

    if (op != NULL)
        op->kind = kind;
    return op;
}

static void ops_free(struct ledger_op **ops, int n)
{
    int i;

    for (i = 0; i < n; i++)
        ledger_op_free(ops[i]);
}

/* Appends op (a group of one) to the writer's queue; under mu. */
static void ledger_enqueue_locked(struct ledger *l, struct ledger_op *op)
{
    op->next = NULL;
    if (l->tail)
        l->tail->next = op;
    else
        l->head = op;
    l->tail = op;
    l->stats.queue_depth++;
}

/* The index bucket of a counted row: its hash and its second, mixed
 * (Fibonacci hashing) so that the top bits depend on all of them. */
static size_t ledger_agg_bucket(uint64_t hash, int64_t agg_s)
{
    uint64_t h = (hash ^ (uint64_t)agg_s) * 11400714819323198485ULL;

    return (size_t)(h >> 53) & (LEDGER_AGG_BUCKETS - 1); /* 2^11 buckets */
}

/* Takes op out of the index; under mu. */
static void ledger_agg_unindex_locked(struct ledger *l, const struct ledger_op *op)
{
    struct ledger_op **pp = &l->agg_idx[ledger_agg_bucket(op->hash, op->agg_s)];

    while (*pp != NULL && *pp != op)
        pp = &(*pp)->agg_next;
    if (*pp != NULL)
        *pp = op->agg_next;
}

/* Moves the counted rows of seconds before before_s to the writer's queue,
 * in arrival order; under mu. Returns how many moved. */
size_t ledger_agg_flush_locked(struct ledger *l, int64_t before_s)
{
    struct ledger_op **pp = &l->agg, *op, *kept = NULL;
    size_t moved = 0;

    while ((op = *pp) != NULL) {
        if (op->agg_s >= before_s) {
            kept = op;
            pp = &op->next;
            continue;
        }
        ledger_agg_unindex_locked(l, op);
        *pp = op->next;
        op->first = op->last = 1;
        ledger_enqueue_locked(l, op);
        l->n_agg--;
        moved++;
    }
    l->agg_tail = kept;
    if (moved > 0)
        pthread_cond_signal(&l->wake);
    return moved;
}

/* Of everything in a request row but its time (0) and count. */
static uint64_t op_agg_hash(const struct ledger_op *op)
{
    uint64_t h = FNV_BASIS;
    int i;

    for (i = 1; i < LEDGER_COUNT_ARG; i++) {
        const struct ledger_arg *a = &op->a[i];
        if (a->is_text)
            h = a->s ? fnv_add(h, a->s, strlen(a->s) + 1) : fnv_add(h, "\1", 1);
        else
            h = fnv_add(h, &a->i, sizeof(a->i));
    }
    return h;
}

static int op_agg_same(const struct ledger_op *x, const struct ledger_op *y)
{
    int i;

    if (x->agg_s != y->agg_s || x->hash != y->hash)
        return 0;
    for (i = 1; i < LEDGER_COUNT_ARG; i++) {
        const struct ledger_arg *a = &x->a[i], *b = &y->a[i];
        if (a->is_text != b->is_text || (!a->is_text && a->i != b->i) || (!a->s != !b->s) ||
            (a->s && strcmp(a->s, b->s) != 0))
            return 0;
    }
    return 1;
}

/*
 * A 4xx request row (taken): counted into the row of the same key,
 * decision and second, which the writer commits once that second is over
 * (or sooner, before a row that must follow it). No fsync per request and
 * no row per request, so a flood of refusals grows the ledger and its WAL
 * with its distinct keys, not its rate.
 */
enum otp_rc ledger_count(struct ledger *l, struct ledger_op *op)
{
    struct ledger_op *a, **bucket;
    int i;

    if (op == NULL)
        return OTP_ENOMEM;
    for (i = 0; i < op->n; i++)
        if (op->a[i].is_text < 0) {
            ledger_op_free(op);
            return OTP_ENOMEM;
        }
    op->agg_s = op->a[0].i / 1000;
    op->hash = op_agg_hash(op);
    pthread_mutex_lock(&l->mu);
    /* As ledger_submit_one: a stalled disk slows a flood of distinct keys
     * down rather than growing the queue. */
    while (l->stats.queue_depth >= LEDGER_QUEUE_MAX && !l->stop)
        pthread_cond_wait(&l->done, &l->mu);
    if (l->stop) {
        pthread_mutex_unlock(&l->mu);
        ledger_op_free(op);
        return OTP_EIO;
    }
    bucket = &l->agg_idx[ledger_agg_bucket(op->hash, op->agg_s)];
    for (a = *bucket; a; a = a->agg_next)
        if (op_agg_same(a, op)) {
            a->a[LEDGER_COUNT_ARG].i++;
            pthread_mutex_unlock(&l->mu);
            ledger_op_free(op);
            return OTP_OK;
        }
    if (l->n_agg >= LEDGER_AGG_MAX)
        ledger_agg_flush_locked(l, INT64_MAX); /* the bucket too */
    op->next = NULL;
    if (l->agg != NULL)
        l->agg_tail->next = op;
    else
        l->agg = op;
    l->agg_tail = op;
    op->agg_next = *bucket;
    *bucket = op;
    l->n_agg++;
    pthread_mutex_unlock(&l->mu);
    return OTP_OK;
}

/*
 * Queues the group ops[0..n-1] for the writer, taking the ops. With wait,
 * blocks until the group's transaction is settled and returns its result.
 * A NULL op (or a failed string copy) means out of memory: nothing is
 * queued.
 */
enum otp_rc ledger_submit(struct ledger *l, struct ledger_op **ops, int n, int wait, int may_block)
{
    struct ledger_wait w = {0, OTP_OK};
    int i, j;

    for (i = 0; i < n; i++) {
        int bad = ops[i] == NULL;
        for (j = 0; !bad && j < ops[i]->n; j++)
            bad = ops[i]->a[j].is_text < 0;
        if (bad) {
            ops_free(ops, n);
            return OTP_ENOMEM;
        }
    }
    ops[0]->first = 1;
    ops[n - 1]->last = 1;
    ops[n - 1]->wait = wait ? &w : NULL;
    pthread_mutex_lock(&l->mu);
    while (may_block && l->stats.queue_depth >= LEDGER_QUEUE_MAX && !l->stop)
        pthread_cond_wait(&l->done, &l->mu);
    if (l->stop) {
        /* ledger_close has begun: nothing would commit this any more. */
        pthread_mutex_unlock(&l->mu);
        ops_free(ops, n);
        return OTP_EIO;
    }
    /* Counted refusals go first, so request rows keep their order. */
    if (ops[0]->kind == LK_REQUEST || ops[0]->kind == LK_VER_NEW)
        ledger_agg_flush_locked(l, INT64_MAX);
    for (i = 0; i < n; i++) {
        if (l->tail)
            l->tail->next = ops[i];
        else
            l->head = ops[i];
        l->tail = ops[i];
    }
    l->stats.queue_depth += (uint64_t)n;
    pthread_cond_signal(&l->wake);
    while (wait && !w.done)
        pthread_cond_wait(&l->done, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return w.rc;
}

/* Request threads: they wait at the queue cap, so a flood of refusals
 * cannot outgrow a slow disk. */
enum otp_rc ledger_submit_one(struct ledger *l, struct ledger_op *op)
{
    return ledger_submit(l, &op, 1, 0, 1);
}

/* The pacer thread: it never waits at the cap, since it drives the provider
 * calls in flight (a stalled pacer would time them out and pay twice); its
 * rows are bounded by the send rate anyway. */
enum otp_rc ledger_submit_paced(struct ledger *l, struct ledger_op *op)
{
    return ledger_submit(l, &op, 1, 0, 0);
}
