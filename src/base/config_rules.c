/*
 * config_rules: the rules (limits, docs/rules.md): each rule's name, key,
 * algorithm and its bounds, mode, fallback and penalty, the Redis field
 * every rule's state lives in, and the bounds of a limit that config and
 * admin overrides share. Runs at start-up and on SIGHUP (config_limit_*
 * also on an admin override), never per request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"

static const char *const cfg_key_names[] = {"phone",  "device",  "client_ip",    "api_key",
                                            "global", "purpose", "phone_prefix", "region", NULL};
const char *const cfg_on_names[] = {"issue", "verify", "both", NULL};
const char *const cfg_mode_names[] = {"enforce", "shadow", NULL};
const char *const cfg_down_names[] = {"fail_closed", "local_fallback", NULL};
const char *const cfg_algo_names[] = {"sliding_log",  "fixed_window",    "token_bucket",
                                      "resend_delay", "wrong_guess_cap", "sliding_window_counter", NULL};

const char *config_key_name(enum cfg_key k)
{
    return cfg_key_names[k];
}

const char *config_algo_name(enum cfg_algo a)
{
    return cfg_algo_names[a];
}

/* Reads one key kind ("phone", "phone_prefix:7", ...) into *kind and, for
 * phone_prefix, *digits. 0 when s is none of them. */
static int cfg_key_one(const char *s, int *kind, int *digits)
{
    int i;
    char *end;
    long n;

    if (strncmp(s, "phone_prefix:", 13) == 0) {
        n = strtol(s + 13, &end, 10);
        if (s[13] < '1' || s[13] > '9' || *end != '\0' || n < 1 || n > 15)
            return 0;
        *kind = CFG_KEY_PHONE_PREFIX;
        *digits = (int)n;
        return 1;
    }
    for (i = 0; cfg_key_names[i]; i++)
        if (i != CFG_KEY_PHONE_PREFIX && strcmp(cfg_key_names[i], s) == 0) {
            *kind = i;
            return 1;
        }
    return 0;
}

/* A rule's "key": one kind, or a list of 1 to 4 distinct kinds (a composite
 * key such as ["phone", "api_key"]: one counter per combination). *first
 * is the lowest kind, whose Redis key holds the state; -1 when invalid. */
static void cfg_rule_key(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule, int *first)
{
    json_t *v = cfg_member(x, r, p, "key", 1), *e;
    char q[96];
    size_t i, n;
    int kind, digits = 0;

    *first = -1;
    if (v == NULL)
        return;
    cfg_path(q, sizeof(q), p, "key");
    n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n < 1 || n > 4) {
        cfg_error(x, q, "must be a key name or a list of 1 to 4 key names");
        return;
    }
    rule->key_mask = 0;
    for (i = 0; i < n; i++) {
        e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(e) || !cfg_key_one(json_string_value(e), &kind, &digits)) {
            cfg_error(x, q, "\"%s\" is not one of the allowed values",
                      json_is_string(e) ? json_string_value(e) : "(not a string)");
            rule->key_mask = 0;
            return;
        }
        if (rule->key_mask & (1u << kind)) {
            cfg_error(x, q, "names \"%s\" twice", config_key_name((enum cfg_key)kind));
            rule->key_mask = 0;
            return;
        }
        rule->key_mask |= 1u << kind;
        if (kind == CFG_KEY_PHONE_PREFIX)
            rule->prefix_digits = digits;
    }
    if (n > 1 && (rule->key_mask & (1u << CFG_KEY_GLOBAL))) {
        cfg_error(x, q, "global cannot be part of a composite key");
        rule->key_mask = 0;
        return;
    }
    for (kind = 0; !(rule->key_mask & (1u << kind)); kind++)
        ;
    *first = kind;
}

/* A rule's optional "penalty" {after, within, block}: every key but
 * wrong_guess_cap's (its lock is its penalty). */
