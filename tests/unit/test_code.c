/*
 * Unit tests of the code module: random ids, derived codes (deterministic,
 * exact length, leading zeros kept, keyed, and uniform by a loose
 * chi-square check), keyed hashes, callback tags and message templates,
 * including the exact buffer boundary of code_render. Known answers pin the
 * construction itself: a code is re-derived from its id by whichever build
 * runs at verify time, so codes, hashes and tags must not change across
 * versions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/otp/code.h"

#define SECRET_A "0123456789abcdef0123456789abcdef"
#define SECRET_B "0123456789abcdef0123456789abcdeF"

/* Both key sets, made once for the group. */
struct fixture {
    struct code_keys *a;
    struct code_keys *b;
};

static int setup(void **state)
{
    static struct fixture f;

    f.a = code_keys_new((const unsigned char *)SECRET_A, strlen(SECRET_A));
    f.b = code_keys_new((const unsigned char *)SECRET_B, strlen(SECRET_B));
    if (f.a == NULL || f.b == NULL)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    code_keys_free(f->a);
    code_keys_free(f->b);
    return 0;
}

/* 1 when s is exactly n characters from set. */
static int all_of(const char *s, size_t n, const char *set)
{
    return strlen(s) == n && strspn(s, set) == n;
}

static void test_keys_free_null(void **state)
{
    (void)state;
    code_keys_free(NULL);
}

static void test_new_id(void **state)
{
    char ids[64][CODE_ID_LEN + 2];
    int i, j;

    (void)state;
    for (i = 0; i < 64; i++) {
        memset(ids[i], 'X', sizeof(ids[i]));
        code_new_id(ids[i]);
        assert_true(all_of(ids[i], CODE_ID_LEN, "0123456789abcdef"));
        assert_int_equal(ids[i][CODE_ID_LEN + 1], 'X'); /* nothing past the NUL */
    }
    for (i = 0; i < 64; i++)
        for (j = i + 1; j < 64; j++)
            assert_string_not_equal(ids[i], ids[j]);
}

/* Ids across several refills of a thread's pool (256 ids each) are all
 * distinct: a refill neither repeats the last pool nor skips its start. */
static void test_new_id_across_refills(void **state)
{
    static char ids[600][CODE_ID_LEN + 1];
    int i, j;

    (void)state;
    for (i = 0; i < 600; i++) {
        code_new_id(ids[i]);
        assert_true(all_of(ids[i], CODE_ID_LEN, "0123456789abcdef"));
    }
    for (i = 0; i < 600; i++)
        for (j = i + 1; j < 600; j++)
            if (strcmp(ids[i], ids[j]) == 0)
                fail_msg("ids %d and %d are both %s", i, j, ids[i]);
}

