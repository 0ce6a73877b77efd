/*
 * clients.h - the connected clients: who may connect (max_clients), replies
 * written and connections freed at the end of each loop turn, draining.
 */
#ifndef RL_CLIENTS_H
#define RL_CLIENTS_H

#include <stddef.h>

#include <event2/util.h>

struct event_base;
struct sockaddr;
struct config;
struct cmd_env;
struct clients;
struct conn_port;

/* Requests run against env and cfg (see clients_set_config). NULL when out of memory. */
struct clients *clients_new(struct event_base *base, const struct cmd_env *env, struct config *cfg);
/* The snapshot new requests and new clients use. Borrowed: the caller
 * keeps cfg alive until it is replaced or clients_free. */
void clients_set_config(struct clients *cl, struct config *cfg);
size_t clients_count(const struct clients *cl);

/* A connection accepted on a client port (takes fd): at max_clients told
 * too-many-clients in its own protocol and closed (refuse.c), else served
 * as port says. */
void clients_accept(struct clients *cl, evutil_socket_t fd, const struct sockaddr *sa,
		    const struct conn_port *port);
/* Each client is closed once its in-flight replies are written; done(arg)
 * runs from the loop once no client is left. */
void clients_drain(struct clients *cl, void (*done)(void *arg), void *arg);
/* Closes every client now and frees. NULL is fine. */
void clients_free(struct clients *cl);

#endif
