/*
 * admin_rows: the admin rows in Redis (admin.lua) and in the ledger: add,
 * remove and list overrides and blocks, the wrong-guess unlock, and the
 * read of every live row that the snapshot and the list share. Each call
 * blocks on Redis (and the ledger, for a change); an admin action a
 * minute is a busy day, and the snapshot's read runs once a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/timestamp.h"
#include "../base/phone.h"
#include "admin_int.h"

#define ADMIN_OV_KEY "otp:adm:o"
#define ADMIN_OVZ_KEY "otp:adm:oz"
#define ADMIN_BL_KEY "otp:adm:b"
#define ADMIN_BLZ_KEY "otp:adm:bz"
#define ADMIN_VER_KEY "otp:adm:v"

/* The KEYS of the ops 'add', 'del' and 'snap', in admin.lua's order. */
static const char *const row_keys[] = {ADMIN_OV_KEY, ADMIN_OVZ_KEY, ADMIN_BL_KEY, ADMIN_BLZ_KEY,
                                       ADMIN_VER_KEY};
#define ROW_KEYS 5

static void new_id(char *out)
{
    unsigned char raw[ADMIN_ID_LEN / 2];
    size_t i;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        /* Never seen on Linux for 8 bytes; the clock keeps ids apart. */
        uint64_t t = (uint64_t)clock_mono_ns() ^ (uint64_t)clock_wall_ms();
        memcpy(raw, &t, sizeof(raw));
    }
    for (i = 0; i < sizeof(raw); i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

static const char *kind_name(enum admin_kind k)
{
    return k == ADMIN_OVERRIDE ? "override" : "block";
}

/* Records an admin action; a ledger failure is logged (the change stands:
 * it is in Redis already, and the log line names it). */
static void record(struct admin *a, const struct ledger_admin *r)
{
    enum otp_rc rc = ledger_admin(a->ledger, r);

    if (rc != OTP_OK)
        log_msg(LOG_ERROR, "ledger: admin %s %s by %s not recorded: %s", r->action, r->kind, r->admin,
                otp_rc_str(rc));
}

/* ---- Add, remove, list ---- */

/* kind's body into the row to store, checked against the rules in force
 * now; NULL with detail when refused. */
static json_t *add_row(struct admin *a, enum admin_kind kind, const char *body, size_t len, int64_t *ttl_ms,
                       char *detail, size_t cap)
{
    struct admin_override ov;
    struct cfg_rule *rules;
    size_t n_rules;
    json_t *row;

    if (kind == ADMIN_BLOCK)
        return admin_block_body(body, len, ttl_ms, detail, cap);
    if ((rules = admin_rules_copy(a, &n_rules)) == NULL) {
        snprintf(detail, cap, "out of memory");
        return NULL;
    }
    row = admin_override_body(rules, n_rules, body, len, &ov, ttl_ms, detail, cap);
    free(rules);
    return row;
}

enum otp_rc admin_add(struct admin *a, enum admin_kind kind, const char *who, const char *body, size_t len,
                      char *id, int64_t *expires_ms, char *detail, size_t cap)
{
    struct store_reply *rep = NULL;
    json_t *row;
    char *text = NULL, ttl[24], max[24], err[OTP_ERR_LEN] = "";
    const char *args[ROW_KEYS + 6];
    int64_t ttl_ms = 0;
    enum otp_rc rc = OTP_EINVAL;
    int n = 0, k;

    if ((row = add_row(a, kind, body, len, &ttl_ms, detail, cap)) == NULL)
        return OTP_EINVAL;
    json_object_set_new(row, "created_by", json_string(who));
    if ((text = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS)) == NULL) {
        snprintf(detail, cap, "out of memory");
        rc = OTP_ENOMEM;
        goto out;
    }
    new_id(id);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
    snprintf(max, sizeof(max), "%d", ADMIN_ROWS_MAX);
    for (k = 0; k < ROW_KEYS; k++)
        args[n++] = row_keys[k];
    args[n++] = "add";
    args[n++] = kind == ADMIN_OVERRIDE ? "o" : "b";
    args[n++] = id;
    args[n++] = text;
    args[n++] = ttl;
    args[n++] = max;
    if ((rc = store_eval(a->store, a->h, ROW_KEYS, n, args, &rep, err)) != OTP_OK) {
        snprintf(detail, cap, "the store is unavailable");
        log_msg(LOG_WARN, "admin: add %s refused, store unavailable: %s", kind_name(kind), err);
        goto out;
    }
    if (rep->n < 2 || rep->strs[0] != NULL || rep->strs[1] != NULL) {
        snprintf(detail, cap, "the store gave a bad reply");
        rc = OTP_ESTORE;
        goto out;
    }
    if (rep->ints[0] != 1) {
        snprintf(detail, cap, "%d live %ss already; remove some or let them expire", ADMIN_ROWS_MAX,
                 kind_name(kind));
        rc = OTP_EFULL;
        goto out;
    }
    *expires_ms = rep->ints[1];
    record(a, &(struct ledger_admin){clock_wall_ms(), who, "add", kind_name(kind), id, text,
                                    json_string_value(json_object_get(row, "note")), *expires_ms, 0});
    /* The row (phones and all) is the ledger's; the log names it only. */
    log_event(LOG_INFO, kind == ADMIN_OVERRIDE ? "admin.override_added" : "admin.block_added",
              LOG_FIELDS(LOG_STR("admin", who), LOG_STR("id", id), LOG_INT("expires_ms", *expires_ms)),
              "admin: %s added %s %s", who, kind_name(kind), id);
    rc = OTP_OK;
out:
    store_reply_free(rep);
    free(text);
    json_decref(row);
    return rc;
}