/* A fork's child must not hand out the ids its parent's pool holds next. */
static void test_new_id_after_fork(void **state)
{
    char mine[CODE_ID_LEN + 1], theirs[CODE_ID_LEN + 1] = "";
    int fd[2], status = 0;
    pid_t pid;

    (void)state;
    code_new_id(mine); /* the pool is filled before the fork */
    assert_int_equal(pipe(fd), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        code_new_id(theirs);
        _exit(write(fd[1], theirs, CODE_ID_LEN) == CODE_ID_LEN ? 0 : 1);
    }
    close(fd[1]);
    assert_int_equal(read(fd[0], theirs, CODE_ID_LEN), CODE_ID_LEN);
    theirs[CODE_ID_LEN] = '\0';
    close(fd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    code_new_id(mine);
    assert_string_not_equal(mine, theirs);
}

/* code_scope remembers each thread's last answer: a repeat gives the same
 * scope, and a change of key set, caller or purpose is never answered from
 * the memo, not even for a key set made at a freed one's address. */
static void test_scope_memo(void **state)
{
    struct fixture *f = *state;
    char s1[CODE_SCOPE_LEN + 1], again[CODE_SCOPE_LEN + 1], other[CODE_SCOPE_LEN + 1];
    char x[CODE_SCOPE_LEN + 1], y[CODE_SCOPE_LEN + 1], z[CODE_SCOPE_LEN + 1];
    struct code_keys *k;

    code_scope(f->a, "key-one", "login", s1);
    assert_true(all_of(s1, CODE_SCOPE_LEN, "0123456789abcdef"));
    code_scope(f->a, "key-one", "login", again);
    assert_string_equal(s1, again);
    code_scope(f->b, "key-one", "login", other);
    assert_string_not_equal(s1, other);
    code_scope(f->a, "key-one", "login", again);
    assert_string_equal(s1, again);
    code_scope(f->a, "key-two", "login", other);
    assert_string_not_equal(s1, other);
    code_scope(f->a, "key-one", "signup", other);
    assert_string_not_equal(s1, other);
    code_scope(f->a, "key-one", "login", again);
    assert_string_equal(s1, again);

    k = code_keys_new((const unsigned char *)SECRET_A, strlen(SECRET_A));
    assert_non_null(k);
    code_scope(k, "key-one", "login", x);
    assert_string_equal(s1, x); /* the same secret, another set */
    code_keys_free(k);
    k = code_keys_new((const unsigned char *)SECRET_B, strlen(SECRET_B)); /* often at the same address */
    assert_non_null(k);
    code_scope(k, "key-one", "login", y);
    code_keys_free(k);
    code_scope(f->b, "key-one", "login", z);
    assert_string_equal(y, z);
    assert_string_not_equal(x, y);
}

static void test_derive_deterministic(void **state)
{
    struct fixture *f = *state;
    struct code_keys *again = code_keys_new((const unsigned char *)SECRET_A, strlen(SECRET_A));
    char id[CODE_ID_LEN + 1], c1[CODE_MAX_DIGITS + 1], c2[CODE_MAX_DIGITS + 1], c3[CODE_MAX_DIGITS + 1];
    int i;

    assert_non_null(again);
    for (i = 0; i < 100; i++) {
        code_new_id(id);
        code_derive(f->a, id, 6, c1);
        code_derive(f->a, id, 6, c2);
        code_derive(again, id, 6, c3); /* same secret, new keys */
        assert_string_equal(c1, c2);
        assert_string_equal(c1, c3);
    }
    /* A fixed id gives the same code every time. */
    code_derive(f->a, "00000000000000000000000000000000", 10, c1);
    code_derive(again, "00000000000000000000000000000000", 10, c2);
    assert_string_equal(c1, c2);
    code_keys_free(again);
}

static void test_derive_length(void **state)
{
    struct fixture *f = *state;
    char id[CODE_ID_LEN + 1], out[CODE_MAX_DIGITS + 4];
    int digits, i, leading_zero[CODE_MAX_DIGITS + 1] = {0};

    code_new_id(id);
    for (digits = 1; digits <= CODE_MAX_DIGITS; digits++) {
        for (i = 0; i < 200; i++) {
            char idi[CODE_ID_LEN + 16];
            snprintf(idi, sizeof(idi), "%s-%d", id, i);
            memset(out, 'X', sizeof(out));
            code_derive(f->a, idi, digits, out);
            if (!all_of(out, (size_t)digits, "0123456789"))
                fail_msg("code_derive(%d digits) gave \"%s\"", digits, out);
            assert_int_equal(out[digits + 1], 'X'); /* writes digits + 1 bytes only */
            if (out[0] == '0')
                leading_zero[digits]++;
        }
    }
    /* Leading zeros are kept, not dropped: about 1 in 10 codes starts with
     * 0, so 200 codes without one would mean they are missing. */
    for (digits = 2; digits <= CODE_MAX_DIGITS; digits++)
        if (leading_zero[digits] == 0)
            fail_msg("no %d-digit code of 200 starts with 0", digits);
}

static void test_derive_differs(void **state)
{
    struct fixture *f = *state;
    char id1[CODE_ID_LEN + 1], id2[CODE_ID_LEN + 1];
    char a1[CODE_MAX_DIGITS + 1], a2[CODE_MAX_DIGITS + 1], b1[CODE_MAX_DIGITS + 1];
    int i, same_six = 0;

    for (i = 0; i < 50; i++) {
        code_new_id(id1);
        code_new_id(id2);
        /* With 10 digits a collision has odds of 1e-10: any is a bug. */
        code_derive(f->a, id1, 10, a1);
        code_derive(f->a, id2, 10, a2);
        code_derive(f->b, id1, 10, b1);
        assert_string_not_equal(a1, a2); /* between ids */
        assert_string_not_equal(a1, b1); /* between secrets */
        code_derive(f->a, id1, 6, a1);
        code_derive(f->a, id2, 6, a2);
        same_six += strcmp(a1, a2) == 0;
    }
    assert_true(same_six <= 1);
    /* Ids that differ in one character, or by a suffix, differ too. */
    code_derive(f->a, "00000000000000000000000000000000", 10, a1);
    code_derive(f->a, "00000000000000000000000000000001", 10, a2);
    assert_string_not_equal(a1, a2);
    code_derive(f->a, "0000000000000000000000000000000", 10, a2);
    assert_string_not_equal(a1, a2);
}

/* Chi-square of counts against a uniform spread over 10 cells. */
static double chi_square(const long *counts, long total)
{
    double expect = (double)total / 10, chi = 0;
    int d;

    for (d = 0; d < 10; d++)
        chi += ((double)counts[d] - expect) * ((double)counts[d] - expect) / expect;
    return chi;
}

static void test_derive_distribution(void **state)
{
    /* 9 degrees of freedom: p = 0.0001 at 33.7. A loose bound that a sound
     * derivation passes (7 checks, a false alarm about once in 10^4 runs)
     * and a grossly biased one fails: a digit never or twice as often
     * drawn, or one digit 15% off its share. */
    const double bound = 40.0;
    const long n = 20000;
    struct fixture *f = *state;
    long one[10] = {0}, pos[6][10] = {{0}};
    char id[CODE_ID_LEN + 1], out[CODE_MAX_DIGITS + 1];
    long i;
    int p;

    for (i = 0; i < n; i++) {
        code_new_id(id);
        code_derive(f->a, id, 1, out);
        assert_true(out[0] >= '0' && out[0] <= '9' && out[1] == '\0');
        one[out[0] - '0']++;
        code_derive(f->a, id, 6, out);
        for (p = 0; p < 6; p++)
            pos[p][out[p] - '0']++;
    }
    if (chi_square(one, n) > bound)
        fail_msg("1-digit codes: chi-square %.1f > %.1f", chi_square(one, n), bound);
    for (p = 0; p < 6; p++)
        if (chi_square(pos[p], n) > bound)
            fail_msg("6-digit codes, digit %d: chi-square %.1f > %.1f", p, chi_square(pos[p], n), bound);
}

static void test_hash(void **state)
{
    struct fixture *f = *state;
    char h[CODE_HASH_LEN + 2], h2[CODE_HASH_LEN + 1];

    memset(h, 'X', sizeof(h));
    code_hash(f->a, "+919812345678", "123456", h);
    assert_true(all_of(h, CODE_HASH_LEN, "0123456789abcdef"));
    assert_int_equal(h[CODE_HASH_LEN + 1], 'X');

    code_hash(f->a, "+919812345678", "123456", h2); /* deterministic */
    assert_string_equal(h, h2);
    code_hash(f->a, "+919812345679", "123456", h2); /* by phone */
    assert_string_not_equal(h, h2);
    code_hash(f->a, "+919812345678", "123457", h2); /* by code */
    assert_string_not_equal(h, h2);
    code_hash(f->a, "+919812345678", "0123456", h2); /* a leading zero matters */
    assert_string_not_equal(h, h2);
    code_hash(f->b, "+919812345678", "123456", h2); /* by key */
    assert_string_not_equal(h, h2);
    /* Moving a digit across the phone/code boundary changes the hash. */
    code_hash(f->a, "+91981234567", "8123456", h2);
    assert_string_not_equal(h, h2);
}

static void test_tag(void **state)
{
    struct fixture *f = *state;
    char tag[CODE_TAG_LEN + 1], other[CODE_TAG_LEN + 1];

    code_tag(f->a, "msg-1", tag);
    assert_true(all_of(tag, CODE_TAG_LEN, "0123456789abcdef"));
    /* The tag is not the code hash of the same strings. */
    code_hash(f->a, "dlr", "msg-1", other);
    assert_string_not_equal(tag, other);
    /* Another text, another key. */
    code_tag(f->a, "msg-2", other);
    assert_string_not_equal(tag, other);
    code_tag(f->b, "msg-1", other);
    assert_string_not_equal(tag, other);
}

/* A report tag binds provider, message and expiry, each whole. */
static void test_report_tag(void **state)
{
    struct fixture *f = *state;
    char tag[CODE_TAG_LEN + 1], bad[CODE_TAG_LEN + 2], other[CODE_TAG_LEN + 1];

    code_report_tag(f->a, "kannel", "msg-1", "1767225600", tag);
    assert_true(all_of(tag, CODE_TAG_LEN, "0123456789abcdef"));
    assert_true(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", tag));
    assert_false(code_report_tag_ok(f->a, "twilio", "msg-1", "1767225600", tag));
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-2", "1767225600", tag));
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225601", tag));
    assert_false(code_report_tag_ok(f->b, "kannel", "msg-1", "1767225600", tag));
    /* Fields never run together: ("kannel", "msg-1") is not ("kannelm", "sg-1"). */
    assert_false(code_report_tag_ok(f->a, "kannelm", "sg-1", "1767225600", tag));
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-11", "767225600", tag));
    /* Not the Idempotency-Key hash's key. */
    code_tag(f->a, "msg-1", other);
    assert_string_not_equal(tag, other);

    /* Each character matters, the first and the last. */
    memcpy(bad, tag, sizeof(tag));
    bad[0] = bad[0] == '0' ? '1' : '0';
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", bad));
    memcpy(bad, tag, sizeof(tag));
    bad[CODE_TAG_LEN - 1] = bad[CODE_TAG_LEN - 1] == '0' ? '1' : '0';
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", bad));

    /* Short, long, empty and NULL tags. */
    memcpy(bad, tag, sizeof(tag));
    bad[CODE_TAG_LEN - 1] = '\0';
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", bad));
    memcpy(bad, tag, sizeof(tag));
    bad[CODE_TAG_LEN] = '0';
    bad[CODE_TAG_LEN + 1] = '\0';
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", bad));
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", ""));
    assert_false(code_report_tag_ok(f->a, "kannel", "msg-1", "1767225600", NULL));
}

/* Twilio's own example (its "Webhooks security" page): auth token 12345,
 * URL https://mycompany.com/myapp.php?foo=1&bar=2 and five parameters,
 * sorted and appended. */
static void test_twilio_signature(void **state)
{
    static const char data[] = "https://mycompany.com/myapp.php?foo=1&bar=2CallSidCA1234567890ABCDECaller+12349013030"
                               "Digits1234From+12349013030To+18005551212";
    static const char sig[] = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";
    char bad[sizeof(sig)];

    (void)state;
    assert_true(code_twilio_sig_ok("12345", data, strlen(data), sig));
    assert_false(code_twilio_sig_ok("12346", data, strlen(data), sig));
    assert_false(code_twilio_sig_ok("12345", data, strlen(data) - 1, sig));
    memcpy(bad, sig, sizeof(sig));
    bad[0] = '1';
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), bad));
    bad[0] = sig[0];
    bad[sizeof(sig) - 2] = 'A'; /* the padding */
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), bad));
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), "0/KCTR6DLpKmkAf8muzZqo1nDgQ"));
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), "0/KCTR6DLpKmkAf8muzZqo1nDgQ=="));
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), ""));
    assert_false(code_twilio_sig_ok("12345", data, strlen(data), NULL));
    assert_false(code_twilio_sig_ok("", data, strlen(data), sig));
    assert_false(code_twilio_sig_ok(NULL, data, strlen(data), sig));
}

