/*
 * rlink.c - an asynchronous RESP connection over TCP, a unix socket or TLS
 * (rlink.h): a nonblocking connect, the TLS handshake, hiredis's reader
 * for replies, one output buffer written at the end of the loop turn.
 *
 * Callbacks may free or disconnect the link. Every entry from the loop or
 * from the owner is bracketed by enter/leave; the link is destroyed only
 * at the outermost leave, so no frame ever runs on a freed link.
 */
#include "rlink.h"

#include <errno.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "reply_arena.h"
#include "stats.h"
#include "tls.h"

#define READ_CHUNK 16384

struct rcb {
	struct rcb *next;
	rlink_reply_fn *fn;
	void *privdata;
	int sticky; /* a subscription: takes every reply from here on */
};

enum link_state { LS_CONNECTING, LS_HANDSHAKE, LS_UP };

struct rlink_priv {
	struct event_base *base;
	int fd;
	struct ssl_st *ssl;
	struct tls_client *tls;
	enum link_state state;
	struct event *rev, *wev, *flush_ev;
	int wev_added, flush_pending;
	redisReader *reader;
	char *obuf;
	size_t olen, ooff, ocap;
	struct rcb *head, *tail;
	unsigned owed; /* callbacks waiting, not counting a subscription */
	rlink_connect_fn *on_connect;
	rlink_disconnect_fn *on_disconnect;
	int depth;	      /* entries in progress (enter/leave) */
	int closing;	      /* rlink_disconnect: no new commands */
	int doomed;	      /* to be destroyed at the outermost leave */
	int doomed_ok;	      /* ... closed on purpose (1) or on an error (0) */
	int connect_failed;   /* ... because connecting failed */
	int destroying;	      /* destroy() is calling back: every entry is refused */
	int replied;	      /* a reply came: the peer took our TLS session */
	int write_wants_read; /* TLS: a write waits for readability */
	int read_wants_write; /* TLS: a read waits for writability */
};

struct rlink_full {
	struct rlink pub;
	struct rlink_priv priv;
};

static void destroy(struct rlink *l);

static void enter(struct rlink *l)
{
	l->p->depth++;
}

static void leave(struct rlink *l)
{
	if (--l->p->depth == 0 && l->p->doomed)
		destroy(l);
}

/* Ends l at the outermost leave: ok on purpose, else on the error in why. */
static void doom(struct rlink *l, int ok, const char *why)
{
	struct rlink_priv *p = l->p;
	if (p->doomed)
		return;
	p->doomed = 1;
	p->doomed_ok = ok;
	if (!ok) {
		l->err = 1;
		snprintf(l->errstr, sizeof(l->errstr), "%s", why);
	}
}

static void fail_connect(struct rlink *l, const char *why)
{
	l->p->connect_failed = 1;
	doom(l, 0, why);
}

static int dead(const struct rlink *l)
{
	return l->p->doomed || l->p->destroying;
}

static void destroy(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	p->destroying = 1;
	p->depth++; /* callbacks below may call in: they are refused */
	if (p->rev)
		event_free(p->rev);
	if (p->wev)
		event_free(p->wev);
	if (p->flush_ev)
		event_free(p->flush_ev);
	p->rev = p->wev = p->flush_ev = NULL;
	tls_session_free(p->ssl);
	p->ssl = NULL;
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	/* a link that ends before it was up, failed or called off by its owner
	 * (rlink_disconnect, rlink_free while connecting), says so once: its
	 * owner must let go of it (redis_conn's link pointer) */
	if (p->state != LS_UP && p->on_connect) {
		if (!p->connect_failed)
			snprintf(l->errstr, sizeof(l->errstr), "closed while connecting");
		p->on_connect(l, 0);
	}
	while (p->head) {
		struct rcb *cb = p->head;
		p->head = cb->next;
		if (cb->fn)
			cb->fn(l, NULL, cb->privdata);
		free(cb);
	}
	if (p->state == LS_UP && p->on_disconnect)
		p->on_disconnect(l, p->doomed_ok);
	reply_arena_reader_free(p->reader);
	tls_client_unref(p->tls);
	free(p->obuf);
	free(l->host);
	free(l->unix_path);
	free((struct rlink_full *)l);
}

