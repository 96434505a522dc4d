/* log: thread-safe line logging; one fprintf per line, so lines never mix. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Debug lines are compiled in but not printed. */
static const enum log_level log_min = LOG_INFO;

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[1024], ts[32];
    struct timespec now;
    struct tm tm;
    va_list ap;

    if (level < log_min || level > LOG_ERROR)
        return;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ %s %s\n", ts, now.tv_nsec / 1000000, names[level], line);
}
