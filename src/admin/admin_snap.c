/*
 * admin_snap: the snapshot of the rows every instance keeps, its refresh
 * (admin_refresh, on the main thread at least once a second, reading the
 * rows only when their change counter moved) and the block match that
 * runs on every API request: a walk of the snapshot (up to ADMIN_ROWS_MAX
 * blocks; a scan of 10,000 short comparisons is a few tens of
 * microseconds) with no Redis call, answering only while the last read is
 * fresh (src/base/fresh.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/fnv.h"
#include "../base/fresh.h"
#include "../base/log.h"
#include "../base/unittest.h"
#include "admin_int.h"

void admin_snap_free(struct admin_snap *s)
{
    if (s == NULL)
        return;
    free(s->blocks);
    free(s->ov);
    free(s);
}

static struct admin_snap *snap_get(struct admin *a)
{
    struct admin_snap *s;

    pthread_mutex_lock(&a->mu);
    s = a->snap;
    s->refs++;
    pthread_mutex_unlock(&a->mu);
    return s;
}

static void snap_put(struct admin *a, struct admin_snap *s)
{
    int last;

    pthread_mutex_lock(&a->mu);
    last = --s->refs == 0;
    pthread_mutex_unlock(&a->mu);
    if (last)
        admin_snap_free(s);
}

static int64_t redis_now_ms(struct admin *a)
{
    int64_t off;

    pthread_mutex_lock(&a->mu);
    off = a->offset_ms;
    pthread_mutex_unlock(&a->mu);
    return clock_wall_ms() + off;
}

static int64_t mono_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000);
}

/* ---- Matching ---- */

/* 1 when block b matches s; ip is s's client_ip parsed (family 0: none). */
UNITTEST int admin_block_match(const struct admin_block *b, const struct admin_subject *s,
                               const struct admin_net *ip)
{
    switch (b->match) {
    case ADMIN_M_PHONE:
        return s->phone && strcmp(s->phone, b->value) == 0;
    case ADMIN_M_PHONE_PREFIX:
        return s->phone && strncmp(s->phone, b->value, strlen(b->value)) == 0;
    case ADMIN_M_REGION:
        return s->region && strcmp(s->region, b->value) == 0;
    case ADMIN_M_DEVICE:
        return s->device_id && strcmp(s->device_id, b->value) == 0;
    case ADMIN_M_CLIENT_IP:
        return ip->family != 0 && admin_net_match(&b->net, ip);
    case ADMIN_M_API_KEY:
        return s->api_key && strcmp(s->api_key, b->value) == 0;
    }
    return 0;
}

int admin_blocked(struct admin *a, const struct admin_subject *s, char *what, size_t cap)
{
    struct admin_snap *sn;
    struct admin_net ip = {0};
    int64_t now_ms;
    size_t i;
    int hit = 0;

    pthread_mutex_lock(&a->mu);
    hit = a->snap->n_blocks > 0;
    pthread_mutex_unlock(&a->mu);
    if (!hit)
        return 0; /* the common case: no block at all */
    if (s->client_ip && admin_net_parse(s->client_ip, &ip) != OTP_OK)
        ip.family = 0;
    now_ms = redis_now_ms(a);
    sn = snap_get(a);
    hit = 0;
    for (i = 0; i < sn->n_blocks && !hit; i++) {
        const struct admin_block *b = &sn->blocks[i];
        if (b->expires_ms > now_ms && admin_block_match(b, s, &ip)) {
            snprintf(what, cap, "%s", admin_match_name(b->match));
            pthread_mutex_lock(&a->mu);
            /* A block removed while the rows could not be read must not
             * refuse from memory past the bound every instance keeps. */
            hit = fresh_ok(a->read_ms, mono_ms()) ? 1 : -1;
            if (hit > 0)
                a->stats.blocked[b->match]++;
            pthread_mutex_unlock(&a->mu);
        }
    }
    snap_put(a, sn);
    return hit;
}

