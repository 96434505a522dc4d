/*
 * conftab: the walk over config's key table (config_int.h): reading a
 * section's plain rows, the unknown-key check with its "did you mean",
 * the defaults, docs/config.md's key table and config_diff for SIGHUP. Runs at
 * start-up, on SIGHUP and for --print-config-table; never on a request.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_int.h"
#include "duration.h"
#include "phone.h"

/* Forward: the keys of one level of the key table (config_rows.c), for cfg_unknown. */
static const char *cfg_child(const char *table_parent, size_t *i);

/* Edit distance of a and b (both short: key names), for "did you mean". */
static size_t cfg_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j, d[64];

    if (la >= 63 || lb >= 63)
        return 64;
    for (j = 0; j <= lb; j++)
        d[j] = j;
    for (i = 1; i <= la; i++) {
        size_t diag = d[0];
        d[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t up = d[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (d[j - 1] + 1 < best)
                best = d[j - 1] + 1;
            diag = up;
            d[j] = best;
        }
    }
    return d[lb];
}

/* Reports every key of obj that the table does not list under
 * table_parent ("limits.*" for any rule; "" for the top level), with the
 * nearest allowed key of that level when one is close: a typo is the
 * usual cause. parent is the path shown ("limits.2"). */
void cfg_unknown(struct cfg_ctx *x, json_t *obj, const char *parent, const char *table_parent)
{
    const char *key;
    json_t *v;
    char p[256];

    json_object_foreach(obj, key, v) {
        const char *best = NULL, *name;
        size_t i = 0, best_d = SIZE_MAX, d;
        while ((name = cfg_child(table_parent, &i)) != NULL)
            if ((d = cfg_distance(key, name)) < best_d) {
                best_d = d;
                best = name;
            }
        if (best_d == 0)
            continue;
        /* Close: at most 2 edits, and fewer than the key has letters. */
        if (best != NULL && best_d <= 2 && best_d < strlen(key))
            cfg_error(x, cfg_path(p, sizeof(p), parent, key), "unknown key (did you mean \"%s\"?)", best);
        else
            cfg_error(x, cfg_path(p, sizeof(p), parent, key), "unknown key");
    }
}

/* The last component of r's path. */
static const char *cfg_row_name(const struct cfg_row *r)
{
    const char *dot = strrchr(r->path, '.');

    return dot ? dot + 1 : r->path;
}

/* 1 when r is a key directly inside table_parent ("" for the top level). */
static int cfg_row_in(const struct cfg_row *r, const char *table_parent)
{
    size_t n = strlen(table_parent);
    const char *rest;

    if (r->path[0] == '\0')
        return 0;
    if (n == 0)
        return strchr(r->path, '.') == NULL;
    if (strncmp(r->path, table_parent, n) != 0 || r->path[n] != '.')
        return 0;
    rest = r->path + n + 1;
    return strchr(rest, '.') == NULL;
}

/* The name of the next key in table_parent from row *i on, *i moved past
 * it; NULL after the last. */
static const char *cfg_child(const char *table_parent, size_t *i)
{
    for (; *i < cfg_n_rows; (*i)++)
        if (cfg_row_in(&cfg_rows[*i], table_parent))
            return cfg_row_name(&cfg_rows[(*i)++]);
    return NULL;
}

/* "1h" for 3600000: the largest unit that divides ms. */
static const char *cfg_dur_text(int64_t ms, char *buf, size_t cap)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    size_t i;

    for (i = 0; i < sizeof(units) / sizeof(units[0]) - 1 && ms % units[i].ms != 0; i++)
        ;
    snprintf(buf, cap, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
    return buf;
}

/* Writes v (int or int64_t by size) to the field at off. */
static void cfg_put_int(struct config *c, const struct cfg_row *r, int64_t v)
{
    char *at = (char *)c + r->off;

    if (r->size == sizeof(int64_t)) {
        memcpy(at, &v, sizeof(v));
    } else {
        int i = (int)v;
        memcpy(at, &i, sizeof(i));
    }
}

/* Reads a fraction in (0, 1]; -1 when v is not one. */
static double cfg_fraction(json_t *v)
{
    double d = json_is_number(v) ? json_number_value(v) : -1;

    return d > 0 && d <= 1 ? d : -1;
}

/* Stores the fraction d by r's type. */
static void cfg_put_fraction(struct config *c, const struct cfg_row *r, double d)
{
    if (r->type == CFG_T_RATIO) {
        memcpy((char *)c + r->off, &d, sizeof(d));
    } else {
        int64_t ppm = (int64_t)(d * 1000000 + 0.5);
        cfg_put_int(c, r, ppm < 1 ? 1 : ppm);
    }
}

