/*
 * otpctl simulate's replay: the private redis-server and a store on it
 * (sim_start), and each ledger row through the real scripts (src/limits)
 * on the row's own time: a requests row as an issue or a verify, count
 * times (sim_request), a provider call as spend (sim_send). Counts what
 * each rule and other reason refused, by key, into struct sim. Load: one
 * Redis round trip per replayed request, two for an issue the new rules
 * accept.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "../../src/base/config.h"
#include "../../src/base/phone.h"
#include "../../src/limits/limits.h"
#include "../../src/otp/code.h"
#include "../../src/store/store.h"
#include "sim_int.h"

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

/* A requests row made into the scripts' request; its strings live in the
 * buffers here and in the row. */
struct sim_req {
    struct limits_request lr;
    struct phone_info pi;
    char ip_key[LIMITS_IP_KEY_MAX], scope[CODE_SCOPE_LEN + 1], vhash[CODE_HASH_LEN + 1];
};

/* Builds rq from ev: 0, or -1 for a row that never reached the rules. */
static int sim_req_of(const struct sim *s, const struct history_event *ev, struct sim_req *rq)
{
    struct limits_request *lr = &rq->lr;

    /* Malformed requests never reached the rules, in otpd or here. */
    if (ev->request == NULL || ev->phone == NULL || ev->api_key == NULL || ev->state == NULL ||
        strcmp(ev->state, "invalid_request") == 0 || phone_parse(ev->phone, &rq->pi) != PHONE_OK ||
        (ev->client_ip && limits_ip_key(ev->client_ip, rq->ip_key, sizeof(rq->ip_key)) != OTP_OK))
        return -1;
    memset(lr, 0, sizeof(*lr));
    lr->phone = rq->pi.e164;
    lr->device_id = ev->device_id;
    lr->ip_key = ev->client_ip ? rq->ip_key : NULL;
    lr->api_key = ev->api_key;
    lr->purpose = ev->purpose ? ev->purpose : "default";
    memcpy(lr->region, rq->pi.region, sizeof(lr->region));
    lr->type = rq->pi.type;
    code_scope(s->keys, lr->api_key, lr->purpose, rq->scope);
    lr->scope = rq->scope;
    code_hash(s->keys, lr->phone, "right", rq->vhash);
    lr->vhash = rq->vhash;
    lr->ttl_ms = s->cfg->otp.ttl_ms;
    lr->max_attempts = s->cfg->otp.max_attempts;
    lr->at_ms = ev->ts_ms > 0 ? ev->ts_ms : 1;
    return 0;
}

/* Counts the outcome o of one replay of ev: its decision, whether the
 * ledger's differs, the refusing rule's key or the other reason, and the
 * message whose sends the refusal would have saved. EX_OK or EX_OSERR. */
static int sim_count(struct sim *s, const struct history_event *ev, const struct sim_req *rq,
                     const struct sim_outcome *o, int issue)
{
    struct sim_bucket *b = NULL;
    char key[512], change[80];

    s->requests++;
    *(issue ? &s->issues : &s->verifies) += 1;
    if (sim_add(s->sim_dec, o->decision, 1) < 0 ||
        (o->shadow[0] && sim_count_shadow(s, o->shadow, &rq->lr, &rq->pi) < 0))
        return EX_OSERR;
    if (strcmp(o->decision, ev->state) == 0) {
        s->agree++;
    } else {
        snprintf(change, sizeof(change), "%s\x1f%s", ev->state, o->decision);
        if (sim_add(s->changes, change, 1) < 0)
            return EX_OSERR;
    }
    key[0] = '\0';
    if (o->rule >= 0) {
        if (sim_count_rule(s, o->rule, &rq->lr, &rq->pi, key, sizeof(key)) < 0)
            return EX_OSERR;
        b = &s->rules[o->rule];
    } else if (o->other >= 0) {
        b = &s->other[o->other];
        b->refused++;
    }
    /* A message the ledger sent that the new rules would not have: its
     * sends, which come later in the history, count as saved. */
    if (b != NULL && issue && ev->message_id && strcmp(ev->state, "accepted") == 0) {
        struct tally_entry *m = tally_get(s->messages, ev->message_id, key);
        if (m == NULL)
            return EX_OSERR;
        m->ref = o->rule >= 0 ? o->rule : -1 - o->other;
    }
    return EX_OK;
}

int sim_request(struct sim *s, const struct history_event *ev, char *err)
{
    struct sim_req rq;
    int issue, served, country, ex;
    int64_t i, count = ev->count > 0 ? ev->count : 1;

    if (sim_req_of(s, ev, &rq) < 0) {
        s->skipped += count;
        return EX_OK;
    }
    issue = strcmp(ev->request, "issue") == 0;
    if (sim_add(s->ledger_dec, ev->state, count) < 0)
        return EX_OSERR;
    /* phone.types, then countries, are checked before any rule, as otp.c
     * does (on issue; a verify is never refused by them). */
    served = (unsigned)rq.pi.type < PHONE_TYPE_COUNT &&
             (s->cfg->limits.phone_types & PHONE_TYPE_BIT(rq.pi.type)) != 0;
    country = served && issue && limits_country(s->limits, rq.lr.region) == FRAUD_DENY;
    for (i = 0; i < count; i++) {
        struct sim_outcome o = {"number_type", -1, SO_NUMBER_TYPE, ""};
        enum otp_rc rc = OTP_OK;
        if (country)
            o = (struct sim_outcome){"country_blocked", -1, SO_COUNTRY, ""};
        if (served && !country)
            rc = issue ? sim_issue(s, &rq.lr, &o, err)
                       : sim_verify(s, &rq.lr, strcmp(ev->state, "verified") == 0, &o, err);
        if (rc != OTP_OK)
            return EX_UNAVAILABLE;
        if ((ex = sim_count(s, ev, &rq, &o, issue)) != EX_OK)
            return ex;
    }
    return EX_OK;
}

void sim_send(struct sim *s, const struct history_event *ev)
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

int sim_start(struct sim *s, struct simredis *r)
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
