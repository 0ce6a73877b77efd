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
 *
 * Plain events and evbuffers rather than bufferevents: a read is one recv()
 * (no FIONREAD ioctl first), replies are sent directly at the end of the loop
 * turn, and EV_WRITE is armed only while the socket is full.
 */
#include "conn.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmd.h"
#include "config.h"
#include "grpc.h"
#include "log.h"
#include "proto.h"
#include "proto_http.h"
#include "proto_line.h"
#include "proto_resp.h"
#include "stats.h"

/* Requests parsed and not yet written back. */
#define MAX_PENDING 1024
/* Output bytes owed to a client that is not reading. */
#define OUT_HIGH (256 * 1024)
#define OUT_LOW (64 * 1024)
#define READ_CHUNK 16384
/*
 * A client whose requests the store refused (store overload) is not read
 * again for COOL_MS, and then not before the requests it had admitted are
 * answered (checked every COOL_MS / 4, for at most COOL_MAX_MS). Refusing
 * is cheap but not free: a client pool that resends each refusal at once
 * (hundreds of thousands a second) would otherwise take the CPU the daemon
 * needs to read Redis's replies, and the requests it did admit would miss
 * their deadline. What it sends meanwhile waits in the socket.
 */
#define COOL_MS 10
#define COOL_MAX_MS 1000
/* Draining: how long a connection that has sent nothing yet may take to send
 * its first request (it was accepted just before the stop). */
#define CONN_DRAIN_FRESH_MS 1000

struct pending {
	struct cmd_slot slot; /* first: complete() gets this pointer */
	struct pending *next;
	struct conn *conn;
	int done;
};

struct conn {
	struct conn_link link;
	struct conn_ctx *ctx;
	/* How requests are framed, parsed and answered; NULL until the first
	 * byte says (a RESP array starts with '*', anything else is a line),
	 * or the listener's protocol (http). */
	const struct proto *proto;
	struct proto_conn *pc; /* HTTP's: the listener's options, the peer */
	/* gRPC's (protocol: grpc): HTTP/2 streams answered in any order; the
	 * pending list and proto are then unused */
	struct grpc_session *grpc;
	evutil_socket_t fd;	 /* -1 once reaped */
	struct event *rev, *wev; /* wev is armed only while output is queued */
	struct event *rto;	 /* request_timeout: armed while a request is partial */
	struct event *cool;	 /* reading held after a refusal (COOL_MS) */
	int cooling;		 /* reading stopped by cool */
	int cooled_ms;		 /* how long so far */
	struct evbuffer *in, *out;
	struct timeval idle; /* idle_timeout, or 0 */
	struct pending *head, *tail;
	unsigned npending; /* queued, done or not */
	unsigned inflight; /* not done yet */
	int paused;	   /* reading stopped for backpressure */
	int closing;	   /* no more requests; close once replies are written */
	int got_bytes;	   /* the client has sent something */
	int drain_fresh;   /* draining, waiting a moment for its first request */
	int outq;	   /* bytes in the kernel's send queue when last looked (want_write) */
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
	cmd_result_release(&p->slot.res);
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
	grpc_pool_free();
	while (pool) {
		struct pending *p = pool;
		pool = p->next;
		free(p);
	}
	npool = 0;
}

static void process_input(struct conn *c);
static void request_clock(struct conn *c, int progress);
static void flush_replies(struct conn *c);
static void grpc_goodbye(struct conn *c);

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
	grpc_session_free(c->grpc); /* calls in flight finish into nothing */
	free(c->pc);
	free(c);
}

void conn_close(struct conn *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	c->closing = 1;
	event_del(c->rev);
	event_del(c->wev);
	event_del(c->rto);
	event_del(c->cool);
	c->ctx->closed(c->ctx, c);
}

void conn_reap(struct conn *c)
{
	event_free(c->rev);
	event_free(c->wev);
	event_free(c->rto);
	event_free(c->cool);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	evutil_closesocket(c->fd);
	c->fd = -1;
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
	evutil_socket_t fd = c->fd;
	char sink[4096];
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 64 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	conn_close(c);
}

