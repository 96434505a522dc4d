/*
 * tls: loads, checks and swaps the certificate HTTPS serves. GnuTLS asks
 * tls_retrieve for the certificate at each handshake, so a SIGHUP that
 * loads a new one changes what new handshakes get without touching open
 * connections. A replaced certificate stays allocated until no connection
 * opened before the swap remains (tls_collect): GnuTLS does not copy what
 * the callback returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "tls.h"

#include "../base/timestamp.h"

/* Certificates one file may hold: the leaf and its intermediates. */
#define TLS_CHAIN_MAX 8
/* A PEM file larger than this is not a certificate or a key. */
#define TLS_FILE_MAX (1 << 20)

/* One certificate chain and its key, as loaded from the two files. */
struct tls_cert {
    gnutls_pcert_st pcert[TLS_CHAIN_MAX];
    unsigned n; /* pcert entries in use, 1 to TLS_CHAIN_MAX */
    gnutls_privkey_t key;
    struct tls_info info;
    uint64_t retired_gen; /* the last generation it served (once replaced) */
    struct tls_cert *next; /* the replaced ones, newest first */
};

struct tls {
    pthread_mutex_t mu;      /* guards cur and retired; a leaf lock */
    struct tls_cert *cur;    /* serves new handshakes; never NULL */
    struct tls_cert *retired; /* replaced, possibly still in use */
    uint64_t gen;            /* swaps so far; written under mu, read atomically */
};

/* GnuTLS's retrieve callback has no context argument: the one object. */
static struct tls *tls_one;

static void tls_cert_free(struct tls_cert *c)
{
    unsigned i;

    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++)
        gnutls_pcert_deinit(&c->pcert[i]);
    gnutls_privkey_deinit(c->key);
    free(c);
}

/* Reads path whole into a malloc'd buffer (NUL-terminated, *len bytes
 * before it), its permission bits in *mode (NULL: not wanted); NULL with err naming what
 * (key: "tls.cert"). Only a regular file is read: a FIFO would block the
 * reload (and SIGHUP's thread with it) until someone writes to it, a
 * device would read something else. The stat first keeps those from even
 * being opened; the open does not block and its fstat decides, so a file
 * swapped for a FIFO in between is refused too. */
static char *tls_read(const char *what, const char *path, size_t *len, mode_t *mode, char *err)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd = -1;

    if (stat(path, &st) != 0 ||
        (S_ISREG(st.st_mode) &&
         ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0 || fstat(fd, &st) != 0))) {
        snprintf(err, TLS_ERR_LEN, "%s: cannot read %.150s (%s)", what, path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > TLS_FILE_MAX) {
        snprintf(err, TLS_ERR_LEN, "%s: %.150s is not a PEM file (%s)", what, path,
                 !S_ISREG(st.st_mode) ? "not a regular file" : st.st_size <= 0 ? "empty" : "larger than 1 MiB");
        goto fail;
    }
    if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        snprintf(err, TLS_ERR_LEN, "%s: out of memory", what);
        goto fail;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, TLS_ERR_LEN, "%s: cannot read %.150s (%s)", what, path, r < 0 ? strerror(errno) : "short");
            goto fail;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *len = got;
    if (mode != NULL)
        *mode = st.st_mode & 07777;
    return buf;
fail:
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

/* Frees a buffer that held the key, wiped first. */
static void tls_wipe(char *buf, size_t len)
{
    if (buf != NULL) {
        explicit_bzero(buf, len);
        free(buf);
    }
}

/* Hex of the leaf's SHA-256 fingerprint and its subject into info. */
static void tls_describe(gnutls_x509_crt_t crt, struct tls_info *info)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char fp[32];
    size_t n = sizeof(fp), i;
    gnutls_datum_t dn = {NULL, 0};

    info->fingerprint[0] = '\0';
    if (gnutls_x509_crt_get_fingerprint(crt, GNUTLS_DIG_SHA256, fp, &n) == 0 && n == sizeof(fp)) {
        for (i = 0; i < n; i++) {
            info->fingerprint[2 * i] = hex[fp[i] >> 4];
            info->fingerprint[2 * i + 1] = hex[fp[i] & 15];
        }
        info->fingerprint[2 * n] = '\0';
    }
    info->subject[0] = '\0';
    if (gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
        snprintf(info->subject, sizeof(info->subject), "%.*s", (int)dn.size, (const char *)dn.data);
        gnutls_free(dn.data);
    }
}

