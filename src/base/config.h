/*
 * config: the one JSON file of otpd (docs/architecture.md,
 * "Configuration"), loaded and validated whole at start-up and on SIGHUP.
 * Secrets are read from the environment variables the file names; they
 * live only in this struct. Its parts are the sections of conf.h.
 */
#ifndef OTPD_CONFIG_H
#define OTPD_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "conf.h"

/* The whole config: every module's section side by side. Only cmd/ and
 * src/base/config*.c see it; a module takes its own section (conf.h). */
struct config {
    struct http_conf http;
    struct tls_conf tls;
    struct redis_conf redis;
    struct ledger_conf ledger;

    unsigned char *secret; /* from secret_env, at least 32 bytes */
    size_t secret_len;

    struct keys_conf keys;
    struct otp_conf otp;
    struct limits_conf limits;
    struct pacer_conf pacer;
    struct provider_conf provider; /* the single provider section; network.lanes[0] copies it */
    struct network_conf network;
    struct log_conf log;

    void *json; /* the parsed file (a jansson json_t), for config_diff */
};

/*
 * Loads and validates path. Returns a config the caller frees with
 * config_free, or NULL; then *errors (if errors is not NULL) is a malloc'd
 * text, one "FILE: path.to.key: what is wrong" line per problem, that the
 * caller frees.
 */
struct config *config_load(const char *path, char **errors);

/* Same as config_load, from a string; file is only used in messages. */
struct config *config_parse(const char *text, const char *file, char **errors);

void config_free(struct config *c);

/* Wipes every secret variable a config_load read from the environment, in
 * place, and unsets it; later loads (SIGHUP) still see the values. -1 when
 * out of memory (that variable is left as it was). */
int config_scrub_env(void);

/* read 0: later loads check that each secret's variable is named but read
 * no value, leaving secret, keys.api_keys[].key, redis.password and the
 * provider's credentials NULL. For tools that replay rules and need no
 * secret (otpctl simulate); otpd never calls it. Not thread-safe. */
void config_set_secrets(int read);

/*
 * What SIGHUP does with a changed key. config_diff calls fn once per key
 * (dotted path, as in the file) whose value differs between old and new,
 * with reload 1 when a reload applies it and 0 when it needs a restart.
 * Returns how many keys changed.
 */
size_t config_diff(const struct config *old, const struct config *new_cfg,
                   void (*fn)(void *ctx, const char *path, int reload), void *ctx);

/* Prints the key table (Markdown, one row per key: type, default, bounds,
 * reload) to f, as docs/config.md's "Every key" holds it. */
void config_print_table(FILE *f);

#endif
