/*
 * otp_ready: /readyz, asked by a load balancer every few seconds. One
 * Redis ping through the breaker, a look at the ledger's last transaction
 * and at the send queue's room; what is wrong is told without an address
 * and logged once each time it changes.
 */
#include <stdio.h>
#include <string.h>

#include "../base/log.h"
#include "otp_int.h"

/* Appends the risky Redis settings of the last check to why ("" when
 * none): a warning only, readiness stays (a fleet must not go down on it). */
static void redis_conf_warnings(struct otp *o, char *why, size_t cap)
{
    struct store_redis_conf rc;
    size_t n = strlen(why);

    store_redis_conf(o->d.store, &rc);
    if (rc.policy_risky && n < cap)
        n += (size_t)snprintf(why + n, cap - n, "; redis: maxmemory-policy is %s, must be noeviction",
                              rc.maxmemory_policy);
    if (rc.appendonly_risky && n < cap)
        snprintf(why + n, cap - n, "; redis: appendonly is %s, must be yes", rc.appendonly);
}

/*
 * /readyz is often reachable by more than the operator: its detail says
 * what is wrong but names no address. The whole error goes to the log,
 * once each time it changes. Store errors name an address only as
 * "redis connect HOST:PORT: why" (an IPv6 HOST holds no ": ").
 */
static void not_ready(struct otp *o, const char *what, const char *err, char *why, size_t cap)
{
    static const char connect[] = "redis connect ";
    const char *sep = strncmp(err, connect, strlen(connect)) == 0 ? strstr(err, ": ") : NULL;

    pthread_mutex_lock(&o->mu);
    if (strcmp(o->not_ready, err) != 0) {
        snprintf(o->not_ready, sizeof(o->not_ready), "%s", err);
        log_msg(LOG_WARN, "not ready: %s: %s", what, err);
    }
    pthread_mutex_unlock(&o->mu);
    if (sep != NULL)
        snprintf(why, cap, "%s: cannot connect to redis%s", what, sep);
    else
        snprintf(why, cap, "%s: %s", what, err);
}

int otp_ready(struct otp *o, char *why, size_t cap)
{
    char err[OTP_ERR_LEN];

    /* The ping goes through the breaker: refused at once while it is open,
     * and the half-open probe once it is due, so readiness comes back
     * without API traffic. */
    limits_flush(o->d.limits); /* abandons of 503'd requests, even without API traffic */
    if (store_ping(o->d.store, err) != OTP_OK) {
        not_ready(o, "redis", err, why, cap);
        return 0;
    }
    if (!ledger_healthy(o->d.ledger)) {
        snprintf(why, cap, "ledger: the last transaction failed");
        return 0;
    }
    if (lanes_full(o->d.lanes)) {
        snprintf(why, cap, "the send queue is full");
        return 0;
    }
    snprintf(why, cap, "ok");
    redis_conf_warnings(o, why, cap);
    return 1;
}
