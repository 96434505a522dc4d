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
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include <jansson.h>

#include "../../src/base/config.h"
#include "../../src/base/phone.h"
#include "../../src/ledger/history.h"
#include "../../src/limits/limits.h"
#include "../../src/otp/code.h"
#include "../../src/store/store.h"
#include "otpctl.h"
#include "simredis.h"
#include "tally.h"

#define SIM_TOP_DEFAULT 5
#define SIM_TOP_MAX 1000
#define SIM_START_TRIES 5        /* another process may take the port first */
#define SIM_READY_MS 10000       /* redis-server answers within this, or it is EX_UNAVAILABLE */
#define SIM_REDIS_TIMEOUT_MS 5000 /* a private server on a busy machine: patience, not speed */

/*
 * An accepted issue leaves its message held in Redis until otpd commits it
 * to the send stream. Nothing is sent in a simulation, and the commit
 * compares the hold with Redis's own clock, not the replay's, so instead
 * the message leaves Redis at once: its hold, its hash and the issue's undo
 * record. What the rules and caps took stays, as it does in otpd. So the
 * queue (the stream and the holds) stays empty and never full here, whatever
 * pacer.capacity says.
 * KEYS: the holds, the message's hash, the undo key; ARGV: the hold.
 */
static const char sim_drop_lua[] = "redis.call('ZREM', KEYS[1], ARGV[1])\n"
                                   "redis.call('DEL', KEYS[2], KEYS[3])\n"
                                   "return 1\n";

/* Why a request was refused when no rule of the config did. */
enum sim_other { SO_COST_CAP, SO_NUMBER_TYPE, SO_COUNTRY, SO_PUMPING, SO_OTHER, SO_N };
static const char *const sim_other_names[SO_N] = {"cost_cap", "number_type", "country_blocked",
                                                  "suspected_pumping", "other"};

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
    int reveal;                 /* 1: phones in keys unmasked */
    struct sim_bucket *rules;   /* one per cfg->rules */
    struct sim_bucket other[SO_N];
    struct tally *ledger_dec;   /* the ledger's decisions */
    struct tally *sim_dec;      /* the replay's */
    struct tally *changes;      /* "ledger\x1fsimulated" -> n, where they differ */
    struct tally *messages;     /* message id -> bucket (ref) and key (label) of its refusal */
    int64_t requests, issues, verifies, skipped, agree, ledger_spend;
};

enum sim_format { SIM_JSON, SIM_TABLE };

void otpctl_simulate_usage(FILE *f)
{
    fprintf(f, "       otpctl simulate --db LEDGER [--db LEDGER...] -c NEW.json [--format json|table]\n"
               "                       [--top N] [--reveal-phones]\n");
}

static int sim_usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "otpctl simulate: %s%s\nusage:", what, arg);
    otpctl_simulate_usage(stderr);
    return EX_USAGE;
}

/* A phone for output: country code and last 4 digits, the rest masked
 * ("+44******3456"): enough to tell keys apart and to recognise a number
 * one already suspects, too little to be a list of customers' numbers. */
static void sim_mask_phone(const char *phone, int country_code, char *out, size_t cap)
{
    size_t n = strlen(phone), keep = 1, i, o = 0;
    char cc[16];

    if (country_code > 0)
        keep += (size_t)snprintf(cc, sizeof(cc), "%d", country_code);
    for (i = 0; i < n && o + 1 < cap; i++)
        out[o++] = i < keep || i + 4 >= n ? phone[i] : '*';
    out[o] = '\0';
}

/* The text of rule r's key for one request, as "kind=value" joined by ','
 * ("phone=+447400123456", "phone=...,api_key=login-web", "global"): key
 * in full (it names one key), label as printed (phones masked unless
 * reveal). */