/*
 * A TLS session failed or was closed after its handshake. Before any
 * reply, that is how a server refusing our client certificate looks: TLS
 * 1.3 tells it only after the handshake, by an alert, which a reset can
 * overtake. Without the alert's own words, the hint is given; counted
 * with the handshake failures.
 */
static void tls_failed(struct rlink *l, const char *why)
{
	char msg[200];
	stats.redis_tls_failures++;
	if (!l->p->replied && !strstr(why, "alert"))
		snprintf(msg, sizeof(msg),
			 "TLS: %s right after the handshake (our client certificate refused?)",
			 why);
	else
		snprintf(msg, sizeof(msg), "TLS: %s", why);
	doom(l, 0, msg);
}

/*
 * The peer closed or reset l (a TLS session: see tls_failed). A Redis that
 * speaks only TLS takes a plaintext client's first command for a broken
 * handshake and resets it, unanswered: "Connection reset by peer" alone
 * would leave the operator guessing, so a link that never had a reply
 * says what may be wrong.
 */
static void lost(struct rlink *l, const char *why)
{
	char msg[200];
	if (l->p->ssl && !l->p->replied) {
		tls_failed(l, why);
	} else if (!l->p->ssl && !l->p->replied) {
		snprintf(msg, sizeof(msg),
			 "%s before any reply (does Redis want TLS? redis.tls in the "
			 "configuration)",
			 why);
		doom(l, 0, msg);
	} else {
		doom(l, 0, why);
	}
}

/* ---- output ---- */

static void want_write(struct rlink *l, int on)
{
	struct rlink_priv *p = l->p;
	if (on && !p->wev_added) {
		event_add(p->wev, NULL);
		p->wev_added = 1;
	} else if (!on && p->wev_added) {
		event_del(p->wev);
		p->wev_added = 0;
	}
}

static void do_read(struct rlink *l);

static void do_write(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	p->write_wants_read = 0;
	while (p->ooff < p->olen && !dead(l)) {
		size_t left = p->olen - p->ooff, n = 0;
		if (p->ssl) {
			char why[160];
			switch (tls_write(p->ssl, p->obuf + p->ooff, left, &n, why, sizeof(why))) {
			case TLS_IO_DONE:
				break;
			case TLS_IO_WANT_WRITE:
				want_write(l, 1);
				return;
			case TLS_IO_WANT_READ:
				p->write_wants_read = 1; /* the read event is armed while up */
				return;
			case TLS_IO_CLOSED:
				lost(l, "Server closed the connection");
				return;
			case TLS_IO_ERROR:
				tls_failed(l, why);
				return;
			}
		} else {
			ssize_t r = send(p->fd, p->obuf + p->ooff, left, MSG_NOSIGNAL);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK) {
					want_write(l, 1);
					return;
				}
				lost(l, strerror(errno));
				return;
			}
			n = (size_t)r;
		}
		p->ooff += n;
	}
	p->olen = p->ooff = 0;
	want_write(l, 0);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct rlink *l = arg;
	enter(l);
	l->p->flush_pending = 0;
	if (l->p->state == LS_UP && !dead(l))
		do_write(l);
	leave(l);
}

/* sticky: 0, a callback for one reply; 1, the subscription's for every
 * reply; QUEUE_UNOWED, none (see rlink_subscribed_ping) */
