/*
 * phone: the only C++ in otpd and the only file that includes
 * libphonenumber. One parse per issue and verify, on the HTTP workers, at
 * about 30 us each; nothing here allocates beyond libphonenumber's own
 * temporaries, and no exception leaves this file (each entry catches all).
 *
 * A flood asks about the same numbers again and again (a profile of hot
 * refusals had 14 % of otpd's CPU in libphonenumber's ICU regexes), so
 * parses are remembered: the memo below maps the exact input text to the
 * whole result, in fixed memory, so a repeat costs a hash and a compare.
 */
#include "phone.h"
#include "fnv.h"

#include <pthread.h>
#include <stdint.h>
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

/*
 * The memo: PHONE_MEMO_ENTRIES results in fixed memory (about 1 MB),
 * set-associative. An input's hash picks its shard (one lock each, so
 * the HTTP workers rarely meet) and a set of PHONE_MEMO_WAYS entries in
 * it; a set evicts its least recently used entry. A result depends on the
 * input text alone (libphonenumber's metadata is fixed for the process),
 * so an entry never goes stale. Remembered: every input that reaches
 * libphonenumber ("+" and 1 to PHONE_INPUT_DIGITS_MAX digits), valid or
 * not; never an input refused before it (cheaper than a lookup), nor a
 * parse that threw (out of memory: the next one tries again).
 */
#define PHONE_MEMO_SHARDS 16
#define PHONE_MEMO_SETS 128 /* per shard */
#define PHONE_MEMO_WAYS 8
#define PHONE_MEMO_ENTRIES (PHONE_MEMO_SHARDS * PHONE_MEMO_SETS * PHONE_MEMO_WAYS)
/* "+", the digits and the NUL. */
#define PHONE_MEMO_KEY (1 + PHONE_INPUT_DIGITS_MAX + 1)

struct phone_memo_entry {
    char key[PHONE_MEMO_KEY]; /* the input; "" while the entry is free */
    uint32_t used;            /* the shard's tick at the last use: the least is evicted */
    enum phone_err err;
    struct phone_info info;
};

struct phone_memo_shard {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    uint32_t tick = 0; /* wraps after 4 G uses: an eviction is then merely not the LRU's */
    uint64_t hits = 0, misses = 0, entries = 0;
    struct phone_memo_entry e[PHONE_MEMO_SETS][PHONE_MEMO_WAYS] = {};
};

static struct phone_memo_shard phone_memo[PHONE_MEMO_SHARDS];

static uint64_t phone_memo_hash(const char *s, size_t n)
{
    return fnv_add(FNV_BASIS, s, n) * 11400714819323198485ULL; /* spread into the top bits */
}

static struct phone_memo_entry *phone_memo_set(uint64_t h, struct phone_memo_shard **shard)
{
    *shard = &phone_memo[h >> 60];                     /* 16 shards: the top 4 bits */
    return (*shard)->e[(h >> 53) & (PHONE_MEMO_SETS - 1)]; /* the next 7 */
}

/* Copies the remembered result of s (n bytes) to *err and *out; 1 when
 * there was one, else 0. */
static int phone_memo_get(const char *s, size_t n, enum phone_err *err, struct phone_info *out)
{
    struct phone_memo_shard *sh;
    struct phone_memo_entry *set = phone_memo_set(phone_memo_hash(s, n), &sh);
    int found = 0;

    pthread_mutex_lock(&sh->mu);
    for (int w = 0; w < PHONE_MEMO_WAYS; w++)
        if (memcmp(set[w].key, s, n + 1) == 0) {
            set[w].used = ++sh->tick;
            *err = set[w].err;
            *out = set[w].info;
            found = 1;
            break;
        }
    if (found)
        sh->hits++;
    else
        sh->misses++;
    pthread_mutex_unlock(&sh->mu);
    return found;
}

/* Remembers the result of s (n bytes), in place of its set's least
 * recently used entry when the set is full. */
