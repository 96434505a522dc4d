/*
 * epoll_slow: an LD_PRELOAD shim for tests/integration/test_money_drain.py. Every
 * EPOLL_CTL_DEL waits a millisecond before it is made, which widens a
 * check-then-delete race between threads sharing an epoll registration
 * from nanoseconds to a millisecond: libmicrohttpd 0.9.75's
 * MHD_quiesce_daemon against its pool workers' MHD_epoll lost it in 89 of
 * 90 stops with this shim, in none of 230 without it at load 2.
 */
#include <dlfcn.h>
#include <sys/epoll.h>
#include <unistd.h>

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    static int (*real)(int, int, int, struct epoll_event *);

    if (real == NULL)
        *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    if (op == EPOLL_CTL_DEL)
        usleep(1000);
    return real(epfd, op, fd, ev);
}
