/*
 * proto_resp.h - RESP, the protocol of every Redis client: a connection
 * whose first byte is '*' speaks it (proto/protocol.md, "RESP"). Replies
 * are RESP2 until a HELLO 3 switches the connection to RESP3.
 */
#ifndef RL_PROTO_RESP_H
#define RL_PROTO_RESP_H

#include "proto.h"

/* Most arguments a command may have: MALLOW, its pairs, a cost
 * (proto/protocol.md and docs/security.md give the number; it-docs checks). */
#define PROTO_RESP_ARGS_MAX (2 + 2 * CMD_PAIRS_MAX)

/* A RESP connection's state (frontend.c's state_size), zeroed at accept. */
struct proto_resp_conn {
	int resp3;    /* replies are RESP3: a HELLO 3 succeeded (format keeps it) */
	int in_multi; /* a MULTI, not yet ended by EXEC or DISCARD (parse keeps it) */
};

extern const struct proto proto_resp;

#endif
