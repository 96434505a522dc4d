/*
 * Unit tests of sms (src/otp/sms.c): a message's locale, app hash and
 * origin line, its style as Redis carries it, and the bound every text is
 * checked against before anything is taken.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/otp/sms.h"

static const struct cfg_template templates[] = {
    {"hi", "{code} aapka code hai"},
    {"pt-BR", "Seu codigo: {code}"},
    {"pt", "O seu codigo: {code}"},
};
#define N_TEMPLATES (sizeof(templates) / sizeof(templates[0]))

static void test_app_hash(void **state)
{
    (void)state;
    assert_true(sms_app_hash_ok("FA+9qCX9VSu"));
    assert_true(sms_app_hash_ok("abcdefghij/"));
    assert_false(sms_app_hash_ok("FA+9qCX9VS"));   /* 10 */
    assert_false(sms_app_hash_ok("FA+9qCX9VSuu")); /* 12 */
    assert_false(sms_app_hash_ok("FA-9qCX9VSu"));  /* not base64 */
    assert_false(sms_app_hash_ok("FA 9qCX9VSu"));
    assert_false(sms_app_hash_ok(""));
    assert_false(sms_app_hash_ok(NULL));
}

static void test_locale_picks_exact_then_language(void **state)
{
    (void)state;
    assert_string_equal(sms_locale(templates, N_TEMPLATES, "hi")->locale, "hi");
    assert_string_equal(sms_locale(templates, N_TEMPLATES, "HI")->locale, "hi");
    assert_string_equal(sms_locale(templates, N_TEMPLATES, "pt-br")->locale, "pt-BR");
    assert_string_equal(sms_locale(templates, N_TEMPLATES, "pt-PT")->locale, "pt");
    assert_string_equal(sms_locale(templates, N_TEMPLATES, "hi_IN")->locale, "hi");
    assert_null(sms_locale(templates, N_TEMPLATES, "en"));
    assert_null(sms_locale(templates, N_TEMPLATES, "h"));   /* a prefix of a language is not it */
    assert_null(sms_locale(templates, N_TEMPLATES, "hin")); /* nor a longer one */
    assert_null(sms_locale(templates, N_TEMPLATES, ""));
    assert_null(sms_locale(templates, N_TEMPLATES, NULL));
    assert_null(sms_locale(templates, 0, "hi"));
}

static void test_style_round_trip(void **state)
{
    struct sms_style s = {"pt-BR", "FA+9qCX9VSu", "login.example.com", "Acme Login"}, back;
    char text[SMS_STYLE_MAX + 1];

    (void)state;
    sms_style_text(&s, text, sizeof(text));
    sms_style_parse(text, &back);
    assert_string_equal(back.locale, "pt-BR");
    assert_string_equal(back.app_hash, "FA+9qCX9VSu");
    assert_string_equal(back.origin, "login.example.com");
    assert_string_equal(back.name, "Acme Login");
    /* A style of three fields, as before names, still reads. */
    sms_style_parse("hi\037\037a.example", &back);
    assert_string_equal(back.locale, "hi");
    assert_string_equal(back.origin, "a.example");
    assert_string_equal(back.name, "");
    memset(&s, 0, sizeof(s));
    sms_style_text(&s, text, sizeof(text));
    assert_string_equal(text, ""); /* the default style costs Redis nothing */
    snprintf(s.origin, sizeof(s.origin), "%s", "a.example");
    sms_style_text(&s, text, sizeof(text));
    sms_style_parse(text, &back);
    assert_string_equal(back.locale, "");
    assert_string_equal(back.app_hash, "");
    assert_string_equal(back.origin, "a.example");
}

static void test_a_text_that_is_no_style_reads_as_the_default(void **state)
{
    static const char *const bad[] = {"", "hi", "hi\037x", "hi\037short\037o", "hi\037\037o\037n\037more",
                                      "abcdefghijklmnopq\037\037o"};
    struct sms_style s;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&s, 'z', sizeof(s));
        sms_style_parse(bad[i], &s);
        assert_string_equal(s.locale, "");
        assert_string_equal(s.app_hash, "");
        assert_string_equal(s.origin, "");
    }
}

static void test_render_hash_then_origin_last(void **state)
{
    struct sms_style s = {"", "FA+9qCX9VSu", "login.example.com", ""};
    char out[480];

    (void)state;
    assert_int_equal(sms_render("{code} is your code", &s, "123456", 5, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "123456 is your code\nFA+9qCX9VSu\n@login.example.com #123456");
    s.app_hash[0] = '\0';
    assert_int_equal(sms_render("Code {code}, {minutes} min", &s, "0042", 4, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "Code 0042, 4 min\n@login.example.com #0042");
    s.origin[0] = '\0';
    assert_int_equal(sms_render("Code {code}", &s, "0042", 4, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "Code 0042");
}

static void test_name_rendered_once(void **state)
{
    struct sms_style s = {"", "", "", "Acme {code}"};
    char out[480];

    (void)state;
    assert_int_equal(sms_render("Your {name} code: {code}", &s, "123456", 5, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "Your Acme {code} code: 123456");
    s.name[0] = '\0';
    assert_int_equal(sms_render("Your {name} code: {code}", &s, "123456", 5, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "Your  code: 123456");
    /* The bound counts a name at its longest. */
    assert_int_equal(sms_len_max("{name}{code}", &s, 6), CFG_MSG_NAME_MAX + 6);
}

static void test_len_max_bounds_every_render(void **state)
{
    struct sms_style s = {"", "FA+9qCX9VSu", "login.example.com", ""};
    const char *tmpl = "{code} expires in {minutes} minutes: {code}";
    char out[480];
    size_t max = sms_len_max(tmpl, &s, 10);

    (void)state;
    assert_int_equal(sms_render(tmpl, &s, "0123456789", 60, out, sizeof(out)), OTP_OK);
    assert_int_equal(strlen(out), max); /* the longest: 10 digits, 60 minutes */
    assert_int_equal(sms_render(tmpl, &s, "0123456789", 60, out, max + 1), OTP_OK);
    assert_int_equal(sms_render(tmpl, &s, "0123456789", 60, out, max), OTP_EINVAL); /* never cut */
    s.origin[0] = '\0';
    assert_int_equal(sms_render(tmpl, &s, "0123456789", 60, out, sizeof(out)), OTP_OK);
    assert_int_equal(strlen(out), sms_len_max(tmpl, &s, 10));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_app_hash),
        cmocka_unit_test(test_locale_picks_exact_then_language),
        cmocka_unit_test(test_style_round_trip),
        cmocka_unit_test(test_a_text_that_is_no_style_reads_as_the_default),
        cmocka_unit_test(test_render_hash_then_origin_last),
        cmocka_unit_test(test_name_rendered_once),
        cmocka_unit_test(test_len_max_bounds_every_render),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
