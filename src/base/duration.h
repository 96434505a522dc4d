/*
 * duration: parses the config's duration strings ("500ms", "30s", "10m",
 * "2h", "1d") into integer milliseconds. Pure, no allocation.
 */
#ifndef OTPD_DURATION_H
#define OTPD_DURATION_H

#include <stdint.h>

#include "rc.h"

/* Parses s into *out_ms. Returns OTP_EINVAL for anything but one positive
 * integer followed by ms, s, m, h or d, or for a value above 366 days. */
enum otp_rc duration_parse(const char *s, int64_t *out_ms);

#endif
