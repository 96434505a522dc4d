/*
 * Unit tests of the phone module (src/base/phone.cc over libphonenumber):
 * valid numbers of IN, GB, US, DE, FR, BR, JP and AU with their canonical
 * form, region and type; trunk-prefix spellings that are one number or
 * refused; too short, too long, a length no number has, invalid for the
 * region, invalid country codes and garbage, each with its reason and the
 * detail a caller sees; toll-free and premium-rate numbers; the type names
 * phone.types uses; and parses from many threads at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/phone.h"

struct valid_case {
    const char *in;
    const char *e164;
    const char *region;
    int country_code;
    enum phone_type type;
};

/* Each country's mobile and fixed line (libphonenumber's example numbers,
 * and numbers the integration tests use), a trunk-prefix spelling of one,
 * toll-free and premium-rate numbers. */
static const struct valid_case valid_cases[] = {
    /* India: mobiles, a fixed line that may be mobile, toll-free, premium. */
    {"+919812345699", "+919812345699", "IN", 91, PHONE_TYPE_MOBILE},
    {"+919800000001", "+919800000001", "IN", 91, PHONE_TYPE_MOBILE},
    {"+918123456789", "+918123456789", "IN", 91, PHONE_TYPE_MOBILE},
    {"+9109812345699", "+919812345699", "IN", 91, PHONE_TYPE_MOBILE},
    {"+917410410123", "+917410410123", "IN", 91, PHONE_TYPE_FIXED_LINE_OR_MOBILE},
    {"+911800123456", "+911800123456", "IN", 91, PHONE_TYPE_TOLL_FREE},
    {"+911861123456789", "+911861123456789", "IN", 91, PHONE_TYPE_PREMIUM_RATE},
    /* United Kingdom. */
    {"+447400123456", "+447400123456", "GB", 44, PHONE_TYPE_MOBILE},
    {"+4407400123456", "+447400123456", "GB", 44, PHONE_TYPE_MOBILE},
    {"+441212345678", "+441212345678", "GB", 44, PHONE_TYPE_FIXED_LINE},
    {"+448001234567", "+448001234567", "GB", 44, PHONE_TYPE_TOLL_FREE},
    {"+449012345678", "+449012345678", "GB", 44, PHONE_TYPE_PREMIUM_RATE},
    {"+445612345678", "+445612345678", "GB", 44, PHONE_TYPE_VOIP},
    {"+447640123456", "+447640123456", "GB", 44, PHONE_TYPE_PAGER},
    /* United States and Canada share +1; a valid number names its own. */
    {"+14155550100", "+14155550100", "US", 1, PHONE_TYPE_FIXED_LINE_OR_MOBILE},
    {"+12015550123", "+12015550123", "US", 1, PHONE_TYPE_FIXED_LINE_OR_MOBILE},
    {"+18002345678", "+18002345678", "US", 1, PHONE_TYPE_TOLL_FREE},
    {"+19002345678", "+19002345678", "US", 1, PHONE_TYPE_PREMIUM_RATE},
    {"+15002345678", "+15002345678", "US", 1, PHONE_TYPE_PERSONAL_NUMBER},
    {"+16135550123", "+16135550123", "CA", 1, PHONE_TYPE_FIXED_LINE_OR_MOBILE},
    /* Germany. */
    {"+4915123456789", "+4915123456789", "DE", 49, PHONE_TYPE_MOBILE},
    {"+49015123456789", "+4915123456789", "DE", 49, PHONE_TYPE_MOBILE},
    {"+4930123456", "+4930123456", "DE", 49, PHONE_TYPE_FIXED_LINE},
    {"+498001234567890", "+498001234567890", "DE", 49, PHONE_TYPE_TOLL_FREE},
    {"+499001234567", "+499001234567", "DE", 49, PHONE_TYPE_PREMIUM_RATE},
    {"+49177991234567", "+49177991234567", "DE", 49, PHONE_TYPE_VOICEMAIL},
    /* France. */
    {"+33612345678", "+33612345678", "FR", 33, PHONE_TYPE_MOBILE},
    {"+330612345678", "+33612345678", "FR", 33, PHONE_TYPE_MOBILE},
    {"+33123456789", "+33123456789", "FR", 33, PHONE_TYPE_FIXED_LINE},
    {"+33801234567", "+33801234567", "FR", 33, PHONE_TYPE_TOLL_FREE},
    {"+33891123456", "+33891123456", "FR", 33, PHONE_TYPE_PREMIUM_RATE},
    {"+33884012345", "+33884012345", "FR", 33, PHONE_TYPE_SHARED_COST},
    /* Brazil. */
    {"+5511961234567", "+5511961234567", "BR", 55, PHONE_TYPE_MOBILE},
    {"+55011961234567", "+5511961234567", "BR", 55, PHONE_TYPE_MOBILE},
    {"+551123456789", "+551123456789", "BR", 55, PHONE_TYPE_FIXED_LINE},
    {"+55800123456", "+55800123456", "BR", 55, PHONE_TYPE_TOLL_FREE},
    {"+55300123456", "+55300123456", "BR", 55, PHONE_TYPE_PREMIUM_RATE},
    /* Japan. */
    {"+819012345678", "+819012345678", "JP", 81, PHONE_TYPE_MOBILE},
    {"+8109012345678", "+819012345678", "JP", 81, PHONE_TYPE_MOBILE},
    {"+81312345678", "+81312345678", "JP", 81, PHONE_TYPE_FIXED_LINE},
    {"+81120123456", "+81120123456", "JP", 81, PHONE_TYPE_TOLL_FREE},
    {"+81990123456", "+81990123456", "JP", 81, PHONE_TYPE_PREMIUM_RATE},
    {"+81570123456", "+81570123456", "JP", 81, PHONE_TYPE_UAN},
    /* Australia. */
    {"+61412345678", "+61412345678", "AU", 61, PHONE_TYPE_MOBILE},
    {"+610412345678", "+61412345678", "AU", 61, PHONE_TYPE_MOBILE},
    {"+61212345678", "+61212345678", "AU", 61, PHONE_TYPE_FIXED_LINE},
    {"+611800123456", "+611800123456", "AU", 61, PHONE_TYPE_TOLL_FREE},
    {"+611900123456", "+611900123456", "AU", 61, PHONE_TYPE_PREMIUM_RATE},
    /* China, and a non-geographic freephone number (region "001"). */
    {"+8613800138000", "+8613800138000", "CN", 86, PHONE_TYPE_MOBILE},
    {"+861012345678", "+861012345678", "CN", 86, PHONE_TYPE_FIXED_LINE},
    {"+80012345678", "+80012345678", "001", 800, PHONE_TYPE_TOLL_FREE},
};

