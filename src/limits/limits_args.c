/*
 * limits_args: issue.lua's and verify.lua's KEYS and ARGV, built from a
 * request, the rules snapshot (its overrides and caps) and the fleet's
 * queue. Pure: no clock, no Redis, no lock; once per request, so it writes
 * only what the call reads (a verify's call is on the stack, uncleared).
 * Every ARGV goes to the index limits_int.h names, so the layout is the
 * enum's and the script's (both name it the same).
 */
#include <stdio.h>
#include <string.h>

#include "limits_int.h"

void limits_args_init(struct limits_args *a)
{
    a->nkeys = a->n = 0;
}

void limits_args_key(struct limits_args *a, const char *key)
{
    a->v[a->nkeys++] = key;
    a->n = a->nkeys;
}

void limits_args_keys(struct limits_args *a, const struct limits_undo *u)
{
    int k;

    limits_args_init(a);
    for (k = 0; k < u->nkeys; k++)
        limits_args_key(a, u->keys[k]);
}

/* The slot of ARGV[i], and a->n past it. */
static int argv_slot(struct limits_args *a, int i)
{
    int at = a->nkeys + i - 1;

    if (at + 1 > a->n)
        a->n = at + 1;
    return at;
}

void limits_argv_str(struct limits_args *a, int i, const char *s)
{
    a->v[argv_slot(a, i)] = s;
}

char *limits_argv_buf(struct limits_args *a, int i)
{
    int at = argv_slot(a, i);

    a->num[at][0] = '\0';
    a->v[at] = a->num[at];
    return a->num[at];
}

void limits_argv_int(struct limits_args *a, int i, int64_t x)
{
    snprintf(limits_argv_buf(a, i), sizeof(a->num[0]), "%lld", (long long)x);
}

/* A rule's mode (RA_MODE): "1" shadow, "0" enforced, or with a penalty
 * "<shadow>:<after>:<within_ms>:<block_ms>" (at most 31 characters). One
 * value, so the rule's group stays RA_N. */
static void args_mode(struct limits_args *a, int i, const struct cfg_rule *r)
{
    if (r->penalty_after > 0)
        snprintf(limits_argv_buf(a, i), sizeof(a->num[0]), "%d:%lld:%lld:%lld", r->shadow ? 1 : 0,
                 (long long)r->penalty_after, (long long)r->penalty_within_ms, (long long)r->penalty_block_ms);
    else
        limits_argv_str(a, i, r->shadow ? "1" : "0");
}

/* rq's extra rules after the config's, each at its own key and field;
 * c->overflow when one finds no room (the call must not run without it). */
static void extras_pick(const struct limits_request *rq, int keys_max, struct limits_undo *u, struct limits_call *c)
{
    size_t i;
    int k;

    for (i = 0; i < rq->n_extra && i < LIMITS_EXTRA_MAX; i++) {
        const struct limits_extra *x = &rq->extra[i];
        for (k = 0; k < u->nkeys && strcmp(u->keys[k], x->key) != 0; k++)
            ;
        if (c->n_used == LIMITS_RULES_MAX || (k == u->nkeys && u->nkeys == keys_max)) {
            c->overflow = 1;
            return;
        }
        if (k == u->nkeys)
            snprintf(u->keys[u->nkeys++], sizeof(u->keys[0]), "%s", x->key);
        snprintf(c->fields[c->n_used], sizeof(c->fields[0]), "%s", x->field);
        c->key_of[c->n_used] = k + 1;
        c->used[c->n_used++] = &x->rule;
    }
    if (rq->n_extra > LIMITS_EXTRA_MAX)
        c->overflow = 1;
}

/* The rules of rs a call runs for rq (all but those only on skip, and
 * those whose key rq lacks: limits_rule_key), each with an override
 * applied, into c; their keys join u's after the phone's, at most
 * keys_max in all. */
static void rules_pick(const struct limits_rules *rs, const struct limits_request *rq, enum cfg_on skip,
                       int keys_max, struct limits_undo *u, struct limits_call *c)
{
    char key[LIMITS_KEY_LEN];
    size_t i;
    int k;

    c->n_used = 0;
    u->nkeys = 1;
    limits_phone_key(rq, u->keys[0], sizeof(u->keys[0]));
    for (i = 0; i < rs->n_rules && c->n_used < LIMITS_RULES_MAX; i++) {
        const struct cfg_rule *r = &rs->rules[i];
        if (r->on == skip || !limits_rule_key(r, rq, key, sizeof(key), c->fields[c->n_used], LIMITS_KEY_LEN))
            continue;
        r = limits_rule_eff(rs, r, key, c->fields[c->n_used], &c->eff[c->n_used]);
        for (k = 0; k < u->nkeys && strcmp(u->keys[k], key) != 0; k++)
            ;
        if (k == u->nkeys) {
            if (u->nkeys == keys_max)
                continue; /* config_load bounds rules' keys; never here */
            snprintf(u->keys[u->nkeys++], sizeof(u->keys[0]), "%s", key);
        }
        c->key_of[c->n_used] = k + 1;
        c->used[c->n_used++] = r;
    }
    c->n_config = c->n_used;
    c->overflow = 0;
    if (skip == CFG_ON_VERIFY) /* an issue */
        extras_pick(rq, keys_max, u, c);
}

