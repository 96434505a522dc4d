/*
 * fuzz_reply: libFuzzer over the readers of the Lua scripts' replies:
 * issue_read (limits_issue.c, issue.lua's) and verify_read
 * (limits_verify.c, verify.lua's). They turn
 * what Redis answered into the decision a caller sees (status, reason,
 * Retry-After, RateLimit fields), so a reader that misreads a reply
 * refuses wrongly, or says when to retry too early.
 *
 * An input is text, so that seeds are real replies one can read:
 *
 *   issue                                  (or: verify)
 *   rule phone_10m sliding_log enforce 3 600000
 *   reply 0 1767225600000 ' 0 0 0 0  0 0 540000
 *
 * "rule NAME ALGORITHM MODE LIMIT WINDOW_MS" lines are the config's rules
 * within the config's bounds, in the order the script got them (verify
 * uses the wrong_guess_cap rule, if any). "reply" lists the script's reply:
 * integers, 'text for a string ("'" alone is ""), nil for a nil.
 *
 * Inputs outside what the scripts can answer are dropped, as facts about
 * the scripts rather than hopes: their numbers are Lua doubles holding
 * integers well below 2^53 (milliseconds since 1970, windows of at most 366
 * days, limits of at most 10^9); issue.lua computes a refusal's reset as a
 * future instant minus now, so it is at least 1; and the readers' callers
 * check the reply's length first (limits_issue answers OTP_ESTORE). Seeds:
 * tests/fuzz/corpus/reply/, replies the scripts give.
 */
#include <errno.h>
#include <string.h>

#include "../../src/limits/limits_int.h"
#include "fuzz.h"

#define FUZZ_RULES_MAX 32
/* issue.lua's reply (limits_int.h, enum issue_reply): IR_RULES fixed
 * values, IR_PER_RULE per rule, then the pumping guard's IR_PUMP_N. */
#define FUZZ_REPLY_MAX (IR_RULES + IR_PER_RULE * FUZZ_RULES_MAX + IR_PUMP_N)
#define FUZZ_LUA_INT_MAX (1LL << 53) /* beyond it a Lua double skips integers */

/* limits_issue.c's and limits_verify.c's UNITTEST functions. */
void issue_read(const struct cfg_rule *const *used, size_t n_used, const struct store_reply *rep,
                struct limits_issue *out);
enum otp_rc verify_read(const struct cfg_rule *wrong, const struct store_reply *rep, struct limits_verify *out,
                        char *err);

struct fuzz_in {
    int mode; /* 0: none yet, 1: issue, 2: verify */
    struct cfg_rule rules[FUZZ_RULES_MAX];
    const struct cfg_rule *used[FUZZ_RULES_MAX];
    size_t n_rules;
    long long ints[FUZZ_REPLY_MAX];
    char *strs[FUZZ_REPLY_MAX];
    struct store_reply rep;
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static int fuzz_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;

    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && *out >= lo && *out <= hi;
}

/* Parses "rule NAME ALGORITHM MODE LIMIT WINDOW_MS" (after "rule"). */
static int fuzz_rule(struct fuzz_in *in, char *rest)
{
    struct cfg_rule *r = &in->rules[in->n_rules];
    const char *name = strsep(&rest, " "), *algo = strsep(&rest, " "), *mode = strsep(&rest, " ");
    const char *limit = strsep(&rest, " "), *window = strsep(&rest, " ");
    long long v;
    size_t i;
    int a = -1;

    if (in->n_rules == FUZZ_RULES_MAX || rest != NULL || window == NULL || name[0] == '\0' ||
        strlen(name) >= sizeof(r->name))
        return 0;
    for (i = 0; i <= CFG_ALGO_WRONG_GUESS_CAP; i++)
        if (strcmp(algo, config_algo_name((enum cfg_algo)i)) == 0)
            a = (int)i;
    if (a < 0 || (strcmp(mode, "enforce") != 0 && strcmp(mode, "shadow") != 0))
        return 0;
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->field, sizeof(r->field), "%02zu", in->n_rules);
    r->algo = (enum cfg_algo)a;
    r->shadow = strcmp(mode, "shadow") == 0;
    /* config.c's bounds: a rule the config refuses never reaches a reader. */
    if (!fuzz_int(limit, 1, config_limit_max(r->algo), &v))
        return 0;
    r->limit = r->burst = v;
    if (!fuzz_int(window, 1, 366LL * 24 * 3600 * 1000, &v))
        return 0;
    r->window_ms = v;
    for (i = 0; i < in->n_rules; i++)
        if (strcmp(in->rules[i].name, r->name) == 0 ||
            (r->algo == CFG_ALGO_WRONG_GUESS_CAP && in->rules[i].algo == CFG_ALGO_WRONG_GUESS_CAP))
            return 0; /* names are unique; one wrong_guess_cap rule at most */
    in->used[in->n_rules] = r;
    in->n_rules++;
    return 1;
}

