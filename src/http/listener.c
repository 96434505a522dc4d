/*
 * listener: see listener.h. One thread per listening socket waits in poll
 * on the socket and on a pipe that listener_free writes to, so a stop
 * never depends on a client connecting or on shutdown(2) waking accept.
 */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../base/rc.h"

/* After running out of descriptors or memory, how long the thread waits
 * before accepting again (a connection closing frees one); MHD's own
 * listener stops polling its socket the same way. */
#define LISTENER_BACKOFF_MS 100

struct listener {
    int fd;      /* the listening socket */
    int wake[2]; /* a pipe: listener_free writes one byte to stop the thread */
    struct MHD_Daemon *d;
    pthread_t thread;
    int started;
};

struct listener *listener_open(const char *host, int port, char *err)
{
    struct addrinfo hints = {0}, *ai = NULL;
    struct listener *l = NULL;
    char port_s[8];
    int on = 1;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(port_s, sizeof(port_s), "%d", port);
    if (getaddrinfo(host, port_s, &hints, &ai) != 0 || ai == NULL) {
        snprintf(err, OTP_ERR_LEN, "http: cannot resolve %s", host);
        goto fail;
    }
    if ((l = calloc(1, sizeof(*l))) == NULL) {
        snprintf(err, OTP_ERR_LEN, "http: out of memory");
        goto fail;
    }
    l->fd = l->wake[0] = l->wake[1] = -1;
    if (pipe2(l->wake, O_CLOEXEC) != 0) {
        snprintf(err, OTP_ERR_LEN, "http: cannot make a pipe: %s", strerror(errno));
        goto fail;
    }
    if ((l->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        snprintf(err, OTP_ERR_LEN, "http: cannot make a socket: %s", strerror(errno));
        goto fail;
    }
    /* As libmicrohttpd did with its own socket: a restart may bind while
     * the last run's connections are in TIME_WAIT, and an IPv6 address
     * serves IPv6 only. */
    (void)setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (ai->ai_family == AF_INET6)
        (void)setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (bind(l->fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(l->fd, SOMAXCONN) != 0) {
        snprintf(err, OTP_ERR_LEN, "http: cannot listen on %s:%d: %s", host, port, strerror(errno));
        goto fail;
    }
    freeaddrinfo(ai);
    return l;
fail:
    if (ai)
        freeaddrinfo(ai);
    listener_free(l);
    return NULL;
}

/* Waits for the stop byte for up to ms; 1 once it came. */
static int listener_stopped(struct listener *l, int ms)
{
    struct pollfd p = {l->wake[0], POLLIN, 0};

    return poll(&p, 1, ms) > 0;
}

static void *listener_loop(void *arg)
{
    struct listener *l = arg;

    for (;;) {
        struct pollfd p[2] = {{l->wake[0], POLLIN, 0}, {l->fd, POLLIN, 0}};
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int s;

        if (poll(p, 2, -1) < 0)
            continue; /* EINTR: every signal is blocked here, but be safe */
        if (p[0].revents)
            break;
        if (!p[1].revents)
            continue;
        s = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s < 0) {
            /* EAGAIN, ECONNABORTED and the like: the client is gone or
             * another look will do. Out of descriptors or memory: wait
             * for some to be freed rather than spin on a ready socket. */
            if ((errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) &&
                listener_stopped(l, LISTENER_BACKOFF_MS))
                break;
            continue;
        }
        /* On MHD_NO (limits reached, out of memory) MHD closed s itself. */
        (void)MHD_add_connection(l->d, s, (struct sockaddr *)&ss, len);
    }
    return NULL;
}

int listener_run(struct listener *l, struct MHD_Daemon *d, char *err)
{
    l->d = d;
    if (pthread_create(&l->thread, NULL, listener_loop, l) != 0) {
        snprintf(err, OTP_ERR_LEN, "http: cannot start the accepting thread");
        return -1;
    }
    l->started = 1;
    return 0;
}

void listener_free(struct listener *l)
{
    if (l == NULL)
        return;
    if (l->started) {
        char b = 0;
        ssize_t n;
        do
            n = write(l->wake[1], &b, 1);
        while (n < 0 && errno == EINTR);
        pthread_join(l->thread, NULL);
    }
    if (l->fd >= 0)
        close(l->fd);
    if (l->wake[0] >= 0)
        close(l->wake[0]);
    if (l->wake[1] >= 0)
        close(l->wake[1]);
    free(l);
}
