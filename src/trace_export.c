/*
 * trace_export.c - posts the queued spans (ops/trace.h) to tracing.endpoint
 * as OTLP/HTTP with protobuf: every half second, or sooner, up to
 * EXPORT_BATCH spans in one POST, one POST in flight. A batch the collector
 * does not take (no answer within EXPORT_TIMEOUT_S, or not 2xx) is counted
 * failed and not sent again: spans are for looking, not for accounting.
 */
#include "trace_export.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "trace.h"

#define EXPORT_BATCH 512
#define EXPORT_TICK_US 500000
#define EXPORT_TIMEOUT_S 5
/* a failure is logged at most this often */
#define WARN_EVERY_US 10000000ULL

struct trace_export {
	struct event_base *base;
	struct event *tick;
	struct evhttp_connection *conn;
	char *host, *path, *hostport;
	int port;
	int busy;	  /* a POST in flight */
	int changed;	  /* the endpoint changed: connect_wanted makes its connection */
	size_t in_flight; /* its spans */
	uint64_t warned_us;
	uint8_t *buf;
};

static void warn(struct trace_export *x, const char *what)
{
	uint64_t now = clock_mono_us();
	if (x->warned_us && now - x->warned_us < WARN_EVERY_US)
		return;
	x->warned_us = now;
	log_warn("tracing: %s:%d%s: %s (%llu spans failed so far)", x->host, x->port, x->path, what,
		 trace_spans_failed);
}

static void posted(struct evhttp_request *req, void *arg)
{
	struct trace_export *x = arg;
	int code = req ? evhttp_request_get_response_code(req) : 0;
	if (code >= 200 && code < 300) {
		trace_spans_exported += x->in_flight;
	} else {
		trace_spans_failed += x->in_flight;
		char why[64];
		if (code)
			snprintf(why, sizeof(why), "the collector answered %d", code);
		else
			snprintf(why, sizeof(why), "no answer (connection refused or timed out)");
		warn(x, why);
	}
	x->busy = 0;
	x->in_flight = 0;
}

static void export_once(struct trace_export *x)
{
	if (x->busy || !x->conn || !trace_queued())
		return;
	size_t n;
	size_t len =
		trace_encode(x->buf, EXPORT_BATCH * TRACE_SPAN_ENCODED_MAX + 256, EXPORT_BATCH, &n);
	if (!len)
		return;
	struct evhttp_request *req = evhttp_request_new(posted, x);
	if (!req) {
		trace_spans_failed += n;
		return;
	}
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", x->hostport);
	evhttp_add_header(h, "Content-Type", "application/x-protobuf");
	evbuffer_add(evhttp_request_get_output_buffer(req), x->buf, len);
	x->busy = 1;
	x->in_flight = n;
	if (evhttp_make_request(x->conn, req, EVHTTP_REQ_POST, x->path) < 0) {
		/* evhttp freed req without calling posted */
		x->busy = 0;
		x->in_flight = 0;
		trace_spans_failed += n;
		warn(x, "cannot send");
	}
}

static void connect_wanted(struct trace_export *x);

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	connect_wanted(arg);
	export_once(arg);
}

struct trace_export *trace_export_new(struct event_base *base)
{
	struct trace_export *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->base = base;
	x->buf = malloc(EXPORT_BATCH * TRACE_SPAN_ENCODED_MAX + 256);
	x->tick = event_new(base, -1, EV_PERSIST, tick_cb, x);
	if (!x->buf || !x->tick) {
		trace_export_free(x);
		return NULL;
	}
	struct timeval tv = {0, EXPORT_TICK_US};
	event_add(x->tick, &tv);
	return x;
}

/* Makes the connection to the endpoint wanted, when it changed and no POST
 * is in flight (a connection is never freed under its own request). */
static void connect_wanted(struct trace_export *x)
{
	if (!x->changed || x->busy)
		return;
	x->changed = 0;
	if (x->conn)
		evhttp_connection_free(x->conn);
	x->conn = NULL;
	if (!x->host || !x->path || !x->hostport)
		return;
	x->conn = evhttp_connection_base_new(x->base, NULL, x->host, (unsigned short)x->port);
	if (x->conn)
		evhttp_connection_set_timeout(x->conn, EXPORT_TIMEOUT_S);
	else
		log_error("tracing: cannot make a connection to %s:%d", x->host, x->port);
}

void trace_export_configure(struct trace_export *x, const struct config_tracing *c)
{
	trace_configure(c);
	if (!x)
		return;
	int same = c->endpoint && x->host && x->path && strcmp(c->host, x->host) == 0 &&
		   c->port == x->port && strcmp(c->path, x->path) == 0;
	if (same || (!c->endpoint && !x->host))
		return;
	free(x->host);
	free(x->path);
	free(x->hostport);
	x->host = x->path = x->hostport = NULL;
	if (c->endpoint) {
		x->host = strdup(c->host);
		x->path = strdup(c->path);
		x->port = c->port;
		if (asprintf(&x->hostport, "%s:%d", c->host, c->port) < 0)
			x->hostport = NULL;
	}
	x->changed = 1;
	connect_wanted(x);
}

void trace_export_free(struct trace_export *x)
{
	if (!x)
		return;
	if (x->tick)
		event_free(x->tick);
	if (x->conn)
		evhttp_connection_free(x->conn);
	free(x->host);
	free(x->path);
	free(x->hostport);
	free(x->buf);
	free(x);
}
