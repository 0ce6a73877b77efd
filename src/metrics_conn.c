/*
 * metrics_conn.c - the metrics endpoint's connections (evhttp's), bounded
 * as the API's listeners bound theirs (net/conn.c):
 *
 * - at most metrics.max_clients at once: the next is answered 503 and
 *   closed (with metrics.tls, closed before any handshake), as refuse.c
 *   answers one beyond max_clients;
 * - request_timeout from a request's first byte until it is whole (a TLS
 *   handshake counts as one): then 408 and closed. evhttp's own timeout
 *   starts again at every byte, so a client sending a byte every few
 *   seconds (slowloris) held its connection for as long as it liked.
 *
 * evhttp 2.1 shows a connection only as the bufferevent its bevcb makes
 * (before the connection exists) and through the connection's one close
 * callback. So each connection is adopted at the first of: the next loop
 * turn after the accept, its first whole request; until then a reference
 * on the bufferevent keeps it there to look at. Adopted, its close
 * callback is ours (the console's is called from it: metrics_conns_closecb).
 * Bytes arriving are seen through a callback on the bufferevent's input.
 *
 * An answer of ours (408, 503) takes the bufferevent over from evhttp:
 * written, the socket shut for writing, and what the client still sends
 * read and dropped until it closes or LINGER_MS pass, so that no RST
 * destroys the answer before the client reads it; then evhttp frees the
 * connection.
 */
#include "metrics_conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"
#include "log.h"
#include "server.h"

/* how long an answered client has to read it and close */
#define LINGER_MS 1000
/* refusals being answered at once; past them a refused client is closed */
#define REFUSING_MAX 64

struct metrics_conn {
	struct metrics_conns *mc;
	struct metrics_conn *prev, *next;
	struct bufferevent *bev;
	struct evhttp_connection *evcon; /* adopted: ours is its close callback */
	struct evbuffer_cb_entry *incb;	 /* on bev's input: bytes came */
	struct event *hello;		 /* the adoption, the loop turn after the accept */
	struct event *clock;		 /* request_timeout (the handshake's, with TLS) */
	int tls, handshaking;
	int refused;   /* beyond max_clients */
	int answering; /* our answer is being written: evhttp's callbacks are off */
	/* the console's close callback (metrics_conns_closecb) */
	void (*held_cb)(struct evhttp_connection *evcon, void *arg);
	void *held_arg;
};

struct metrics_conns {
	struct event_base *base;
	struct server *srv;
	struct metrics_conn *head;
	size_t n;	 /* counted against max_clients */
	size_t refusing; /* refused, being answered */
	unsigned long long refused;
};

struct metrics_conns *metrics_conns_new(struct event_base *base, struct server *srv)
{
	struct metrics_conns *mc = calloc(1, sizeof(*mc));
	if (mc) {
		mc->base = base;
		mc->srv = srv;
	}
	return mc;
}

static void clock_arm(struct metrics_conn *c, int64_t ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	evtimer_add(c->clock, &tv);
}

static void request_clock_arm(struct metrics_conn *c)
{
	clock_arm(c, server_config(c->mc->srv)->request_timeout_ms);
}

/* c is no longer mc's: unlinked and freed (its bufferevent is evhttp's). */
static void forget(struct metrics_conn *c)
{
	struct metrics_conns *mc = c->mc;
	if (c->prev)
		c->prev->next = c->next;
	else
		mc->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->refused)
		mc->refusing--;
	else
		mc->n--;
	if (c->incb)
		evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->incb);
	event_free(c->hello);
	event_free(c->clock);
	free(c);
}

/* evhttp is freeing c's connection (its bufferevent with it). */
static void closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct metrics_conn *c = arg;
	if (c->held_cb)
		c->held_cb(evcon, c->held_arg);
	forget(c);
}

/* Closes c's connection now; c is freed (closed_cb). */
static void close_now(struct metrics_conn *c)
{
	evhttp_connection_free(c->evcon);
}

