/*
 * rcache: the refusal cache (issue 13). Each instance remembers the
 * refusals that cannot end before their Retry-After except by an admin
 * change (a sliding log, a fixed window, a resend delay, a wrong-guess lock,
 * a penalty block), keyed by the exact rule state they came from, and
 * answers repeats from memory until their deadline, so a flood on hot keys
 * costs no Redis round trip.
 *
 * Pure: no clock is read here; every call takes now_ms, a local monotonic
 * time in ms, and deadlines are on that clock. Bounded: at most max_entries
 * entries, the least recently used evicted first. Thread-safe: 16 shards,
 * each with its own mutex, chosen by a hash of the Redis key alone (so the
 * entries of one key, whatever their fields, are in one shard); no call
 * holds two shards' locks, and none blocks on anything but a shard's lock.
 * Keys are compared whole (op, Redis key and field), never by hash alone:
 * a collision must not refuse an innocent key.
 *
 * Trusted only while fresh: an unlock, a block's removal or an override
 * made on another instance reaches this one through the admin rows, which
 * the main thread reads about once a second and then clears the cache
 * when they moved. While that read fails or is late (this instance cut off
 * from Redis), a change may have happened unseen, so nothing is answered
 * from memory (rcache_vouch, rcache_fresh): the request goes to Redis like
 * any other, and without Redis it is a 503.
 *
 * Load: a lookup per enforced rule per request (the common call, no malloc),
 * an insert per cacheable refusal that went to Redis (one malloc), a clear
 * per admin change or reload (rare).
 */
#ifndef OTPD_RCACHE_H
#define OTPD_RCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/fresh.h"

#define RCACHE_SHARDS 16
#define RCACHE_NAME_MAX 33 /* a rule's name and its NUL (CFG_NAME_MAX) */
/* How long one whole read of the admin rows vouches for the cache, and
 * the value of a read that vouches for nothing: src/base/fresh.h's, which
 * the admin snapshot's blocks share. */
#define RCACHE_FRESH_MS FRESH_MS
#define RCACHE_NEVER FRESH_NEVER

struct rcache;
struct cfg_rule;

/* Which script refused: an issue's and a verify's refusals of one rule
 * state are separate entries (a verify lock is answered differently). */
enum rcache_op { RCACHE_ISSUE = 0, RCACHE_VERIFY = 1, RCACHE_OPS };

/* What the cached refusal answers. */
enum rcache_outcome { RCACHE_RATE_LIMITED = 0, RCACHE_LOCKED = 1 };

/* One cached refusal as given to rcache_put and returned by rcache_get. */
struct rcache_value {
    enum rcache_outcome outcome;
    char rule[RCACHE_NAME_MAX]; /* the refusing rule's name: the answer's reason */
    int64_t quota;              /* the RateLimit header's q: the rule's limit (with an override) */
    int64_t window_s;           /* its w */
    int64_t deadline_ms;        /* local monotonic: answered while now_ms < deadline_ms */
    int64_t end_ms;             /* local monotonic: the refusal's end as Redis gave it (t0 + retry),
                                 * which an answer's Retry-After counts down to; deadline_ms is
                                 * earlier by rcache_deadline_ms's margin for clock rates */
    int penalty;                /* 1: hits count toward the rule's penalty (rcache_take_hits) */
    int64_t count_from_ms;      /* local monotonic: with penalty, only hits from then on count
                                 * (a penalty block's end: Redis counts no refusal during a
                                 * block, so a hit in one must not reach the flush); 0: all */
};

/* Refusals answered from an entry since its last rcache_take_hits, for a
 * rule with a penalty: what the flush adds to the penalty's count. */
struct rcache_hits {
    char key[300];  /* LIMITS_KEY_LEN */
    char field[300];
    char rule[RCACHE_NAME_MAX];
    uint32_t n;
};

struct rcache_stats {
    uint64_t hits[RCACHE_OPS]; /* requests answered from the cache (rcache_count_hit) */
    uint64_t entries;          /* entries held now, expired ones not yet dropped included */
    uint64_t evictions;        /* entries dropped for room (LRU) */
};

