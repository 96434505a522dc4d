/*
 * otpctl's commands, one file each; main.c dispatches.
 */
#ifndef OTPD_OTPCTL_H
#define OTPD_OTPCTL_H

#include <stdio.h>

#include <jansson.h>

/* Writes j (json_dumps with flags) and a newline to f, with DEL and the C1
 * controls as \u escapes: jansson escapes the other control characters
 * itself, and a text from otpd or a ledger must not act on a terminal.
 * -1 when out of memory (nothing written). main.c. */
int otpctl_print_json(const json_t *j, size_t flags, FILE *f);

/* otpctl ledger: argv holds the arguments after "ledger". Returns a
 * sysexits code. */
int otpctl_ledger(int argc, char **argv);
void otpctl_ledger_usage(FILE *f);

/* otpctl simulate: argv holds the arguments after "simulate". Returns a
 * sysexits code. */
int otpctl_simulate(int argc, char **argv);
void otpctl_simulate_usage(FILE *f);

/* otpctl override|block|unlock (admin.c): argv holds the arguments after
 * "otpctl" (global flags such as -s URL first). Returns a sysexits code.
 * otpctl_admin_is: 1 when word starts such a command line. */
int otpctl_admin(int argc, char **argv);
int otpctl_admin_is(const char *word);
void otpctl_admin_usage(FILE *f);

/* otpctl verify (verify.c) and otpctl stats (stats.c): argv holds the
 * arguments after the command's name. Return a sysexits code. */
int otpctl_verify(int argc, char **argv);
void otpctl_verify_usage(FILE *f);
int otpctl_stats(int argc, char **argv);
void otpctl_stats_usage(FILE *f);

#endif
