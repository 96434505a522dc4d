/*
 * fuzz_config: libFuzzer over config_parse, the one parser that reads
 * operator input. Every input must give a config or an error text, never a
 * crash, a leak or undefined behaviour. `make fuzz` runs it for a while.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *errors = NULL;
    struct config *c;

    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    setenv("OTPD_SECRET", "fuzz-secret-0123456789abcdef0123456789", 0);
    setenv("OTPD_KEY", "fuzz-key-0123456789", 0);
    c = config_parse(text, "fuzz.json", &errors);
    if (c != NULL) {
        (void)config_price(c, "+919812345678");
        config_free(c);
    }
    free(errors);
    free(text);
    return 0;
}
