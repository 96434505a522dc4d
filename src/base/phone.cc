/*
 * phone: the only C++ in otpd and the only file that includes
 * libphonenumber. One parse per issue and verify, on the HTTP workers, at
 * about 30 us each; nothing here allocates beyond libphonenumber's own
 * temporaries, and no exception leaves this file (each entry catches all).
 */
#include "phone.h"

#include <stdio.h>
#include <string.h>

#include <exception>
#include <string>

#include <phonenumbers/phonenumber.pb.h>
#include <phonenumbers/phonenumberutil.h>

using i18n::phonenumbers::PhoneNumber;
using i18n::phonenumbers::PhoneNumberUtil;

/* Our types by libphonenumber's PhoneNumberType, which the library numbers
 * FIXED_LINE = 0 to UNKNOWN = 11. */
static const struct {
    PhoneNumberUtil::PhoneNumberType lib;
    enum phone_type ours;
} phone_types[] = {
    {PhoneNumberUtil::FIXED_LINE, PHONE_TYPE_FIXED_LINE},
    {PhoneNumberUtil::MOBILE, PHONE_TYPE_MOBILE},
    {PhoneNumberUtil::FIXED_LINE_OR_MOBILE, PHONE_TYPE_FIXED_LINE_OR_MOBILE},
    {PhoneNumberUtil::TOLL_FREE, PHONE_TYPE_TOLL_FREE},
    {PhoneNumberUtil::PREMIUM_RATE, PHONE_TYPE_PREMIUM_RATE},
    {PhoneNumberUtil::SHARED_COST, PHONE_TYPE_SHARED_COST},
    {PhoneNumberUtil::VOIP, PHONE_TYPE_VOIP},
    {PhoneNumberUtil::PERSONAL_NUMBER, PHONE_TYPE_PERSONAL_NUMBER},
    {PhoneNumberUtil::PAGER, PHONE_TYPE_PAGER},
    {PhoneNumberUtil::UAN, PHONE_TYPE_UAN},
    {PhoneNumberUtil::VOICEMAIL, PHONE_TYPE_VOICEMAIL},
    {PhoneNumberUtil::UNKNOWN, PHONE_TYPE_UNKNOWN},
};

/* Names by enum phone_type (libphonenumber's, lower case). */
static const char *const phone_type_names[PHONE_TYPE_COUNT] = {
    "unknown",         "mobile",       "fixed_line",  "fixed_line_or_mobile",
    "toll_free",       "premium_rate", "shared_cost", "voip",
    "personal_number", "pager",        "uan",         "voicemail",
};

static const char *const phone_err_names[] = {
    "ok",       "not_a_number",   "invalid_country_code", "too_short",
    "too_long", "invalid_length", "invalid_for_region",
};

static enum phone_type phone_type_of(PhoneNumberUtil::PhoneNumberType t)
{
    for (const auto &row : phone_types)
        if (row.lib == t)
            return row.ours;
    return PHONE_TYPE_UNKNOWN;
}

/* A parse error of libphonenumber as ours. */
static enum phone_err phone_parse_err(PhoneNumberUtil::ErrorType e)
{
    switch (e) {
    case PhoneNumberUtil::NO_PARSING_ERROR:
        return PHONE_OK;
    case PhoneNumberUtil::INVALID_COUNTRY_CODE_ERROR:
        return PHONE_INVALID_COUNTRY_CODE;
    case PhoneNumberUtil::TOO_SHORT_AFTER_IDD:
    case PhoneNumberUtil::TOO_SHORT_NSN:
        return PHONE_TOO_SHORT;
    case PhoneNumberUtil::TOO_LONG_NSN:
        return PHONE_TOO_LONG;
    case PhoneNumberUtil::NOT_A_NUMBER:
        break;
    }
    return PHONE_NOT_A_NUMBER;
}

/* What the length check says, as ours; PHONE_OK when the length is one
 * that full numbers of the country have. */
static enum phone_err phone_length_err(PhoneNumberUtil::ValidationResult v)
{
    switch (v) {
    case PhoneNumberUtil::IS_POSSIBLE:
        return PHONE_OK;
    case PhoneNumberUtil::INVALID_COUNTRY_CODE:
        return PHONE_INVALID_COUNTRY_CODE;
    /* Long enough for a local number only: the area code is missing. */
    case PhoneNumberUtil::IS_POSSIBLE_LOCAL_ONLY:
    case PhoneNumberUtil::TOO_SHORT:
        return PHONE_TOO_SHORT;
    case PhoneNumberUtil::TOO_LONG:
        return PHONE_TOO_LONG;
    case PhoneNumberUtil::INVALID_LENGTH:
        break;
    }
    return PHONE_INVALID_LENGTH;
}

static void phone_copy(char *out, size_t cap, const std::string &s)
{
    snprintf(out, cap, "%s", s.c_str());
}

/* After a parse error, the country of s ("+" and digits) for the detail:
 * calling codes are prefix-free, so the first 1 to 3 digits that name a
 * country are its code. */
static void phone_country_of(const PhoneNumberUtil *u, const char *s, struct phone_info *out)
{
    std::string region;
    int cc = 0;

    for (int i = 1; i <= 3 && s[i] >= '0' && s[i] <= '9'; i++) {
        cc = cc * 10 + (s[i] - '0');
        u->GetRegionCodeForCountryCode(cc, &region);
        if (region != "ZZ") {
            out->country_code = cc;
            phone_copy(out->region, sizeof(out->region), region);
            return;
        }
    }
}

/* The parse proper; may throw (std::bad_alloc), phone_parse catches. */
static enum phone_err phone_parse_lib(const char *s, struct phone_info *out)
{
    const PhoneNumberUtil *u = PhoneNumberUtil::GetInstance();
    PhoneNumber n;
    std::string region, e164;
    enum phone_err err;

