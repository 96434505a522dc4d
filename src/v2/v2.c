/*
 * v2: the Verify surface's object, its rows in Redis (v2.lua's generic
 * row ops) and its services. Runs per /v2 request, one Redis call each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../ledger/ledger.h"
#include "../otp/code.h"
#include "v2.lua.h"
#include "v2_int.h"

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

/* ---- Rows ---- */

enum otp_rc v2_eval(struct v2 *v, const char *const *keys, int nkeys, const char *const *argv, int argc,
                    struct store_reply **rep, char *err)
{
    const char *args[12];
    int i;

    for (i = 0; i < nkeys; i++)
        args[i] = keys[i];
    for (i = 0; i < argc; i++)
        args[nkeys + i] = argv[i];
    return store_eval(v->store, v->h, nkeys, nkeys + argc, args, rep, err);
}

enum otp_rc v2_bad_reply(struct store_reply *rep, char *err)
{
    snprintf(err, OTP_ERR_LEN, "v2.lua gave a bad reply");
    store_reply_free(rep);
    return OTP_ESTORE;
}

struct v2_loc v2_loc_service(const char *account, const char *svc)
{
    struct v2_loc l = {.nkeys = 3, .svc = svc};

    snprintf(l.keys[0], sizeof(l.keys[0]), "otp:v2:svc:%s", account);
    snprintf(l.keys[1], sizeof(l.keys[1]), "otp:v2:rl:%s", svc);
    snprintf(l.keys[2], sizeof(l.keys[2]), "otp:v2:bk:%s", svc);
    return l;
}

struct v2_loc v2_loc_child(const char *account, const char *svc, int bucket)
{
    struct v2_loc l = v2_loc_service(account, svc);

    if (bucket) { /* its own hash first, its parents' next */
        snprintf(l.keys[1], sizeof(l.keys[1]), "otp:v2:bk:%s", svc);
        snprintf(l.keys[2], sizeof(l.keys[2]), "otp:v2:rl:%s", svc);
    }
    return l;
}

static enum otp_rc row_call(struct v2 *v, const struct v2_loc *l, const char *const *argv, int argc,
                            struct store_reply **rep, char *err)
{
    const char *keys[3] = {l->keys[0], l->keys[1], l->keys[2]};
    enum otp_rc rc = v2_eval(v, keys, l->nkeys, argv, argc, rep, err);

    if (rc == OTP_OK && ((*rep)->n < 1 || (*rep)->strs[0] != NULL))
        return v2_bad_reply(*rep, err);
    return rc;
}

enum otp_rc v2_row_create(struct v2 *v, const struct v2_loc *l, const char *prefix, const char *rest, int cap,
                          const char *uniq, const char *parent, char *sid_out, int64_t *now, char *err)
{
    struct store_reply *rep = NULL;
    char caps[16];
    enum otp_rc rc;
    long long got = 0;
    int tries;

    snprintf(caps, sizeof(caps), "%d", cap);
    for (tries = 0; tries < 3 && got == 0; tries++) { /* 0: the SID was taken (2^-128) */
        int top = l->nkeys == 1; /* a service: itself the row */
        v2_sid_new(prefix, sid_out);
        store_reply_free(rep);
        if ((rc = row_call(v, l,
                           (const char *[]){"rc", top ? sid_out : l->svc, top ? "" : sid_out, rest, caps,
                                            uniq ? uniq : "", parent ? parent : ""},
                           7, &rep, err)) != OTP_OK)
            return rc;
        got = rep->ints[0];
    }
    switch (got) {
    case 1:
        if (rep->n < 2 || rep->strs[1] != NULL)
            return v2_bad_reply(rep, err);
        *now = rep->ints[1];
        rc = OTP_OK;
        break;
    case -1:
        snprintf(err, OTP_ERR_LEN, "there are %d of them already, the most there may be", cap);
        rc = OTP_EFULL;
        break;
    case -2:
        snprintf(err, OTP_ERR_LEN, "UniqueName %s is taken", uniq ? uniq : "");
        rc = OTP_EINVAL;
        break;
    default:
        rc = OTP_ENOTFOUND;
    }
    store_reply_free(rep);
    return rc;
}

