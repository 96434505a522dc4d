/*
 * otp: the service's two operations, issue and verify (docs/architecture.md,
 * "A request's path"), plus cancel, message status, delivery reports, crash
 * recovery, readiness and the metrics text. It ties codes, limits, the
 * pacer and the ledger together; it knows nothing of HTTP.
 */
#ifndef OTPD_OTP_H
#define OTPD_OTP_H

#include <stddef.h>
#include <stdint.h>

#include "../admin/admin.h"
#include "../base/conf.h"
#include "../base/rc.h"
#include "../ledger/ledger.h"
#include "../limits/limits.h"
#include "../pacer/lanes.h"
#include "../pacer/pacer.h"
#include "code.h"
#include "idem.h"
#include "report.h"

struct otp;

/* The sections of the start-up config otp reads, each borrowed: the codes
 * (otp: length and attempts; ttl and template until otp_reload), the
 * rules' names, caps, currency and phone.types (limits), the callers for
 * per-caller caps (keys), the send rate for a full queue's Retry-After
 * (pacer) and the delivery reports' provider. */
struct otp_sections {
    const struct otp_conf *otp;
    const struct limits_conf *limits;
    const struct keys_conf *keys;
    const struct pacer_conf *pacer;
    const struct provider_conf *provider;
};

/* What the service is built from; all borrowed and outliving it. */
struct otp_deps {
    struct otp_sections cfg;
    const struct code_keys *keys;
    struct store *store;
    struct limits *limits;
    struct lanes *lanes; /* the providers, one pacer each, and their routes */
    struct ledger *ledger;
    struct admin *admin; /* blocks, matched before any Redis call */
    const char *version; /* the build's (otpd_build_info); NULL: "unknown" */
};

struct otp_answer;

/* An Idempotency-Key's part in one issue or verify (see idem.h): its
 * decision claims the key, and its answer is stored with its commit. */
struct otp_idem {
    const struct idem_claim *claim; /* idem_prepare's, after idem_begin said IDEM_NEW */
    /* The text a replay of answer a sends (the HTTP layer's), malloc'd;
     * NULL when out of memory. Called once the decision is final, just
     * before its commit stores the text. */
    char *(*pack)(void *ctx, const struct otp_answer *a);
    void *ctx;
};

/* The caller and the end user of one issue or verify. */
struct otp_req {
    const char *api_key;   /* the caller's configured name */
    const char *phone;     /* canonical E.164, from the caller's phone_parse */
    const char *device_id; /* NULL when absent */
    const char *client_ip; /* NULL when absent; checked here */
    const char *purpose;   /* NULL when absent: "default" */
    /* From the same phone_parse: the region ("IN", "001") and the number
     * type. A type outside phone.types is refused here before any rule. */
    char region[PHONE_REGION_MAX];
    enum phone_type type;
    const struct otp_idem *idem; /* NULL: no Idempotency-Key */
    /* Issue only: the message's locale (a key of otp.templates, or its
     * language) and Android's SMS Retriever hash; NULL when absent. */
    const char *locale;
    const char *app_hash;
    const char *name; /* a template's {name} (a Verify service's); NULL: "" */
    /* Issue only: rules the request brings (the Twilio surface's buckets),
     * decided with the config's in the same step; NULL when none. */
    const struct limits_extra *extra;
    size_t n_extra;
};

/* The answer to an issue or a verify. */
struct otp_answer {
    enum otp_outcome outcome;  /* its status, error code and title: otp_outcome_row */
    enum otp_rc rc;            /* the outcome's status code (the row's rc) */
    char id[CODE_ID_LEN + 1];  /* issue: the message id */
    char verification_id[CODE_ID_LEN + 1]; /* issue (202), verify (200 and a wrong code) and cancel (200) */
    int64_t expires_in_s;      /* issue */
    int64_t resend_after_s;    /* issue */
    int attempts_left;         /* verify: for invalid_code */
    int64_t retry_after_s;     /* for 429 and 503; 0 when none */
    char reason[CFG_NAME_MAX]; /* the refusing rule */
    struct limits_header header;
    char detail[160];          /* for people; no code, no secret */
    int cached;                /* 1: a refusal answered from the refusal cache, without Redis */
};

