/*
 * problem: the text of an RFC 9457 problem (application/problem+json) as
 * otpd answers it, written directly rather than through jansson, since a
 * flood's refusals each need one (issue 13's profile: the jansson object
 * and its dump were 6 % of a hot refusal). Byte for byte what jansson's
 * json_dumps(JSON_COMPACT) gives for the same object built in the same
 * order (fuzz_body compares the two on every input).
 */
#ifndef OTPD_PROBLEM_H
#define OTPD_PROBLEM_H

#include <stdint.h>

/* What one problem says; the strings are valid UTF-8 (http_utf8_cut). */
struct problem {
    unsigned status;
    const char *error;  /* our stable code: also the type's last part */
    const char *title;
    const char *detail; /* at most PROBLEM_DETAIL_MAX bytes are used */
    const char *reason; /* the rule's name; NULL or "" when none */
    int64_t retry_after_s;   /* shown when > 0 */
    int attempts_left;       /* shown when show_attempts */
    int show_attempts;
};

#define PROBLEM_DETAIL_MAX 255
/* Each of the four table strings (error, title, reason) is cut at this. */
#define PROBLEM_NAME_MAX 96

/* The problem's JSON text, malloc'd; NULL when out of memory. */
char *problem_text(const struct problem *p);

#endif
