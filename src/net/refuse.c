/*
 * refuse.c - clients refused at max_clients, answered in their protocol.
 *
 * The answer is the port's front end's (frontend.c's refuse: an in-order
 * protocol's own too-many-clients error reply, proto_refusal), and
 * a port whose front end detects another by the first byte (a line port
 * also speaks RESP) waits for that byte (at most REFUSE_WAIT_MS; a client
 * that says nothing gets the port's own answer). A gRPC client's call only fails clearly when its
 * stream is answered (a GOAWAY alone, grpcio takes for a server going away
 * and reconnects at once, again and again): the server preface goes out at
 * once, the first HEADERS frame is waited for and answered UNAVAILABLE. An
 * HTTP client is answered at once.
 *
 * After the answer the socket is shut for writing and what the client sends
 * is read and dropped until it closes or REFUSE_LINGER_MS pass: closing a
 * socket with unread input sends an RST, which can destroy the answer
 * before the client reads it (an HTTP request is still unread then).
 *
 * At most REFUSE_MAX refusals at once (each holds a descriptor), in slots
 * made up front whose events are re-aimed at each new socket: nothing is
 * allocated per refusal and no event is freed in its own callback. Past
 * that, the answer is sent at once if a protocol allows it without reading
 * (line, HTTP) and the socket closed; a gRPC client just sees the close
 * (a failed connection, which grpcio retries with backoff).
 */
#include "refuse.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "frontend.h"
#include "proto.h"
#include "refuse_msg.h"

#define REFUSE_MAX 64
#define REFUSE_WAIT_MS 1000
#define REFUSE_LINGER_MS 1000
/* reads per wakeup while lingering: a client sending fast waits its turn */
#define REFUSE_DRAIN_READS 16

enum slot_state { SLOT_FREE, SLOT_WAIT, SLOT_LINGER };

struct slot {
	enum slot_state state;
	evutil_socket_t fd;
	const struct frontend *fe; /* the port's */
	struct refuse_h2_scan h2;
	struct event *rev;   /* aimed at fd by each refuse_start */
	struct event *timer; /* the wait, then the linger */
};

struct refuse {
	struct event_base *base;
	struct slot slots[REFUSE_MAX];
};

static void arm(struct slot *s, int ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	evtimer_add(s->timer, &tv);
}

static void finish(struct slot *s)
{
	event_del(s->rev);
	event_del(s->timer);
	evutil_closesocket(s->fd);
	s->fd = -1;
	s->state = SLOT_FREE;
}

/* A fresh socket's buffer takes a reply this short whole; anything else
 * (the client gone already) ends the refusal. */
static int send_all(struct slot *s, const void *p, size_t len)
{
	ssize_t w = send(s->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w != (ssize_t)len) {
		finish(s);
		return -1;
	}
	return 0;
}

static void answer(struct slot *s, const void *p, size_t len)
{
	if (send_all(s, p, len) < 0)
		return;
	shutdown(s->fd, SHUT_WR);
	s->state = SLOT_LINGER;
	arm(s, REFUSE_LINGER_MS);
}

/* Room for any in-order protocol's refusal (its reply_max). */
#define REPLY_ROOM 4096

static void answer_reply(struct slot *s, const struct frontend *fe)
{
	char buf[REPLY_ROOM];
	answer(s, buf, proto_refusal(fe->proto, buf));
}

static void answer_h2(struct slot *s, uint32_t stream)
{
	uint8_t out[REFUSE_H2_GOODBYE_MAX];
	answer(s, out, refuse_h2_goodbye(out, stream, s->h2.settings));
}

