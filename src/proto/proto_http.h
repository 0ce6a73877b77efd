/*
 * proto_http.h - HTTP/1.1 on listeners with `protocol: http`: a JSON API
 * (/v1/allow, /v1/peek, /v1/reset) and forward-auth for reverse proxies
 * (/auth/<action>), with the IETF RateLimit headers (proto/protocol.md,
 * "HTTP").
 */
#ifndef RL_PROTO_HTTP_H
#define RL_PROTO_HTTP_H

#include "addr.h"
#include "config.h"
#include "keys.h"
#include "policy.h"
#include "proto.h"

/* The header block may be this long, whatever max_line says; a body at
 * most PROTO_HTTP_BODY_MAX. */
#define PROTO_HTTP_WINDOW 16384
#define PROTO_HTTP_BODY_MAX 4096

/*
 * An HTTP connection's state (frontend.c sets it up for each client):
 * the listener's options, the peer, and room to decode a request's
 * arguments into (valid until the next step).
 */
struct http_conn {
	struct config_http http;
	struct addr_ip peer; /* family 0: a unix socket */
	int peer_trusted;    /* in http.trusted (a unix socket always is) */
	char user[KEYS_USER_MAX];
	char action[POLICY_NAME_MAX + 1];
	/* /v1/mallow's pairs, decoded */
	char pair_user[CMD_PAIRS_MAX][KEYS_USER_MAX];
	char pair_action[CMD_PAIRS_MAX][POLICY_NAME_MAX + 1];
};

extern const struct proto proto_http;

#endif
