/*
 * fuzz_phone: libFuzzer over phone_parse, the gate every number passes
 * before it is keyed, priced, limited and sent (src/base/phone.cc over
 * libphonenumber). An input is the text of one number (up to its first
 * NUL, as a C string from a JSON body). What a parse promises is checked:
 * anything but "+" and digits is not_a_number; an accepted number's
 * canonical form is "+" and 2 to 15 digits that fits PHONE_MAX, parses to
 * itself with the same region and type (one spelling per number), and its
 * region is two capital letters or "001"; a refusal leaves nothing that
 * could be keyed; the detail always fits and ends. Seeds:
 * tests/fuzz/corpus/phone/, valid numbers of several countries, some
 * spelled with a trunk prefix.
 */
#include <string.h>

#include "../../src/base/phone.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct phone_info pi;

    (void)argc, (void)argv;
    phone_init();
    FUZZ_CHECK(phone_parse(NULL, &pi) == PHONE_NOT_A_NUMBER && phone_valid(NULL) == 0);
    return 0;
}

/* phone.h's input rule: "+" then at least one ASCII digit and nothing else. */
static int fuzz_digits_only(const char *s)
{
    size_t n = strlen(s);

    return n >= 2 && s[0] == '+' && strspn(s + 1, "0123456789") == n - 1;
}

static int fuzz_region_ok(const char *r)
{
    return strcmp(r, "001") == 0 || (strlen(r) == 2 && r[0] >= 'A' && r[0] <= 'Z' && r[1] >= 'A' &&
                                     r[1] <= 'Z' && strcmp(r, "ZZ") != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct phone_info pi, again;
    enum phone_err err;
    char *s = malloc(size + 1), why[160];
    size_t n;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    memset(&pi, 0x5a, sizeof(pi));
    err = phone_parse(s, &pi);
    FUZZ_CHECK(err >= PHONE_OK && err <= PHONE_INVALID_FOR_REGION);
    FUZZ_CHECK(memchr(pi.e164, '\0', sizeof(pi.e164)) != NULL);
    FUZZ_CHECK(memchr(pi.region, '\0', sizeof(pi.region)) != NULL);
    FUZZ_CHECK(pi.type >= PHONE_TYPE_UNKNOWN && (int)pi.type < PHONE_TYPE_COUNT);
    if (!fuzz_digits_only(s))
        FUZZ_CHECK(err == PHONE_NOT_A_NUMBER);
    memset(why, 'x', sizeof(why));
    phone_why(err, &pi, why, sizeof(why));
    n = strnlen(why, sizeof(why));
    FUZZ_CHECK(n > 0 && n < sizeof(why));
    if (err == PHONE_OK) {
        n = strlen(pi.e164);
        FUZZ_CHECK(n >= 3 && n < PHONE_MAX && pi.e164[0] == '+' && pi.e164[1] != '0');
        FUZZ_CHECK(strspn(pi.e164 + 1, "0123456789") == n - 1);
        FUZZ_CHECK(fuzz_region_ok(pi.region) && pi.country_code > 0);
        /* The canonical form is one spelling: it parses to itself. */
        FUZZ_CHECK(phone_parse(pi.e164, &again) == PHONE_OK);
        FUZZ_CHECK(strcmp(again.e164, pi.e164) == 0 && strcmp(again.region, pi.region) == 0);
        FUZZ_CHECK(again.type == pi.type && again.country_code == pi.country_code);
        FUZZ_CHECK(phone_valid(pi.e164) == 1);
        FUZZ_CHECK(phone_valid(s) == (strcmp(s, pi.e164) == 0));
    } else {
        FUZZ_CHECK(pi.e164[0] == '\0' && pi.type == PHONE_TYPE_UNKNOWN && phone_valid(s) == 0);
    }
    fuzz_deep(err == PHONE_OK, s);
    free(s);
    return 0;
}
