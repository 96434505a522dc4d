/*
 * tally: see tally.h. Linear probing over a power-of-two table kept at
 * most half full; keys are never removed.
 */
#include "tally.h"

#include <stdlib.h>
#include <string.h>

struct tally {
    struct tally_entry *slots; /* key NULL: empty */
    size_t cap;                /* a power of two */
    size_t used;
};

struct tally *tally_new(void)
{
    struct tally *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->cap = 64;
    if ((t->slots = calloc(t->cap, sizeof(*t->slots))) == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void tally_free(struct tally *t)
{
    size_t i;

    if (t == NULL)
        return;
    for (i = 0; i < t->cap; i++) {
        free(t->slots[i].key);
        free(t->slots[i].label);
    }
    free(t->slots);
    free(t);
}

/* FNV-1a: keys are short and not chosen against us by anyone who can
 * measure otpctl's speed. */
static size_t tally_hash(const char *s)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (size_t)h;
}

static struct tally_entry *tally_slot(struct tally_entry *slots, size_t cap, const char *key)
{
    size_t i = tally_hash(key) & (cap - 1);

    while (slots[i].key != NULL && strcmp(slots[i].key, key) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int tally_grow(struct tally *t)
{
    struct tally_entry *slots = calloc(t->cap * 2, sizeof(*slots));
    size_t i;

    if (slots == NULL)
        return -1;
    for (i = 0; i < t->cap; i++)
        if (t->slots[i].key != NULL)
            *tally_slot(slots, t->cap * 2, t->slots[i].key) = t->slots[i];
    free(t->slots);
    t->slots = slots;
    t->cap *= 2;
    return 0;
}

struct tally_entry *tally_find(const struct tally *t, const char *key)
{
    struct tally_entry *e = tally_slot(t->slots, t->cap, key);

    return e->key != NULL ? e : NULL;
}

struct tally_entry *tally_get(struct tally *t, const char *key, const char *label)
{
    struct tally_entry *e = tally_slot(t->slots, t->cap, key);

    if (e->key != NULL)
        return e;
    if ((t->used + 1) * 2 > t->cap) {
        if (tally_grow(t) < 0)
            return NULL;
        e = tally_slot(t->slots, t->cap, key);
    }
    e->key = strdup(key);
    e->label = strdup(label ? label : key);
    if (e->key == NULL || e->label == NULL) {
        free(e->key);
        free(e->label);
        memset(e, 0, sizeof(*e));
        return NULL;
    }
    t->used++;
    return e;
}

size_t tally_size(const struct tally *t)
{
    return t->used;
}

static int tally_cmp(const void *a, const void *b)
{
    const struct tally_entry *x = *(const struct tally_entry *const *)a;
    const struct tally_entry *y = *(const struct tally_entry *const *)b;

    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->key, y->key);
}

struct tally_entry **tally_sorted(const struct tally *t, size_t *n)
{
    struct tally_entry **out;
    size_t i, k = 0;

    *n = 0;
    if (t->used == 0 || (out = malloc(t->used * sizeof(*out))) == NULL)
        return NULL;
    for (i = 0; i < t->cap; i++)
        if (t->slots[i].key != NULL)
            out[k++] = &t->slots[i];
    qsort(out, k, sizeof(*out), tally_cmp);
    *n = k;
    return out;
}
