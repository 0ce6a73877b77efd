/*
 * conn.c - one client connection, the transport: the socket, its buffers,
 * backpressure, the timeouts and draining. What the bytes mean is the
 * session's (session.h), chosen by the listener's row in frontend.c: the
 * in-order pipeline (pipeline.c) or gRPC's HTTP/2 session (grpc.c).
 *
 * Reading pauses while the session owes too many replies or the client is
 * not reading its replies, so one client's memory stays bounded.
 *
 * Plain events and evbuffers rather than bufferevents: a read is one recv()
 * (no FIONREAD ioctl first), replies are sent directly at the end of the loop
 * turn, and EV_WRITE is armed only while the socket is full.
 *
 * A TLS listener's connections move their bytes through OpenSSL (tls_io):
 * the handshake first, bounded by request_timeout, then the same reads and
 * writes; the session never knows.
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

#include "clock.h"
#include "config.h"
#include "frontend.h"
#include "log.h"
#include "session.h"
#include "stats.h"
#include "tls.h"

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

struct conn;

/*
 * How bytes move on the socket: plain, or through a TLS session (tls_io).
 * Each returns as the system call it stands for does, errno set.
 */
struct conn_io {
	ssize_t (*read)(struct conn *c, void *buf, size_t len);
	ssize_t (*write)(struct conn *c, const void *buf, size_t len);
	/* writes what it can of c->out, and drains that */
	int (*write_out)(struct conn *c);
	/* every reply is out: end our side, drop what input is queued */
	void (*finish)(struct conn *c);
};

struct conn {
	struct conn_link link;
	const struct conn_io *io;
	struct ssl_st *ssl;	   /* a TLS listener's session, else NULL */
	int handshaking;	   /* TLS: the handshake is not done */
	const struct frontend *fe; /* the listener's row (tls-required's words) */
	const char *lname;	   /* the listener's address, for logs */
	struct cmd_caller caller;  /* who sends the requests (the sessions point here) */
	struct conn_ctx *ctx;
	/* what runs on the bytes (frontend.c's row for the listener) */
	const struct session_ops *ops;
	void *sess;
	evutil_socket_t fd;
	struct event *rev, *wev; /* wev is armed only while output is queued */
	struct event *rto;	 /* request_timeout: armed while a request is partial */
	struct event *cool;	 /* reading held after a refusal (COOL_MS) */
	int cooling;		 /* reading stopped by cool */
	int cooled_ms;		 /* how long so far */
	struct evbuffer *in, *out;
	struct timeval idle; /* idle_timeout, or 0 */
	int paused;	     /* reading stopped for backpressure */
	int closing;	     /* no more requests; close once replies are written */
	int got_bytes;	     /* the client has sent something */
	int drain_fresh;     /* draining, waiting a moment for its first request */
	int outq;	     /* bytes in the kernel's send queue when last looked (want_write) */
	int closed;	     /* handed to the reaper */
	int eof;	     /* the client shut its side; answer what it sent */
	int dirty;	     /* replies ready to write at the end of this loop turn */
};

static ssize_t plain_read(struct conn *c, void *buf, size_t len)
{
	return recv(c->fd, buf, len, MSG_DONTWAIT);
}

