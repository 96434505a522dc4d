/*
 * limits_money: the cost caps outside issue.lua. Their Redis fields and
 * the cap windows text a reservation carries (pure); the headroom /metrics
 * shows (headroom.lua, one call per scrape); and the pacer's side, run on
 * its money thread: reserve.lua before a provider call and refund.lua when
 * a message provably never reached one, each one call per attempt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/unittest.h"
#include "headroom.lua.h"
#include "limits_int.h"
#include "refund.lua.h"
#include "reserve.lua.h"

/* The money scripts' KEYS (reserve.lua, refund.lua; headroom.lua takes the
 * first): the global cost hash, the message's money hash. */
enum money_keys { MK_COST = 1, MK_MSG };

/* reserve.lua's ARGV: the fixed values, then from RV_CAPS ncaps cap_argv,
 * then the consumer asking. */
enum reserve_argv { RV_NEED = 1, RV_PRICE, RV_ISSUE_MS, RV_MODE, RV_NCAPS, RV_CAPS };
/* reserve.lua's reply. */
enum reserve_reply { R_OK, R_IDX, R_AT, R_RETRY, R_CAP, R_N };

/* refund.lua's ARGV and reply. */
enum refund_argv { RF_PRICE = 1, RF_COST_MS, RF_WINDOWS, RF_IDX, RF_OWNER };
enum refund_reply { F_STATUS, F_ANOMALIES, F_N };

struct limits_money {
    struct limits *l;
    struct store *store;
    int h_reserve, h_refund;
};