static void phone_memo_put(const char *s, size_t n, enum phone_err err, const struct phone_info *info)
{
    struct phone_memo_shard *sh;
    struct phone_memo_entry *set = phone_memo_set(phone_memo_hash(s, n), &sh), *victim = NULL;
    int w;

    pthread_mutex_lock(&sh->mu);
    for (w = 0; w < PHONE_MEMO_WAYS; w++) {
        if (memcmp(set[w].key, s, n + 1) == 0)
            break; /* another worker put it meanwhile: the same result */
        /* A free entry first, else the least recently used. */
        if (victim == NULL || (victim->key[0] != '\0' && (set[w].key[0] == '\0' || set[w].used < victim->used)))
            victim = &set[w];
    }
    if (w == PHONE_MEMO_WAYS) {
        if (victim->key[0] == '\0')
            sh->entries++;
        memcpy(victim->key, s, n + 1);
        victim->used = ++sh->tick;
        victim->err = err;
        victim->info = *info;
    }
    pthread_mutex_unlock(&sh->mu);
}

extern "C" void phone_memo_stats(struct phone_memo_counts *out)
{
    memset(out, 0, sizeof(*out));
    out->capacity = PHONE_MEMO_ENTRIES;
    for (auto &sh : phone_memo) {
        pthread_mutex_lock(&sh.mu);
        out->hits += sh.hits;
        out->misses += sh.misses;
        out->entries += sh.entries;
        pthread_mutex_unlock(&sh.mu);
    }
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
    PhoneNumberUtil::PhoneNumberType type;
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
    /* libphonenumber's IsValidNumber is GetNumberType's match against the
     * type patterns, answered as "not UNKNOWN" (GetNumberTypeHelper in
     * both): asking both ran those ICU regexes twice, a tenth of a
     * distinct-phone verify's CPU. */
    type = u->GetNumberType(n);
    if (type == PhoneNumberUtil::UNKNOWN)
        return PHONE_INVALID_FOR_REGION;
    /* A valid number names its own region ("CA" rather than "US" for +1). */
    u->GetRegionCodeForNumber(n, &region);
    u->Format(n, PhoneNumberUtil::E164, &e164);
    if (e164.size() >= sizeof(out->e164))
        return PHONE_TOO_LONG; /* E.164 allows no more than 15 digits */
    phone_copy(out->region, sizeof(out->region), region);
    phone_copy(out->e164, sizeof(out->e164), e164);
    out->type = phone_type_of(type);
    return PHONE_OK;
}

/*
 * The parse, to a fixed point: the canonical form must parse to itself.
 * libphonenumber drops one national prefix a parse ("+520113463567418"
 * loses "01" and keeps Mexico's retired mobile "1": "+5213463567418", whose
 * own parse drops the "1": "+523463567418"), so a form that would change
 * again is parsed again, a few times at most. A form that does not settle,
 * or that no longer parses, is refused: one number, one key.
 */
#define PHONE_CANON_ROUNDS 3
static enum phone_err phone_parse_canon(const char *s, struct phone_info *out)
{
    const struct phone_info blank = *out;
    char form[PHONE_MAX];
    enum phone_err err = phone_parse_lib(s, out);
    int round;

    for (round = 0; err == PHONE_OK && strcmp(out->e164, s) != 0; round++) {
        if (round == PHONE_CANON_ROUNDS) {
            *out = blank;
            return PHONE_INVALID_FOR_REGION;
        }
        snprintf(form, sizeof(form), "%s", out->e164);
        s = form;
        *out = blank;
        err = phone_parse_lib(s, out);
    }
    return err;
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
            } else if (phone_memo_get(s, 1 + digits, &err, &info)) {
                /* As remembered: e164 and type are already cleared after an error. */
            } else {
                err = phone_parse_canon(s, &info);
                if (err != PHONE_OK) {
                    info.e164[0] = '\0';
                    info.type = PHONE_TYPE_UNKNOWN;
                }
                phone_memo_put(s, 1 + digits, err, &info);
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
