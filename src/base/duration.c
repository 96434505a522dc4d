/* duration: "30s" -> 30000; units ms, s, m, h, d and w. Called at config load only. */
#include "duration.h"

#include <string.h>

#define DURATION_MAX_MS (366LL * 24 * 3600 * 1000)

enum otp_rc duration_parse(const char *s, int64_t *out_ms)
{
    int64_t n = 0, unit_ms;
    const char *p = s;

    if (s == NULL || *p < '0' || *p > '9')
        return OTP_EINVAL;
    while (*p >= '0' && *p <= '9') {
        n = n * 10 + (*p - '0');
        if (n > DURATION_MAX_MS)
            return OTP_EINVAL;
        p++;
    }
    if (strcmp(p, "ms") == 0)
        unit_ms = 1;
    else if (strcmp(p, "s") == 0)
        unit_ms = 1000;
    else if (strcmp(p, "m") == 0)
        unit_ms = 60 * 1000;
    else if (strcmp(p, "h") == 0)
        unit_ms = 3600 * 1000;
    else if (strcmp(p, "d") == 0)
        unit_ms = 24 * 3600 * 1000;
    else if (strcmp(p, "w") == 0)
        unit_ms = 7 * 24 * 3600 * 1000;
    else
        return OTP_EINVAL;
    if (n == 0 || n > DURATION_MAX_MS / unit_ms)
        return OTP_EINVAL;
    *out_ms = n * unit_ms;
    return OTP_OK;
}
