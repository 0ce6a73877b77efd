/*
 * conn.c - one client connection: splits input into lines, runs each, and
 * writes replies strictly in request order even though the store answers out
 * of order.
 *
 *   head                                    tail
 *   [done: "ALLOWED.."] -> [waiting] -> [done: "ERR.."]
 *     ^ written as soon as everything before it is done
 *
 * Reading pauses while too many requests are owed or the client is not
 * reading its replies, so one client's memory stays bounded.
 */
#include "conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cmd.h"
#include "config.h"
#include "log.h"
#include "proto.h"
#include "server.h"

/* Requests parsed and not yet written back. */
#define MAX_PENDING 1024
/* Output bytes owed to a client that is not reading. */
#define OUT_HIGH (256 * 1024)
#define OUT_LOW (64 * 1024)

struct pending {
	struct cmd_slot slot; /* first: complete() gets this pointer */
	struct pending *next;
	struct conn *conn;
	int done;
};

struct conn {
	struct conn_link link;
	struct server *srv;
	struct bufferevent *bev; /* NULL once reaped */
	struct pending *head, *tail;
	unsigned npending; /* queued, done or not */
	unsigned inflight; /* not done yet */
	int paused;	   /* reading stopped for backpressure */
	int closing;	   /* no more requests; close once replies are written */
	int closed;	   /* handed to the reaper */
	int eof;	   /* the client shut its side; answer what it sent */
	int admin;	   /* came through an admin listener */
	int dirty;	   /* replies ready to write at the end of this loop turn */
};

/* Request slots are recycled: no malloc per request in steady state. */
#define POOL_MAX 4096
static struct pending *pool;
static size_t npool;

static struct pending *pending_alloc(void)
{
	struct pending *p = pool;
	if (p) {
		pool = p->next;
		npool--;
		return p;
	}
	return malloc(sizeof(*p));
}

static void pending_release(struct pending *p)
{
	if (npool >= POOL_MAX) {
		free(p);
		return;
	}
	p->next = pool;
	pool = p;
	npool++;
}

void conn_pool_free(void)
{
	while (pool) {
		struct pending *p = pool;
		pool = p->next;
		free(p);
	}
	npool = 0;
}

static void process_input(struct conn *c);
static void flush_replies(struct conn *c);

struct conn_link *conn_link(struct conn *c)
{
	return &c->link;
}

static void conn_destroy(struct conn *c)
{
	struct pending *p = c->head;
	while (p) {
		struct pending *next = p->next;
		pending_release(p);
		p = next;
	}
	free(c);
}

void conn_close(struct conn *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	c->closing = 1;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	server_conn_removed(c->srv, c);
	server_defer_free(c->srv, c);
}

void conn_reap(struct conn *c)
{
	bufferevent_free(c->bev);
	c->bev = NULL;
	if (c->inflight == 0)
		conn_destroy(c);
	/* else: the last store answer frees it (slot_complete) */
}

/*
 * Every reply is with the kernel: close gently. Closing a socket that still
 * has unread input makes the kernel send RST, which can destroy replies the
 * client has not read yet; so send FIN first and drop what input is queued.
 */
static void conn_finish(struct conn *c)
{
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	char sink[4096];
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 64 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	conn_close(c);
}

static void maybe_finish(struct conn *c)
{
	if (c->closed || !c->closing || c->npending)
		return;
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_finish(c);
	/* else write_cb closes once the output has drained */
}

static void slot_complete(struct cmd_slot *slot)
{
	struct pending *p = (struct pending *)slot;
	struct conn *c = p->conn;
	p->done = 1;
	c->inflight--;
	if (c->closed) {
		if (!c->bev && c->inflight == 0)
			conn_destroy(c);
		return;
	}
	if (p == c->head && !c->dirty) {
		/* Written at the end of the loop turn, with every other reply
		 * that becomes ready in it: one send() for a whole batch. */
		c->dirty = 1;
		server_defer_flush(c->srv, c);
	}
}

static struct pending *pending_new(struct conn *c)
{
	struct pending *p = pending_alloc();
	if (!p)
		return NULL;
	p->next = NULL;
	p->conn = c;
	p->done = 0;
	p->slot.complete = slot_complete;
	p->slot.cfg = NULL;
	p->slot.close_after = 0;
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	c->npending++;
	c->inflight++;
	return p;
}

/*
 * Replies ready at the head go out in one send() when nothing is queued
 * before them: no EV_WRITE round trip through the loop. What the socket does
 * not take goes to the bufferevent, which writes it when it can.
 */
