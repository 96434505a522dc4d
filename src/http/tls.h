/*
 * tls: the certificate and key HTTPS on `listen` serves (config's tls
 * section), through libmicrohttpd's GnuTLS support. The files are read and
 * checked at start-up (and by --check) and again on each SIGHUP; a new
 * certificate is swapped in for new handshakes while open connections keep
 * theirs. With microhttpd.h, the only home of gnutls.h is src/http.
 *
 * Load: one read of two small files at start and per SIGHUP; a pointer read
 * under a mutex per TLS handshake.
 */
#ifndef OTPD_TLS_H
#define OTPD_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/conf.h"

#define TLS_ERR_LEN 512
#define TLS_FINGERPRINT_LEN 65 /* SHA-256 of the leaf's DER, hex, and NUL */

struct tls;

/* What a loaded certificate is: for the log lines and the expiry gauge. */
struct tls_info {
    char fingerprint[TLS_FINGERPRINT_LEN];
    char subject[160];     /* the leaf's DN, cut to fit */
    int64_t not_before_s;  /* Unix seconds */
    int64_t not_after_s;
    unsigned chain;        /* certificates in the file, the leaf first */
    char warning[384];     /* "" or what is wrong with an intermediate (out of its dates); served anyway */
    char key_warning[256]; /* "" or that the key file is open to its group or others; loaded anyway */
};

/*
 * Reads conf's certificate and key and checks them at now_s (Unix seconds):
 * each a regular file (a FIFO or a device is refused without being read,
 * so nothing blocks), readable and PEM, the leaf valid at now_s (not expired, not
 * yet valid), the key the leaf's (an intermediate out of its dates is only
 * noted in tls_info's warning). Returns the loaded object (tls_free),
 * or NULL with err (TLS_ERR_LEN) as "tls.cert: what is wrong" or "tls.key:
 * ...". err never holds the key's content. Only one object may exist at a
 * time (GnuTLS's certificate callback takes no context): a second is refused.
 */
struct tls *tls_new(const struct tls_conf *conf, int64_t now_s, char *err);

/* The same checks without keeping anything, for --check: 0 and *info, or
 * -1 with err. */
int tls_check(const struct tls_conf *conf, int64_t now_s, struct tls_info *info, char *err);

/*
 * SIGHUP: reads conf's files again. Returns 1 when a new certificate (or
 * chain) now serves new handshakes, 0 when the files hold the one already
 * served, -1 with err when they fail a check of tls_new: then nothing
 * changed. *info describes what serves after the call, its key_warning the
 * key file as read now (when it was read).
 */
int tls_reload(struct tls *t, const struct tls_conf *conf, int64_t now_s, struct tls_info *info, char *err);

/* What serves now. */
void tls_info(struct tls *t, struct tls_info *info);

/*
 * Replaced certificates are kept while a connection may still use them.
 * tls_gen is the generation serving now (it grows by one per swap); a
 * connection notes it when it opens, before its handshake. tls_collect
 * frees the replaced certificates that only connections older than oldest
 * could use: pass the least generation noted by the open connections,
 * capped by a tls_gen read before those were looked at. Neither blocks on
 * anything but the object's own mutex, which nests in no other.
 */
uint64_t tls_gen(struct tls *t);
void tls_collect(struct tls *t, uint64_t oldest);

/* Frees t (NULL allowed); no daemon may use it any more. */
void tls_free(struct tls *t);

/* For http.c, which includes gnutls/abstract.h first: the function
 * MHD_OPTION_HTTPS_CERT_CALLBACK takes, serving the current certificate. */
#ifdef GNUTLS_ABSTRACT_H
gnutls_certificate_retrieve_function2 tls_retrieve;
#endif

#endif
