/*
 * admin_body: the admin requests' bodies (an override, a block, an
 * unlock) checked and turned into the rows admin_rows.c stores, with a
 * sentence for the operator on every refusal; and the values a block
 * matches, checked and made canonical for the snapshot too. Pure: no
 * Redis, no clock, no lock. Runs once per admin request (rare) and once
 * per block row read into a snapshot.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "../base/duration.h"
#include "admin_int.h"

static const char *const match_names[ADMIN_M_COUNT] = {"phone",     "phone_prefix", "region",
                                                       "device",    "client_ip",    "api_key"};

const char *admin_match_name(enum admin_match m)
{
    return (unsigned)m < ADMIN_M_COUNT ? match_names[m] : "?";
}

int admin_match_find(const char *name)
{
    int m;

    for (m = 0; m < ADMIN_M_COUNT && strcmp(match_names[m], name) != 0; m++)
        ;
    return m < ADMIN_M_COUNT ? m : -1;
}

unsigned admin_rule_mask(const struct cfg_rule *r)
{
    return r->key_mask ? r->key_mask : 1u << r->key;
}

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

/* j's note, optional: *note is NULL when there is none. 0 (detail says
 * why) when it is not text an operator's terminal may show. */
static int note_of(json_t *j, const char **note, char *detail, size_t cap)
{
    json_t *v = json_object_get(j, "note");

    *note = NULL;
    if (v == NULL)
        return 1;
    if ((*note = str_of(v, "note", detail, cap)) == NULL)
        return 0;
    if (!text_ok(*note, ADMIN_NOTE_MAX - 1)) {
        snprintf(detail, cap, "note must be 1 to %d bytes without control characters", ADMIN_NOTE_MAX - 1);
        return 0;
    }
    return 1;
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
        snprintf(detail, cap,
                 "expires_in must be a duration such as \"1h\", more than 0 and at most 30 days");
        return 0;
    }
    json_object_set_new(row, "expires_in", json_string(s));
    if (!note_of(j, &s, detail, cap))
        return 0;
    if (s != NULL)
        json_object_set_new(row, "note", json_string(s));
    return 1;
}

/* 1 when s is "+" and digits_min to digits_max digits. */
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

/* A client_ip block's value: an address or a range, into net and its
 * canonical text. */
static int client_ip_value(const char *v, char *out, struct admin_net *net, char *detail, size_t cap)
{
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
    admin_net_text(net, out, ADMIN_VALUE_MAX);
    return 1;
}

int admin_match_value(enum admin_match m, const char *v, char *out, struct admin_net *net, char *detail,
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
        return client_ip_value(v, out, net, detail, cap);
    case ADMIN_M_API_KEY:
        if (!ascii_ok(v, CFG_NAME_MAX - 1)) {
            snprintf(detail, cap, "api_key must be a key's name: 1 to %d printable ASCII bytes",
                     CFG_NAME_MAX - 1);
            return 0;
        }
        break;
    }
    snprintf(out, ADMIN_VALUE_MAX, "%s", v);
    return 1;
}

/* ---- Blocks ---- */

/* A block's match object (one member) into row, canonical. */
static int block_match(json_t *j, json_t *row, char *detail, size_t cap)
{
    json_t *match = json_object_get(j, "match"), *v;
    const char *key, *s;
    char value[ADMIN_VALUE_MAX];
    struct admin_net net;
    int m;

    if (!json_is_object(match) || json_object_size(match) != 1) {
        snprintf(detail, cap, "match must be an object with one of phone, phone_prefix, region, device, "
                              "client_ip, api_key");
        return 0;
    }
    json_object_foreach(match, key, v) {
        if ((m = admin_match_find(key)) < 0) {
            snprintf(detail, cap, "match.%.40s is not one of phone, phone_prefix, region, device, client_ip, "
                                  "api_key", key);
            return 0;
        }
        if ((s = str_of(v, "match's value", detail, cap)) == NULL ||
            !admin_match_value((enum admin_match)m, s, value, &net, detail, cap))
            return 0;
        json_object_set_new(row, "match", json_pack("{s:s}", key, value));
    }
    return 1;
}

