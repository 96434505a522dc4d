/*
 * sha256: FIPS 180-4 SHA-256, for the ledger's hash chain (chain.c). Small
 * and dependency-free so that the ledger (below src/otp, libsodium's only
 * home) and otpctl compute the same digests, and so that anyone can
 * recompute a chain with a stock tool (Python's hashlib, sha256sum).
 * Pure: no allocation, no I/O.
 */
#ifndef OTPD_SHA256_H
#define OTPD_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
    uint32_t h[8];
    uint64_t bytes;        /* hashed so far */
    unsigned char buf[64]; /* a partial block */
    size_t n;              /* bytes in buf */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *p, size_t n);
/* Writes the digest to out (SHA256_LEN bytes); s must be initialized again to reuse. */
void sha256_final(struct sha256 *s, unsigned char out[SHA256_LEN]);

#endif