static void cfg_penalty(struct cfg_ctx *x, json_t *r, const char *parent, struct cfg_rule *rule, int algo)
{
    static const char *const durs[] = {"within", "block"};
    json_t *o = json_object_get(r, "penalty");
    int64_t *dur_ms[] = {&rule->penalty_within_ms, &rule->penalty_block_ms};
    char p[96], q[128];
    int ok = 1;
    size_t i;

    if (o == NULL)
        return;
    cfg_path(p, sizeof(p), parent, "penalty");
    if (!json_is_object(o)) {
        cfg_error(x, p, "must be an object {\"after\": N, \"within\": DURATION, \"block\": DURATION}");
        return;
    }
    if (algo == CFG_ALGO_WRONG_GUESS_CAP) {
        cfg_error(x, p, "does not apply to wrong_guess_cap (its lock is its penalty)");
        return;
    }
    cfg_unknown(x, o, p, "limits.*.penalty");
    ok &= cfg_int(x, o, p, "after", 1, 1, 1000000, &rule->penalty_after);
    for (i = 0; i < 2; i++) {
        if (!cfg_dur(x, o, p, durs[i], 1, dur_ms[i])) {
            ok = 0;
        } else if (*dur_ms[i] < 1000 || *dur_ms[i] > CFG_30D_MS) {
            cfg_error(x, cfg_path(q, sizeof(q), p, durs[i]), "must be from 1s to 30d");
            ok = 0;
        }
    }
    if (!ok)
        rule->penalty_after = 0;
}

#define CFG_RULE_CHARS "abcdefghijklmnopqrstuvwxyz0123456789_"

/* A rule's name: 1 to 32 of a-z, 0-9 and _, and not the name of a rule
 * before it. */
static void cfg_rule_name(struct cfg_ctx *x, const struct config *c, json_t *r, const char *p,
                          struct cfg_rule *rule)
{
    char q[96];
    size_t i;

    if (!cfg_str(x, r, p, "name", 1, rule->name, sizeof(rule->name)))
        return;
    cfg_path(q, sizeof(q), p, "name");
    if (rule->name[0] == '\0' || strspn(rule->name, CFG_RULE_CHARS) != strlen(rule->name))
        cfg_error(x, q, "must be 1 to 32 of a-z, 0-9 and _");
    for (i = 0; i < c->limits.n_rules; i++)
        if (strcmp(c->limits.rules[i].name, rule->name) == 0)
            cfg_error(x, q, "\"%s\" is used twice", rule->name);
}

/* A rule's algorithm and the enums beside it: mode, on, if_store_down.
 * Returns the algorithm, -1 when it is missing or unknown. */
static int cfg_rule_algo(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule)
{
    int algo = -1, mode = 0, on = 0, fb = 0;
    char q[96];

    cfg_enum(x, r, p, "algorithm", 1, cfg_algo_names, &algo);
    cfg_enum(x, r, p, "mode", 0, cfg_mode_names, &mode);
    cfg_enum(x, r, p, "on", 0, cfg_on_names, &on);
    /* A verify counts events; a delay or a wrong-guess cap means nothing there. */
    if (on != CFG_ON_ISSUE && (algo == CFG_ALGO_RESEND_DELAY || algo == CFG_ALGO_WRONG_GUESS_CAP))
        cfg_error(x, cfg_path(q, sizeof(q), p, "on"), "%s rules apply to issue only", cfg_algo_names[algo]);
    cfg_enum(x, r, p, "if_store_down", 0, cfg_down_names, &fb);
    rule->on = (enum cfg_on)on;
    rule->algo = (enum cfg_algo)(algo < 0 ? 0 : algo);
    rule->shadow = mode == 1;
    rule->local_fallback = fb == 1;
    return algo;
}

/* resend_delay takes its delay alone; its limit and burst are 1. */
static void cfg_rule_delay(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule)
{
    static const char *const not_delay[] = {"limit", "window", "burst"};
    char q[96];
    size_t i;

    rule->limit = rule->burst = 1;
    cfg_dur(x, r, p, "delay", 1, &rule->window_ms);
    for (i = 0; i < sizeof(not_delay) / sizeof(not_delay[0]); i++)
        if (json_object_get(r, not_delay[i]))
            cfg_error(x, cfg_path(q, sizeof(q), p, not_delay[i]),
                      "does not apply to resend_delay (it takes delay only)");
}

/* Every other algorithm: a limit within algo's bounds over a window, and
 * a burst for a token bucket alone (default: its limit). */
static void cfg_rule_window(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule,
                            enum cfg_algo algo)
{
    json_t *lim = json_object_get(r, "limit");
    const char *why;
    char q[96];

