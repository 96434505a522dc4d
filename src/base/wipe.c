/*
 * wipe: glibc's explicit_bzero, which the compiler may not remove (see
 * wipe.h). Not libsodium's sodium_memzero: libsodium lives in src/otp, and
 * base is below every module that wipes.
 */
#include "wipe.h"

#include <string.h>

void wipe(void *p, size_t n)
{
    if (n > 0)
        explicit_bzero(p, n);
}
