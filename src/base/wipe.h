/*
 * wipe: clears memory that held a secret (a code, a token, text holding
 * either) so that the clearing stays in the program: the optimiser drops a
 * memset just before free or return, as the store is never read again.
 * Called once per message or request; the cost is a memset's.
 */
#ifndef OTPD_WIPE_H
#define OTPD_WIPE_H

#include <stddef.h>

/* Sets the n bytes at p to zero; p may be NULL when n is 0. */
void wipe(void *p, size_t n);

#endif