static void sim_rule_key(const struct cfg_rule *r, const struct limits_request *lr, const struct phone_info *pi,
                         int reveal, char *key, size_t kcap, char *label, size_t lcap)
{
    unsigned mask = r->key_mask ? r->key_mask : 1u << r->key;
    size_t ko = 0, lo = 0;
    int k;

    key[0] = label[0] = '\0';
    for (k = 0; k < CFG_KEY_COUNT; k++) {
        char val[PHONE_MAX + 8], shown[PHONE_MAX + 8];
        const char *v = NULL;
        if (!(mask & (1u << k)))
            continue;
        switch ((enum cfg_key)k) {
        case CFG_KEY_PHONE:
            v = lr->phone;
            break;
        case CFG_KEY_DEVICE:
            v = lr->device_id;
            break;
        case CFG_KEY_CLIENT_IP:
            v = lr->ip_key;
            break;
        case CFG_KEY_API_KEY:
            v = lr->api_key;
            break;
        case CFG_KEY_GLOBAL:
            v = NULL;
            break;
        case CFG_KEY_PURPOSE:
            v = lr->purpose;
            break;
        case CFG_KEY_PHONE_PREFIX:
            snprintf(val, sizeof(val), "+%.*s", r->prefix_digits, lr->phone + 1);
            v = val;
            break;
        case CFG_KEY_REGION:
            v = lr->region;
            break;
        }
        if (k == CFG_KEY_GLOBAL) {
            ko += (size_t)snprintf(key + ko, ko < kcap ? kcap - ko : 0, "%sglobal", ko ? "," : "");
            lo += (size_t)snprintf(label + lo, lo < lcap ? lcap - lo : 0, "%sglobal", lo ? "," : "");
            continue;
        }
        if (v == NULL)
            v = "-";
        snprintf(shown, sizeof(shown), "%s", v);
        if (k == CFG_KEY_PHONE && !reveal)
            sim_mask_phone(v, pi->country_code, shown, sizeof(shown));
        ko += (size_t)snprintf(key + ko, ko < kcap ? kcap - ko : 0, "%s%s=%s", ko ? "," : "",
                               config_key_name((enum cfg_key)k), v);
        lo += (size_t)snprintf(label + lo, lo < lcap ? lcap - lo : 0, "%s%s=%s", lo ? "," : "",
                               config_key_name((enum cfg_key)k), shown);
    }
}

