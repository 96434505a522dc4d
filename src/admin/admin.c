/*
 * admin: the rows' validation, their Redis calls (admin.lua), the
 * snapshot every instance refreshes, and block matching. Admin calls are
 * rare and may block on Redis and the ledger; admin_blocked runs on every
 * API request and only walks the snapshot (up to ADMIN_ROWS_MAX blocks;
 * a scan of 10,000 short comparisons is a few tens of microseconds).
 */
#include "admin.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>

#include "../base/clock.h"
#include "../base/duration.h"
#include "../base/fresh.h"
#include "../base/fnv.h"
#include "../base/log.h"
#include "../base/phone.h"
#include "../base/timestamp.h"
#include "../base/unittest.h"
#include "../limits/fraud.h"
#include "admin.lua.h"

#define ADMIN_OV_KEY "otp:adm:o"
#define ADMIN_OVZ_KEY "otp:adm:oz"
#define ADMIN_BL_KEY "otp:adm:b"
#define ADMIN_BLZ_KEY "otp:adm:bz"
#define ADMIN_VER_KEY "otp:adm:v"

static const char *const match_names[ADMIN_M_COUNT] = {"phone",     "phone_prefix", "region",
                                                       "device",    "client_ip",    "api_key"};

/* The rows in force on this instance; immutable once built. */
struct admin_snap {
    int refs; /* guarded by admin.mu */
    struct admin_block *blocks;
    size_t n_blocks;
    struct admin_override *ov;
    size_t n_ov;
};

struct admin {
    struct store *store;
    struct ledger *ledger;
    int h;
    pthread_mutex_t mu; /* guards everything below; never held across a call into another module */
    struct cfg_rule *rules;
    size_t n_rules;
    struct admin_snap *snap;
    char version[32];     /* the change counter the snapshot was read at; "" before the first read */
    int64_t offset_ms;    /* Redis's clock minus ours, at the last read */
    int64_t read_ms;      /* local monotonic, taken before the last read of the rows: FRESH_NEVER
                           * when it failed (fresh_ok says whether the snapshot may answer) */
    char pushed[64];      /* a digest of the overrides last reported changed */
    struct admin_stats stats;
};

const char *admin_match_name(enum admin_match m)
{
    return (unsigned)m < ADMIN_M_COUNT ? match_names[m] : "?";
}

static void snap_free(struct admin_snap *s)
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
        snap_free(s);
}

static struct cfg_rule *rules_copy(const struct limits_conf *c)
{
    struct cfg_rule *r = calloc(c->n_rules + 1, sizeof(*r));

    if (r != NULL && c->n_rules > 0)
        memcpy(r, c->rules, c->n_rules * sizeof(*r));
    return r;
}

struct admin *admin_new(struct store *s, struct ledger *lg, const struct limits_conf *c)
{
    struct admin *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    if ((a->rules = rules_copy(c)) == NULL || (a->snap = calloc(1, sizeof(*a->snap))) == NULL) {
        free(a->rules);
        free(a);
        return NULL;
    }
    a->snap->refs = 1;
    a->read_ms = FRESH_NEVER;
    a->n_rules = c->n_rules;
    a->store = s;
    a->ledger = lg;
    a->h = store_script(s, admin_admin_lua);
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    snap_free(a->snap);
    free(a->rules);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

enum otp_rc admin_reload(struct admin *a, const struct limits_conf *c)
{
    struct cfg_rule *r = rules_copy(c), *old;

    if (r == NULL)
        return OTP_ENOMEM;
    pthread_mutex_lock(&a->mu);
    old = a->rules;
    a->rules = r;
    a->n_rules = c->n_rules;
    pthread_mutex_unlock(&a->mu);
    free(old);
    return OTP_OK;
}

/* ---- Addresses and ranges (pure) ---- */

enum otp_rc admin_net_parse(const char *s, struct admin_net *out)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char text[INET6_ADDRSTRLEN + 8];
    const char *slash;
    unsigned char b[16];
    int bits = -1, max, i;

