/*
 * limits_keys: where a request's limits live in Redis. Pure string
 * building from a request's values (no clock, no Redis), run a few times
 * per request: a client IP's key, each rule kind's key, a (composite)
 * rule's key and field, and the keys every call names (the phone's hash,
 * the pumping guard's state, the undo record).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "../base/unittest.h"
#include "limits_int.h"

enum otp_rc limits_ip_key(const char *ip, char *out, size_t cap)
{
    unsigned char a[16];
    char text[INET6_ADDRSTRLEN];

    if (ip == NULL || strlen(ip) >= INET6_ADDRSTRLEN)
        return OTP_EINVAL;
    if (inet_pton(AF_INET, ip, a) == 1) {
        inet_ntop(AF_INET, a, text, sizeof(text));
    } else if (inet_pton(AF_INET6, ip, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            inet_ntop(AF_INET, a + 12, text, sizeof(text));
        } else {
            memset(a + 8, 0, 8);
            inet_ntop(AF_INET6, a, text, sizeof(text));
            if ((size_t)snprintf(out, cap, "%s/64", text) >= cap)
                return OTP_EINVAL;
            return OTP_OK;
        }
    } else {
        return OTP_EINVAL;
    }
    if ((size_t)snprintf(out, cap, "%s", text) >= cap)
        return OTP_EINVAL;
    return OTP_OK;
}

/* Builds the Redis key of a rule's key kind into out. phone_prefix keys
 * take the first 3 digits here; see limits_rule_key. */
UNITTEST void limits_key(enum cfg_key kind, const struct limits_request *rq, char *out, size_t cap)
{
    switch (kind) {
    case CFG_KEY_PHONE:
        snprintf(out, cap, "otp:{%s}", rq->phone);
        break;
    case CFG_KEY_DEVICE:
        snprintf(out, cap, "otp:d:{%s}", rq->device_id);
        break;
    case CFG_KEY_CLIENT_IP:
        snprintf(out, cap, "otp:ip:{%s}", rq->ip_key);
        break;
    case CFG_KEY_API_KEY:
        snprintf(out, cap, "otp:k:{%s}", rq->api_key);
        break;
    case CFG_KEY_GLOBAL:
        snprintf(out, cap, "otp:g");
        break;
    case CFG_KEY_PURPOSE:
        snprintf(out, cap, "otp:pu:{%s}", rq->purpose);
        break;
    case CFG_KEY_PHONE_PREFIX:
        snprintf(out, cap, "otp:pp:{%.3s}", rq->phone + 1);
        break;
    case CFG_KEY_REGION:
        snprintf(out, cap, "otp:r:{%s}", rq->region);
        break;
    }
}

/* rq's value of one key kind, NULL when the request has none; for
 * phone_prefix the whole number (the caller cuts it). */
static const char *key_value(enum cfg_key kind, const struct limits_request *rq)
{
    switch (kind) {
    case CFG_KEY_PHONE:
    case CFG_KEY_PHONE_PREFIX:
        return rq->phone;
    case CFG_KEY_DEVICE:
        return rq->device_id;
    case CFG_KEY_CLIENT_IP:
        return rq->ip_key;
    case CFG_KEY_API_KEY:
        return rq->api_key;
    case CFG_KEY_PURPOSE:
        return rq->purpose;
    case CFG_KEY_REGION:
        return rq->region[0] ? rq->region : NULL;
    case CFG_KEY_GLOBAL:
        return "";
    }
    return NULL;
}

int limits_rule_key(const struct cfg_rule *r, const struct limits_request *rq, char *key, size_t kcap,
                    char *field, size_t fcap)
{
    unsigned mask = r->key_mask ? r->key_mask : 1u << r->key;
    size_t n;
    int kind;

    for (kind = 0; kind < CFG_KEY_COUNT; kind++) {
        const char *v = key_value((enum cfg_key)kind, rq);
        if (!(mask & (1u << kind)))
            continue;
        /* A number shorter than the prefix has no prefix of that length. */
        if (v == NULL || (kind == CFG_KEY_PHONE_PREFIX && strlen(v) < (size_t)r->prefix_digits + 1))
            return 0;
    }
    if (r->key == CFG_KEY_PHONE_PREFIX)
        snprintf(key, kcap, "otp:pp:{%.*s}", r->prefix_digits, rq->phone + 1);
    else
        limits_key(r->key, rq, key, kcap);
    snprintf(field, fcap, "%s", r->field);
    for (kind = (int)r->key + 1; kind < CFG_KEY_COUNT; kind++) {
        const char *v = key_value((enum cfg_key)kind, rq);
        int len = kind == CFG_KEY_PHONE_PREFIX ? r->prefix_digits : (int)strlen(v ? v : "");
        if (!(mask & (1u << kind)))
            continue;
        n = strlen(field);
        if (kind == CFG_KEY_PHONE_PREFIX)
            v++; /* the digits after '+' */
        snprintf(field + n, fcap - n, "\x1f%.*s", len, v);
    }
    return 1;
}

void limits_phone_key(const struct limits_request *rq, char *out, size_t cap)
{
    limits_key(CFG_KEY_PHONE, rq, out, cap);
}

void limits_pump_key(const char *prefix, char *out, size_t cap)
{
    snprintf(out, cap, "otp:pump:{%s}", prefix);
}

void limits_undo_key(const char *rid, char *out, size_t cap)
{
    snprintf(out, cap, "otp:u:%s", rid);
}