/* 1 when a refusal of rule r may be cached: r is enforced, and its refusal
 * can end before its Retry-After only by an admin change or a reload (each
 * clears the cache): a sliding log's oldest counted entry, a fixed
 * window's end, a resend delay and a wrong-guess lock move only with time,
 * and so does a penalty block of these. A token bucket's or a sliding
 * window counter's refusal is left out: their wait is exact too, but
 * whether a refusal came from a block cannot be told from the reply, and
 * no test proves those two. A shadow rule blocks nothing, so its would-be
 * refusal is never stored, nor looked up: callers ask with the rule in
 * force now, so a reload to shadow ends its cached refusals too. Pure. */
int rcache_cacheable(const struct cfg_rule *r);

/* A cache of at most max_entries entries (at least one per shard when
 * nonzero). NULL when max_entries is 0 (the cache is off) or out of memory;
 * every other call takes NULL as "off" and does nothing. */
struct rcache *rcache_new(size_t max_entries);
void rcache_free(struct rcache *c);

/* The deadline of a refusal whose script call began at local t0_ms (read
 * just before the call) and which Redis said ends retry_ms after its
 * decision: Redis decided at some moment after t0, so the refusal ends no
 * earlier than t0_ms + retry_ms on our clock while Redis's clock runs no
 * faster than ours. It is another host's wall clock, which NTP may slew
 * (up to 500 ppm) the other way from ours: the deadline is retry_ms / 1000
 * earlier, exact for clocks up to 1,000 ppm apart (a refusal of an hour is
 * answered from memory 3.6 s less, then Redis is asked again). And 1 ms
 * earlier again: the scripts' now is Redis's clock in whole ms, floored,
 * so retry_ms may be up to 1 ms more than the wait left (CI saw a cached
 * refusal of a 1 ms wait answered at the very ms Redis's state ended). A
 * step of Redis's clock is not covered. Pure. */
int64_t rcache_deadline_ms(int64_t t0_ms, int64_t retry_ms);

/* 1 when memory may answer at now_ms: the admin rows were last read whole
 * at read_ms (local monotonic, taken before the read began; RCACHE_NEVER
 * when never, or when the last read failed), at most RCACHE_FRESH_MS
 * before now_ms. A read_ms after now_ms (a read that began after the
 * caller took now_ms) is fresh. fresh_ok (src/base/fresh.h), the rule the
 * admin snapshot's blocks follow too. Pure. */
int rcache_fresh(int64_t read_ms, int64_t now_ms);

/* Sets the read that vouches for the cache (as rcache_fresh takes it):
 * rcache_get answers nothing while it is not fresh, and keeps its entries
 * (the next good read sees any change made meanwhile, and the caller
 * clears then). A new cache has none (RCACHE_NEVER). */
void rcache_vouch(struct rcache *c, int64_t read_ms);

/* The generation: read it before anything the refusal rests on (the
 * rules snapshot, then the script call) and pass it to rcache_put, which
 * drops the entry when a clear ran in between (the refusal may come from
 * the rules or the state the clear was for). */
uint64_t rcache_gen(struct rcache *c);

/* Stores (or replaces) the refusal of op on key/field, unless gen is no
 * longer current or v's deadline is not after now_ms. Evicts the least
 * recently used entry of the shard when it is full. Returns 1 when stored. */
int rcache_put(struct rcache *c, uint64_t gen, enum rcache_op op, const char *key, const char *field,
               const struct rcache_value *v, int64_t now_ms);

/* 1 with the entry of op on key/field in *out while now_ms < its deadline
 * and the cache's vouching read is fresh at now_ms (it becomes the most
 * recently used; with a penalty, the hit is counted for rcache_take_hits
 * once now_ms >= its count_from_ms); else 0 (an expired entry is dropped;
 * a stale cache looks nothing up). */
int rcache_get(struct rcache *c, enum rcache_op op, const char *key, const char *field, int64_t now_ms,
               struct rcache_value *out);

/* Counts one request of op answered from the cache, for /metrics. */
void rcache_count_hit(struct rcache *c, enum rcache_op op);

/* Drops every entry (a reload, an admin change) and moves the generation. */
void rcache_clear(struct rcache *c);

/* Drops every entry on Redis key key, any op and field (an abandon gave
 * back takes there), and moves the generation. */
void rcache_clear_key(struct rcache *c, const char *key);

/* Moves up to cap entries' uncounted penalty hits into out (each entry's
 * count goes back to 0; an entry dropped since its hits keeps them until
 * taken here). Returns how many were written; call again while it fills
 * out. */
size_t rcache_take_hits(struct rcache *c, struct rcache_hits *out, size_t cap);

void rcache_stats(struct rcache *c, struct rcache_stats *out);

#endif