    memset(out, 0, sizeof(*out));
    if (s == NULL || strlen(s) >= sizeof(text))
        return OTP_EINVAL;
    snprintf(text, sizeof(text), "%s", s);
    if ((slash = strchr(s, '/')) != NULL) {
        const char *p = slash + 1;
        text[slash - s] = '\0';
        if (*p == '\0' || strlen(p) > 3)
            return OTP_EINVAL;
        for (bits = 0; *p; p++) {
            if (*p < '0' || *p > '9')
                return OTP_EINVAL;
            bits = bits * 10 + (*p - '0');
        }
    }
    if (inet_pton(AF_INET, text, b) == 1) {
        out->family = 4;
        memcpy(out->addr, b, 4);
        max = 32;
    } else if (inet_pton(AF_INET6, text, b) == 1) {
        if (memcmp(b, mapped, sizeof(mapped)) == 0) {
            /* ::ffff:a.b.c.d/N is a.b.c.d/(N - 96): keyed as IPv4, as requests are. */
            out->family = 4;
            memcpy(out->addr, b + 12, 4);
            max = 32;
            if (bits >= 0 && (bits -= 96) < 0)
                return OTP_EINVAL;
        } else {
            out->family = 6;
            memcpy(out->addr, b, 16);
            max = 128;
        }
    } else {
        return OTP_EINVAL;
    }
    if (bits > max)
        return OTP_EINVAL;
    out->bits = bits < 0 ? max : bits;
    /* Clear the host bits, so a range is stored and shown in one spelling. */
    for (i = 0; i < max / 8; i++) {
        int keep = out->bits - i * 8;
        if (keep <= 0)
            out->addr[i] = 0;
        else if (keep < 8)
            out->addr[i] &= (unsigned char)(0xff << (8 - keep));
    }
    return OTP_OK;
}

int admin_net_match(const struct admin_net *net, const struct admin_net *ip)
{
    int full = net->bits / 8, rest = net->bits % 8;

    if (net->family != ip->family)
        return 0;
    if (memcmp(net->addr, ip->addr, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return ((net->addr[full] ^ ip->addr[full]) & (unsigned char)(0xff << (8 - rest))) == 0;
}

/* The canonical text of net ("10.0.0.0/8", "2001:db8::/32"). */
static void net_text(const struct admin_net *net, char *out, size_t cap)
{
    char t[INET6_ADDRSTRLEN];

    inet_ntop(net->family == 4 ? AF_INET : AF_INET6, net->addr, t, sizeof(t));
    snprintf(out, cap, "%s/%d", t, net->bits);
}

/* ---- Matching (pure) ---- */

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
            snprintf(what, cap, "%s", match_names[b->match]);
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

/* ---- Bodies ---- */

/* 1 when s is 1 to max bytes with no control character: C0, DEL, or C1
 * (U+0080 to U+009F, 0xc2 0x80 to 0xc2 0x9f in the UTF-8 jansson checked),
 * which a terminal listing the rows would act on. Other UTF-8 is allowed. */
static int text_ok(const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i;

    for (i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f || (p[i] == 0xc2 && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f))
            return 0;
    return n >= 1 && n <= max;
}

/* 1 when s is 1 to max printable ASCII bytes (space included, as a
 * request's device_id and purpose may hold one). */
static int ascii_ok(const char *s, size_t max)
{
    size_t n = 0;

    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e)
            return 0;
    return n >= 1 && n <= max;
}

/* A JSON string member's value, or NULL (then detail says why) when it is
 * not a string without NUL. */
static const char *str_of(json_t *v, const char *name, char *detail, size_t cap)
{
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(detail, cap, "%s must be a string", name);
        return NULL;
    }
    return json_string_value(v);
}

/* Reads body as a JSON object whose members are among fields. */
static json_t *body_object(const char *body, size_t len, const char *const *fields, char *detail, size_t cap)
{
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e), *v;
    const char *key;

    if (j == NULL) {
        snprintf(detail, cap, "body is not JSON: %.100s", e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(detail, cap, "body must be a JSON object");
        json_decref(j);
        return NULL;
    }
    json_object_foreach(j, key, v) {
        const char *const *f;
        for (f = fields; *f && strcmp(*f, key) != 0; f++)
            ;
        if (*f == NULL) {
            snprintf(detail, cap, "unknown field \"%.40s\"", key);
            json_decref(j);
            return NULL;
        }
    }
    return j;
}

