/*
 * fraud: countries' verdict, the pumping prefix and the log mask. Pure
 * and cheap (a few string compares per request, at most CFG_REGIONS_MAX
 * per list), run on the request path before any Redis call.
 */
#include "fraud.h"

#include <stdio.h>
#include <string.h>

static int fraud_listed(const char (*list)[CFG_REGION_LEN], size_t n, const char *region)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (strcmp(list[i], region) == 0)
            return 1;
    return 0;
}

enum fraud_country fraud_country(const struct cfg_countries *c, const char *region)
{
    if (region == NULL || region[0] == '\0')
        return c->has_allow ? FRAUD_DENY : FRAUD_SERVE;
    if (fraud_listed(c->deny, c->n_deny, region))
        return FRAUD_DENY;
    if (c->has_allow && !fraud_listed(c->allow, c->n_allow, region))
        return FRAUD_DENY;
    if (fraud_listed(c->monitor, c->n_monitor, region))
        return FRAUD_MONITOR;
    return FRAUD_SERVE;
}

int fraud_prefix(const char *phone, int digits, char *out, size_t cap)
{
    size_t n = phone != NULL && phone[0] == '+' ? strspn(phone + 1, "0123456789") : 0;

    if (digits < 1 || n < (size_t)digits || (size_t)digits + 2 > cap) {
        if (cap > 0)
            out[0] = '\0';
        return 0;
    }
    snprintf(out, cap, "+%.*s", digits, phone + 1);
    return 1;
}
