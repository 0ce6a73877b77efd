/*
 * frontend.h - the front ends, one table row each: which one it is (the
 * listener protocol, whose word config_listen.c has, and the statistics
 * label, one value), how its clients' bytes are run (the session and, for
 * in-order protocols, the struct proto), and how a client refused at
 * max_clients is told. conn.c, pipeline.c and refuse.c read the row; none
 * of them names a protocol.
 */
#ifndef RL_FRONTEND_H
#define RL_FRONTEND_H

#include "frontend_types.h"

/* The row of a listener's protocol (every config_protocol has one). */
const struct frontend *frontend_of(enum config_protocol protocol);
/* The rows, ended by one without a session. */
extern const struct frontend frontends[];
/*
 * What a client that sent plain text (starting with byte first) to a TLS
 * listener of fe is told, in its protocol's words (tls-required): written
 * to buf (room: FRONTEND_REPLY_ROOM), its length; 0 when the protocol has
 * no words a plain-text client reads (gRPC: the connection just closes).
 */
#define FRONTEND_REPLY_ROOM 4096
size_t frontend_tls_required(const struct frontend *fe, uint8_t first, char *buf);
/* Frees every session kind's recycled memory; at exit. */
void frontend_pool_free(void);

#endif