/* expires_in (required) and note (optional) into row; ttl in *ttl_ms. */
static int common_fields(json_t *j, json_t *row, int64_t *ttl_ms, char *detail, size_t cap)
{
    json_t *v = json_object_get(j, "expires_in");
    const char *s;

    if (v == NULL) {
        snprintf(detail, cap, "expires_in is required (a duration such as \"1h\", at most 30 days)");
        return 0;
    }
    if ((s = str_of(v, "expires_in", detail, cap)) == NULL)
        return 0;
    if (duration_parse(s, ttl_ms) != OTP_OK || *ttl_ms <= 0 || *ttl_ms > ADMIN_TTL_MAX_MS) {
        snprintf(detail, cap, "expires_in must be a duration such as \"1h\", more than 0 and at most 30 days");
        return 0;
    }
    json_object_set_new(row, "expires_in", json_string(s));
    if ((v = json_object_get(j, "note")) != NULL) {
        if ((s = str_of(v, "note", detail, cap)) == NULL)
            return 0;
        if (!text_ok(s, ADMIN_NOTE_MAX - 1)) {
            snprintf(detail, cap, "note must be 1 to %d bytes without control characters", ADMIN_NOTE_MAX - 1);
            return 0;
        }
        json_object_set_new(row, "note", json_string(s));
    }
    return 1;
}

/* 1 when s is "+" and 1 to 15 digits. */
static int prefix_ok(const char *s, size_t digits_min, size_t digits_max)
{
    size_t n;

    if (s[0] != '+')
        return 0;
    for (n = 1; s[n]; n++)
        if (s[n] < '0' || s[n] > '9')
            return 0;
    return n - 1 >= digits_min && n - 1 <= digits_max;
}

/* 1 when s is a region code: two capital letters, or "001". */
static int region_ok(const char *s)
{
    if (strcmp(s, "001") == 0)
        return 1;
    return strlen(s) == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z';
}

/* Checks and canonicalizes one value of kind m; out ADMIN_VALUE_MAX bytes. */
static int match_value(enum admin_match m, const char *v, char *out, struct admin_net *net, char *detail,
                       size_t cap)
{
    struct phone_info pi;
    enum phone_err perr;

    switch (m) {
    case ADMIN_M_PHONE:
        if ((perr = phone_parse(v, &pi)) != PHONE_OK) {
            phone_why(perr, &pi, detail, cap);
            return 0;
        }
        snprintf(out, ADMIN_VALUE_MAX, "%s", pi.e164);
        return 1;
    case ADMIN_M_PHONE_PREFIX:
        if (!prefix_ok(v, 1, 15)) {
            snprintf(detail, cap, "phone_prefix must be \"+\" and 1 to 15 digits");
            return 0;
        }
        break;
    case ADMIN_M_REGION:
        if (!region_ok(v)) {
            snprintf(detail, cap, "region must be an ISO 3166 code in capitals (\"IN\") or \"001\"");
            return 0;
        }
        break;
    case ADMIN_M_DEVICE:
        if (!ascii_ok(v, 128)) {
            snprintf(detail, cap, "device must be 1 to 128 printable ASCII bytes");
            return 0;
        }
        break;
    case ADMIN_M_CLIENT_IP:
        if (admin_net_parse(v, net) != OTP_OK) {
            snprintf(detail, cap, "client_ip must be an IPv4 or IPv6 address or CIDR range");
            return 0;
        }
        /* One IPv6 address stands for its /64, as the limits key it
         * (limits_ip_key): its holder has the whole /64, and would step to
         * the next address. A narrower range is written as one. */
        if (net->family == 6 && strchr(v, '/') == NULL) {
            char wide[INET6_ADDRSTRLEN + 4];
            snprintf(wide, sizeof(wide), "%s/64", v);
            if (admin_net_parse(wide, net) != OTP_OK) {
                snprintf(detail, cap, "client_ip must be an IPv4 or IPv6 address or CIDR range");
                return 0;
            }
        }
        net_text(net, out, ADMIN_VALUE_MAX);
        return 1;
    case ADMIN_M_API_KEY:
        if (!ascii_ok(v, CFG_NAME_MAX - 1)) {
            snprintf(detail, cap, "api_key must be a key's name: 1 to %d printable ASCII bytes", CFG_NAME_MAX - 1);
            return 0;
        }
        break;
    }
    snprintf(out, ADMIN_VALUE_MAX, "%s", v);
    return 1;
}