static void test_valid_numbers(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(valid_cases) / sizeof(valid_cases[0]); i++) {
        const struct valid_case *c = &valid_cases[i];
        struct phone_info pi;
        enum phone_err err;

        memset(&pi, 0x5a, sizeof(pi));
        err = phone_parse(c->in, &pi);
        if (err != PHONE_OK)
            fail_msg("%s: %s, want ok", c->in, phone_err_name(err));
        if (strcmp(pi.e164, c->e164) != 0 || strcmp(pi.region, c->region) != 0 ||
            pi.country_code != c->country_code || pi.type != c->type)
            fail_msg("%s: %s %s +%d %s, want %s %s +%d %s", c->in, pi.e164, pi.region, pi.country_code,
                     phone_type_name(pi.type), c->e164, c->region, c->country_code, phone_type_name(c->type));
        /* The canonical form is a fixed point: it parses to itself. */
        assert_int_equal(phone_valid(c->e164), 1);
        assert_int_equal(phone_valid(c->in), strcmp(c->in, c->e164) == 0);
    }
}

/* Each spelling with a trunk prefix after the country code is the same
 * number as without it, or refused; never a different number. */
static void test_trunk_prefixes(void **state)
{
    static const struct {
        const char *plain, *spellings[3];
    } cases[] = {
        {"+919812345699", {"+9109812345699", "+91009812345699", "+910009812345699"}},
        {"+447400123456", {"+4407400123456", "+44007400123456", NULL}},
        {"+4915123456789", {"+49015123456789", "+490015123456789", NULL}},
        {"+33612345678", {"+330612345678", "+3300612345678", NULL}},
        {"+5511961234567", {"+55011961234567", NULL, NULL}},
        {"+819012345678", {"+8109012345678", "+81009012345678", NULL}},
        {"+61412345678", {"+610412345678", "+6100412345678", NULL}},
    };
    size_t i, j;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct phone_info pi;
        assert_int_equal(phone_parse(cases[i].plain, &pi), PHONE_OK);
        assert_string_equal(pi.e164, cases[i].plain);
        for (j = 0; j < 3 && cases[i].spellings[j]; j++) {
            enum phone_err err = phone_parse(cases[i].spellings[j], &pi);
            if (err == PHONE_OK && strcmp(pi.e164, cases[i].plain) != 0)
                fail_msg("%s is %s, a second number beside %s", cases[i].spellings[j], pi.e164,
                         cases[i].plain);
        }
        /* One trunk "0" is the number itself. */
        assert_int_equal(phone_parse(cases[i].spellings[0], &pi), PHONE_OK);
        assert_string_equal(pi.e164, cases[i].plain);
    }
    /* The three spellings: the third ("00") is refused. */
    {
        struct phone_info pi;
        assert_int_equal(phone_parse("+91009812345699", &pi), PHONE_INVALID_FOR_REGION);
        assert_string_equal(pi.e164, "");
    }
}

