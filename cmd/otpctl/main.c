/*
 * otpctl: the operator's CLI. `check` validates a config like otpd --check
 * and `audit` prints the newest rows of a ledger table (audit.c); `ledger`
 * (ledger.c) prints one history merged from several ledgers; `verify`
 * (verify.c) checks a ledger's hash chain; `stats` (stats.c) sums a period;
 * `simulate` (simulate.c) replays a ledger against other rules; `block`,
 * `override` and `unlock` (admin.c) call otpd's admin API. Those that read
 * a ledger need no secret and open it read-only. None prints a code: the
 * ledger holds none. Exit codes are sysexits'.
 *
 * This file reads otpctl's own flags (those of the commands that call otpd,
 * given before the command's name), finds the command and runs it; `otpctl
 * help COMMAND` is `otpctl COMMAND --help`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "otpctl.h"

/* The commands: run takes the arguments after the name; run_net, for those
 * that call otpd, the name and its arguments, and otpctl's flags. */
static const struct otpctl_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    int (*run_net)(int argc, char **argv, const struct otpctl_net *net);
    void (*synopsis)(FILE *f);
} otpctl_cmds[] = {
    {"check", otpctl_check, NULL, otpctl_check_synopsis},
    {"audit", otpctl_audit, NULL, otpctl_audit_synopsis},
    {"ledger", otpctl_ledger, NULL, otpctl_ledger_synopsis},
    {"verify", otpctl_verify, NULL, otpctl_verify_synopsis},
    {"stats", otpctl_stats, NULL, otpctl_stats_synopsis},
    {"simulate", otpctl_simulate, NULL, otpctl_simulate_synopsis},
    {"block", NULL, otpctl_admin, otpctl_admin_synopsis},
    {"override", NULL, otpctl_admin, NULL}, /* admin.c's synopsis covers all three */
    {"unlock", NULL, otpctl_admin, NULL},
};
#define OTPCTL_NCMDS (sizeof(otpctl_cmds) / sizeof(otpctl_cmds[0]))

/* otpctl's own options: the flags of the commands that call otpd, and
 * where the command's name is in argv. */
struct main_opts {
    struct otpctl_net net;
    int command;
};

static void main_commands(FILE *f);

static const struct flag main_flags[] = {
    OTPCTL_NET_FLAGS(offsetof(struct main_opts, net)),
};

static const struct flag_cmd main_cmd = {
    .name = "otpctl",
    .synopsis = "[-s URL] [--timeout S] [--cacert FILE] COMMAND [ARGS...]",
    .operands_off = offsetof(struct main_opts, command),
    .stop = 1,
    .flags = FLAGS_OF(main_flags),
    .notes = "  (these flags go with block, override and unlock, before the command or among its flags;\n"
             "   the admin key comes from OTPCTL_KEY)\n",
    .more_help = main_commands,
};

/* The commands' synopses, for otpctl's help. */
static void main_commands(FILE *f)
{
    size_t i;

    fputs("\ncommands (otpctl COMMAND --help, or otpctl help COMMAND, for one's flags):\n", f);
    for (i = 0; i < OTPCTL_NCMDS; i++)
        if (otpctl_cmds[i].synopsis != NULL)
            otpctl_cmds[i].synopsis(f);
}

int otpctl_print_json(const json_t *j, size_t flags, FILE *f)
{
    char *text = json_dumps(j, flags);
    const unsigned char *p;

    if (text == NULL)
        return -1;
    for (p = (const unsigned char *)text; *p; p++) {
        if (*p == 0x7f) {
            fputs("\\u007f", f);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            fprintf(f, "\\u%04x", p[1]); /* U+0080 to U+009F: 0xc2 then the code point's own byte */
            p++;
        } else {
            fputc(*p, f);
        }
    }
    fputc('\n', f);
    free(text);
    return 0;
}

static const struct otpctl_cmd *main_find(const char *name)
{
    size_t i;

    for (i = 0; i < OTPCTL_NCMDS; i++)
        if (strcmp(otpctl_cmds[i].name, name) == 0)
            return &otpctl_cmds[i];
    return NULL;
}

/* Runs the command at argv[0] with argv's other words as its arguments;
 * help: with --help after them. */
static int main_run(int argc, char **argv, const struct otpctl_net *net, int given, int help)
{
    static char help_flag[] = "--help";
    const struct otpctl_cmd *cmd = main_find(argv[0]);
    char **args = NULL;
    int ex;

    if (cmd == NULL)
        return flags_usage_error(&main_cmd, "unknown command %s", argv[0]);
    if (given && cmd->run_net == NULL)
        return flags_usage_error(&main_cmd,
                                 "-s, --timeout and --cacert go with block, override and unlock, "
                                 "not with %s",
                                 argv[0]);
    if (help) {
        if ((args = calloc((size_t)argc + 2, sizeof(*args))) == NULL) {
            fputs("otpctl: out of memory\n", stderr);
            return EX_OSERR;
        }
        memcpy(args, argv, (size_t)argc * sizeof(*args));
        args[argc++] = help_flag;
        argv = args;
    }
    ex = cmd->run_net ? cmd->run_net(argc, argv, net) : cmd->run(argc - 1, argv + 1);
    free(args);
    return ex;
}

int main(int argc, char **argv)
{
    struct main_opts o;
    int ex, given;

    memset(&o, 0, sizeof(o));
    if ((ex = flags_parse(&main_cmd, argc - 1, argv + 1, &o)) != FLAGS_GO)
        goto out;
    argc -= 1 + o.command;
    argv += 1 + o.command;
    given = o.net.server != NULL || o.net.timeout_s != 0 || o.net.cacert != NULL;
    if (argc > 0 && strcmp(argv[0], "help") == 0) {
        /* otpctl help [COMMAND...]: the help on stdout. */
        if (argc == 1) {
            flags_help(&main_cmd, stdout);
            ex = EX_OK;
        } else {
            ex = main_run(argc - 1, argv + 1, &o.net, 0, 1);
        }
    } else if (argc == 0) {
        fputs("otpctl: a command is needed\n", stderr);
        flags_help(&main_cmd, stderr);
        ex = EX_USAGE;
    } else {
        ex = main_run(argc, argv, &o.net, given, 0);
    }
out:
    flags_free(&main_cmd, &o);
    return ex;
}
