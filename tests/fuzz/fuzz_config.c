/*
 * fuzz_config: libFuzzer over config_parse, the one parser that reads
 * operator input. Every input must give a config or an error text, never a
 * crash, a leak or undefined behaviour, and a config it gives must keep the
 * promises of config.h, among them that its template always renders into
 * the pacer's text buffer. Seeds: tests/fuzz/corpus/config/, whole configs
 * that parse with the environment set below.
 */
#include <string.h>

#include <jansson.h>

#include "../../src/base/config.h"
#include "../../src/otp/code.h"
#include "../../src/pacer/pacer.h"
#include "fuzz.h"

/* A UNITTEST function of src/base/config_cost.c (the fuzz build has
 * OTPD_TESTING): the price over a whole config. */
int64_t config_price(const struct config *c, const char *phone);

/* Every environment variable the configs in configs/ and tests/ name. */
static const char *const fuzz_env[][2] = {
    {"OTPD_SECRET", "fuzz-secret-0123456789abcdef0123456789"},
    {"OTPD_KEY_LOGIN_WEB", "fuzz-key-login-web-0123456789"},
    {"OTPD_KEY_LOGIN_APP", "fuzz-key-login-app-0123456789"},
    {"OTPD_KEY_ADMIN", "fuzz-key-admin-0123456789abcdef"},
    {"KANNEL_USER", "kannel"},
    {"KANNEL_PASS", "kannel-pass"},
    {"TWILIO_SID", "AC0123456789abcdef0123456789abcdef"},
    {"TWILIO_TOKEN", "twilio-token"},
    {"TWILIO_KEY_SID", "SK0123456789abcdef0123456789abcdef"},
    {"TWILIO_KEY_SECRET", "twilio-key-secret"},
    {"WEBHOOK_TOKEN", "webhook-bearer-token-0001"},
    {"WEBHOOK_SIGNING_SECRET", "webhook-signing-secret-0123456789abcdef"},
    {"REDIS_PASSWORD", "redis-pass"},
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    size_t i;

    (void)argc, (void)argv;
    for (i = 0; i < sizeof(fuzz_env) / sizeof(fuzz_env[0]); i++)
        setenv(fuzz_env[i][0], fuzz_env[i][1], 1);
    json_object_seed(1); /* the same hash order every run */
    return 0;
}

/* What config.h promises of a config that loaded. */
static void fuzz_config_check(const struct config *c)
{
    size_t i;

    FUZZ_CHECK(c->secret != NULL && c->secret_len >= 32);
    FUZZ_CHECK(c->keys.n_api_keys >= 1 && c->keys.n_api_keys <= 256);
    for (i = 0; i < c->keys.n_api_keys; i++)
        FUZZ_CHECK(c->keys.api_keys[i].key != NULL && strlen(c->keys.api_keys[i].key) >= 16);
    FUZZ_CHECK(c->otp.length >= 4 && c->otp.length <= 10);
    FUZZ_CHECK(c->otp.ttl_ms >= 10000 && c->otp.ttl_ms <= 3600000);
    FUZZ_CHECK(strstr(c->otp.tmpl, "{code}") != NULL);
    FUZZ_CHECK(c->http.listen_port >= 1 && c->http.listen_port <= 65535);
    FUZZ_CHECK(c->redis.n_sentinels > 0 || c->redis.host[0] != '\0');
    FUZZ_CHECK(c->redis.db >= 0 && c->redis.db <= 15);
    FUZZ_CHECK(c->limits.n_rules <= 32);
    for (i = 0; i < c->limits.n_rules; i++) {
        const struct cfg_rule *r = &c->limits.rules[i];
        FUZZ_CHECK(r->name[0] != '\0' && strlen(r->field) == 2);
        FUZZ_CHECK(r->limit >= 1 && r->window_ms >= 1 && r->burst >= 1);
        FUZZ_CHECK((unsigned)r->key < CFG_KEY_COUNT && config_key_name(r->key) != NULL);
        FUZZ_CHECK(config_algo_name(r->algo) != NULL);
    }
    for (i = 0; i < c->limits.n_prices; i++)
        FUZZ_CHECK(c->limits.prices[i].price_minor >= 0);
    for (i = 0; i < c->limits.n_caps; i++)
        FUZZ_CHECK(c->limits.caps[i].window_ms >= 1 && c->limits.caps[i].max_minor >= 0);
    /* With caps, every destination has a price: none escapes them. */
    if (c->limits.n_caps > 0)
        FUZZ_CHECK(config_price(c, "+999999999999") >= 0);
    /* otp.c renders with the code's digits and the minutes left (1 to 60,
     * as otp.ttl is at most an hour) into the pacer's PACER_TEXT_MAX. */
    {
        static const char nines[] = "9999999999";
        char text[PACER_TEXT_MAX];
        FUZZ_CHECK(code_render(c->otp.tmpl, nines + 10 - c->otp.length, 60, text, sizeof(text)) == OTP_OK);
        FUZZ_CHECK(code_render(c->otp.tmpl, nines + 10 - c->otp.length, 1, text, sizeof(text)) == OTP_OK);
    }
    if (c->provider.type == CFG_PROVIDER_KANNEL)
        FUZZ_CHECK(c->provider.user != NULL && c->provider.pass != NULL);
    /* Twilio: the account SID always (it names the URL), then the token or
     * an API key to authenticate, and exactly one sender. */
    if (c->provider.type == CFG_PROVIDER_TWILIO) {
        FUZZ_CHECK(c->provider.user != NULL && strlen(c->provider.user) == CFG_SID_LEN);
        FUZZ_CHECK(c->provider.pass != NULL || (c->provider.key_sid != NULL && c->provider.key_secret != NULL));
        FUZZ_CHECK((c->provider.key_sid == NULL) == (c->provider.key_secret == NULL));
        FUZZ_CHECK((c->provider.from[0] != '\0') != (c->provider.messaging_service[0] != '\0'));
    }
    /* Kannel's sendsms bounds; validity goes out in whole minutes. */
    FUZZ_CHECK(c->provider.priority >= -1 && c->provider.priority <= 3);
    FUZZ_CHECK(c->provider.dlr_mask >= 1 && c->provider.dlr_mask <= 31);
    FUZZ_CHECK(c->provider.validity_ms % 60000 == 0 && c->provider.validity_ms <= 86400000);
    /* A bearer token goes in a header line: nothing that could split it. */
    if (c->provider.token != NULL)
        FUZZ_CHECK(strspn(c->provider.token, "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
                                             "abcdefghijklmnopqrstuvwxyz{|}~") == strlen(c->provider.token));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *errors = NULL;
    struct config *c;

    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    c = config_parse(text, "fuzz.json", &errors);
    /* Exactly one of a config and an error text. */
    FUZZ_CHECK((c == NULL) != (errors == NULL));
    fuzz_deep(c != NULL, errors ? errors : "");
    if (c != NULL) {
        fuzz_config_check(c);
        (void)config_price(c, "+919812345678");
        config_free(c);
    }
    free(errors);
    free(text);
    return 0;
}