/* "" in why when now_s is within [from, to], else what is wrong. */
static void tls_dates(int64_t from, int64_t to, int64_t now_s, char *why, size_t cap)
{
    char when[TIMESTAMP_LEN];

    why[0] = '\0';
    if (now_s > to) {
        timestamp_format(to * 1000, when, sizeof(when));
        snprintf(why, cap, "expired at %s", when);
    } else if (now_s < from) {
        timestamp_format(from * 1000, when, sizeof(when));
        snprintf(why, cap, "is not valid before %s", when);
    }
}

/*
 * The chain's dates at now_s. The leaf must be valid: 0, or -1 with err.
 * An intermediate out of its dates is only noted in info->warning: clients
 * that can build another path (a cross-signed root that expired in a chain
 * that still works, as happened with Let's Encrypt's) would otherwise cost
 * the operator a start for nothing.
 */
static int tls_check_times(const char *path, gnutls_x509_crt_t *crts, unsigned n, int64_t now_s,
                           struct tls_info *info, char *err)
{
    char which[40] = "", why[64];
    unsigned i;

    info->warning[0] = '\0';
    for (i = 0; i < n; i++) {
        int64_t from = (int64_t)gnutls_x509_crt_get_activation_time(crts[i]);
        int64_t to = (int64_t)gnutls_x509_crt_get_expiration_time(crts[i]);
        if (n > 1)
            snprintf(which, sizeof(which), " (certificate %u of %u)", i + 1, n);
        if (from == -1 || to == -1) {
            snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s%s: cannot read its validity dates", path, which);
            return -1;
        }
        tls_dates(from, to, now_s, why, sizeof(why));
        if (i == 0) {
            info->not_before_s = from;
            info->not_after_s = to;
            if (why[0]) {
                snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s%s %s", path, which, why);
                return -1;
            }
        } else if (why[0] && info->warning[0] == '\0') {
            snprintf(info->warning, sizeof(info->warning),
                     "tls.cert: %.150s%s %s: clients that need it fail; use the chain your CA serves now", path,
                     which, why);
        }
    }
    return 0;
}

/* 1 when key is the private half of crt's public key. */
static int tls_key_matches(gnutls_x509_crt_t crt, gnutls_privkey_t key)
{
    gnutls_pubkey_t a = NULL, b = NULL;
    unsigned char ida[64], idb[64];
    size_t na = sizeof(ida), nb = sizeof(idb);
    int same = 0;

    if (gnutls_pubkey_init(&a) == 0 && gnutls_pubkey_init(&b) == 0 && gnutls_pubkey_import_x509(a, crt, 0) == 0 &&
        gnutls_pubkey_import_privkey(b, key, 0, 0) == 0 &&
        gnutls_pubkey_get_key_id(a, GNUTLS_KEYID_USE_SHA256, ida, &na) == 0 &&
        gnutls_pubkey_get_key_id(b, GNUTLS_KEYID_USE_SHA256, idb, &nb) == 0)
        same = na == nb && memcmp(ida, idb, na) == 0;
    gnutls_pubkey_deinit(a);
    gnutls_pubkey_deinit(b);
    return same;
}

/* Reads the key file into *key; -1 with err. The file's bytes are wiped
 * before they are freed, and never copied into err. A key that others than
 * its owner may read or write is loaded, and said in info->key_warning. */