/* ---- Reading the rows ---- */

/* Parses one stored block row; 0 when it is not one. */
static int block_parse(const char *text, struct admin_block *b)
{
    json_t *j = json_loads(text, 0, NULL), *match, *v;
    const char *key, *id;
    char detail[160];
    int ok = 0, m;

    memset(b, 0, sizeof(*b));
    if (j == NULL)
        return 0;
    match = json_object_get(j, "match");
    id = json_string_value(json_object_get(j, "id"));
    b->expires_ms = json_integer_value(json_object_get(j, "expires_at"));
    if (id == NULL || strlen(id) != ADMIN_ID_LEN || !json_is_object(match) || json_object_size(match) != 1)
        goto out;
    snprintf(b->id, sizeof(b->id), "%s", id);
    json_object_foreach(match, key, v) {
        if ((m = admin_match_find(key)) < 0 || !json_is_string(v))
            goto out;
        b->match = (enum admin_match)m;
        ok = admin_match_value(b->match, json_string_value(v), b->value, &b->net, detail, sizeof(detail));
    }
out:
    json_decref(j);
    return ok;
}

/* Parses one stored override row; 0 when it is not one. */
static int override_parse(const char *text, struct admin_override *o)
{
    json_t *j = json_loads(text, 0, NULL), *key, *v;
    const char *k, *id, *rule;
    int ok = 0, kind;

    memset(o, 0, sizeof(*o));
    if (j == NULL)
        return 0;
    key = json_object_get(j, "key");
    id = json_string_value(json_object_get(j, "id"));
    rule = json_string_value(json_object_get(j, "rule"));
    if (id == NULL || strlen(id) != ADMIN_ID_LEN || rule == NULL || strlen(rule) >= CFG_NAME_MAX ||
        !json_is_object(key))
        goto out;
    snprintf(o->id, sizeof(o->id), "%s", id);
    snprintf(o->rule, sizeof(o->rule), "%s", rule);
    o->limit = json_integer_value(json_object_get(j, "limit"));
    o->burst = json_integer_value(json_object_get(j, "burst"));
    o->expires_ms = json_integer_value(json_object_get(j, "expires_at"));
    json_object_foreach(key, k, v) {
        for (kind = 0; kind < CFG_KEY_COUNT && strcmp(config_key_name((enum cfg_key)kind), k) != 0; kind++)
            ;
        if (kind == CFG_KEY_COUNT || !json_is_string(v) || json_string_length(v) >= ADMIN_VALUE_MAX)
            goto out;
        o->mask |= 1u << kind;
        snprintf(o->values[kind], ADMIN_VALUE_MAX, "%s", json_string_value(v));
    }
    ok = o->limit > 0;
out:
    json_decref(j);
    return ok;
}

/* A digest of the overrides live at now_ms: their ids, in order. */
static void ov_digest(const struct admin_snap *s, int64_t now_ms, char *out, size_t cap)
{
    uint64_t h = FNV_BASIS, n = 0;
    size_t i;

    for (i = 0; i < s->n_ov; i++) {
        if (s->ov[i].expires_ms <= now_ms)
            continue;
        n++;
        h = fnv_add(h, s->ov[i].id, strlen(s->ov[i].id));
    }
    snprintf(out, cap, "%llu:%016llx", (unsigned long long)n, (unsigned long long)h);
}

/* Builds a snapshot from a 'snap' reply with its rows; NULL when out of
 * memory. */
static struct admin_snap *snap_build(const struct store_reply *rep)
{
    struct admin_snap *s = calloc(1, sizeof(*s));
    size_t i, n_ov = (size_t)rep->ints[ADMIN_SNAP_N_OV];

