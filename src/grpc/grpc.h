/*
 * grpc.h - gRPC over HTTP/2 cleartext (h2c with prior knowledge, as Envoy
 * connects) on one client connection. nghttp2 frames the streams; this file
 * checks each call's headers and body and hands the call to its method
 * (grpc_rls.c's), which answers it whenever its decision is made, in any
 * order. The connection (conn.c) owns the socket and moves the bytes.
 */
#ifndef RL_GRPC_H
#define RL_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto_grpc.h"

struct config;
struct cmd_env;
struct evbuffer;
struct grpc_session;
struct session_ops;

/* The largest request message taken (RESOURCE_EXHAUSTED beyond). */
#define GRPC_MAX_MESSAGE (64 * 1024)
/* Request bodies one connection may have waiting for their end, all
 * streams together (more: RESOURCE_EXHAUSTED). */
#define GRPC_MAX_BUFFERED (256 * 1024)
/* Streams one connection may have open at once (SETTINGS). */
#define GRPC_MAX_STREAMS 256
/* The largest header list taken (SETTINGS_MAX_HEADER_LIST_SIZE). */
#define GRPC_MAX_HEADER_LIST 16384

/* What a session needs of its connection. */
struct grpc_host {
	struct config *const *cfg; /* the snapshot new calls run under */
	const struct cmd_env *env;
	struct cmd_caller *caller; /* the connection's (session.h) */
	/* output is waiting: grpc_session_output at the end of the loop turn */
	void (*ready)(void *arg);
	void *arg;
};

/* One unary call, as its method sees it. */
struct grpc_call {
	const uint8_t *msg; /* the request message; valid until the call is answered */
	size_t len;
	int64_t timeout_ms; /* grpc-timeout less a tenth (the answer's way back); 0: none */
	struct config *cfg; /* the snapshot it runs under (held by the session) */
	const struct cmd_env *env;
	struct cmd_caller *caller;
	/* the authorization metadata's bearer token (valid until answered); NULL: none */
	const char *token;
	size_t token_len;
	/* the traceparent metadata (valid until answered); NULL: none */
	const char *traceparent;
	size_t traceparent_len;
	uint64_t received_us; /* its headers read (tracing only; 0: not known) */
	void *state;	      /* the method's own room (grpc_method.state_size bytes, not zeroed) */
};

struct grpc_method {
	const char *path; /* "/package.Service/Method" */
	size_t state_size;
	/* Starts the call; it is answered by exactly one grpc_call_reply or
	 * grpc_call_fail, now or later. */
	void (*start)(struct grpc_call *call);
};

/* The methods served (grpc_rls.c); NULL-path terminated. */
extern const struct grpc_method grpc_methods[];

/* Answers call with status OK and the message msg[0..len). */
void grpc_call_reply(struct grpc_call *call, const uint8_t *msg, size_t len);
/* Answers call with an error status and a message (any bytes; encoded). */
void grpc_call_fail(struct grpc_call *call, enum grpc_status status, const char *message);

/* Before answering: the store refused call at once (overload). The
 * connection then holds its reading a while, as for the other protocols. */
void grpc_call_refused(struct grpc_call *call);

struct grpc_session *grpc_session_new(const struct grpc_host *host);
/* Takes received bytes. 0, or -1 when the connection must close after
 * writing what grpc_session_output gives (a protocol error: GOAWAY). */
int grpc_session_input(struct grpc_session *s, const uint8_t *buf, size_t len);
/* The next bytes to send: their length (*data valid until the next call),
 * 0 when there are none, -1 when the session failed. */
ssize_t grpc_session_next(struct grpc_session *s, const uint8_t **data);
/* Appends everything there is to send to out. 0, or -1 (failed, or out of memory). */
int grpc_session_output(struct grpc_session *s, struct evbuffer *out);
/* 1 once the session will neither read nor write again: close. */
int grpc_session_over(struct grpc_session *s);
/* Streams begun and not whole yet (request_timeout runs while any is). */
unsigned grpc_session_partial(const struct grpc_session *s);
/* Answers every such stream with status and message (trailers only), its
 * body dropped and the rest of it ignored. */
void grpc_session_fail_partial(struct grpc_session *s, enum grpc_status status,
			       const char *message);
/* Whether a call was refused (grpc_call_refused) since the last asking. */
int grpc_session_take_refused(struct grpc_session *s);
/* Calls not answered yet. */
unsigned grpc_session_calls(const struct grpc_session *s);
/* Graceful end: GOAWAY, open calls are answered, no new ones. */
void grpc_session_drain(struct grpc_session *s);
/* The connection is gone: calls in flight are answered into nothing and
 * the session is freed with the last of them. */
void grpc_session_free(struct grpc_session *s);
/* Frees the recycled streams and call states; at exit. */
void grpc_pool_free(void);

/* The session above, as a connection runs it (session.h). */
extern const struct session_ops grpc_session_ops;

#endif