static void linger_read_cb(struct bufferevent *bev, void *arg)
{
	(void)arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
}

/* The answer is with the kernel: FIN after it, then wait for the client's. */
static void answered_cb(struct bufferevent *bev, void *arg)
{
	(void)arg;
	evutil_socket_t fd = bufferevent_getfd(bev);
	if (fd >= 0)
		shutdown(fd, SHUT_WR);
	bufferevent_disable(bev, EV_WRITE);
}

static void linger_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what; /* EOF, an error or the linger's end: done */
	close_now(arg);
}

/* Answers c with an HTTP status of ours and closes it (the top comment). */
static void answer(struct metrics_conn *c, int status, const char *reason, const char *text)
{
	char buf[512];
	int len = snprintf(buf, sizeof(buf),
			   "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			   "Cache-Control: no-store\r\nConnection: close\r\n\r\n%s",
			   status, reason, strlen(text), text);
	struct bufferevent *bev = c->bev;
	c->answering = 1;
	event_del(c->clock);
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in)); /* nothing more for evhttp */
	bufferevent_setcb(bev, linger_read_cb, answered_cb, linger_event_cb, c);
	struct timeval tv = {0, LINGER_MS * 1000};
	bufferevent_set_timeouts(bev, &tv, &tv);
	if (bufferevent_write(bev, buf, (size_t)len) < 0 ||
	    bufferevent_enable(bev, EV_READ | EV_WRITE) < 0)
		close_now(c);
}

/* Beyond max_clients: 503, or closed at once (TLS: before any handshake,
 * as the API's listeners do; more refusals than REFUSING_MAX at once). */
static void refuse(struct metrics_conn *c)
{
	struct metrics_conns *mc = c->mc;
	int max = server_config(mc->srv)->metrics_max_clients;
	unsigned long long r = ++mc->refused;
	if ((r & (r - 1)) == 0) /* 1, 2, 4, ...: not a log flood */
		log_warn("metrics: metrics.max_clients (%d) reached; %llu %s refused so far", max,
			 r, log_plural(r, "connection", "connections"));
	if (c->tls || mc->refusing > REFUSING_MAX) {
		close_now(c);
		return;
	}
	answer(c, 503, "Service Unavailable",
	       "too-many-clients: metrics.max_clients reached; try again later\n");
}

/* c's connection is evcon: its close callback is ours from now on, and
 * the reference that kept the bufferevent for us is dropped. */
static void adopt(struct metrics_conn *c, struct evhttp_connection *evcon)
{
	c->evcon = evcon;
	evhttp_connection_set_closecb(evcon, closed_cb, c);
	bufferevent_decref(c->bev);
}

/* The loop turn after the accept: evhttp has made the connection. */
static void hello_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct metrics_conn *c = arg;
	if (!c->evcon) {
		bufferevent_event_cb eventcb;
		void *evcon;
		bufferevent_getcb(c->bev, NULL, NULL, &eventcb, &evcon);
		if (!eventcb) {
			/* evhttp let go of it already (it could not make the
			 * connection): ours was the last reference */
			struct bufferevent *bev = c->bev;
			forget(c);
			bufferevent_decref(bev);
			return;
		}
		adopt(c, evcon);
	}
	if (c->refused) {
		refuse(c);
		return;
	}
	if (c->handshaking)
		request_clock_arm(c); /* a handshake is a request */
}

/* Bytes came (TLS: once decrypted). */
static void input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct metrics_conn *c = arg;
	if (!info->n_added || c->answering)
		return;
	if (c->refused) {
		/* answered without reading: evhttp never sees a request */
		evbuffer_drain(buf, evbuffer_get_length(buf));
		return;
	}
	if (c->handshaking) {
		c->handshaking = 0; /* the handshake is done: a request's clock from here */
		event_del(c->clock);
	}
	if (c->evcon && !evtimer_pending(c->clock, NULL))
		request_clock_arm(c);
}

