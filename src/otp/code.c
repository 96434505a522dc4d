/*
 * code: ids, codes, keyed hashes and message text. Called once or twice per
 * request; HMAC-SHA256 dominates and costs a few microseconds.
 */
#include "code.h"

#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sodium.h>

struct code_keys {
    unsigned char code_key[crypto_auth_hmacsha256_KEYBYTES]; /* derives codes */
    unsigned char hash_key[crypto_auth_hmacsha256_KEYBYTES]; /* hashes codes for Redis */
    unsigned char tag_key[crypto_auth_hmacsha256_KEYBYTES];  /* keys Idempotency-Key request hashes */
    unsigned char report_key[crypto_auth_hmacsha256_KEYBYTES]; /* signs delivery-report URLs */
    uint64_t serial; /* this set's number among all made (code_scope's memo), from 1 */
};

/* Numbers each key set made, so that a memo of one is never taken for
 * another's, even at the same address after a free. */
static atomic_uint_fast64_t code_keys_made;

/* One purpose-separated subkey: HMAC-SHA256(secret, label). */
static void code_subkey(const unsigned char *secret, size_t len, const char *label, unsigned char *out)
{
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, secret, len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_final(&st, out);
}

struct code_keys *code_keys_new(const unsigned char *secret, size_t secret_len)
{
    struct code_keys *k;

    if (sodium_init() < 0 || (k = calloc(1, sizeof(*k))) == NULL)
        return NULL;
    code_subkey(secret, secret_len, "otpd/v1/code", k->code_key);
    code_subkey(secret, secret_len, "otpd/v1/hash", k->hash_key);
    code_subkey(secret, secret_len, "otpd/v1/tag", k->tag_key);
    code_subkey(secret, secret_len, "otpd/v2/report", k->report_key);
    k->serial = atomic_fetch_add(&code_keys_made, 1) + 1;
    return k;
}

void code_keys_free(struct code_keys *k)
{
    if (k == NULL)
        return;
    sodium_memzero(k, sizeof(*k));
    free(k);
}

/*
 * Ids come from a per-thread pool of CODE_POOL_IDS ids at a time: a fresh
 * 256-bit key from the kernel (randombytes_buf, one getrandom) expanded
 * with ChaCha20 (randombytes_buf_deterministic). A getrandom per id was
 * 1.6 % of a distinct-phone verify's CPU (each request takes one or three
 * ids). An id is wiped from the pool as it is handed out, and the key as
 * soon as it is used. A fork's child forgets the pool of the thread that
 * forked (the only thread it has), so parent and child never hand out the
 * same ids.
 */
#define CODE_POOL_IDS 256
static _Thread_local unsigned char code_pool[CODE_POOL_IDS][CODE_ID_LEN / 2];
static _Thread_local size_t code_pool_next = CODE_POOL_IDS; /* CODE_POOL_IDS: empty */
static pthread_once_t code_pool_once = PTHREAD_ONCE_INIT;

static void code_pool_forget(void)
{
    code_pool_next = CODE_POOL_IDS;
}

static void code_pool_init(void)
{
    pthread_atfork(NULL, NULL, code_pool_forget);
}

void code_new_id(char *out)
{
    unsigned char seed[randombytes_SEEDBYTES];

    pthread_once(&code_pool_once, code_pool_init);
    if (code_pool_next == CODE_POOL_IDS) {
        randombytes_buf(seed, sizeof(seed));
        randombytes_buf_deterministic(code_pool, sizeof(code_pool), seed);
        sodium_memzero(seed, sizeof(seed));
        code_pool_next = 0;
    }
    sodium_bin2hex(out, CODE_ID_LEN + 1, code_pool[code_pool_next], CODE_ID_LEN / 2);
    sodium_memzero(code_pool[code_pool_next], CODE_ID_LEN / 2);
    code_pool_next++;
}

void code_derive(const struct code_keys *k, const char *id, int digits, char *out)
{
    unsigned char block[crypto_auth_hmacsha256_BYTES];
    uint64_t modulus = 1, v = 0, bound;
    uint32_t counter;
    int i, found = 0;

    for (i = 0; i < digits; i++)
        modulus *= 10;
    /* The largest multiple of modulus that fits: values at or above it are
     * rejected so that every code is equally likely. */
    bound = UINT64_MAX - UINT64_MAX % modulus;
    for (counter = 0; !found; counter++) {
        crypto_auth_hmacsha256_state st;
        unsigned char ctr[4] = {(unsigned char)(counter >> 24), (unsigned char)(counter >> 16),
                                (unsigned char)(counter >> 8), (unsigned char)counter};
        crypto_auth_hmacsha256_init(&st, k->code_key, sizeof(k->code_key));
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)id, strlen(id));
        crypto_auth_hmacsha256_update(&st, ctr, sizeof(ctr));
        crypto_auth_hmacsha256_final(&st, block);
        for (i = 0; i < 4 && !found; i++) {
            int j;
            v = 0;
            for (j = 0; j < 8; j++)
                v = v << 8 | block[i * 8 + j];
            found = v < bound;
        }
    }
    v %= modulus;
    for (i = digits - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
    out[digits] = '\0';
    sodium_memzero(block, sizeof(block));
}

/* HMAC-SHA256 of a and b, separated by a NUL, under key; its first hex_len / 2
 * bytes as hex_len hex characters and a NUL. */
static void code_mac_hex(const unsigned char *key, const char *a, const char *b, char *out, size_t hex_len)
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, key, crypto_auth_hmacsha256_KEYBYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)a, strlen(a) + 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)b, strlen(b));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, hex_len + 1, mac, hex_len / 2);
}

