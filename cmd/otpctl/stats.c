/*
 * otpctl stats --db FILE... [--since T] [--until T] [--format table|json]
 * [--by provider,region]: a fleet's figures for a period
 * (src/ledger/summary.c sums the files): requests, refusals by rule and by
 * decision, provider calls, spend (in the config's currency's minor units:
 * the ledger does not name it) and conversion (verified ÷ verifications
 * started). With --by, the provider calls alone, a row per provider and/or
 * destination region: attempts, sent, failed, spend, delivered, verified
 * and their shares of sent. Needs no config and no secret; opens every
 * file read-only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "../../src/base/timestamp.h"
#include "../../src/ledger/summary.h"
#include "otpctl.h"

struct stats_opts {
    struct flag_list db;
    const char *since, *until, *format, *by;
};

#define S(field) offsetof(struct stats_opts, field)

static const struct flag stats_flags[] = {
    {"db", 0, FLAG_LIST, 1, S(db), "FILE", "a ledger; again for each instance's", 0, 0},
    {"since", 0, FLAG_STR, 0, S(since), "T", "from T on (inclusive)", 0, 0},
    {"until", 0, FLAG_STR, 0, S(until), "T", "before T (exclusive)", 0, 0},
    {"format", 0, FLAG_STR, 0, S(format), "F", "table (default) or json", 0, 0},
    {"by", 0, FLAG_STR, 0, S(by), "KEYS", "provider calls by provider, region or provider,region", 0, 0},
};

static const struct flag_cmd stats_cmd = {
    .name = "otpctl stats",
    .flags = FLAGS_OF(stats_flags),
    .notes = "  T: RFC 3339 (2024-05-01T12:00:00Z) or Unix milliseconds\n"
             "  KEYS: provider (the provider's name), region (the destination's, \"none\" when unknown)\n"
             "    or both, comma-separated\n",
};

void otpctl_stats_synopsis(FILE *f)
{
    flags_synopsis(&stats_cmd, "  ", f);
}

/* Sums of count over the refusals whose field (a pointer to the field's
 * offset) equals each distinct value, as a JSON object. */
static json_t *stats_by(const struct summary *s, int by_rule)
{
    json_t *o = json_object();
    size_t i;

    for (i = 0; i < s->n_refusals; i++) {
        const struct summary_refusal *r = &s->refusals[i];
        const char *key = by_rule ? r->rule : r->decision;
        json_t *have;
        if (by_rule && key[0] == '\0')
            continue; /* refused by no rule (a bad request, a wrong code): by_decision has it */
        have = json_object_get(o, key);
        json_object_set_new(o, key, json_integer((have ? json_integer_value(have) : 0) + r->count));
    }
    return o;
}

static json_t *stats_json(const struct summary *s)
{
    json_t *refusals = json_array();
    size_t i;

    for (i = 0; i < s->n_refusals; i++)
        json_array_append_new(refusals, json_pack("{s:s, s:s, s:s?, s:I}", "kind", s->refusals[i].kind,
                                                  "decision", s->refusals[i].decision, "rule",
                                                  s->refusals[i].rule[0] ? s->refusals[i].rule : NULL,
                                                  "count", (json_int_t)s->refusals[i].count));
    return json_pack(
        "{s:{s:I, s:I}, s:I, s:{s:I, s:o, s:o, s:o}, s:{s:I, s:I, s:I, s:I}, s:I, "
        "s:{s:I, s:I}, s:{s:I, s:I, s:I, s:o}}",
        "requests", "issue", (json_int_t)s->issue_requests, "verify", (json_int_t)s->verify_requests,
        "accepted", (json_int_t)s->accepted, "refusals", "total", (json_int_t)s->refused, "by_rule",
        stats_by(s, 1), "by_decision", stats_by(s, 0), "rows", refusals, "sends", "calls",
        (json_int_t)(s->calls[0] + s->calls[1] + s->calls[2]), "sent", (json_int_t)s->calls[0], "transient",
        (json_int_t)s->calls[1], "permanent", (json_int_t)s->calls[2], "spend_minor",
        (json_int_t)s->spend_minor, "messages", "delivered", (json_int_t)s->delivered, "failed",
        (json_int_t)s->failed, "verifications", "started", (json_int_t)s->verifications, "verified",
        (json_int_t)s->verified, "exhausted", (json_int_t)s->exhausted, "conversion",
        s->verifications > 0 ? json_real((double)s->verified / (double)s->verifications) : json_null());
}