/* A block body into its stored row. */
static json_t *block_row(json_t *j, int64_t *ttl_ms, char *detail, size_t cap)
{
    json_t *row = json_object(), *match = json_object_get(j, "match"), *v;
    const char *key, *s;
    char value[ADMIN_VALUE_MAX];
    struct admin_net net;
    int m;

    if (row == NULL) {
        snprintf(detail, cap, "out of memory");
        return NULL;
    }
    if (!json_is_object(match) || json_object_size(match) != 1) {
        snprintf(detail, cap, "match must be an object with one of phone, phone_prefix, region, device, "
                              "client_ip, api_key");
        goto bad;
    }
    json_object_foreach(match, key, v) {
        for (m = 0; m < ADMIN_M_COUNT && strcmp(match_names[m], key) != 0; m++)
            ;
        if (m == ADMIN_M_COUNT) {
            snprintf(detail, cap, "match.%.40s is not one of phone, phone_prefix, region, device, client_ip, "
                                  "api_key", key);
            goto bad;
        }
        if ((s = str_of(v, "match's value", detail, cap)) == NULL ||
            !match_value((enum admin_match)m, s, value, &net, detail, cap))
            goto bad;
        json_object_set_new(row, "match", json_pack("{s:s}", key, value));
    }
    if (!common_fields(j, row, ttl_ms, detail, cap))
        goto bad;
    return row;
bad:
    json_decref(row);
    return NULL;
}

/* The rule named name in a's rules, copied into *out; 0 when none. */
static int rule_find(struct admin *a, const char *name, struct cfg_rule *out)
{
    size_t i;
    int found = 0;

    pthread_mutex_lock(&a->mu);
    for (i = 0; i < a->n_rules && !found; i++)
        if (strcmp(a->rules[i].name, name) == 0) {
            *out = a->rules[i];
            found = 1;
        }
    pthread_mutex_unlock(&a->mu);
    return found;
}

/* The kinds of r's key, bit 1 << kind each. */
static unsigned rule_mask(const struct cfg_rule *r)
{
    return r->key_mask ? r->key_mask : 1u << r->key;
}

/* The part of an override's key of one kind: checked, canonical. */
static int key_value(const struct cfg_rule *r, enum cfg_key kind, const char *v, char *out, char *detail,
                     size_t cap)
{
    struct admin_net net;

    switch (kind) {
    case CFG_KEY_PHONE:
        return match_value(ADMIN_M_PHONE, v, out, &net, detail, cap);
    case CFG_KEY_DEVICE:
        return match_value(ADMIN_M_DEVICE, v, out, &net, detail, cap);
    case CFG_KEY_API_KEY:
        return match_value(ADMIN_M_API_KEY, v, out, &net, detail, cap);
    case CFG_KEY_REGION:
        return match_value(ADMIN_M_REGION, v, out, &net, detail, cap);
    case CFG_KEY_CLIENT_IP:
        /* One address: the rule's state is keyed by what limits_ip_key
         * makes of it (an IPv6 address by its /64), as a request's is. */
        if (strchr(v, '/') != NULL || admin_net_parse(v, &net) != OTP_OK) {
            snprintf(detail, cap, "key.client_ip must be one IPv4 or IPv6 address");
            return 0;
        }
        snprintf(out, ADMIN_VALUE_MAX, "%s", v);
        return 1;
    case CFG_KEY_PURPOSE:
        if (!ascii_ok(v, 32)) {
            snprintf(detail, cap, "key.purpose must be 1 to 32 printable ASCII bytes");
            return 0;
        }
        break;
    case CFG_KEY_PHONE_PREFIX:
        if (!prefix_ok(v, (size_t)r->prefix_digits, (size_t)r->prefix_digits)) {
            snprintf(detail, cap, "key.phone_prefix must be \"+\" and %d digits (rule %s)", r->prefix_digits,
                     r->name);
            return 0;
        }
        break;
    case CFG_KEY_GLOBAL:
        if (v[0] != '\0') {
            snprintf(detail, cap, "key.global must be \"\"");
            return 0;
        }
        break;
    }
    snprintf(out, ADMIN_VALUE_MAX, "%s", v);
    return 1;
}

