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
 * then checks that chain_base is where the last prune put it, and that no
 * row after the chain's start lacks a link (a row added behind otpd).
 */
#ifndef OTPD_CHAINCHECK_H
#define OTPD_CHAINCHECK_H

#include <stdint.h>

#include "../base/rc.h"

#define CHAINCHECK_TABLES 6
#define CHAINCHECK_HASH_HEX 65

struct chaincheck_result {
    int ok;                         /* 1: no fault found */
    int64_t links;                  /* links checked */
    int64_t rows;                   /* rows checked against their newest link */
    int64_t pruned;                 /* links whose row retention removed */
    int64_t base_seq;               /* the chain starts after this link (0: at the start) */
    int64_t head_seq;               /* the newest link (base_seq when none) */
    char head[CHAINCHECK_HASH_HEX]; /* its hash, hex: keep it elsewhere to detect a cut tail later */
    int64_t started_ms; /* when the chain began (the upgrade to schema 7, or the ledger's creation) */
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
 * Checks the ledger at path into *r. OTP_OK when the check ran (r->ok says
 * what it found); else err says why: OTP_ENOTFOUND (no such file),
 * OTP_EINVAL (not a ledger, or one without a chain: schema before 7),
 * OTP_EIO (it could not be read), OTP_ENOMEM.
 */
enum otp_rc chaincheck_run(const char *path, struct chaincheck_result *r, char *err);

#endif
