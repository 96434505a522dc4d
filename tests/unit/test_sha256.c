/*
 * Unit tests of sha256 (src/base/sha256.c), the chain's hash: FIPS
 * 180-4's examples, a message split at every offset across updates (the
 * partial-block path), and lengths around the 56- and 64-byte padding
 * edges against digests computed with Python's hashlib; HMAC-SHA256 against
 * RFC 4231's cases and Python's hmac at the key's block-size edges (the
 * webhook signature a receiver recomputes with hmac).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/base/sha256.h"

static void hex(const unsigned char *d, char *out)
{
    int i;

    for (i = 0; i < SHA256_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void expect(const void *p, size_t n, const char *want)
{
    struct sha256 s;
    unsigned char d[SHA256_LEN];
    char got[2 * SHA256_LEN + 1];

    sha256_init(&s);
    sha256_update(&s, p, n);
    sha256_final(&s, d);
    hex(d, got);
    assert_string_equal(got, want);
}

static void test_fips_examples(void **state)
{
    struct sha256 s;
    unsigned char d[SHA256_LEN];
    char got[2 * SHA256_LEN + 1];
    int i;

    (void)state;
    expect("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
           "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    sha256_init(&s);
    for (i = 0; i < 1000000; i++)
        sha256_update(&s, "a", 1);
    sha256_final(&s, d);
    hex(d, got);
    assert_string_equal(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* hashlib.sha256(b"x" * n).hexdigest() for n = 55, 56, 63, 64, 65. */
static void test_padding_edges(void **state)
{
    static const struct {
        size_t n;
        const char *want;
    } cases[] = {
        {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
        {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
        {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
        {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
        {65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
    };
    char buf[128];
    struct sha256 a, b;
    unsigned char da[SHA256_LEN], db[SHA256_LEN];
    size_t n, cut, i;

    (void)state;
    memset(buf, 'x', sizeof(buf));
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect(buf, cases[i].n, cases[i].want);
    /* Any split of a message across updates gives the one-call digest. */
    for (n = 0; n <= sizeof(buf); n++)
        for (cut = 0; cut <= n; cut += 7) {
            sha256_init(&a);
            sha256_update(&a, buf, n);
            sha256_final(&a, da);
            sha256_init(&b);
            sha256_update(&b, buf, cut);
            sha256_update(&b, buf + cut, n - cut);
            sha256_final(&b, db);
            assert_memory_equal(da, db, SHA256_LEN);
        }
}

static void expect_hmac(const void *key, size_t key_len, const char *msg, const char *want)
{
    unsigned char d[SHA256_LEN];
    char got[2 * SHA256_LEN + 1];

    sha256_hmac(key, key_len, msg, strlen(msg), d);
    hex(d, got);
    assert_string_equal(got, want);
}

/* RFC 4231 cases 1, 2 and 6 (a key longer than the block is hashed
 * first), and hmac.new(key, msg, hashlib.sha256) for keys of 0, 64 (one
 * block, used as is) and 65 bytes (hashed). */
static void test_hmac(void **state)
{
    char key[131];

    (void)state;
    memset(key, 0x0b, 20);
    expect_hmac(key, 20, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    expect_hmac("Jefe", 4, "what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(key, 0xaa, 131);
    expect_hmac(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    expect_hmac("", 0, "", "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    memset(key, 'k', 65);
    expect_hmac(key, 64, "1700000000.{\"to\":\"+1\"}",
                "a0c87319774ba8d19756bd87f8a1d55f6cc5933828f18227bbec89dc2d3b1127");
    expect_hmac(key, 65, "x", "75092ca3ee2b307470c227697b42b3e65376aa3bae98fb5a1f7b7536daa9588a");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_examples),
        cmocka_unit_test(test_padding_edges),
        cmocka_unit_test(test_hmac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
