/* conn.h - one client connection: framing, ordered replies, backpressure. */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <event2/util.h>

struct clients;
struct conn;

/* Takes ownership of fd. NULL (and fd closed) on failure. admin: the
 * listener allows admin commands. */
struct conn *conn_new(struct clients *cl, evutil_socket_t fd, int admin);
/* Stop reading; close once every reply already owed is written. */
void conn_drain(struct conn *c);
/* Drops the client now; replies still owed are discarded when they arrive. */
void conn_close(struct conn *c);
/* Called by clients.c's end-of-turn event, never from c's own callbacks:
 * conn_flush writes the replies that became ready, conn_reap frees. */
void conn_flush(struct conn *c);
void conn_reap(struct conn *c);

/* Frees the recycled request slots; at exit, after the store is freed. */
void conn_pool_free(void);

/* clients.c's list of clients threads through each conn. */
struct conn_link {
	struct conn *prev, *next;
};
struct conn_link *conn_link(struct conn *c);

#endif
