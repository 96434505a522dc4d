/*
 * phone: the one parse of a phone number (docs/config.md, "Phone numbers"),
 * through libphonenumber. Its C++ lives in phone.cc alone; every other
 * file sees this C interface. A number arrives in E.164 ("+" and digits);
 * the parse says whether it is valid for its country and why not, and
 * gives its canonical E.164 form (a trunk prefix dropped: "+4407400123456"
 * is "+447400123456"), its region and its type. Everything downstream keys,
 * prices, limits, logs, stores and sends the canonical form only.
 *
 * Thread-safe: libphonenumber's PhoneNumberUtil is a leaky singleton made
 * once under pthread_once (Debian's build uses its POSIX locks), and the
 * calls made here are const and lock its regular-expression cache. No
 * call prints (libphonenumber logs to its NullLogger) or throws. A parse
 * costs about 30 us; the first call loads the metadata (about 7 ms), so
 * phone_init runs it at start-up.
 */
#ifndef OTPD_PHONE_H
#define OTPD_PHONE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest E.164 number, "+" and 15 digits, and its NUL. */
#define PHONE_MAX 17

/* Digits after the "+" beyond which an input is too long without asking
 * libphonenumber: 15, a trunk prefix and slack for "00" spellings. */
#define PHONE_INPUT_DIGITS_MAX 20

/* A region code and its NUL: ISO 3166 alpha-2 ("IN", "GB"), or "001" for
 * a non-geographic number (+800, +882, ...). */
#define PHONE_REGION_MAX 4

/*
 * A number's type, libphonenumber's PhoneNumberType; the names (for
 * phone.types and logs) are libphonenumber's in lower case. UNKNOWN is 0,
 * so a request that never went through phone_parse counts as unknown and
 * is refused by the default phone.types.
 */
enum phone_type {
    PHONE_TYPE_UNKNOWN = 0,
    PHONE_TYPE_MOBILE,
    PHONE_TYPE_FIXED_LINE,
    PHONE_TYPE_FIXED_LINE_OR_MOBILE,
    PHONE_TYPE_TOLL_FREE,
    PHONE_TYPE_PREMIUM_RATE,
    PHONE_TYPE_SHARED_COST,
    PHONE_TYPE_VOIP,
    PHONE_TYPE_PERSONAL_NUMBER,
    PHONE_TYPE_PAGER,
    PHONE_TYPE_UAN,
    PHONE_TYPE_VOICEMAIL,
};
#define PHONE_TYPE_COUNT 12

/* A set of types, one bit (1u << type) each: phone.types. */
#define PHONE_TYPE_BIT(t) (1u << (unsigned)(t))
#define PHONE_TYPES_DEFAULT                                                                                  \
    (PHONE_TYPE_BIT(PHONE_TYPE_MOBILE) | PHONE_TYPE_BIT(PHONE_TYPE_FIXED_LINE_OR_MOBILE))

/* Why a number is refused. */
enum phone_err {
    PHONE_OK = 0,
    PHONE_NOT_A_NUMBER,         /* not "+" then digits */
    PHONE_INVALID_COUNTRY_CODE, /* no country has that calling code */
    PHONE_TOO_SHORT,            /* shorter than every number of its country */
    PHONE_TOO_LONG,             /* longer than every number of its country */
    PHONE_INVALID_LENGTH,       /* between the two, but no number of its country has that length */
    PHONE_INVALID_FOR_REGION,   /* a possible length, but not a number its country assigns */
};

/* What a parse found. After an error only what is known is set: the
 * country code and its main region once the code is known, else 0 and "". */
struct phone_info {
    char e164[PHONE_MAX];          /* canonical E.164; "" unless PHONE_OK */
    char region[PHONE_REGION_MAX]; /* "IN", "001"; "" when the country code is unknown */
    int country_code;              /* 91; 0 when unknown */
    enum phone_type type;          /* UNKNOWN unless PHONE_OK */
};

/* Loads libphonenumber's metadata now rather than on the first request.
 * Optional; safe to call more than once and from any thread. */
void phone_init(void);

/* Parses s, which must be "+" then digits only (no spaces, letters,
 * extensions). Fills *out and returns PHONE_OK when s is a valid number
 * for its country, else the reason. NULL s is PHONE_NOT_A_NUMBER. */
enum phone_err phone_parse(const char *s, struct phone_info *out);

/* 1 when s is a valid number already in its canonical form; else 0. */
int phone_valid(const char *s);

/* Writes a sentence for people saying why the parse of *in failed (err),
 * naming the country when known: "phone is too short for GB (+44)". */
void phone_why(enum phone_err err, const struct phone_info *in, char *out, size_t cap);

/* The lower-case name of err ("too_short"), or of a type ("mobile"). */
const char *phone_err_name(enum phone_err err);
const char *phone_type_name(enum phone_type t);

/* The type named name, or -1 when no type has that name. */
int phone_type_from_name(const char *name);

/* 1 when region is a region code a parse can give: one libphonenumber
 * supports ("IN", "GB", upper case) or "001" (non-geographic numbers);
 * else 0. For config checks (countries); not on a request path. */
int phone_region_known(const char *region);

/* The memo of parses (phone.cc): what a repeated input costs is a hash
 * lookup. hits and misses count lookups (inputs that reach libphonenumber
 * only); entries is how many results it holds, never above capacity. */
struct phone_memo_counts {
    unsigned long long hits, misses, entries, capacity;
};
void phone_memo_stats(struct phone_memo_counts *out);

/* phone for a log line: the '+', the first 4 digits, stars, and the last
 * 2 ("+4474******56"); a number of 6 digits or fewer is all stars after
 * the '+'. Never the whole number. Pure C (phone_mask.c). */
void phone_mask(const char *phone, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