    /* A sliding log's bound has a reason worth saying; the others are
     * plain ranges. */
    if ((algo == CFG_ALGO_SLIDING_LOG || algo == CFG_ALGO_WRONG_GUESS_CAP) && json_is_integer(lim) &&
        json_integer_value(lim) > 1 && (why = config_limit_why(algo, 0, json_integer_value(lim))) != NULL)
        cfg_error(x, cfg_path(q, sizeof(q), p, "limit"), "must be %s", why);
    else
        cfg_int(x, r, p, "limit", 1, 1, config_limit_max(algo), &rule->limit);
    /* The counter's script weighs counts in exact integer ms (limit x
     * window stays below 2^53); longer quotas are fixed_window's. */
    if (cfg_dur(x, r, p, "window", 1, &rule->window_ms) && algo == CFG_ALGO_SLIDING_WINDOW_COUNTER &&
        rule->window_ms > CFG_30D_MS)
        cfg_error(x, cfg_path(q, sizeof(q), p, "window"),
                  "must be at most 30d for sliding_window_counter (use fixed_window for longer quotas)");
    else if (algo == CFG_ALGO_TOKEN_BUCKET && rule->limit > 0 && rule->window_ms > 0 &&
             (why = config_limit_why(algo, rule->window_ms, rule->limit)) != NULL)
        cfg_error(x, cfg_path(q, sizeof(q), p, "limit"), "must be %s", why);
    if (json_object_get(r, "delay"))
        cfg_error(x, cfg_path(q, sizeof(q), p, "delay"), "applies to resend_delay only");
    rule->burst = rule->limit;
    if (algo == CFG_ALGO_TOKEN_BUCKET)
        cfg_int(x, r, p, "burst", 0, 1, 1000000000, &rule->burst);
    else if (json_object_get(r, "burst"))
        cfg_error(x, cfg_path(q, sizeof(q), p, "burst"), "applies to token_bucket only");
}

/* if_store_down: local_fallback, and local_limit with it, are refused by
 * name (see below); local_limit alone is a mistake. */
static void cfg_rule_fallback(struct cfg_ctx *x, json_t *r, const char *p, struct cfg_rule *rule, int key,
                              int algo)
{
    char q[96];

    if (rule->local_fallback) {
        /* Issue and verify keep the verification itself in Redis, so no
         * request can be decided without it: a local share of a limit would
         * promise an availability otpd cannot give. Say so at load time. */
        if (key == CFG_KEY_PHONE || algo == CFG_ALGO_WRONG_GUESS_CAP || algo == CFG_ALGO_RESEND_DELAY)
            cfg_error(x, cfg_path(q, sizeof(q), p, "if_store_down"),
                      "local_fallback is not allowed for per-phone OTP rules");
        else
            cfg_error(x, cfg_path(q, sizeof(q), p, "if_store_down"),
                      "local_fallback is not available: the verification lives in Redis, so otpd fails "
                      "closed while Redis is down");
        cfg_int(x, r, p, "local_limit", 1, 1, 1000000000, &rule->local_limit);
    } else if (json_object_get(r, "local_limit")) {
        cfg_error(x, cfg_path(q, sizeof(q), p, "local_limit"),
                  "applies with if_store_down: local_fallback only");
    }
}

/* Rule number c->limits.n_rules, the object r shown at path p, in steps:
 * every error of each step is reported, in the order of the rule's keys. */
static void cfg_rule(struct cfg_ctx *x, struct config *c, json_t *r, const char *p)
{
    struct cfg_rule *rule = &c->limits.rules[c->limits.n_rules];
    int key = -1, algo;
    char q[96];

    if (!json_is_object(r)) {
        cfg_error(x, p, "must be an object");
        return;
    }
    cfg_unknown(x, r, p, "limits.*");
    cfg_rule_name(x, c, r, p, rule);
    cfg_rule_key(x, r, p, rule, &key);
    algo = cfg_rule_algo(x, r, p, rule);
    rule->key = (enum cfg_key)(key < 0 ? 0 : key);
    if (algo == CFG_ALGO_RESEND_DELAY)
        cfg_rule_delay(x, r, p, rule);
    else if (algo >= 0)
        cfg_rule_window(x, r, p, rule, (enum cfg_algo)algo);
    if ((algo == CFG_ALGO_WRONG_GUESS_CAP || algo == CFG_ALGO_RESEND_DELAY) && key >= 0 &&
        key != CFG_KEY_PHONE)
        cfg_error(x, cfg_path(q, sizeof(q), p, "key"), "%s rules are keyed on phone", cfg_algo_names[algo]);
    cfg_rule_fallback(x, r, p, rule, key, algo);
    cfg_penalty(x, r, p, rule, algo);
    c->limits.n_rules++;
}