/* Digits of every code (otp.length). */
int otp_code_length(const struct otp *o);

/* The admin rows (the HTTP layer's /v1/admin routes), owned by the caller. */
struct admin *otp_admin(struct otp *o);

/* An admin change made through this instance (an unlock, a row removed):
 * its refusal cache forgets at once what the others forget on their next
 * refresh (docs/architecture.md, "The refusal cache"). */
void otp_admin_changed(struct otp *o);

/* Registers the idempotency scripts with d->store, so call it before the
 * store is shared between threads. NULL when out of memory. */
struct otp *otp_new(const struct otp_deps *d);
void otp_free(struct otp *o);

/* SIGHUP: c's ttl (otp.ttl) applies to codes issued from now on and its
 * template (otp.template) to messages rendered from now on (codes already
 * issued keep their expiry). Copies what it needs; c may be freed after. */
void otp_reload(struct otp *o, const struct otp_conf *c);

/* The Idempotency-Key state (docs/architecture.md, "A request's path"),
 * owned by o; the HTTP layer claims keys and stores answers through it. */
struct idem *otp_idem(struct otp *o);

/* What decides an issue without Redis, before its Idempotency-Key is
 * looked up: the number type, the countries, client_ip and the admin
 * blocks. Returns 1 with the refusal in out (recorded and counted; never
 * kept for a replay), else 0. */
int otp_issue_screen(struct otp *o, const struct otp_req *rq, struct otp_answer *out);

/* Decides one issue that passed otp_issue_screen; blocks for one Redis
 * call and one ledger commit. With rq->idem, an accepted issue claims the
 * key in the same step and its answer is stored with its release. Answers
 * OUT_IDEM_IN_USE (neither recorded nor counted; nothing taken, no SMS)
 * when the key turned out to be another request's, or its claim lapsed
 * before the release: the caller looks the key up again. */
void otp_issue(struct otp *o, const struct otp_req *rq, struct otp_answer *out);

/* otp_issue_screen for a verify, the guess's format included. */
int otp_verify_screen(struct otp *o, const struct otp_req *rq, const char *guess, struct otp_answer *out);

/* Decides one guess for rq's phone that passed otp_verify_screen
 * (device_id recorded); blocks for one Redis call, two with rq->idem (the
 * commit of the answer), with OUT_IDEM_IN_USE as for otp_issue. */
void otp_verify(struct otp *o, const struct otp_req *rq, const char *guess, struct otp_answer *out);

/* Ends rq's live verification for (phone, caller, purpose) and stops its
 * queued messages (they end 'failed', cancelled, and their unspent cost
 * goes back once). OTP_ENOTFOUND in out->rc when none is live. Blocks for
 * one Redis call. */
void otp_cancel(struct otp *o, const struct otp_req *rq, struct otp_answer *out);

/* The state, provider and attempts of message id if api_key issued it,
 * from Redis (any instance's message): OTP_OK, OTP_ENOTFOUND, or
 * OTP_ESTORE. */
enum otp_rc otp_status(struct otp *o, const char *api_key, const char *id, struct pacer_view *out);

/* Authenticates and applies one delivery report (see report.h); blocks
 * for one ledger commit when it may move a message. */
enum report_verdict otp_delivery(struct otp *o, const struct report_in *in);

/* Starts the pacer with this otp's renderer of message texts. (The queue
 * lives in Redis: a restart takes its own messages back from there.) */
enum otp_rc otp_start_pacer(struct otp *o, char *err);

/* 1 when Redis answers (through the breaker), the ledger's last
 * transaction committed and the send queue has room; else 0 with why. */
int otp_ready(struct otp *o, char *why, size_t cap);


/* The Prometheus text of every counter, malloc'd for the caller to free;
 * NULL when out of memory (the scrape fails whole, never served in part).
 * Blocks for one Redis call (the cost caps' headroom). */
char *otp_metrics(struct otp *o);

#endif
