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

void otpctl_stats_usage(FILE *f)
{
    fprintf(f,
            "       otpctl stats --db FILE [--db FILE...] [--since T] [--until T] [--format table|json]\n");
}

static int stats_usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "otpctl stats: %s%s\nusage:", what, arg);
    otpctl_stats_usage(stderr);
    return EX_USAGE;
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

int otpctl_stats(int argc, char **argv)
{
    static const char *const flags[] = {"--db", "--since", "--until", "--format", NULL};
    const char *values[4] = {NULL, NULL, NULL, NULL};
    const char **paths = NULL;
    struct summary s;
    int64_t since_ms = INT64_MIN, until_ms = INT64_MAX;
    char err[OTP_ERR_LEN];
    enum otp_rc rc;
    int i, k, n_paths = 0, json = 0, ex = EX_OK;

    memset(&s, 0, sizeof(s));
    if ((paths = calloc((size_t)argc + 1, sizeof(*paths))) == NULL)
        return EX_OSERR;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i];
        size_t len = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs("usage:", stdout);
            otpctl_stats_usage(stdout);
            goto out;
        }
        for (k = 0; flags[k]; k++) {
            len = strlen(flags[k]);
            if (strncmp(a, flags[k], len) == 0 && (a[len] == '\0' || a[len] == '='))
                break;
        }
        if (flags[k] == NULL) {
            ex = stats_usage_error("unknown argument ", a);
            goto out;
        }
        if (a[len] == '\0' && i + 1 >= argc) {
            ex = stats_usage_error("a value is missing after ", flags[k]);
            goto out;
        }
        if (k == 0) {
            paths[n_paths++] = a[len] == '=' ? a + len + 1 : argv[++i];
            continue;
        }
        if (values[k] != NULL) {
            ex = stats_usage_error("given twice: ", flags[k]);
            goto out;
        }
        values[k] = a[len] == '=' ? a + len + 1 : argv[++i];
    }
    if (n_paths == 0) {
        ex = stats_usage_error("no ledger: give one or more --db FILE", "");
        goto out;
    }
    if (values[3] != NULL && strcmp(values[3], "json") != 0 && strcmp(values[3], "table") != 0) {
        ex = stats_usage_error("--format must be table or json, not ", values[3]);
        goto out;
    }
    json = values[3] != NULL && strcmp(values[3], "json") == 0;
    if ((values[1] && timestamp_parse(values[1], &since_ms) != OTP_OK) ||
        (values[2] && timestamp_parse(values[2], &until_ms) != OTP_OK)) {
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
    for (i = 0; i < n_paths; i++) {
        if ((rc = summary_add(&s, paths[i], since_ms, until_ms, err)) != OTP_OK) {
            fprintf(stderr, "otpctl stats: %s\n", err);
            ex = rc == OTP_ENOTFOUND || rc == OTP_EINVAL ? EX_NOINPUT
                 : rc == OTP_ENOMEM                      ? EX_OSERR
                                                         : EX_IOERR;
            goto out;
        }
    }
    if (json) {
        json_t *j = stats_json(&s);
        if (j == NULL || json_dumpf(j, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0)
            ex = EX_SOFTWARE;
        putchar('\n');
        json_decref(j);
    } else {
        printf("ledgers: %d\n", n_paths);
        stats_table(&s);
    }
    if (fflush(stdout) != 0 && ex == EX_OK)
        ex = EX_IOERR;
out:
    summary_free(&s);
    free(paths);
    return ex;
}
