/*
 * report: delivery reports (docs/architecture.md, "Providers"). A report URL carries
 * the message id, an expiry and a tag that binds both to the provider it
 * was given to, so a URL is good for one message, one provider and a
 * limited time. Twilio also signs each callback with the account's auth
 * token (X-Twilio-Signature), which is checked too. Kannel fills in the
 * report's type (its %d) only when it calls, so nothing signs the type:
 * the URL also carries the dlr-mask Kannel was given, under the tag, and a
 * type that mask did not ask for is refused; a forged type the mask allows
 * can only end that one message (docs/providers.md, "Who can forge a
 * Kannel report"). delivered, failed and expired are final: a report that
 * comes after one changes nothing and is counted apart from the reports
 * that moved a message.
 */
#ifndef OTPD_REPORT_H
#define OTPD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/conf.h"
#include "../base/rc.h"
#include "../ledger/ledger.h"
#include "../pacer/lanes.h"
#include "../pacer/pacer.h"
#include "code.h"

struct report;
struct metrics_text;

/* The route a report came by: the provider it claims to be from. */
enum report_via { REPORT_KANNEL, REPORT_TWILIO };

/* What became of a report; each has one row in report_row's table. */
enum report_verdict {
    REPORT_RECORDED,   /* the message moved to delivered or failed */
    REPORT_IGNORED,    /* the message was final already (or not in this ledger): nothing changed */
    REPORT_PASSING,    /* an intermediate stage (buffered, queued, sent): nothing to record */
    REPORT_UNKNOWN,    /* no such message: a wrong id or tag, or a tag given to another provider */
    REPORT_EXPIRED,    /* a genuine tag past its expiry */
    REPORT_BAD_STATUS, /* Kannel: a genuine tag, but a status that is not one type of the mask it binds */
    REPORT_FORBIDDEN,  /* Twilio: X-Twilio-Signature missing or wrong, or no auth token to check it */
    REPORT_UNRECORDED, /* Redis could not record it: the provider should send it again */
    REPORT_VERDICTS
};

/* The answer to a verdict. */
struct report_row {
    enum otp_outcome outcome; /* its status, code and title (rc.c); OUT_COUNT for a 200 */
    const char *detail; /* for people */
    const char *label;  /* otpd_delivery_reports_refused_total's reason; NULL when not a refusal */
};
const struct report_row *report_row(enum report_verdict v);

/* One report as it arrived. Strings may be NULL when absent. */
struct report_in {
    enum report_via via;
    const char *id, *exp, *tag; /* from the URL's query */
    const char *mask, *status;  /* Kannel: the query's m (the dlr-mask, under the tag) and status (its %d) */
    const char *form;           /* Twilio: the whole form body, NUL-terminated */
    const char *signature;      /* Twilio: X-Twilio-Signature */
    int outcome;                /* Twilio: 1 delivered, 0 failed, -1 an intermediate stage (Kannel: status) */
    const char *detail;         /* Twilio, for the ledger: "twilio undelivered" */
};

/* All borrowed; c is the start-up config's provider section (type,
 * callback URL, auth token, callback_ttl). NULL when out of memory. */
struct report *report_new(const struct provider_conf *c, const struct code_keys *k, struct ledger *l, struct lanes *p);
void report_free(struct report *r);

/* Writes the query of message id's report URL, "id=..&exp=..&tag=.." (for
 * Kannel "id=..&exp=..&m=..&tag=..", m its dlr_mask), into out (cap
 * bytes), expiring callback_ttl after now_ms. OTP_EINVAL when it does not
 * fit. */
enum otp_rc report_query(const struct report *r, const char *id, int64_t now_ms, char *out, size_t cap);

/* Authenticates and applies one report; blocks for one ledger commit when
 * it may move a message. Any thread. */
enum report_verdict report_handle(struct report *r, const struct report_in *in);

/* Appends the Prometheus text of the report counters to t. */
void report_metrics(struct report *r, struct metrics_text *t);

#endif