/* The index of the rule named name, or -1. */
static int sim_rule_index(const struct config *c, const char *name)
{
    size_t i;

    for (i = 0; i < c->limits.n_rules; i++)
        if (strcmp(c->limits.rules[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Counts one request refused by rule i (enforced, or a shadow rule that
 * would have) under its key. -1 out of memory. */
static int sim_count_rule(struct sim *s, int i, const struct limits_request *lr, const struct phone_info *pi,
                          char *key, size_t kcap)
{
    char label[512];
    struct tally_entry *e;

    sim_rule_key(&s->cfg->limits.rules[i], lr, pi, s->reveal, key, kcap, label, sizeof(label));
    if ((e = tally_get(s->rules[i].keys, key, label)) == NULL)
        return -1;
    e->n++;
    s->rules[i].refused++;
    return 0;
}

/* Counts the shadow rules of a comma-separated list (the scripts' shadow
 * reply): what each would have refused, had it been enforced. */
static int sim_count_shadow(struct sim *s, const char *list, const struct limits_request *lr,
                            const struct phone_info *pi)
{
    char copy[300], *save = NULL, *name, key[512];
    int i;

    snprintf(copy, sizeof(copy), "%s", list);
    for (name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save))
        if ((i = sim_rule_index(s->cfg, name)) >= 0 && sim_count_rule(s, i, lr, pi, key, sizeof(key)) < 0)
            return -1;
    return 0;
}

/* The outcome of one replayed request. */
struct sim_outcome {
    const char *decision; /* as the ledger spells them: accepted, verified, rate_limited, ... */
    int rule;             /* the refusing rule's index, or -1 */
    int other;            /* an sim_other when refused by no rule of the config, or -1 */
    char shadow[300];     /* shadow rules that would have refused, comma-separated (the scripts' 256 and a lock) */
};

/* Replays one issue. OTP_OK with *out, or OTP_ESTORE with err. */
static enum otp_rc sim_issue(struct sim *s, struct limits_request *lr, struct sim_outcome *out, char *err)
{
    char rid[CODE_ID_LEN + 1], vid[CODE_ID_LEN + 1], mid[CODE_ID_LEN + 1];
    struct limits_issue li;
    struct store_reply *rep = NULL;
    const char *args[4];
    enum otp_rc rc;

    code_new_id(rid);
    code_new_id(vid);
    code_new_id(mid);
    lr->rid = rid;
    lr->vid = vid;
    lr->mid = mid;
    memset(&li, 0, sizeof(li));
    if (limits_issue(s->limits, lr, &li, err) != OTP_OK)
        return OTP_ESTORE;
    out->rule = out->other = -1;
    switch (li.rc) {
    case OTP_OK:
        out->decision = "accepted";
        /* The undo's keys end with the stream, the holds, the message and
         * the undo key itself (limits.h, struct limits_undo). */
        if (li.undo.nkeys >= 4) {
            args[0] = li.undo.keys[li.undo.nkeys - 3];
            args[1] = li.undo.keys[li.undo.nkeys - 2];
            args[2] = li.undo.keys[li.undo.nkeys - 1];
            args[3] = li.undo.hold;
            if ((rc = store_eval(s->store, s->h_drop, 3, 4, args, &rep, err)) != OTP_OK)
                return rc;
            store_reply_free(rep);
        }
        break;
    case OTP_ECOST:
        out->decision = "cost_cap";
        out->other = SO_COST_CAP;
        break;
    case OTP_EFULL: /* not with an unbounded queue; named if it ever is */
        out->decision = "queue_full";
        out->other = SO_OTHER;
        break;
    case OTP_ELOCKED:
        out->decision = "locked";
        out->rule = sim_rule_index(s->cfg, li.reason);
        break;
    case OTP_EPUMPING:
        out->decision = "suspected_pumping";
        out->other = SO_PUMPING;
        break;
    default:
        out->decision = "rate_limited";
        out->rule = sim_rule_index(s->cfg, li.reason);
        break;
    }
    if ((li.rc == OTP_ELOCKED || li.rc == OTP_ELIMITED) && out->rule < 0)
        out->other = SO_OTHER;
    snprintf(out->shadow, sizeof(out->shadow), "%s", li.shadow);
    return OTP_OK;
}

/* Replays one verify: the right code when the ledger says it verified. */
static enum otp_rc sim_verify(struct sim *s, struct limits_request *lr, int right, struct sim_outcome *out,
                              char *err)
{
    char rid[CODE_ID_LEN + 1], hash[CODE_HASH_LEN + 1];
    struct limits_verify lv;

    code_new_id(rid);
    lr->rid = rid;
    code_hash(s->keys, lr->phone, right ? "right" : "wrong", hash);
    memset(&lv, 0, sizeof(lv));
    if (limits_verify(s->limits, lr, hash, s->cfg->otp.max_attempts, &lv, err) != OTP_OK)
        return OTP_ESTORE;
    out->rule = out->other = -1;
    switch (lv.rc) {
    case OTP_OK:
        out->decision = "verified";
        break;
    case OTP_EBADCODE:
        out->decision = "invalid_code";
        break;
    case OTP_ELOCKED:
        out->decision = "locked";
        out->rule = sim_rule_index(s->cfg, lv.reason);
        break;
    case OTP_ELIMITED:
        out->decision = "rate_limited";
        out->rule = sim_rule_index(s->cfg, lv.reason);
        break;
    default:
        out->decision = "no_active_code";
        break;
    }
    if ((lv.rc == OTP_ELOCKED || lv.rc == OTP_ELIMITED) && out->rule < 0)
        out->other = SO_OTHER;
    /* A shadow wrong-guess rule that would lock names itself in reason. */
    snprintf(out->shadow, sizeof(out->shadow), "%s%s%s", lv.shadow, lv.shadow[0] && lv.shadow_lock ? "," : "",
             lv.shadow_lock ? lv.reason : "");
    return OTP_OK;
}

static int sim_add(struct tally *t, const char *key, int64_t n)
{
    struct tally_entry *e = tally_get(t, key, NULL);

    if (e == NULL)
        return -1;
    e->n += n;
    return 0;
}

/* One requests row of the ledger, replayed count times. Returns a sysexits
 * code: EX_OK, EX_UNAVAILABLE (the private Redis failed), EX_OSERR. */
static int sim_request(struct sim *s, const struct history_event *ev, char *err)
{
    struct limits_request lr;
    struct phone_info pi;
    char ip_key[LIMITS_IP_KEY_MAX], scope[CODE_SCOPE_LEN + 1], vhash[CODE_HASH_LEN + 1], key[512];
    char change[80];
    int issue, served, country;
    int64_t i, count = ev->count > 0 ? ev->count : 1;

    /* Malformed requests never reached the rules, in otpd or here. */
    if (ev->request == NULL || ev->phone == NULL || ev->api_key == NULL || ev->state == NULL ||
        strcmp(ev->state, "invalid_request") == 0 || phone_parse(ev->phone, &pi) != PHONE_OK ||
        (ev->client_ip && limits_ip_key(ev->client_ip, ip_key, sizeof(ip_key)) != OTP_OK)) {
        s->skipped += count;
        return EX_OK;
    }
    issue = strcmp(ev->request, "issue") == 0;
    if (sim_add(s->ledger_dec, ev->state, count) < 0)
        return EX_OSERR;
    memset(&lr, 0, sizeof(lr));
    lr.phone = pi.e164;
    lr.device_id = ev->device_id;
    lr.ip_key = ev->client_ip ? ip_key : NULL;
    lr.api_key = ev->api_key;
    lr.purpose = ev->purpose ? ev->purpose : "default";
    memcpy(lr.region, pi.region, sizeof(lr.region));
    lr.type = pi.type;
    code_scope(s->keys, lr.api_key, lr.purpose, scope);
    lr.scope = scope;
    code_hash(s->keys, lr.phone, "right", vhash);
    lr.vhash = vhash;
    lr.ttl_ms = s->cfg->otp.ttl_ms;
    lr.max_attempts = s->cfg->otp.max_attempts;
    lr.at_ms = ev->ts_ms > 0 ? ev->ts_ms : 1;
    /* phone.types, then countries, are checked before any rule, as otp.c
     * does (on issue; a verify is never refused by them). */
    served = (unsigned)pi.type < PHONE_TYPE_COUNT && (s->cfg->limits.phone_types & PHONE_TYPE_BIT(pi.type)) != 0;
    country = served && issue && limits_country(s->limits, lr.region) == FRAUD_DENY;
    for (i = 0; i < count; i++) {
        struct sim_outcome o = {"number_type", -1, SO_NUMBER_TYPE, ""};
        if (country)
            o = (struct sim_outcome){"country_blocked", -1, SO_COUNTRY, ""};
        struct sim_bucket *b = NULL;
        enum otp_rc rc = OTP_OK;
        if (served && !country)
            rc = issue ? sim_issue(s, &lr, &o, err) : sim_verify(s, &lr, strcmp(ev->state, "verified") == 0, &o, err);
        if (rc != OTP_OK)
            return EX_UNAVAILABLE;
        s->requests++;
        *(issue ? &s->issues : &s->verifies) += 1;
        if (sim_add(s->sim_dec, o.decision, 1) < 0 || (o.shadow[0] && sim_count_shadow(s, o.shadow, &lr, &pi) < 0))
            return EX_OSERR;
        if (strcmp(o.decision, ev->state) == 0) {
            s->agree++;
        } else {
            snprintf(change, sizeof(change), "%s\x1f%s", ev->state, o.decision);
            if (sim_add(s->changes, change, 1) < 0)
                return EX_OSERR;
        }
        key[0] = '\0';
        if (o.rule >= 0) {
            if (sim_count_rule(s, o.rule, &lr, &pi, key, sizeof(key)) < 0)
                return EX_OSERR;
            b = &s->rules[o.rule];
        } else if (o.other >= 0) {
            b = &s->other[o.other];
            b->refused++;
        }
        /* A message the ledger sent that the new rules would not have: its
         * sends, which come later in the history, count as saved. */
        if (b != NULL && issue && ev->message_id && strcmp(ev->state, "accepted") == 0) {
            struct tally_entry *m = tally_get(s->messages, ev->message_id, key);
            if (m == NULL)
                return EX_OSERR;
            m->ref = o.rule >= 0 ? o.rule : -1 - o.other;
        }
    }
    return EX_OK;
}

/* One provider call of the ledger: its cost is spent, and saved when the
 * replay refused the request that queued its message. */
static void sim_send(struct sim *s, const struct history_event *ev)
{
    struct tally_entry *m, *k;
    struct sim_bucket *b;

    if (ev->cost_minor <= 0)
        return;
    s->ledger_spend += ev->cost_minor;
    if (ev->message_id == NULL || (m = tally_find(s->messages, ev->message_id)) == NULL)
        return;
    b = m->ref >= 0 ? &s->rules[m->ref] : &s->other[-1 - m->ref];
    b->spend_saved += ev->cost_minor;
    if (b->keys && (k = tally_find(b->keys, m->label)) != NULL)
        k->spend_minor += ev->cost_minor;
}

/* Starts the private redis-server and a store on it, with the scripts
 * registered, and waits until it answers. EX_OK or EX_UNAVAILABLE (the
 * reason on stderr). */
static int sim_start(struct sim *s, struct simredis *r)
{
    char err[OTP_ERR_LEN], tail[1024];
    int tries, waited;

    for (tries = 0; tries < SIM_START_TRIES; tries++) {
        struct store_opts o = {0};
        if (simredis_start(r, err, sizeof(err)) < 0) {
            fprintf(stderr, "otpctl simulate: %s\n", err);
            return EX_UNAVAILABLE;
        }
        o.host = "127.0.0.1";
        o.port = r->port;
        o.password = r->password;
        o.timeout_ms = SIM_REDIS_TIMEOUT_MS;
        o.breaker_failures = 1000000; /* the wait below polls; a breaker would only slow it */
        o.breaker_open_ms = 1;
        o.quiet = 1; /* it runs without persistence on purpose */
        /* Nothing is sent in a replay, so no message ever ends: a queue
         * share would fill with messages a real fleet sends in seconds.
         * The queue is never full here (the drop after each accepted
         * issue), and so no caller's share of it is either. */
        s->cfg->pacer.share_per_key = 1;
        if ((s->store = store_new(&o)) == NULL || (s->limits = limits_new(s->store, &s->cfg->limits, &s->cfg->pacer)) == NULL) {
            fputs("otpctl simulate: out of memory\n", stderr);
            return EX_OSERR;
        }
        s->h_drop = store_script(s->store, sim_drop_lua);
        for (waited = 0; waited < SIM_READY_MS && simredis_alive(r); waited += 20) {
            if (store_ping(s->store, err) == OTP_OK)
                return EX_OK;
            nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
        }
        simredis_log_tail(r, tail, sizeof(tail));
        limits_free(s->limits);
        store_free(s->store);
        s->limits = NULL;
        s->store = NULL;
        if (simredis_alive(r) || strstr(tail, "ddress already in use") == NULL) {
            simredis_stop(r);
            fprintf(stderr, "otpctl simulate: the private redis-server (redis-server from PATH) %s%s%s\n",
                    waited >= SIM_READY_MS ? "did not answer in time" : "did not start", tail[0] ? ":\n" : "",
                    tail);
            return EX_UNAVAILABLE;
        }
        simredis_stop(r); /* its port was taken: another one */
    }
    fputs("otpctl simulate: no free port for the private redis-server\n", stderr);
    return EX_UNAVAILABLE;
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

/* {"n": .., "key": "..."} of the top keys of one rule. */
static json_t *sim_top_json(const struct sim_bucket *b, int top)
{
    json_t *arr = json_array();
    struct tally_entry **e;
    size_t n, i;

    if (b->keys == NULL || (e = tally_sorted(b->keys, &n)) == NULL)
        return arr;
    for (i = 0; i < n && i < (size_t)top; i++)
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I}", "key", e[i]->label, "refused", (json_int_t)e[i]->n,
                                             "spend_saved_minor", (json_int_t)e[i]->spend_minor));
    free(e);
    return arr;
}

static json_t *sim_tally_json(const struct tally *t)
{
    json_t *o = json_object();
    struct tally_entry **e = NULL;
    size_t n, i;

    if ((e = tally_sorted(t, &n)) != NULL)
        for (i = 0; i < n; i++)
            json_object_set_new(o, e[i]->key, json_integer(e[i]->n));
    free(e);
    return o;
}

static json_t *sim_json(const struct sim *s, int top)
{
    json_t *root = json_object(), *rules = json_object(), *other = json_object(), *changes = json_array();
    struct tally_entry **e;
    int64_t saved = 0;
    size_t i, n;

    for (i = 0; i < s->cfg->limits.n_rules; i++) {
        const struct sim_bucket *b = &s->rules[i];
        json_t *r = json_object();
        json_object_set_new(r, "mode", json_string(s->cfg->limits.rules[i].shadow ? "shadow" : "enforce"));
        json_object_set_new(r, "refused", json_integer(b->refused));
        json_object_set_new(r, "keys", json_integer((json_int_t)tally_size(b->keys)));
        json_object_set_new(r, "spend_saved_minor", json_integer(b->spend_saved));
        json_object_set_new(r, "top", sim_top_json(b, top));
        json_object_set_new(rules, s->cfg->limits.rules[i].name, r);
        saved += b->spend_saved;
    }
    for (i = 0; i < SO_N; i++) {
        json_object_set_new(other, sim_other_names[i],
                            json_pack("{s:I, s:I}", "refused", (json_int_t)s->other[i].refused, "spend_saved_minor",
                                      (json_int_t)s->other[i].spend_saved));
        saved += s->other[i].spend_saved;
    }
    if ((e = tally_sorted(s->changes, &n)) != NULL) {
        for (i = 0; i < n; i++) {
            const char *sep = strchr(e[i]->key, '\x1f');
            json_array_append_new(changes, json_pack("{s:s%, s:s, s:I}", "ledger", e[i]->key,
                                                     (size_t)(sep - e[i]->key), "simulated", sep + 1, "requests",
                                                     (json_int_t)e[i]->n));
        }
        free(e);
    }
    json_object_set_new(root, "requests", json_integer(s->requests));
    json_object_set_new(root, "issues", json_integer(s->issues));
    json_object_set_new(root, "verifies", json_integer(s->verifies));
    json_object_set_new(root, "skipped", json_integer(s->skipped));
    json_object_set_new(root, "rules", rules);
    json_object_set_new(root, "other", other);
    json_object_set_new(root, "spend_saved_minor", json_integer(saved));
    json_object_set_new(root, "ledger", json_pack("{s:o, s:I}", "decisions", sim_tally_json(s->ledger_dec),
                                                  "spend_minor", (json_int_t)s->ledger_spend));
    json_object_set_new(root, "simulated", json_pack("{s:o}", "decisions", sim_tally_json(s->sim_dec)));
    json_object_set_new(root, "agree", json_integer(s->agree));
    json_object_set_new(root, "changes", changes);
    if (s->cfg->limits.currency[0])
        json_object_set_new(root, "currency", json_string(s->cfg->limits.currency));
    return root;
}

/* "accepted 8, rate_limited 2" from a {decision: n} object. */
static void sim_print_counts(const char *head, json_t *o)
{
    void *it;
    int first = 1;

    printf("%-10s", head);
    for (it = json_object_iter(o); it; it = json_object_iter_next(o, it)) {
        printf("%s%s %lld", first ? "" : ", ", json_object_iter_key(it),
               (long long)json_integer_value(json_object_iter_value(it)));
        first = 0;
    }
    printf("%s\n", first ? "-" : "");
}

/* The same figures for people: a summary, then one line per rule. */
static void sim_print_table(json_t *root)
{
    json_t *rules = json_object_get(root, "rules"), *other = json_object_get(root, "other"), *r, *t, *c;
    json_t *changes = json_object_get(root, "changes");
    const char *name;
    void *it;
    size_t i;

    printf("requests  %lld (issues %lld, verifies %lld; skipped %lld)\n",
           (long long)json_integer_value(json_object_get(root, "requests")),
           (long long)json_integer_value(json_object_get(root, "issues")),
           (long long)json_integer_value(json_object_get(root, "verifies")),
           (long long)json_integer_value(json_object_get(root, "skipped")));
    sim_print_counts("ledger", json_object_get(json_object_get(root, "ledger"), "decisions"));
    sim_print_counts("simulated", json_object_get(json_object_get(root, "simulated"), "decisions"));
    printf("spend     %lld in the ledger, %lld on requests the new rules refuse\n",
           (long long)json_integer_value(json_object_get(json_object_get(root, "ledger"), "spend_minor")),
           (long long)json_integer_value(json_object_get(root, "spend_saved_minor")));
    printf("agree     %lld\n", (long long)json_integer_value(json_object_get(root, "agree")));
    for (i = 0; (c = json_array_get(changes, i)) != NULL; i++)
        printf("changed   %s -> %s: %lld\n", json_string_value(json_object_get(c, "ledger")),
               json_string_value(json_object_get(c, "simulated")),
               (long long)json_integer_value(json_object_get(c, "requests")));
    printf("\n%-32s %-8s %8s %6s %12s  %s\n", "RULE", "MODE", "REFUSED", "KEYS", "SPEND_SAVED", "TOP");
    for (it = json_object_iter(rules); it; it = json_object_iter_next(rules, it)) {
        name = json_object_iter_key(it);
        r = json_object_iter_value(it);
        printf("%-32s %-8s %8lld %6lld %12lld  ", name, json_string_value(json_object_get(r, "mode")),
               (long long)json_integer_value(json_object_get(r, "refused")),
               (long long)json_integer_value(json_object_get(r, "keys")),
               (long long)json_integer_value(json_object_get(r, "spend_saved_minor")));
        for (i = 0; (t = json_array_get(json_object_get(r, "top"), i)) != NULL; i++)
            printf("%s%s (%lld)", i ? ", " : "", json_string_value(json_object_get(t, "key")),
                   (long long)json_integer_value(json_object_get(t, "refused")));
        printf("%s\n", json_array_size(json_object_get(r, "top")) ? "" : "-");
    }
    for (it = json_object_iter(other); it; it = json_object_iter_next(other, it)) {
        r = json_object_iter_value(it);
        printf("%-32s %-8s %8lld %6s %12lld  -\n", json_object_iter_key(it), "-",
               (long long)json_integer_value(json_object_get(r, "refused")), "-",
               (long long)json_integer_value(json_object_get(r, "spend_saved_minor")));
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

/* The flags that take a value; "--db FILE" and "--db=FILE" alike. */
static const char *const sim_flags[] = {"--db", "-c", "--format", "--top", NULL};

int otpctl_simulate(int argc, char **argv)
{
    const char **paths = calloc((size_t)argc + 1, sizeof(*paths));
    const char *values[4] = {NULL, NULL, NULL, NULL};
    struct history_filter filter = {NULL, INT64_MIN, INT64_MAX};
    struct history *h = NULL;
    struct simredis r;
    struct sim s;
    enum sim_format fmt = SIM_JSON;
    enum otp_rc rc;
    char err[OTP_ERR_LEN], *errors = NULL, *end;
    char secret[2 * CODE_ID_LEN + 1];
    json_t *out = NULL;
    long top = SIM_TOP_DEFAULT;
    int i, k, n_paths = 0, got, ex = EX_OK;

    memset(&s, 0, sizeof(s));
    memset(&r, 0, sizeof(r));
    if (paths == NULL) {
        fputs("otpctl simulate: out of memory\n", stderr);
        return EX_OSERR;
    }
    for (i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        size_t len = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs("usage:", stdout);
            otpctl_simulate_usage(stdout);
            goto out;
        }
        if (strcmp(a, "--reveal-phones") == 0) {
            s.reveal = 1;
            continue;
        }
        for (k = 0; sim_flags[k]; k++) {
            len = strlen(sim_flags[k]);
            if (strncmp(a, sim_flags[k], len) == 0 && (a[len] == '\0' || a[len] == '='))
                break;
        }
        if (sim_flags[k] == NULL) {
            ex = sim_usage_error("unknown argument ", a);
            goto out;
        }
        if (a[len] == '=')
            v = a + len + 1;
        else if (i + 1 < argc)
            v = argv[++i];
        if (v == NULL) {
            ex = sim_usage_error("a value is missing after ", sim_flags[k]);
            goto out;
        }
        if (k == 0)
            paths[n_paths++] = v;
        else if (values[k] != NULL) {
            ex = sim_usage_error("given twice: ", sim_flags[k]);
            goto out;
        } else
            values[k] = v;
    }
    if (n_paths == 0 || values[1] == NULL) {
        ex = sim_usage_error(n_paths == 0 ? "no ledger: give --db LEDGER" : "no rules: give -c NEW.json", "");
        goto out;
    }
    if (values[2] == NULL || strcmp(values[2], "json") == 0)
        fmt = SIM_JSON;
    else if (strcmp(values[2], "table") == 0)
        fmt = SIM_TABLE;
    else {
        ex = sim_usage_error("--format must be json or table, not ", values[2]);
        goto out;
    }
    if (values[3] != NULL && ((top = strtol(values[3], &end, 10)) < 0 || top > SIM_TOP_MAX || *end != '\0' ||
                              end == values[3])) {
        ex = sim_usage_error("--top must be a number from 0 to 1000, not ", values[3]);
        goto out;
    }
    /* The rules, prices and caps; no secret is read or needed. */
    config_set_secrets(0);
    s.cfg = config_load(values[1], &errors);
    config_set_secrets(1);
    if (s.cfg == NULL) {
        fprintf(stderr, "otpctl simulate: %s is not a valid config:\n%s", values[1], errors ? errors : "");
        ex = EX_CONFIG;
        goto out;
    }
    if ((rc = history_open(paths, n_paths, &h, err)) != OTP_OK || (rc = history_query(h, &filter, err)) != OTP_OK) {
        fprintf(stderr, "otpctl simulate: %s\n", err);
        ex = sim_history_exit(rc);
        goto out;
    }
    /* Codes and scopes under a key made for this run and forgotten. */
    code_new_id(secret);
    code_new_id(secret + CODE_ID_LEN);
    s.keys = code_keys_new((const unsigned char *)secret, strlen(secret));
    code_wipe(secret, sizeof(secret));
    s.rules = calloc(s.cfg->limits.n_rules + 1, sizeof(*s.rules));
    s.ledger_dec = tally_new();
    s.sim_dec = tally_new();
    s.changes = tally_new();
    s.messages = tally_new();
    for (i = 0; s.rules && i < (int)s.cfg->limits.n_rules; i++)
        if ((s.rules[i].keys = tally_new()) == NULL)
            break;
    if (s.keys == NULL || s.rules == NULL || i < (int)s.cfg->limits.n_rules || !s.ledger_dec || !s.sim_dec || !s.changes ||
        !s.messages) {
        fputs("otpctl simulate: out of memory\n", stderr);
        ex = EX_OSERR;
        goto out;
    }
    if ((ex = sim_start(&s, &r)) != EX_OK)
        goto out;
    for (;;) {
        struct history_event ev;
        if ((rc = history_next(h, &ev, &got, err)) != OTP_OK) {
            fprintf(stderr, "otpctl simulate: %s\n", err);
            ex = sim_history_exit(rc);
            goto out;
        }
        if (!got)
            break;
        if (ev.kind == HISTORY_SEND)
            sim_send(&s, &ev);
        if (ev.kind != HISTORY_REQUEST)
            continue;
        if ((ex = sim_request(&s, &ev, err)) != EX_OK) {
            fprintf(stderr, "otpctl simulate: %s\n",
                    ex == EX_UNAVAILABLE ? "the private redis-server failed: " : "out of memory");
            if (ex == EX_UNAVAILABLE)
                fprintf(stderr, "otpctl simulate: %s\n", err);
            goto out;
        }
    }
    if ((out = sim_json(&s, (int)top)) == NULL) {
        ex = EX_OSERR;
        goto out;
    }
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
out:
    json_decref(out);
    /* The store's connections close before their server stops. */
    limits_free(s.limits);
    store_free(s.store);
    s.limits = NULL;
    s.store = NULL;
    simredis_stop(&r); /* also when it never started, or half did */
    sim_free(&s);
    history_close(h);
    free(errors);
    free(paths);
    return ex;
}
