/*
 * timestamp: the points in time an operator types and reads (otpctl's
 * --since and --until, and the times it prints). Unix milliseconds in, RFC
 * 3339 out, all in UTC. Pure: no clock read, no allocation, no libc time
 * zone (gmtime and localtime are banned; the calendar arithmetic is here).
 */
#ifndef OTPD_TIMESTAMP_H
#define OTPD_TIMESTAMP_H

#include <stddef.h>
#include <stdint.h>

#include "rc.h"

/* "2024-05-01T12:00:00.123Z" and its NUL; years 0000 to 9999. */
#define TIMESTAMP_LEN 25

/*
 * Parses s into Unix milliseconds. s is either a Unix time in milliseconds
 * (decimal digits only, at most 15 of them: up to the year 33658) or an RFC
 * 3339 date-time: "YYYY-MM-DDTHH:MM:SS", an optional fraction of a second
 * (kept to the millisecond, the rest dropped), then "Z" or an offset
 * "+HH:MM"/"-HH:MM". 'T' and 'Z' may be lower case, and 'T' a space, as RFC
 * 3339 allows. Second 60 (a leap second) is read as the next minute's
 * first, as POSIX time does. Returns OTP_EINVAL for anything else (a date
 * alone, a day the month lacks, no offset) and leaves *out_ms untouched.
 */
enum otp_rc timestamp_parse(const char *s, int64_t *out_ms);

/* Writes ms as RFC 3339 UTC with milliseconds ("...T12:00:00.123Z") into
 * out (cap bytes, TIMESTAMP_LEN is enough). Returns OTP_EINVAL, with out
 * empty, for a time outside the years 0000 to 9999 or a short buffer. */
enum otp_rc timestamp_format(int64_t ms, char *out, size_t cap);

#endif