/* Lingering: the client's bytes are dropped until it closes. */
static void drain(struct slot *s)
{
	char buf[4096];
	for (int i = 0; i < REFUSE_DRAIN_READS; i++) {
		ssize_t r = recv(s->fd, buf, sizeof(buf), 0);
		if (r > 0)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		finish(s); /* EOF, or the connection is gone */
		return;
	}
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct slot *s = arg;
	if (s->state == SLOT_LINGER) {
		drain(s);
		return;
	}
	uint8_t buf[4096];
	ssize_t r = recv(s->fd, buf, sizeof(buf), 0);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (r <= 0) { /* gone before it said anything */
		finish(s);
		return;
	}
	if (s->fe->refuse == FRONTEND_REFUSE_REPLY) {
		answer_reply(s, s->fe->detect ? s->fe->detect(buf[0]) : s->fe);
		return;
	}
	switch (refuse_h2_feed(&s->h2, buf, (size_t)r)) {
	case REFUSE_H2_MORE:
		return;
	case REFUSE_H2_STREAM:
		answer_h2(s, s->h2.stream);
		return;
	case REFUSE_H2_NONE:
		answer_h2(s, 0);
		return;
	}
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct slot *s = arg;
	if (s->state == SLOT_LINGER) {
		finish(s); /* unread input may RST now: the client had its second */
		return;
	}
	/* said nothing (or no whole stream) in time */
	if (s->fe->refuse == FRONTEND_REFUSE_H2)
		answer_h2(s, 0);
	else
		answer_reply(s, s->fe);
}

static struct slot *free_slot(struct refuse *rf)
{
	for (size_t i = 0; i < REFUSE_MAX; i++)
		if (rf->slots[i].state == SLOT_FREE)
			return &rf->slots[i];
	return NULL;
}

/* No slot: what can be said without reading, then the close. */
static void refuse_now(evutil_socket_t fd, const struct frontend *fe)
{
	if (fe->refuse == FRONTEND_REFUSE_REPLY) {
		char text[REPLY_ROOM];
		size_t len = proto_refusal(fe->proto, text);
		ssize_t w = send(fd, text, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		(void)w;
	}
	evutil_closesocket(fd);
}

void refuse_start(struct refuse *rf, evutil_socket_t fd, enum config_protocol protocol)
{
	const struct frontend *fe = frontend_of(protocol);
	struct slot *s = free_slot(rf);
	if (!s || evutil_make_socket_nonblocking(fd) < 0 ||
	    event_assign(s->rev, rf->base, fd, EV_READ | EV_PERSIST, read_cb, s) < 0 ||
	    event_add(s->rev, NULL) < 0) {
		refuse_now(fd, fe);
		return;
	}
	s->fd = fd;
	s->fe = fe;
	s->h2 = (struct refuse_h2_scan){0};
	s->state = SLOT_WAIT;
	arm(s, REFUSE_WAIT_MS);
	if (fe->refuse == FRONTEND_REFUSE_H2)
		send_all(s, refuse_h2_settings, sizeof(refuse_h2_settings));
	else if (!fe->detect)
		answer_reply(s, fe); /* nothing to wait for */
}

struct refuse *refuse_new(struct event_base *base)
{
	struct refuse *rf = calloc(1, sizeof(*rf));
	if (!rf)
		return NULL;
	rf->base = base;
	for (size_t i = 0; i < REFUSE_MAX; i++) {
		struct slot *s = &rf->slots[i];
		s->fd = -1;
		s->rev = event_new(base, -1, EV_READ | EV_PERSIST, read_cb, s);
		s->timer = evtimer_new(base, timer_cb, s);
		if (!s->rev || !s->timer) {
			refuse_free(rf);
			return NULL;
		}
	}
	return rf;
}

void refuse_close_all(struct refuse *rf)
{
	for (size_t i = 0; i < REFUSE_MAX; i++)
		if (rf->slots[i].state != SLOT_FREE)
			finish(&rf->slots[i]);
}

void refuse_free(struct refuse *rf)
{
	if (!rf)
		return;
	refuse_close_all(rf);
	for (size_t i = 0; i < REFUSE_MAX; i++) {
		if (rf->slots[i].rev)
			event_free(rf->slots[i].rev);
		if (rf->slots[i].timer)
			event_free(rf->slots[i].timer);
	}
	free(rf);
}
