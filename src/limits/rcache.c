/*
 * rcache: the refusal cache (see rcache.h). Each shard is a chained hash
 * table of entries on a doubly linked LRU list, and a singly linked list of
 * the entries holding penalty hits not yet taken ("dirty"). An entry is one
 * malloc: its fixed part and its text, "<key>\0<field>\0<rule>\0".
 */
#include "rcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/conf.h"
#include "../base/fnv.h"

#define RC_LIVE 1  /* in the table and the LRU list */
#define RC_DIRTY 2 /* in the dirty list */

struct rc_entry {
    struct rc_entry *hnext;      /* the bucket's chain */
    struct rc_entry *prev, *next; /* LRU: head is the most recent */
    struct rc_entry *dnext;      /* the dirty list */
    int64_t deadline_ms;
    int64_t end_ms;        /* what Retry-After counts down to (rcache_value) */
    int64_t count_from_ms; /* penalty hits count from then on (a block's end) */
    int64_t quota;
    int64_t window_s;
    uint32_t hash; /* of op, key and field: the bucket, and a cheap first compare */
    uint32_t hits; /* penalty hits not yet taken */
    uint16_t klen; /* strlen(key) */
    uint16_t flen; /* strlen(field) */
    uint8_t op, outcome, penalty, flags;
    char text[]; /* key \0 field \0 rule \0 */
};

struct rc_shard {
    pthread_mutex_t mu;
    struct rc_entry **buckets;
    size_t mask; /* buckets - 1, a power of two less one */
    struct rc_entry *head, *tail;
    struct rc_entry *dirty;
    size_t n, cap;
    uint64_t evictions;
};

struct rcache {
    struct rc_shard shards[RCACHE_SHARDS];
    _Atomic uint64_t gen;
    _Atomic int64_t read_ms; /* the vouching read (rcache_vouch) */
    _Atomic uint64_t hits[RCACHE_OPS];
};

/* The shard of Redis key key: every field of one key in one shard, so
 * rcache_clear_key looks at one shard. */
static struct rc_shard *shard_of(struct rcache *c, const char *key, size_t klen, uint64_t *kh)
{
    *kh = fnv_add(FNV_BASIS, key, klen);
    return &c->shards[(*kh >> 32) % RCACHE_SHARDS];
}

/* The entry's hash: the key's, continued with a separator, the field and op. */
static uint32_t entry_hash(uint64_t kh, enum rcache_op op, const char *field, size_t flen)
{
    char sep[2] = {0, (char)op};
    uint64_t h = fnv_add(fnv_add(kh, sep, 2), field, flen);

    return (uint32_t)(h ^ (h >> 32));
}

struct rcache *rcache_new(size_t max_entries)
{
    struct rcache *c;
    size_t i, per, nb;