#define QUEUE_UNOWED 2
static int queue(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *cmd, size_t len,
		 int sticky)
{
	struct rlink_priv *p = l->p;
	if (dead(l) || p->closing || l->err)
		return -1;
	if (p->olen + len > p->ocap) {
		if (p->ooff > 0) { /* reclaim what was written */
			memmove(p->obuf, p->obuf + p->ooff, p->olen - p->ooff);
			p->olen -= p->ooff;
			p->ooff = 0;
		}
		if (p->olen + len > p->ocap) {
			size_t cap = p->ocap ? p->ocap : 4096;
			while (cap < p->olen + len)
				cap *= 2;
			char *b = realloc(p->obuf, cap);
			if (!b)
				return -1;
			p->obuf = b;
			p->ocap = cap;
		}
	}
	/* QUEUE_UNOWED: no callback of its own, a subscribed link's reply goes
	 * to the subscription's */
	if (sticky != QUEUE_UNOWED) {
		struct rcb *cb = calloc(1, sizeof(*cb));
		if (!cb)
			return -1;
		cb->fn = fn;
		cb->privdata = privdata;
		cb->sticky = sticky;
		if (p->tail)
			p->tail->next = cb;
		else
			p->head = cb;
		p->tail = cb;
		if (!sticky)
			p->owed++;
	}
	memcpy(p->obuf + p->olen, cmd, len);
	p->olen += len;
	/* written at the end of this loop turn, with whatever else comes */
	if (p->state == LS_UP && !p->flush_pending && !p->wev_added) {
		p->flush_pending = 1;
		event_active(p->flush_ev, EV_TIMEOUT, 1);
	}
	return 0;
}

int rlink_subscribed_ping(struct rlink *l)
{
	static const char ping[] = "*1\r\n$4\r\nPING\r\n";
	struct rlink_priv *p = l->p;
	if (!p->head || !p->head->sticky)
		return -1; /* not subscribed: the reply would have no callback */
	return queue(l, NULL, NULL, ping, sizeof(ping) - 1, QUEUE_UNOWED);
}

int rlink_formatted(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *cmd,
		    size_t len)
{
	return queue(l, fn, privdata, cmd, len, 0);
}

int rlink_command(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *fmt, ...)
{
	char *cmd = NULL;
	va_list ap;
	va_start(ap, fmt);
	int len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	if (len < 0)
		return -1;
	int r = queue(l, fn, privdata, cmd, (size_t)len, 0);
	redisFreeCommand(cmd);
	return r;
}

int rlink_command_argv(struct rlink *l, rlink_reply_fn *fn, void *privdata, int argc,
		       const char **argv, const size_t *argvlen)
{
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
	if (len < 0)
		return -1;
	int r = queue(l, fn, privdata, cmd, (size_t)len, 0);
	redisFreeCommand(cmd);
	return r;
}

int rlink_subscribe(struct rlink *l, rlink_reply_fn *fn, void *privdata, const char *channel)
{
	char *cmd = NULL;
	int len = redisFormatCommand(&cmd, "SUBSCRIBE %s", channel);
	if (len < 0)
		return -1;
	int r = queue(l, fn, privdata, cmd, (size_t)len, 1);
	redisFreeCommand(cmd);
	return r;
}

void rlink_flush(struct rlink *l)
{
	enter(l);
	if (l->p->state == LS_UP && !dead(l))
		do_write(l);
	leave(l);
}

/* ---- input ---- */

static void deliver(struct rlink *l, redisReply *reply)
{
	struct rlink_priv *p = l->p;
	struct rcb *cb = p->head;
	p->replied = 1;
	if (!cb) {
		/* nothing asked: Redis refusing a connection over maxclients says
		 * so unasked; anything else is a peer we do not understand */
		doom(l, 0,
		     reply->type == REDIS_REPLY_ERROR && reply->str ? reply->str
								    : "unexpected reply");
		reply_arena_free(p->reader, reply);
		return;
	}
	if (!cb->sticky) {
		p->head = cb->next;
		if (!p->head)
			p->tail = NULL;
		p->owed--;
	}
	if (cb->fn)
		cb->fn(l, reply, cb->privdata);
	if (!cb->sticky)
		free(cb);
	reply_arena_free(p->reader, reply);
	if (p->closing && p->owed == 0)
		doom(l, 1, "");
}

