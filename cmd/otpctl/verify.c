/*
 * otpctl verify --db FILE: checks a ledger's hash chain
 * (src/ledger/chaincheck.c) and names the first broken row. Needs no
 * config and no secret; opens the file read-only. Exit 0 when the chain
 * holds, EX_DATAERR when it is broken or has none, EX_NOINPUT when the
 * file is missing or no ledger, EX_USAGE for bad flags.
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "../../src/base/timestamp.h"
#include "../../src/ledger/chaincheck.h"
#include "otpctl.h"

void otpctl_verify_usage(FILE *f)
{
    fprintf(f,
            "       otpctl verify --db FILE\n"
            "         checks the ledger's hash chain; exit 0 ok, 65 broken (the first broken row named)\n");
}

static int verify_usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "otpctl verify: %s%s\nusage:", what, arg);
    otpctl_verify_usage(stderr);
    return EX_USAGE;
}

int otpctl_verify(int argc, char **argv)
{
    struct chaincheck_result r;
    const char *path = NULL;
    char err[OTP_ERR_LEN], when[TIMESTAMP_LEN];
    enum otp_rc rc;
    int i, t;

    for (i = 0; i < argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage:", stdout);
            otpctl_verify_usage(stdout);
            return EX_OK;
        }
        if (strncmp(argv[i], "--db=", 5) == 0)
            v = argv[i] + 5;
        else if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strcmp(argv[i], "--db") == 0)
            return verify_usage_error("a value is missing after ", "--db");
        else
            return verify_usage_error("unknown argument ", argv[i]);
        if (path != NULL)
            return verify_usage_error("one ledger at a time: --db given twice", "");
        path = v;
    }
    if (path == NULL)
        return verify_usage_error("no ledger: give --db FILE", "");
    if ((rc = chaincheck_run(path, &r, err)) != OTP_OK) {
        fprintf(stderr, "otpctl verify: %s\n", err);
        return rc == OTP_ENOTFOUND                                ? EX_NOINPUT
               : rc == OTP_EINVAL && strstr(err, "no hash chain") ? EX_DATAERR
               : rc == OTP_EINVAL                                 ? EX_NOINPUT
               : rc == OTP_ENOMEM                                 ? EX_OSERR
                                                                  : EX_IOERR;
    }
    if (timestamp_format(r.started_ms, when, sizeof(when)) != OTP_OK)
        snprintf(when, sizeof(when), "%lld", (long long)r.started_ms);
    printf("ledger: %s\n", path);
    printf("chain started: %s\n", when);
    for (t = 0; t < CHAINCHECK_TABLES; t++)
        if (r.marks[t] > 0)
            printf("older than the chain: %s up to id %lld (%lld rows left, not covered)\n", r.tables[t],
                   (long long)r.marks[t], (long long)r.unchained[t]);
    if (r.base_seq > 0)
        printf("links before %lld pruned (retention)\n", (long long)(r.base_seq + 1));
    if (!r.ok) {
        printf("BROKEN: %s", r.table);
        if (r.row_id >= 0)
            printf(" id %lld", (long long)r.row_id);
        if (r.seq >= 0)
            printf(" (link %lld)", (long long)r.seq);
        printf(": %s\n", r.why);
        printf("checked before it: %lld links, %lld rows\n", (long long)r.links, (long long)r.rows);
        fflush(stdout);
        return EX_DATAERR;
    }
    printf("ok: %lld links (%lld to %lld), %lld rows checked, %lld pruned\n", (long long)r.links,
           (long long)(r.base_seq + 1), (long long)r.head_seq, (long long)r.rows, (long long)r.pruned);
    printf("head: %lld %s\n", (long long)r.head_seq, r.head);
    return fflush(stdout) == 0 ? EX_OK : EX_IOERR;
}
