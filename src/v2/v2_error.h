/*
 * v2_error: otpd's outcomes as Twilio Verify's errors (v2_error.c).
 */
#ifndef OTPD_V2_ERROR_H
#define OTPD_V2_ERROR_H

#include "../base/rc.h"

/* What was asked: a verification sent, a code checked, or anything else. */
enum v2_op { V2_OP_ANY, V2_OP_SEND, V2_OP_CHECK };

/* What the refusing rule is keyed on: the phone (or its prefix), or
 * something else (the caller, the client's address, the device). */
enum v2_rule { V2_RULE_ANY, V2_RULE_PHONE, V2_RULE_OTHER };

/* One of Twilio's errors: its HTTP status, code and standard message;
 * sep joins the message and a detail ("Invalid parameter: To ..."). */
struct v2_error {
    unsigned status;
    int code;
    const char *message;
    const char *sep;
};

/* The error outcome o is, for op and a refusal by a rule of class rule;
 * 500 20500 for an outcome that is no error. */
const struct v2_error *v2_error_of(enum otp_outcome o, enum v2_op op, enum v2_rule rule);

/* Twilio's JSON for e: {code, message, more_info, status}, the message
 * followed by detail (NULL or "": none). malloc'd; NULL when out of memory. */
char *v2_error_text(const struct v2_error *e, const char *detail);

#endif
