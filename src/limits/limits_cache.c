/*
 * limits_cache: the refusal cache's glue (rcache.h; README, "The refusal
 * cache"). What limits_issue and limits_verify learn goes in; a repeat of
 * an enforced refusal that only time can end is answered from memory, with
 * no Redis call, on every request it covers (a lock, a lookup per rule);
 * the hits count toward their rules' penalties in a batch on the main
 * thread's tick.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "limits_int.h"

int64_t limits_mono_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000);
}

void limits_cache_put(struct limits *l, uint64_t gen, enum rcache_op op, const struct cfg_rule *r, int locked,
                      const char *key, const char *field, int64_t t0, int64_t t1, int64_t reset_ms, int penalty,
                      int64_t block_ms)
{
    struct rcache_value v = {0};

    v.outcome = locked ? RCACHE_LOCKED : RCACHE_RATE_LIMITED;
    snprintf(v.rule, sizeof(v.rule), "%s", r->name);
    v.quota = r->limit;
    v.window_s = limits_ceil_s(r->window_ms);
    v.deadline_ms = rcache_deadline_ms(t0, reset_ms);
    v.end_ms = t0 + reset_ms;
    v.penalty = penalty;
    v.count_from_ms = block_ms > 0 ? t1 + block_ms : 0;
    rcache_put(l->rc, gen, op, key, field, &v, limits_mono_ms());
}

/* A refusal counts toward its rule's penalty in both scripts, except
 * during a block (a refusal's remaining is minus the block's ms left). */
void limits_cache_verdicts(struct limits *l, uint64_t gen, enum rcache_op op, const struct limits_call *c,
                           char (*keys)[LIMITS_KEY_LEN], const long long *v, int64_t t0, int64_t t1)
{
    size_t i;

    for (i = 0; i < c->n_config; i++) { /* a request's own rules are never cached */
        const struct cfg_rule *r = c->used[i];
        const long long *x = v + i * IR_PER_RULE;
        if (x[IR_RULE_OK] == 1 || !rcache_cacheable(r))
            continue;
        limits_cache_put(l, gen, op, r, r->algo == CFG_ALGO_WRONG_GUESS_CAP, keys[c->key_of[i] - 1], c->fields[i],
                         t0, t1, x[IR_RULE_RESET], r->penalty_after > 0,
                         x[IR_RULE_REMAINING] < 0 ? -x[IR_RULE_REMAINING] : 0);
    }
}

/* The RateLimit fields of a cached refusal: the rule's, nothing left,
 * reset when the refusal ends as Redis gave it (rounded as limits_header_set
 * rounds Redis's). */
static void cached_header(struct limits_header *h, const struct rcache_value *v, int64_t left_ms)
{
    snprintf(h->name, sizeof(h->name), "%s", v->rule);
    h->quota = v->quota;
    h->window_s = v->window_s;
    h->remaining = 0;
    h->reset_s = limits_ceil_s(left_ms);
}

/* 1 when rule r's state for rq has a refusal of op in the cache at now,
 * into v; 0 when r is not cacheable or nothing is remembered. */
static int cached_rule(struct limits *l, const struct cfg_rule *r, enum rcache_op op,
                       const struct limits_request *rq, int64_t now, struct rcache_value *v)
{
    char key[LIMITS_KEY_LEN], field[LIMITS_KEY_LEN];

    return rcache_cacheable(r) && limits_rule_key(r, rq, key, sizeof(key), field, sizeof(field)) &&
           rcache_get(l->rc, op, key, field, now, v);
}

int limits_cached_issue(struct limits *l, const struct limits_request *rq, struct limits_issue *out)
{
    struct rcache_value v, why = {0};
    struct limits_rules *rs;
    int64_t now, wait = 0;
    size_t i;
    int hits = 0, locked = 0;

    if (l->rc == NULL)
        return 0;
    now = limits_mono_ms();
    rs = limits_rules_get(l);
    /* Every rule is looked up, not only until a hit: each hit counts toward
     * its rule's penalty, as each refusing rule would in the script. */
    for (i = 0; i < rs->n_rules; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->on == CFG_ON_VERIFY || !cached_rule(l, r, RCACHE_ISSUE, rq, now, &v))
            continue;
        hits++;
        if (v.end_ms - now > wait)
            wait = v.end_ms - now;
        /* As issue_read names it: the lock, else the longest refusal. */
        if ((v.outcome == RCACHE_LOCKED && !locked) || (locked == (v.outcome == RCACHE_LOCKED) && v.end_ms > why.end_ms)) {
            why = v;
            locked = v.outcome == RCACHE_LOCKED;
        }
    }
    limits_rules_put(l, rs);
    if (hits == 0)
        return 0;
    out->rc = locked ? OTP_ELOCKED : OTP_ELIMITED;
    snprintf(out->reason, sizeof(out->reason), "%s", why.rule);
    out->retry_ms = wait;
    cached_header(&out->header, &why, why.end_ms - now);
    rcache_count_hit(l->rc, RCACHE_ISSUE);
    return 1;
}

