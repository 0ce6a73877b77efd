/*
 * conn_types.h - what a listener tells the connections it accepts, as a
 * type only: the front ends' table (frontend.c) reads it to set up a
 * connection's state without depending on the transport (conn.h).
 */
#ifndef RL_CONN_TYPES_H
#define RL_CONN_TYPES_H

#include "config.h"

/* What a listener tells the connections it accepts (copied: a reload may
 * free the configuration it came from). */
struct tls_server;
struct conn_port {
	int admin; /* the listener allows admin commands */
	int auth;  /* listen[].auth: required */
	enum config_protocol protocol;
	struct config_http http;
	struct tls_server
		*tls;	  /* listen[].tls: the listener's (it holds the reference); NULL: plain */
	const char *name; /* the listen address, for logs */
};

#endif