    if (s == NULL || (s->ov = calloc(n_ov + 1, sizeof(*s->ov))) == NULL ||
        (s->blocks = calloc(rep->n - ADMIN_SNAP_ROWS - n_ov + 1, sizeof(*s->blocks))) == NULL) {
        admin_snap_free(s);
        return NULL;
    }
    s->refs = 1;
    for (i = ADMIN_SNAP_ROWS; i < rep->n; i++) {
        if (rep->strs[i] == NULL)
            continue;
        if (i < ADMIN_SNAP_ROWS + n_ov) {
            if (override_parse(rep->strs[i], &s->ov[s->n_ov]))
                s->n_ov++;
            else
                log_msg(LOG_ERROR, "admin: an override row in Redis cannot be read; ignored");
        } else if (block_parse(rep->strs[i], &s->blocks[s->n_blocks])) {
            s->n_blocks++;
        } else {
            log_msg(LOG_ERROR, "admin: a block row in Redis cannot be read; ignored");
        }
    }
    return s;
}

enum otp_rc admin_refresh(struct admin *a, int *changed, char *err)
{
    struct store_reply *rep = NULL;
    struct admin_snap *fresh = NULL, *old = NULL, *cur;
    char known[32], digest[64];
    int64_t now_ms, t0_ms = mono_ms(); /* before the read: it saw every change made before then */
    enum otp_rc rc;
    size_t i;

    *changed = 0;
    pthread_mutex_lock(&a->mu);
    snprintf(known, sizeof(known), "%s", a->version);
    pthread_mutex_unlock(&a->mu);
    rc = admin_rows_read(a, known, &rep, err);
    if (rc == OTP_OK && rep->n > ADMIN_SNAP_N_OV && (fresh = snap_build(rep)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "admin: out of memory");
        rc = OTP_ENOMEM;
    }
    pthread_mutex_lock(&a->mu);
    if (rc == OTP_OK) {
        /* Redis's clock, less ours: rows end on Redis's clock, estimated
         * here between reads (and while Redis is away). */
        a->offset_ms = rep->ints[ADMIN_SNAP_NOW] - clock_wall_ms();
        if (strcmp(a->version, rep->strs[ADMIN_SNAP_COUNTER]) != 0)
            *changed |= ADMIN_ROWS_MOVED;
        snprintf(a->version, sizeof(a->version), "%s", rep->strs[ADMIN_SNAP_COUNTER]);
        if (fresh != NULL) {
            old = a->snap;
            a->snap = fresh;
        }
        a->read_ms = t0_ms;
    } else {
        a->read_ms = FRESH_NEVER;
        a->stats.refresh_failures++;
    }
    now_ms = clock_wall_ms() + a->offset_ms;
    cur = a->snap;
    ov_digest(cur, now_ms, digest, sizeof(digest));
    if (strcmp(digest, a->pushed) != 0) {
        snprintf(a->pushed, sizeof(a->pushed), "%s", digest);
        *changed |= ADMIN_OVERRIDES_CHANGED;
    }
    a->stats.overrides = a->stats.blocks = 0;
    for (i = 0; i < cur->n_ov; i++)
        a->stats.overrides += cur->ov[i].expires_ms > now_ms;
    for (i = 0; i < cur->n_blocks; i++)
        a->stats.blocks += cur->blocks[i].expires_ms > now_ms;
    pthread_mutex_unlock(&a->mu);
    if (old != NULL)
        snap_put(a, old);
    store_reply_free(rep);
    return rc;
}

int64_t admin_read_ms(struct admin *a)
{
    int64_t t;

    pthread_mutex_lock(&a->mu);
    t = a->read_ms;
    pthread_mutex_unlock(&a->mu);
    return t;
}

long admin_overrides(struct admin *a, struct admin_override **out)
{
    struct admin_snap *s = snap_get(a);
    int64_t now_ms = redis_now_ms(a);
    size_t i;
    long n = 0;

    if ((*out = calloc(s->n_ov + 1, sizeof(**out))) == NULL) {
        snap_put(a, s);
        return -1;
    }
    for (i = 0; i < s->n_ov; i++)
        if (s->ov[i].expires_ms > now_ms)
            (*out)[n++] = s->ov[i];
    snap_put(a, s);
    return n;
}
