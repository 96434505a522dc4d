/*
 * fraud: the pure decisions of the fraud guards (docs/architecture.md,
 * "Limits and rules") that need no Redis: which regions are served
 * (countries allow, deny and monitor) and the prefix the pumping guard
 * counts a number under. No clock, no I/O, no allocation; the simulator
 * (otpctl simulate) may call them as otpd does. (A number's masked form for
 * logs is base/phone's phone_mask.)
 */
#ifndef OTPD_FRAUD_H
#define OTPD_FRAUD_H

#include <stddef.h>

#include "../base/conf.h"

/* What countries says of one region. */
enum fraud_country {
    FRAUD_SERVE = 0, /* served */
    FRAUD_MONITOR,   /* served, and counted and logged (countries.monitor) */
    FRAUD_DENY,      /* refused: 403 country_blocked */
};

/*
 * The decision of countries c for region (as phone_parse gives it: "IN",
 * "001"; "" or NULL when the number has none). deny refuses; with an allow
 * list, a region not on it is refused, and so is a number with no region
 * (nothing proves it is in an allowed one); without one, a number with no
 * region is served. A served region on the monitor list is FRAUD_MONITOR.
 */
enum fraud_country fraud_country(const struct cfg_countries *c, const char *region);

/* The pumping guard's prefix of phone (canonical E.164): its first digits
 * digits after the '+', as "+4474001", into out (cap bytes). Returns 0
 * when phone has fewer digits (the guard does not apply), else 1. */
int fraud_prefix(const char *phone, int digits, char *out, size_t cap);

#endif
