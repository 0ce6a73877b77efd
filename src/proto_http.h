/*
 * proto_http.h - HTTP/1.1 on listeners with `protocol: http`: a JSON API
 * (/v1/allow, /v1/peek, /v1/reset) and forward-auth for reverse proxies
 * (/auth/<action>), with the IETF RateLimit headers (proto/protocol.md,
 * "HTTP").
 */
#ifndef RL_PROTO_HTTP_H
#define RL_PROTO_HTTP_H

#include "proto.h"

/* The header block may be this long, whatever max_line says; a body at
 * most PROTO_HTTP_BODY_MAX. */
#define PROTO_HTTP_WINDOW 16384
#define PROTO_HTTP_BODY_MAX 4096

extern const struct proto proto_http;

#endif