static int tls_load_key(const char *path, gnutls_privkey_t *key, struct tls_info *info, char *err)
{
    size_t len = 0;
    mode_t mode = 0;
    char *buf = tls_read("tls.key", path, &len, &mode, err);
    gnutls_datum_t d;
    int rc = -1, e;

    if (buf == NULL)
        return -1;
    info->key_warning[0] = '\0';
    if (mode & (S_IRWXG | S_IRWXO))
        snprintf(info->key_warning, sizeof(info->key_warning),
                 "tls.key: %.150s is open to its group or others (mode %04o): chmod 600 it, for otpd's user alone",
                 path, (unsigned)mode);
    if (memmem(buf, len, "-----BEGIN ENCRYPTED PRIVATE KEY-----", 37) != NULL ||
        memmem(buf, len, "Proc-Type: 4,ENCRYPTED", 22) != NULL) {
        snprintf(err, TLS_ERR_LEN, "tls.key: %.150s is encrypted; otpd reads an unencrypted key (readable by its "
                 "user only)", path);
        goto out;
    }
    if (memmem(buf, len, "-----BEGIN ", 11) == NULL || memmem(buf, len, "PRIVATE KEY-----", 16) == NULL) {
        snprintf(err, TLS_ERR_LEN, "tls.key: %.150s is not a PEM private key (no \"-----BEGIN ... PRIVATE "
                 "KEY-----\" block)", path);
        goto out;
    }
    d.data = (unsigned char *)buf;
    d.size = (unsigned)len;
    if ((e = gnutls_privkey_init(key)) != 0 ||
        (e = gnutls_privkey_import_x509_raw(*key, &d, GNUTLS_X509_FMT_PEM, NULL, 0)) != 0) {
        snprintf(err, TLS_ERR_LEN, "tls.key: %.150s is not a usable private key (%s)", path, gnutls_strerror(e));
        gnutls_privkey_deinit(*key);
        *key = NULL;
        goto out;
    }
    rc = 0;
out:
    tls_wipe(buf, len);
    return rc;
}

/* Loads and checks conf's files at now_s; NULL with err. */
static struct tls_cert *tls_load(const struct tls_conf *conf, int64_t now_s, char *err)
{
    struct tls_cert *c = calloc(1, sizeof(*c));
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0, i;
    size_t len = 0;
    char *pem = NULL;
    gnutls_datum_t d;
    int e;