struct bad_case {
    const char *in;
    enum phone_err err;
    const char *why; /* phone_why's exact text */
};

static const struct bad_case bad_cases[] = {
    /* Too short: for its country, or with too few digits to say. */
    {"+1415555010", PHONE_TOO_SHORT, "phone is too short for US (+1)"},
    {"+919812345", PHONE_TOO_SHORT, "phone is too short for IN (+91)"},
    {"+3361234567", PHONE_TOO_SHORT, "phone is too short for FR (+33)"},
    {"+61123", PHONE_TOO_SHORT, "phone is too short for AU (+61)"},
    {"+447", PHONE_TOO_SHORT, "phone is too short for GB (+44)"},
    {"+44", PHONE_TOO_SHORT, "phone is too short for GB (+44)"},
    {"+1234567", PHONE_TOO_SHORT, "phone is too short for US (+1)"},
    {"+9", PHONE_TOO_SHORT, "phone is too short"},
    /* Too long. */
    {"+141555501000", PHONE_TOO_LONG, "phone is too long for US (+1)"},
    {"+4474001234567", PHONE_TOO_LONG, "phone is too long for GB (+44)"},
    {"+336123456789", PHONE_TOO_LONG, "phone is too long for FR (+33)"},
    {"+123456789012345", PHONE_TOO_LONG, "phone is too long for US (+1)"},
    {"+9198123456990000000", PHONE_TOO_LONG, "phone is too long for IN (+91)"},
    /* Past PHONE_INPUT_DIGITS_MAX: refused before libphonenumber. */
    {"+91981234569900000000", PHONE_TOO_LONG, "phone is too long for IN (+91)"},
    {"+4915123456789123456789012345678901234567890", PHONE_TOO_LONG, "phone is too long for DE (+49)"},
    /* Between the shortest and the longest, but no number has that length. */
    {"+6198765432109", PHONE_INVALID_LENGTH, "phone has no valid length for AU (+61)"},
    {"+90987654321", PHONE_INVALID_LENGTH, "phone has no valid length for TR (+90)"},
    /* A possible length, but not a number the country assigns. */
    {"+91009812345699", PHONE_INVALID_FOR_REGION, "phone is not a valid number for IN (+91)"},
    {"+9198123456", PHONE_INVALID_FOR_REGION, "phone is not a valid number for IN (+91)"},
    {"+447700900123", PHONE_INVALID_FOR_REGION, "phone is not a valid number for GB (+44)"},
    {"+10000000000", PHONE_INVALID_FOR_REGION, "phone is not a valid number for US (+1)"},
    {"+8190123456", PHONE_INVALID_FOR_REGION, "phone is not a valid number for JP (+81)"},
    {"+5511961234", PHONE_INVALID_FOR_REGION, "phone is not a valid number for BR (+55)"},
    {"+493012", PHONE_INVALID_FOR_REGION, "phone is not a valid number for DE (+49)"},
    {"+6141234567", PHONE_INVALID_FOR_REGION, "phone is not a valid number for AU (+61)"},
    /* No country has the code. */
    {"+999123456", PHONE_INVALID_COUNTRY_CODE, "phone has no valid country calling code"},
    {"+0919812345678", PHONE_INVALID_COUNTRY_CODE, "phone has no valid country calling code"},
    {"+00919812345678", PHONE_INVALID_COUNTRY_CODE, "phone has no valid country calling code"},
    {"+2891234567", PHONE_INVALID_COUNTRY_CODE, "phone has no valid country calling code"},
    /* Not "+" and digits: what libphonenumber alone would take, and garbage. */
    {"", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"919812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"00919812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"++919812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+91 98123 45699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+91-98123-45699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+(91)9812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {" +919812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+919812345699\n", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+919812345699;ext=12", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"tel:+919812345699", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+1800FLOWERS", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+91981234569x", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
    {"+\xd9\xa9\xd9\xa1\xd9\xa9\xd9\xa8\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4",
     PHONE_NOT_A_NUMBER, /* Arabic-Indic */
     "phone must be E.164: + then digits only"},
    {"+\xef\xbc\x99\xef\xbc\x91\xef\xbc\x99\xef\xbc\x98", PHONE_NOT_A_NUMBER, /* full-width digits */
     "phone must be E.164: + then digits only"},
    {"\xff\xfe+91", PHONE_NOT_A_NUMBER, "phone must be E.164: + then digits only"},
};

static void test_refusals(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct phone_info pi;
        enum phone_err err;
        char why[160];

        memset(&pi, 0x5a, sizeof(pi));
        err = phone_parse(c->in, &pi);
        phone_why(err, &pi, why, sizeof(why));
        if (err != c->err || strcmp(why, c->why) != 0)
            fail_msg("case %zu: %s (%s), want %s (%s)", i, phone_err_name(err), why, phone_err_name(c->err),
                     c->why);
        /* A refused number leaves nothing that could be keyed or sent. */
        assert_string_equal(pi.e164, "");
        assert_int_equal(pi.type, PHONE_TYPE_UNKNOWN);
        assert_int_equal(phone_valid(c->in), 0);
    }
    {
        struct phone_info pi;
        assert_int_equal(phone_parse(NULL, &pi), PHONE_NOT_A_NUMBER);
        assert_int_equal(phone_valid(NULL), 0);
    }
}

