/*
 * config's internals, shared by config.c (the key table and the hooks) and
 * conftab.c (what walks the table): nothing outside src/base/config*.c
 * includes this.
 */
#ifndef OTPD_CONFIG_INT_H
#define OTPD_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config.h"

/* The parse in progress: the file's name and the errors so far. */
struct cfg_ctx {
    const char *file;
    char *err;
    size_t err_len;
    int n_err;
};

/*
 * The key table. One row per key the file may hold: where it goes in struct config, its
 * type, bounds, default and flags. The loader reads every plain row the
 * same way; a key whose meaning depends on others (a URL to split, a list
 * of rules, what a provider type requires) has a hook. The unknown-key
 * check, the defaults, config_diff (SIGHUP) and README's key table
 * (config_print_table, `make config-doc`) all come from these rows: a new
 * key is one row here, one field in its section struct (conf.h). */

enum cfg_type {
    CFG_T_SECTION, /* an object: its rows, then its hook for what joins them */
    CFG_T_INT,     /* an integer from lo to hi, into an int or an int64_t */
    CFG_T_DUR,     /* "30s" into milliseconds; lo and hi in ms (0: no bound) */
    CFG_T_STR,     /* into char[size]; at most hi bytes when hi > 0 */
    CFG_T_ENUM,    /* one of names, its index into an enum (or int) */
    CFG_T_RATIO,   /* a number above 0 and at most 1, into a double */
    CFG_T_PPM,     /* the same, into int64_t millionths (at least 1) */
    CFG_T_ENV,     /* the name of an environment variable holding a secret of at least lo bytes: its value */
    CFG_T_CUSTOM,  /* read by its hook, given the parent object */
};

#define CFG_REQUIRED 1u /* "is required" when absent */
#define CFG_RELOAD 2u   /* SIGHUP applies a change; without it a change needs a restart */
#define CFG_BYHOOK 4u   /* read by its section's hook (depends on another key); listed for the rest */

struct cfg_row {
    const char *path;  /* dotted as in the file; "*" stands for an array's index */
    enum cfg_type type;
    unsigned flags;
    size_t off, size;  /* the field in struct config; size 0 when a hook fills it */
    int64_t lo, hi;
    const char *def;   /* the default as the file would say it; NULL: none */
    const char *const *names; /* CFG_T_ENUM */
    void (*hook)(struct cfg_ctx *x, struct config *c, json_t *obj);
    const char *what;  /* the docs' type or bounds, where the row's type does not say it */
    const char *doc;   /* what it is for, in README's table */
};

extern const struct cfg_row cfg_rows[];
extern const size_t cfg_n_rows;

/* Reading primitives (config.c). Each reports its own error at the path
 * parent.key and returns 1 when it stored a value, 0 when the member is
 * absent (and required: "is required") or wrong. */
void cfg_error(struct cfg_ctx *x, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *cfg_path(char *buf, size_t cap, const char *parent, const char *key);
json_t *cfg_member(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required);
int cfg_str(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, char *out,
            size_t cap);
int cfg_int(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, int64_t lo,
            int64_t hi, int64_t *out);
int cfg_dur(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, int64_t *out_ms);
/* The secret in the variable the member names (malloc'd, NULL when absent,
 * wrong, or secrets are off: config_set_secrets). */
char *cfg_env(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required, size_t min_len);
int cfg_enum(struct cfg_ctx *x, json_t *obj, const char *parent, const char *key, int required,
             const char *const *names, int *out);

/* The table's walk (conftab.c). */
/* Reports each key of obj that table_parent's rows do not list, naming the nearest when close. */
void cfg_unknown(struct cfg_ctx *x, json_t *obj, const char *parent, const char *table_parent);
/* Reads obj, the section of row sec shown at path: its rows, then sec's hook. */
void cfg_read_section(struct cfg_ctx *x, struct config *c, const struct cfg_row *sec, json_t *obj,
                      const char *path);
/* Every row's default into c. */
void cfg_defaults(struct config *c);

#endif