/* A reply of {1, value} into *value. */
static enum otp_rc row_value(struct store_reply *rep, char **value, char *err)
{
    if (rep->ints[0] != 1) {
        store_reply_free(rep);
        return OTP_ENOTFOUND;
    }
    if (rep->n < 2 || rep->strs[1] == NULL)
        return v2_bad_reply(rep, err);
    *value = rep->strs[1];
    rep->strs[1] = NULL;
    store_reply_free(rep);
    return OTP_OK;
}

enum otp_rc v2_row_get(struct v2 *v, const struct v2_loc *l, const char *sid, char **value, char *err)
{
    struct store_reply *rep;
    enum otp_rc rc = row_call(v, l, (const char *[]){"rg", l->svc, sid}, 3, &rep, err);

    return rc != OTP_OK ? rc : row_value(rep, value, err);
}

enum otp_rc v2_row_list(struct v2 *v, const struct v2_loc *l, struct store_reply **rep, char *err)
{
    enum otp_rc rc = row_call(v, l, (const char *[]){"rl", l->svc, l->nkeys == 1 ? "" : "*"}, 3, rep, err);

    if (rc != OTP_OK)
        return rc;
    if ((*rep)->ints[0] != 1) {
        store_reply_free(*rep);
        return OTP_ENOTFOUND;
    }
    return (*rep)->n % 2 == 1 ? OTP_OK : v2_bad_reply(*rep, err);
}

enum otp_rc v2_row_update(struct v2 *v, const struct v2_loc *l, const char *sid, const char *rest,
                          const char *uniq, char **value, char *err)
{
    struct store_reply *rep;
    enum otp_rc rc = row_call(v, l, (const char *[]){"ru", l->svc, sid, rest, uniq ? uniq : ""}, 5, &rep, err);

    if (rc != OTP_OK)
        return rc;
    if (rep->ints[0] == -2) {
        store_reply_free(rep);
        snprintf(err, OTP_ERR_LEN, "UniqueName %s is taken", uniq ? uniq : "");
        return OTP_EINVAL;
    }
    return row_value(rep, value, err);
}

enum otp_rc v2_row_delete(struct v2 *v, const struct v2_loc *l, const char *sid, char *err)
{
    struct store_reply *rep;
    enum otp_rc rc = row_call(v, l, (const char *[]){"rd", l->svc, sid}, 3, &rep, err);

    if (rc != OTP_OK)
        return rc;
    rc = rep->ints[0] == 1 ? OTP_OK : OTP_ENOTFOUND;
    store_reply_free(rep);
    return rc;
}

int v2_row_split(char *value, int64_t *created, int64_t *updated, char **f, int max)
{
    char *p = value, *q;
    int n = 0;

    *created = strtoll(p, &q, 10);
    if (q == p || *q != '\037')
        return -1;
    *updated = strtoll(p = q + 1, &q, 10);
    if (q == p || *q != '\037')
        return -1;
    for (p = q + 1; n < max; p = q + 1) {
        f[n++] = p;
        if ((q = strchr(p, '\037')) == NULL)
            break;
        *q = '\0';
    }
    return n;
}

void v2_record(struct v2 *v, const char *caller, const char *action, const char *kind, const char *sid,
               const char *body)
{
    enum otp_rc rc = ledger_admin(v->ledger, &(struct ledger_admin){clock_wall_ms(), caller, action, kind, sid, body,
                                                                     NULL, 0, 0});

    if (rc != OTP_OK)
        log_msg(LOG_ERROR, "ledger: %s %s %s by %s not recorded: %s", kind, action, sid, caller, otp_rc_str(rc));
    log_event(LOG_INFO, "v2.change",
              LOG_FIELDS(LOG_STR("caller", caller), LOG_STR("action", action), LOG_STR("kind", kind),
                         LOG_STR("sid", sid)),
              "v2: %s %s %s %s", caller, action, kind, sid);
}

/* ---- Services ---- */

/* The stored form of s past its dates: name, then the numbers. The name
 * holds no control character (v2_form.c refuses them), so none is \31. */
static void svc_rest(const struct v2_service *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s\037%d\037%d\037%d", s->friendly_name, s->code_length, s->lookup_enabled,
             s->skip_landlines);
}

enum otp_rc v2_service_parse(char *value, struct v2_service *out, char *err)
{
    char *f[4];
    int n = v2_row_split(value, &out->created_s, &out->updated_s, f, 4);

