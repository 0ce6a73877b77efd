/*
 * frontend.c - the front ends' table: what a listener's protocol word
 * means, one row each. A new in-order front end is its proto_X.c and a row
 * here, with its value in enum config_protocol and its word in
 * config_listen.c's protocol_names (the row's label too).
 */
#include "frontend.h"

#include <string.h>

#include "addr.h"
#include "conn_types.h"
#include "grpc.h"
#include "pipeline.h"
#include "proto.h"
#include "proto_http.h"
#include "proto_line.h"
#include "proto_resp.h"
#include "proto_spoe.h"

/* HTTP's connection state: the listener's options, and the peer (trusted
 * or not for the identity headers). */
static void http_state_init(void *state, const struct conn_port *port, const struct sockaddr *sa)
{
	struct http_conn *pc = state;
	pc->http = port->http;
	addr_ip_of(sa, &pc->peer);
	pc->peer_trusted = pc->peer.family == 0;
	for (size_t i = 0; i < port->http.ntrusted && !pc->peer_trusted; i++)
		pc->peer_trusted = addr_net_match(&port->http.trusted[i], &pc->peer);
}

static const struct frontend *line_or_resp(uint8_t first);

const struct frontend frontends[] = {
	{
		.front = STATS_FRONT_LINE,
		.session = &pipeline_ops,
		.proto = &proto_line,
		.detect = line_or_resp,
		.state_size = sizeof(struct proto_resp_conn), /* RESP's, if detected */
		.refuse = FRONTEND_REFUSE_REPLY,
		.binds_leases = 1,
	},
	{
		/* on a line port, told by its first byte; no protocol word */
		.front = STATS_FRONT_RESP,
		.session = &pipeline_ops,
		.proto = &proto_resp,
		.state_size = sizeof(struct proto_resp_conn), /* zeroed: RESP2 */
		.refuse = FRONTEND_REFUSE_REPLY,
		.binds_leases = 1,
	},
	{
		.front = STATS_FRONT_HTTP,
		.session = &pipeline_ops,
		.proto = &proto_http,
		.state_size = sizeof(struct http_conn),
		.state_init = http_state_init,
		.refuse = FRONTEND_REFUSE_REPLY,
	},
	{
		.front = STATS_FRONT_GRPC,
		.session = &grpc_session_ops,
		.refuse = FRONTEND_REFUSE_H2,
	},
	{
		.front = STATS_FRONT_SPOE,
		.session = &pipeline_ops,
		.proto = &proto_spoe,
		.state_size = sizeof(struct spoe_conn),
		.refuse = FRONTEND_REFUSE_REPLY,
	},
	{.session = NULL},
};

/* A RESP array starts with '*'; anything else is a line. */
static const struct frontend *line_or_resp(uint8_t first)
{
	return first == '*' ? &frontends[1] : &frontends[0];
}

const struct frontend *frontend_of(enum config_protocol protocol)
{
	for (const struct frontend *fe = frontends; fe->session; fe++)
		if ((int)fe->front == (int)protocol)
			return fe;
	return &frontends[0]; /* not reached: every protocol has its row */
}

size_t frontend_tls_required(const struct frontend *fe, uint8_t first, char *buf)
{
	if (!fe->proto)
		return 0;
	if (fe->detect)
		fe = fe->detect(first);
	return fe->proto->reply_max <= FRONTEND_REPLY_ROOM ? proto_tls_required(fe->proto, buf) : 0;
}

void frontend_pool_free(void)
{
	/* a kind shared by several rows is freed again: a no-op */
	for (const struct frontend *fe = frontends; fe->session; fe++)
		if (fe->session->pool_free)
			fe->session->pool_free();
}
