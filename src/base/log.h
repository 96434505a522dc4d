/*
 * log: one line per event on stderr, "ts level msg key=value...". Used by
 * cmd/ and by the service threads for events an operator must see. Callers
 * never pass a code, a secret or a credential.
 */
#ifndef OTPD_LOG_H
#define OTPD_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
