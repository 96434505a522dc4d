/*
 * simredis: the private redis-server otpctl simulate replays into. Started
 * from PATH on a free loopback port with a random password (so no other
 * server on that port can answer for it, and no other local user can write
 * into it), no persistence, its files in a 0700 temporary directory; always
 * stopped: by simredis_stop, by the signal handlers simredis_start installs
 * (SIGINT, SIGTERM, SIGHUP), and by the kernel if otpctl dies without either
 * (PR_SET_PDEATHSIG).
 */
#ifndef OTPCTL_SIMREDIS_H
#define OTPCTL_SIMREDIS_H

#include <limits.h>
#include <sys/types.h>

struct simredis {
    pid_t pid;            /* 0: not running */
    int port;
    char password[65];
    char dir[PATH_MAX - 32]; /* "" until made; room left for the file names */
    char conf[PATH_MAX];  /* dir/redis.conf */
    char log[PATH_MAX];   /* dir/redis.log: the server's own output */
};

/* Makes the directory and the config, and starts redis-server on a port
 * that was free a moment ago. Does not wait for it to answer; see
 * simredis_alive. 0, or -1 with the reason in err (cap bytes); then
 * nothing is left running. Only one simredis may be started per process. */
int simredis_start(struct simredis *r, char *err, size_t cap);

/* 1 while the server runs; 0 once it exited (a clash on its port, a bad
 * redis-server), its pid then reaped. */
int simredis_alive(struct simredis *r);

/* The last lines of the server's log (what it said when it failed) into
 * out; "" when none. */
void simredis_log_tail(const struct simredis *r, char *out, size_t cap);

/* Stops the server (SIGTERM, then SIGKILL after 5 s), waits for it, and
 * removes its files and directory. Safe to call twice. */
void simredis_stop(struct simredis *r);

#endif
