/*
 * sha256: FIPS 180-4 SHA-256 and RFC 2104 HMAC-SHA256. Small and
 * dependency-free so that the modules below src/otp (libsodium's and
 * libcrypto's only home) can hash: the ledger's chain (src/ledger/chain.c),
 * which otpctl and any stock tool (Python's hashlib, sha256sum) recompute,
 * and the webhook adapter's request signature (src/provider/webhook.c),
 * which a receiver checks with Python's hmac. Pure: no allocation, no I/O.
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

/* HMAC-SHA256 of msg (n bytes) under key (key_len bytes, any length) into
 * out (SHA256_LEN bytes). The key's pads live on the stack and are wiped
 * before it returns. */
void sha256_hmac(const void *key, size_t key_len, const void *msg, size_t n, unsigned char out[SHA256_LEN]);

#endif