/* Appends the values of a "reply" line. */
static int fuzz_values(struct fuzz_in *in, char *rest)
{
    char *tok;

    while ((tok = strsep(&rest, " ")) != NULL) {
        size_t i = in->rep.n;
        if (tok[0] == '\0')
            continue;
        if (i == FUZZ_REPLY_MAX)
            return 0;
        if (tok[0] == '\'')
            in->strs[i] = tok + 1;
        else if (strcmp(tok, "nil") != 0 && !fuzz_int(tok, -FUZZ_LUA_INT_MAX, FUZZ_LUA_INT_MAX, &in->ints[i]))
            return 0;
        in->rep.n++;
    }
    return 1;
}

static int fuzz_parse(struct fuzz_in *in, char *text)
{
    char *line;

    in->rep.ints = in->ints;
    in->rep.strs = in->strs;
    while ((line = strsep(&text, "\n")) != NULL) {
        if (line[0] == '\0' || line[0] == '#')
            continue;
        if (strcmp(line, "issue") == 0 || strcmp(line, "verify") == 0) {
            if (in->mode != 0)
                return 0;
            in->mode = line[0] == 'i' ? 1 : 2;
        } else if (strncmp(line, "rule ", 5) == 0) {
            if (!fuzz_rule(in, line + 5))
                return 0;
        } else if (strncmp(line, "reply ", 6) == 0) {
            if (!fuzz_values(in, line + 6))
                return 0;
        } else {
            return 0;
        }
    }
    return in->mode != 0;
}

/* issue_read's promises (see its comment in limits_issue.c and limits.h). */
static int fuzz_issue(struct fuzz_in *in)
{
    const struct store_reply *rep = &in->rep;
    const struct cfg_rule *lock = NULL;
    struct limits_issue out;
    int64_t longest = INT64_MIN;
    int limited = 0;
    size_t i, base = IR_RULES + in->n_rules * IR_PER_RULE;
    const long long *pump, *v;

    /* A reply without the pumping guard's values is read as the guard off
     * (the seeds written before it). */
    if (rep->n == base && base + IR_PUMP_N <= FUZZ_REPLY_MAX) {
        for (i = 0; i < IR_PUMP_N; i++)
            in->ints[base + i] = 0, in->strs[base + i] = NULL;
        in->rep.n += IR_PUMP_N;
    }
    if (rep->n != base + IR_PUMP_N || rep->strs[IR_ALLOWED] != NULL || rep->ints[IR_ALLOWED] < 0)
        return 0; /* limits_issue answers OTP_ESTORE (a bad or an abandoned call's reply) */
    pump = rep->ints + base;
    if (pump[IR_PUMP_STATE] == LIMITS_PUMP_HELD || pump[IR_PUMP_STATE] == LIMITS_PUMP_STARTED) {
        /* Refused by the guard before any rule: no rule is named. */
        memset(&out, 0, sizeof(out));
        issue_read(in->used, in->n_rules, rep, &out);
        FUZZ_CHECK(out.rc == OTP_EPUMPING && out.retry_ms == pump[IR_PUMP_RETRY] && out.reason[0] == '\0');
        return 1;
    }
    for (i = 0, v = rep->ints + IR_RULES; i < in->n_rules; i++, v += IR_PER_RULE)
        if (v[IR_RULE_OK] != 1 && v[IR_RULE_RESET] < 1)
            return 0; /* not a refusal issue.lua gives */
    memset(&out, 0, sizeof(out));
    issue_read(in->used, in->n_rules, rep, &out);
    FUZZ_CHECK(strlen(out.vid) < sizeof(out.vid) && strlen(out.reason) < sizeof(out.reason));
    FUZZ_CHECK(out.header.remaining >= 0 && out.header.reset_s >= 0 && out.header.window_s >= 0);
    if (rep->ints[IR_ALLOWED] == 1) {
        FUZZ_CHECK(out.rc == OTP_OK && out.reason[0] == '\0' && out.resend_after_ms == rep->ints[IR_NEXT]);
        return 1;
    }
    /* A refusal: never early, and named by the lock, else the longest. */
    FUZZ_CHECK(out.retry_ms >= rep->ints[IR_COST_RETRY]); /* the cost caps' wait */
    for (i = 0, v = rep->ints + IR_RULES; i < in->n_rules; i++, v += IR_PER_RULE) {
        const struct cfg_rule *r = in->used[i];
        int64_t reset = v[IR_RULE_RESET];
        if (v[IR_RULE_OK] == 1 || r->shadow)
            continue;
        FUZZ_CHECK(out.retry_ms >= reset);
        if (r->algo == CFG_ALGO_WRONG_GUESS_CAP)
            lock = r;
        else if (!limited || reset > longest)
            limited = 1, longest = reset;
    }
    if (lock != NULL) {
        FUZZ_CHECK(out.rc == OTP_ELOCKED && strcmp(out.reason, lock->name) == 0);
        FUZZ_CHECK(strcmp(out.header.name, lock->name) == 0 && out.header.remaining == 0);
    } else if (limited) {
        FUZZ_CHECK(out.rc == OTP_ELIMITED && out.reason[0] != '\0');
        for (i = 0, v = rep->ints + IR_RULES; i < in->n_rules; i++, v += IR_PER_RULE)
            if (strcmp(in->used[i]->name, out.reason) == 0)
                FUZZ_CHECK(v[IR_RULE_OK] != 1 && !in->used[i]->shadow && v[IR_RULE_RESET] == longest);
    } else if (rep->ints[IR_FULL] >= 0 && rep->ints[IR_COST_RETRY] == 0) {
        /* The queue alone refused: queue_full, without RateLimit headers.
         * is_new says the caller's share refused it, not the fleet's capacity. */
        FUZZ_CHECK(out.rc == OTP_EFULL && out.depth == rep->ints[IR_FULL] &&
                   strcmp(out.reason, rep->ints[IR_IS_NEW] == 1 ? "share_per_key" : "") == 0);
        FUZZ_CHECK(out.header.name[0] == '\0');
    } else {
        FUZZ_CHECK(out.rc == OTP_ECOST && out.reason[0] == '\0');
    }
    return 1;
}