/* The detail never overruns its buffer, and cuts cleanly. */
static void test_why_bounds(void **state)
{
    struct phone_info pi;
    char why[12];

    (void)state;
    assert_int_equal(phone_parse("+4474001234567", &pi), PHONE_TOO_LONG);
    memset(why, 'x', sizeof(why));
    phone_why(PHONE_TOO_LONG, &pi, why, sizeof(why));
    assert_string_equal(why, "phone is to");
    phone_why(PHONE_OK, &pi, why, sizeof(why));
    assert_string_equal(why, "phone is va");
}

static void test_names(void **state)
{
    static const char *const types[PHONE_TYPE_COUNT] = {
        "unknown",         "mobile",       "fixed_line",  "fixed_line_or_mobile",
        "toll_free",       "premium_rate", "shared_cost", "voip",
        "personal_number", "pager",        "uan",         "voicemail",
    };
    int i;

    (void)state;
    for (i = 0; i < PHONE_TYPE_COUNT; i++) {
        assert_string_equal(phone_type_name((enum phone_type)i), types[i]);
        assert_int_equal(phone_type_from_name(types[i]), i);
    }
    assert_int_equal(phone_type_from_name("Mobile"), -1);
    assert_int_equal(phone_type_from_name("mobile "), -1);
    assert_int_equal(phone_type_from_name(""), -1);
    assert_int_equal(phone_type_from_name(NULL), -1);
    assert_string_equal(phone_type_name((enum phone_type)PHONE_TYPE_COUNT), "unknown");
    assert_int_equal(PHONE_TYPE_UNKNOWN, 0); /* a request never parsed is refused by the default types */
    assert_int_equal(PHONE_TYPES_DEFAULT,
                     PHONE_TYPE_BIT(PHONE_TYPE_MOBILE) | PHONE_TYPE_BIT(PHONE_TYPE_FIXED_LINE_OR_MOBILE));
    assert_string_equal(phone_err_name(PHONE_OK), "ok");
    assert_string_equal(phone_err_name(PHONE_NOT_A_NUMBER), "not_a_number");
    assert_string_equal(phone_err_name(PHONE_INVALID_COUNTRY_CODE), "invalid_country_code");
    assert_string_equal(phone_err_name(PHONE_TOO_SHORT), "too_short");
    assert_string_equal(phone_err_name(PHONE_TOO_LONG), "too_long");
    assert_string_equal(phone_err_name(PHONE_INVALID_LENGTH), "invalid_length");
    assert_string_equal(phone_err_name(PHONE_INVALID_FOR_REGION), "invalid_for_region");
    /* The longest valid number fits PHONE_MAX with its NUL. */
    assert_int_equal(strlen("+498001234567890") + 1, PHONE_MAX);
}

