/*
 * v2's internals, shared by v2.c (the object, rows, services), v2_rl.c
 * (rate limits, buckets) and v2_ver.c (verification records).
 */
#ifndef OTPD_V2_INT_H
#define OTPD_V2_INT_H

#include "../store/store.h"
#include "v2.h"

struct ledger;

struct v2 {
    struct store *store;
    struct ledger *ledger;
    int h; /* v2.lua */
};

/* Where a row lives (v2.lua's KEYS): the account's services, then the
 * hashes its op names; svc is the row's service. nkeys 1: the services
 * themselves (a row op's sid is then "": the service svc). */
struct v2_loc {
    char keys[3][64];
    int nkeys;
    const char *svc;
};
/* The service svc of account itself (the other two: its rate limits and
 * buckets, which its delete takes). */
struct v2_loc v2_loc_service(const char *account, const char *svc);
/* A rate limit (parents 0) or a bucket (1) of svc. */
struct v2_loc v2_loc_child(const char *account, const char *svc, int bucket);

/* The generic row ops of v2.lua; sid "" for the service itself. rc: the
 * new row's SID (prefix and random) in sid_out and its time in *now; its
 * errors OTP_EFULL (cap), OTP_EINVAL (uniq taken), OTP_ENOTFOUND (no
 * service or parent). */
enum otp_rc v2_row_create(struct v2 *v, const struct v2_loc *l, const char *prefix, const char *rest, int cap,
                          const char *uniq, const char *parent, char *sid_out, int64_t *now, char *err);
/* The row's value (its dates, then its rest), malloc'd in *value. */
enum otp_rc v2_row_get(struct v2 *v, const struct v2_loc *l, const char *sid, char **value, char *err);
/* Every row: a reply of 1 then SID and value pairs, freed by the caller. */
enum otp_rc v2_row_list(struct v2 *v, const struct v2_loc *l, struct store_reply **rep, char *err);
enum otp_rc v2_row_update(struct v2 *v, const struct v2_loc *l, const char *sid, const char *rest,
                          const char *uniq, char **value, char *err);
enum otp_rc v2_row_delete(struct v2 *v, const struct v2_loc *l, const char *sid, char *err);

/* A value's dates and its rest's fields (split at \31), at most max of
 * them in f; their number, or -1 when it has no two dates. */
int v2_row_split(char *value, int64_t *created, int64_t *updated, char **f, int max);

/* A stored service value (taken, freed) into out, whose sid the caller
 * set. */
enum otp_rc v2_service_parse(char *value, struct v2_service *out, char *err);

/* Records a change in the ledger (a failure is logged; the change stands)
 * and logs it. */
void v2_record(struct v2 *v, const char *caller, const char *action, const char *kind, const char *sid,
               const char *body);

/* Runs v2.lua with nkeys keys then the args (at most 8). */
enum otp_rc v2_eval(struct v2 *v, const char *const *keys, int nkeys, const char *const *argv, int argc,
                    struct store_reply **rep, char *err);
/* Frees rep and says the reply was not v2.lua's: OTP_ESTORE. */
enum otp_rc v2_bad_reply(struct store_reply *rep, char *err);

#endif
