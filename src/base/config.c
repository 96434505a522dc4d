/*
 * config: JSON to struct config, with every problem reported, not just the
 * first. Runs at start-up and on SIGHUP, never on a request path. This file
 * loads, parses and frees a config and holds the top level's hook; the key
 * table is config_rows.c, its walk conftab.c, and each section's hooks are
 * in the config_*.c named after it (config_int.h lists them).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config_int.h"


/* After the top level's rows. */
void cfg_root(struct cfg_ctx *x, struct config *c, json_t *root)
{
    cfg_listeners(x, c, root);
    cfg_network(x, c, root);
    if (c->secret != NULL)
        c->secret_len = strlen((const char *)c->secret);
}

struct config *config_parse(const char *text, const char *file, char **errors)
{
    struct cfg_ctx x = {.file = file};
    struct config *c = NULL;
    json_error_t jerr;
    json_t *root = NULL;

    if (errors)
        *errors = NULL;
    root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL || !json_is_object(root)) {
        char where[64];
        snprintf(where, sizeof(where), "line %d", root ? 1 : jerr.line);
        cfg_error(&x, where, "%s", root ? "the top level must be an object" : jerr.text);
        goto out;
    }
    if ((c = cfg_calloc(1, sizeof(*c))) == NULL) {
        cfg_error(&x, "(all)", "out of memory");
        goto out;
    }
    cfg_defaults(c);
    c->provider.priority = -1; /* Kannel's priority is sent only when set */
    cfg_read_section(&x, c, &cfg_rows[0], root, "");
    if (x.n_err == 0)
        c->json = json_incref(root);
out:
    json_decref(root);
    if (x.n_err > 0) {
        config_free(c);
        c = NULL;
        if (errors)
            *errors = x.err;
        else
            free(x.err);
        if (errors && *errors == NULL)
            *errors = strdup("config: out of memory\n");
    }
    return c;
}

struct config *config_load(const char *path, char **errors)
{
    struct config *c;
    char *text = NULL;
    FILE *f;
    long n = -1;

    if (errors)
        *errors = NULL;
    errno = 0;
    f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > 1 << 20 ||
        fseek(f, 0, SEEK_SET) != 0 || (text = cfg_alloc((size_t)n + 1)) == NULL ||
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        if (f != NULL && n >= 0 && n <= 1 << 20 && text == NULL)
            errno = ENOMEM; /* cfg_alloc's allocator need not set it */
        if (errors && asprintf(errors, "%s: (file): cannot read (%s)\n", path,
                               errno ? strerror(errno) : "larger than 1 MiB?") < 0)
            *errors = NULL;
        if (f)
            fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[n] = '\0';
    c = config_parse(text, path, errors);
    free(text);
    return c;
}

/* Overwrites a secret before freeing it. */
static void cfg_free_secret(char *s)
{
    if (s != NULL) {
        volatile char *v = s;
        while (*v)
            *v++ = 0;
        free(s);
    }
}

/* A provider's secrets. */
static void cfg_free_provider(struct provider_conf *p)
{
    cfg_free_secret(p->user);
    cfg_free_secret(p->pass);
    cfg_free_secret(p->key_sid);
    cfg_free_secret(p->key_secret);
    cfg_free_secret(p->token);
    cfg_free_secret(p->signing_secret);
}

void config_free(struct config *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->keys.n_api_keys; i++) {
        size_t j;
        cfg_free_secret(c->keys.api_keys[i].key);
        for (j = 0; j < c->keys.api_keys[i].n_tw_keys; j++)
            cfg_free_secret(c->keys.api_keys[i].tw_keys[j].secret);
    }
    free(c->keys.api_keys);
    cfg_free_secret((char *)c->secret);
    cfg_free_secret(c->redis.password);
    cfg_free_provider(&c->provider);
    for (i = 0; i < c->network.n_lanes; i++) {
        free(c->network.lanes[i].prices);
        if (c->network.named) /* else the single provider's secrets are c->provider's */
            cfg_free_provider(&c->network.lanes[i].provider);
    }
    free(c->limits.rules);
    free(c->limits.prices);
    free(c->limits.caps);
    json_decref(c->json);
    free(c);
}
