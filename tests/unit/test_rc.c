/*
 * Unit tests of the outcome table (src/base/rc.c): each row sits at its
 * enum's index, its status is one the HTTP contract uses for its class
 * (2xx only for what succeeded), its error code and title are set and each
 * code names one outcome, and every outcome is given by some answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/rc.h"

static void test_rows_in_order_and_whole(void **state)
{
    int i, j;

    (void)state;
    for (i = 0; i < OUT_COUNT; i++) {
        const struct otp_outcome_row *r = otp_outcome_row((enum otp_outcome)i);
        if ((int)r->outcome != i)
            fail_msg("row %d holds outcome %d", i, (int)r->outcome);
        if (r->error == NULL || r->error[0] == '\0' || r->title == NULL || r->title[0] == '\0')
            fail_msg("row %d lacks its error code or title", i);
        if (r->ops == 0)
            fail_msg("%s: no answer gives it", r->error);
        if ((r->http_status < 300) != (r->rc == OTP_OK))
            fail_msg("%s: status %d with rc %s", r->error, r->http_status, otp_rc_str(r->rc));
        if (r->http_status < 200 || r->http_status > 599)
            fail_msg("%s: status %d", r->error, r->http_status);
        for (j = 0; j < i; j++)
            if (strcmp(otp_outcome_row((enum otp_outcome)j)->error, r->error) == 0)
                fail_msg("%s names two outcomes", r->error);
    }
}

/* The contract's statuses for a few codes (docs/openapi.yaml; docs/architecture.md, "HTTP"). */
static void test_contract_statuses(void **state)
{
    static const struct {
        enum otp_outcome o;
        int status;
        const char *error;
    } want[] = {
        {OUT_ACCEPTED, 202, "accepted"},         {OUT_INVALID_PHONE, 400, "invalid_phone"},
        {OUT_UNAUTHORIZED, 401, "unauthorized"}, {OUT_COUNTRY_BLOCKED, 403, "country_blocked"},
        {OUT_NO_ACTIVE_CODE, 404, "no_active_code"}, {OUT_PAYLOAD_TOO_LARGE, 413, "payload_too_large"},
        {OUT_UNSUPPORTED_MEDIA, 415, "unsupported_media_type"}, {OUT_IDEM_REUSED, 422, "idempotency_key_reused"},
        {OUT_INVALID_CODE, 422, "invalid_code"}, {OUT_RATE_LIMITED, 429, "rate_limited"},
        {OUT_LOCKED, 429, "locked"},             {OUT_SUSPECTED_PUMPING, 429, "suspected_pumping"},
        {OUT_QUEUE_FULL, 503, "queue_full"},     {OUT_STORE_UNAVAILABLE, 503, "store_unavailable"},
        {OUT_COST_CAP, 503, "cost_cap"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct otp_outcome_row *r = otp_outcome_row(want[i].o);
        if (r->http_status != want[i].status || strcmp(r->error, want[i].error) != 0)
            fail_msg("%s: %d %s, want %d", want[i].error, r->http_status, r->error, want[i].status);
    }
    assert_int_equal(otp_outcome_row(OUT_COUNT)->http_status, 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_in_order_and_whole),
        cmocka_unit_test(test_contract_statuses),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
