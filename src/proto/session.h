/*
 * session.h - what runs on a client connection's bytes: the interface
 * between the transport (conn.c: socket, buffers, timeouts, backpressure)
 * and a protocol's session. Two implementations: the in-order pipeline
 * (pipeline.c: line, RESP, HTTP through struct proto) and gRPC's HTTP/2
 * session (grpc.c). Which one a listener's clients get is frontend.c's
 * table.
 */
#ifndef RL_SESSION_H
#define RL_SESSION_H

#include <stddef.h>
#include <sys/types.h>

struct cmd_env;
struct config;
struct conn_port;
struct evbuffer;
struct frontend;
struct sockaddr;

/* What a session is given by its connection. */
struct session_host {
	struct config *const *cfg; /* the snapshot new requests run under */
	const struct cmd_env *env;
	/* who sends the requests (admin, auth, the identity proved): the
	 * connection's, living as long as it */
	struct cmd_caller *caller;
	/* output may be ready: the connection writes it at the end of the
	 * loop turn (session_ops.next). Never called after free. */
	void (*ready)(void *arg);
	void *arg;
};

/* What one call reports back to the transport (zero it first). */
struct session_step {
	unsigned progress : 1; /* a request was taken: the partial one after it is new */
	unsigned pause : 1;    /* too much owed: read nothing until may_resume */
	unsigned close : 1;    /* no more requests: close once what is owed is written */
	unsigned over : 1;     /* as close, and what the client sends is dropped unread */
	unsigned refused : 1;  /* the store refused a request at once: hold reading a while */
	unsigned fail : 1;     /* out of memory: drop the client now */
};

/* next() asks for more room than was offered. */
#define SESSION_NO_ROOM (-2)

struct session_ops {
	/* A session for a client accepted on port from sa (fe: its table
	 * row); NULL when out of memory. */
	void *(*new)(const struct frontend *fe, const struct session_host *host,
		     const struct conn_port *port, const struct sockaddr *sa);
	/* Takes the bytes received (drains in of what it used; what it
	 * leaves is a partial request). eof: the client shut its side, in
	 * holds the last it will send. */
	void (*input)(void *s, struct evbuffer *in, int eof, struct session_step *st);
	/*
	 * The next bytes to send: their length and *data, which is room
	 * (written in place, len bytes offered) or the session's own memory
	 * (valid until the next call). 0: none now; -1: the session failed
	 * (st->over is set); SESSION_NO_ROOM: call again with more room.
	 */
	ssize_t (*next)(void *s, char *room, size_t len, const char **data,
			struct session_step *st);
	/* Called once next() has given all it has, for what then holds. */
	void (*sent)(void *s, struct session_step *st);
	/* Replies still owed to the client (written or not). */
	unsigned (*owes)(const void *s);
	/* Requests whose answer is not known yet. */
	unsigned (*inflight)(const void *s);
	/* A request begun and not whole (unread: bytes left in the input). */
	int (*partial)(const void *s, size_t unread);
	/* After a pause: whether reading may resume, as far as the session goes. */
	int (*may_resume)(const void *s);
	/* Whether output may be waiting: the connection flushes it at the end
	 * of the loop turn. */
	int (*has_output)(const void *s);
	/*
	 * request_timeout ran out on a partial request: it is answered with an
	 * error. 1 done, 0 nothing is partial any more, -1 out of memory.
	 */
	int (*timeout)(void *s);
	/*
	 * A graceful end the protocol can say (gRPC's GOAWAY): no new requests,
	 * those taken are answered, and the client knows which it should send
	 * elsewhere. NULL when there is none: then draining answers what was
	 * sent and closes, an idle client is just closed.
	 */
	void (*goodbye)(void *s);
	/*
	 * idle_timeout ran out on a session without a goodbye: 1 when its
	 * protocol has a last word for that (SPOE's AGENT-DISCONNECT), queued
	 * as its last reply: the close follows its write; 0 closed without
	 * one; -1 out of memory. NULL: 0.
	 */
	int (*idle)(void *s);
	/* The connection is gone: requests in flight are answered into
	 * nothing and the session freed with the last of them. */
	void (*free)(void *s);
	/* Frees recycled memory; at exit. NULL: none. */
	void (*pool_free)(void);
};

#endif