    if (n == 4 && strlen(f[0]) < sizeof(out->friendly_name)) {
        snprintf(out->friendly_name, sizeof(out->friendly_name), "%s", f[0]);
        out->code_length = (int)strtol(f[1], NULL, 10);
        out->lookup_enabled = (int)strtol(f[2], NULL, 10);
        out->skip_landlines = (int)strtol(f[3], NULL, 10);
    }
    free(value);
    if (n != 4) {
        snprintf(err, OTP_ERR_LEN, "a stored service cannot be read");
        return OTP_ESTORE;
    }
    return OTP_OK;
}

/* The ledger row's body of s. */
static void svc_body(const struct v2_service *s, char *out, size_t cap)
{
    snprintf(out, cap, "{\"code_length\":%d,\"lookup_enabled\":%s,\"skip_sms_to_landlines\":%s}", s->code_length,
             s->lookup_enabled ? "true" : "false", s->skip_landlines ? "true" : "false");
}

enum otp_rc v2_service_create(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err)
{
    char rest[256], body[160];
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_service(account, "");
    l.nkeys = 1;
    svc_rest(s, rest, sizeof(rest));
    if ((rc = v2_row_create(v, &l, "VA", rest, V2_SERVICES_MAX, NULL, NULL, s->sid, &s->created_s, err)) != OTP_OK) {
        if (rc == OTP_EFULL)
            snprintf(err, OTP_ERR_LEN, "an account holds at most %d services", V2_SERVICES_MAX);
        return rc;
    }
    s->updated_s = s->created_s;
    svc_body(s, body, sizeof(body));
    v2_record(v, caller, "add", "service", s->sid, body);
    return OTP_OK;
}

enum otp_rc v2_service_get(struct v2 *v, const char *account, const char *sid, struct v2_service *out, char *err)
{
    struct v2_loc l;
    char *value;
    enum otp_rc rc;

    l = v2_loc_service(account, sid);
    l.nkeys = 1;
    if ((rc = v2_row_get(v, &l, "", &value, err)) != OTP_OK)
        return rc;
    memset(out, 0, sizeof(*out));
    snprintf(out->sid, sizeof(out->sid), "%s", sid);
    return v2_service_parse(value, out, err);
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
    struct store_reply *rep;
    struct v2_loc l;
    enum otp_rc rc;
    size_t i;

    *out = NULL;
    *n = 0;
    l = v2_loc_service(account, "");
    l.nkeys = 1;
    if ((rc = v2_row_list(v, &l, &rep, err)) != OTP_OK)
        return rc == OTP_ENOTFOUND ? OTP_OK : rc;
    if ((*out = calloc(rep->n / 2 + 1, sizeof(**out))) == NULL) {
        store_reply_free(rep);
        return OTP_ENOMEM;
    }
    for (i = 1; i + 1 < rep->n; i += 2) {
        struct v2_service *s = &(*out)[*n];
        if (rep->strs[i] == NULL || rep->strs[i + 1] == NULL || !v2_sid_ok(rep->strs[i], "VA"))
            continue;
        snprintf(s->sid, sizeof(s->sid), "%s", rep->strs[i]);
        if (v2_service_parse(rep->strs[i + 1], s, err) == OTP_OK)
            (*n)++;
        rep->strs[i + 1] = NULL;
    }
    store_reply_free(rep);
    qsort(*out, *n, sizeof(**out), svc_older);
    return OTP_OK;
}

enum otp_rc v2_service_update(struct v2 *v, const char *caller, const char *account, struct v2_service *s,
                              char *err)
{
    char rest[256], body[160], *value;
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_service(account, s->sid);
    l.nkeys = 1;
    svc_rest(s, rest, sizeof(rest));
    if ((rc = v2_row_update(v, &l, "", rest, NULL, &value, err)) != OTP_OK ||
        (rc = v2_service_parse(value, s, err)) != OTP_OK)
        return rc;
    svc_body(s, body, sizeof(body));
    v2_record(v, caller, "update", "service", s->sid, body);
    return OTP_OK;
}

enum otp_rc v2_service_delete(struct v2 *v, const char *caller, const char *account, const char *sid, char *err)
{
    struct v2_loc l;
    enum otp_rc rc;

    l = v2_loc_service(account, sid);
    if ((rc = v2_row_delete(v, &l, "", err)) == OTP_OK)
        v2_record(v, caller, "remove", "service", sid, NULL);
    return rc;
}
