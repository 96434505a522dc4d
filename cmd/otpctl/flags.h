/*
 * otpctl's flag parser: every command describes its flags in one table (a
 * long name, a short one, whether a value follows, where the value goes, a
 * line of help) and flags_parse reads argv against it the way getopt_long
 * does: --name VALUE, --name=VALUE, -n VALUE, -nVALUE, a flag without a
 * value, and "--" before operands. -h and --help print the usage made from
 * the table on stdout. An error names the command and the flag
 * ("otpctl block add: unknown flag --x"), is followed by the usage line on
 * stderr, and is EX_USAGE. The load: one parse per run.
 */
#ifndef OTPD_OTPCTL_FLAGS_H
#define OTPD_OTPCTL_FLAGS_H

#include <stddef.h>
#include <stdio.h>

enum flag_type {
    FLAG_BOOL, /* no value: the int at off becomes 1 */
    FLAG_STR,  /* the value, borrowed from argv: a const char * at off */
    FLAG_INT,  /* a whole number from min to max (any when both are 0): a long long at off */
    FLAG_LIST, /* may repeat; the values in order: a struct flag_list at off */
};

/* One flag. Every one is optional unless required; any but a FLAG_LIST
 * may be given once. */
struct flag {
    const char *name; /* the long name without "--", or NULL */
    char abbr;        /* the short name, or 0 */
    enum flag_type type;
    int required;
    size_t off;         /* where the value goes in the command's options struct */
    const char *arg;    /* the value's name in help ("FILE"); NULL for FLAG_BOOL */
    const char *help;   /* one line */
    long long min, max; /* FLAG_INT's bounds, inclusive; 0 and 0: none */
};

/* The values of a FLAG_LIST, or the operands, in order: v is owned (see
 * flags_free), its strings are argv's. */
struct flag_list {
    const char **v;
    int n;
};

/* A command's table and help. */
struct flag_cmd {
    const char *name;     /* "otpctl block add": errors and help start with it */
    const char *synopsis; /* the usage line after name; NULL: made from the flags and operands */
    const char *operands; /* their name in help ("ID"); NULL: the command takes none */
    int max_operands;
    size_t operands_off; /* a struct flag_list in the options struct; with stop, an int */
    int stop;            /* 1: the first operand ends the flags; its index in argv (argc for none)
                          * goes to the int at operands_off (otpctl's own flags, before the command) */
    const struct flag *flags;
    size_t n_flags;             /* at most 64 */
    const char *notes;          /* printed after the flags in help, or NULL */
    void (*more_help)(FILE *f); /* prints more after the notes, or NULL */
};

#define FLAGS_OF(rows) (rows), (sizeof(rows) / sizeof((rows)[0]))

/* What flags_parse returns when the command is to go on; anything else is
 * the sysexits code to exit with. */
#define FLAGS_GO (-1)

/*
 * Reads argv (the arguments after the command's name) into opts, the
 * command's options struct, whose fields the caller set to their defaults.
 * Returns FLAGS_GO; EX_OK after printing the help (-h, --help) on stdout;
 * EX_USAGE after saying what is wrong on stderr (an unknown flag, a value
 * missing, a flag given twice, a bad number, a required flag missing, too
 * many operands); EX_OSERR when memory ran out. Whatever it returns, the
 * caller of a table with a FLAG_LIST or operands calls flags_free(c, opts)
 * once done.
 */
int flags_parse(const struct flag_cmd *c, int argc, char **argv, void *opts);

/* Frees what flags_parse allocated in opts (the lists). */
void flags_free(const struct flag_cmd *c, void *opts);

/* The help: "usage: " and the synopsis, one line per flag, the notes. */
void flags_help(const struct flag_cmd *c, FILE *f);

/* The synopsis alone, after indent, on one line. */
void flags_synopsis(const struct flag_cmd *c, const char *indent, FILE *f);

/* Says "NAME: what" and the usage line on stderr; returns EX_USAGE. For the
 * checks a command makes beyond its table (one of two flags, a format's
 * names), so that every usage error reads the same. */
__attribute__((format(printf, 2, 3))) int flags_usage_error(const struct flag_cmd *c, const char *fmt, ...);

#endif