static void flush_replies(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	char buf[16384];
	size_t n = 0;
	while (c->head && c->head->done) {
		struct pending *p = c->head;
		if (n + p->slot.len > sizeof(buf)) {
			evbuffer_add(out, buf, n);
			n = 0;
		}
		memcpy(buf + n, p->slot.buf, p->slot.len);
		n += p->slot.len;
		if (p->slot.close_after)
			c->closing = 1;
		c->head = p->next;
		if (!c->head)
			c->tail = NULL;
		c->npending--;
		pending_release(p);
	}
	if (n) {
		size_t off = 0;
		if (evbuffer_get_length(out) == 0) {
			ssize_t w = send(bufferevent_getfd(c->bev), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				off = (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				conn_close(c); /* the client is gone; its replies with it */
				return;
			}
		}
		if (off < n)
			evbuffer_add(out, buf + off, n - off);
	}
	if (c->paused && !c->closing && c->npending < MAX_PENDING / 2 &&
	    evbuffer_get_length(out) < OUT_HIGH) {
		c->paused = 0;
		bufferevent_enable(c->bev, EV_READ);
		process_input(c);
	}
	maybe_finish(c);
}

static void process_input(struct conn *c)
{
	struct server *srv = c->srv;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	struct config *cfg = server_config(srv);
	size_t max_line = cfg->max_line;

	while (!c->closing && !c->closed) {
		if (c->npending >= MAX_PENDING || evbuffer_get_length(out) >= OUT_HIGH) {
			c->paused = 1;
			bufferevent_disable(c->bev, EV_READ);
			break;
		}
		size_t len = evbuffer_get_length(in);
		if (len == 0) {
			c->closing |= c->eof;
			break;
		}
		size_t want = len < max_line + 2 ? len : max_line + 2;
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
		size_t consumed = 0;
		long n = proto_frame(data, want, max_line, &consumed);
		if (n == -1) {
			c->closing |= c->eof; /* a partial last line is not a request */
			break;
		}
		struct pending *p = pending_new(c);
		if (!p) {
			log_error("out of memory; dropping client");
			conn_close(c);
			return;
		}
		if (n == -2) {
			c->closing = 1;
			cmd_reply_err(&p->slot, "line-too-long", "request line exceeds max_line");
			break;
		}
		struct proto_cmd pc;
		struct proto_err perr;
		if (proto_parse(data, (size_t)n, &pc, &perr) < 0)
			cmd_reply_err(&p->slot, perr.code, perr.msg);
		else {
			if (pc.verb == PROTO_QUIT)
				c->closing = 1;
			cmd_execute(cfg, server_cmd_env(srv), &pc, c->admin, &p->slot);
		}
		/* The store copied what it needs; the line can go. */
		if (!c->closed)
			evbuffer_drain(in, consumed);
	}
	if (!c->closed && !c->dirty && (c->head == NULL || c->head->done)) {
		c->dirty = 1;
		server_defer_flush(c->srv, c);
	}
}

void conn_flush(struct conn *c)
{
	c->dirty = 0;
	if (!c->closed)
		flush_replies(c);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	process_input(arg);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	struct conn *c = arg;
	if (c->closed)
		return;
	if (c->paused)
		flush_replies(c);
	else
		maybe_finish(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	struct conn *c = arg;
	if (c->closed)
		return;
	if (what & BEV_EVENT_TIMEOUT) {
		/* idle_timeout: only a client that owes us nothing and sends nothing is idle */
		if (c->npending == 0) {
			log_debug("closing idle client");
			conn_close(c);
		} else {
			bufferevent_enable(c->bev, EV_READ);
		}
		return;
	}
	if (what & BEV_EVENT_EOF && !(what & BEV_EVENT_ERROR)) {
		/* Half-close (e.g. `nc -q1`): answer what was sent, then close. */
		c->eof = 1;
		if (!c->paused)
			process_input(c);
		return;
	}
	conn_close(c);
}

struct conn *conn_new(struct server *srv, evutil_socket_t fd, int admin)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		evutil_closesocket(fd);
		return NULL;
	}
	c->srv = srv;
	c->admin = admin;
	c->bev = bufferevent_socket_new(server_base(srv), fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev) {
		evutil_closesocket(fd);
		free(c);
		return NULL;
	}
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, OUT_LOW, 0);
	int64_t idle = server_config(srv)->idle_timeout_ms;
	if (idle > 0) {
		struct timeval tv = {.tv_sec = idle / 1000, .tv_usec = (idle % 1000) * 1000};
		bufferevent_set_timeouts(c->bev, &tv, NULL);
	}
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	server_conn_added(srv, c);
	return c;
}

void conn_drain(struct conn *c)
{
	if (c->closed)
		return;
	c->closing = 1;
	bufferevent_disable(c->bev, EV_READ);
	maybe_finish(c);
}