static void clock_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct metrics_conn *c = arg;
	if (c->answering)
		return;
	if (c->handshaking) {
		struct ssl_st *ssl = bufferevent_openssl_get_ssl(c->bev);
		if (ssl && SSL_is_init_finished(ssl)) {
			c->handshaking = 0; /* done, and no request begun: idle */
			return;
		}
		log_debug("metrics: closing a client whose TLS handshake took longer than "
			  "request_timeout");
		close_now(c);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_output(c->bev))) {
		/* a reply is being written: our time, not the client's (evhttp's
		 * write timeout bounds a client that does not read it) */
		request_clock_arm(c);
		return;
	}
	log_debug("metrics: answering 408 to a client whose request was not whole within "
		  "request_timeout");
	answer(c, 408, "Request Timeout",
	       "request-timeout: a request must be whole within request_timeout of its first "
	       "byte\n");
}

void metrics_conns_add(struct metrics_conns *mc, struct bufferevent *bev, int tls)
{
	struct metrics_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		log_error("metrics: out of memory; a client is served unbounded");
		return;
	}
	c->mc = mc;
	c->bev = bev;
	c->tls = c->handshaking = tls;
	c->hello = evtimer_new(mc->base, hello_cb, c);
	c->clock = evtimer_new(mc->base, clock_cb, c);
	c->incb = evbuffer_add_cb(bufferevent_get_input(bev), input_cb, c);
	if (!c->hello || !c->clock || !c->incb) {
		if (c->incb)
			evbuffer_remove_cb_entry(bufferevent_get_input(bev), c->incb);
		if (c->hello)
			event_free(c->hello);
		if (c->clock)
			event_free(c->clock);
		free(c);
		log_error("metrics: out of memory; a client is served unbounded");
		return;
	}
	/* the running configuration's bound: a reload applies to new clients */
	if (mc->n >= (size_t)server_config(mc->srv)->metrics_max_clients) {
		c->refused = 1;
		mc->refusing++;
	} else {
		mc->n++;
	}
	c->next = mc->head;
	if (mc->head)
		mc->head->prev = c;
	mc->head = c;
	bufferevent_incref(bev); /* until adopted (hello_cb) */
	struct timeval now = {0, 0};
	evtimer_add(c->hello, &now);
}

static struct metrics_conn *find(struct metrics_conns *mc, struct evhttp_connection *evcon)
{
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	for (struct metrics_conn *c = mc->head; bev && c; c = c->next)
		if (c->bev == bev)
			return c;
	return NULL;
}

void metrics_conns_request(struct metrics_conns *mc, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct metrics_conn *c = find(mc, evcon);
	if (!c)
		return;
	if (!c->evcon)
		adopt(c, evcon); /* its first request came before the loop turned */
	event_del(c->clock);
	/* bytes after it: the next request has begun */
	if (evbuffer_get_length(bufferevent_get_input(c->bev)))
		request_clock_arm(c);
}

void metrics_conns_closecb(struct metrics_conns *mc, struct evhttp_connection *evcon,
			   void (*cb)(struct evhttp_connection *evcon, void *arg), void *arg)
{
	struct metrics_conn *c = find(mc, evcon);
	if (!c) {
		evhttp_connection_set_closecb(evcon, cb, arg); /* not ours (out of memory) */
		return;
	}
	if (!c->evcon)
		adopt(c, evcon);
	c->held_cb = cb;
	c->held_arg = arg;
}

void metrics_conns_free(struct metrics_conns *mc)
{
	if (!mc)
		return;
	/* evhttp_free closed the adopted ones (closed_cb); these were never
	 * adopted, and ours is the last reference on their bufferevents */
	while (mc->head) {
		struct bufferevent *bev = mc->head->bev;
		forget(mc->head);
		bufferevent_decref(bev);
	}
	free(mc);
}