/* Replies still owed to the client. */
static int owes(const struct conn *c)
{
	return c->npending || (c->grpc && grpc_session_calls(c->grpc));
}

static void maybe_finish(struct conn *c)
{
	if (c->closed || !c->closing || owes(c))
		return;
	if (evbuffer_get_length(c->out) == 0)
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
		if (c->fd < 0 && c->inflight == 0)
			conn_destroy(c);
		return;
	}
	if (p == c->head && !c->dirty) {
		/* Written at the end of the loop turn, with every other reply
		 * that becomes ready in it: one send() for a whole batch. */
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
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
	p->slot.res.refused = 0;
	p->slot.res.item = NULL;
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	c->npending++;
	c->inflight++;
	return p;
}

static void read_on(struct conn *c)
{
	if (!c->cooling)
		event_add(c->rev, c->idle.tv_sec || c->idle.tv_usec ? &c->idle : NULL);
}

static void cool_arm(struct conn *c, int ms)
{
	struct timeval tv = {.tv_sec = 0, .tv_usec = ms * 1000};
	c->cooled_ms += ms;
	evtimer_add(c->cool, &tv);
}

/* The store refused requests of c: hold its reading (COOL_MS above). */
static void cool_start(struct conn *c)
{
	if (c->cooling || c->closing || c->closed)
		return;
	c->cooling = 1;
	c->cooled_ms = 0;
	event_del(c->rev);
	cool_arm(c, COOL_MS);
}

static void cool_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct conn *c = arg;
	if (c->closed)
		return;
	if ((c->inflight > 0 || (c->grpc && grpc_session_calls(c->grpc))) &&
	    c->cooled_ms < COOL_MAX_MS) {
		cool_arm(c, COOL_MS / 4);
		return;
	}
	c->cooling = 0;
	if (!c->paused && !c->eof && !c->closing)
		read_on(c);
	process_input(c);
}

/* Bytes the kernel holds for the client (not yet taken), or -1. */
static int send_queue(struct conn *c)
{
	int q;
	return ioctl(c->fd, TIOCOUTQ, &q) == 0 ? q : -1;
}

/*
 * Output is queued: write it when the socket takes more. A client that
 * takes none of it for request_timeout is closed: one that stops reading
 * would otherwise hold its connection and output (up to OUT_HIGH) for as
 * long as it likes, idle_timeout and request_timeout both being about
 * what it sends. Each write restarts the clock (EV_PERSIST), and so does
 * the kernel's queue shrinking (a slow reader: the socket is writable
 * again only once a third of it is free); more output does not.
 */
static void want_write(struct conn *c)
{
	if (event_pending(c->wev, EV_WRITE, NULL))
		return;
	int64_t ms = c->ctx->cfg->request_timeout_ms;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	c->outq = send_queue(c);
	event_add(c->wev, &tv);
}

/*
 * Replies ready at the head go out in one send() when nothing is queued
 * before them: no EV_WRITE round trip through the loop. What the socket does
 * not take is queued, and EV_WRITE armed until it is written.
 */
static void send_out(struct conn *c)
{
	if (evbuffer_write(c->out, c->fd) < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR) {
		conn_close(c);
		return;
	}
	if (evbuffer_get_length(c->out))
		want_write(c);
}

/* gRPC: the session is over (or failed): nothing more is read, and what
 * was received is dropped (a client that sends without reading must not
 * grow our input). */
static void grpc_stop_reading(struct conn *c)
{
	c->closing = 1;
	event_del(c->rev);
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
}

/* gRPC: what the session has to say goes out; reading resumes when the
 * client has taken enough of it. */