enum otp_rc limits_cap_headroom(struct limits *l, const struct limits_cap_ask *ask, size_t n, int64_t *left_minor,
                                char *err)
{
    /* headroom.lua: KEYS otp:cost, then CA_N ARGV per cap from 1. */
    const char *args[MK_COST + CA_N * LIMITS_HEADROOM_MAX];
    char nums[LIMITS_HEADROOM_MAX][2][24];
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    size_t i;

    if (n == 0)
        return OTP_OK;
    if (n > LIMITS_HEADROOM_MAX)
        return OTP_EINVAL;
    args[MK_COST - 1] = "otp:cost";
    for (i = 0; i < n; i++) {
        const char **cap = args + MK_COST + CA_N * i;
        snprintf(nums[i][0], sizeof(nums[i][0]), "%lld", (long long)ask[i].window_ms);
        snprintf(nums[i][1], sizeof(nums[i][1]), "%lld", (long long)ask[i].max_minor);
        cap[CA_FIELD] = ask[i].field;
        cap[CA_WINDOW] = nums[i][0];
        cap[CA_MAX] = nums[i][1];
    }
    if ((rc = store_eval(l->store, l->h_headroom, MK_COST, (int)(MK_COST + CA_N * n), args, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n != n) {
        snprintf(err, OTP_ERR_LEN, "headroom.lua: %zu values for %zu caps", rep->n, n);
        rc = OTP_ESTORE;
    }
    for (i = 0; rc == OTP_OK && i < n; i++)
        left_minor[i] = rep->strs[i] ? 0 : rep->ints[i];
    store_reply_free(rep);
    return rc;
}

void limits_cap_field(int64_t window_ms, char *out, size_t cap)
{
    snprintf(out, cap, "c%lld", (long long)window_ms); /* refund.lua builds the same name */
}

void limits_cap_key_field(int64_t window_ms, const char *api_key, char *out, size_t cap)
{
    /* reserve.lua, refund.lua and issue.lua's abandon build the same name. */
    snprintf(out, cap, "k%lld:%s", (long long)window_ms, api_key ? api_key : "");
}

/* Appends what snprintf wrote, or nothing when it did not fit. */
static void text_add(char *out, size_t cap, size_t *n, int k)
{
    if (k > 0 && (size_t)k < cap - *n)
        *n += (size_t)k;
    else
        out[*n] = '\0';
}

/* The cap windows text of a reservation taken on caps by api_key, into out
 * (LIMITS_CAPS_TEXT): the global windows as digits, comma-separated (the
 * old text, which still means exactly that); then, when any cap is per
 * caller, ";", the caller's name with each byte as two letters a-p (high
 * nibble, low nibble), ":", and each per-caller window_ms with each digit d
 * as the letter 'a' + d, comma-separated. "3600000;gbgcgd:igeaaaaa" is a
 * global hour and abc's own day. No digit after the ';': a parser of the
 * old text reads the global windows alone. */
UNITTEST void limits_caps_text(const struct cfg_cap *caps, size_t n_caps, const char *api_key, char *out, size_t cap)
{
    size_t i, n = 0, first = 1;
    const unsigned char *p;

    out[0] = '\0';
    for (i = 0; i < n_caps; i++)
        if (!caps[i].per_key) {
            text_add(out, cap, &n, snprintf(out + n, cap - n, "%s%lld", first ? "" : ",",
                                            (long long)caps[i].window_ms));
            first = 0;
        }
    for (i = 0; i < n_caps && caps[i].per_key == 0; i++)
        ;
    if (i == n_caps)
        return;
    /* The caller's part carries no digit, so a parser of the old text
     * (Lua's gmatch('%d+') in an older instance of a rolling upgrade)
     * reads only the global windows: it then leaves the caller's money
     * counted, more than was spent, never less. */
    text_add(out, cap, &n, snprintf(out + n, cap - n, ";"));
    for (p = (const unsigned char *)(api_key ? api_key : ""); *p; p++)
        text_add(out, cap, &n, snprintf(out + n, cap - n, "%c%c", 'a' + (*p >> 4), 'a' + (*p & 15)));
    text_add(out, cap, &n, snprintf(out + n, cap - n, ":"));
    for (first = 1, i = 0; i < n_caps; i++) {
        char w[24], *d;
        if (!caps[i].per_key)
            continue;
        snprintf(w, sizeof(w), "%lld", (long long)caps[i].window_ms);
        for (d = w; *d; d++)
            *d = (char)('a' + (*d - '0'));
        text_add(out, cap, &n, snprintf(out + n, cap - n, "%s%s", first ? "" : ",", w));
        first = 0;
    }
}

void limits_cost_caps(const struct limits_rules *rs, const char *api_key, char *out, size_t cap)
{
    limits_caps_text(rs->caps, rs->n_caps, api_key, out, cap);
}

struct limits_money *limits_money_new(struct limits *l, struct store *s)
{
    struct limits_money *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->l = l;
    m->store = s;
    m->h_reserve = store_script(s, limits_reserve_lua);
    m->h_refund = store_script(s, limits_refund_lua);
    return m;
}

void limits_money_free(struct limits_money *m)
{
    free(m);
}

/* The KEYS both money scripts take: otp:cost and message id's hash, which
 * msg_key holds (LIMITS_KEY_LEN bytes). */
static void money_keys(struct limits_args *a, const char *id, char *msg_key)
{
    store_msg_key(id, msg_key, LIMITS_KEY_LEN);
    limits_args_init(a);
    limits_args_key(a, "otp:cost"); /* MK_COST */
    limits_args_key(a, msg_key);    /* MK_MSG */
}

/* reserve.lua's arguments for limits_reserve, caps from rs. */
static void reserve_args(struct limits_args *a, const struct limits_rules *rs, const char *owner, int need,
                         enum limits_use use, int64_t price_minor, int64_t issue_ms)
{
    size_t i;

    limits_argv_int(a, RV_NEED, need);
    limits_argv_int(a, RV_PRICE, price_minor);
    limits_argv_int(a, RV_ISSUE_MS, issue_ms);
    limits_argv_int(a, RV_MODE, (int64_t)use);
    limits_argv_int(a, RV_NCAPS, (int64_t)rs->n_caps);
    for (i = 0; i < rs->n_caps; i++) {
        int at = RV_CAPS + (int)i * CA_N;
        char *field = limits_argv_buf(a, at + CA_FIELD);
        /* A caller's cap: reserve.lua names it for the message's caller. */
        if (rs->caps[i].per_key)
            snprintf(field, sizeof(a->num[0]), "k%lld", (long long)rs->caps[i].window_ms);
        else
            limits_cap_field(rs->caps[i].window_ms, field, sizeof(a->num[0]));
        limits_argv_int(a, at + CA_WINDOW, rs->caps[i].window_ms);
        limits_argv_int(a, at + CA_MAX, rs->caps[i].max_minor);
    }
    limits_argv_str(a, RV_CAPS + (int)rs->n_caps * CA_N, owner);
}

enum otp_rc limits_reserve(struct limits_money *m, const char *id, const char *owner, int need,
                           enum limits_use use, int64_t price_minor, int64_t issue_ms, struct limits_grant *out,
                           char *err)
{
    struct limits_rules *rs = limits_rules_get(m->l);
    struct limits_args a = {0};
    char msg_key[LIMITS_KEY_LEN];
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    memset(out, 0, sizeof(*out));
    money_keys(&a, id, msg_key);
    reserve_args(&a, rs, owner, need, use, price_minor, issue_ms);
    rc = store_eval(m->store, m->h_reserve, a.nkeys, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != R_N) {
        snprintf(err, OTP_ERR_LEN, "limits: reserve script gave %zu values, want %d", rep->n, (int)R_N);
        rc = OTP_ESTORE;
        goto out;
    }
    out->ok = rep->ints[R_OK] == 1;
    out->idx = (int)rep->ints[R_IDX];
    out->at_ms = rep->ints[R_AT];
    out->retry_ms = rep->ints[R_RETRY];
    if (!out->ok && rep->ints[R_CAP] >= 0 && (size_t)rep->ints[R_CAP] < rs->n_caps)
        out->cap_window_ms = rs->caps[rep->ints[R_CAP]].window_ms;
out:
    store_reply_free(rep);
    limits_rules_put(m->l, rs);
    return rc;
}

enum otp_rc limits_refund_once(struct limits_money *m, const char *id, const char *owner, int idx,
                               int64_t price_minor, int64_t cost_ms, const char *windows, int *result,
                               int *anomalies, char *err)
{
    struct limits_args a = {0};
    char msg_key[LIMITS_KEY_LEN];
    struct store_reply *rep = NULL;
    enum otp_rc rc;

    *result = 0;
    *anomalies = 0;
    money_keys(&a, id, msg_key);
    limits_argv_int(&a, RF_PRICE, price_minor);
    limits_argv_int(&a, RF_COST_MS, cost_ms);
    /* Not the caps in force now: the windows this money was counted in. */
    limits_argv_str(&a, RF_WINDOWS, windows != NULL ? windows : "");
    limits_argv_int(&a, RF_IDX, idx);
    limits_argv_str(&a, RF_OWNER, owner);
    rc = store_eval(m->store, m->h_refund, a.nkeys, a.n, a.v, &rep, err);
    if (rc != OTP_OK)
        goto out;
    if (rep->n != F_N) {
        snprintf(err, OTP_ERR_LEN, "limits: refund script gave %zu values, want %d", rep->n, (int)F_N);
        rc = OTP_ESTORE;
        goto out;
    }
    *result = (int)rep->ints[F_STATUS];
    *anomalies = (int)rep->ints[F_ANOMALIES];
out:
    store_reply_free(rep);
    return rc;
}