/* Reads one plain row's member of obj (parent: the shown path). */
static void cfg_read_row(struct cfg_ctx *x, struct config *c, const struct cfg_row *r, json_t *obj,
                         const char *parent)
{
    const char *key = cfg_row_name(r);
    char p[256], lo[32], hi[32];
    int64_t v;
    int idx;

    cfg_path(p, sizeof(p), parent, key);
    switch (r->type) {
    case CFG_T_INT:
        if (cfg_int(x, obj, parent, key, 0, r->lo, r->hi, &v))
            cfg_put_int(c, r, v);
        break;
    case CFG_T_DUR:
        if (!cfg_dur(x, obj, parent, key, 0, &v))
            break;
        if ((r->lo > 0 && v < r->lo) || (r->hi > 0 && v > r->hi)) {
            if (r->hi > 0)
                cfg_error(x, p, "must be from %s to %s", cfg_dur_text(r->lo, lo, sizeof(lo)),
                          cfg_dur_text(r->hi, hi, sizeof(hi)));
            else
                cfg_error(x, p, "must be at least %s", cfg_dur_text(r->lo, lo, sizeof(lo)));
            break;
        }
        cfg_put_int(c, r, v);
        break;
    case CFG_T_STR:
        /* "" is never a value (a file, a URL, a name): leaving the key out
         * says "none" or "the default". */
        if (json_is_string(json_object_get(obj, key)) && json_string_length(json_object_get(obj, key)) == 0)
            cfg_error(x, p, "must not be empty (leave the key out instead)");
        else
            cfg_str(x, obj, parent, key, 0, (char *)c + r->off, r->hi > 0 ? (size_t)r->hi + 1 : r->size);
        break;
    case CFG_T_ENUM:
        if (cfg_enum(x, obj, parent, key, 0, r->names, &idx))
            cfg_put_int(c, r, idx);
        break;
    case CFG_T_RATIO:
    case CFG_T_PPM: {
        double d = cfg_fraction(json_object_get(obj, key));
        if (d < 0)
            cfg_error(x, p, "must be a number above 0 and at most 1");
        else
            cfg_put_fraction(c, r, d);
        break;
    }
    case CFG_T_ENV: {
        char *secret = cfg_env(x, obj, parent, key, 0, (size_t)r->lo);
        memcpy((char *)c + r->off, &secret, sizeof(secret));
        break;
    }
    case CFG_T_SECTION:
    case CFG_T_CUSTOM:
        break;
    }
}

/* Reads the object obj at table path tpath (shown as path): its unknown
 * keys, then each of its rows in table order, then its hook. */
void cfg_read_section(struct cfg_ctx *x, struct config *c, const struct cfg_row *sec, json_t *obj,
                             const char *path)
{
    size_t i;
    char p[256];

    cfg_unknown(x, obj, path, sec->path);
    for (i = 0; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        json_t *v;
        if (!cfg_row_in(r, sec->path) || (r->flags & CFG_BYHOOK))
            continue;
        cfg_path(p, sizeof(p), path, cfg_row_name(r));
        if ((v = json_object_get(obj, cfg_row_name(r))) == NULL) {
            if (r->flags & CFG_REQUIRED)
                cfg_error(x, p, "is required");
            continue;
        }
        if (r->type == CFG_T_SECTION && !json_is_object(v))
            cfg_error(x, p, "must be an object");
        else if (r->type == CFG_T_SECTION)
            cfg_read_section(x, c, r, v, p);
        else if (r->type == CFG_T_CUSTOM)
            r->hook(x, c, obj);
        else
            cfg_read_row(x, c, r, obj, path);
    }
    if (sec->type == CFG_T_SECTION && sec->hook != NULL)
        sec->hook(x, c, obj);
}

/* Every row's default; a default that does not parse is the table's bug,
 * caught by test_config's defaults test. */
void cfg_defaults(struct config *c)
{
    size_t i;
    int64_t v;

    c->limits.phone_types = PHONE_TYPES_DEFAULT;
    for (i = 0; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        int k;
        if (r->def == NULL || r->size == 0)
            continue;
        switch (r->type) {
        case CFG_T_INT:
            cfg_put_int(c, r, strtoll(r->def, NULL, 10));
            break;
        case CFG_T_DUR:
            if (duration_parse(r->def, &v) == OTP_OK)
                cfg_put_int(c, r, v);
            break;
        case CFG_T_STR:
            snprintf((char *)c + r->off, r->size, "%s", r->def);
            break;
        case CFG_T_ENUM:
            for (k = 0; r->names[k] && strcmp(r->names[k], r->def) != 0; k++)
                ;
            cfg_put_int(c, r, r->names[k] ? k : 0);
            break;
        case CFG_T_RATIO:
        case CFG_T_PPM:
            cfg_put_fraction(c, r, strtod(r->def, NULL));
            break;
        case CFG_T_ENV:
        case CFG_T_SECTION:
        case CFG_T_CUSTOM:
            break;
        }
    }
}


/* The type column of the docs. */
static const char *cfg_type_name(const struct cfg_row *r)
{
    static const char *const names[] = {
        [CFG_T_SECTION] = "object", [CFG_T_INT] = "integer",  [CFG_T_DUR] = "duration",
        [CFG_T_STR] = "string",     [CFG_T_ENUM] = "enum",    [CFG_T_RATIO] = "number",
        [CFG_T_PPM] = "number",     [CFG_T_ENV] = "env name", [CFG_T_CUSTOM] = "list or object",
    };
    return names[r->type];
}