static void flush_grpc(struct conn *c)
{
	/* frames are gathered here and sent by one send() when nothing is
	 * queued before them, as flush_replies does: no evbuffer chain per
	 * frame */
	static uint8_t buf[65536];
	size_t n = 0;
	for (;;) {
		const uint8_t *data;
		ssize_t k = grpc_session_next(c->grpc, &data);
		if (k < 0)
			grpc_stop_reading(c);
		if (k <= 0)
			break;
		if (evbuffer_get_length(c->out) == 0 && n + (size_t)k <= sizeof(buf)) {
			memcpy(buf + n, data, (size_t)k);
			n += (size_t)k;
			continue;
		}
		if ((n && evbuffer_add(c->out, buf, n) != 0) ||
		    evbuffer_add(c->out, data, (size_t)k) != 0) {
			conn_close(c);
			return;
		}
		n = 0;
	}
	if (n) {
		ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		size_t off = w > 0 ? (size_t)w : 0;
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			conn_close(c);
			return;
		}
		if (off < n && evbuffer_add(c->out, buf + off, n - off) != 0) {
			conn_close(c);
			return;
		}
	}
	if (evbuffer_get_length(c->out))
		send_out(c);
	if (c->closed)
		return;
	if (grpc_session_over(c->grpc))
		grpc_stop_reading(c);
	if (grpc_session_take_refused(c->grpc))
		cool_start(c);
	request_clock(c, 0); /* a stream reset meanwhile is no longer partial */
	if (c->paused && !c->closing && evbuffer_get_length(c->out) < OUT_HIGH) {
		c->paused = 0;
		if (!c->eof)
			read_on(c);
		process_input(c);
	}
	maybe_finish(c);
}

static void flush_replies(struct conn *c)
{
	if (c->grpc) {
		flush_grpc(c);
		return;
	}
	struct evbuffer *out = c->out;
	char buf[65536]; /* room for a burst of replies, sent by one send() */
	size_t n = 0;
	const struct proto *proto = c->proto;
	while (c->head && c->head->done) {
		struct pending *p = c->head;
		if (n + proto->reply_max > sizeof(buf)) {
			evbuffer_add(out, buf, n);
			n = 0;
		}
		n += proto->format(buf + n, &p->slot.res);
		if (p->slot.res.kind == CMD_REPLY_BYE || p->slot.res.close_after)
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
			ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				off = (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
				 errno != EINTR) {
				conn_close(c); /* the client is gone; its replies with it */
				return;
			}
		}
		if (off < n) {
			evbuffer_add(out, buf + off, n - off);
			want_write(c);
		}
	}
	if (c->paused && !c->closing && c->npending < MAX_PENDING / 2 &&
	    evbuffer_get_length(out) < OUT_HIGH) {
		c->paused = 0;
		if (!c->eof)
			read_on(c);
		process_input(c);
	}
	maybe_finish(c);
}

/* Draining: no more requests; closed once what is owed is written. */
static void drain_now(struct conn *c)
{
	c->drain_fresh = 0;
	c->closing = 1;
	event_del(c->rev);
	maybe_finish(c);
}

/* A request begun and not whole: the client owes us bytes. */
static int mid_request(struct conn *c)
{
	return c->grpc ? grpc_session_partial(c->grpc) > 0 : evbuffer_get_length(c->in) > 0;
}

/*
 * request_timeout: the clock runs from the first byte of a request until it
 * is whole. A client that starts requests and never finishes them (slowloris)
 * holds a buffer and a descriptor; it gets an error and is closed instead.
 * Input we left unread (backpressure, closing) is our delay, not the client's.
 */
static void request_clock(struct conn *c, int progress)
{
	int partial = !c->closing && !c->paused && !c->cooling && mid_request(c);
	if (!partial) {
		event_del(c->rto);
		return;
	}
	if (progress || !evtimer_pending(c->rto, NULL)) {
		int64_t ms = c->ctx->cfg->request_timeout_ms;
		struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
		evtimer_add(c->rto, &tv);
	}
}

