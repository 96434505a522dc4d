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
};

/* Returns a static lower-case name such as "store_unavailable". */
const char *otp_rc_str(enum otp_rc rc);

#endif
