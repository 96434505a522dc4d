/*
 * v2: the Verify surface's records in Redis (v2.lua) and the ledger rows
 * of service changes. Runs per /v2 request, one Redis call each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../ledger/ledger.h"
#include "../otp/code.h"
#include "../store/store.h"
#include "v2.h"
#include "v2.lua.h"

struct v2 {
    struct store *store;
    struct ledger *ledger;
    int h; /* v2.lua */
};

/* A verification record outlives its code by this, so a fetch after the
 * end still says how it ended. */
#define V2_VER_GRACE_MS (10 * 60 * 1000LL)

struct v2 *v2_new(struct store *s, struct ledger *lg)
{
    struct v2 *v = calloc(1, sizeof(*v));

    if (v == NULL)
        return NULL;
    v->store = s;
    v->ledger = lg;
    v->h = store_script(s, v2_v2_lua);
    return v;
}

void v2_free(struct v2 *v)
{
    free(v);
}

int v2_sid_ok(const char *sid, const char *prefix)
{
    return sid != NULL && strlen(sid) == V2_SID_LEN && strncmp(sid, prefix, 2) == 0 &&
           strspn(sid + 2, "0123456789abcdefABCDEF") == V2_ID_LEN;
}

void v2_sid_new(const char *prefix, char *out)
{
    out[0] = prefix[0];
    out[1] = prefix[1];
    code_new_id(out + 2);
}

/* ---- Services ---- */

static void svc_key(const char *account, char *out, size_t cap)
{
    snprintf(out, cap, "otp:v2:svc:%s", account);
}

/* The stored form of s past its dates: name, then the numbers. The name
 * holds no control character (v2_form.c refuses them), so none is \31. */
static void svc_rest(const struct v2_service *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s\037%d\037%d\037%d", s->friendly_name, s->code_length, s->lookup_enabled,
             s->skip_landlines);
}

/* Reads a stored value back into out (sid set by the caller); -1 when it
 * is not such a value. */
static int svc_parse(const char *v, struct v2_service *out)
{
    const char *f[6];
    size_t n = 0, len;
    const char *p = v;

    f[n++] = p;
    while (n < 6 && (p = strchr(p, '\037')) != NULL)
        f[n++] = ++p;
    if (n != 6)
        return -1;
    len = (size_t)(f[3] - f[2] - 1);
    if (len >= sizeof(out->friendly_name))
        return -1;
    out->created_s = strtoll(f[0], NULL, 10);
    out->updated_s = strtoll(f[1], NULL, 10);
    memcpy(out->friendly_name, f[2], len);
    out->friendly_name[len] = '\0';
    out->code_length = atoi(f[3]);
    out->lookup_enabled = atoi(f[4]);
    out->skip_landlines = atoi(f[5]);
    return 0;
}

/* Runs v2.lua's op with key and up to four more arguments. */
static enum otp_rc v2_eval(struct v2 *v, const char *key, const char *const *argv, int argc,
                           struct store_reply **rep, char *err)
{
    const char *args[9];
    int i;

    args[0] = key;
    for (i = 0; i < argc; i++)
        args[1 + i] = argv[i];
    return store_eval(v->store, v->h, 1, 1 + argc, args, rep, err);
}

static enum otp_rc bad_reply(struct store_reply *rep, char *err)
{
    snprintf(err, OTP_ERR_LEN, "v2.lua gave a bad reply");
    store_reply_free(rep);
    return OTP_ESTORE;
}

static void svc_record(struct v2 *v, const char *caller, const char *action, const struct v2_service *s)
{
    char body[256] = "";
    enum otp_rc rc;

    if (s->friendly_name[0] || s->code_length)
        snprintf(body, sizeof(body), "{\"code_length\":%d,\"lookup_enabled\":%s,\"skip_sms_to_landlines\":%s}",
                 s->code_length, s->lookup_enabled ? "true" : "false", s->skip_landlines ? "true" : "false");
    rc = ledger_admin(v->ledger, &(struct ledger_admin){clock_wall_ms(), caller, action, "service", s->sid,
                                                         body[0] ? body : NULL, NULL, 0, 0});
    if (rc != OTP_OK)
        log_msg(LOG_ERROR, "ledger: service %s %s by %s not recorded: %s", action, s->sid, caller,
                otp_rc_str(rc));
    log_event(LOG_INFO, "v2.service", LOG_FIELDS(LOG_STR("caller", caller), LOG_STR("action", action),
                                                 LOG_STR("sid", s->sid)),
              "v2: %s %s service %s", caller, action, s->sid);
}