/* Gives every rule its 2-character Redis field (see struct cfg_rule):
 * FNV-1a of the name into 62 * 62 slots. The field depends on the name
 * alone, so a reload never moves a rule's state; two names of one config
 * that meet in one slot are an error (rename one). */
static void cfg_fields(struct cfg_ctx *x, struct config *c)
{
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t i, j;

    for (i = 0; i < c->limits.n_rules; i++) {
        struct cfg_rule *r = &c->limits.rules[i];
        uint32_t h = 2166136261u;
        const char *p;
        char path[64];
        for (p = r->name; *p; p++)
            h = (h ^ (unsigned char)*p) * 16777619u;
        h %= 62 * 62;
        r->field[0] = b62[h / 62];
        r->field[1] = b62[h % 62];
        r->field[2] = '\0';
        for (j = 0; j < i; j++)
            if (strcmp(c->limits.rules[j].field, r->field) == 0 && strcmp(c->limits.rules[j].name, r->name) != 0) {
                snprintf(path, sizeof(path), "limits.%zu.name", i);
                cfg_error(x, path, "\"%s\" and \"%s\" share a Redis field; rename one", c->limits.rules[j].name,
                          r->name);
            }
    }
}

/* limits: at most 32 rules, one wrong_guess_cap among them at most. */
void cfg_limits(struct cfg_ctx *x, struct config *c, json_t *root)
{
    json_t *arr = json_object_get(root, "limits"), *r;
    size_t i, wrong = 0;
    char p[64];

    if (!json_is_array(arr) || json_array_size(arr) > 32) {
        cfg_error(x, "limits", "must be an array of at most 32 rules");
        return;
    }
    if ((c->limits.rules = cfg_calloc(json_array_size(arr) + 1, sizeof(*c->limits.rules))) == NULL) {
        cfg_error(x, "limits", "out of memory");
        return;
    }
    json_array_foreach(arr, i, r) {
        snprintf(p, sizeof(p), "limits.%zu", i);
        cfg_rule(x, c, r, p);
        if (json_is_object(r) && c->limits.rules[c->limits.n_rules - 1].algo == CFG_ALGO_WRONG_GUESS_CAP && ++wrong > 1)
            cfg_error(x, p, "only one wrong_guess_cap rule is allowed");
    }
    /* Each phone_prefix length is a Redis key of every issue; the script's
     * key list has room for the other kinds and four lengths. */
    {
        unsigned seen = 0;
        int n_len = 0;
        for (i = 0; i < c->limits.n_rules; i++) {
            int d = c->limits.rules[i].prefix_digits;
            if (d > 0 && !(seen & (1u << d))) {
                seen |= 1u << d;
                if (++n_len > 4)
                    cfg_error(x, "limits", "phone_prefix keys may use at most 4 different lengths");
            }
        }
    }
    cfg_fields(x, c);
}

const char *config_limit_why(enum cfg_algo a, int64_t window_ms, int64_t limit)
{
    if (a == CFG_ALGO_SLIDING_LOG && limit > config_limit_max(a))
        return "at most 1000 for sliding_log, which keeps every request of its window (its memory grows with "
               "the limit); use sliding_window_counter, fixed_window or token_bucket for larger limits";
    if (a == CFG_ALGO_WRONG_GUESS_CAP && limit > config_limit_max(a))
        return "at most 1000 for wrong_guess_cap, which keeps the time of every counted wrong guess in the "
               "phone's hash (its memory grows with the limit)";
    if (a == CFG_ALGO_TOKEN_BUCKET && limit > window_ms)
        return "at most the window in ms for token_bucket, which spaces requests at least 1 ms apart; use a "
               "longer window, or fixed_window or sliding_window_counter";
    return NULL;
}

int64_t config_limit_max(enum cfg_algo a)
{
    if (a == CFG_ALGO_SLIDING_LOG || a == CFG_ALGO_WRONG_GUESS_CAP)
        return 1000;
    return a == CFG_ALGO_SLIDING_WINDOW_COUNTER ? 1000000 : 1000000000;
}