/* verify_read's promises. */
static int fuzz_verify(const struct fuzz_in *in)
{
    const struct store_reply *rep = &in->rep;
    const struct cfg_rule *wrong = NULL;
    struct limits_verify out;
    char err[OTP_ERR_LEN] = "";
    const char *status;
    enum otp_rc want;
    size_t i;

    for (i = 0; i < in->n_rules; i++)
        if (in->rules[i].algo == CFG_ALGO_WRONG_GUESS_CAP)
            wrong = &in->rules[i];
    memset(&out, 0, sizeof(out));
    if (verify_read(wrong, rep, &out, err) != OTP_OK) {
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    /* VR_COUNT values, then IR_PER_RULE per verify rule (read by limits_verify). */
    FUZZ_CHECK(rep->n >= VR_COUNT && (status = rep->strs[VR_STATUS]) != NULL);
    want = strcmp(status, "ok") == 0        ? OTP_OK
           : strcmp(status, "wrong") == 0   ? OTP_EBADCODE
           : strcmp(status, "locked") == 0  ? OTP_ELOCKED
           : strcmp(status, "limited") == 0 ? OTP_ELIMITED
                                            : OTP_ENOTFOUND;
    FUZZ_CHECK(out.rc == want && out.retry_ms == rep->ints[VR_WINDOW_LEFT]);
    FUZZ_CHECK(strlen(out.vid) < sizeof(out.vid));
    if (wrong == NULL) {
        FUZZ_CHECK(out.reason[0] == '\0' && out.header.name[0] == '\0');
    } else if (!wrong->shadow) {
        FUZZ_CHECK(strcmp(out.header.name, wrong->name) == 0 && out.header.remaining >= 0 &&
                   out.header.reset_s >= 0);
        if (out.rc == OTP_ELOCKED)
            FUZZ_CHECK(strcmp(out.reason, wrong->name) == 0);
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_in *in = calloc(1, sizeof(*in));
    char *text = malloc(size + 1);
    int deep = 0;

    if (in == NULL || text == NULL)
        goto out;
    memcpy(text, data, size);
    text[size] = '\0';
    if (fuzz_parse(in, text))
        deep = in->mode == 1 ? fuzz_issue(in) : fuzz_verify(in);
    fuzz_deep(deep, "not an input of the form above, or a reply the reader refuses");
out:
    free(text);
    free(in);
    return 0;
}