/* Known answers under SECRET_A, computed outside otpd from the
 * construction (docs/architecture.md, "A request's path": "Codes") with Python's hmac module:
 *   key(label) = HMAC-SHA256(secret, label), labels "otpd/v1/code", "otpd/v1/hash", "otpd/v1/tag";
 *   code  = first 64-bit big-endian word w of HMAC(key(code), id || counter as 4 bytes big-endian), with
 *           w < 2^64 - 1 - (2^64 - 1) mod 10^digits, as w mod 10^digits with leading zeros;
 *   hash  = HMAC(key(hash), phone || NUL || code), first 8 bytes as hex;
 *   tag   = HMAC(key(tag), "dlr" || NUL || msg_id), first 16 bytes as hex;
 *   report tag = HMAC(HMAC-SHA256(secret, "otpd/v2/report"), provider || NUL || msg_id || NUL || exp),
 *           first 16 bytes as hex.
 * A different key, label, input layout or reduction changes them. */
static void test_known_answers(void **state)
{
    static const struct {
        const char *id;
        int digits;
        const char *code;
    } kat[] = {
        {"00000000000000000000000000000000", 1, "2"},
        {"00000000000000000000000000000000", 6, "567312"},
        {"00000000000000000000000000000000", 10, "3912567312"},
        {"0123456789abcdef0123456789abcdef", 6, "979685"},
        {"00000000000000000000000000000059", 6, "007425"}, /* leading zeros kept */
    };
    struct fixture *f = *state;
    char out[CODE_MAX_DIGITS + 1], h[CODE_HASH_LEN + 1], tag[CODE_TAG_LEN + 1];
    size_t i;

    for (i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        code_derive(f->a, kat[i].id, kat[i].digits, out);
        assert_string_equal(out, kat[i].code);
    }
    code_hash(f->a, "+919812345678", "123456", h);
    assert_string_equal(h, "efe6fe181b5184dd");
    code_tag(f->a, "msg-1", tag);
    assert_string_equal(tag, "12e8b4cf0de04db6c9ec5ef536b25b5e");
    code_report_tag(f->a, "kannel", "msg-1", "1767225600", tag);
    assert_string_equal(tag, "4f9b7c55fe57a7ddc9be734147ea5c77");
}

