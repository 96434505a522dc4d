/*
 * http_probe: the routes a load balancer and a scraper call, without a
 * key (on listen_internal alone when it is set): /healthz (the process
 * answers), /readyz (Redis, the ledger and the queue are ready) and
 * /metrics (otp's Prometheus text, then this layer's own). A probe every
 * few seconds, a scrape every few tens.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../base/metrics.h"
#include "http_int.h"
#include "tls.h"

/* GET /healthz. */
enum MHD_Result http_health(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    (void)h, (void)rq;
    return http_json(con, 200, json_pack("{s:s}", "status", "ok"), NULL);
}

/* GET /readyz: 503 with the reason when not ready. */
enum MHD_Result http_ready(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char why[OTP_ERR_LEN + 32];
    int ready = otp_ready(h->otp, why, sizeof(why));

    /* Its log line says what a 503 here is, not "ok". */
    if (!ready)
        snprintf(rq->outcome, sizeof(rq->outcome), "not_ready");
    return http_json(con, ready ? 200 : 503,
                     json_pack("{s:s, s:s}", "status", ready ? "ready" : "not_ready", "detail", why), NULL);
}

/* The served certificate's expiry, when HTTPS is on: what an alert on
 * renewal watches. */
static void http_metrics_tls(struct http *h, struct metrics_text *t)
{
    struct tls_info ti;

    if (h->tls == NULL)
        return;
    tls_info(h->tls, &ti);
    metrics_head(t, "otpd_tls_certificate_expiry_timestamp_seconds", "gauge",
                 "When the certificate HTTPS serves stops being valid (Unix time); SIGHUP loads a renewed "
                 "one.");
    metrics_i64(t, "otpd_tls_certificate_expiry_timestamp_seconds", ti.not_after_s);
}

/* otp's decisions answered on /v2 (each pair that can occur, 0 until it
 * happens): otpd_requests_total counts every API's, these the Twilio
 * surface's alone. */
static void http_metrics_v2(struct http *h, struct metrics_text *t)
{
    static const struct {
        const char *name;
        unsigned bit; /* the outcomes' OUT_OP_* */
    } ops[HTTP_V2_OPS] = {{"issue", OUT_OP_ISSUE}, {"verify", OUT_OP_VERIFY}, {"cancel", OUT_OP_CANCEL}};
    int op, i;

    metrics_head(t, "otpd_api_requests_total", "counter",
                 "Decisions answered on an API other than /v1, by API, operation and outcome (api=\"twilio\": the "
                 "Twilio Verify surface, /v2).");
    for (op = 0; op < HTTP_V2_OPS; op++)
        for (i = 0; i < OUT_COUNT; i++)
            if (otp_outcome_row((enum otp_outcome)i)->ops & ops[op].bit)
                metrics_u64(t, "otpd_api_requests_total", __atomic_load_n(&h->v2_decided[op][i], __ATOMIC_RELAXED),
                            "api", "twilio", "op", ops[op].name, "decision",
                            otp_outcome_row((enum otp_outcome)i)->error);
}

/* The Prometheus text of this layer's own problems, each outcome it can
 * answer shown (0 until it happens); malloc'd, NULL when out of memory. */
static char *http_metrics_text(struct http *h)
{
    struct metrics_text t = {0};
    char status[8];
    int i;

    metrics_head(&t, "otpd_http_refusals_total", "counter",
                 "Problems the HTTP layer answered itself, before any decision (authentication, routing, "
                 "framing, bodies, Idempotency-Key, admin calls).");
    for (i = 0; i < OUT_COUNT; i++) {
        const struct otp_outcome_row *row = otp_outcome_row((enum otp_outcome)i);
        if (!(row->ops & OUT_OP_HTTP))
            continue;
        snprintf(status, sizeof(status), "%d", row->http_status);
        metrics_u64(&t, "otpd_http_refusals_total", __atomic_load_n(&h->problems[i], __ATOMIC_RELAXED),
                    "status", status, "error", row->error);
    }
    http_metrics_v2(h, &t);
    http_metrics_tls(h, &t);
    return metrics_text_take(&t);
}

/* GET /metrics: otp's text, then this layer's. */
enum MHD_Result http_metrics(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char *otp = otp_metrics(h->otp), *mine = http_metrics_text(h), *text = NULL;

    (void)rq;
    if (otp != NULL && mine != NULL && asprintf(&text, "%s%s", otp, mine) < 0)
        text = NULL;
    free(otp);
    free(mine);
    return http_reply(con, 200, "text/plain; version=0.0.4", text, NULL, NULL);
}
