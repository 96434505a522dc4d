/*
 * v2_ver: verification records in Redis (v2.lua's v* ops), one Redis call
 * each. A record holds what Twilio's answers show and otp does not keep:
 * the number, the service, the status, the dates and the send attempts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "v2_int.h"

/* A verification record outlives its code by this, so a fetch after the
 * end still says how it ended. */
#define V2_VER_GRACE_MS (10 * 60 * 1000LL)

/* Reads v2.lua's record reply (taken) into out. */
static enum otp_rc ver_read(struct store_reply *rep, struct v2_verification *out, char *err)
{
    const char *att, *p;
    int64_t e, now;
    size_t i;

    if (rep->n < 1 || rep->strs[0] != NULL)
        return v2_bad_reply(rep, err);
    if (rep->ints[0] != 1) {
        enum otp_rc rc = rep->ints[0] == -1 ? OTP_EFORBIDDEN : OTP_ENOTFOUND;
        store_reply_free(rep);
        return rc;
    }
    if (rep->n < 11 || rep->strs[9] != NULL || rep->strs[10] == NULL || strlen(rep->strs[10]) != V2_ID_LEN)
        return v2_bad_reply(rep, err);
    for (i = 1; i < 9; i++)
        if (rep->strs[i] == NULL)
            return v2_bad_reply(rep, err);
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "VE%s", rep->strs[10]);
    snprintf(out->service, sizeof(out->service), "%s", rep->strs[2]);
    snprintf(out->to, sizeof(out->to), "%s", rep->strs[3]);
    snprintf(out->status, sizeof(out->status), "%s", rep->strs[4]);
    out->created_s = strtoll(rep->strs[5], NULL, 10);
    out->updated_s = strtoll(rep->strs[6], NULL, 10);
    e = strtoll(rep->strs[7], NULL, 10);
    now = rep->ints[9];
    if (strcmp(out->status, "pending") == 0 && now >= e)
        snprintf(out->status, sizeof(out->status), "expired");
    for (att = rep->strs[8]; *att && out->n_attempts < V2_ATTEMPTS_MAX; att = *p ? p + 1 : p) {
        struct v2_attempt *a = &out->attempts[out->n_attempts];
        const char *colon = strchr(att, ':');
        p = att + strcspn(att, ",");
        if (colon == NULL || colon > p || (size_t)(p - colon - 1) != V2_ID_LEN)
            continue;
        a->time_s = strtoll(att, NULL, 10);
        memcpy(a->mid, colon + 1, V2_ID_LEN);
        a->mid[V2_ID_LEN] = '\0';
        out->n_attempts++;
    }
    store_reply_free(rep);
    return OTP_OK;
}

/* The key of service svc's latest verification for number to. */
static void by_phone_key(const char *svc, const char *to, char *out, size_t cap)
{
    snprintf(out, cap, "otp:v2:pv:%s:%s", svc, to);
}

/* Runs op on key1 (vid's record) and key2 with argv after them. */
static enum otp_rc ver_call(struct v2 *v, const char *key1, const char *key2, const char *const *argv, int argc,
                            struct v2_verification *out, char *err)
{
    struct store_reply *rep;
    enum otp_rc rc;

    if ((rc = v2_eval(v, (const char *[]){key1, key2}, key2 ? 2 : 1, argv, argc, &rep, err)) != OTP_OK)
        return rc;
    return ver_read(rep, out, err);
}

static void ver_key(const char *vid, char *out, size_t cap)
{
    snprintf(out, cap, "otp:v2:ve:%s", vid);
}

enum otp_rc v2_ver_sent(struct v2 *v, const char *account, const char *service, const char *to, const char *vid,
                        const char *mid, int64_t life_ms, struct v2_verification *out, char *err)
{
    char life[24], grace[24], key[64], index[96];

    snprintf(life, sizeof(life), "%lld", (long long)(life_ms > 0 ? life_ms : 1));
    snprintf(grace, sizeof(grace), "%lld", V2_VER_GRACE_MS);
    ver_key(vid, key, sizeof(key));
    by_phone_key(service, to, index, sizeof(index));
    return ver_call(v, key, index, (const char *[]){"vs", account, service, to, mid, life, grace}, 7, out, err);
}

enum otp_rc v2_ver_by_phone(struct v2 *v, const char *account, const char *service, const char *to,
                            struct v2_verification *out, char *err)
{
    char index[96];

    by_phone_key(service, to, index, sizeof(index));
    return ver_call(v, index, "otp:v2:ve:", (const char *[]){"vp", account, service}, 3, out, err);
}

enum otp_rc v2_ver_get(struct v2 *v, const char *account, const char *service, const char *vid,
                       struct v2_verification *out, char *err)
{
    char key[64];

    ver_key(vid, key, sizeof(key));
    return ver_call(v, key, NULL, (const char *[]){"vg", account, service}, 3, out, err);
}

enum otp_rc v2_ver_status(struct v2 *v, const char *account, const char *service, const char *vid,
                          const char *status, struct v2_verification *out, char *err)
{
    char key[64];

    ver_key(vid, key, sizeof(key));
    return ver_call(v, key, NULL, (const char *[]){"vu", account, service, status}, 4, out, err);
}