void code_hash(const struct code_keys *k, const char *phone, const char *code, char *out)
{
    code_mac_hex(k->hash_key, phone, code, out, CODE_HASH_LEN);
}

void code_tag(const struct code_keys *k, const char *msg_id, char *out)
{
    code_mac_hex(k->tag_key, "dlr", msg_id, out, CODE_TAG_LEN);
}

/* Each thread remembers its last scope: a caller and purpose rarely
 * change between one request and the next, and the HMAC was a tenth of
 * otpd's own instructions on a distinct-phone verify (two of them, this
 * and code_hash). Inputs too long for the memo are hashed every time.
 * CODE_SCOPE_IN is the room code_scope's HMAC input has: "scope", 0x1f,
 * the key and its NUL. */
#define CODE_SCOPE_IN 64
#define CODE_SCOPE_MEMO_PURPOSE 128
static _Thread_local struct {
    uint64_t serial; /* the key set's; 0: empty */
    char api_key[CODE_SCOPE_IN - 6], purpose[CODE_SCOPE_MEMO_PURPOSE];
    char scope[CODE_SCOPE_LEN + 1];
} code_scope_memo;

void code_scope(const struct code_keys *k, const char *api_key, const char *purpose, char *out)
{
    char a[CODE_SCOPE_IN];
    int fits = strlen(api_key) < sizeof(code_scope_memo.api_key) && strlen(purpose) < CODE_SCOPE_MEMO_PURPOSE;

    if (fits && code_scope_memo.serial == k->serial && strcmp(code_scope_memo.api_key, api_key) == 0 &&
        strcmp(code_scope_memo.purpose, purpose) == 0) {
        memcpy(out, code_scope_memo.scope, CODE_SCOPE_LEN + 1);
        return;
    }
    /* The 0x1f keeps this input apart from code_tag's "dlr". */
    snprintf(a, sizeof(a), "scope\x1f%s", api_key);
    code_mac_hex(k->tag_key, a, purpose, out, CODE_SCOPE_LEN);
    if (fits) {
        code_scope_memo.serial = k->serial;
        memcpy(code_scope_memo.api_key, api_key, strlen(api_key) + 1);
        memcpy(code_scope_memo.purpose, purpose, strlen(purpose) + 1);
        memcpy(code_scope_memo.scope, out, CODE_SCOPE_LEN + 1);
    }
}

void code_report_tag(const struct code_keys *k, const char *provider, const char *msg_id, const char *exp_s,
                     char *out)
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;

    /* NUL-separated, so no two (provider, id, expiry) triples run together. */
    crypto_auth_hmacsha256_init(&st, k->report_key, sizeof(k->report_key));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)provider, strlen(provider) + 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg_id, strlen(msg_id) + 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)exp_s, strlen(exp_s));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, CODE_TAG_LEN + 1, mac, CODE_TAG_LEN / 2);
}

int code_report_tag_ok(const struct code_keys *k, const char *provider, const char *msg_id, const char *exp_s,
                       const char *tag)
{
    char want[CODE_TAG_LEN + 1];

    if (tag == NULL || strlen(tag) != CODE_TAG_LEN)
        return 0;
    code_report_tag(k, provider, msg_id, exp_s, want);
    return sodium_memcmp(want, tag, CODE_TAG_LEN) == 0;
}

int code_twilio_sig_ok(const char *token, const char *data, size_t len, const char *sig)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char want[sodium_base64_ENCODED_LEN(EVP_MAX_MD_SIZE, sodium_base64_VARIANT_ORIGINAL)];
    size_t want_len;

    if (token == NULL || token[0] == '\0' || sig == NULL ||
        HMAC(EVP_sha1(), token, (int)strlen(token), (const unsigned char *)data, len, mac, &n) == NULL)
        return 0;
    sodium_bin2base64(want, sizeof(want), mac, n, sodium_base64_VARIANT_ORIGINAL);
    want_len = strlen(want);
    return strlen(sig) == want_len && sodium_memcmp(want, sig, want_len) == 0;
}

int code_minutes(int64_t life_ms)
{
    int64_t m = (life_ms + CODE_MINUTES_SLACK_MS) / 60000;

    return m < 1 ? 1 : m > INT_MAX ? INT_MAX : (int)m;
}

enum otp_rc code_render(const char *tmpl, const char *code, int minutes, char *out, size_t cap)
{
    return code_render_named(tmpl, code, minutes, "", out, cap);
}

enum otp_rc code_render_named(const char *tmpl, const char *code, int minutes, const char *name, char *out,
                              size_t cap)
{
    char mins[16];
    size_t n = 0;

    if (cap == 0)
        return OTP_EINVAL;
    snprintf(mins, sizeof(mins), "%d", minutes);
    while (*tmpl) {
        const char *piece = NULL;
        size_t skip = 1, len = 1;
        if (strncmp(tmpl, "{code}", 6) == 0)
            piece = code, skip = 6;
        else if (strncmp(tmpl, "{minutes}", 9) == 0)
            piece = mins, skip = 9;
        else if (strncmp(tmpl, "{name}", 6) == 0)
            piece = name, skip = 6;
        else
            piece = tmpl;
        if (piece != tmpl)
            len = strlen(piece);
        if (n + len >= cap)
            return OTP_EINVAL;
        memcpy(out + n, piece, len);
        n += len;
        tmpl += skip;
    }
    out[n] = '\0';
    return OTP_OK;
}