enum otp_rc admin_remove(struct admin *a, enum admin_kind kind, const char *who, const char *id, char *err)
{
    struct store_reply *rep = NULL;
    const char *args[ROW_KEYS + 3];
    enum otp_rc rc;
    int n = 0, k;

    for (k = 0; k < ROW_KEYS; k++)
        args[n++] = row_keys[k];
    args[n++] = "del";
    args[n++] = kind == ADMIN_OVERRIDE ? "o" : "b";
    args[n++] = id;
    if ((rc = store_eval(a->store, a->h, ROW_KEYS, n, args, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n != 1 || rep->strs[0] != NULL) {
        snprintf(err, OTP_ERR_LEN, "admin: remove gave a bad reply");
        rc = OTP_ESTORE;
    } else if (rep->ints[0] != 1) {
        rc = OTP_ENOTFOUND;
    } else {
        record(a,
               &(struct ledger_admin){clock_wall_ms(), who, "remove", kind_name(kind), id, NULL, NULL, 0, 0});
        log_event(LOG_INFO, kind == ADMIN_OVERRIDE ? "admin.override_removed" : "admin.block_removed",
                  LOG_FIELDS(LOG_STR("admin", who), LOG_STR("id", id)), "admin: %s removed %s %s", who,
                  kind_name(kind), id);
    }
    store_reply_free(rep);
    return rc;
}

enum otp_rc admin_rows_read(struct admin *a, const char *known, struct store_reply **rep, char *err)
{
    const char *args[ROW_KEYS + 2];
    const struct store_reply *r;
    int n = 0, k;
    enum otp_rc rc;

    for (k = 0; k < ROW_KEYS; k++)
        args[n++] = row_keys[k];
    args[n++] = "snap";
    args[n++] = known;
    if ((rc = store_eval(a->store, a->h, ROW_KEYS, n, args, rep, err)) != OTP_OK)
        return rc;
    r = *rep;
    if (r->n < ADMIN_SNAP_N_OV || r->strs[ADMIN_SNAP_COUNTER] == NULL || r->strs[ADMIN_SNAP_NOW] != NULL ||
        (r->n > ADMIN_SNAP_N_OV && (r->strs[ADMIN_SNAP_N_OV] != NULL || r->ints[ADMIN_SNAP_N_OV] < 0 ||
                                    (size_t)r->ints[ADMIN_SNAP_N_OV] > r->n - ADMIN_SNAP_ROWS))) {
        snprintf(err, OTP_ERR_LEN, "admin: the rows' reply is malformed");
        store_reply_free(*rep);
        *rep = NULL;
        return OTP_ESTORE;
    }
    return OTP_OK;
}

/* One stored row as an API item: times in RFC 3339 UTC. */
static json_t *row_item(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    const char *names[] = {"created_at", "expires_at"};
    char ts[TIMESTAMP_LEN];
    int i;

    if (j == NULL)
        return NULL;
    for (i = 0; i < 2; i++) {
        json_t *v = json_object_get(j, names[i]);
        if (json_is_integer(v) && timestamp_format(json_integer_value(v), ts, sizeof(ts)) == OTP_OK)
            json_object_set_new(j, names[i], json_string(ts));
    }
    return j;
}

enum otp_rc admin_list(struct admin *a, enum admin_kind kind, char **out, char *err)
{
    struct store_reply *rep = NULL;
    json_t *items = json_array(), *top;
    size_t i, from, to, n_ov;
    enum otp_rc rc;

    *out = NULL;
    if (items == NULL)
        return OTP_ENOMEM;
    if ((rc = admin_rows_read(a, "", &rep, err)) != OTP_OK) {
        json_decref(items);
        return rc;
    }
    n_ov = (size_t)rep->ints[ADMIN_SNAP_N_OV];
    from = kind == ADMIN_OVERRIDE ? ADMIN_SNAP_ROWS : ADMIN_SNAP_ROWS + n_ov;
    to = kind == ADMIN_OVERRIDE ? ADMIN_SNAP_ROWS + n_ov : rep->n;
    for (i = from; i < to; i++) {
        json_t *it = rep->strs[i] ? row_item(rep->strs[i]) : NULL;
        if (it != NULL)
            json_array_append_new(items, it);
    }
    store_reply_free(rep);
    top = json_pack("{s:o}", "items", items);
    if (top == NULL || (*out = json_dumps(top, JSON_COMPACT)) == NULL)
        rc = OTP_ENOMEM;
    json_decref(top);
    return rc;
}

/* ---- Unlock ---- */

/* The unlock op's arguments into args (room for 4 + 2 * n_rules): the
 * phone's hash key, the change counter, "u", the caller ("" for all), then
 * the field of each wrong_guess_cap rule whose key holds the phone and the
 * position of the caller's part in it (its text in pos[i]). Returns how
 * many were written. */
static int unlock_args(const struct cfg_rule *rules, size_t n_rules, const char *key, const char *api_key,
                       const char **args, char (*pos)[8])
{
    size_t i;
    int na = 0;

    args[na++] = key;
    args[na++] = ADMIN_VER_KEY; /* moved by an unlock: every refusal cache is cleared */
    args[na++] = "u";
    args[na++] = api_key;
    for (i = 0; i < n_rules; i++) {
        const struct cfg_rule *r = &rules[i];
        unsigned mask = admin_rule_mask(r);
        int kind, p = 0;
        if (r->algo != CFG_ALGO_WRONG_GUESS_CAP || !(mask & (1u << CFG_KEY_PHONE)))
            continue;
        /* The field's parts after the rule's own: each other kind of
         * the key, in kind order (limits_rule_key). */
        if (mask & (1u << CFG_KEY_API_KEY))
            for (kind = CFG_KEY_PHONE + 1; kind <= CFG_KEY_API_KEY; kind++)
                p += (mask & (1u << kind)) != 0;
        snprintf(pos[i], sizeof(pos[i]), "%d", p);
        args[na++] = r->field;
        args[na++] = pos[i];
    }
    return na;
}

/* Clears u's wrong-guess state in Redis, by the rules in force now; the
 * fields cleared in *n. */
static enum otp_rc unlock_run(struct admin *a, const struct admin_unlock_req *u, int *n, char *detail,
                              size_t cap)
{
    struct store_reply *rep = NULL;
    struct cfg_rule *rules;
    const char **args = NULL;
    char key[PHONE_MAX + 8], (*pos)[8] = NULL, err[OTP_ERR_LEN] = "";
    size_t n_rules = 0;
    enum otp_rc rc;
    int na;

    /* The phone's hash, as limits_key names it: the state of every
     * wrong-guess rule (their keys hold phone). */
    snprintf(key, sizeof(key), "otp:{%s}", u->phone);
    rules = admin_rules_copy(a, &n_rules);
    args = calloc(4 + 2 * n_rules, sizeof(*args));
    pos = calloc(n_rules + 1, sizeof(*pos));
    if (rules == NULL || args == NULL || pos == NULL) {
        snprintf(detail, cap, "out of memory");
        rc = OTP_ENOMEM;
        goto out;
    }
    na = unlock_args(rules, n_rules, key, u->api_key, args, pos);
    if ((rc = store_eval(a->store, a->h, 2, na, args, &rep, err)) != OTP_OK) {
        snprintf(detail, cap, "the store is unavailable");
        log_msg(LOG_WARN, "admin: unlock refused, store unavailable: %s", err);
        goto out;
    }
    if (rep->n != 1 || rep->strs[0] != NULL) {
        snprintf(detail, cap, "the store gave a bad reply");
        rc = OTP_ESTORE;
        goto out;
    }
    *n = (int)rep->ints[0];
out:
    store_reply_free(rep);
    free(pos);
    free(args);
    free(rules);
    return rc;
}

enum otp_rc admin_unlock(struct admin *a, const char *who, const char *body, size_t len, int *n, char *detail,
                         size_t cap)
{
    struct admin_unlock_req u;
    char masked[PHONE_MAX], *text = NULL;
    json_t *j;
    enum otp_rc rc;

    *n = 0;
    if ((j = admin_unlock_body(body, len, &u, detail, cap)) == NULL)
        return OTP_EINVAL;
    if ((rc = unlock_run(a, &u, n, detail, cap)) != OTP_OK)
        goto out;
    json_object_set_new(j, "unlocked", json_integer(*n));
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    record(a, &(struct ledger_admin){clock_wall_ms(), who, "unlock", "lock", NULL, text, u.note, 0, *n});
    phone_mask(u.phone, masked, sizeof(masked));
    log_event(LOG_INFO, "admin.unlocked",
              LOG_FIELDS(LOG_STR("admin", who), LOG_STR("phone", masked), LOG_STR("caller", u.api_key),
                         LOG_INT("cleared", *n)),
              "admin: %s unlocked %s%s%s: %d cleared", who, masked, u.api_key[0] ? " for " : "", u.api_key,
              *n);
out:
    free(text);
    json_decref(j);
    return rc;
}
