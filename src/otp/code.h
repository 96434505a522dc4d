/*
 * code: the cryptography of one-time codes (docs/architecture.md, "A
 * request's path"). A code is never stored: it is derived from the server
 * secret and the verification id. Redis holds only a keyed hash of it. The
 * only home of libsodium, and of libcrypto's HMAC-SHA1 (Twilio signs its
 * callbacks with it; libsodium has no SHA-1).
 */
#ifndef OTPD_CODE_H
#define OTPD_CODE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/rc.h"

#define CODE_ID_LEN 32   /* hex characters of a 128-bit id */
#define CODE_HASH_LEN 16 /* hex characters of a code's 64-bit keyed hash: ample to compare one guess,
                          * and small in Redis, where every active phone holds one */
#define CODE_TAG_LEN 32  /* hex characters of a 128-bit callback tag */
#define CODE_MAX_DIGITS 10

/* Keys derived from the secret; opaque outside code.c. */
struct code_keys;

/* Initializes libsodium and derives the keys. Returns NULL on failure.
 * The caller frees with code_keys_free, which wipes them. */
struct code_keys *code_keys_new(const unsigned char *secret, size_t secret_len);
void code_keys_free(struct code_keys *k);

/* Writes a fresh random 128-bit id as 32 lower-case hex characters and NUL
 * into out (CODE_ID_LEN + 1 bytes). */
void code_new_id(char *out);

/* Derives the code of verification id: digits decimal digits and NUL into
 * out (digits + 1 bytes). Unbiased: HMAC-SHA256 output with rejection. */
void code_derive(const struct code_keys *k, const char *id, int digits, char *out);

/* The keyed hash of code for phone, as CODE_HASH_LEN hex and NUL in out.
 * Used at issue (of the derived code) and at verify (of the guess). */
void code_hash(const struct code_keys *k, const char *phone, const char *code, char *out);

/* A keyed hash of a short text (hex, NUL, CODE_TAG_LEN + 1 bytes), under the
 * Idempotency-Key request-hash key. */
void code_tag(const struct code_keys *k, const char *msg_id, char *out);

/* The tag of a delivery-report URL: HMAC-SHA256 under its own subkey of
 * provider ("kannel"), message id and expiry (Unix seconds as decimal text),
 * as CODE_TAG_LEN hex and NUL. code_report_tag_ok compares in constant time. */
void code_report_tag(const struct code_keys *k, const char *provider, const char *msg_id, const char *exp_s,
                     char *out);
int code_report_tag_ok(const struct code_keys *k, const char *provider, const char *msg_id, const char *exp_s,
                       const char *tag);

/* 1 when sig is Twilio's X-Twilio-Signature of data (len bytes: the URL and
 * the sorted form parameters): base64 of HMAC-SHA1 under the auth token.
 * Compares in constant time; 0 for a NULL or empty token or signature. */
int code_twilio_sig_ok(const char *token, const char *data, size_t len, const char *sig);

/* The name of the verification of (caller api_key, purpose) inside a
 * phone's Redis hash: CODE_SCOPE_LEN hex characters and NUL in out, keyed
 * with the secret, so no caller can choose a purpose that meets another
 * caller's field. */
#define CODE_SCOPE_LEN 12
void code_scope(const struct code_keys *k, const char *api_key, const char *purpose, char *out);

/* Fills out (cap bytes) from tmpl, replacing {code} and {minutes} ({name}
 * with nothing). Returns OTP_EINVAL when the result does not fit. */
/* What {minutes} says for a code with life_ms left when its SMS is made:
 * the whole minutes left, rounded down, so the text never promises more
 * than the code has (266 s left says 4, not 5); a code CODE_MINUTES_SLACK_MS
 * short of a whole minute counts it (a fresh 5-minute code, rendered a few
 * ms after it was made, still says 5); never less than 1. */
#define CODE_MINUTES_SLACK_MS 10000
int code_minutes(int64_t life_ms);

enum otp_rc code_render(const char *tmpl, const char *code, int minutes, char *out, size_t cap);
/* code_render with {name} as name (a Verify service's name; "" for none):
 * one pass, so no placeholder inside the name is ever expanded. */
enum otp_rc code_render_named(const char *tmpl, const char *code, int minutes, const char *name, char *out,
                              size_t cap);

#endif
