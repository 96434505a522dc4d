/*
 * timestamp: a handful of parses per otpctl run and one format per printed
 * row, so clarity wins over speed. The calendar is the proleptic Gregorian
 * one, counted in days from 1970-01-01 with Howard Hinnant's
 * days_from_civil and civil_from_days (exact for every year here).
 */
#include "timestamp.h"

#include <stdio.h>
#include <string.h>

#define DAY_MS (86400LL * 1000)
/* Unix ms of 0000-01-01T00:00:00Z and of 10000-01-01T00:00:00Z. */
#define MIN_MS (-62167219200000LL)
#define MAX_MS (253402300800000LL)
#define UNIX_MS_DIGITS_MAX 15

/* Days from 1970-01-01 to y-m-d (m 1..12, d 1..31). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The date days after 1970-01-01. */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return m == 2 && leap ? 29 : days[m - 1];
}

/* Reads exactly n ASCII digits at *p into *out and moves *p past them;
 * -1 when one of them is not a digit. */
static int digits(const char **p, int n, int *out)
{
    int v = 0, i;

    for (i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

static enum otp_rc parse_unix_ms(const char *s, int64_t *out_ms)
{
    int64_t v = 0;
    size_t n = strlen(s), i;

    if (n == 0 || n > UNIX_MS_DIGITS_MAX)
        return OTP_EINVAL;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return OTP_EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    *out_ms = v;
    return OTP_OK;
}

static enum otp_rc parse_rfc3339(const char *s, int64_t *out_ms)
{
    const char *p = s;
    int y, mo, d, h, mi, sec, frac_ms = 0, scale = 100, oh = 0, om = 0, sign = 0;
    int64_t ms;

    if (digits(&p, 4, &y) < 0 || *p++ != '-' || digits(&p, 2, &mo) < 0 || *p++ != '-' ||
        digits(&p, 2, &d) < 0)
        return OTP_EINVAL;
    if (*p != 'T' && *p != 't' && *p != ' ')
        return OTP_EINVAL;
    p++;
    if (digits(&p, 2, &h) < 0 || *p++ != ':' || digits(&p, 2, &mi) < 0 || *p++ != ':' ||
        digits(&p, 2, &sec) < 0)
        return OTP_EINVAL;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return OTP_EINVAL;
        for (; *p >= '0' && *p <= '9'; p++, scale /= 10)
            frac_ms += (*p - '0') * scale; /* past the third digit scale is 0: dropped */
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '+' ? 1 : -1;
        if (digits(&p, 2, &oh) < 0 || *p++ != ':' || digits(&p, 2, &om) < 0 || oh > 23 || om > 59)
            return OTP_EINVAL;
    } else {
        return OTP_EINVAL;
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60)
        return OTP_EINVAL;
    ms = days_from_civil(y, mo, d) * DAY_MS + ((int64_t)h * 3600 + mi * 60 + sec) * 1000 + frac_ms;
    /* The local time is ahead of UTC by the offset. */
    ms -= (int64_t)sign * ((int64_t)oh * 3600 + om * 60) * 1000;
    *out_ms = ms;
    return OTP_OK;
}

enum otp_rc timestamp_parse(const char *s, int64_t *out_ms)
{
    if (s == NULL || s[0] == '\0')
        return OTP_EINVAL;
    if (strspn(s, "0123456789") == strlen(s))
        return parse_unix_ms(s, out_ms);
    return parse_rfc3339(s, out_ms);
}

enum otp_rc timestamp_format(int64_t ms, char *out, size_t cap)
{
    int64_t days, rem, y;
    int m, d, n;

    if (cap > 0)
        out[0] = '\0';
    if (ms < MIN_MS || ms >= MAX_MS || cap < TIMESTAMP_LEN)
        return OTP_EINVAL;
    /* Floor division, so times before 1970 land on their own day. */
    days = ms >= 0 ? ms / DAY_MS : -((-ms + DAY_MS - 1) / DAY_MS);
    rem = ms - days * DAY_MS;
    civil_from_days(days, &y, &m, &d);
    n = snprintf(out, cap, "%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ", (long long)y, m, d, (int)(rem / 3600000),
                 (int)(rem / 60000 % 60), (int)(rem / 1000 % 60), (int)(rem % 1000));
    if (n < 0 || (size_t)n >= cap) {
        out[0] = '\0';
        return OTP_EINVAL;
    }
    return OTP_OK;
}
