/* store_redis.h - the single-Redis store backend (hiredis async on libevent). */
#ifndef RL_STORE_REDIS_H
#define RL_STORE_REDIS_H

#include <stddef.h>

struct event_base;
struct config_redis;
struct store;
struct store_request;
struct store_result;
struct tls_client;

/*
 * Starts connecting at once and keeps reconnecting with capped backoff; a
 * Redis that is down at start-up is not an error. NULL with err only for a
 * configuration it cannot use.
 */
struct store *store_redis_new(struct event_base *base, const struct config_redis *cfg,
			      struct tls_client *tls, char *err, size_t errlen);
/* st (store_redis_new's) is alone at its address, no Sentinel or Cluster
 * following failovers for it: a connection that answers READONLY is
 * reconnected (resolving the address again). */
void store_redis_follow_readonly(struct store *st);

/*
 * A store for one Redis Cluster master at `address` (credentials, timeout and
 * pool size from cfg): the cluster variant of the script, several slots per
 * batch. store_cluster.c submits to it with store_redis_submit_node.
 */
struct store *store_redis_new_node(struct event_base *base, const struct config_redis *cfg,
				   const char *address, struct tls_client *tls, char *err,
				   size_t errlen);

/* How store_cluster.c sends one request to a node. */
enum store_node_send {
	STORE_NODE_BATCHED, /* with others, keys undeclared: any slot in one call */
	STORE_NODE_ALONE,   /* its own call with its keys declared, so Redis can redirect it */
	STORE_NODE_ASKING,  /* alone, after ASKING (the node answered -ASK before) */
};

/* Where a node's -MOVED or -ASK said to ask instead; `to` ("host:port") is
 * valid during the callback. */
struct store_node_redirect {
	int slot;
	const char *to;
};

/* Called exactly once, like store_done_fn; where is NULL but for a MOVED or
 * ASK failure (res->error) whose text names a slot and an address. */
typedef void store_node_done_fn(void *arg, const struct store_result *res,
				const struct store_node_redirect *where);

/* store_submit for a node store, with the cluster's say in how it is sent. */
void store_redis_submit_node(struct store *node, const struct store_request *req,
			     enum store_node_send how, store_node_done_fn *done, void *arg);

#endif
