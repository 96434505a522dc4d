/*
 * otpctl's commands, one file each (simulate's in three); main.c reads
 * otpctl's own flags and dispatches. Each command reads its flags with
 * flags.c from its own table; its synopsis function prints its usage line
 * for otpctl's help.
 */
#ifndef OTPD_OTPCTL_H
#define OTPD_OTPCTL_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "flags.h"

/* Writes j (json_dumps with flags) and a newline to f, with DEL and the C1
 * controls as \u escapes: jansson escapes the other control characters
 * itself, and a text from otpd or a ledger must not act on a terminal.
 * -1 when out of memory (nothing written). main.c. */
int otpctl_print_json(const json_t *j, size_t flags, FILE *f);

/* The flags of the commands that call otpd (block, override, unlock),
 * given before the command's name or among its flags, not both. */
struct otpctl_net {
    const char *server;  /* -s URL; NULL: OTPCTL_DEFAULT_URL */
    long long timeout_s; /* --timeout; 0: not given (OTPCTL_TIMEOUT_S) */
    const char *cacert;  /* --cacert FILE; NULL: the system's CA certificates */
};

#define OTPCTL_DEFAULT_URL "http://127.0.0.1:8080"
#define OTPCTL_TIMEOUT_S 10
#define OTPCTL_TIMEOUT_MAX_S 600

/* Their rows, for a table whose options struct holds a struct otpctl_net
 * at off. */
#define OTPCTL_NET_FLAGS(off)                                                                                \
    {"server", 's', FLAG_STR, 0, (off) + offsetof(struct otpctl_net, server), "URL",                         \
     "otpd: http[s]://HOST[:PORT][/PATH] (default " OTPCTL_DEFAULT_URL ")", 0, 0},                           \
        {"timeout", 0, FLAG_INT, 0, (off) + offsetof(struct otpctl_net, timeout_s), "S",                    \
         "seconds the whole call may take (default 10)", 1, OTPCTL_TIMEOUT_MAX_S},                           \
        {"cacert", 0, FLAG_STR, 0, (off) + offsetof(struct otpctl_net, cacert), "FILE",                     \
         "CA certificates (PEM) an https:// server's must chain to (default: the system's)", 0, 0}

/* otpctl check and otpctl audit (audit.c): argv holds the arguments after
 * the command's name. Return a sysexits code. */
int otpctl_check(int argc, char **argv);
void otpctl_check_synopsis(FILE *f);
int otpctl_audit(int argc, char **argv);
void otpctl_audit_synopsis(FILE *f);

/* otpctl ledger: argv holds the arguments after "ledger". Returns a
 * sysexits code. */
int otpctl_ledger(int argc, char **argv);
void otpctl_ledger_synopsis(FILE *f);

/* otpctl simulate: argv holds the arguments after "simulate". Returns a
 * sysexits code. */
int otpctl_simulate(int argc, char **argv);
void otpctl_simulate_synopsis(FILE *f);

/* otpctl override|block|unlock (admin.c): argv holds the command line from
 * its first word ("block"); net the flags given before it. Returns a
 * sysexits code. */
int otpctl_admin(int argc, char **argv, const struct otpctl_net *net);
void otpctl_admin_synopsis(FILE *f);

/* otpctl verify (verify.c) and otpctl stats (stats.c): argv holds the
 * arguments after the command's name. Return a sysexits code. */
int otpctl_verify(int argc, char **argv);
void otpctl_verify_synopsis(FILE *f);
int otpctl_stats(int argc, char **argv);
void otpctl_stats_synopsis(FILE *f);

#endif