static void request_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct conn *c = arg;
	if (c->drain_fresh && !c->closed) {
		drain_now(c); /* no request came in time */
		return;
	}
	if (c->closed || c->closing || c->paused || c->cooling)
		return;
	if (c->grpc) {
		if (grpc_session_partial(c->grpc) == 0)
			return; /* what was partial ended meanwhile */
		/* a stream begun and not whole: answered DEADLINE_EXCEEDED, and
		 * the connection ends as on SIGTERM (the calls it has are
		 * answered, a GOAWAY tells the client which were not taken) */
		log_debug("closing a gRPC client whose call was not whole within "
			  "request_timeout");
		grpc_session_fail_partial(c->grpc, GRPC_DEADLINE_EXCEEDED,
					  "the call was not complete within request_timeout");
		grpc_goodbye(c);
		return;
	}
	struct pending *p = pending_new(c);
	if (!p) {
		conn_close(c);
		return;
	}
	log_debug("closing a client whose request was not whole within request_timeout");
	c->closing = 1;
	event_del(c->rev);
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
	p->slot.res.tag = 0;
	p->slot.res.close_after = 1;
	cmd_reply_error(&p->slot, CMD_ERR_REQUEST_TIMEOUT,
			"the request was not complete within request_timeout");
	if (!c->dirty && c->head->done) {
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
	}
}

/* gRPC: every byte received goes to the session (nghttp2 keeps partial
 * frames itself); output waiting too long holds reading. */
static void process_grpc(struct conn *c)
{
	struct evbuffer *in = c->in;
	size_t len = evbuffer_get_length(in);
	if (c->closing || c->closed || c->cooling)
		return;
	if (evbuffer_get_length(c->out) >= OUT_HIGH) {
		c->paused = 1;
		event_del(c->rev);
		return;
	}
	if (len) {
		const uint8_t *data = evbuffer_pullup(in, (ev_ssize_t)len);
		int rc = data ? grpc_session_input(c->grpc, data, len) : -1;
		evbuffer_drain(in, len);
		if (rc < 0) {
			c->closing = 1; /* the GOAWAY goes out, then the connection closes */
			event_del(c->rev);
		}
	}
	if (c->eof)
		c->closing = 1;
	if (grpc_session_take_refused(c->grpc))
		cool_start(c);
	request_clock(c, len > 0);
	if (!c->dirty && !c->closed) {
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
	}
}

static void process_input(struct conn *c)
{
	if (c->grpc) {
		process_grpc(c);
		return;
	}
	struct evbuffer *in = c->in;
	struct evbuffer *out = c->out;
	struct config *cfg = c->ctx->cfg;
	size_t max_line = cfg->max_line;
	size_t window = max_line + 2;
	int progress = 0; /* a request was taken: the partial one after it is new */
	int refused = 0;

	while (!c->closing && !c->closed && !c->cooling) {
		if (c->npending >= MAX_PENDING || evbuffer_get_length(out) >= OUT_HIGH) {
			c->paused = 1;
			event_del(c->rev);
			break;
		}
		size_t len = evbuffer_get_length(in);
		if (len == 0) {
			c->closing |= c->eof;
			break;
		}
		if (!c->proto) {
			const char *first = (const char *)evbuffer_pullup(in, 1);
			c->proto = first[0] == '*' ? &proto_resp : &proto_line;
		}
		if (window < c->proto->window_min)
			window = c->proto->window_min;
		size_t want = len < window ? len : window;
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
		struct proto_parsed got;
		got.used = 0;
		got.tag = 0;
		got.close_after = 0;
		enum proto_step step = c->proto->parse(data, want, max_line, c->pc, &got);
		if (step == PROTO_NEED_MORE) {
			c->closing |= c->eof; /* a partial last request is not a request */
			break;
		}
		progress = 1;
		if (step == PROTO_SKIP) {
			evbuffer_drain(in, got.used);
			continue;
		}
		struct pending *p = pending_new(c);
		if (!p) {
			log_error("out of memory; dropping client");
			conn_close(c);
			return;
		}
		p->slot.res.tag = got.tag;
		p->slot.names_policy = c->proto->names_policy;
		p->slot.front = c->proto == &proto_resp	  ? STATS_FRONT_RESP
				: c->proto == &proto_http ? STATS_FRONT_HTTP
							  : STATS_FRONT_LINE;
		p->slot.res.close_after = got.close_after;
		if (got.close_after)
			c->closing = 1; /* nothing after it is read */
		switch (step) {
		case PROTO_FATAL:
			c->closing = 1;
			p->slot.res.close_after = 1;
			cmd_reply_error(&p->slot, got.err.code, got.err.msg);
			break;
		case PROTO_BAD:
			cmd_reply_error(&p->slot, got.err.code, got.err.msg);
			break;
		case PROTO_LOCAL:
			cmd_reply_local(&p->slot, got.local);
			break;
		default:
			if (got.req.verb == CMD_QUIT)
				c->closing = 1;
			cmd_execute(cfg, c->ctx->env, &got.req, c->admin, &p->slot);
			/* answered already (p stays queued until written) */
			refused |= p->done && p->slot.res.refused;
			break;
		}
		if (step == PROTO_FATAL)
			break;
		/* The store copied what it needs; the request's bytes can go. */
		if (!c->closed)
			evbuffer_drain(in, got.used);
	}
	if (refused)
		cool_start(c);
	if (!c->closed)
		request_clock(c, progress);
	if (!c->closed && !c->dirty && (c->head == NULL || c->head->done)) {
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
	}
}

