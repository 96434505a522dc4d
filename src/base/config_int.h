/*
 * config's internals, shared by the files of src/base/config*.c and
 * conftab.c: the parse in progress, the key table's row type and the macros
 * that write its rows, the reading primitives, and the hooks the rows name.
 * Nothing outside them includes this. Which file does what:
 *   config.c           load, parse and free; the top level's hook
 *   config_read.c      the reading primitives, the loader's allocations and
 *                      the secrets read from the environment
 *   config_rows.c      the key table, its rows only
 *   conftab.c          the table's walk: sections, unknown keys, defaults,
 *                      docs/config.md's key table, config_diff
 *   config_net.c       listen, tls, redis and its sentinels
 *   config_otp.c       the callers (api_keys), otp, phone, countries, pumping
 *   config_rules.c     the rules (limits): keys, penalties, fields, bounds
 *   config_cost.c      cost: prices, caps, the price lookups
 *   config_provider.c  provider: what each type requires
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
    /* Where a provider's keys are shown: "provider", or "providers.<name>"
     * while config_network.c reads a named one (NULL: "provider"). */
    const char *provider_path;
    char provider_key[2][128]; /* cfg_provider_key's room, used in turn */
    unsigned n_provider_key;
};

/*
 * The key table. One row per key the file may hold: where it goes in struct config, its
 * type, bounds, default and flags. The loader reads every plain row the
 * same way; a key whose meaning depends on others (a URL to split, a list
 * of rules, what a provider type requires) has a hook. The unknown-key
 * check, the defaults, config_diff (SIGHUP) and docs/config.md's key table
 * (config_print_table, `make config-doc`) all come from these rows: a new
 * key is one row in config_rows.c, one field in its section struct (conf.h). */

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
    const char *doc;   /* what it is for, in docs/config.md's table */
};

/*
 * The rows' makers: a row names only what its kind uses. The docs' two
 * columns follow, where the row has them, as designated initialisers:
 * .what = "..." (type or bounds the kind does not say) and .doc = "..."
 * (what the key is for). Each macro's last named member opens its variadic
 * part, so a row without docs still passes it one argument, as C11 asks.
 */
#define CFG_AT_(f) .off = offsetof(struct config, f), .size = sizeof(((struct config *)0)->f)

/* A key the walk reads into field, an int or int64_t, from lo to hi. */
#define CFG_INT(path_, flags_, field, lo_, hi_, /* def, */...)                                               \
    {.path = (path_), .type = CFG_T_INT, .flags = (flags_), CFG_AT_(field), .lo = (lo_), .hi = (hi_),        \
     .def = __VA_ARGS__}
/* A duration into field, in ms, from lo_ms to hi_ms (0: unbounded that side). */
#define CFG_DUR(path_, flags_, field, lo_ms, hi_ms, /* def, */...)                                           \
    {.path = (path_), .type = CFG_T_DUR, .flags = (flags_), CFG_AT_(field), .lo = (lo_ms), .hi = (hi_ms),    \
     .def = __VA_ARGS__}
/* A string into the char array field, at most max bytes (0: the field's size less its NUL). */
#define CFG_STR(path_, flags_, field, max, /* def, */...)                                                    \
    {.path = (path_), .type = CFG_T_STR, .flags = (flags_), CFG_AT_(field), .hi = (max), .def = __VA_ARGS__}
/* One of names (NULL-terminated), its index into field. */
#define CFG_ENUM(path_, flags_, field, names_, /* def, */...)                                                \
    {.path = (path_), .type = CFG_T_ENUM, .flags = (flags_), CFG_AT_(field), .names = (names_),              \
     .def = __VA_ARGS__}
/* A number above 0 and at most 1, into the double field. */
#define CFG_RATIO(path_, flags_, field, /* def, */...)                                                       \
    {.path = (path_), .type = CFG_T_RATIO, .flags = (flags_), CFG_AT_(field), .def = __VA_ARGS__}
/* The same, into the int64_t field in millionths. */
#define CFG_PPM(path_, flags_, field, /* def, */...)                                                         \
    {.path = (path_), .type = CFG_T_PPM, .flags = (flags_), CFG_AT_(field), .def = __VA_ARGS__}
/* The name of an environment variable whose value, at least min_len bytes, goes to the char * field. */
#define CFG_ENV(path_, flags_, field, /* min_len, */...)                                                     \
    {.path = (path_), .type = CFG_T_ENV, .flags = (flags_), CFG_AT_(field), .lo = __VA_ARGS__}
/* An object: its rows follow in the table; then hook (or NULL) joins them. */
#define CFG_SECTION(path_, flags_, /* hook, */...)                                                           \
    {.path = (path_), .type = CFG_T_SECTION, .flags = (flags_), .hook = __VA_ARGS__}
