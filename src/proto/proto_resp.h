/*
 * proto_resp.h - RESP2, the protocol of every Redis client: a connection
 * whose first byte is '*' speaks it (proto/protocol.md, "RESP").
 */
#ifndef RL_PROTO_RESP_H
#define RL_PROTO_RESP_H

#include "proto.h"

/* Most arguments a command may have. */
#define PROTO_RESP_ARGS_MAX 18 /* MALLOW, 8 pairs, a cost */

extern const struct proto proto_resp;

#endif
