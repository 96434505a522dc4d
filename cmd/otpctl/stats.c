/*
 * otpctl stats --db FILE... [--since T] [--until T] [--format table|json]:
 * a fleet's figures for a period (src/ledger/summary.c sums the files):
 * requests, refusals by rule and by decision, provider calls, spend (in
 * the config's currency's minor units: the ledger does not name it) and
 * conversion (verified ÷ verifications started). Needs no config and no
 * secret; opens every file read-only.
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
    const char *since, *until, *format;
};

#define S(field) offsetof(struct stats_opts, field)

static const struct flag stats_flags[] = {
    {"db", 0, FLAG_LIST, 1, S(db), "FILE", "a ledger; again for each instance's", 0, 0},
    {"since", 0, FLAG_STR, 0, S(since), "T", "from T on (inclusive)", 0, 0},
    {"until", 0, FLAG_STR, 0, S(until), "T", "before T (exclusive)", 0, 0},
    {"format", 0, FLAG_STR, 0, S(format), "F", "table (default) or json", 0, 0},
};

static const struct flag_cmd stats_cmd = {
    .name = "otpctl stats",
    .flags = FLAGS_OF(stats_flags),
    .notes = "  T: RFC 3339 (2024-05-01T12:00:00Z) or Unix milliseconds\n",
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
    int ex;

    memset(&o, 0, sizeof(o));
    if ((ex = flags_parse(&stats_cmd, argc, argv, &o)) != FLAGS_GO)
        goto out;
    if (o.format != NULL && strcmp(o.format, "json") != 0 && strcmp(o.format, "table") != 0) {
        ex = flags_usage_error(&stats_cmd, "--format must be table or json, not %s", o.format);
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
    ex = stats_run(&o, since_ms, until_ms);
out:
    flags_free(&stats_cmd, &o);
    return ex;
}
