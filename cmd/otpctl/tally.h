/*
 * tally: counts by string key, for otpctl simulate (refusals per rule key,
 * messages to follow, decisions). An open-addressing hash table that grows
 * by doubling, so a ledger of millions of rows costs one entry per distinct
 * key and amortized O(1) per count.
 */
#ifndef OTPCTL_TALLY_H
#define OTPCTL_TALLY_H

#include <stddef.h>
#include <stdint.h>

struct tally;

struct tally_entry {
    char *key;           /* owned by the tally */
    char *label;         /* owned; what to print for key (a masked phone), or a second value */
    int64_t n;           /* what the caller counts */
    int64_t spend_minor; /* money the caller adds up for the key */
    int ref;             /* the caller's small integer (a rule's index) */
};

/* NULL when out of memory. tally_free accepts NULL. */
struct tally *tally_new(void);
void tally_free(struct tally *t);

/* The entry of key, added with label (copied; NULL: key) and zeros when
 * new. NULL when out of memory. The pointer lives until the next add. */
struct tally_entry *tally_get(struct tally *t, const char *key, const char *label);

/* The entry of key, or NULL when there is none. */
struct tally_entry *tally_find(const struct tally *t, const char *key);

size_t tally_size(const struct tally *t);

/* Every entry, most counted first (ties: by key), as a malloc'd array the
 * caller frees (the entries stay the tally's); *n is its length. NULL with
 * *n 0 when empty or out of memory. */
struct tally_entry **tally_sorted(const struct tally *t, size_t *n);

#endif
