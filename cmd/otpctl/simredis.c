/*
 * simredis: see simredis.h. One server per otpctl run; the signal handler
 * reaches it through one static pointer, and does only async-signal-safe
 * things (kill, waitpid, unlink, rmdir, raise).
 */
#include "simredis.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/otp/code.h"

static struct simredis *volatile simredis_current;

/* A loopback port that was free when asked (another process may take it
 * before redis-server binds it: then the server exits and the caller
 * starts again). 0 on failure. */
static int simredis_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    if (fd < 0)
        return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Kills and reaps the server, then removes its files. */
static void simredis_reap(struct simredis *r, int patient)
{
    int i, status;

    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        /* A server without persistence stops at once; do not wait forever
         * on one that does not. */
        for (i = 0; patient && i < 500 && waitpid(r->pid, &status, WNOHANG) == 0; i++)
            nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
        if (!patient || i == 500) {
            kill(r->pid, SIGKILL);
            while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
                ;
        }
        r->pid = 0;
    }
    if (r->dir[0]) {
        unlink(r->conf);
        unlink(r->log);
        rmdir(r->dir);
    }
}

static void simredis_on_signal(int sig)
{
    struct simredis *r = simredis_current;

    if (r != NULL)
        simredis_reap(r, 0);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int simredis_write_conf(struct simredis *r)
{
    int fd = open(r->conf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FILE *f;
    int bad;

    if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    /* No persistence at all: a replay's state is thrown away. */
    fprintf(f,
            "bind 127.0.0.1\nport %d\nrequirepass %s\nsave \"\"\nappendonly no\ndir %s\n"
            "daemonize no\nprotected-mode yes\nlogfile \"\"\n",
            r->port, r->password, r->dir);
    bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

int simredis_start(struct simredis *r, char *err, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    char id[CODE_ID_LEN + 1];
    pid_t parent = getpid();
    int logfd;

    memset(r, 0, sizeof(*r));
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    if (strlen(tmp) + sizeof("/otpctl-simulate-XXXXXX") > sizeof(r->dir)) {
        snprintf(err, cap, "TMPDIR is too long");
        return -1;
    }
    snprintf(r->dir, sizeof(r->dir), "%s/otpctl-simulate-XXXXXX", tmp);
    if (mkdtemp(r->dir) == NULL) {
        snprintf(err, cap, "cannot make a directory in %s: %s", tmp, strerror(errno));
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->conf, sizeof(r->conf), "%s/redis.conf", r->dir);
    snprintf(r->log, sizeof(r->log), "%s/redis.log", r->dir);
    code_new_id(id);
    memcpy(r->password, id, CODE_ID_LEN);
    code_new_id(id);
    memcpy(r->password + CODE_ID_LEN, id, CODE_ID_LEN + 1);
    if ((r->port = simredis_free_port()) == 0 || simredis_write_conf(r) < 0) {
        snprintf(err, cap, "cannot prepare redis-server in %s: %s", r->dir, strerror(errno));
        simredis_reap(r, 1);
        return -1;
    }
    if ((logfd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        snprintf(err, cap, "cannot write %s: %s", r->log, strerror(errno));
        simredis_reap(r, 1);
        return -1;
    }
    simredis_current = r;
    signal(SIGINT, simredis_on_signal);
    signal(SIGTERM, simredis_on_signal);
    signal(SIGHUP, simredis_on_signal);
    r->pid = fork();
    if (r->pid == 0) {
        /* The server dies with otpctl, even on SIGKILL; its own process
         * group keeps a terminal's ^C for otpctl, which stops it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execlp("redis-server", "redis-server", r->conf, (char *)NULL);
        dprintf(STDERR_FILENO, "cannot run redis-server: %s\n", strerror(errno));
        _exit(127);
    }
    close(logfd);
    if (r->pid < 0) {
        r->pid = 0;
        snprintf(err, cap, "cannot fork: %s", strerror(errno));
        simredis_reap(r, 1);
        return -1;
    }
    return 0;
}

int simredis_alive(struct simredis *r)
{
    int status;

    if (r->pid <= 0)
        return 0;
    if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
        r->pid = 0;
        return 0;
    }
    return 1;
}

void simredis_log_tail(const struct simredis *r, char *out, size_t cap)
{
    FILE *f = fopen(r->log, "r");
    long n;
    size_t got;

    out[0] = '\0';
    if (f == NULL)
        return;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > (long)cap - 1)
        fseek(f, n - (long)cap + 1, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    got = fread(out, 1, cap - 1, f);
    out[got] = '\0';
    fclose(f);
}

void simredis_stop(struct simredis *r)
{
    simredis_reap(r, 1);
    r->dir[0] = '\0';
    if (simredis_current == r) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        simredis_current = NULL;
    }
}
