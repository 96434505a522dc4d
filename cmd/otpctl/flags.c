/*
 * otpctl's flag parser (flags.h): reads argv against a command's table and
 * prints the help the table makes. Each argument is read once, left to
 * right; which flags were seen is a bit per row, so a table holds at most
 * 64 rows. The only memory it takes is the lists' arrays, sized once by argc.
 */
#include "flags.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

/* The field at off in opts, as a pointer to type. */
#define FL_AT(opts, off, type) ((type *)(void *)((char *)(opts) + (off)))
/* The column where a flag's help starts. */
#define FL_HELP_COL 26

/* How f is written: "--name", or "-n" when it has no long name or when
 * short_first asks for the short one it has (synopses stay short). */
static const char *fl_name(const struct flag *f, int short_first, char *buf, size_t cap)
{
    if (f->name != NULL && !(short_first && f->abbr))
        snprintf(buf, cap, "--%s", f->name);
    else
        snprintf(buf, cap, "-%c", f->abbr);
    return buf;
}

void flags_synopsis(const struct flag_cmd *c, const char *indent, FILE *f)
{
    char name[64];
    size_t k;
    int optional = 0;

    fprintf(f, "%s%s", indent, c->name);
    if (c->synopsis != NULL) {
        fprintf(f, " %s\n", c->synopsis);
        return;
    }
    for (k = 0; k < c->n_flags; k++) {
        const struct flag *fl = &c->flags[k];
        fl_name(fl, 1, name, sizeof(name));
        if (!fl->required)
            optional = 1;
        else if (fl->type == FLAG_LIST)
            fprintf(f, " %s %s [%s %s...]", name, fl->arg, name, fl->arg);
        else
            fprintf(f, " %s%s%s", name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
    }
    fprintf(f, "%s%s%s\n", optional ? " [options]" : "", c->operands ? " " : "",
            c->operands ? c->operands : "");
}

/* One line of help: the flag's spellings and value, then its help. */
static void fl_help_line(const char *abbr, const char *name, const char *arg, const char *help, int required,
                         FILE *f)
{
    char left[128];
    int n;

    /* "  -c, --config FILE", "      --db FILE", "  -c FILE" */
    n = snprintf(left, sizeof(left), "  %s%s%s%s%s%s", abbr ? abbr : "  ", name ? (abbr ? ", " : "  ") : "",
                 name ? "--" : "", name ? name : "", arg ? " " : "", arg ? arg : "");
    if (n >= FL_HELP_COL - 1)
        fprintf(f, "%s\n%*s%s%s\n", left, FL_HELP_COL, "", help, required ? " (required)" : "");
    else
        fprintf(f, "%-*s%s%s\n", FL_HELP_COL, left, help, required ? " (required)" : "");
}

void flags_help(const struct flag_cmd *c, FILE *f)
{
    char abbr[3];
    size_t k;

    flags_synopsis(c, "usage: ", f);
    for (k = 0; k < c->n_flags; k++) {
        const struct flag *fl = &c->flags[k];
        snprintf(abbr, sizeof(abbr), "-%c", fl->abbr);
        fl_help_line(fl->abbr ? abbr : NULL, fl->name, fl->arg, fl->help, fl->required, f);
    }
    fl_help_line("-h", "help", NULL, "print this help and exit", 0, f);
    if (c->notes != NULL)
        fprintf(f, "%s", c->notes);
    if (c->more_help != NULL)
        c->more_help(f);
}

int flags_usage_error(const struct flag_cmd *c, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", c->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    flags_synopsis(c, "usage: ", stderr);
    fprintf(stderr, "Run '%s --help' for its flags.\n", c->name);
    return EX_USAGE;
}

/* Appends v to l, whose array has room for every argument (cap). */
static int fl_append(const struct flag_cmd *c, struct flag_list *l, const char *v, int cap)
{
    if (l->v == NULL && (l->v = calloc((size_t)cap + 1, sizeof(*l->v))) == NULL) {
        fprintf(stderr, "%s: out of memory\n", c->name);
        return EX_OSERR;
    }
    l->v[l->n++] = v;
    return FLAGS_GO;
}

/* A whole number from s within f's bounds (none when both are 0). */
static int fl_int(const struct flag_cmd *c, const struct flag *f, const char *spelled, const char *s,
                  long long *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (s[0] == '\0' || s[0] == ' ' || *end != '\0' || errno == ERANGE)
        return flags_usage_error(c, "%s %s: a whole number is needed", spelled, s);
    if ((f->min != 0 || f->max != 0) && (v < f->min || v > f->max))
        return flags_usage_error(c, "%s %s: a whole number from %lld to %lld is needed", spelled, s, f->min,
                                 f->max);
    *out = v;
    return FLAGS_GO;
}

/* Puts value where f says. */
static int fl_store(const struct flag_cmd *c, const struct flag *f, const char *spelled, const char *value,
                    int argc, void *opts)
{
    switch (f->type) {
    case FLAG_BOOL:
        *FL_AT(opts, f->off, int) = 1;
        return FLAGS_GO;
    case FLAG_STR:
        *FL_AT(opts, f->off, const char *) = value;
        return FLAGS_GO;
    case FLAG_INT:
        return fl_int(c, f, spelled, value, FL_AT(opts, f->off, long long));
    case FLAG_LIST:
        return fl_append(c, FL_AT(opts, f->off, struct flag_list), value, argc);
    }
    return EX_SOFTWARE;
}

/*
 * Reads the flag at argv[*i], and its value: after '=' (--name=VALUE),
 * after a short name (-nVALUE), or the next argument (*i moves past it).
 */
static int fl_flag(const struct flag_cmd *c, int argc, char **argv, int *i, void *opts, uint64_t *seen)
{
    const char *a = argv[*i], *value = NULL;
    const struct flag *f;
    char spelled[64];
    size_t k, len;

    if (a[1] == '-') {
        len = strcspn(a + 2, "=");
        for (k = 0; k < c->n_flags; k++)
            if (c->flags[k].name && strlen(c->flags[k].name) == len &&
                strncmp(c->flags[k].name, a + 2, len) == 0)
                break;
        if (a[2 + len] == '=')
            value = a + 3 + len;
        snprintf(spelled, sizeof(spelled), "--%.*s", (int)len, a + 2);
    } else {
        for (k = 0; k < c->n_flags; k++)
            if (c->flags[k].abbr == a[1])
                break;
        if (a[2] != '\0')
            value = a + 2;
        snprintf(spelled, sizeof(spelled), "-%c", a[1]);
    }
    if (k == c->n_flags)
        return flags_usage_error(c, "unknown flag %s", spelled);
    f = &c->flags[k];
    if (f->type != FLAG_LIST && (*seen & (UINT64_C(1) << k)))
        return flags_usage_error(c, "%s given twice", spelled);
    *seen |= UINT64_C(1) << k;
    if (f->type == FLAG_BOOL && value != NULL)
        return flags_usage_error(c, "%s takes no value", spelled);
    if (f->type != FLAG_BOOL && value == NULL) {
        if (*i + 1 >= argc)
            return flags_usage_error(c, "%s needs a value", spelled);
        value = argv[++*i];
    }
    return fl_store(c, f, spelled, value, argc, opts);
}

/* An operand: the command's, while it takes more. */
static int fl_operand(const struct flag_cmd *c, const char *a, int argc, void *opts)
{
    struct flag_list *l;

    if (c->operands == NULL)
        return flags_usage_error(c, "unexpected argument %s", a);
    l = FL_AT(opts, c->operands_off, struct flag_list);
    if (l->n >= c->max_operands)
        return flags_usage_error(c, "unexpected argument %s", a);
    return fl_append(c, l, a, argc);
}

int flags_parse(const struct flag_cmd *c, int argc, char **argv, void *opts)
{
    uint64_t seen = 0;
    char name[64];
    size_t k;
    int i, rc = FLAGS_GO, operands_only = 0;

    if (c->stop)
        *FL_AT(opts, c->operands_off, int) = argc;
    for (i = 0; i < argc && rc == FLAGS_GO; i++) {
        const char *a = argv[i];
        if (!operands_only && strcmp(a, "--") == 0) {
            operands_only = 1;
        } else if (c->stop && (operands_only || a[0] != '-' || a[1] == '\0')) {
            *FL_AT(opts, c->operands_off, int) = i;
            break;
        } else if (operands_only || a[0] != '-' || a[1] == '\0') {
            rc = fl_operand(c, a, argc, opts);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            flags_help(c, stdout);
            rc = EX_OK;
        } else {
            rc = fl_flag(c, argc, argv, &i, opts, &seen);
        }
    }
    for (k = 0; k < c->n_flags && rc == FLAGS_GO; k++)
        if (c->flags[k].required && !(seen & (UINT64_C(1) << k)))
            rc = flags_usage_error(c, "%s is required", fl_name(&c->flags[k], 0, name, sizeof(name)));
    return rc;
}

void flags_free(const struct flag_cmd *c, void *opts)
{
    struct flag_list *l;
    size_t k;

    for (k = 0; k < c->n_flags; k++) {
        if (c->flags[k].type != FLAG_LIST)
            continue;
        l = FL_AT(opts, c->flags[k].off, struct flag_list);
        free(l->v);
        l->v = NULL;
        l->n = 0;
    }
    if (c->operands != NULL && !c->stop) {
        l = FL_AT(opts, c->operands_off, struct flag_list);
        free(l->v);
        l->v = NULL;
        l->n = 0;
    }
}
