/*
 * chaincheck: `otpctl verify`'s check of one ledger's hash chain (the
 * format is in chain.h). Read-only (ro.h), needs no secret and no config,
 * and runs beside a live otpd: it checks the ledger as of its last commit.
 *
 * It walks the links in order and stops at the first fault:
 *  - a link is missing (a gap in seq), or its hash is not the hash of the
 *    previous one and its own fields (a link changed, removed or moved);
 *  - a row's link names a row that is gone, unless retention pruned it (a
 *    later prune link's cutoff is past the link's time);
 *  - a row differs from its newest link (a field changed, or two rows
 *    swapped);
 *  - a prune link does not bind the start marks chain_start holds (a mark
 *    raised to hide a forged row below it);
 * then checks that chain_base is where the last prune put it, that no row
 * after the chain's start lacks a link (a row added behind otpd), and,
 * when given one, that the chain still holds a head read earlier (a cut
 * or rewritten tail, which nothing else can show).
 */
#ifndef OTPD_CHAINCHECK_H
#define OTPD_CHAINCHECK_H

#include <stdint.h>

#include "../base/rc.h"

#define CHAINCHECK_TABLES 6
#define CHAINCHECK_HASH_LEN 32
#define CHAINCHECK_HASH_HEX 65

/* A head an earlier check printed (seq and hash), kept elsewhere. */
struct chaincheck_head {
    int64_t seq;
    unsigned char hash[CHAINCHECK_HASH_LEN];
};

/* What became of the head given. */
enum chaincheck_head_found {
    CHAINCHECK_HEAD_NONE,   /* none was given */
    CHAINCHECK_HEAD_HELD,   /* the chain holds it: nothing before it was cut or rewritten */
    CHAINCHECK_HEAD_PRUNED, /* retention has pruned past it: it cannot be checked */
};

struct chaincheck_result {
    int ok;                         /* 1: no fault found */
    int64_t links;                  /* links checked */
    int64_t rows;                   /* rows checked against their newest link */
    int64_t pruned;                 /* links whose row retention removed */
    int64_t base_seq;               /* the chain starts after this link (0: at the start) */
    int64_t head_seq;               /* the newest link (base_seq when none) */
    char head[CHAINCHECK_HASH_HEX]; /* its hash, hex: keep it elsewhere to detect a cut tail later */
    int64_t started_ms; /* when the chain began (the upgrade to schema 7, or the ledger's creation) */
    /* The start marks are bound by the genesis (base_seq 0) or the newest
     * prune link; that link is from before schema 8 when 0 (the next prune
     * binds them), and unbound_seq is it. */
    int marks_bound;
    int64_t unbound_seq;
    enum chaincheck_head_found head_found;
    /* Rows older than the chain, per table (tables[i]): rowid at or below
     * marks[i] carry no link; unchained[i] of them are still there. */
    const char *tables[CHAINCHECK_TABLES];
    int64_t marks[CHAINCHECK_TABLES];
    int64_t unchained[CHAINCHECK_TABLES];
    /* The first fault, when !ok. */
    char table[32];  /* the row's table ("chain" for a fault in the chain's own tables) */
    int64_t row_id;  /* its id (rowid), -1 when none */
    int64_t seq;     /* the link where it shows, -1 when none */
    const char *why; /* a static sentence */
};

/*
 * Checks the ledger at path into *r, and that it still holds head (NULL:
 * none given). OTP_OK when the check ran (r->ok says
 * what it found); else err says why: OTP_ENOTFOUND (no such file),
 * OTP_EINVAL (not a ledger, or one without a chain: schema before 7),
 * OTP_EIO (it could not be read), OTP_ENOMEM.
 */
enum otp_rc chaincheck_run(const char *path, const struct chaincheck_head *head, struct chaincheck_result *r,
                           char *err);

#endif
