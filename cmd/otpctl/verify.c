/*
 * otpctl verify --db FILE [--head SEQ:HASH]: checks a ledger's hash chain
 * (src/ledger/chaincheck.c) and names the first broken row. Needs no
 * config and no secret; opens the file read-only. Exit 0 when the chain
 * holds, EX_DATAERR when it is broken or has none, EX_NOINPUT when the
 * file is missing or no ledger, EX_USAGE for bad flags.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "../../src/base/timestamp.h"
#include "../../src/ledger/chaincheck.h"
#include "otpctl.h"

struct verify_opts {
    const char *db, *head;
};

static const struct flag verify_flags[] = {
    {"db", 0, FLAG_STR, 1, offsetof(struct verify_opts, db), "FILE", "the ledger to check", 0, 0},
    {"head", 0, FLAG_STR, 0, offsetof(struct verify_opts, head), "SEQ:HASH",
     "a head an earlier verify printed, which the chain must still hold", 0, 0},
};

static const struct flag_cmd verify_cmd = {
    .name = "otpctl verify",
    .flags = FLAGS_OF(verify_flags),
    .notes = "  checks the ledger's hash chain; exit 0 ok, 65 broken (the first broken row named)\n",
};

void otpctl_verify_synopsis(FILE *f)
{
    flags_synopsis(&verify_cmd, "  ", f);
}

/* "SEQ:HASH" (HASH 64 hex digits) into *h; 0, or -1 when malformed. */
static int verify_parse_head(const char *s, struct chaincheck_head *h)
{
    static const char hex[] = "0123456789abcdef";
    char *end;
    int i;

    h->seq = strtoll(s, &end, 10);
    if (end == s || *end != ':' || h->seq < 0 || strlen(end + 1) != 2 * CHAINCHECK_HASH_LEN)
        return -1;
    for (i = 0; i < 2 * CHAINCHECK_HASH_LEN; i++) {
        const char *d = strchr(hex, tolower((unsigned char)end[1 + i]));
        if (d == NULL || *d == '\0')
            return -1;
        h->hash[i / 2] = (unsigned char)(h->hash[i / 2] << 4 | (d - hex));
    }
    return 0;
}

/* The lines beside ok or BROKEN: what the check could not cover. */
static void verify_notes(const struct chaincheck_result *r, const struct chaincheck_head *head)
{
    if (!r->marks_bound)
        printf("start marks: not bound since prune link %lld (written before schema 8); the next prune binds "
               "them\n",
               (long long)r->unbound_seq);
    if (r->head_found == CHAINCHECK_HEAD_HELD)
        printf("holds the head given: link %lld\n", (long long)head->seq);
    else if (r->head_found == CHAINCHECK_HEAD_PRUNED)
        printf("the head given (link %lld) is pruned (retention): not checked\n", (long long)head->seq);
}

int otpctl_verify(int argc, char **argv)
{
    struct chaincheck_result r;
    struct chaincheck_head head = {0, {0}};
    struct verify_opts o = {NULL, NULL};
    const char *path = NULL;
    char err[OTP_ERR_LEN], when[TIMESTAMP_LEN];
    enum otp_rc rc;
    int t;

    if ((t = flags_parse(&verify_cmd, argc, argv, &o)) != FLAGS_GO)
        return t;
    path = o.db;
    if (o.head != NULL && verify_parse_head(o.head, &head) < 0) {
        fprintf(stderr, "otpctl verify: --head takes one SEQ:HASH as verify printed it (head: SEQ HASH): %s\n",
                o.head);
        return EX_USAGE;
    }
    if ((rc = chaincheck_run(path, o.head != NULL ? &head : NULL, &r, err)) != OTP_OK) {
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
    verify_notes(&r, &head);
    printf("ok: %lld links (%lld to %lld), %lld rows checked, %lld pruned\n", (long long)r.links,
           (long long)(r.base_seq + 1), (long long)r.head_seq, (long long)r.rows, (long long)r.pruned);
    printf("head: %lld %s\n", (long long)r.head_seq, r.head);
    return fflush(stdout) == 0 ? EX_OK : EX_IOERR;
}