int limits_cached_verify(struct limits *l, const struct limits_request *rq, struct limits_verify *out)
{
    struct rcache_value v, why = {0};
    const struct cfg_rule *wrong = NULL;
    struct limits_rules *rs;
    int64_t now;
    size_t i;
    int hits = 0;

    if (l->rc == NULL)
        return 0;
    now = limits_mono_ms();
    rs = limits_rules_get(l);
    for (i = 0; i < rs->n_rules; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->algo == CFG_ALGO_WRONG_GUESS_CAP)
            wrong = r; /* the one limits_verify uses: the last */
        if (r->on == CFG_ON_ISSUE || r->algo == CFG_ALGO_WRONG_GUESS_CAP ||
            !cached_rule(l, r, RCACHE_VERIFY, rq, now, &v))
            continue;
        hits++;
        if (v.end_ms > why.end_ms)
            why = v; /* as verify_rules_read: the longest refusal, and its wait */
    }
    /* verify.lua checks the verify rules first, then the lock. */
    if (hits == 0 && wrong != NULL && cached_rule(l, wrong, RCACHE_VERIFY, rq, now, &why))
        hits++;
    limits_rules_put(l, rs);
    if (hits == 0)
        return 0;
    out->rc = why.outcome == RCACHE_LOCKED ? OTP_ELOCKED : OTP_ELIMITED;
    snprintf(out->reason, sizeof(out->reason), "%s", why.rule);
    out->retry_ms = why.end_ms - now;
    cached_header(&out->header, &why, why.end_ms - now);
    rcache_count_hit(l->rc, RCACHE_VERIFY);
    return 1;
}

void limits_cache_clear(struct limits *l)
{
    rcache_clear(l->rc);
}

void limits_cache_vouch(struct limits *l, int64_t read_ms)
{
    rcache_vouch(l->rc, read_ms);
}

/* Penalty states per op 'p' call: 1 + PN_N * 32 ARGV, within LIMITS_ARGS_MAX. */
#define LIMITS_PEN_BATCH 32

/* Op 'p''s arguments for the hits h[0..n-1] under the rules rs: KEYS each
 * hit's key, then one pen_argv group per hit whose rule (still) has a
 * penalty. Returns how many groups. */
static int pen_args(struct limits_args *a, const struct limits_rules *rs, const struct rcache_hits *h, size_t n)
{
    size_t i, j;
    int groups = 0;

    limits_args_init(a);
    for (i = 0; i < n; i++)
        limits_args_key(a, h[i].key);
    limits_argv_str(a, IA_OP, "p");
    for (i = 0; i < n; i++) {
        const struct cfg_rule *r = NULL;
        int at = IA_PENALTIES + groups * PN_N;
        for (j = 0; j < rs->n_rules && r == NULL; j++)
            if (strcmp(rs->rules[j].name, h[i].rule) == 0)
                r = &rs->rules[j];
        /* A rule gone, or without a penalty since (a reload): nothing to count. */
        if (r == NULL || r->shadow || r->penalty_after <= 0)
            continue;
        limits_argv_int(a, at + PN_KEY, (int64_t)i + 1);
        limits_argv_str(a, at + PN_FIELD, h[i].field);
        limits_argv_int(a, at + PN_AFTER, r->penalty_after);
        limits_argv_int(a, at + PN_WITHIN, r->penalty_within_ms);
        limits_argv_int(a, at + PN_BLOCK, r->penalty_block_ms);
        limits_argv_int(a, at + PN_COUNT, (int64_t)h[i].n);
        groups++;
    }
    return groups;
}

void limits_penalties_flush(struct limits *l)
{
    struct rcache_hits *h = NULL;
    struct limits_args *a = NULL;
    struct limits_rules *rs;
    struct store_reply *rep = NULL;
    char err[OTP_ERR_LEN];
    size_t n;

    if (l->rc == NULL)
        return;
    h = calloc(LIMITS_PEN_BATCH, sizeof(*h));
    a = calloc(1, sizeof(*a));
    rs = limits_rules_get(l);
    while (h != NULL && a != NULL && (n = rcache_take_hits(l->rc, h, LIMITS_PEN_BATCH)) > 0) {
        if (pen_args(a, rs, h, n) == 0)
            continue;
        if (store_eval(l->store, l->h_issue, a->nkeys, a->n, a->v, &rep, err) != OTP_OK)
            log_msg(LOG_WARN, "limits: %zu cached refusals not counted toward their penalties: %s", n, err);
        store_reply_free(rep);
        rep = NULL;
    }
    limits_rules_put(l, rs);
    free(a);
    free(h);
}
