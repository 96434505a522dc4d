/*
 * v2_error: otpd's outcomes in Twilio's words. One table: an outcome, for
 * a send or a check, refused by a rule on the phone or on something else,
 * is one of Twilio's error codes with its HTTP status. Pure; its unit test
 * walks every outcome.
 */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "v2_error.h"

/* The first row that matches wins: op V2_OP_ANY and rule V2_RULE_ANY
 * match everything. */
static const struct v2_error_row {
    enum otp_outcome outcome;
    enum v2_op op;
    enum v2_rule rule;
    struct v2_error e;
} v2_rows[] = {
    {OUT_INVALID_REQUEST, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_INVALID_PHONE, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_PAYLOAD_TOO_LARGE, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_UNSUPPORTED_MEDIA, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_INVALID_CODE, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_IDEM_REUSED, V2_OP_ANY, V2_RULE_ANY, {400, 60200, "Invalid parameter", ": "}},
    {OUT_UNAUTHORIZED, V2_OP_ANY, V2_RULE_ANY, {401, 20003, "Authenticate", ". "}},
    {OUT_FORBIDDEN, V2_OP_ANY, V2_RULE_ANY, {403, 20403, "Forbidden", ". "}},
    {OUT_INVALID_SIGNATURE, V2_OP_ANY, V2_RULE_ANY, {403, 20403, "Forbidden", ". "}},
    {OUT_NUMBER_TYPE, V2_OP_ANY, V2_RULE_ANY, {400, 60205, "SMS is not supported by this phone number's type", ". "}},
    {OUT_BLOCKED, V2_OP_ANY, V2_RULE_ANY, {403, 60410, "Verification delivery attempt blocked", ". "}},
    {OUT_SUSPECTED_PUMPING, V2_OP_ANY, V2_RULE_ANY, {403, 60410, "Verification delivery attempt blocked", ". "}},
    {OUT_COUNTRY_BLOCKED, V2_OP_ANY, V2_RULE_ANY,
     {403, 60605, "Verification delivery attempt blocked: the country is not allowed", ". "}},
    {OUT_NO_ROUTE, V2_OP_ANY, V2_RULE_ANY,
     {403, 60605, "Verification delivery attempt blocked: no route serves this destination", ". "}},
    {OUT_NOT_FOUND, V2_OP_ANY, V2_RULE_ANY, {404, 20404, "The requested resource was not found", ": "}},
    {OUT_NO_ACTIVE_CODE, V2_OP_ANY, V2_RULE_ANY, {404, 20404, "The requested resource was not found", ": "}},
    {OUT_REPORT_EXPIRED, V2_OP_ANY, V2_RULE_ANY, {404, 20404, "The requested resource was not found", ": "}},
    {OUT_METHOD_NOT_ALLOWED, V2_OP_ANY, V2_RULE_ANY, {405, 20004, "Method not allowed", ". "}},
    {OUT_IDEM_IN_USE, V2_OP_ANY, V2_RULE_ANY, {429, 60212, "Too many concurrent requests for phone number", ". "}},
    {OUT_TOO_MANY_ROWS, V2_OP_ANY, V2_RULE_ANY, {429, 20429, "Too many requests", ". "}},
    {OUT_LOCKED, V2_OP_ANY, V2_RULE_ANY, {429, 60202, "Max check attempts reached", ". "}},
    {OUT_RATE_LIMITED, V2_OP_SEND, V2_RULE_PHONE, {429, 60203, "Max send attempts reached", ". "}},
    {OUT_RATE_LIMITED, V2_OP_CHECK, V2_RULE_PHONE, {429, 60202, "Max check attempts reached", ". "}},
    {OUT_RATE_LIMITED, V2_OP_ANY, V2_RULE_ANY, {429, 20429, "Too many requests", ". "}},
    {OUT_INTERNAL, V2_OP_ANY, V2_RULE_ANY, {500, 20500, "Internal server error", ". "}},
    {OUT_QUEUE_FULL, V2_OP_ANY, V2_RULE_ANY, {503, 20503, "Service unavailable", ". "}},
    {OUT_STORE_UNAVAILABLE, V2_OP_ANY, V2_RULE_ANY, {503, 20503, "Service unavailable", ". "}},
    {OUT_COST_CAP, V2_OP_ANY, V2_RULE_ANY, {503, 20503, "Service unavailable", ". "}},
    {OUT_LEDGER_UNAVAILABLE, V2_OP_ANY, V2_RULE_ANY, {503, 20503, "Service unavailable", ". "}},
};

#define V2_N_ROWS (sizeof(v2_rows) / sizeof(v2_rows[0]))

const struct v2_error *v2_error_of(enum otp_outcome o, enum v2_op op, enum v2_rule rule)
{
    static const struct v2_error internal = {500, 20500, "Internal server error", ". "};
    size_t i;

    for (i = 0; i < V2_N_ROWS; i++) {
        const struct v2_error_row *r = &v2_rows[i];
        if (r->outcome == o && (r->op == V2_OP_ANY || r->op == op) && (r->rule == V2_RULE_ANY || r->rule == rule))
            return &r->e;
    }
    return &internal;
}

char *v2_error_text(const struct v2_error *e, const char *detail)
{
    char message[512], more[64];
    json_t *j;
    char *text;

    snprintf(message, sizeof(message), "%s%s%s", e->message, detail && detail[0] ? e->sep : "",
             detail ? detail : "");
    snprintf(more, sizeof(more), "https://www.twilio.com/docs/errors/%d", e->code);
    j = json_pack("{s:i, s:s, s:s, s:i}", "code", e->code, "message", message, "more_info", more, "status",
                  (int)e->status);
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}
