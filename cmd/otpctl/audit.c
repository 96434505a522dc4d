/*
 * otpctl check and otpctl audit: the commands that read a config. check
 * validates one as otpd --check does; audit prints the newest rows of one
 * ledger table as JSON lines, from the ledger a config names or from --db.
 * Neither reads a secret: check, like otpd --check, validates the file (the
 * secrets' variables must be named; their values are the running service's
 * business), and audit only reads the ledger, read-only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "../../src/base/config.h"
#include "../../src/ledger/history.h"
#include "otpctl.h"

struct audit_opts {
    const char *config, *db, *table, *phone;
    long long rows;
};

#define A(field) offsetof(struct audit_opts, field)

static const struct flag check_flags[] = {
    {"config", 'c', FLAG_STR, 1, A(config), "FILE", "the config to check", 0, 0},
};

static const struct flag_cmd check_cmd = {
    .name = "otpctl check",
    .flags = FLAGS_OF(check_flags),
    .notes = "  exit 0 when the config is valid, 78 (EX_CONFIG) with its errors when not;\n"
             "  the secrets' variables are not read\n",
};

static const struct flag audit_flags[] = {
    {"config", 'c', FLAG_STR, 0, A(config), "FILE", "read the ledger this config names", 0, 0},
    {"db", 0, FLAG_STR, 0, A(db), "FILE", "read this ledger (instead of -c)", 0, 0},
    {"table", 't', FLAG_STR, 0, A(table), "TABLE",
     "requests (default), messages, sends, verifications, message_events or admin_actions", 0, 0},
    {"rows", 'n', FLAG_INT, 0, A(rows), "ROWS", "the newest ROWS rows, newest first (default 20)", 1, 100000},
    {"phone", 'p', FLAG_STR, 0, A(phone), "PHONE", "only this phone's rows", 0, 0},
};

static const struct flag_cmd audit_cmd = {
    .name = "otpctl audit",
    .synopsis = "-c FILE|--db FILE [options]",
    .flags = FLAGS_OF(audit_flags),
    .notes = "  prints JSON lines; reads no secret and opens the ledger read-only\n",
};

void otpctl_check_synopsis(FILE *f)
{
    flags_synopsis(&check_cmd, "  ", f);
}

void otpctl_audit_synopsis(FILE *f)
{
    flags_synopsis(&audit_cmd, "  ", f);
}

static void print_row(void *ctx, int ncols, const char *const *names, const char *const *values)
{
    json_t *row = json_object();
    int i;

    (void)ctx;
    for (i = 0; i < ncols; i++)
        json_object_set_new(row, names[i], values[i] ? json_string(values[i]) : json_null());
    otpctl_print_json(row, JSON_COMPACT | JSON_PRESERVE_ORDER, stdout);
    json_decref(row);
}

/* The sysexits code of a history error. */
static int audit_exit(enum otp_rc rc)
{
    switch (rc) {
    case OTP_ENOTFOUND:
        return EX_NOINPUT;
    case OTP_EINVAL:
        return EX_DATAERR;
    case OTP_ENOMEM:
        return EX_OSERR;
    default:
        return EX_IOERR;
    }
}

/* Loads the config at path without reading a secret, or says why not. */
static struct config *audit_load(const char *path)
{
    struct config *c;
    char *errors = NULL;

    config_set_secrets(0);
    if ((c = config_load(path, &errors)) == NULL)
        fputs(errors ? errors : "", stderr);
    free(errors);
    return c;
}

int otpctl_check(int argc, char **argv)
{
    struct audit_opts o = {0};
    struct config *c;
    int ex;

    if ((ex = flags_parse(&check_cmd, argc, argv, &o)) != FLAGS_GO)
        return ex;
    if ((c = audit_load(o.config)) == NULL)
        return EX_CONFIG;
    printf("%s: ok\n", o.config);
    config_free(c);
    return EX_OK;
}

int otpctl_audit(int argc, char **argv)
{
    struct audit_opts o = {.table = "requests", .rows = 20};
    struct config *c = NULL;
    char err[OTP_ERR_LEN];
    enum otp_rc rc;
    int ex;

    if ((ex = flags_parse(&audit_cmd, argc, argv, &o)) != FLAGS_GO)
        return ex;
    if ((o.config == NULL) == (o.db == NULL))
        return flags_usage_error(&audit_cmd, "exactly one of -c and --db is needed");
    if (o.config != NULL && (c = audit_load(o.config)) == NULL)
        return EX_CONFIG;
    rc = history_recent(o.db ? o.db : c->ledger.path, o.table, o.phone, (int)o.rows, print_row, NULL, err);
    if (rc != OTP_OK)
        fprintf(stderr, "otpctl audit: %s\n", err);
    config_free(c);
    return rc == OTP_OK ? EX_OK : audit_exit(rc);
}