/* The rules' groups from ARGV[base]. */
static void rules_args(struct limits_args *a, int base, const struct limits_call *c)
{
    size_t i;

    for (i = 0; i < c->n_used; i++) {
        const struct cfg_rule *r = c->used[i];
        int at = base + (int)i * RA_N;
        limits_argv_int(a, at + RA_KIND, (int64_t)r->algo + 1);
        limits_argv_int(a, at + RA_KEY, c->key_of[i]);
        limits_argv_str(a, at + RA_FIELD, c->fields[i]);
        limits_argv_int(a, at + RA_LIMIT, r->limit);
        limits_argv_int(a, at + RA_WINDOW, r->window_ms);
        limits_argv_int(a, at + RA_BURST, r->burst);
        args_mode(a, at + RA_MODE, r);
    }
}

/* Appends an Idempotency-Key's two KEYS to u's (when rq has one) and sets
 * u->idem_at. */
static void idem_keys(const struct limits_request *rq, struct limits_undo *u)
{
    u->idem_at = 0;
    if (rq->idem == NULL)
        return;
    snprintf(u->keys[u->nkeys], sizeof(u->keys[0]), "%s", rq->idem->key);
    u->idem_at = ++u->nkeys;
    snprintf(u->keys[u->nkeys++], sizeof(u->keys[0]), "%s", rq->idem->count);
}

/* An Idempotency-Key's group from ARGV[base] (all "0" but the hash, "",
 * when rq has none). */
static void idem_args(struct limits_args *a, int base, const struct limits_request *rq, const struct limits_undo *u)
{
    limits_argv_int(a, base + XA_KEY, u->idem_at);
    limits_argv_str(a, base + XA_HASH, rq->idem ? rq->idem->hash : "");
    limits_argv_int(a, base + XA_CLAIM_MS, rq->idem ? rq->idem->claim_ms : 0);
    limits_argv_int(a, base + XA_MAX_KEYS, rq->idem ? rq->idem->max_keys : 0);
}

/* The pumping guard's group, the last of the list from ARGV[base] (PA_N
 * of them for an issue, PA_VERIFY_N for a verify); key is its KEYS index,
 * 0 when off. */
static void pump_args(struct limits_args *a, int base, const struct cfg_pumping *g, int key, int verify)
{
    limits_argv_str(a, base + PA_WORD, "pump");
    limits_argv_int(a, base + PA_KEY, key);
    limits_argv_int(a, base + PA_WINDOW, g->window_ms);
    if (verify)
        return;
    limits_argv_int(a, base + PA_MIN_SENT, g->min_sent);
    limits_argv_int(a, base + PA_RATIO, g->min_ratio_ppm);
    limits_argv_int(a, base + PA_HOLD, g->hold_ms);
    limits_argv_str(a, base + PA_SHADOW, g->shadow ? "1" : "0");
}

/* The caps' groups from ARGV[base]: each cap's field (named by its window;
 * a caller's cap also by the caller, in c->capf: longer than a number),
 * window and max. */
static void caps_args(struct limits_call *c, int base, const struct limits_rules *rs, const char *api_key)
{
    struct limits_args *a = &c->args;
    size_t i;

    for (i = 0; i < rs->n_caps && i < LIMITS_CAPS_MAX; i++) {
        int at = base + (int)i * CA_N;
        if (rs->caps[i].per_key) {
            limits_cap_key_field(rs->caps[i].window_ms, api_key, c->capf[i], sizeof(c->capf[i]));
            limits_argv_str(a, at + CA_FIELD, c->capf[i]);
        } else {
            limits_cap_field(rs->caps[i].window_ms, limits_argv_buf(a, at + CA_FIELD), sizeof(a->num[0]));
        }
        limits_argv_int(a, at + CA_WINDOW, rs->caps[i].window_ms);
        limits_argv_int(a, at + CA_MAX, rs->caps[i].max_minor);
    }
}

