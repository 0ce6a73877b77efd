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
/* Frees every session kind's recycled memory; at exit. */
void frontend_pool_free(void);

#endif