static void stats_table(const struct summary *s)
{
    json_t *by;
    const char *key;
    json_t *v;

    printf("%-24s %lld (issue %lld, verify %lld)\n", "requests",
           (long long)(s->issue_requests + s->verify_requests), (long long)s->issue_requests,
           (long long)s->verify_requests);
    printf("%-24s %lld\n", "issues accepted", (long long)s->accepted);
    printf("%-24s %lld\n", "verifies verified", (long long)s->verified_requests);
    printf("%-24s %lld\n", "refused", (long long)s->refused);
    by = stats_by(s, 1);
    json_object_foreach(by, key, v) {
        printf("  %-22s %lld\n", key, (long long)json_integer_value(v));
    }
    json_decref(by);
    printf("%-24s\n", "refused by decision");
    by = stats_by(s, 0);
    json_object_foreach(by, key, v) {
        printf("  %-22s %lld\n", key, (long long)json_integer_value(v));
    }
    json_decref(by);
    printf("%-24s %lld (sent %lld, transient %lld, permanent %lld)\n", "provider calls",
           (long long)(s->calls[0] + s->calls[1] + s->calls[2]), (long long)s->calls[0],
           (long long)s->calls[1], (long long)s->calls[2]);
    printf("%-24s %lld (minor units of the config's currency)\n", "spend", (long long)s->spend_minor);
    printf("%-24s %lld delivered, %lld failed\n", "messages", (long long)s->delivered, (long long)s->failed);
    printf("%-24s %lld started, %lld verified, %lld exhausted\n", "verifications",
           (long long)s->verifications, (long long)s->verified, (long long)s->exhausted);
    if (s->verifications > 0)
        printf("%-24s %.1f%%\n", "conversion", 100.0 * (double)s->verified / (double)s->verifications);
    else
        printf("%-24s -\n", "conversion");
}

/* ---- --by: provider calls by provider and region ---- */

/* An unknown region in the table. */
#define STATS_NO_REGION "none"

/* The keys --by may name. */
static const struct {
    const char *name;
    unsigned bit;
} stats_keys[] = {{"provider", SUMMARY_BY_PROVIDER}, {"region", SUMMARY_BY_REGION}};

/* The grouping that keys names (provider, region or both, comma-separated,
 * each once); 0 when it names anything else. */
static unsigned stats_keys_parse(const char *keys)
{
    unsigned by = 0, bit;
    size_t n, i;

    for (;;) {
        n = strcspn(keys, ",");
        for (bit = 0, i = 0; i < sizeof(stats_keys) / sizeof(stats_keys[0]); i++)
            if (strlen(stats_keys[i].name) == n && strncmp(keys, stats_keys[i].name, n) == 0)
                bit = stats_keys[i].bit;
        if (bit == 0 || (by & bit) != 0)
            return 0;
        by |= bit;
        if (keys[n] == '\0')
            return by;
        keys += n + 1;
    }
}

/* A text from a ledger as printed: printable ASCII as it is, any other byte
 * as \xHH (a provider's name comes from the config, but a file may hold
 * anything). Caller frees; NULL when out of memory. */
static char *stats_text(const char *s)
{
    size_t n = strlen(s), i, o = 0;
    char *out = malloc(4 * n + 1);

    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, 5, "\\x%02X", c);
    }
    out[o] = '\0';
    return out;
}

/* part ÷ whole as JSON, null when whole is 0. */
static json_t *stats_share(int64_t part, int64_t whole)
{
    return whole > 0 ? json_real((double)part / (double)whole) : json_null();
}

/* A group's key as JSON: its text, or null when empty (an unknown region). */
static json_t *stats_key_json(const char *key)
{
    char *t;
    json_t *j;

    if (key[0] == '\0')
        return json_null();
    if ((t = stats_text(key)) == NULL)
        return NULL;
    j = json_string(t);
    free(t);
    return j;
}

/* One group as JSON: its keys, figures and shares of sent; NULL when out
 * of memory. */
