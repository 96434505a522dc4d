/*
 * fuzz: what every libFuzzer target here shares. A seed is worth keeping
 * only if it parses, so that mutations start deep in the parser; with
 * OTPD_FUZZ_SEEDS=1 in the environment (tests/fuzz/run.sh sets it for one
 * pass over the seeds) a target aborts on any input that does not.
 */
#ifndef OTPD_FUZZ_H
#define OTPD_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A broken promise of the code under test: report it as a crash. */
#define FUZZ_CHECK(cond)                                                                                       \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                           \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

/* Called once per input with whether it reached the deep path. */
static inline void fuzz_deep(int deep, const char *why)
{
    static int seeds = -1;

    if (seeds < 0)
        seeds = getenv("OTPD_FUZZ_SEEDS") != NULL;
    if (seeds && !deep) {
        fprintf(stderr, "seed does not parse: %s\n", why);
        abort();
    }
}

#endif