json_t *admin_block_body(const char *body, size_t len, int64_t *ttl_ms, char *detail, size_t cap)
{
    static const char *const fields[] = {"match", "expires_in", "note", NULL};
    json_t *j, *row = NULL;
    int ok = 0;

    if ((j = body_object(body, len, fields, detail, cap)) == NULL)
        return NULL;
    if ((row = json_object()) == NULL) {
        snprintf(detail, cap, "out of memory");
        goto out;
    }
    ok = block_match(j, row, detail, cap) && common_fields(j, row, ttl_ms, detail, cap);
out:
    json_decref(j);
    if (!ok) {
        json_decref(row);
        row = NULL;
    }
    return row;
}

/* ---- Overrides ---- */

/* The part of an override's key of one kind: checked, canonical. */
static int key_value(const struct cfg_rule *r, enum cfg_key kind, const char *v, char *out, char *detail,
                     size_t cap)
{
    struct admin_net net;

    switch (kind) {
    case CFG_KEY_PHONE:
        return admin_match_value(ADMIN_M_PHONE, v, out, &net, detail, cap);
    case CFG_KEY_DEVICE:
        return admin_match_value(ADMIN_M_DEVICE, v, out, &net, detail, cap);
    case CFG_KEY_API_KEY:
        return admin_match_value(ADMIN_M_API_KEY, v, out, &net, detail, cap);
    case CFG_KEY_REGION:
        return admin_match_value(ADMIN_M_REGION, v, out, &net, detail, cap);
    case CFG_KEY_CLIENT_IP:
        /* One address: the rule's state is keyed by what limits_ip_key
         * makes of it (an IPv6 address by its /64), as a request's is. */
        if (strchr(v, '/') != NULL || admin_net_parse(v, &net) != OTP_OK) {
            snprintf(detail, cap, "key.client_ip must be one IPv4 or IPv6 address");
            return 0;
        }
        break;
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

/* The rule an override names, copied into *r: one of rules, with a limit. */
static int override_rule(const struct cfg_rule *rules, size_t n_rules, json_t *j, struct cfg_rule *r,
                         char *detail, size_t cap)
{
    json_t *v = json_object_get(j, "rule");
    const char *name;
    size_t i;

    if (v == NULL) {
        snprintf(detail, cap, "rule is required");
        return 0;
    }
    if ((name = str_of(v, "rule", detail, cap)) == NULL)
        return 0;
    for (i = 0; i < n_rules && strcmp(rules[i].name, name) != 0; i++)
        ;
    if (i == n_rules) {
        snprintf(detail, cap, "no rule named \"%.40s\"", name);
        return 0;
    }
    *r = rules[i];
    if (r->algo == CFG_ALGO_RESEND_DELAY) {
        snprintf(detail, cap, "rule %s is a resend_delay: it has no limit to override", r->name);
        return 0;
    }
    return 1;
}

/* The override's key: every part of r's key, no other, each checked and
 * canonical, into ov and into keys (the stored row's "key"). */
static int override_key(const struct cfg_rule *r, json_t *j, struct admin_override *ov, json_t *keys,
                        char *detail, size_t cap)
{
    json_t *key = json_object_get(j, "key"), *v;
    unsigned mask = admin_rule_mask(r), seen = 0;
    const char *k, *s;
    int kind;

    if (!json_is_object(key)) {
        snprintf(detail, cap, "key must be an object naming every part of rule %s's key", r->name);
        return 0;
    }
    json_object_foreach(key, k, v) {
        for (kind = 0; kind < CFG_KEY_COUNT && strcmp(config_key_name((enum cfg_key)kind), k) != 0; kind++)
            ;
        if (kind == CFG_KEY_COUNT || !(mask & (1u << kind))) {
            snprintf(detail, cap, "key.%.40s is not a part of rule %s's key", k, r->name);
            return 0;
        }
        if ((s = str_of(v, "each key part", detail, cap)) == NULL ||
            !key_value(r, (enum cfg_key)kind, s, ov->values[kind], detail, cap))
            return 0;
        seen |= 1u << kind;
        json_object_set_new(keys, k, json_string(ov->values[kind]));
    }
    if (seen != mask) {
        for (kind = 0; kind < CFG_KEY_COUNT && !(mask & ~seen & (1u << kind)); kind++)
            ;
        snprintf(detail, cap, "key must name every part of rule %s's key: %s is missing", r->name,
                 config_key_name((enum cfg_key)kind));
        return 0;
    }
    if ((mask & (1u << CFG_KEY_PHONE)) && (mask & (1u << CFG_KEY_PHONE_PREFIX)) &&
        strncmp(ov->values[CFG_KEY_PHONE], ov->values[CFG_KEY_PHONE_PREFIX],
                strlen(ov->values[CFG_KEY_PHONE_PREFIX])) != 0) {
        snprintf(detail, cap, "key.phone does not start with key.phone_prefix");
        return 0;
    }
    ov->mask = mask;
    return 1;
}

/* The override's limit, and its burst (token_bucket rules only), into ov. */
static int override_limit(const struct cfg_rule *r, json_t *j, struct admin_override *ov, char *detail,
                          size_t cap)
{
    json_t *v = json_object_get(j, "limit");
    const char *why;

    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        (why = config_limit_why(r->algo, r->window_ms, json_integer_value(v))) != NULL) {
        snprintf(detail, cap, "limit must be %s (rule %s)", why, r->name);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > config_limit_max(r->algo)) {
        snprintf(detail, cap, "limit must be an integer from 1 to %lld for rule %s (%s)",
                 (long long)config_limit_max(r->algo), r->name, config_algo_name(r->algo));
        return 0;
    }
    ov->limit = json_integer_value(v);
    if ((v = json_object_get(j, "burst")) != NULL) {
        if (r->algo != CFG_ALGO_TOKEN_BUCKET) {
            snprintf(detail, cap, "burst is for token_bucket rules; %s is not one", r->name);
            return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000) {
            snprintf(detail, cap, "burst must be an integer from 1 to 1000000000");
            return 0;
        }
        ov->burst = json_integer_value(v);
    }
    return 1;
}

json_t *admin_override_body(const struct cfg_rule *rules, size_t n_rules, const char *body, size_t len,
                            struct admin_override *ov, int64_t *ttl_ms, char *detail, size_t cap)
{
    static const char *const fields[] = {"rule", "key", "limit", "burst", "expires_in", "note", NULL};
    json_t *j, *row = NULL, *keys = NULL;
    struct cfg_rule r;
    int ok = 0;

    memset(ov, 0, sizeof(*ov));
    if ((j = body_object(body, len, fields, detail, cap)) == NULL)
        return NULL;
    if ((row = json_object()) == NULL || (keys = json_object()) == NULL) {
        snprintf(detail, cap, "out of memory");
        goto out;
    }
    if (!override_rule(rules, n_rules, j, &r, detail, cap) || !override_key(&r, j, ov, keys, detail, cap) ||
        !override_limit(&r, j, ov, detail, cap))
        goto out;
    snprintf(ov->rule, sizeof(ov->rule), "%s", r.name);
    json_object_set_new(row, "rule", json_string(r.name));
    json_object_set_new(row, "key", keys);
    keys = NULL;
    json_object_set_new(row, "limit", json_integer(ov->limit));
    if (ov->burst > 0)
        json_object_set_new(row, "burst", json_integer(ov->burst));
    ok = common_fields(j, row, ttl_ms, detail, cap);
out:
    json_decref(keys);
    json_decref(j);
    if (!ok) {
        json_decref(row);
        row = NULL;
    }
    return row;
}

/* ---- Unlock ---- */

json_t *admin_unlock_body(const char *body, size_t len, struct admin_unlock_req *u, char *detail, size_t cap)
{
    static const char *const fields[] = {"phone", "api_key", "note", NULL};
    char value[ADMIN_VALUE_MAX];
    struct admin_net net;
    struct phone_info pi;
    enum phone_err perr;
    const char *s;
    json_t *j, *v;
    int ok = 0;

    memset(u, 0, sizeof(*u));
    u->api_key = "";
    if ((j = body_object(body, len, fields, detail, cap)) == NULL)
        return NULL;
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
    snprintf(u->phone, sizeof(u->phone), "%s", pi.e164);
    json_object_set_new(j, "phone", json_string(pi.e164));
    if ((v = json_object_get(j, "api_key")) != NULL) {
        if ((s = str_of(v, "api_key", detail, cap)) == NULL ||
            !admin_match_value(ADMIN_M_API_KEY, s, value, &net, detail, cap))
            goto out;
        u->api_key = s;
    }
    ok = note_of(j, &u->note, detail, cap);
out:
    if (!ok) {
        json_decref(j);
        j = NULL;
    }
    return j;
}