void conn_flush(struct conn *c)
{
	c->dirty = 0;
	if (!c->closed)
		flush_replies(c);
}

/*
 * gRPC's goodbye: a GOAWAY naming the last call taken. Those are answered;
 * a call the client opened after it is one HTTP/2 tells the client was
 * never processed (its stream id is higher), so the client retries it
 * elsewhere instead of losing it to a bare close. Then the close, once
 * the GOAWAY is written (want_write bounds how long that may take).
 */
static void grpc_goodbye(struct conn *c)
{
	c->closing = 1;
	grpc_session_drain(c->grpc);
	event_del(c->rev);
	flush_grpc(c);
}

/* One recv() into c->in: 1 with bytes, 0 with none now, -1 closed (an
 * error), and at EOF c->eof set (with 1 or 0). */
static int read_some(struct conn *c)
{
	struct evbuffer_iovec v;
	if (evbuffer_reserve_space(c->in, READ_CHUNK, &v, 1) < 1) {
		log_error("out of memory; dropping client");
		conn_close(c);
		return -1;
	}
	ssize_t n = recv(c->fd, v.iov_base, v.iov_len, MSG_DONTWAIT);
	if (n > 0) {
		v.iov_len = (size_t)n;
		evbuffer_commit_space(c->in, &v, 1);
		c->got_bytes = 1;
		return 1;
	}
	evbuffer_commit_space(c->in, &v, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n < 0) {
		conn_close(c);
		return -1;
	}
	/* Half-close (e.g. `nc -q1`): answer what was sent, then close. */
	c->eof = 1;
	event_del(c->rev);
	return 0;
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	struct conn *c = arg;
	if (c->closed)
		return;
	if (what & EV_TIMEOUT) {
		/* idle_timeout: only a client that owes us nothing and sends
		 * nothing is idle; one mid-request is request_timeout's */
		if (!owes(c) && !mid_request(c)) {
			log_debug("closing idle client");
			if (c->grpc)
				grpc_goodbye(c); /* a call sent meanwhile is retried, not lost */
			else
				conn_close(c);
		}
		return; /* EV_PERSIST: the timeout is armed again */
	}
	int got = read_some(c);
	if (got > 0 || (got == 0 && c->eof))
		process_input(c);
	if (c->drain_fresh && !c->closed && (c->got_bytes || c->eof))
		drain_now(c); /* its first request came: answered, then closed */
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	if (c->closed)
		return;
	if (what & EV_TIMEOUT) {
		int q = send_queue(c);
		if (q >= 0 && q < c->outq) {
			log_debug("a client takes its replies slowly (%d bytes queued, %d before): "
				  "kept",
				  q, c->outq);
			c->outq = q; /* it reads, slowly: the clock starts again */
			return;
		}
		log_debug("closing a client that took none of its replies within "
			  "request_timeout");
		conn_close(c);
		return;
	}
	if (evbuffer_write(c->out, fd) < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR) {
		conn_close(c);
		return;
	}
	size_t left = evbuffer_get_length(c->out);
	if (left == 0)
		event_del(c->wev);
	else
		c->outq = send_queue(c); /* the clock restarts from here */
	if (c->paused && left <= OUT_LOW)
		flush_replies(c); /* resumes reading */
	else
		maybe_finish(c);
}