void config_print_table(FILE *f)
{
    size_t i;
    int k;

    fprintf(f, "| key | type | default | values | on SIGHUP | meaning |\n|---|---|---|---|---|---|\n");
    for (i = 1; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        char vals[512], a[32], b[32];
        size_t n = 0;
        vals[0] = '\0';
        switch (r->type) {
        case CFG_T_INT:
            n = (size_t)snprintf(vals, sizeof(vals), "%lld to %lld", (long long)r->lo, (long long)r->hi);
            break;
        case CFG_T_DUR:
            if (r->hi > 0)
                n = (size_t)snprintf(vals, sizeof(vals), "%s to %s", cfg_dur_text(r->lo, a, sizeof(a)),
                                     cfg_dur_text(r->hi, b, sizeof(b)));
            else if (r->lo > 0)
                n = (size_t)snprintf(vals, sizeof(vals), "at least %s", cfg_dur_text(r->lo, a, sizeof(a)));
            break;
        case CFG_T_STR:
            n = (size_t)snprintf(
                vals, sizeof(vals), "1 to %lld bytes",
                (long long)(r->hi > 0 ? r->hi : (int64_t)(r->size ? r->size - 1 : CFG_STR_MAX - 1)));
            break;
        case CFG_T_ENUM:
            for (k = 0; r->names[k] && n < sizeof(vals); k++)
                n += (size_t)snprintf(vals + n, sizeof(vals) - n, "%s%s", k ? ", " : "", r->names[k]);
            break;
        case CFG_T_RATIO:
        case CFG_T_PPM:
            n = (size_t)snprintf(vals, sizeof(vals), "above 0, at most 1");
            break;
        case CFG_T_ENV:
            n = (size_t)snprintf(vals, sizeof(vals), "its value: a secret of at least %lld byte%s", (long long)r->lo,
                                 r->lo == 1 ? "" : "s");
            break;
        case CFG_T_SECTION:
        case CFG_T_CUSTOM:
            break;
        }
        if (r->what != NULL && n < sizeof(vals))
            snprintf(vals + n, sizeof(vals) - n, "%s%s", n ? "; " : "", r->what);
        fprintf(f, "| `%s`%s | %s | %s%s%s | %s | %s | %s |\n", r->path,
                (r->flags & CFG_REQUIRED) ? " (required)" : "", cfg_type_name(r), r->def ? "`" : "",
                r->def ? r->def : "", r->def ? "`" : "", vals, (r->flags & CFG_RELOAD) ? "reloads" : "restart",
                r->doc ? r->doc : "");
    }
}

/* 1 when row r's value differs between a and b: the field itself where
 * the row has one ("1d" and "24h" are one value; a key dropped for its
 * default is no change), else the file's text of it (lists, URLs). */
static int cfg_row_differs(const struct cfg_row *r, const struct config *a, const struct config *b, json_t *ja,
                           json_t *jb)
{
    const char *fa = (const char *)a + r->off, *fb = (const char *)b + r->off;

    if (r->size == 0 || r->type == CFG_T_ENV)
        return !json_equal(ja, jb) && (ja != NULL || jb != NULL);
    if (r->type == CFG_T_STR)
        return strcmp(fa, fb) != 0;
    return memcmp(fa, fb, r->size) != 0;
}

/* Adds the changes under table path tpath between old and new (objects,
 * either may be NULL) to *n, calling fn for each. */
static void cfg_diff_section(const struct config *a, const struct config *b, const char *tpath, json_t *old,
                             json_t *new_obj, void (*fn)(void *ctx, const char *path, int reload), void *ctx,
                             size_t *n)
{
    size_t i;

    for (i = 0; i < cfg_n_rows; i++) {
        const struct cfg_row *r = &cfg_rows[i];
        json_t *ja, *jb;
        if (!cfg_row_in(r, tpath))
            continue;
        ja = json_object_get(old, cfg_row_name(r));
        jb = json_object_get(new_obj, cfg_row_name(r));
        if (r->type == CFG_T_SECTION && (json_is_object(ja) || json_is_object(jb))) {
            /* A section that came or went matters itself where its
             * presence does (pumping: on or off); its keys say the rest. */
            if ((ja == NULL) != (jb == NULL) && r->hook != NULL) {
                (*n)++;
                fn(ctx, r->path, (r->flags & CFG_RELOAD) != 0);
            }
            cfg_diff_section(a, b, r->path, ja, jb, fn, ctx, n);
        } else if (cfg_row_differs(r, a, b, ja, jb)) {
            (*n)++;
            fn(ctx, r->path, (r->flags & CFG_RELOAD) != 0);
        }
    }
}

size_t config_diff(const struct config *old, const struct config *new_cfg,
                   void (*fn)(void *ctx, const char *path, int reload), void *ctx)
{
    size_t n = 0;

    cfg_diff_section(old, new_cfg, "", old->json, new_cfg->json, fn, ctx, &n);
    return n;
}