/* issue.lua's KEYS after the rules': the cost's, the pumping guard's, the
 * shares', an Idempotency-Key's and the IK_TAIL last ones; their indexes
 * (0: absent) into cost_key, pump_at and share_key. */
static void issue_keys(const struct limits_rules *rs, const struct limits_request *rq, const struct limits_fleet *q,
                       struct limits_issue *out, int *cost_key, int *pump_at, int *share_key)
{
    struct limits_undo *u = &out->undo;

    *cost_key = *pump_at = *share_key = 0;
    if (out->price_minor >= 0) {
        snprintf(u->keys[u->nkeys], sizeof(u->keys[0]), "otp:cost");
        *cost_key = ++u->nkeys;
    }
    if (rs->pumping.on && fraud_prefix(rq->phone, rs->pumping.prefix_digits, out->pump_prefix,
                                       sizeof(out->pump_prefix))) {
        limits_pump_key(out->pump_prefix, u->keys[u->nkeys], sizeof(u->keys[0]));
        *pump_at = ++u->nkeys;
    }
    if (q->share > 0) {
        snprintf(u->keys[u->nkeys], sizeof(u->keys[0]), "%s", STORE_SHARE_KEY);
        *share_key = ++u->nkeys;
    }
    idem_keys(rq, u);
    snprintf(u->keys[u->nkeys + IK_TAIL - 1 - IK_QUEUE], sizeof(u->keys[0]), "%s",
             rq->lane ? rq->lane->stream : STORE_QUEUE_KEY);
    snprintf(u->keys[u->nkeys + IK_TAIL - 1 - IK_HOLDS], sizeof(u->keys[0]), "%s", STORE_HOLDS_KEY);
    store_msg_key(rq->mid, u->keys[u->nkeys + IK_TAIL - 1 - IK_MSG], sizeof(u->keys[0]));
    limits_undo_key(rq->rid, u->keys[u->nkeys + IK_TAIL - 1 - IK_UNDO], sizeof(u->keys[0]));
    u->nkeys += IK_TAIL;
}

/* issue.lua's message group from ARGV[base]. */
static void msg_args(struct limits_args *a, int base, const struct limits_request *rq, const struct limits_fleet *q,
                     const struct limits_issue *out, int share_key)
{
    limits_argv_int(a, base + MA_CAPACITY, rq->lane ? rq->lane->capacity : q->capacity);
    limits_argv_int(a, base + MA_HOLD_MS, LIMITS_HOLD_MS);
    limits_argv_str(a, base + MA_MID, rq->mid);
    limits_argv_str(a, base + MA_API_KEY, rq->api_key);
    limits_argv_str(a, base + MA_CAPS_TEXT, out->cost_caps);
    limits_argv_str(a, base + MA_PHONE, rq->phone);
    limits_argv_int(a, base + MA_SHARE, q->share);
    limits_argv_int(a, base + MA_SHARE_KEY, share_key);
    limits_argv_str(a, base + MA_STYLE, rq->style ? rq->style : "");
}

void limits_issue_args(const struct limits_rules *rs, const struct limits_request *rq, const struct limits_fleet *q,
                       struct limits_issue *out, struct limits_call *c)
{
    struct limits_undo *u = &out->undo;
    struct limits_args *a = &c->args;
    int cost_key, pump_at, share_key, caps_at, msg_at;
    size_t n_caps = rs->n_caps < LIMITS_CAPS_MAX ? rs->n_caps : LIMITS_CAPS_MAX;

    u->verify = 0;
    c->wrong = NULL;
    /* Room for IK_TAIL more and the others' at most 9 (config_load bounds rules' keys). */
    rules_pick(rs, rq, CFG_ON_VERIFY, LIMITS_KEYS_MAX - 9, u, c);
    out->price_minor = rs->n_caps == 0                         ? -1
                       : rq->lane && rq->lane->prices != NULL ? config_price_in(rq->lane->prices, rq->lane->n_prices, rq->phone)
                                                               : config_price_in(rs->prices, rs->n_prices, rq->phone);
    limits_cost_caps(rs, rq->api_key, out->cost_caps, sizeof(out->cost_caps));
    issue_keys(rs, rq, q, out, &cost_key, &pump_at, &share_key);
    limits_args_keys(a, u);
    limits_argv_str(a, IA_OP, "i");
    limits_argv_str(a, IA_VID, rq->vid);
    limits_argv_str(a, IA_VHASH, rq->vhash);
    limits_argv_int(a, IA_TTL, rq->ttl_ms);
    limits_argv_int(a, IA_MAX_ATTEMPTS, rq->max_attempts);
    limits_argv_int(a, IA_PRICE, out->price_minor);
    limits_argv_int(a, IA_NRULES, (int64_t)c->n_used);
    limits_argv_int(a, IA_NCAPS, (int64_t)n_caps);
    limits_argv_int(a, IA_COST_KEY, cost_key);
    limits_argv_int(a, IA_UNDO_TTL, LIMITS_UNDO_TTL_MS);
    limits_argv_str(a, IA_SCOPE, rq->scope);
    limits_argv_int(a, IA_AT, rq->at_ms);
    rules_args(a, IA_RULES, c);
    caps_at = IA_RULES + (int)c->n_used * RA_N;
    caps_args(c, caps_at, rs, rq->api_key);
    msg_at = caps_at + (int)n_caps * CA_N;
    msg_args(a, msg_at, rq, q, out, share_key);
    idem_args(a, msg_at + MA_N, rq, u);
    pump_args(a, msg_at + MA_N + XA_N, &rs->pumping, pump_at, 0); /* last: issue.lua reads them from the end */
    snprintf(u->hold, sizeof(u->hold), "%s:%s", rq->mid, rq->rid);
}

