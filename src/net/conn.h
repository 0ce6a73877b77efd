/* conn.h - one client connection: the transport a session runs on (session.h). */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <event2/util.h>

#include "config.h"
#include "conn_types.h"

struct event_base;
struct cmd_env;
struct conn;
struct sockaddr;


/*
 * What the connections share with the registry that keeps them (clients.c):
 * the registry fills it in and answers the two calls, so conn.c needs no
 * header of its owner.
 */
struct conn_ctx {
	struct event_base *base;
	struct config *cfg;	   /* the snapshot new requests run under */
	const struct cmd_env *env; /* the store and deny cache they run against */
	/* c was closed: take it off the list, conn_reap it at the end of the loop turn. */
	void (*closed)(struct conn_ctx *ctx, struct conn *c);
	/* c has replies ready: conn_flush it at the end of the loop turn. */
	void (*ready)(struct conn_ctx *ctx, struct conn *c);
};

/* Takes ownership of fd, accepted from sa on port. NULL (and fd closed) on
 * failure; else the caller links it into its list (conn_link). */
struct conn *conn_new(struct conn_ctx *ctx, evutil_socket_t fd, const struct sockaddr *sa,
		      const struct conn_port *port);
/* Stop reading; close once every reply already owed is written. */
void conn_drain(struct conn *c);
/* Drops the client now; replies still owed are discarded when they arrive. */
void conn_close(struct conn *c);
/* Called by the owner's end-of-turn event, never from c's own callbacks:
 * conn_flush writes the replies that became ready, conn_reap frees. */
void conn_flush(struct conn *c);
void conn_reap(struct conn *c);

/* Frees what the sessions recycle (request slots, gRPC's streams); at
 * exit, after the store is freed. */
void conn_pool_free(void);

/* The owner's list of clients threads through each conn. */
struct conn_link {
	struct conn *prev, *next;
};
struct conn_link *conn_link(struct conn *c);

#endif