/* A list or object hook reads whole, given the parent object. */
#define CFG_CUSTOM(path_, flags_, /* hook, */...)                                                            \
    {.path = (path_), .type = CFG_T_CUSTOM, .flags = (flags_), .hook = __VA_ARGS__}
/*
 * A key its section's hook reads (CFG_BYHOOK: no field; it depends on
 * another key), of kind INT, DUR, STR, ENUM, ENV, SECTION or CUSTOM, listed
 * for the unknown-key check, docs/config.md and the table-driven tests. Its bounds,
 * names and default, which the hook applies, follow as designated
 * initialisers: .lo, .hi (a string's most bytes), .names, .def.
 */
#define CFG_HOOKED(kind, path_, /* flags, */...)                                                             \
    {.path = (path_), .type = CFG_T_##kind, .flags = CFG_BYHOOK | __VA_ARGS__}

#define CFG_30D_MS (30LL * 24 * 3600 * 1000)

extern const struct cfg_row cfg_rows[];
extern const size_t cfg_n_rows;

/* Reading primitives (config_read.c). Each reports its own error at the path
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
/* The loader's allocations (config_read.c): through the allocator a test
 * may set, released by free(). cfg_calloc zeroes; both NULL when out of
 * memory (cfg_calloc also on overflow). */
void *cfg_alloc(size_t bytes);
void *cfg_calloc(size_t n, size_t size);

/* The table's walk (conftab.c). */
/* Reports each key of obj that table_parent's rows do not list, naming the nearest when close. */
void cfg_unknown(struct cfg_ctx *x, json_t *obj, const char *parent, const char *table_parent);
/* Reads obj, the section of row sec shown at path: its rows, then sec's hook. */
void cfg_read_section(struct cfg_ctx *x, struct config *c, const struct cfg_row *sec, json_t *obj,
                      const char *path);
/* Every row's default into c. */
void cfg_defaults(struct config *c);

/* The hooks the rows name, each given its object (a section's own; a
 * custom row's parent), by the file that holds them. */
void cfg_root(struct cfg_ctx *x, struct config *c, json_t *root); /* config.c */
/* config_net.c; cfg_listeners reads listen and listen_internal from the top level, for cfg_root. */
void cfg_listeners(struct cfg_ctx *x, struct config *c, json_t *root);
void cfg_tls(struct cfg_ctx *x, struct config *c, json_t *obj);
void cfg_redis(struct cfg_ctx *x, struct config *c, json_t *r);
void cfg_sentinel_addrs(struct cfg_ctx *x, struct config *c, json_t *s);
/* config_otp.c */
void cfg_api_keys(struct cfg_ctx *x, struct config *c, json_t *root);
void cfg_otp(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_templates(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_phone(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_countries_allow(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_countries_deny(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_countries_monitor(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_countries(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_pumping(struct cfg_ctx *x, struct config *c, json_t *o);
/* config_rules.c */
void cfg_limits(struct cfg_ctx *x, struct config *c, json_t *root);
/* config_cost.c */
void cfg_prices(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_caps(struct cfg_ctx *x, struct config *c, json_t *o);
void cfg_cost(struct cfg_ctx *x, struct config *c, json_t *o);
/* config_provider.c */
void cfg_provider(struct cfg_ctx *x, struct config *c, json_t *o);
/* The path a provider's keys are shown under, and its key's ("provider.url"; valid until the next two calls). */
const char *cfg_provider_at(const struct cfg_ctx *x);
const char *cfg_provider_key(struct cfg_ctx *x, const char *key);
/* config_cost.c: a price list {"+PREFIX" or "*": minor units} at path into *out (allocated), *n. */
void cfg_price_list(struct cfg_ctx *x, json_t *prices, const char *path, struct cfg_price **out, size_t *n);
/* config_network.c */
void cfg_providers(struct cfg_ctx *x, struct config *c, json_t *root);
void cfg_routes(struct cfg_ctx *x, struct config *c, json_t *root);
void cfg_network(struct cfg_ctx *x, struct config *c, json_t *root); /* after every row: joins them */

/* The values of the enum keys, NULL-terminated, in their enums' order:
 * rows and hooks share them. */
extern const char *const cfg_algo_names[];     /* enum cfg_algo (config_rules.c) */
extern const char *const cfg_on_names[];       /* enum cfg_on */
extern const char *const cfg_mode_names[];     /* enforce, shadow */
extern const char *const cfg_down_names[];     /* if_store_down */
extern const char *const cfg_role_names[];     /* api_keys.*.role (config_otp.c) */
extern const char *const cfg_cap_key_names[];  /* cost.caps.*.key (config_cost.c) */
extern const char *const cfg_provider_names[]; /* enum cfg_provider (config_provider.c) */

#endif
