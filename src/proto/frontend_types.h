/*
 * frontend_types.h - a front end's table row, as a type only: what the
 * sessions that run a front end's clients (pipeline.c) read of it, without
 * the table (frontend.h), which names those sessions.
 */
#ifndef RL_FRONTEND_TYPES_H
#define RL_FRONTEND_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "stats.h"

struct conn_port;
struct proto;
struct session_ops;
struct sockaddr;

/* How a client refused at max_clients is answered (refuse.c). */
enum frontend_refuse {
	/* its proto's too-many-clients error (proto_refusal), at once, or
	 * once the first byte says which front end it is (detect) */
	FRONTEND_REFUSE_REPLY,
	FRONTEND_REFUSE_H2, /* the HTTP/2 preface, then its first stream failed */
};

struct frontend {
	/* Which front end it is: its decision latency's label, and, below
	 * CONFIG_PROTOCOL_N, the listener protocol it is (enum stats_front
	 * takes config_protocol's values; the word is config_protocol_name's). */
	enum stats_front front;
	const struct session_ops *session; /* NULL: the table's end */
	/* In-order sessions (pipeline.c): how requests are framed and answered. */
	const struct proto *proto;
	/* Another front end sharing the port, told by the client's first byte
	 * (the line protocol's port also speaks RESP); NULL: this one. */
	const struct frontend *(*detect)(uint8_t first);
	/* Per-connection state the proto's parse and format get (0: none,
	 * NULL passed), zeroed, then set up by state_init (if any) for a
	 * client accepted on port from sa. A row with detect has room for
	 * the state of each row it may pick, which starts zeroed. */
	size_t state_size;
	void (*state_init)(void *state, const struct conn_port *port, const struct sockaddr *sa);
	enum frontend_refuse refuse;
	/* A lease ACQUIREd on a connection is released when it closes (line
	 * and RESP: a connection is one client; an HTTP client's requests
	 * come on any connection of a pool). */
	int binds_leases;
};

#endif