enum otp_rc v2_service_create(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err)
{
    char key[64], rest[256], cap[16];
    struct store_reply *rep = NULL;
    enum otp_rc rc;
    int tries;

    svc_key(account, key, sizeof(key));
    svc_rest(s, rest, sizeof(rest));
    snprintf(cap, sizeof(cap), "%d", V2_SERVICES_MAX);
    for (tries = 0; tries < 3; tries++) {
        v2_sid_new("VA", s->sid);
        if ((rc = v2_eval(v, key, (const char *[]){"sc", s->sid, rest, cap}, 4, &rep, err)) != OTP_OK)
            return rc;
        if (rep->n < 1 || rep->strs[0] != NULL)
            return bad_reply(rep, err);
        if (rep->ints[0] != 0)
            break;
        store_reply_free(rep); /* 2^-128: a SID taken */
        rep = NULL;
    }
    if (rep == NULL || rep->ints[0] != 1) {
        store_reply_free(rep);
        snprintf(err, OTP_ERR_LEN, "an account holds at most %d services", V2_SERVICES_MAX);
        return OTP_EFULL;
    }
    if (rep->n < 2 || rep->strs[1] != NULL)
        return bad_reply(rep, err);
    s->created_s = s->updated_s = rep->ints[1];
    store_reply_free(rep);
    svc_record(v, caller, "add", s);
    return OTP_OK;
}

enum otp_rc v2_service_get(struct v2 *v, const char *account, const char *sid, struct v2_service *out, char *err)
{
    char key[64];
    struct store_reply *rep;
    enum otp_rc rc;

    svc_key(account, key, sizeof(key));
    if ((rc = v2_eval(v, key, (const char *[]){"sg", sid}, 2, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n < 1 || rep->strs[0] != NULL)
        return bad_reply(rep, err);
    if (rep->ints[0] != 1) {
        store_reply_free(rep);
        return OTP_ENOTFOUND;
    }
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "%s", sid);
    if (rep->n < 2 || rep->strs[1] == NULL || svc_parse(rep->strs[1], out) < 0)
        return bad_reply(rep, err);
    store_reply_free(rep);
    return OTP_OK;
}

static int svc_older(const void *a, const void *b)
{
    const struct v2_service *x = a, *y = b;

    if (x->created_s != y->created_s)
        return x->created_s < y->created_s ? -1 : 1;
    return strcmp(x->sid, y->sid);
}

enum otp_rc v2_service_list(struct v2 *v, const char *account, struct v2_service **out, size_t *n, char *err)
{
    char key[64];
    struct store_reply *rep;
    enum otp_rc rc;
    size_t i;

