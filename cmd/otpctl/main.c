/*
 * otpctl: the operator's CLI. `check` validates a config like otpd --check;
 * `audit` prints the newest rows of a ledger table as JSON lines; `ledger`
 * (ledger.c) prints one history merged from several ledgers; `verify`
 * (verify.c) checks a ledger's hash chain; `stats` (stats.c) sums a period.
 * Those that read a ledger need no secret and open it read-only. None prints a
 * code: the ledger holds none. Exit codes are sysexits'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "../../src/base/config.h"
#include "../../src/ledger/history.h"
#include "otpctl.h"

static void usage(void)
{
    fprintf(stderr, "usage: otpctl check -c FILE\n"
                    "       otpctl audit -c FILE|--db FILE [-t requests|messages|sends|verifications|message_events|\n"
                    "                    admin_actions] [-n ROWS] [-p PHONE]   (no secret needed; read-only)\n");
    otpctl_ledger_usage(stderr);
    otpctl_verify_usage(stderr);
    otpctl_stats_usage(stderr);
    otpctl_simulate_usage(stderr);
    otpctl_admin_usage(stderr);
}

int otpctl_print_json(const json_t *j, size_t flags, FILE *f)
{
    char *text = json_dumps(j, flags);
    const unsigned char *p;

    if (text == NULL)
        return -1;
    for (p = (const unsigned char *)text; *p; p++) {
        if (*p == 0x7f) {
            fputs("\\u007f", f);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            fprintf(f, "\\u%04x", p[1]); /* U+0080 to U+009F: 0xc2 then the code point's own byte */
            p++;
        } else {
            fputc(*p, f);
        }
    }
    fputc('\n', f);
    free(text);
    return 0;
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

/* The sysexits code of a history or summary error. */
static int otpctl_read_exit(enum otp_rc rc)
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

/* check and audit: both read the config (audit finds the ledger there, or
 * takes --db). audit reads no secret (the config is loaded without their
 * values) and opens the ledger read-only. */
static int otpctl_config_command(int argc, char **argv)
{
    const char *path = NULL, *db = NULL, *table = "requests", *phone = NULL;
    struct config *c = NULL;
    char *errors = NULL, err[OTP_ERR_LEN], *end;
    long rows = 20;
    int i, rc, audit = strcmp(argv[1], "audit") == 0;

    if (!audit && strcmp(argv[1], "check") != 0) {
        fprintf(stderr, "otpctl: unknown command %s\n", argv[1]);
        usage();
        return EX_USAGE;
    }
    for (i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (audit && strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            db = argv[++i];
        else if (audit && strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            table = argv[++i];
        else if (audit && strcmp(argv[i], "-p") == 0 && i + 1 < argc)
            phone = argv[++i];
        else if (audit && strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            rows = strtol(argv[++i], &end, 10);
            if (*end != '\0')
                rows = 0;
        } else {
            usage();
            return EX_USAGE;
        }
    }
    if ((path == NULL) == (db == NULL) || rows < 1 || rows > 100000) {
        usage();
        return EX_USAGE;
    }
    /* Neither reads a secret: check, like otpd --check, validates the file
     * (the secrets' variables must be named; their values are the running
     * service's business), and audit only reads the ledger. */
    config_set_secrets(0);
    if (path != NULL && (c = config_load(path, &errors)) == NULL) {
        fputs(errors ? errors : "", stderr);
        free(errors);
        return EX_CONFIG;
    }
    free(errors);
    if (!audit) {
        printf("%s: ok\n", path);
        config_free(c);
        return EX_OK;
    }
    rc = history_recent(db ? db : c->ledger.path, table, phone, (int)rows, print_row, NULL, err);
    if (rc != OTP_OK)
        fprintf(stderr, "otpctl audit: %s\n", err);
    config_free(c);
    return rc == OTP_OK ? EX_OK : otpctl_read_exit(rc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return EX_USAGE;
    }
    /* ledger needs no config and no secret: it reads the files it is given. */
    if (strcmp(argv[1], "ledger") == 0)
        return otpctl_ledger(argc - 2, argv + 2);
    /* verify and stats: the same, read-only, no secret. */
    if (strcmp(argv[1], "verify") == 0)
        return otpctl_verify(argc - 2, argv + 2);
    if (strcmp(argv[1], "stats") == 0)
        return otpctl_stats(argc - 2, argv + 2);
    /* simulate reads a ledger and a config's rules, and no secret. */
    if (strcmp(argv[1], "simulate") == 0)
        return otpctl_simulate(argc - 2, argv + 2);
    /* override, block, unlock: otpd's admin API, with the key from OTPCTL_KEY. */
    if (otpctl_admin_is(argv[1]))
        return otpctl_admin(argc - 1, argv + 1);
    return otpctl_config_command(argc, argv);
}