/* An override body into its stored row; the parsed override in *ov. */
static json_t *override_row(struct admin *a, json_t *j, struct admin_override *ov, int64_t *ttl_ms, char *detail,
                            size_t cap)
{
    json_t *row = json_object(), *key = json_object_get(j, "key"), *v, *keys = NULL;
    struct cfg_rule r;
    const char *name, *k, *s, *why;
    unsigned mask, seen = 0;
    int kind;

    memset(ov, 0, sizeof(*ov));
    if (row == NULL || (keys = json_object()) == NULL) {
        snprintf(detail, cap, "out of memory");
        goto bad;
    }
    if ((v = json_object_get(j, "rule")) == NULL) {
        snprintf(detail, cap, "rule is required");
        goto bad;
    }
    if ((name = str_of(v, "rule", detail, cap)) == NULL)
        goto bad;
    if (!rule_find(a, name, &r)) {
        snprintf(detail, cap, "no rule named \"%.40s\"", name);
        goto bad;
    }
    if (r.algo == CFG_ALGO_RESEND_DELAY) {
        snprintf(detail, cap, "rule %s is a resend_delay: it has no limit to override", r.name);
        goto bad;
    }
    mask = rule_mask(&r);
    if (!json_is_object(key)) {
        snprintf(detail, cap, "key must be an object naming every part of rule %s's key", r.name);
        goto bad;
    }
    json_object_foreach(key, k, v) {
        for (kind = 0; kind < CFG_KEY_COUNT && strcmp(config_key_name((enum cfg_key)kind), k) != 0; kind++)
            ;
        if (kind == CFG_KEY_COUNT || !(mask & (1u << kind))) {
            snprintf(detail, cap, "key.%.40s is not a part of rule %s's key", k, r.name);
            goto bad;
        }
        if ((s = str_of(v, "each key part", detail, cap)) == NULL ||
            !key_value(&r, (enum cfg_key)kind, s, ov->values[kind], detail, cap))
            goto bad;
        seen |= 1u << kind;
        json_object_set_new(keys, k, json_string(ov->values[kind]));
    }
    if (seen != mask) {
        for (kind = 0; kind < CFG_KEY_COUNT && !(mask & ~seen & (1u << kind)); kind++)
            ;
        snprintf(detail, cap, "key must name every part of rule %s's key: %s is missing", r.name,
                 config_key_name((enum cfg_key)kind));
        goto bad;
    }
    if ((mask & (1u << CFG_KEY_PHONE)) && (mask & (1u << CFG_KEY_PHONE_PREFIX)) &&
        strncmp(ov->values[CFG_KEY_PHONE], ov->values[CFG_KEY_PHONE_PREFIX],
                strlen(ov->values[CFG_KEY_PHONE_PREFIX])) != 0) {
        snprintf(detail, cap, "key.phone does not start with key.phone_prefix");
        goto bad;
    }
    v = json_object_get(j, "limit");
    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        (why = config_limit_why(r.algo, r.window_ms, json_integer_value(v))) != NULL) {
        snprintf(detail, cap, "limit must be %s (rule %s)", why, r.name);
        goto bad;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > config_limit_max(r.algo)) {
        snprintf(detail, cap, "limit must be an integer from 1 to %lld for rule %s (%s)",
                 (long long)config_limit_max(r.algo), r.name, config_algo_name(r.algo));
        goto bad;
    }
    ov->limit = json_integer_value(v);
    if ((v = json_object_get(j, "burst")) != NULL) {
        if (r.algo != CFG_ALGO_TOKEN_BUCKET) {
            snprintf(detail, cap, "burst is for token_bucket rules; %s is not one", r.name);
            goto bad;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000) {
            snprintf(detail, cap, "burst must be an integer from 1 to 1000000000");
            goto bad;
        }
        ov->burst = json_integer_value(v);
    }
    snprintf(ov->rule, sizeof(ov->rule), "%s", r.name);
    ov->mask = mask;
    json_object_set_new(row, "rule", json_string(r.name));
    json_object_set_new(row, "key", keys);
    keys = NULL;
    json_object_set_new(row, "limit", json_integer(ov->limit));
    if (ov->burst > 0)
        json_object_set_new(row, "burst", json_integer(ov->burst));
    if (!common_fields(j, row, ttl_ms, detail, cap))
        goto bad;
    return row;