/* Feeds n bytes to the reader and hands out every whole reply. */
static void feed(struct rlink *l, const char *buf, size_t n)
{
	struct rlink_priv *p = l->p;
	if (redisReaderFeed(p->reader, buf, n) != REDIS_OK) {
		doom(l, 0, p->reader->errstr[0] ? p->reader->errstr : "protocol error");
		return;
	}
	while (!dead(l)) {
		void *reply = NULL;
		if (redisReaderGetReply(p->reader, &reply) != REDIS_OK) {
			doom(l, 0, p->reader->errstr[0] ? p->reader->errstr : "protocol error");
			return;
		}
		if (!reply)
			return;
		deliver(l, reply);
	}
}

static void do_read(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	char buf[READ_CHUNK];
	p->read_wants_write = 0;
	if (!p->ssl) {
		/* one read a turn, as hiredis does: the event fires again for more */
		ssize_t r;
		do
			r = recv(p->fd, buf, sizeof(buf), 0);
		while (r < 0 && errno == EINTR);
		if (r > 0)
			feed(l, buf, (size_t)r);
		else if (r == 0)
			lost(l, "Server closed the connection");
		else if (errno != EAGAIN && errno != EWOULDBLOCK)
			lost(l, strerror(errno));
		return;
	}
	/* TLS: drain what OpenSSL holds, or no readable event tells of it */
	while (!dead(l)) {
		size_t n = 0;
		char why[160];
		switch (tls_read(p->ssl, buf, sizeof(buf), &n, why, sizeof(why))) {
		case TLS_IO_DONE:
			feed(l, buf, n);
			break;
		case TLS_IO_WANT_READ:
			return;
		case TLS_IO_WANT_WRITE:
			p->read_wants_write = 1;
			want_write(l, 1);
			return;
		case TLS_IO_CLOSED:
			lost(l, "Server closed the connection");
			return;
		case TLS_IO_ERROR:
			tls_failed(l, why);
			return;
		}
	}
}

/* ---- connecting ---- */

static void became_up(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	p->state = LS_UP;
	event_add(p->rev, NULL);
	want_write(l, 0);
	if (p->on_connect)
		p->on_connect(l, 1);
	if (!dead(l) && p->olen > p->ooff)
		do_write(l); /* what was queued while connecting */
}

static void handshake(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	char why[160], msg[200];
	switch (tls_handshake(p->ssl, why, sizeof(why))) {
	case TLS_IO_DONE:
		became_up(l);
		return;
	case TLS_IO_WANT_READ:
		want_write(l, 0);
		event_add(p->rev, NULL);
		return;
	case TLS_IO_WANT_WRITE:
		want_write(l, 1);
		return;
	case TLS_IO_CLOSED:
	case TLS_IO_ERROR:
		stats.redis_tls_failures++;
		snprintf(msg, sizeof(msg), "TLS handshake: %s", why);
		fail_connect(l, msg);
		return;
	}
}

static void connected(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == EINPROGRESS)
		return;
	if (err) {
		fail_connect(l, strerror(err));
		return;
	}
	if (!p->tls) {
		became_up(l);
		return;
	}
	char why[160];
	p->ssl = tls_client_session(p->tls, p->fd, l->host, why, sizeof(why));
	if (!p->ssl) {
		char msg[200];
		snprintf(msg, sizeof(msg), "TLS: %s", why);
		fail_connect(l, msg);
		return;
	}
	p->state = LS_HANDSHAKE;
	handshake(l);
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct rlink *l = arg;
	struct rlink_priv *p = l->p;
	enter(l);
	if (p->state == LS_HANDSHAKE) {
		handshake(l);
	} else if (p->state == LS_UP) {
		if (p->write_wants_read)
			do_write(l);
		if (!dead(l))
			do_read(l);
	}
	leave(l);
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct rlink *l = arg;
	struct rlink_priv *p = l->p;
	enter(l);
	if (p->state == LS_CONNECTING) {
		connected(l);
	} else if (p->state == LS_HANDSHAKE) {
		handshake(l);
	} else {
		if (p->read_wants_write) {
			want_write(l, 0);
			do_read(l);
		}
		if (!dead(l))
			do_write(l);
	}
	leave(l);
}

