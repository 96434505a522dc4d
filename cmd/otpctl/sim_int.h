/*
 * What otpctl simulate's files share: simulate.c runs the command (flags,
 * the run's tallies, the walk through the history), sim_replay.c replays
 * each ledger row through the real scripts in the private redis-server,
 * sim_report.c turns the counts into JSON and a table.
 */
#ifndef OTPCTL_SIM_INT_H
#define OTPCTL_SIM_INT_H

#include <stdint.h>

#include <jansson.h>

#include "../../src/ledger/history.h"
#include "simredis.h"
#include "tally.h"

struct config;
struct store;
struct limits;
struct code_keys;

/* Why a request was refused when no rule of the config did. */
enum sim_other { SO_COST_CAP, SO_NUMBER_TYPE, SO_COUNTRY, SO_PUMPING, SO_OTHER, SO_N };

/* What one rule (or other reason) refused. */
struct sim_bucket {
    int64_t refused;     /* requests */
    int64_t spend_saved; /* minor units the ledger shows spent on them */
    struct tally *keys;  /* per key: n refused, spend; rules only */
};

struct sim {
    struct config *cfg;
    struct store *store;
    struct limits *limits;
    struct code_keys *keys;
    int h_drop;
    int reveal;               /* 1: phones in keys unmasked */
    struct sim_bucket *rules; /* one per cfg->rules */
    struct sim_bucket other[SO_N];
    struct tally *ledger_dec; /* the ledger's decisions */
    struct tally *sim_dec;    /* the replay's */
    struct tally *changes;    /* "ledger\x1fsimulated" -> n, where they differ */
    struct tally *messages;   /* message id -> bucket (ref) and key (label) of its refusal */
    int64_t requests, issues, verifies, skipped, agree, ledger_spend;
};

/* Starts the private redis-server and a store on it, with the scripts
 * registered, and waits until it answers. EX_OK or EX_UNAVAILABLE (the
 * reason on stderr). sim_replay.c. */
int sim_start(struct sim *s, struct simredis *r);

/* Replays one requests row of the ledger, count times. Returns a sysexits
 * code: EX_OK, EX_UNAVAILABLE (the private Redis failed, err says why),
 * EX_OSERR. sim_replay.c. */
int sim_request(struct sim *s, const struct history_event *ev, char *err);

/* Counts one provider call of the ledger: its cost is spent, and saved
 * when the replay refused the request that queued its message.
 * sim_replay.c. */
void sim_send(struct sim *s, const struct history_event *ev);

/* The run's figures as JSON (new: the caller decrefs), top keys per rule.
 * sim_report.c. */
json_t *sim_json(const struct sim *s, int top);

/* The same figures for people. sim_report.c. */
void sim_print_table(json_t *root);

#endif
