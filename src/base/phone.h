/*
 * phone: E.164 checks and destination prefixes. Pure.
 */
#ifndef OTPD_PHONE_H
#define OTPD_PHONE_H

#include <stddef.h>

/* The longest E.164 number, "+" and 15 digits, and its NUL. */
#define PHONE_MAX 17

/* Returns 1 when s is "+" then 7 to 15 digits, the first not 0; else 0. */
int phone_valid(const char *s);

#endif