/* Parses from several threads at once, the first ones included, agree
 * with the single-threaded answers: the singleton and its regexp cache are
 * shared safely. */
#define PHONE_THREADS 8
#define PHONE_ROUNDS 40

static void *parse_many(void *arg)
{
    int *bad = arg, r;
    size_t i;

    for (r = 0; r < PHONE_ROUNDS; r++) {
        for (i = 0; i < sizeof(valid_cases) / sizeof(valid_cases[0]); i++) {
            struct phone_info pi;
            if (phone_parse(valid_cases[i].in, &pi) != PHONE_OK ||
                strcmp(pi.e164, valid_cases[i].e164) != 0 || pi.type != valid_cases[i].type ||
                strcmp(pi.region, valid_cases[i].region) != 0)
                (*bad)++;
        }
        for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
            struct phone_info pi;
            if (phone_parse(bad_cases[i].in, &pi) != bad_cases[i].err)
                (*bad)++;
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    pthread_t t[PHONE_THREADS];
    int bad[PHONE_THREADS] = {0}, i;

    (void)state;
    for (i = 0; i < PHONE_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, parse_many, &bad[i]), 0);
    for (i = 0; i < PHONE_THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(bad[i], 0);
    }
}

/* A parse remembered (phone.cc's memo) gives back exactly what the
 * parse gave: every byte of the result, valid or not. */
static void test_memo_hits_are_identical(void **state)
{
    /* Numbers no other test parses, so the first parse is a miss; a valid
     * one, a trunk-prefix spelling, and refusals that leave a country. */
    static const char *const inputs[] = {"+919812345611", "+9109812345611", "+4412", "+44740012345678901",
                                         "+2891234568",   "+4930123"};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        struct phone_memo_counts c0, c1, c2;
        struct phone_info first, again;
        enum phone_err e1, e2;

        memset(&first, 0x5a, sizeof(first));
        memset(&again, 0xa5, sizeof(again));
        phone_memo_stats(&c0);
        e1 = phone_parse(inputs[i], &first);
        phone_memo_stats(&c1);
        e2 = phone_parse(inputs[i], &again);
        phone_memo_stats(&c2);
        assert_int_equal(c1.misses, c0.misses + 1);
        assert_int_equal(c1.hits, c0.hits);
        assert_int_equal(c2.hits, c1.hits + 1);
        assert_int_equal(c2.misses, c1.misses);
        assert_int_equal(e1, e2);
        assert_memory_equal(&first, &again, sizeof(first));
        if (e1 != PHONE_OK) {
            assert_string_equal(again.e164, "");
            assert_int_equal(again.type, PHONE_TYPE_UNKNOWN);
        }
    }
}

/* Inputs refused before libphonenumber (not "+" and digits, or too many
 * digits) are never looked up nor remembered: the same answer each time,
 * and the memo does not see them. */