    if (max_entries == 0 || (c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    atomic_init(&c->read_ms, RCACHE_NEVER);
    per = (max_entries + RCACHE_SHARDS - 1) / RCACHE_SHARDS;
    /* About one bucket per entry: chains stay short at the bound. */
    for (nb = 16; nb < per; nb *= 2)
        ;
    for (i = 0; i < RCACHE_SHARDS; i++) {
        struct rc_shard *s = &c->shards[i];
        s->cap = max_entries / RCACHE_SHARDS > 0 ? max_entries / RCACHE_SHARDS : 1;
        s->mask = nb - 1;
        pthread_mutex_init(&s->mu, NULL);
        if ((s->buckets = calloc(nb, sizeof(*s->buckets))) == NULL) {
            rcache_free(c);
            return NULL;
        }
    }
    return c;
}

/* Frees e unless the dirty list still holds it (its hits are not taken). */
static void entry_drop(struct rc_entry *e)
{
    e->flags &= (uint8_t)~RC_LIVE;
    if (!(e->flags & RC_DIRTY))
        free(e);
}

/* Takes e out of s's LRU list; under s->mu. */
static void lru_unlink(struct rc_shard *s, struct rc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
}

/* Puts e at the front of s's LRU list (most recently used); under s->mu. */
static void lru_push(struct rc_shard *s, struct rc_entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    else
        s->tail = e;
    s->head = e;
}

/* Unlinks e from s's table and LRU list, then drops it; under s->mu. */
static void entry_remove(struct rc_shard *s, struct rc_entry *e)
{
    struct rc_entry **p = &s->buckets[e->hash & s->mask];

    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    lru_unlink(s, e);
    s->n--;
    entry_drop(e);
}

/* Drops every live entry of s (of Redis key key only, when key is not
 * NULL); under s->mu. */
static void shard_clear(struct rc_shard *s, const char *key, size_t klen)
{
    struct rc_entry *e = s->head, *next;

    for (; e != NULL; e = next) {
        next = e->next;
        if (key == NULL || (e->klen == klen && memcmp(e->text, key, klen) == 0))
            entry_remove(s, e);
    }
}

void rcache_free(struct rcache *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < RCACHE_SHARDS; i++) {
        struct rc_shard *s = &c->shards[i];
        struct rc_entry *e, *next;
        if (s->buckets == NULL)
            continue;
        shard_clear(s, NULL, 0);
        for (e = s->dirty; e != NULL; e = next) {
            next = e->dnext;
            free(e);
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->mu);
    }
    free(c);
}

int64_t rcache_deadline_ms(int64_t t0_ms, int64_t retry_ms)
{
    /* 1 ms per second of wait for a Redis clock that runs faster than ours,
     * and 1 ms for whole milliseconds: the script's now is Redis's clock
     * floored, so its retry may be up to 1 ms longer than the true wait. */
    return t0_ms + retry_ms - retry_ms / 1000 - 1;
}

int rcache_cacheable(const struct cfg_rule *r)
{
    if (r->shadow)
        return 0;
    switch (r->algo) {
    case CFG_ALGO_SLIDING_LOG:
    case CFG_ALGO_FIXED_WINDOW:
    case CFG_ALGO_RESEND_DELAY:
    case CFG_ALGO_WRONG_GUESS_CAP:
        return 1;
    case CFG_ALGO_TOKEN_BUCKET:
    case CFG_ALGO_SLIDING_WINDOW_COUNTER:
        break;
    }
    return 0;
}

int rcache_fresh(int64_t read_ms, int64_t now_ms)
{
    return fresh_ok(read_ms, now_ms);
}

void rcache_vouch(struct rcache *c, int64_t read_ms)
{
    if (c != NULL)
        atomic_store(&c->read_ms, read_ms);
}

uint64_t rcache_gen(struct rcache *c)
{
    return c == NULL ? 0 : atomic_load(&c->gen);
}

/* The live entry of op on key/field in s, or NULL; under s->mu. */
static struct rc_entry *find(struct rc_shard *s, uint32_t h, enum rcache_op op, const char *key, size_t klen,
                             const char *field, size_t flen)
{
    struct rc_entry *e;

    for (e = s->buckets[h & s->mask]; e != NULL; e = e->hnext)
        if (e->hash == h && e->op == (uint8_t)op && e->klen == klen && e->flen == flen &&
            memcmp(e->text, key, klen) == 0 && memcmp(e->text + klen + 1, field, flen) == 0)
            return e;
    return NULL;
}

/* Makes e the most recently used; under s->mu. */
static void touch(struct rc_shard *s, struct rc_entry *e)
{
    if (s->head == e)
        return;
    lru_unlink(s, e);
    lru_push(s, e);
}

/* e's value and rule name (after its key and field, whose lengths are
 * set): the text's room holds any rule name, so a replacement never grows
 * it. */
static void value_set(struct rc_entry *e, const struct rcache_value *v)
{
    char *rule = e->text + e->klen + e->flen + 2;
    size_t rlen = strnlen(v->rule, RCACHE_NAME_MAX - 1);

    memcpy(rule, v->rule, rlen);
    rule[rlen] = '\0';
    e->deadline_ms = v->deadline_ms;
    e->end_ms = v->end_ms;
    e->count_from_ms = v->count_from_ms;
    e->quota = v->quota;
    e->window_s = v->window_s;
    e->outcome = (uint8_t)v->outcome;
    e->penalty = v->penalty ? 1 : 0;
}

int rcache_put(struct rcache *c, uint64_t gen, enum rcache_op op, const char *key, const char *field,
               const struct rcache_value *v, int64_t now_ms)
{
    size_t klen, flen;
    uint64_t kh;
    uint32_t h;
    struct rc_shard *s;
    struct rc_entry *e;

    if (c == NULL || v->deadline_ms <= now_ms)
        return 0;
    klen = strlen(key);
    flen = strlen(field);
    if (klen >= sizeof(((struct rcache_hits *)0)->key) || flen >= sizeof(((struct rcache_hits *)0)->field))
        return 0;
    s = shard_of(c, key, klen, &kh);
    h = entry_hash(kh, op, field, flen);
    pthread_mutex_lock(&s->mu);
    /* Read under the shard's lock: a clear moves the generation before it
     * takes this lock, so either it sees this entry or we see its move. */
    if (atomic_load(&c->gen) != gen) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if ((e = find(s, h, op, key, klen, field, flen)) != NULL) {
        /* The newer refusal: both deadlines are exact, the newer knows more. */
        value_set(e, v);
        touch(s, e);
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    if (s->n >= s->cap) {
        s->evictions++;
        entry_remove(s, s->tail);
    }
    if ((e = malloc(sizeof(*e) + klen + flen + RCACHE_NAME_MAX + 2)) == NULL) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    memset(e, 0, sizeof(*e));
    e->hash = h;
    e->op = (uint8_t)op;
    e->klen = (uint16_t)klen;
    e->flen = (uint16_t)flen;
    e->flags = RC_LIVE;
    memcpy(e->text, key, klen + 1);
    memcpy(e->text + klen + 1, field, flen + 1);
    value_set(e, v);
    e->hnext = s->buckets[h & s->mask];
    s->buckets[h & s->mask] = e;
    lru_push(s, e);
    s->n++;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

int rcache_get(struct rcache *c, enum rcache_op op, const char *key, const char *field, int64_t now_ms,
               struct rcache_value *out)
{
    size_t klen, flen;
    uint64_t kh;
    uint32_t h;
    struct rc_shard *s;
    struct rc_entry *e;

    if (c == NULL || !rcache_fresh(atomic_load(&c->read_ms), now_ms))
        return 0;
    klen = strlen(key);
    flen = strlen(field);
    s = shard_of(c, key, klen, &kh);
    h = entry_hash(kh, op, field, flen);
    pthread_mutex_lock(&s->mu);
    if ((e = find(s, h, op, key, klen, field, flen)) == NULL) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (now_ms >= e->deadline_ms) {
        entry_remove(s, e); /* the real refusal may be over: never answer past it */
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    touch(s, e);
    if (e->penalty && now_ms >= e->count_from_ms) {
        e->hits++;
        if (!(e->flags & RC_DIRTY)) {
            e->flags |= RC_DIRTY;
            e->dnext = s->dirty;
            s->dirty = e;
        }
    }
    out->outcome = (enum rcache_outcome)e->outcome;
    memcpy(out->rule, e->text + e->klen + e->flen + 2, RCACHE_NAME_MAX);
    out->rule[RCACHE_NAME_MAX - 1] = '\0';
    out->quota = e->quota;
    out->window_s = e->window_s;
    out->deadline_ms = e->deadline_ms;
    out->end_ms = e->end_ms;
    out->penalty = e->penalty;
    out->count_from_ms = e->count_from_ms;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

void rcache_count_hit(struct rcache *c, enum rcache_op op)
{
    if (c != NULL && (unsigned)op < RCACHE_OPS)
        atomic_fetch_add(&c->hits[op], 1);
}

void rcache_clear(struct rcache *c)
{
    size_t i;

    if (c == NULL)
        return;
    atomic_fetch_add(&c->gen, 1); /* before any shard: see rcache_put */
    for (i = 0; i < RCACHE_SHARDS; i++) {
        pthread_mutex_lock(&c->shards[i].mu);
        shard_clear(&c->shards[i], NULL, 0);
        pthread_mutex_unlock(&c->shards[i].mu);
    }
}

void rcache_clear_key(struct rcache *c, const char *key)
{
    size_t klen;
    uint64_t kh;
    struct rc_shard *s;

    if (c == NULL)
        return;
    klen = strlen(key);
    s = shard_of(c, key, klen, &kh);
    atomic_fetch_add(&c->gen, 1);
    pthread_mutex_lock(&s->mu);
    shard_clear(s, key, klen);
    pthread_mutex_unlock(&s->mu);
}

size_t rcache_take_hits(struct rcache *c, struct rcache_hits *out, size_t cap)
{
    size_t i, n = 0;

    if (c == NULL)
        return 0;
    for (i = 0; i < RCACHE_SHARDS && n < cap; i++) {
        struct rc_shard *s = &c->shards[i];
        pthread_mutex_lock(&s->mu);
        while (s->dirty != NULL && n < cap) {
            struct rc_entry *e = s->dirty;
            s->dirty = e->dnext;
            e->flags &= (uint8_t)~RC_DIRTY;
            memcpy(out[n].key, e->text, (size_t)e->klen + 1);
            memcpy(out[n].field, e->text + e->klen + 1, (size_t)e->flen + 1);
            memcpy(out[n].rule, e->text + e->klen + e->flen + 2, RCACHE_NAME_MAX);
            out[n].rule[RCACHE_NAME_MAX - 1] = '\0';
            out[n].n = e->hits;
            e->hits = 0;
            if (!(e->flags & RC_LIVE))
                free(e);
            if (out[n].n > 0)
                n++;
        }
        pthread_mutex_unlock(&s->mu);
    }
    return n;
}

void rcache_stats(struct rcache *c, struct rcache_stats *out)
{
    size_t i, op;

    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return;
    for (op = 0; op < RCACHE_OPS; op++)
        out->hits[op] = atomic_load(&c->hits[op]);
    for (i = 0; i < RCACHE_SHARDS; i++) {
        pthread_mutex_lock(&c->shards[i].mu);
        out->entries += c->shards[i].n;
        out->evictions += c->shards[i].evictions;
        pthread_mutex_unlock(&c->shards[i].mu);
    }
}
