/*
 * listener.h - one listening socket (TCP or unix) that hands accepted
 * connections to a callback, and pauses accepting when out of descriptors.
 */
#ifndef RL_LISTENER_H
#define RL_LISTENER_H

#include <stddef.h>

#include <event2/util.h>

struct event_base;
struct evconnlistener;
struct sockaddr;
struct listener;

/* fd is the caller's to keep or close; sa is the peer's address. */
typedef void (*listener_cb)(evutil_socket_t fd, const struct sockaddr *sa, void *arg);

/* How long accepting pauses when out of file descriptors: libevent's
 * listener would otherwise retry accept() in a busy loop. */
#define LISTENER_ACCEPT_PAUSE_MS 100

/*
 * Binds and listens on address: "host:port" or "[v6]:port" with a numeric
 * host, or "unix:/path" (a socket file left by a previous run is replaced,
 * and the new one gets file mode unix_mode). NULL with err on failure. cb may
 * be NULL only for a listener given away at once (listener_give).
 */
struct listener *listener_new(struct event_base *base, const char *address, int unix_mode,
			      listener_cb cb, void *arg, char *err, size_t errlen);
/* Same on an address already resolved; name stands for it in logs. */
struct listener *listener_new_sockaddr(struct event_base *base, const struct sockaddr *sa,
				       int salen, const char *name, listener_cb cb, void *arg,
				       char *err, size_t errlen);

/*
 * A socket already bound and listening (systemd's, activation.h): accepts
 * on it as listener_new's do. It is never unlinked (a unix socket is
 * systemd's). NULL with err on failure; the caller still owns fd then.
 */
struct listener *listener_new_fd(struct event_base *base, int fd, const char *name, listener_cb cb,
				 void *arg, char *err, size_t errlen);

/*
 * For evhttp_bind_listener, which takes over the accept callback and frees
 * the evconnlistener with its evhttp: from now on listener_close and
 * listener_free leave the evconnlistener alone, but the pause on EMFILE
 * still applies to it. Call listener_free before the new owner frees it.
 */
struct evconnlistener *listener_give(struct listener *l);

/* Stops accepting for good: closes the socket and removes a unix socket file. */
void listener_close(struct listener *l);
/* Closes (unless given away) and frees. NULL is fine. */
void listener_free(struct listener *l);

#endif