bad:
    json_decref(keys);
    json_decref(row);
    return NULL;
}

/* ---- Redis ---- */

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

static const char *const row_keys[] = {ADMIN_OV_KEY, ADMIN_OVZ_KEY, ADMIN_BL_KEY, ADMIN_BLZ_KEY, ADMIN_VER_KEY};

enum otp_rc admin_add(struct admin *a, enum admin_kind kind, const char *who, const char *body, size_t len,
                      char *id, int64_t *expires_ms, char *detail, size_t cap)
{
    static const char *const ofields[] = {"rule", "key", "limit", "burst", "expires_in", "note", NULL};
    static const char *const bfields[] = {"match", "expires_in", "note", NULL};
    struct admin_override ov;
    struct store_reply *rep = NULL;
    json_t *j, *row = NULL;
    char *text = NULL, ttl[24], max[24], err[OTP_ERR_LEN] = "";
    const char *args[11];
    int64_t ttl_ms = 0;
    enum otp_rc rc = OTP_EINVAL;
    int n = 0, k;

    if ((j = body_object(body, len, kind == ADMIN_OVERRIDE ? ofields : bfields, detail, cap)) == NULL)
        return OTP_EINVAL;
    row = kind == ADMIN_OVERRIDE ? override_row(a, j, &ov, &ttl_ms, detail, cap) : block_row(j, &ttl_ms, detail, cap);
    json_decref(j);
    if (row == NULL)
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
    for (k = 0; k < 5; k++)
        args[n++] = row_keys[k];
    args[n++] = "add";
    args[n++] = kind == ADMIN_OVERRIDE ? "o" : "b";
    args[n++] = id;
    args[n++] = text;
    args[n++] = ttl;
    args[n++] = max;
    if ((rc = store_eval(a->store, a->h, 5, n, args, &rep, err)) != OTP_OK) {
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
    const char *args[8];
    enum otp_rc rc;
    int n = 0, k;

    for (k = 0; k < 5; k++)
        args[n++] = row_keys[k];
    args[n++] = "del";
    args[n++] = kind == ADMIN_OVERRIDE ? "o" : "b";
    args[n++] = id;
    if ((rc = store_eval(a->store, a->h, 5, n, args, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n != 1 || rep->strs[0] != NULL) {
        snprintf(err, OTP_ERR_LEN, "admin: remove gave a bad reply");
        rc = OTP_ESTORE;
    } else if (rep->ints[0] != 1) {
        rc = OTP_ENOTFOUND;
    } else {
        record(a, &(struct ledger_admin){clock_wall_ms(), who, "remove", kind_name(kind), id, NULL, NULL, 0, 0});
        log_event(LOG_INFO, kind == ADMIN_OVERRIDE ? "admin.override_removed" : "admin.block_removed",
                  LOG_FIELDS(LOG_STR("admin", who), LOG_STR("id", id)), "admin: %s removed %s %s", who,
                  kind_name(kind), id);
    }
    store_reply_free(rep);
    return rc;
}

/* Reads every live row: {counter, now, n_overrides, rows...}; known is the
 * counter already held ("" for none), then only {counter, now} may come. */
static enum otp_rc rows_read(struct admin *a, const char *known, struct store_reply **rep, char *err)
{
    const char *args[7];
    int n = 0, k;
    enum otp_rc rc;

    for (k = 0; k < 5; k++)
        args[n++] = row_keys[k];
    args[n++] = "snap";
    args[n++] = known;
    if ((rc = store_eval(a->store, a->h, 5, n, args, rep, err)) != OTP_OK)
        return rc;
    if ((*rep)->n < 2 || (*rep)->strs[0] == NULL || (*rep)->strs[1] != NULL ||
        ((*rep)->n > 2 && ((*rep)->strs[2] != NULL || (*rep)->ints[2] < 0 || (size_t)(*rep)->ints[2] > (*rep)->n - 3))) {
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
    size_t i, from, to;
    enum otp_rc rc;

    *out = NULL;
    if (items == NULL)
        return OTP_ENOMEM;
    if ((rc = rows_read(a, "", &rep, err)) != OTP_OK) {
        json_decref(items);
        return rc;
    }
    from = kind == ADMIN_OVERRIDE ? 3 : 3 + (size_t)rep->ints[2];
    to = kind == ADMIN_OVERRIDE ? 3 + (size_t)rep->ints[2] : rep->n;
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

enum otp_rc admin_unlock(struct admin *a, const char *who, const char *body, size_t len, int *n, char *detail,
                         size_t cap)
{
    static const char *const fields[] = {"phone", "api_key", "note", NULL};
    struct store_reply *rep = NULL;
    struct admin_net net;
    struct phone_info pi;
    enum phone_err perr;
    const char **args = NULL, *s, *api_key = "", *note = NULL;
    char key[PHONE_MAX + 8], masked[PHONE_MAX], (*pos)[8] = NULL, (*rf)[sizeof(((struct cfg_rule *)0)->field)] = NULL, err[OTP_ERR_LEN] = "", value[ADMIN_VALUE_MAX], *text = NULL;
    json_t *j, *v;
    size_t i, nr;
    int na = 0;
    enum otp_rc rc = OTP_EINVAL;

    *n = 0;
    if ((j = body_object(body, len, fields, detail, cap)) == NULL)
        return OTP_EINVAL;
    if ((v = json_object_get(j, "phone")) == NULL) {
        snprintf(detail, cap, "phone is required");
        goto out;
    }
    if ((s = str_of(v, "phone", detail, cap)) == NULL)
        goto out;
    if ((perr = phone_parse(s, &pi)) != PHONE_OK) {
        phone_why(perr, &pi, detail, cap);
        goto out;
    }
    json_object_set_new(j, "phone", json_string(pi.e164));
    if ((v = json_object_get(j, "api_key")) != NULL) {
        if ((s = str_of(v, "api_key", detail, cap)) == NULL ||
            !match_value(ADMIN_M_API_KEY, s, value, &net, detail, cap))
            goto out;
        api_key = json_string_value(v);
    }
    if ((v = json_object_get(j, "note")) != NULL) {
        if ((note = str_of(v, "note", detail, cap)) == NULL)
            goto out;
        if (!text_ok(note, ADMIN_NOTE_MAX - 1)) {
            snprintf(detail, cap, "note must be 1 to %d bytes without control characters", ADMIN_NOTE_MAX - 1);
            goto out;
        }
    }
    /* The phone's hash, as limits_key names it: the state of every
     * wrong-guess rule (their keys hold phone). */
    snprintf(key, sizeof(key), "otp:{%s}", pi.e164);
    pthread_mutex_lock(&a->mu);
    nr = a->n_rules;
    args = calloc(5 + 2 * nr, sizeof(*args));
    pos = calloc(nr + 1, sizeof(*pos));
    rf = calloc(nr + 1, sizeof(*rf));
    if (args != NULL && pos != NULL && rf != NULL) {
        args[na++] = key;
        args[na++] = ADMIN_VER_KEY; /* moved by an unlock: every refusal cache is cleared */
        args[na++] = "u";
        args[na++] = api_key;
        for (i = 0; i < nr; i++) {
            const struct cfg_rule *r = &a->rules[i];
            unsigned mask = rule_mask(r);
            int kind, p = 0;
            if (r->algo != CFG_ALGO_WRONG_GUESS_CAP || !(mask & (1u << CFG_KEY_PHONE)))
                continue;
            /* The field's parts after the rule's own: each other kind of
             * the key, in kind order (limits_rule_key). */
            if (mask & (1u << CFG_KEY_API_KEY))
                for (kind = CFG_KEY_PHONE + 1; kind <= CFG_KEY_API_KEY; kind++)
                    p += (mask & (1u << kind)) != 0;
            snprintf(pos[i], sizeof(pos[i]), "%d", p);
            memcpy(rf[i], r->field, sizeof(rf[i])); /* the rules may be swapped once mu is let go */
            args[na++] = rf[i];
            args[na++] = pos[i];
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (args == NULL || pos == NULL || rf == NULL) {
        snprintf(detail, cap, "out of memory");
        rc = OTP_ENOMEM;
        goto out;
    }
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
    json_object_set_new(j, "unlocked", json_integer(*n));
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    record(a, &(struct ledger_admin){clock_wall_ms(), who, "unlock", "lock", NULL, text, note, 0, *n});
    fraud_mask(pi.e164, masked, sizeof(masked));
    log_event(LOG_INFO, "admin.unlocked",
              LOG_FIELDS(LOG_STR("admin", who), LOG_STR("phone", masked), LOG_STR("caller", api_key),
                         LOG_INT("cleared", *n)),
              "admin: %s unlocked %s%s%s: %d cleared", who, masked, api_key[0] ? " for " : "", api_key, *n);
out:
    free(args);
    free(pos);
    free(rf);
    free(text);
    store_reply_free(rep);
    json_decref(j);
    return rc;
}

/* ---- The snapshot ---- */

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
        for (m = 0; m < ADMIN_M_COUNT && strcmp(match_names[m], key) != 0; m++)
            ;
        if (m == ADMIN_M_COUNT || !json_is_string(v))
            goto out;
        b->match = (enum admin_match)m;
        ok = match_value(b->match, json_string_value(v), b->value, &b->net, detail, sizeof(detail));
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

/* Builds a snapshot from a 'snap' reply; NULL when out of memory. */
static struct admin_snap *snap_build(const struct store_reply *rep)
{
    struct admin_snap *s = calloc(1, sizeof(*s));
    size_t i, n_ov = (size_t)rep->ints[2];

    if (s == NULL || (s->ov = calloc(n_ov + 1, sizeof(*s->ov))) == NULL ||
        (s->blocks = calloc(rep->n - 3 - n_ov + 1, sizeof(*s->blocks))) == NULL) {
        snap_free(s);
        return NULL;
    }
    s->refs = 1;
    for (i = 3; i < rep->n; i++) {
        if (rep->strs[i] == NULL)
            continue;
        if (i < 3 + n_ov) {
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
    rc = rows_read(a, known, &rep, err);
    if (rc == OTP_OK && rep->n > 2 && (fresh = snap_build(rep)) == NULL) {
        snprintf(err, OTP_ERR_LEN, "admin: out of memory");
        rc = OTP_ENOMEM;
    }
    pthread_mutex_lock(&a->mu);
    if (rc == OTP_OK) {
        /* Redis's clock, less ours: rows end on Redis's clock, estimated
         * here between reads (and while Redis is away). */
        a->offset_ms = rep->ints[1] - clock_wall_ms();
        if (strcmp(a->version, rep->strs[0]) != 0)
            *changed |= ADMIN_ROWS_MOVED;
        snprintf(a->version, sizeof(a->version), "%s", rep->strs[0]);
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

void admin_stats(struct admin *a, struct admin_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}
