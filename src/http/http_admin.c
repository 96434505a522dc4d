/*
 * http_admin: the /v1/admin routes (docs/architecture.md, "HTTP"), for
 * admin keys only (the route table checks the key). POST adds (201 {id,
 * expires_at}), GET lists ({"items": [...]}), DELETE /{id} removes (204,
 * or 404 when no such live row), POST unlock clears wrong-guess locks (200
 * {"unlocked": n}). Times are RFC 3339 UTC. Rare calls, each blocking on
 * Redis and the ledger (admin.h).
 */
#include <stdio.h>
#include <string.h>

#include "../base/timestamp.h"
#include "http_int.h"

/* An admin call's refusal for rc (never OTP_OK) with admin's detail: 400,
 * 503 for a store failure (nothing changed or, for a change whose answer
 * was lost, GET tells), else 500. */
static enum MHD_Result http_admin_refuse(struct http *h, struct MHD_Connection *con, enum otp_rc rc,
                                         const char *detail)
{
    struct otp_answer a = {0};

    if (rc == OTP_EINVAL)
        return http_problem(h, con, OUT_INVALID_REQUEST, detail, NULL, NULL);
    if (rc == OTP_ESTORE) {
        a.rc = OTP_ESTORE;
        a.retry_after_s = 1;
        return http_problem(h, con, OUT_STORE_UNAVAILABLE, "the store is unavailable", &a, NULL);
    }
    return http_problem(h, con, OUT_INTERNAL, "out of memory", NULL, NULL);
}

/* GET /v1/admin/overrides, /v1/admin/blocks. */
enum MHD_Result http_admin_list(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char detail[OTP_ERR_LEN] = "", *text = NULL;
    enum otp_rc rc;

    if ((rc = admin_list(otp_admin(h->otp), (enum admin_kind)rq->route->arg, &text, detail)) == OTP_OK)
        return http_reply(con, 200, "application/json", text, NULL, NULL);
    return http_admin_refuse(h, con, rc, detail);
}

/* POST /v1/admin/overrides, /v1/admin/blocks. */
enum MHD_Result http_admin_add(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char detail[OTP_ERR_LEN] = "", id[ADMIN_ID_LEN + 1], ts[TIMESTAMP_LEN];
    int64_t expires_ms = 0;
    enum otp_rc rc;

    rc = admin_add(otp_admin(h->otp), (enum admin_kind)rq->route->arg, rq->caller, rq->body, rq->len, id,
                   &expires_ms, detail, sizeof(detail));
    if (rc == OTP_OK) {
        timestamp_format(expires_ms, ts, sizeof(ts));
        return http_json(con, 201, json_pack("{s:s, s:s}", "id", id, "expires_at", ts), NULL);
    }
    if (rc == OTP_EFULL)
        return http_problem(h, con, OUT_TOO_MANY_ROWS, detail, NULL, NULL);
    return http_admin_refuse(h, con, rc, detail);
}

/* DELETE /v1/admin/overrides/{id}, /v1/admin/blocks/{id}. */
enum MHD_Result http_admin_remove(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    const char *rid = strrchr(rq->url, '/') + 1;
    char detail[OTP_ERR_LEN] = "";
    enum otp_rc rc;
    size_t i;

    for (i = 0; rid[i] && ((rid[i] >= '0' && rid[i] <= '9') || (rid[i] >= 'a' && rid[i] <= 'f')); i++)
        ;
    if (i != ADMIN_ID_LEN || rid[i] != '\0')
        return http_problem(h, con, OUT_NOT_FOUND, "no such live row", NULL, NULL);
    rc = admin_remove(otp_admin(h->otp), (enum admin_kind)rq->route->arg, rq->caller, rid, detail);
    if (rc == OTP_OK) {
        otp_admin_changed(h->otp);
        return http_no_content(con);
    }
    if (rc == OTP_ENOTFOUND)
        return http_problem(h, con, OUT_NOT_FOUND, "no such live row", NULL, NULL);
    return http_admin_refuse(h, con, rc, detail);
}

/* POST /v1/admin/unlock {phone, api_key?}. */
enum MHD_Result http_admin_unlock(struct http *h, struct MHD_Connection *con, struct http_req *rq)
{
    char detail[OTP_ERR_LEN] = "";
    enum otp_rc rc;
    int n = 0;

    rc = admin_unlock(otp_admin(h->otp), rq->caller, rq->body, rq->len, &n, detail, sizeof(detail));
    if (rc == OTP_OK) {
        otp_admin_changed(h->otp);
        return http_json(con, 200, json_pack("{s:i}", "unlocked", n), NULL);
    }
    return http_admin_refuse(h, con, rc, detail);
}