/* Opens a nonblocking socket and starts connecting it; -1 with l->errstr. */
static int start(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	if (l->unix_path) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(l->unix_path) >= sizeof(sa.sun_path)) {
			snprintf(l->errstr, sizeof(l->errstr), "unix socket path too long");
			return -1;
		}
		strcpy(sa.sun_path, l->unix_path);
		p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (p->fd < 0 || (connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
				  errno != EINPROGRESS)) {
			snprintf(l->errstr, sizeof(l->errstr), "%s", strerror(errno));
			return -1;
		}
		return 0;
	}
	char port[16];
	snprintf(port, sizeof(port), "%d", l->port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(l->host, port, &hints, &res);
	if (rc != 0) {
		snprintf(l->errstr, sizeof(l->errstr), "%s", gai_strerror(rc));
		return -1;
	}
	int saved = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
			p->fd = fd;
			break;
		}
		saved = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (p->fd < 0) {
		snprintf(l->errstr, sizeof(l->errstr), "%s",
			 strerror(saved ? saved : ECONNREFUSED));
		return -1;
	}
	return 0;
}

struct rlink *rlink_connect(struct event_base *base, const char *host, int port,
			    const char *unix_path, struct tls_client *tls)
{
	struct rlink_full *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	struct rlink *l = &f->pub;
	struct rlink_priv *p = &f->priv;
	l->p = p;
	p->base = base;
	p->fd = -1;
	l->port = port;
	l->host = host ? strdup(host) : NULL;
	l->unix_path = unix_path ? strdup(unix_path) : NULL;
	p->reader = reply_arena_reader_new();
	p->flush_ev = event_new(base, -1, 0, flush_cb, l);
	if ((host && !l->host) || (unix_path && !l->unix_path) || !p->reader || !p->flush_ev) {
		p->doomed_ok = 1;
		destroy(l);
		return NULL;
	}
	p->tls = tls_client_ref(tls);
	if (start(l) < 0) {
		l->err = 1;
		return l;
	}
	p->rev = event_new(base, p->fd, EV_READ | EV_PERSIST, read_cb, l);
	p->wev = event_new(base, p->fd, EV_WRITE | EV_PERSIST, write_cb, l);
	if (!p->rev || !p->wev) {
		l->err = 1;
		snprintf(l->errstr, sizeof(l->errstr), "out of memory");
		return l;
	}
	p->state = LS_CONNECTING;
	want_write(l, 1); /* writability tells that the connect finished */
	return l;
}

void rlink_set_callbacks(struct rlink *l, rlink_connect_fn *on_connect,
			 rlink_disconnect_fn *on_disconnect)
{
	l->p->on_connect = on_connect;
	l->p->on_disconnect = on_disconnect;
}

void rlink_set_priority(struct rlink *l, int prio)
{
	if (l->p->rev)
		event_priority_set(l->p->rev, prio);
}

void rlink_disconnect(struct rlink *l)
{
	struct rlink_priv *p = l->p;
	if (p->destroying)
		return;
	enter(l);
	p->closing = 1;
	if (p->owed == 0)
		doom(l, 1, "");
	leave(l);
}

void rlink_free(struct rlink *l)
{
	if (l->p->destroying)
		return;
	enter(l);
	doom(l, 1, "");
	leave(l);
}

int rlink_handshaking(const struct rlink *l)
{
	return l->p->state == LS_HANDSHAKE && !dead(l);
}

int rlink_up(const struct rlink *l)
{
	return l->p->state == LS_UP && !dead(l);
}

size_t rlink_output(const struct rlink *l)
{
	return l->p->olen - l->p->ooff;
}