/* The wrong-guess rule of rs (the last), as it applies to rq's state, into
 * c (c->wrong NULL: none, or rq lacks a value of its key). */
static void wrong_pick(const struct limits_rules *rs, const struct limits_request *rq, struct limits_call *c)
{
    size_t i;

    c->wrong = NULL;
    c->wfield[0] = '\0';
    for (i = 0; i < rs->n_rules; i++)
        if (rs->rules[i].algo == CFG_ALGO_WRONG_GUESS_CAP)
            c->wrong = &rs->rules[i];
    /* Its key holds phone (config_load), so its state is in the phone's
     * hash; a composite key (["phone", "api_key"]) gives each caller its
     * own count and lock. */
    if (c->wrong != NULL &&
        !limits_rule_key(c->wrong, rq, c->wkey, sizeof(c->wkey), c->wfield, sizeof(c->wfield)))
        c->wrong = NULL;
    if (c->wrong != NULL)
        c->wrong = limits_rule_eff(rs, c->wrong, c->wkey, c->wfield, &c->wrong_eff);
}

void limits_verify_args(const struct limits_rules *rs, const struct limits_request *rq, const char *guess_hash,
                        int max_attempts, struct limits_undo *u, struct limits_call *c)
{
    const struct cfg_rule *wrong;
    struct limits_args *a = &c->args;
    int pump_at = 0, idem_at;
    char prefix[PHONE_MAX];

    u->verify = 1;
    u->hold[0] = '\0'; /* a verify holds nothing (limits_commit, the abandon send it) */
    wrong_pick(rs, rq, c);
    wrong = c->wrong;
    /* Room stays for the pump's, an Idempotency-Key's two and the undo key. */
    rules_pick(rs, rq, CFG_ON_ISSUE, LIMITS_KEYS_MAX - 3, u, c);
    if (rs->pumping.on && fraud_prefix(rq->phone, rs->pumping.prefix_digits, prefix, sizeof(prefix))) {
        limits_pump_key(prefix, u->keys[u->nkeys], sizeof(u->keys[0]));
        pump_at = ++u->nkeys;
    }
    idem_keys(rq, u);
    limits_undo_key(rq->rid, u->keys[u->nkeys++], sizeof(u->keys[0]));
    limits_args_keys(a, u);
    limits_argv_str(a, VA_OP, "v");
    limits_argv_str(a, VA_GUESS, guess_hash);
    limits_argv_int(a, VA_MAX_ATTEMPTS, max_attempts);
    limits_argv_str(a, VA_WRONG_FIELD, wrong ? c->wfield : "");
    limits_argv_int(a, VA_WRONG_LIMIT, wrong ? wrong->limit : 0);
    limits_argv_int(a, VA_WRONG_WINDOW, wrong ? wrong->window_ms : 1);
    limits_argv_str(a, VA_WRONG_SHADOW, wrong && wrong->shadow ? "1" : "0");
    limits_argv_int(a, VA_UNDO_TTL, LIMITS_UNDO_TTL_MS);
    limits_argv_str(a, VA_SCOPE, rq->scope);
    limits_argv_int(a, VA_NRULES, (int64_t)c->n_used);
    limits_argv_int(a, VA_AT, rq->at_ms);
    rules_args(a, VA_RULES, c);
    idem_at = VA_RULES + (int)c->n_used * RA_N;
    idem_args(a, idem_at, rq, u);
    pump_args(a, idem_at + XA_N, &rs->pumping, pump_at, 1); /* last: verify.lua reads them from the end */
}
