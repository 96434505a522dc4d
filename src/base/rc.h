/*
 * rc: the one status enum of otpd. Every module returns an enum otp_rc and
 * passes results through out-parameters; detail goes into a caller's buffer
 * of OTP_ERR_LEN bytes.
 */
#ifndef OTPD_RC_H
#define OTPD_RC_H

#define OTP_ERR_LEN 256

enum otp_rc {
    OTP_OK = 0,
    OTP_EINVAL,    /* bad input: the caller's fault */
    OTP_ENOMEM,    /* an allocation failed */
    OTP_ESTORE,    /* Redis slow, gone or broken: fail closed */
    OTP_ELIMITED,  /* a limit refused */
    OTP_ELOCKED,   /* the phone is locked by the wrong-guess cap */
    OTP_ECOST,     /* the global cost cap refused */
    OTP_EFULL,     /* the pacer queue is full */
    OTP_ENOTFOUND, /* no such thing (or not yours) */
    OTP_EBADCODE,  /* a wrong guess */
    OTP_EIO,       /* ledger, file or system error */
    OTP_EPROVIDER, /* the SMS provider refused or failed */
    OTP_ETYPE,     /* the number's type is not one otpd serves (phone.types) */
    OTP_EBLOCKED,  /* an admin block matches the request (403 blocked) */
    OTP_ECOUNTRY,  /* countries.allow/deny refuses the phone's region (403 country_blocked) */
    OTP_EPUMPING,  /* the pumping guard holds the phone's prefix (429 suspected_pumping) */
    OTP_EFORBIDDEN, /* the API key's role may not use this route (403) */
    OTP_ENOROUTE,  /* no route of the providers covers the phone (403 no_route) */
};

/* Returns a static lower-case name such as "store_unavailable". */
const char *otp_rc_str(enum otp_rc rc);

/*
 * The one vocabulary of answers (docs/architecture.md, "HTTP"): every
 * decision otp makes and every problem the HTTP layer answers itself is one
 * of these, and its HTTP status, `error` code, title and metric label come
 * from its row in rc.c's table, and from nowhere else.
 */
enum otp_outcome {
    OUT_ACCEPTED = 0,          /* 202: an issue queued its message */
    OUT_VERIFIED,              /* 200 */
    OUT_CANCELLED,             /* 200 */
    OUT_INVALID_REQUEST,       /* 400 */
    OUT_INVALID_PHONE,         /* 400 */
    OUT_UNAUTHORIZED,          /* 401 */
    OUT_FORBIDDEN,             /* 403: the key's role may not use the route */
    OUT_INVALID_SIGNATURE,     /* 403: a delivery report's signature */
    OUT_NUMBER_TYPE,           /* 403 */
    OUT_BLOCKED,               /* 403 */
    OUT_COUNTRY_BLOCKED,       /* 403 */
    OUT_NO_ROUTE,              /* 403: no route covers the destination */
    OUT_NOT_FOUND,             /* 404: no such route, message or admin row */
    OUT_NO_ACTIVE_CODE,        /* 404 */
    OUT_METHOD_NOT_ALLOWED,    /* 405 */
    OUT_IDEM_IN_USE,           /* 409 */
    OUT_TOO_MANY_ROWS,         /* 409: admin rows at their cap */
    OUT_REPORT_EXPIRED,        /* 410: a delivery report's URL */
    OUT_PAYLOAD_TOO_LARGE,     /* 413 */
    OUT_UNSUPPORTED_MEDIA,     /* 415 */
    OUT_INVALID_CODE,          /* 422 */
    OUT_IDEM_REUSED,           /* 422 */
    OUT_RATE_LIMITED,          /* 429 */
    OUT_LOCKED,                /* 429 */
    OUT_SUSPECTED_PUMPING,     /* 429 */
    OUT_INTERNAL,              /* 500: out of memory */
    OUT_QUEUE_FULL,            /* 503 */
    OUT_STORE_UNAVAILABLE,     /* 503 */
    OUT_COST_CAP,              /* 503 */
    OUT_LEDGER_UNAVAILABLE,    /* 503 */
    OUT_COUNT
};

/* Which answers can give an outcome (struct otp_outcome_row.ops): a metric
 * declares only the pairs that can occur. */
#define OUT_OP_ISSUE 1u
#define OUT_OP_VERIFY 2u
#define OUT_OP_CANCEL 4u
#define OUT_OP_HTTP 8u /* answered by the HTTP layer before any decision */
#define OUT_OP_REPORT 16u /* a delivery report's refusal (counted by report.c) */

struct otp_outcome_row {
    enum otp_outcome outcome;
    enum otp_rc rc;    /* the status code the modules pass around */
    int http_status;   /* 200 to 599 */
    const char *error; /* the contract's machine code; the ledger's decision; the metric label */
    const char *title; /* RFC 9457 title: one per problem type */
    unsigned ops;      /* OUT_OP_* */
};

/* The row of outcome o (a static table); the OUT_INTERNAL row for a value
 * outside the enum. */
const struct otp_outcome_row *otp_outcome_row(enum otp_outcome o);


#endif