    /* "ZZ": no default region, so only an international number parses. */
    if ((err = phone_parse_err(u->Parse(s, "ZZ", &n))) != PHONE_OK) {
        /* s is "+" and digits, so "not a number" means too few of them. */
        if (err == PHONE_NOT_A_NUMBER)
            err = PHONE_TOO_SHORT;
        if (err == PHONE_TOO_SHORT || err == PHONE_TOO_LONG)
            phone_country_of(u, s, out);
        return err;
    }
    out->country_code = n.country_code();
    u->GetRegionCodeForCountryCode(out->country_code, &region);
    if (region == "ZZ") {
        out->country_code = 0;
        return PHONE_INVALID_COUNTRY_CODE;
    }
    phone_copy(out->region, sizeof(out->region), region);
    if ((err = phone_length_err(u->IsPossibleNumberWithReason(n))) != PHONE_OK)
        return err;
    if (!u->IsValidNumber(n))
        return PHONE_INVALID_FOR_REGION;
    /* A valid number names its own region ("CA" rather than "US" for +1). */
    u->GetRegionCodeForNumber(n, &region);
    u->Format(n, PhoneNumberUtil::E164, &e164);
    if (e164.size() >= sizeof(out->e164))
        return PHONE_TOO_LONG; /* E.164 allows no more than 15 digits */
    phone_copy(out->region, sizeof(out->region), region);
    phone_copy(out->e164, sizeof(out->e164), e164);
    out->type = phone_type_of(u->GetNumberType(n));
    return PHONE_OK;
}

extern "C" void phone_init(void)
{
    try {
        (void)PhoneNumberUtil::GetInstance();
    } catch (const std::exception &) {
        /* Out of memory: the first parse tries again and refuses. */
    }
}

extern "C" enum phone_err phone_parse(const char *s, struct phone_info *out)
{
    struct phone_info info = {};
    enum phone_err err = PHONE_NOT_A_NUMBER;
    size_t digits;

    /* Only "+" and ASCII digits reach libphonenumber, which would also take
     * spaces, punctuation, letters ("1-800-FLOWERS"), "tel:" URIs and
     * extensions: one spelling per number is what the keys rely on. */
    if (s != NULL && s[0] == '+' && (digits = strspn(s + 1, "0123456789")) > 0 && s[1 + digits] == '\0') {
        try {
            if (digits > PHONE_INPUT_DIGITS_MAX) {
                err = PHONE_TOO_LONG;
                phone_country_of(PhoneNumberUtil::GetInstance(), s, &info);
            } else {
                err = phone_parse_lib(s, &info);
            }
        } catch (const std::exception &) {
            err = PHONE_NOT_A_NUMBER; /* out of memory: refused, never half-parsed */
        }
    }
    if (err != PHONE_OK) {
        info.e164[0] = '\0';
        info.type = PHONE_TYPE_UNKNOWN;
    }
    *out = info;
    return err;
}

extern "C" int phone_valid(const char *s)
{
    struct phone_info info;

    return phone_parse(s, &info) == PHONE_OK && strcmp(info.e164, s) == 0;
}

extern "C" void phone_why(enum phone_err err, const struct phone_info *in, char *out, size_t cap)
{
    char where[32] = "";

    if (in->region[0] != '\0' && strcmp(in->region, "001") != 0)
        snprintf(where, sizeof(where), " for %s (+%d)", in->region, in->country_code);
    else if (in->country_code > 0)
        snprintf(where, sizeof(where), " for +%d", in->country_code);
    switch (err) {
    case PHONE_OK:
        snprintf(out, cap, "phone is valid");
        return;
    case PHONE_NOT_A_NUMBER:
        snprintf(out, cap, "phone must be E.164: + then digits only");
        return;
    case PHONE_INVALID_COUNTRY_CODE:
        snprintf(out, cap, "phone has no valid country calling code");
        return;
    case PHONE_TOO_SHORT:
        snprintf(out, cap, "phone is too short%s", where);
        return;
    case PHONE_TOO_LONG:
        snprintf(out, cap, "phone is too long%s", where);
        return;
    case PHONE_INVALID_LENGTH:
        snprintf(out, cap, "phone has no valid length%s", where);
        return;
    case PHONE_INVALID_FOR_REGION:
        snprintf(out, cap, "phone is not a valid number%s", where);
        return;
    }
    snprintf(out, cap, "phone is not valid");
}

extern "C" const char *phone_err_name(enum phone_err err)
{
    size_t i = (size_t)err;

    return i < sizeof(phone_err_names) / sizeof(phone_err_names[0]) ? phone_err_names[i] : "unknown";
}

extern "C" const char *phone_type_name(enum phone_type t)
{
    size_t i = (size_t)t;

    return i < PHONE_TYPE_COUNT ? phone_type_names[i] : "unknown";
}

extern "C" int phone_type_from_name(const char *name)
{
    for (int i = 0; i < PHONE_TYPE_COUNT; i++)
        if (name != NULL && strcmp(phone_type_names[i], name) == 0)
            return i;
    return -1;
}

extern "C" int phone_region_known(const char *region)
{
    if (region == NULL)
        return 0;
    if (strcmp(region, "001") == 0)
        return 1;
    /* Two upper-case letters, then libphonenumber's own list: "UK" or
     * "XX" are well formed but no region of any number. */
    if (strlen(region) != 2 || region[0] < 'A' || region[0] > 'Z' || region[1] < 'A' || region[1] > 'Z')
        return 0;
    try {
        return PhoneNumberUtil::GetInstance()->GetCountryCodeForRegion(region) != 0;
    } catch (const std::exception &) {
        return 0;
    }
}