static void test_memo_skips_what_never_parses(void **state)
{
    static const char *const inputs[] = {"", "+", "919812345699", "+91 98123 45699", "+919812345699;ext=1",
                                         "+123456789012345678901234"};
    struct phone_memo_counts c0, c1;
    size_t i;
    int r;

    (void)state;
    phone_memo_stats(&c0);
    for (r = 0; r < 3; r++)
        for (i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
            struct phone_info pi;
            assert_int_equal(phone_parse(inputs[i], &pi),
                             i + 1 < sizeof(inputs) / sizeof(inputs[0]) ? PHONE_NOT_A_NUMBER : PHONE_TOO_LONG);
            assert_string_equal(pi.e164, "");
        }
    phone_memo_stats(&c1);
    assert_int_equal(c1.hits, c0.hits);
    assert_int_equal(c1.misses, c0.misses);
    assert_int_equal(c1.entries, c0.entries);
}

/* Twice as many distinct numbers as the memo holds: it never holds more
 * than its capacity, and a number evicted long ago parses right again. */
static void test_memo_bound(void **state)
{
    struct phone_memo_counts c;
    struct phone_info pi;
    unsigned long long i, n;
    char in[32];

    (void)state;
    phone_memo_stats(&c);
    assert_true(c.capacity > 0);
    n = 2 * c.capacity;
    for (i = 0; i < n; i++) {
        /* Indian mobiles +9198 then 8 digits: all valid. */
        snprintf(in, sizeof(in), "+9198%08llu", i);
        assert_int_equal(phone_parse(in, &pi), PHONE_OK);
        assert_string_equal(pi.e164, in);
    }
    phone_memo_stats(&c);
    assert_true(c.entries <= c.capacity);
    /* Nearly full: the sets fill evenly (an 8-way set-associative memo
     * after 2x its capacity of distinct keys). */
    assert_true(c.entries >= c.capacity * 9 / 10);
    assert_int_equal(phone_parse("+919800000000", &pi), PHONE_OK);
    assert_string_equal(pi.e164, "+919800000000");
    assert_string_equal(pi.region, "IN");
    assert_int_equal(pi.type, PHONE_TYPE_MOBILE);
}

static void test_mask(void **state)
{
    char out[32];

    (void)state;
    phone_mask("+919812345699", out, sizeof(out));
    assert_string_equal(out, "+9198******99");
    phone_mask("+14155550100", out, sizeof(out));
    assert_string_equal(out, "+1415*****00");
    phone_mask("+123456", out, sizeof(out));
    assert_string_equal(out, "+******");
    phone_mask("+919812345699", out, 6);
    assert_string_equal(out, "+9198");
    phone_mask(NULL, out, sizeof(out));
    assert_string_equal(out, "+");
}

/* The canonical form is a fixed point: Mexico's old national prefix and its
 * retired mobile "1" are each dropped by one libphonenumber parse, so
 * "+520113463567418" took two parses to settle (found by fuzz_phone). */
static void test_canonical_is_a_fixed_point(void **state)
{
    static const char *const spellings[] = {"+520113463567418", "+52113463567418", "+5213463567418",
                                             "+523463567418"};
    struct phone_info pi, again;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        assert_int_equal(phone_parse(spellings[i], &pi), PHONE_OK);
        assert_string_equal(pi.e164, "+523463567418");
        assert_string_equal(pi.region, "MX");
        assert_int_equal(phone_parse(pi.e164, &again), PHONE_OK);
        assert_string_equal(again.e164, pi.e164);
    }
}

int main(void)
{
    /* Threads first: they also race libphonenumber's first use. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),        cmocka_unit_test(test_valid_numbers),
        cmocka_unit_test(test_trunk_prefixes), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_why_bounds),     cmocka_unit_test(test_names),
        cmocka_unit_test(test_memo_hits_are_identical), cmocka_unit_test(test_memo_skips_what_never_parses),
        cmocka_unit_test(test_memo_bound), cmocka_unit_test(test_mask),
        cmocka_unit_test(test_canonical_is_a_fixed_point),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