static json_t *stats_group_json(const struct summary_group *x)
{
    json_t *o = json_object();

    if (o == NULL ||
        (x->provider != NULL && json_object_set_new(o, "provider", stats_key_json(x->provider)) != 0) ||
        (x->region != NULL && json_object_set_new(o, "region", stats_key_json(x->region)) != 0) ||
        json_object_update_new(
            o, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "attempts", (json_int_t)x->attempts,
                         "sent", (json_int_t)x->sent, "failed", (json_int_t)x->failed, "spend_minor",
                         (json_int_t)x->spend_minor, "delivered", (json_int_t)x->delivered, "verified",
                         (json_int_t)x->verified, "delivered_per_sent", stats_share(x->delivered, x->sent),
                         "verified_per_sent", stats_share(x->verified, x->sent))) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* {"by": [keys], "groups": [group, ...]}; NULL when out of memory. */
static json_t *stats_groups_json(const struct summary_groups *g)
{
    json_t *by = json_array(), *groups = json_array();
    size_t i;

    for (i = 0; i < sizeof(stats_keys) / sizeof(stats_keys[0]); i++)
        if ((g->by & stats_keys[i].bit) && json_array_append_new(by, json_string(stats_keys[i].name)) != 0)
            goto fail;
    for (i = 0; i < g->n; i++)
        if (json_array_append_new(groups, stats_group_json(&g->v[i])) != 0)
            goto fail;
    return json_pack("{s:o, s:o}", "by", by, "groups", groups);
fail:
    json_decref(by);
    json_decref(groups);
    return NULL;
}

/* The width of a key column (provider's, else region's): its head's, or
 * its widest text's. */
static int stats_key_width(const struct summary_groups *g, int provider, const char *head)
{
    size_t w = strlen(head), i, n;

    for (i = 0; i < g->n; i++) {
        const char *key = provider ? g->v[i].provider : g->v[i].region;
        char *t = key[0] ? stats_text(key) : NULL;
        n = key[0] ? (t ? strlen(t) : 1) : strlen(STATS_NO_REGION);
        free(t);
        if (n > w)
            w = n;
    }
    return (int)w;
}

/* A key cell and the column's gap; an unknown region as STATS_NO_REGION. */
static void stats_key_cell(const char *key, int width)
{
    char *t = key[0] ? stats_text(key) : NULL;

    printf("%-*s  ", width, key[0] ? (t ? t : "?") : STATS_NO_REGION);
    free(t);
}

/* part ÷ whole as a percentage cell, "-" when whole is 0. */
static void stats_share_cell(int64_t part, int64_t whole, int width)
{
    if (whole > 0)
        printf("  %*.1f%%", width - 1, 100.0 * (double)part / (double)whole);
    else
        printf("  %*s", width, "-");
}

/* A row per group under a head: keys left-aligned, figures right. */
static void stats_groups_table(const struct summary_groups *g)
{
    int wp = g->by & SUMMARY_BY_PROVIDER ? stats_key_width(g, 1, "PROVIDER") : 0;
    int wr = g->by & SUMMARY_BY_REGION ? stats_key_width(g, 0, "REGION") : 0;
    size_t i;

    if (wp)
        printf("%-*s  ", wp, "PROVIDER");
    if (wr)
        printf("%-*s  ", wr, "REGION");
    printf("%8s  %8s  %8s  %12s  %9s  %8s  %14s  %13s\n", "ATTEMPTS", "SENT", "FAILED", "SPEND", "DELIVERED",
           "VERIFIED", "DELIVERED/SENT", "VERIFIED/SENT");
    for (i = 0; i < g->n; i++) {
        const struct summary_group *x = &g->v[i];
        if (wp)
            stats_key_cell(x->provider, wp);
        if (wr)
            stats_key_cell(x->region, wr);
        printf("%8lld  %8lld  %8lld  %12lld  %9lld  %8lld", (long long)x->attempts, (long long)x->sent,
               (long long)x->failed, (long long)x->spend_minor, (long long)x->delivered,
               (long long)x->verified);
        stats_share_cell(x->delivered, x->sent, 14);
        stats_share_cell(x->verified, x->sent, 13);
        putchar('\n');
    }
}

/* The provider calls of every ledger, grouped by, printed as asked. */
static int stats_groups_run(const struct stats_opts *o, unsigned by, int64_t since_ms, int64_t until_ms)
{
    struct summary_groups g;
    char err[OTP_ERR_LEN];
    enum otp_rc rc = OTP_OK;
    int i, ex = EX_OK;

    memset(&g, 0, sizeof(g));
    g.by = by;
    for (i = 0; i < o->db.n && rc == OTP_OK; i++)
        rc = summary_groups_add(&g, o->db.v[i], since_ms, until_ms, err);
    if (rc == OTP_OK)
        rc = summary_groups_end(&g, err);
    if (rc != OTP_OK) {
        fprintf(stderr, "otpctl stats: %s\n", err);
        ex = rc == OTP_ENOTFOUND || rc == OTP_EINVAL ? EX_NOINPUT : rc == OTP_ENOMEM ? EX_OSERR : EX_IOERR;
        goto out;
    }
    if (o->format != NULL && strcmp(o->format, "json") == 0) {
        json_t *j = stats_groups_json(&g);
        if (j == NULL || otpctl_print_json(j, JSON_COMPACT | JSON_PRESERVE_ORDER, stdout) != 0)
            ex = EX_OSERR;
        json_decref(j);
    } else {
        printf("ledgers: %d\n", o->db.n);
        stats_groups_table(&g);
    }
    if (fflush(stdout) != 0 && ex == EX_OK)
        ex = EX_IOERR;
out:
    summary_groups_free(&g);
    return ex;
}

/* ---- the period's figures ---- */

/* The period's figures from every ledger, printed as asked. */
static int stats_run(const struct stats_opts *o, int64_t since_ms, int64_t until_ms)
{
    struct summary s;
    char err[OTP_ERR_LEN];
    enum otp_rc rc;
    int i, ex = EX_OK;

    memset(&s, 0, sizeof(s));
    for (i = 0; i < o->db.n; i++) {
        if ((rc = summary_add(&s, o->db.v[i], since_ms, until_ms, err)) != OTP_OK) {
            fprintf(stderr, "otpctl stats: %s\n", err);
            ex = rc == OTP_ENOTFOUND || rc == OTP_EINVAL ? EX_NOINPUT
                 : rc == OTP_ENOMEM                      ? EX_OSERR
                                                         : EX_IOERR;
            goto out;
        }
    }
    if (o->format != NULL && strcmp(o->format, "json") == 0) {
        json_t *j = stats_json(&s);
        if (j == NULL || json_dumpf(j, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0)
            ex = EX_SOFTWARE;
        putchar('\n');
        json_decref(j);
    } else {
        printf("ledgers: %d\n", o->db.n);
        stats_table(&s);
    }
    if (fflush(stdout) != 0 && ex == EX_OK)
        ex = EX_IOERR;
out:
    summary_free(&s);
    return ex;
}

int otpctl_stats(int argc, char **argv)
{
    struct stats_opts o;
    int64_t since_ms = INT64_MIN, until_ms = INT64_MAX;
    unsigned by = 0;
    int ex;

    memset(&o, 0, sizeof(o));
    if ((ex = flags_parse(&stats_cmd, argc, argv, &o)) != FLAGS_GO)
        goto out;
    if (o.format != NULL && strcmp(o.format, "json") != 0 && strcmp(o.format, "table") != 0) {
        ex = flags_usage_error(&stats_cmd, "--format must be table or json, not %s", o.format);
        goto out;
    }
    if (o.by != NULL && (by = stats_keys_parse(o.by)) == 0) {
        ex = flags_usage_error(&stats_cmd, "--by must be provider, region or provider,region, not %s", o.by);
        goto out;
    }
    if ((o.since && timestamp_parse(o.since, &since_ms) != OTP_OK) ||
        (o.until && timestamp_parse(o.until, &until_ms) != OTP_OK)) {
        fprintf(stderr,
                "otpctl stats: --since/--until: not an RFC 3339 time (2024-05-01T12:00:00Z) nor Unix ms\n");
        ex = EX_DATAERR;
        goto out;
    }
    if (since_ms >= until_ms) {
        fprintf(stderr, "otpctl stats: --since is not before --until\n");
        ex = EX_DATAERR;
        goto out;
    }
    ex = by ? stats_groups_run(&o, by, since_ms, until_ms) : stats_run(&o, since_ms, until_ms);
out:
    flags_free(&stats_cmd, &o);
    return ex;
}