/* The gRPC session has output: written at the end of the loop turn. */
static void grpc_ready(void *arg)
{
	struct conn *c = arg;
	if (!c->closed && !c->dirty) {
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
	}
}

struct conn *conn_new(struct conn_ctx *ctx, evutil_socket_t fd, const struct sockaddr *sa,
		      const struct conn_port *port)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		evutil_closesocket(fd);
		return NULL;
	}
	if (port->protocol == CONFIG_PROTOCOL_HTTP) {
		c->pc = calloc(1, sizeof(*c->pc));
		if (!c->pc) {
			free(c);
			evutil_closesocket(fd);
			return NULL;
		}
		c->pc->http = port->http;
		addr_ip_of(sa, &c->pc->peer);
		c->pc->peer_trusted = c->pc->peer.family == 0;
		for (size_t i = 0; i < port->http.ntrusted && !c->pc->peer_trusted; i++)
			c->pc->peer_trusted = addr_net_match(&port->http.trusted[i], &c->pc->peer);
		c->proto = &proto_http;
	} else if (port->protocol == CONFIG_PROTOCOL_GRPC) {
		struct grpc_host host = {
			.cfg = &ctx->cfg,
			.env = ctx->env,
			.admin = port->admin,
			.ready = grpc_ready,
			.arg = c,
		};
		c->grpc = grpc_session_new(&host);
		if (!c->grpc) {
			free(c);
			evutil_closesocket(fd);
			return NULL;
		}
	}
	c->ctx = ctx;
	c->admin = port->admin;
	c->fd = fd;
	evutil_make_socket_nonblocking(fd);
	c->rev = event_new(ctx->base, fd, EV_READ | EV_PERSIST, read_cb, c);
	c->wev = event_new(ctx->base, fd, EV_WRITE | EV_PERSIST, write_cb, c);
	c->rto = evtimer_new(ctx->base, request_timeout_cb, c);
	c->cool = evtimer_new(ctx->base, cool_cb, c);
	c->in = evbuffer_new();
	c->out = evbuffer_new();
	if (!c->rev || !c->wev || !c->rto || !c->cool || !c->in || !c->out) {
		if (c->rev)
			event_free(c->rev);
		if (c->wev)
			event_free(c->wev);
		if (c->rto)
			event_free(c->rto);
		if (c->cool)
			event_free(c->cool);
		if (c->in)
			evbuffer_free(c->in);
		if (c->out)
			evbuffer_free(c->out);
		evutil_closesocket(fd);
		grpc_session_free(c->grpc);
		free(c->pc);
		free(c);
		return NULL;
	}
	int64_t idle = ctx->cfg->idle_timeout_ms;
	c->idle.tv_sec = idle / 1000;
	c->idle.tv_usec = (idle % 1000) * 1000;
	read_on(c);
	return c;
}

void conn_drain(struct conn *c)
{
	if (c->closed)
		return;
	if (c->grpc) {
		/* sent now, before the close an idle connection would otherwise
		 * get at once */
		grpc_goodbye(c);
		return;
	}
	/* Requests already in the kernel's buffer were received before the
	 * stop, often on a connection accepted just before it: take them
	 * (one read: a client that keeps sending is not waited for), answer
	 * them, then close. */
	if (!c->closing && !c->eof && !c->paused && !c->cooling && read_some(c) >= 0)
		process_input(c);
	if (c->closed)
		return;
	if (!c->closing && !c->got_bytes && !c->eof) {
		/* accepted just before the stop and its first request not here
		 * yet: a moment for it (a restart under socket activation must
		 * not drop it), then answered and closed like the rest */
		c->drain_fresh = 1;
		struct timeval tv = {0, CONN_DRAIN_FRESH_MS * 1000};
		evtimer_add(c->rto, &tv);
		return;
	}
	drain_now(c);
}
