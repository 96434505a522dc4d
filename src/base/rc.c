/* rc: names of the status codes, for logs and the ledger. */
#include "rc.h"

const char *otp_rc_str(enum otp_rc rc)
{
    switch (rc) {
    case OTP_OK: return "ok";
    case OTP_EINVAL: return "invalid_request";
    case OTP_ENOMEM: return "out_of_memory";
    case OTP_ESTORE: return "store_unavailable";
    case OTP_ELIMITED: return "rate_limited";
    case OTP_ELOCKED: return "locked";
    case OTP_ECOST: return "cost_cap";
    case OTP_EFULL: return "queue_full";
    case OTP_ENOTFOUND: return "not_found";
    case OTP_EBADCODE: return "invalid_code";
    case OTP_EIO: return "io_error";
    case OTP_EPROVIDER: return "provider_error";
    case OTP_ETYPE: return "number_type";
    case OTP_EBLOCKED: return "blocked";
    case OTP_ECOUNTRY: return "country_blocked";
    case OTP_EPUMPING: return "suspected_pumping";
    case OTP_EFORBIDDEN: return "forbidden";
    }
    return "unknown";
}
