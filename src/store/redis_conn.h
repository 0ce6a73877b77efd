/*
 * redis_conn.h - one connection of a pool to one Redis (an rlink, plain or
 * TLS): connect with a timeout, setup (AUTH, SELECT, SCRIPT LOAD), the
 * script's check, reconnects with capped backoff, stall detection. What is sent on it, and why, is its owner's business
 * (store_redis.c); the connection tells its owner through redis_conn_ops.
 */
#ifndef RL_REDIS_CONN_H
#define RL_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

struct event;
struct event_base;
struct rlink;
struct redis_conn;
struct tls_client;

/* What a connection tells its owner; every callback runs from the loop. */
struct redis_conn_ops {
	/* TCP is up; setup is queued. */
	void (*connected)(struct redis_conn *c);
	/* c got a good reply (after redis_conn_verified; for the subscriber,
	 * its SUBSCRIBE was confirmed). */
	void (*verified)(struct redis_conn *c);
	/* The script is loaded: c may decide (and be checked). */
	void (*ready)(struct redis_conn *c);
	/* c is down (was_up: it had been connected); a reconnect is scheduled. */
	void (*lost)(struct redis_conn *c, const char *why, int was_up);
	/* The script's check: refusal NULL when Redis decides, else what it
	 * lacks or its error (valid during the call). */
	void (*checked)(struct redis_conn *c, const char *refusal);
	/* End of a loop turn after redis_conn_kick or queued output; the
	 * connection writes its output right after. */
	void (*flush)(struct redis_conn *c);
	/* A message on the subscriber's channel. */
	void (*notice)(struct redis_conn *c, const char *msg, size_t len);
};

/* One Redis and how to talk to it, shared by the connections of a pool. */
struct redis_target {
	struct event_base *base;
	const struct redis_conn_ops *ops;
	char *host; /* NULL for unix */
	int port;
	char *unix_path;
	char *username, *password;
	int database;
	struct tls_client *tls; /* NULL: plain TCP or unix */
	const char *script, *script_sha;
	size_t script_len;
	int64_t stall_ms; /* a connection owed an answer this long, and hearing nothing, is replaced */
	int closing;	  /* the owner is shutting down: nothing reconnects */
	int setup_err_logged; /* a failed AUTH/SELECT/SCRIPT LOAD was logged; the owner clears it */
};

/*
 * Fills t for address ("host:port" or "unix:/path") with copies of the
 * credentials and a reference to tls (NULL: none). 0, or -1 with err (t
 * then holds nothing to free).
 */
int redis_target_init(struct redis_target *t, const char *address, const char *username,
		      const char *password, struct tls_client *tls, char *err, size_t errlen);
void redis_target_free(struct redis_target *t);

enum redis_conn_state { REDIS_CONN_DOWN, REDIS_CONN_CONNECTING, REDIS_CONN_UP };

struct redis_conn {
	struct redis_target *t;
	int idx;	    /* for logs */
	struct rlink *link; /* NULL while down */
	enum redis_conn_state state;
	int verified;		/* got a good reply since connecting */
	int sub;		/* a subscriber, not a request connection */
	const char *channel;	/* subscriber: SUBSCRIBEs to it on connect; NULL: stays down */
	unsigned inflight;	/* requests sent and not yet called back (the owner counts) */
	uint64_t up_since_us;	/* TCP connected at */
	uint64_t last_rx_us;	/* a reply last arrived at */
	uint64_t busy_since_us; /* inflight went from 0 to more at (the owner sets it) */
	int backoff_ms;
	struct event *retry; /* reconnect after backoff */
	struct event *connect_timeout;
	struct event *flush;
	struct event *ping;    /* subscriber: its proof of life (redis_conn.c, SUB_PING_MS) */
	uint64_t ping_sent_us; /* subscriber: a PING unanswered since, 0 for none */
};

/* Sets c up, down; a subscriber reads its replies before anything else. */
void redis_conn_init(struct redis_conn *c, struct redis_target *t, int idx, int sub);
/* Closes c (pending callbacks run with NULL, no ops are called) and frees its events. */
void redis_conn_free(struct redis_conn *c);
void redis_conn_connect(struct redis_conn *c);
/* For a changed channel: disconnects c if connected (it reconnects after
 * the backoff), or connects it if down and not waiting out a backoff. */
void redis_conn_restart(struct redis_conn *c);
/* Redis is back: a c waiting out its backoff reconnects now. */
void redis_conn_retry_now(struct redis_conn *c);
/* Redis answered on c: it works. */
void redis_conn_verified(struct redis_conn *c);
/* Runs the script's check (an up connection whose script is loaded); ops->checked tells. */
void redis_conn_check(struct redis_conn *c, const char *prefix, size_t prefix_len);
/* Calls ops->flush at the end of this loop turn. */
void redis_conn_kick(struct redis_conn *c);
/*
 * Replaces c if it owes replies and has received nothing for stall_ms (a
 * peer gone without FIN or RST, a frozen Redis). Not from a hiredis callback.
 */
void redis_conn_check_stall(struct redis_conn *c, uint64_t now, int64_t stall_ms);

#endif
