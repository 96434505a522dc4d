/*
 * fuzz_phone: libFuzzer over phone_valid, the gate every number passes
 * before it is keyed, priced, limited and sent. An input is the text of one
 * number (up to its first NUL, as a C string from a JSON body). The check
 * is differential: phone_valid must agree with the rule written out again
 * here, and an accepted number must fit the PHONE_MAX buffers the rest of
 * otpd copies it into. Seeds: tests/fuzz/corpus/phone/, valid numbers.
 */
#include <string.h>

#include "../../src/base/phone.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    FUZZ_CHECK(phone_valid(NULL) == 0);
    return 0;
}

/* phone.h's contract: "+" then 7 to 15 digits, the first not 0. */
static int fuzz_e164(const char *s)
{
    size_t n = strlen(s);

    return n >= 8 && n <= 16 && s[0] == '+' && s[1] != '0' && strspn(s + 1, "0123456789") == n - 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    int valid;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    valid = phone_valid(s);
    FUZZ_CHECK(valid == 0 || valid == 1);
    FUZZ_CHECK(valid == fuzz_e164(s));
    if (valid)
        FUZZ_CHECK(strlen(s) < PHONE_MAX);
    fuzz_deep(valid, s);
    free(s);
    return 0;
}