static ssize_t plain_write(struct conn *c, const void *buf, size_t len)
{
	return send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int plain_write_out(struct conn *c)
{
	return evbuffer_write(c->out, c->fd);
}

/*
 * Closing a socket that still has unread input makes the kernel send RST,
 * which can destroy replies the client has not read yet; so send FIN first
 * and drop what input is queued.
 */
static void plain_finish(struct conn *c)
{
	char sink[4096];
	shutdown(c->fd, SHUT_WR);
	for (int i = 0; i < 64 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
}

static const struct conn_io plain_io = {
	.read = plain_read,
	.write = plain_write,
	.write_out = plain_write_out,
	.finish = plain_finish,
};

/* A TLS step's result as a system call's: a wait is EAGAIN, the peer's
 * close 0, a failure ECONNRESET. */
static ssize_t tls_result(enum tls_io r, size_t n)
{
	switch (r) {
	case TLS_IO_DONE:
		return (ssize_t)n;
	case TLS_IO_WANT_READ:
	case TLS_IO_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case TLS_IO_CLOSED:
		return 0;
	case TLS_IO_ERROR:
		break;
	}
	errno = ECONNRESET;
	return -1;
}

static ssize_t tls_conn_read(struct conn *c, void *buf, size_t len)
{
	char why[160];
	size_t n = 0;
	enum tls_io r = tls_read(c->ssl, buf, len, &n, why, sizeof(why)); /* before n is read */
	return tls_result(r, n);
}

static ssize_t tls_conn_write(struct conn *c, const void *buf, size_t len)
{
	char why[160];
	size_t n = 0;
	enum tls_io step = tls_write(c->ssl, buf, len, &n, why, sizeof(why));
	ssize_t r = tls_result(step, n);
	if (r == 0) { /* a write cannot take a close: the peer is gone */
		errno = EPIPE;
		return -1;
	}
	return r;
}

/* c->out through the session, chunk by chunk, as evbuffer_write would. */
static int tls_conn_write_out(struct conn *c)
{
	int total = 0;
	for (;;) {
		struct evbuffer_iovec v;
		if (evbuffer_peek(c->out, -1, NULL, &v, 1) < 1 || v.iov_len == 0)
			return total;
		ssize_t w = tls_conn_write(c, v.iov_base, v.iov_len);
		if (w <= 0)
			return total ? total : -1;
		evbuffer_drain(c->out, (size_t)w);
		total += (int)w;
	}
}

static void tls_conn_finish(struct conn *c)
{
	tls_session_close(c->ssl); /* close_notify, then the FIN */
	plain_finish(c);
}

static const struct conn_io tls_io = {
	.read = tls_conn_read,
	.write = tls_conn_write,
	.write_out = tls_conn_write_out,
	.finish = tls_conn_finish,
};

/*
 * A client's TLS failed: counted by why, and logged at most every
 * TLS_LOG_US with how many failed meanwhile and the last cause, so a
 * scanner or a misconfigured fleet cannot flood the log.
 */
#define TLS_LOG_US 10000000u
static void tls_failed(struct conn *c, enum stats_tls_failure why, const char *detail)
{
	static uint64_t last_us;
	static unsigned long long unlogged;
	stats.client_tls_failures[why]++;
	unlogged++;
	uint64_t now = clock_mono_us();
	if (last_us && now - last_us < TLS_LOG_US) {
		log_debug("listen %s: TLS: %s", c->lname ? c->lname : "?", detail);
		return;
	}
	log_warn("listen %s: %llu client TLS %s failed%s (the last: %s: %s)",
		 c->lname ? c->lname : "?", unlogged,
		 log_plural(unlogged, "connection", "connections"),
		 last_us ? " in the last 10 s" : "", stats_tls_failure_name(why), detail);
	last_us = now;
	unlogged = 0;
}

static void process_input(struct conn *c);
static void request_clock(struct conn *c, int progress);
static void flush(struct conn *c);
static void goodbye(struct conn *c);

void conn_pool_free(void)
{
	frontend_pool_free();
}

struct conn_link *conn_link(struct conn *c)
{
	return &c->link;
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
	if (c->ssl)
		tls_session_drop(c->ssl);
	c->ops->free(c->sess); /* what is in flight finishes into nothing */
	free(c);
}

/* Every reply is with the kernel: close gently (plain_finish). */
static void conn_finish(struct conn *c)
{
	c->io->finish(c);
	conn_close(c);
}

/* Replies still owed to the client. */
static int owes(const struct conn *c)
{
	return c->ops->owes(c->sess) > 0;
}

static void maybe_finish(struct conn *c)
{
	if (c->closed || !c->closing || owes(c))
		return;
	if (evbuffer_get_length(c->out) == 0)
		conn_finish(c);
	/* else write_cb closes once the output has drained */
}

static void read_on(struct conn *c)
{
	if (c->cooling)
		return;
	event_add(c->rev, c->idle.tv_sec || c->idle.tv_usec ? &c->idle : NULL);
	/* what OpenSSL decrypted and holds, no readable event will tell */
	if (c->ssl && !c->handshaking && tls_pending(c->ssl))
		event_active(c->rev, EV_READ, 1);
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
	if (c->ops->inflight(c->sess) > 0 && c->cooled_ms < COOL_MAX_MS) {
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

/* The session is over (or failed): nothing more is read, and what was
 * received is dropped (a client that sends without reading must not grow
 * our input). */
static void stop_reading(struct conn *c)
{
	c->closing = 1;
	event_del(c->rev);
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
}

/* What a session call reported, applied to the connection. */
static void apply(struct conn *c, const struct session_step *st)
{
	if (st->close)
		c->closing = 1;
	if (st->over)
		stop_reading(c);
	if (st->pause) {
		c->paused = 1;
		event_del(c->rev);
	}
	if (st->refused)
		cool_start(c);
}

/* The session may have output: written at the end of the loop turn, with
 * everything else that becomes ready in it (one send() for a batch). */
static void mark_ready(struct conn *c)
{
	if (!c->closed && !c->dirty) {
		c->dirty = 1;
		c->ctx->ready(c->ctx, c);
	}
}

static void session_ready(void *arg)
{
	mark_ready(arg);
}

/* One send() of buf[0..n) when nothing is queued before it; what the
 * socket does not take is queued. -1 when the connection closed. */
static int send_now(struct conn *c, const char *buf, size_t n)
{
	size_t off = 0;
	if (evbuffer_get_length(c->out) == 0) {
		ssize_t w = c->io->write(c, buf, n);
		if (w > 0)
			off = (size_t)w;
		else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			conn_close(c); /* the client is gone; its replies with it */
			return -1;
		}
	}
	if (off < n && evbuffer_add(c->out, buf + off, n - off) != 0) {
		conn_close(c);
		return -1;
	}
	return 0;
}

/*
 * What the session has ready goes out in one send() when nothing is queued
 * before it: replies are gathered in buf (formatted in place, or copied),
 * no EV_WRITE round trip through the loop and no evbuffer chain per reply.
 * What the socket does not take is queued, and EV_WRITE armed until it is
 * written. Reading resumes when the client has taken enough.
 */
static void flush(struct conn *c)
{
	static char buf[65536];
	size_t n = 0;
	struct session_step st = {0};
	for (;;) {
		const char *data;
		ssize_t k = c->ops->next(c->sess, buf + n, sizeof(buf) - n, &data, &st);
		if (k == SESSION_NO_ROOM && n) {
			if (evbuffer_add(c->out, buf, n) != 0) {
				conn_close(c);
				return;
			}
			n = 0;
			continue;
		}
		if (k <= 0)
			break;
		if (data == buf + n) {
			n += (size_t)k;
			continue;
		}
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
	if (n && send_now(c, buf, n) < 0)
		return;
	if (evbuffer_get_length(c->out))
		want_write(c);
	c->ops->sent(c->sess, &st);
	apply(c, &st);
	request_clock(c, 0); /* a request ended meanwhile is no longer partial */
	if (c->paused && !c->closing && c->ops->may_resume(c->sess) &&
	    evbuffer_get_length(c->out) < OUT_HIGH) {
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
	return c->ops->partial(c->sess, evbuffer_get_length(c->in));
}

/*
 * request_timeout: the clock runs from the first byte of a request until it
 * is whole. A client that starts requests and never finishes them (slowloris)
 * holds a buffer and a descriptor; it gets an error and is closed instead.
 * Input we left unread (backpressure, closing) is our delay, not the client's.
 */
static void request_clock(struct conn *c, int progress)
{
	if (c->drain_fresh)
		return; /* the timer waits for a draining client's first request */
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
	if (c->handshaking && !c->closed) {
		tls_failed(c, STATS_TLS_TIMEOUT,
			   "the handshake was not finished within request_timeout");
		conn_close(c);
		return;
	}
	if (c->drain_fresh && !c->closed) {
		drain_now(c); /* no request came in time */
		return;
	}
	if (c->closed || c->closing || c->paused || c->cooling)
		return;
	int rc = c->ops->timeout(c->sess); /* the partial request answered an error */
	if (rc < 0) {
		conn_close(c);
		return;
	}
	if (rc == 0)
		return; /* what was partial ended meanwhile */
	if (c->ops->goodbye) {
		/* the connection ends as on SIGTERM: the requests it has are
		 * answered, the client told which were not taken */
		goodbye(c);
		return;
	}
	stop_reading(c);
	if (c->ops->has_output(c->sess))
		mark_ready(c);
}

static void process_input(struct conn *c)
{
	if (c->closed)
		return;
	struct session_step st = {0};
	if (!c->closing && !c->cooling) {
		if (evbuffer_get_length(c->out) >= OUT_HIGH)
			st.pause = 1; /* the client is not reading its replies */
		else
			c->ops->input(c->sess, c->in, c->eof, &st);
	}
	if (st.fail) {
		conn_close(c);
		return;
	}
	apply(c, &st);
	if (c->closed)
		return;
	request_clock(c, st.progress);
	if (c->ops->has_output(c->sess))
		mark_ready(c);
}

void conn_flush(struct conn *c)
{
	c->dirty = 0;
	if (!c->closed)
		flush(c);
}

/*
 * The protocol's goodbye (gRPC's GOAWAY naming the last call taken): those
 * are answered; one the client opened after it is one it is told was never
 * processed, so it retries it elsewhere instead of losing it to a bare
 * close. Then the close, once the goodbye is written (want_write bounds how
 * long that may take).
 */
static void goodbye(struct conn *c)
{
	c->closing = 1;
	c->ops->goodbye(c->sess);
	event_del(c->rev);
	flush(c);
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
	ssize_t n = c->io->read(c, v.iov_base, v.iov_len);
	if (n > 0) {
		/* a TLS ClientHello on a plaintext listener: no protocol here
		 * begins with 0x16, and no answer in plain text would be read */
		if (!c->got_bytes && !c->ssl && *(const uint8_t *)v.iov_base == 0x16) {
			evbuffer_commit_space(c->in, &v, 0);
			tls_failed(c, STATS_TLS_ON_PLAIN,
				   "a TLS handshake on a plaintext listener");
			conn_close(c);
			return -1;
		}
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

/*
 * One step of a TLS listener's handshake, each time the socket is ready.
 * A client whose first byte is no TLS record speaks plain text: it is told
 * so in its protocol, in plain text, and closed.
 */
static void handshake_step(struct conn *c)
{
	if (!c->got_bytes) {
		uint8_t first;
		ssize_t n = recv(c->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			conn_close(c); /* gone before a word */
			return;
		}
		c->got_bytes = 1;
		if (first != 0x16) {
			char buf[FRONTEND_REPLY_ROOM];
			size_t len = frontend_tls_required(c->fe, first, buf);
			tls_failed(c, STATS_TLS_PLAINTEXT, "plain text on a TLS listener");
			if (len)
				(void)send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
			plain_finish(c);
			conn_close(c);
			return;
		}
	}
	char why[160];
	switch (tls_handshake(c->ssl, why, sizeof(why))) {
	case TLS_IO_DONE:
		c->handshaking = 0;
		stats.client_tls_handshakes++;
		/* a verified client certificate's name: an identity's cert_name proves it */
		if (tls_peer_name(c->ssl, why, sizeof(why)) && strlen(why) <= CMD_WHO_MAX)
			memcpy(c->caller.cert_cn, why, strlen(why) + 1);
		event_del(c->rto);
		event_del(c->wev);
		read_on(c); /* and what came with the handshake's last flight */
		return;
	case TLS_IO_WANT_READ:
		event_del(c->wev);
		return;
	case TLS_IO_WANT_WRITE:
		event_add(c->wev, NULL);
		return;
	case TLS_IO_CLOSED:
	case TLS_IO_ERROR:
		tls_failed(c, STATS_TLS_HANDSHAKE, why);
		conn_close(c);
		return;
	}
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
			/* (mid-handshake there is no session to say goodbye with:
			 * its SETTINGS and GOAWAY would go into an unfinished TLS
			 * session, spin on a writable socket and lose the
			 * handshake's own deadline) */
			if (c->ops->goodbye && !c->handshaking) {
				goodbye(c); /* a request sent meanwhile is retried, not lost */
			} else if (!c->handshaking && c->ops->idle && c->ops->idle(c->sess) > 0) {
				stop_reading(c); /* the last word, then the close */
				mark_ready(c);
			} else {
				conn_close(c);
			}
		}
		return; /* EV_PERSIST: the timeout is armed again */
	}
	if (c->handshaking) {
		handshake_step(c);
		return;
	}
	int got = read_some(c);
	if (got > 0 || (got == 0 && c->eof))
		process_input(c);
	/* TLS: what OpenSSL read ahead is read on the next turn (unless reading stopped) */
	if (got > 0 && c->ssl && !c->closed && tls_pending(c->ssl) &&
	    event_pending(c->rev, EV_READ, NULL))
		event_active(c->rev, EV_READ, 1);
	if (c->drain_fresh && !c->closed && (c->got_bytes || c->eof))
		drain_now(c); /* its first request came: answered, then closed */
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	struct conn *c = arg;
	if (c->closed)
		return;
	if (c->handshaking) {
		handshake_step(c);
		return;
	}
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
	if (c->io->write_out(c) < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		conn_close(c);
		return;
	}
	size_t left = evbuffer_get_length(c->out);
	if (left == 0)
		event_del(c->wev);
	else
		c->outq = send_queue(c); /* the clock restarts from here */
	if (c->paused && left <= OUT_LOW)
		flush(c); /* resumes reading */
	else
		maybe_finish(c);
}

struct conn *conn_new(struct conn_ctx *ctx, evutil_socket_t fd, const struct sockaddr *sa,
		      const struct conn_port *port)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		evutil_closesocket(fd);
		return NULL;
	}
	const struct frontend *fe = frontend_of(port->protocol);
	struct session_host host = {
		.cfg = &ctx->cfg,
		.env = ctx->env,
		.caller = &c->caller,
		.ready = session_ready,
		.arg = c,
	};
	c->io = &plain_io;
	c->caller.admin = port->admin;
	c->caller.auth = port->auth;
	c->fe = fe;
	c->lname = port->name;
	if (port->tls) {
		char why[160];
		c->ssl = tls_server_session(port->tls, fd, why, sizeof(why));
		if (!c->ssl) {
			log_error("listen %s: %s; dropping client", port->name, why);
			free(c);
			evutil_closesocket(fd);
			return NULL;
		}
		c->io = &tls_io;
		c->handshaking = 1;
	}
	c->ops = fe->session;
	c->sess = c->ops->new (fe, &host, port, sa);
	if (!c->sess) {
		if (c->ssl)
			tls_session_drop(c->ssl);
		free(c);
		evutil_closesocket(fd);
		return NULL;
	}
	c->ctx = ctx;
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
		if (c->ssl)
			tls_session_drop(c->ssl);
		c->ops->free(c->sess);
		free(c);
		return NULL;
	}
	int64_t idle = ctx->cfg->idle_timeout_ms;
	c->idle.tv_sec = idle / 1000;
	c->idle.tv_usec = (idle % 1000) * 1000;
	read_on(c);
	if (c->handshaking) {
		/* a handshake is a request: bounded by request_timeout */
		int64_t ms = ctx->cfg->request_timeout_ms;
		struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
		evtimer_add(c->rto, &tv);
	}
	return c;
}

void conn_drain(struct conn *c)
{
	if (c->closed)
		return;
	if (c->handshaking) {
		conn_close(c); /* no request yet, nor a session to take one */
		return;
	}
	if (c->ops->goodbye) {
		/* said now, before the close an idle connection would otherwise
		 * get at once */
		goodbye(c);
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
