/*
 * fnv: FNV-1a, 64-bit, the one fast non-cryptographic hash of otpd: hash
 * tables and change digests (the ledger's counted rows, the refusal cache,
 * the phone memo, the admin snapshot's overrides). Never for anything that
 * must resist a chosen collision: the entries it finds are compared whole.
 */
#ifndef OTPD_FNV_H
#define OTPD_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV_BASIS 14695981039346656037ULL

/* h continued over the n bytes at p (start from FNV_BASIS). */
static inline uint64_t fnv_add(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;

    for (i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

#endif
