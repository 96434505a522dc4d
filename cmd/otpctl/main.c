/*
 * otpctl: the operator's CLI. `check` validates a config like otpd --check;
 * `audit` prints the newest rows of a ledger table as JSON lines; `ledger`
 * (ledger.c) prints one history merged from several ledgers. None prints a
 * code: the ledger holds none. Exit codes are sysexits'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "../../src/base/config.h"
#include "../../src/ledger/ledger.h"
#include "otpctl.h"

static void usage(void)
{
    fprintf(stderr, "usage: otpctl check -c FILE\n"
                    "       otpctl audit -c FILE [-t requests|messages|sends|verifications|message_events]\n"
                    "                    [-n ROWS] [-p PHONE]\n");
    otpctl_ledger_usage(stderr);
    otpctl_simulate_usage(stderr);
    otpctl_admin_usage(stderr);
}

static void print_row(void *ctx, int ncols, const char *const *names, const char *const *values)
{
    json_t *row = json_object();
    int i;

    (void)ctx;
    for (i = 0; i < ncols; i++)
        json_object_set_new(row, names[i], values[i] ? json_string(values[i]) : json_null());
    json_dumpf(row, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(row);
}

/* check and audit: both read the config (audit finds the ledger there). */
static int otpctl_config_command(int argc, char **argv)
{
    const char *path = NULL, *table = "requests", *phone = NULL;
    struct config *c;
    struct ledger *l;
    char *errors = NULL, err[OTP_ERR_LEN];
    long rows = 20;
    int i, rc;

    for (i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            table = argv[++i];
        else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc)
            phone = argv[++i];
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            rows = strtol(argv[++i], NULL, 10);
        else {
            usage();
            return EX_USAGE;
        }
    }
    if (path == NULL || rows < 1 || rows > 100000) {
        usage();
        return EX_USAGE;
    }
    /* check, like otpd --check, validates the file: the secrets' variables
     * must be named, their values are the running service's business. */
    if (strcmp(argv[1], "check") == 0)
        config_set_secrets(0);
    c = config_load(path, &errors);
    if (strcmp(argv[1], "check") == 0) {
        fputs(errors ? errors : "", stderr);
        if (c)
            printf("%s: ok\n", path);
        free(errors);
        config_free(c);
        return c ? 0 : 1;
    }
    if (strcmp(argv[1], "audit") != 0) {
        usage();
        free(errors);
        config_free(c);
        return EX_USAGE;
    }
    if (c == NULL) {
        fputs(errors ? errors : "", stderr);
        free(errors);
        return EX_CONFIG;
    }
    if ((l = ledger_open(c->ledger_path, err)) == NULL) {
        fprintf(stderr, "otpctl: %s\n", err);
        config_free(c);
        return EX_UNAVAILABLE;
    }
    rc = ledger_recent(l, table, phone, (int)rows, print_row, NULL, err) == OTP_OK ? EX_OK : EX_DATAERR;
    if (rc != EX_OK)
        fprintf(stderr, "otpctl: %s\n", err);
    ledger_close(l);
    config_free(c);
    return rc;
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
    /* simulate reads a ledger and a config's rules, and no secret. */
    if (strcmp(argv[1], "simulate") == 0)
        return otpctl_simulate(argc - 2, argv + 2);
    /* override, block, unlock: otpd's admin API, with the key from OTPCTL_KEY. */
    if (otpctl_admin_is(argv[1]))
        return otpctl_admin(argc - 1, argv + 1);
    return otpctl_config_command(argc, argv);
}
