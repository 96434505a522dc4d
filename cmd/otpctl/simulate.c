/*
 * otpctl simulate: what other rules would have done to the traffic a ledger
 * recorded. Replays the ledger's requests (issues and verifies, in time
 * order, each as often as its row's count says) against NEW.json's rules,
 * prices and caps, through the real scripts (src/limits) on each row's own
 * time (struct limits_request.at_ms), in a private redis-server (simredis.c)
 * that holds nothing else and is thrown away at the end. Prints, per rule,
 * how many requests it would refuse, how many distinct keys, which keys
 * most, and the money the ledger shows spent on requests it would refuse.
 *
 * Needs no secret: the config is loaded without reading any secret value
 * (config_set_secrets), and the codes are simulate's own: each replayed
 * issue stores the hash of one known code under a key made up for this run,
 * and a verify the ledger recorded as verified replays that code, any other
 * a wrong one. The ledgers are opened read-only (src/ledger/history.c), so
 * it runs beside a live otpd and on a copy alike.
 *
 * What it does not model: the queue (nothing is sent, so it is never full),
 * admin blocks and overrides (they live in the live Redis, not in a config),
 * and requests that never reached the rules (invalid_request rows are
 * skipped and counted). Load: one Redis round trip per replayed request,
 * two for an issue the new rules accept; memory grows with the distinct
 * keys refused, not with the ledger.
 *
 * This file runs the command: its flags, the run's setup (NEW.json, a key
 * made for the run, the tallies), the walk through the history and the
 * output. sim_replay.c replays each row; sim_report.c shapes the figures.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "../../src/base/config.h"
#include "../../src/base/wipe.h"
#include "../../src/ledger/history.h"
#include "../../src/limits/limits.h"
#include "../../src/otp/code.h"
#include "../../src/store/store.h"
#include "otpctl.h"
#include "sim_int.h"

#define SIM_TOP_DEFAULT 5
#define SIM_TOP_MAX 1000

enum sim_format { SIM_JSON, SIM_TABLE };

struct sim_opts {
    struct flag_list db;
    const char *config, *format;
    long long top;
    int reveal;
};

#define O(field) offsetof(struct sim_opts, field)

static const struct flag sim_flags[] = {
    {"db", 0, FLAG_LIST, 1, O(db), "LEDGER", "a ledger to replay; again for each instance's", 0, 0},
    {"config", 'c', FLAG_STR, 1, O(config), "NEW.json", "the config whose rules, prices, caps to try", 0, 0},
    {"format", 0, FLAG_STR, 0, O(format), "F", "json (default) or table", 0, 0},
    {"top", 0, FLAG_INT, 0, O(top), "N", "the N keys each rule refuses most (default 5)", 0, SIM_TOP_MAX},
    {"reveal-phones", 0, FLAG_BOOL, 0, O(reveal), NULL, "phones in keys in full, not masked", 0, 0},
};

static const struct flag_cmd sim_cmd = {
    .name = "otpctl simulate",
    .flags = FLAGS_OF(sim_flags),
    .notes = "  replays the ledgers' requests against NEW.json's rules in a private redis-server\n"
             "  (redis-server from PATH); reads no secret and opens the ledgers read-only\n",
};

void otpctl_simulate_synopsis(FILE *f)
{
    flags_synopsis(&sim_cmd, "  ", f);
}

/* The sysexits code of a history error, as otpctl ledger maps them. */
static int sim_history_exit(enum otp_rc rc)
{
    switch (rc) {
    case OTP_ENOTFOUND:
    case OTP_EINVAL:
        return EX_NOINPUT;
    case OTP_EIO:
        return EX_DATAERR;
    case OTP_ENOMEM:
        return EX_OSERR;
    default:
        return EX_SOFTWARE;
    }
}

static void sim_free(struct sim *s)
{
    size_t i;

    if (s->rules)
        for (i = 0; i < s->cfg->limits.n_rules; i++)
            tally_free(s->rules[i].keys);
    free(s->rules);
    tally_free(s->ledger_dec);
    tally_free(s->sim_dec);
    tally_free(s->changes);
    tally_free(s->messages);
    limits_free(s->limits);
    store_free(s->store);
    code_keys_free(s->keys);
    config_free(s->cfg);
}

/* Loads NEW.json (its rules, prices and caps; no secret is read or
 * needed), and makes the run's key and tallies. A sysexits code. */
