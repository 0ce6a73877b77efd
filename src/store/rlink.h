/*
 * rlink.h - one asynchronous RESP connection to a Redis (or a sentinel) on
 * our libevent loop, over TCP, a unix socket, or TLS. hiredis 0.14's async
 * context reads and writes its socket itself and so cannot carry TLS; this
 * keeps hiredis for what is pure (its reply reader and command formatter)
 * and owns the transport. Its semantics are the async context's, which
 * the store was written against: replies in order, every callback called
 * exactly once (with NULL when the link goes first), a subscription's
 * callback for every message.
 */
#ifndef RL_RLINK_H
#define RL_RLINK_H

#include <stddef.h>

struct event_base;
struct redisReply;
struct tls_client;
struct rlink;

/* reply is NULL when the link closed before it came; it is freed after. */
typedef void rlink_reply_fn(struct rlink *l, struct redisReply *reply, void *privdata);
/* ok 0: connecting failed, or the link was closed before it was up
 * (l->errstr says why), and l is freed after the call. */
typedef void rlink_connect_fn(const struct rlink *l, int ok);
/* A link that had connected is gone: ok 1 when closed on purpose
 * (rlink_disconnect, rlink_free), 0 on an error (l->errstr). l is freed after. */
typedef void rlink_disconnect_fn(const struct rlink *l, int ok);

struct rlink {
	void *data;	  /* the owner's */
	int err;	  /* nonzero once it failed */
	char errstr[200]; /* why, for logs: "Connection refused", "TLS handshake: ..." */
	char *host;	  /* NULL for a unix socket */
	int port;
	char *unix_path;
	struct rlink_priv *p;
};

/*
 * Starts connecting to host:port (or unix_path), with TLS when tls is not
 * NULL (verified against host). NULL when out of memory; a link whose err
 * is set at once (an unresolvable host, a missing socket) is to be freed
 * with rlink_free and nothing else. Commands may be queued at once: they
 * are sent once connected, in order.
 */
struct rlink *rlink_connect(struct event_base *base, const char *host, int port,
			    const char *unix_path, struct tls_client *tls);
void rlink_set_callbacks(struct rlink *l, rlink_connect_fn *on_connect,
			 rlink_disconnect_fn *on_disconnect);
/* Reads this link's replies at libevent priority prio (a subscriber's first). */
void rlink_set_priority(struct rlink *l, int prio);

/* Queue a command; 0, or -1 when l is closing or failed (fn is then not called). */
int rlink_command(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *fmt, ...);
int rlink_command_argv(struct rlink *l, rlink_reply_fn *fn, void *privdata, int argc,
		       const char **argv, const size_t *argvlen);
int rlink_formatted(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *cmd,
		    size_t len);
/* SUBSCRIBE channel: fn gets the confirmation and then every message. */
int rlink_subscribe(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *channel);
/* On a link whose SUBSCRIBE is confirmed: PING, answered ["pong", ""]
 * through the subscription's fn (a subscriber's proof of life). 0, or -1
 * when l is not subscribed, closing or failed. */
int rlink_subscribed_ping(struct rlink *l);

/* Writes what is queued now (else it goes at the end of this loop turn). */
void rlink_flush(struct rlink *l);
/* Takes no more commands; closes once every reply has come (or at once
 * when none is owed). Allowed inside the link's callbacks. */
void rlink_disconnect(struct rlink *l);
/* Closes now: owed callbacks get NULL, then on_disconnect (ok 1) if it
 * had connected. Inside one of the link's callbacks it happens when the
 * callback returns. */
void rlink_free(struct rlink *l);
/* 1 while a TLS handshake is under way (connected, not yet up). */
int rlink_handshaking(const struct rlink *l);
/* 1 once connected (and, with TLS, the handshake done). */
int rlink_up(const struct rlink *l);
/* Bytes queued and not yet written. */
size_t rlink_output(const struct rlink *l);

#endif
