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
    case OTP_ENOROUTE: return "no_route";
    }
    return "unknown";
}

/* The answers' one table, in enum order (checked by otp_outcome_row's
 * callers through the row's own outcome field). */
static const struct otp_outcome_row outcome_rows[OUT_COUNT] = {
    {OUT_ACCEPTED, OTP_OK, 202, "accepted", "Accepted", OUT_OP_ISSUE},
    {OUT_VERIFIED, OTP_OK, 200, "verified", "Verified", OUT_OP_VERIFY},
    {OUT_CANCELLED, OTP_OK, 200, "cancelled", "Cancelled", OUT_OP_CANCEL},
    {OUT_INVALID_REQUEST, OTP_EINVAL, 400, "invalid_request", "Invalid request",
     OUT_OP_ISSUE | OUT_OP_VERIFY | OUT_OP_HTTP},
    {OUT_INVALID_PHONE, OTP_EINVAL, 400, "invalid_phone", "Invalid phone number", OUT_OP_HTTP},
    {OUT_UNAUTHORIZED, OTP_EINVAL, 401, "unauthorized", "Unauthorized", OUT_OP_HTTP},
    {OUT_FORBIDDEN, OTP_EFORBIDDEN, 403, "forbidden", "Forbidden", OUT_OP_HTTP},
    {OUT_INVALID_SIGNATURE, OTP_EFORBIDDEN, 403, "invalid_signature", "Invalid signature", OUT_OP_REPORT},
    {OUT_NUMBER_TYPE, OTP_ETYPE, 403, "number_type", "Number type not served", OUT_OP_ISSUE | OUT_OP_VERIFY},
    {OUT_BLOCKED, OTP_EBLOCKED, 403, "blocked", "Blocked by an operator", OUT_OP_ISSUE | OUT_OP_VERIFY},
    {OUT_COUNTRY_BLOCKED, OTP_ECOUNTRY, 403, "country_blocked", "Country not served", OUT_OP_ISSUE},
    {OUT_NO_ROUTE, OTP_ENOROUTE, 403, "no_route", "No route to the destination", OUT_OP_ISSUE},
    {OUT_NOT_FOUND, OTP_ENOTFOUND, 404, "not_found", "Not found", OUT_OP_HTTP | OUT_OP_REPORT},
    {OUT_NO_ACTIVE_CODE, OTP_ENOTFOUND, 404, "no_active_code", "No active code", OUT_OP_VERIFY | OUT_OP_CANCEL},
    {OUT_METHOD_NOT_ALLOWED, OTP_EINVAL, 405, "method_not_allowed", "Method not allowed", OUT_OP_HTTP},
    {OUT_IDEM_IN_USE, OTP_EINVAL, 409, "idempotency_key_in_use", "Idempotency-Key in use", OUT_OP_HTTP},
    {OUT_TOO_MANY_ROWS, OTP_EFULL, 409, "too_many_rows", "Too many admin rows", OUT_OP_HTTP},
    {OUT_REPORT_EXPIRED, OTP_ENOTFOUND, 410, "report_expired", "Report URL expired", OUT_OP_REPORT},
    {OUT_PAYLOAD_TOO_LARGE, OTP_EINVAL, 413, "payload_too_large", "Content too large", OUT_OP_HTTP},
    {OUT_UNSUPPORTED_MEDIA, OTP_EINVAL, 415, "unsupported_media_type", "Unsupported media type", OUT_OP_HTTP},
    {OUT_INVALID_CODE, OTP_EBADCODE, 422, "invalid_code", "Invalid code", OUT_OP_VERIFY},
    {OUT_IDEM_REUSED, OTP_EINVAL, 422, "idempotency_key_reused", "Idempotency-Key reused", OUT_OP_HTTP},
    {OUT_RATE_LIMITED, OTP_ELIMITED, 429, "rate_limited", "Rate limited", OUT_OP_ISSUE | OUT_OP_VERIFY},
    {OUT_LOCKED, OTP_ELOCKED, 429, "locked", "Locked after wrong codes", OUT_OP_ISSUE | OUT_OP_VERIFY},
    {OUT_SUSPECTED_PUMPING, OTP_EPUMPING, 429, "suspected_pumping", "Suspected SMS pumping", OUT_OP_ISSUE},
    {OUT_INTERNAL, OTP_ENOMEM, 500, "internal_error", "Internal error", OUT_OP_HTTP},
    {OUT_QUEUE_FULL, OTP_EFULL, 503, "queue_full", "Send queue full", OUT_OP_ISSUE},
    {OUT_STORE_UNAVAILABLE, OTP_ESTORE, 503, "store_unavailable", "Store unavailable",
     OUT_OP_ISSUE | OUT_OP_VERIFY | OUT_OP_CANCEL | OUT_OP_HTTP | OUT_OP_REPORT},
    {OUT_COST_CAP, OTP_ECOST, 503, "cost_cap", "SMS budget spent", OUT_OP_ISSUE},
    {OUT_LEDGER_UNAVAILABLE, OTP_EIO, 503, "ledger_unavailable", "Ledger unavailable", OUT_OP_ISSUE},
};

const struct otp_outcome_row *otp_outcome_row(enum otp_outcome o)
{
    return (unsigned)o < OUT_COUNT ? &outcome_rows[o] : &outcome_rows[OUT_INTERNAL];
}