static int sim_setup(struct sim *s, const char *config)
{
    char secret[2 * CODE_ID_LEN + 1], *errors = NULL;
    size_t i;

    config_set_secrets(0);
    s->cfg = config_load(config, &errors);
    config_set_secrets(1);
    if (s->cfg == NULL) {
        fprintf(stderr, "otpctl simulate: %s is not a valid config:\n%s", config, errors ? errors : "");
        free(errors);
        return EX_CONFIG;
    }
    free(errors);
    /* Codes and scopes under a key made for this run and forgotten. */
    code_new_id(secret);
    code_new_id(secret + CODE_ID_LEN);
    s->keys = code_keys_new((const unsigned char *)secret, strlen(secret));
    wipe(secret, sizeof(secret));
    s->rules = calloc(s->cfg->limits.n_rules + 1, sizeof(*s->rules));
    s->ledger_dec = tally_new();
    s->sim_dec = tally_new();
    s->changes = tally_new();
    s->messages = tally_new();
    for (i = 0; s->rules && i < s->cfg->limits.n_rules; i++)
        if ((s->rules[i].keys = tally_new()) == NULL)
            break;
    if (s->keys == NULL || s->rules == NULL || i < s->cfg->limits.n_rules || !s->ledger_dec || !s->sim_dec ||
        !s->changes || !s->messages) {
        fputs("otpctl simulate: out of memory\n", stderr);
        return EX_OSERR;
    }
    return EX_OK;
}

/* Replays the history: each request, each provider call's spend. */
static int sim_walk(struct sim *s, struct history *h)
{
    char err[OTP_ERR_LEN];
    enum otp_rc rc;
    int got, ex;

    for (;;) {
        struct history_event ev;
        if ((rc = history_next(h, &ev, &got, err)) != OTP_OK) {
            fprintf(stderr, "otpctl simulate: %s\n", err);
            return sim_history_exit(rc);
        }
        if (!got)
            return EX_OK;
        if (ev.kind == HISTORY_SEND)
            sim_send(s, &ev);
        if (ev.kind != HISTORY_REQUEST)
            continue;
        if ((ex = sim_request(s, &ev, err)) != EX_OK) {
            if (ex == EX_UNAVAILABLE)
                fprintf(stderr, "otpctl simulate: the private redis-server failed: %s\n", err);
            else
                fputs("otpctl simulate: out of memory\n", stderr);
            return ex;
        }
    }
}

/* Prints the figures as fmt asks. */
static int sim_output(const struct sim *s, enum sim_format fmt, int top)
{
    json_t *out;
    int ex = EX_OK;

    if ((out = sim_json(s, top)) == NULL)
        return EX_OSERR;
    if (fmt == SIM_JSON) {
        json_dumpf(out, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
    } else {
        sim_print_table(out);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("otpctl simulate: cannot write the output\n", stderr);
        ex = EX_IOERR;
    }
    json_decref(out);
    return ex;
}

int otpctl_simulate(int argc, char **argv)
{
    struct sim_opts o;
    struct history_filter filter = {NULL, INT64_MIN, INT64_MAX};
    struct history *h = NULL;
    struct simredis r;
    struct sim s;
    enum sim_format fmt = SIM_JSON;
    enum otp_rc rc;
    char err[OTP_ERR_LEN];
    int ex;

    memset(&o, 0, sizeof(o));
    memset(&s, 0, sizeof(s));
    memset(&r, 0, sizeof(r));
    o.top = SIM_TOP_DEFAULT;
    if ((ex = flags_parse(&sim_cmd, argc, argv, &o)) != FLAGS_GO)
        goto out;
    if (o.format != NULL && strcmp(o.format, "table") == 0) {
        fmt = SIM_TABLE;
    } else if (o.format != NULL && strcmp(o.format, "json") != 0) {
        ex = flags_usage_error(&sim_cmd, "--format must be json or table, not %s", o.format);
        goto out;
    }
    s.reveal = o.reveal;
    if ((ex = sim_setup(&s, o.config)) != EX_OK)
        goto out;
    if ((rc = history_open(o.db.v, o.db.n, &h, err)) != OTP_OK ||
        (rc = history_query(h, &filter, err)) != OTP_OK) {
        fprintf(stderr, "otpctl simulate: %s\n", err);
        ex = sim_history_exit(rc);
        goto out;
    }
    if ((ex = sim_start(&s, &r)) == EX_OK && (ex = sim_walk(&s, h)) == EX_OK)
        ex = sim_output(&s, fmt, (int)o.top);
out:
    /* The store's connections close before their server stops. */
    limits_free(s.limits);
    store_free(s.store);
    s.limits = NULL;
    s.store = NULL;
    simredis_stop(&r); /* also when it never started, or half did */
    sim_free(&s);
    history_close(h);
    flags_free(&sim_cmd, &o);
    return ex;
}
