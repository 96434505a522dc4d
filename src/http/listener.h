/*
 * listener: a listening socket of ours and the one thread that accepts on
 * it, handing each connection to a libmicrohttpd daemon started with
 * MHD_USE_NO_LISTEN_SOCKET. Stopping it closes the socket, so new clients
 * are refused while the daemon keeps serving the connections it has.
 *
 * Why not MHD's own listening socket and MHD_quiesce_daemon: in 0.9.75,
 * with a worker pool and epoll, quiesce takes the socket out of each
 * worker's epoll set from the calling thread while the worker may be doing
 * the same in MHD_epoll; the loser's EPOLL_CTL_DEL fails with ENOENT and
 * MHD aborts ("Failed to remove listen FD from epoll set"). A daemon with
 * no listening socket never touches one.
 *
 * Load: one accept and one MHD_add_connection per connection.
 */
#ifndef OTPD_LISTENER_H
#define OTPD_LISTENER_H

#include <microhttpd.h>

struct listener;

/* Binds and listens on host:port (numeric or resolvable host). Returns the
 * listener, which the caller frees with listener_free, or NULL with err
 * (OTP_ERR_LEN bytes). Nothing is accepted before listener_run. */
struct listener *listener_open(const char *host, int port, char *err);

/* Starts the accepting thread, which hands connections to d (a daemon
 * with MHD_USE_NO_LISTEN_SOCKET and MHD_USE_ITC) until listener_free.
 * -1 with err when the thread cannot start. */
int listener_run(struct listener *l, struct MHD_Daemon *d, char *err);

/* Stops accepting and frees l (NULL allowed): the thread is woken and
 * joined before the socket is closed, so no connection reaches the daemon
 * afterwards and the daemon may then be stopped. Connections the kernel
 * queued but nobody accepted are reset. Blocks for at most one
 * MHD_add_connection. */
void listener_free(struct listener *l);

#endif