    *out = NULL;
    *n = 0;
    svc_key(account, key, sizeof(key));
    if ((rc = v2_eval(v, key, (const char *[]){"sl"}, 1, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n % 2 != 0 || (*out = calloc(rep->n / 2 + 1, sizeof(**out))) == NULL) {
        store_reply_free(rep);
        snprintf(err, OTP_ERR_LEN, "out of memory or a bad reply");
        return OTP_ENOMEM;
    }
    for (i = 0; i + 1 < rep->n; i += 2) {
        struct v2_service *s = &(*out)[*n];
        if (rep->strs[i] == NULL || rep->strs[i + 1] == NULL || !v2_sid_ok(rep->strs[i], "VA"))
            continue;
        snprintf(s->sid, sizeof(s->sid), "%s", rep->strs[i]);
        if (svc_parse(rep->strs[i + 1], s) == 0)
            (*n)++;
    }
    store_reply_free(rep);
    qsort(*out, *n, sizeof(**out), svc_older);
    return OTP_OK;
}

enum otp_rc v2_service_update(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err)
{
    char key[64], rest[256];
    struct store_reply *rep;
    enum otp_rc rc;

    svc_key(account, key, sizeof(key));
    svc_rest(s, rest, sizeof(rest));
    if ((rc = v2_eval(v, key, (const char *[]){"su", s->sid, rest}, 3, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n < 1 || rep->strs[0] != NULL)
        return bad_reply(rep, err);
    if (rep->ints[0] != 1) {
        store_reply_free(rep);
        return OTP_ENOTFOUND;
    }
    if (rep->n < 2 || rep->strs[1] == NULL || svc_parse(rep->strs[1], s) < 0)
        return bad_reply(rep, err);
    store_reply_free(rep);
    svc_record(v, caller, "update", s);
    return OTP_OK;
}

enum otp_rc v2_service_delete(struct v2 *v, const char *caller, const char *account, const char *sid, char *err)
{
    char key[64];
    struct store_reply *rep;
    struct v2_service s = {0};
    enum otp_rc rc;

    svc_key(account, key, sizeof(key));
    if ((rc = v2_eval(v, key, (const char *[]){"sd", sid}, 2, &rep, err)) != OTP_OK)
        return rc;
    if (rep->n < 1 || rep->strs[0] != NULL)
        return bad_reply(rep, err);
    rc = rep->ints[0] == 1 ? OTP_OK : OTP_ENOTFOUND;
    store_reply_free(rep);
    if (rc == OTP_OK) {
        snprintf(s.sid, sizeof(s.sid), "%s", sid);
        svc_record(v, caller, "remove", &s);
    }
    return rc;
}

/* ---- Verification records ---- */

/* Reads v2.lua's record reply into out (the sid from vid). */
static enum otp_rc ver_read(struct store_reply *rep, const char *vid, struct v2_verification *out, char *err)
{
    const char *att, *p;
    int64_t e, now;
    size_t i;

    if (rep->n < 1 || rep->strs[0] != NULL)
        return bad_reply(rep, err);
    if (rep->ints[0] != 1) {
        enum otp_rc rc = rep->ints[0] == -1 ? OTP_EFORBIDDEN : OTP_ENOTFOUND;
        store_reply_free(rep);
        return rc;
    }
    if (rep->n < 10 || rep->strs[9] != NULL)
        return bad_reply(rep, err);
    for (i = 1; i < 9; i++)
        if (rep->strs[i] == NULL)
            return bad_reply(rep, err);
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "VE%s", vid);
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

static void ver_key(const char *vid, char *out, size_t cap)
{
    snprintf(out, cap, "otp:v2:ve:%s", vid);
}

enum otp_rc v2_ver_sent(struct v2 *v, const char *account, const char *service, const char *to, const char *vid,
                        const char *mid, int64_t life_ms, struct v2_verification *out, char *err)
{
    char key[64], life[24], grace[24];
    struct store_reply *rep;
    enum otp_rc rc;

    ver_key(vid, key, sizeof(key));
    snprintf(life, sizeof(life), "%lld", (long long)(life_ms > 0 ? life_ms : 1));
    snprintf(grace, sizeof(grace), "%lld", V2_VER_GRACE_MS);
    if ((rc = v2_eval(v, key, (const char *[]){"vs", account, service, to, mid, life, grace}, 7, &rep, err)) !=
        OTP_OK)
        return rc;
    return ver_read(rep, vid, out, err);
}

enum otp_rc v2_ver_get(struct v2 *v, const char *account, const char *service, const char *vid,
                       struct v2_verification *out, char *err)
{
    char key[64];
    struct store_reply *rep;
    enum otp_rc rc;

    ver_key(vid, key, sizeof(key));
    if ((rc = v2_eval(v, key, (const char *[]){"vg", account, service}, 3, &rep, err)) != OTP_OK)
        return rc;
    return ver_read(rep, vid, out, err);
}

enum otp_rc v2_ver_status(struct v2 *v, const char *account, const char *service, const char *vid,
                          const char *status, struct v2_verification *out, char *err)
{
    char key[64];
    struct store_reply *rep;
    enum otp_rc rc;

    ver_key(vid, key, sizeof(key));
    if ((rc = v2_eval(v, key, (const char *[]){"vu", account, service, status}, 4, &rep, err)) != OTP_OK)
        return rc;
    return ver_read(rep, vid, out, err);
}