/* Renders into a buffer of exactly cap bytes from test_malloc, whose guard
 * bytes make test_free fail the test on a write past it, and returns the
 * result code. */
static enum otp_rc render(const char *tmpl, const char *code, int minutes, size_t cap, char *copy,
                          size_t copy_cap)
{
    char *out = test_malloc(cap ? cap : 1);
    enum otp_rc rc;

    memset(out, 'X', cap ? cap : 1);
    rc = code_render(tmpl, code, minutes, out, cap);
    if (rc == OTP_OK && copy != NULL)
        snprintf(copy, copy_cap, "%s", out);
    test_free(out);
    return rc;
}

static void test_render(void **state)
{
    char out[256];

    (void)state;
    assert_int_equal(render("{code} is your login code. It expires in {minutes} minutes.", "012345", 5, 256,
                            out, sizeof(out)),
                     OTP_OK);
    assert_string_equal(out, "012345 is your login code. It expires in 5 minutes.");

    /* Several occurrences, adjacent placeholders. */
    assert_int_equal(render("{code}-{code}{code} {minutes}/{minutes}", "42", 10, 256, out, sizeof(out)),
                     OTP_OK);
    assert_string_equal(out, "42-4242 10/10");
    assert_int_equal(render("{minutes}{code}", "7", 60, 256, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "607");

    /* Other braces are left alone. */
    assert_int_equal(render("{ {} {cod} {Code} {code {minute} {{code}} } {", "99", 1, 256, out, sizeof(out)),
                     OTP_OK);
    assert_string_equal(out, "{ {} {cod} {Code} {code {minute} {99} } {");

    /* No placeholder, and the empty template. */
    assert_int_equal(render("plain", "1", 1, 256, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "plain");
    assert_int_equal(render("", "1", 1, 256, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "");

    /* A placeholder inside the code is not expanded again. */
    assert_int_equal(render("[{code}]", "{minutes}", 3, 256, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "[{minutes}]");
}

static void test_render_boundary(void **state)
{
    /* "123456 in 15" is 12 characters: it needs 13 bytes. */
    const char *tmpl = "{code} in {minutes}";
    char out[64];

    (void)state;
    assert_int_equal(render(tmpl, "123456", 15, 13, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "123456 in 15");
    assert_int_equal(render(tmpl, "123456", 15, 12, NULL, 0), OTP_EINVAL);
    assert_int_equal(render(tmpl, "123456", 15, 1, NULL, 0), OTP_EINVAL);

    /* The same boundary when the last piece is literal text, or the code. */
    assert_int_equal(render("{code}!", "123456", 1, 8, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "123456!");
    assert_int_equal(render("{code}!", "123456", 1, 7, NULL, 0), OTP_EINVAL);
    assert_int_equal(render("ab{code}", "123456", 1, 9, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "ab123456");
    assert_int_equal(render("ab{code}", "123456", 1, 8, NULL, 0), OTP_EINVAL);
    assert_int_equal(render("{minutes}", "1", 1000, 5, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "1000");
    assert_int_equal(render("{minutes}", "1", 1000, 4, NULL, 0), OTP_EINVAL);

    /* The empty result needs one byte for its NUL: it fits in 1, not in 0. */
    assert_int_equal(render("", "1", 1, 1, out, sizeof(out)), OTP_OK);
    assert_string_equal(out, "");
}

/* {minutes} never promises more than the code has left: rounded down, a
 * code a few seconds short of a whole minute counting it, at least 1. */
static void test_minutes_left(void **state)
{
    (void)state;
    assert_int_equal(code_minutes(300000), 5);
    assert_int_equal(code_minutes(299990), 5); /* a fresh 5-minute code, rendered 10 ms later */
    assert_int_equal(code_minutes(290000), 5); /* CODE_MINUTES_SLACK_MS short */
    assert_int_equal(code_minutes(289999), 4);
    assert_int_equal(code_minutes(266000), 4); /* the newcomer's resend: 266 s left said 5 */
    assert_int_equal(code_minutes(120000), 2);
    assert_int_equal(code_minutes(61000), 1);
    assert_int_equal(code_minutes(30000), 1);
    assert_int_equal(code_minutes(0), 1);
    assert_int_equal(code_minutes(-5000), 1);
}

static void test_render_cap_zero(void **state)
{
    /* Nothing fits in 0 bytes, not even the NUL of an empty result; the
     * buffer must not be written. */
    char out[2] = {'X', 'Y'};

    (void)state;
    assert_int_equal(code_render("", "1", 1, out, 0), OTP_EINVAL);
    assert_int_equal(out[0], 'X');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_free_null),
        cmocka_unit_test(test_new_id),
        cmocka_unit_test(test_new_id_across_refills),
        cmocka_unit_test(test_new_id_after_fork),
        cmocka_unit_test(test_scope_memo),
        cmocka_unit_test(test_derive_deterministic),
        cmocka_unit_test(test_derive_length),
        cmocka_unit_test(test_derive_differs),
        cmocka_unit_test(test_derive_distribution),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_tag),
        cmocka_unit_test(test_report_tag),
        cmocka_unit_test(test_twilio_signature),
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_render_boundary),
        cmocka_unit_test(test_render_cap_zero),
        cmocka_unit_test(test_minutes_left),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