    if (c == NULL) {
        snprintf(err, TLS_ERR_LEN, "tls: out of memory");
        return NULL;
    }
    if ((pem = tls_read("tls.cert", conf->cert, &len, NULL, err)) == NULL)
        goto fail;
    if (memmem(pem, len, "-----BEGIN CERTIFICATE-----", 27) == NULL) {
        snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s is not a PEM certificate (no \"-----BEGIN CERTIFICATE-----\" "
                 "block)", conf->cert);
        goto fail;
    }
    d.data = (unsigned char *)pem;
    d.size = (unsigned)len;
    e = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    if (e < 0 || n == 0) {
        snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s holds no readable certificate (%s)", conf->cert,
                 e < 0 ? gnutls_strerror(e) : "none found");
        goto fail;
    }
    if (n > TLS_CHAIN_MAX) {
        snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s holds %u certificates; at most %d (the leaf, then its "
                 "intermediates)", conf->cert, n, TLS_CHAIN_MAX);
        goto fail;
    }
    c->info.chain = n;
    tls_describe(crts[0], &c->info);
    if (tls_check_times(conf->cert, crts, n, now_s, &c->info, err) < 0)
        goto fail;
    if (tls_load_key(conf->key, &c->key, &c->info, err) < 0)
        goto fail;
    if (!tls_key_matches(crts[0], c->key)) {
        snprintf(err, TLS_ERR_LEN, "tls.key: %.150s is not the key of the certificate in %.150s", conf->key,
                 conf->cert);
        goto fail;
    }
    c->n = n;
    if ((e = gnutls_pcert_import_x509_list(c->pcert, crts, &c->n, 0)) != 0) {
        c->n = 0;
        snprintf(err, TLS_ERR_LEN, "tls.cert: %.150s: %s", conf->cert, gnutls_strerror(e));
        goto fail;
    }
    for (i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    free(pem);
    return c;
fail:
    for (i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    free(pem);
    tls_cert_free(c);
    return NULL;
}

/* 1 when a and b are the same chain (the key follows the leaf). */
static int tls_same(const struct tls_cert *a, const struct tls_cert *b)
{
    unsigned i;

    if (a->n != b->n)
        return 0;
    for (i = 0; i < a->n; i++)
        if (a->pcert[i].cert.size != b->pcert[i].cert.size ||
            memcmp(a->pcert[i].cert.data, b->pcert[i].cert.data, a->pcert[i].cert.size) != 0)
            return 0;
    return 1;
}

int tls_check(const struct tls_conf *conf, int64_t now_s, struct tls_info *info, char *err)
{
    struct tls_cert *c = tls_load(conf, now_s, err);

    if (c == NULL)
        return -1;
    *info = c->info;
    tls_cert_free(c);
    return 0;
}

struct tls *tls_new(const struct tls_conf *conf, int64_t now_s, char *err)
{
    struct tls *t = NULL, *none = NULL;
    struct tls_cert *c = tls_load(conf, now_s, err);

    if (c == NULL)
        return NULL;
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        snprintf(err, TLS_ERR_LEN, "tls: out of memory");
        tls_cert_free(c);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    t->cur = c;
    if (!__atomic_compare_exchange_n(&tls_one, &none, t, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        snprintf(err, TLS_ERR_LEN, "tls: one TLS listener per process");
        tls_free(t);
        return NULL;
    }
    return t;
}

int tls_reload(struct tls *t, const struct tls_conf *conf, int64_t now_s, struct tls_info *info, char *err)
{
    struct tls_cert *c = tls_load(conf, now_s, err);
    int swapped = 0;

    pthread_mutex_lock(&t->mu);
    if (c != NULL) /* the files' mode now, whether or not the certificate changed */
        memcpy(t->cur->info.key_warning, c->info.key_warning, sizeof(c->info.key_warning));
    if (c != NULL && !tls_same(c, t->cur)) {
        t->cur->retired_gen = t->gen;
        t->cur->next = t->retired;
        t->retired = t->cur;
        t->cur = c;
        c = NULL;
        /* After cur: a connection that reads the new generation can only
         * handshake with the new certificate (see tls_collect). */
        __atomic_store_n(&t->gen, t->gen + 1, __ATOMIC_SEQ_CST);
        swapped = 1;
    }
    *info = t->cur->info;
    pthread_mutex_unlock(&t->mu);
    if (c == NULL && !swapped)
        return -1;
    tls_cert_free(c);
    return swapped;
}

void tls_info(struct tls *t, struct tls_info *info)
{
    pthread_mutex_lock(&t->mu);
    *info = t->cur->info;
    pthread_mutex_unlock(&t->mu);
}

uint64_t tls_gen(struct tls *t)
{
    return __atomic_load_n(&t->gen, __ATOMIC_SEQ_CST);
}

/*
 * A certificate that served generations up to g is used only by
 * connections that handshook while it was current, and each of those
 * noted a generation of at most g before its handshake. So once every open
 * connection noted a later one (oldest > g), nobody can use it. The caller
 * caps oldest by a tls_gen read before it looked at the connections, so a
 * swap during that look frees nothing it did not see.
 */
void tls_collect(struct tls *t, uint64_t oldest)
{
    struct tls_cert **p, *dead = NULL, *c;

    pthread_mutex_lock(&t->mu);
    for (p = &t->retired; (c = *p) != NULL;) {
        if (c->retired_gen < oldest) {
            *p = c->next;
            c->next = dead;
            dead = c;
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&t->mu);
    while ((c = dead) != NULL) {
        dead = c->next;
        tls_cert_free(c);
    }
}

int tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                 const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length, gnutls_pcert_st **pcert,
                 unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    struct tls *t = __atomic_load_n(&tls_one, __ATOMIC_SEQ_CST);

    (void)session, (void)req_ca_rdn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
    if (t == NULL)
        return -1;
    pthread_mutex_lock(&t->mu);
    *pcert = t->cur->pcert;
    *pcert_length = t->cur->n;
    *pkey = t->cur->key;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void tls_free(struct tls *t)
{
    struct tls_cert *c;
    struct tls *self = t;

    if (t == NULL)
        return;
    __atomic_compare_exchange_n(&tls_one, &self, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    while ((c = t->retired) != NULL) {
        t->retired = c->next;
        tls_cert_free(c);
    }
    tls_cert_free(t->cur);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
