/*
 * pipeline.c - the in-order session: splits what a client sends into
 * requests (its front end's struct proto), runs each, and gives the replies
 * back strictly in request order even though the store answers out of
 * order.
 *
 *   head                                    tail
 *   [done: "ALLOWED.."] -> [waiting] -> [done: "ERR.."]
 *     ^ written as soon as everything before it is done
 *
 * At most MAX_PENDING requests are owed at once: past that the transport
 * (conn.c) stops reading until half of them are written.
 *
 * A front end that binds leases (line, RESP) keeps the ids of the leases
 * ACQUIREd on the connection and not RELEASEd on it: when the connection
 * goes, clean or not, they are released (leases.h), so a client that dies
 * holds nothing.
 */
#include "pipeline.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "config.h"
#include "frontend_types.h"
#include "leases.h"
#include "log.h"
#include "proto.h"
#include "trace.h"

/* Requests parsed and not yet written back. */
#define MAX_PENDING 1024
/* Leases one connection may hold (each id kept until released). */
#define MAX_CONN_LEASES 4096

struct pending {
	struct cmd_slot slot; /* first: complete() gets this pointer */
	struct pending *next;
	struct pipeline *pl;
	int done;
	int acquire; /* an ACQUIRE on a front end that binds leases */
	/* a RELEASE of a lease of the connection's: kept again unless it
	 * succeeded, or the lease was gone anyway (malloc'd; NULL: none) */
	char *release;
};

struct pipeline {
	struct session_host host;
	/* How requests are framed, parsed and answered (fe->proto); the
	 * listener's row until the first byte says (detect) */
	const struct frontend *fe;
	int detected;
	void *state; /* the proto's per-connection state (fe->state_size), or NULL */
	struct pending *head, *tail;
	unsigned npending; /* queued, done or not */
	unsigned inflight; /* not done yet */
	int gone;	   /* the connection is gone: freed with the last answer */
	/* leases taken on this connection and not released on it (their ids) */
	char **leases;
	size_t nleases, capleases;
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

static void pipeline_pool_free(void)
{
	while (pool) {
		struct pending *p = pool;
		pool = p->next;
		free(p);
	}
	npool = 0;
}

static void destroy(struct pipeline *pl)
{
	struct pending *p = pl->head;
	while (p) {
		struct pending *next = p->next;
		pending_release(p);
		p = next;
	}
	free(pl->leases);
	free(pl);
}

/* The connection is gone: every lease it holds goes back. */
static void release_leases(struct pipeline *pl)
{
	for (size_t i = 0; i < pl->nleases; i++) {
		leases_release_detached(*pl->host.cfg, pl->host.env, pl->leases[i],
					strlen(pl->leases[i]));
		free(pl->leases[i]);
	}
	pl->nleases = 0;
}

/* A lease ACQUIREd here: kept, or released at once when the connection
 * went while the store answered (or its id cannot be kept). */
static void keep_lease(struct pipeline *pl, const char *text, size_t len)
{
	char *id = NULL;
	if (!pl->gone && pl->nleases == pl->capleases) {
		size_t cap = pl->capleases ? pl->capleases * 2 : 8;
		char **v = realloc(pl->leases, cap * sizeof(*v));
		if (v) {
			pl->leases = v;
			pl->capleases = cap;
		}
	}
	if (!pl->gone && pl->nleases < pl->capleases && (id = malloc(len + 1))) {
		memcpy(id, text, len);
		id[len] = '\0';
		pl->leases[pl->nleases++] = id;
		return;
	}
	if (!pl->gone)
		log_error("out of memory keeping a lease's id: released at once");
	leases_release_detached(*pl->host.cfg, pl->host.env, text, len);
}

/* RELEASE on the connection: the lease is no longer its to give back
 * (its id, to keep again should the RELEASE fail; NULL when it was not
 * the connection's). */
static char *forget_lease(struct pipeline *pl, const char *id, size_t len)
{
	for (size_t i = 0; i < pl->nleases; i++)
		if (strlen(pl->leases[i]) == len && memcmp(pl->leases[i], id, len) == 0) {
			char *kept = pl->leases[i];
			pl->leases[i] = pl->leases[--pl->nleases];
			return kept;
		}
	return NULL;
}

static void slot_complete(struct cmd_slot *slot)
{
	struct pending *p = (struct pending *)slot;
	struct pipeline *pl = p->pl;
	p->done = 1;
	pl->inflight--;
	if (p->acquire && slot->res.kind == CMD_REPLY_LEASE && slot->res.item)
		keep_lease(pl, slot->res.item->text, slot->res.item->ulen);
	if (p->release) {
		/* the store could not say (unavailable, a timeout): the lease
		 * may still be held, and the close is to give it back */
		if (slot->res.kind == CMD_REPLY_ERROR && slot->res.error != CMD_ERR_NO_LEASE) {
			keep_lease(pl, p->release, strlen(p->release));
		}
		free(p->release);
		p->release = NULL;
	}
	if (pl->gone) {
		if (pl->inflight == 0)
			destroy(pl);
		return;
	}
	/* Written at the end of the loop turn, with every other reply that
	 * becomes ready in it: one send() for a whole batch. */
	if (p == pl->head)
		pl->host.ready(pl->host.arg);
}

static struct pending *pending_new(struct pipeline *pl)
{
	struct pending *p = pending_alloc();
	if (!p)
		return NULL;
	p->next = NULL;
	p->pl = pl;
	p->done = 0;
	p->acquire = 0;
	p->release = NULL;
	cmd_slot_init(&p->slot, pl->fe->front, pl->fe->proto->names_policy, slot_complete);
	if (pl->tail)
		pl->tail->next = p;
	else
		pl->head = p;
	pl->tail = p;
	pl->npending++;
	pl->inflight++;
	return p;
}

static void *pipeline_new(const struct frontend *fe, const struct session_host *host,
			  const struct conn_port *port, const struct sockaddr *sa)
{
	struct pipeline *pl = calloc(1, sizeof(*pl) + fe->state_size);
	if (!pl)
		return NULL;
	pl->host = *host;
	pl->fe = fe;
	pl->detected = fe->detect == NULL;
	if (fe->state_size) {
		pl->state = pl + 1;
		if (fe->state_init)
			fe->state_init(pl->state, port, sa);
	}
	return pl;
}

static void pipeline_input(void *s, struct evbuffer *in, int eof, struct session_step *st)
{
	struct pipeline *pl = s;
	struct config *cfg = *pl->host.cfg;
	size_t max_line = cfg->max_line;
	/* when these bytes came, for a traced request's parse span (trace.h) */
	uint64_t read_us = trace_on() ? clock_mono_us() : 0;

	while (!st->close) {
		if (pl->npending >= MAX_PENDING) {
			st->pause = 1;
			break;
		}
		size_t len = evbuffer_get_length(in);
		if (len == 0) {
			st->close |= eof;
			break;
		}
		if (!pl->detected) {
			const char *first = (const char *)evbuffer_pullup(in, 1);
			pl->fe = pl->fe->detect((uint8_t)first[0]);
			pl->detected = 1;
		}
		const struct proto *proto = pl->fe->proto;
		size_t window = proto_window(proto, max_line);
		size_t want = len < window ? len : window;
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
		struct proto_parsed got;
		got.used = 0;
		got.tag = 0;
		got.close_after = 0;
		enum proto_step step = proto->parse(data, want, max_line, pl->state, &got);
		if (step == PROTO_NEED_MORE) {
			st->close |= eof; /* a partial last request is not a request */
			break;
		}
		st->progress = 1;
		if (step == PROTO_SKIP) {
			evbuffer_drain(in, got.used);
			continue;
		}
		struct pending *p = pending_new(pl);
		if (!p) {
			log_error("out of memory; dropping client");
			st->fail = 1;
			return;
		}
		p->slot.res.tag = got.tag;
		p->slot.res.close_after = got.close_after;
		if (got.close_after)
			st->close = 1; /* nothing after it is read */
		switch (step) {
		case PROTO_FATAL:
			st->close = 1;
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
				st->close = 1;
			if (pl->fe->binds_leases && got.req.verb == CMD_RELEASE)
				p->release =
					forget_lease(pl, got.req.lease_id, got.req.lease_id_len);
			if (pl->fe->binds_leases && got.req.verb == CMD_ACQUIRE) {
				if (pl->nleases >= MAX_CONN_LEASES) {
					cmd_reply_error(
						&p->slot, CMD_ERR_FORBIDDEN,
						"this connection holds 4096 leases: release "
						"some first");
					break;
				}
				p->acquire = 1;
			}
			got.req.received_us = read_us;
			cmd_execute(cfg, pl->host.env, &got.req, pl->host.caller, &p->slot);
			if (p->slot.res.close_after)
				st->close = 1; /* too many failed AUTHs */
			/* answered already (p stays queued until written) */
			st->refused |= p->done && p->slot.res.refused;
			break;
		}
		if (step == PROTO_FATAL)
			break;
		/* The store copied what it needs; the request's bytes can go. */
		evbuffer_drain(in, got.used);
	}
}

static ssize_t pipeline_next(void *s, char *room, size_t len, const char **data,
			     struct session_step *st)
{
	struct pipeline *pl = s;
	struct pending *p = pl->head;
	if (!p || !p->done)
		return 0;
	const struct proto *proto = pl->fe->proto;
	if (len < proto->reply_max)
		return SESSION_NO_ROOM;
	size_t n = proto->format(room, &p->slot.res, pl->state);
	if (p->slot.res.kind == CMD_REPLY_BYE || p->slot.res.close_after)
		st->close = 1;
	pl->head = p->next;
	if (!pl->head)
		pl->tail = NULL;
	pl->npending--;
	pending_release(p);
	*data = room;
	return (ssize_t)n;
}

static void pipeline_sent(void *s, struct session_step *st)
{
	(void)s;
	(void)st;
}

static unsigned pipeline_owes(const void *s)
{
	return ((const struct pipeline *)s)->npending;
}

static unsigned pipeline_inflight(const void *s)
{
	return ((const struct pipeline *)s)->inflight;
}

static int pipeline_partial(const void *s, size_t unread)
{
	(void)s;
	return unread > 0;
}

static int pipeline_may_resume(const void *s)
{
	return ((const struct pipeline *)s)->npending < MAX_PENDING / 2;
}

static int pipeline_has_output(const void *s)
{
	const struct pipeline *pl = s;
	return pl->head == NULL || pl->head->done;
}

static int pipeline_timeout(void *s)
{
	struct pipeline *pl = s;
	struct pending *p = pending_new(pl);
	if (!p)
		return -1;
	log_debug("closing a client whose request was not whole within request_timeout");
	p->slot.res.tag = 0;
	p->slot.res.close_after = 1;
	cmd_reply_error(&p->slot, CMD_ERR_REQUEST_TIMEOUT,
			"the request was not complete within request_timeout");
	return 1;
}

/* idle_timeout: the protocol's word for it (proto.idle_local), if any. */
static int pipeline_idle(void *s)
{
	struct pipeline *pl = s;
	int local = pl->fe->proto->idle_local;
	if (!local)
		return 0;
	struct pending *p = pending_new(pl);
	if (!p)
		return -1;
	p->slot.res.tag = 0;
	p->slot.res.close_after = 1;
	cmd_reply_local(&p->slot, local);
	return 1;
}

static void pipeline_free(void *s)
{
	struct pipeline *pl = s;
	pl->gone = 1;
	release_leases(pl);
	if (pl->inflight == 0)
		destroy(pl);
	/* else: the last store answer frees it (slot_complete) */
}

const struct session_ops pipeline_ops = {
	.new = pipeline_new,
	.input = pipeline_input,
	.next = pipeline_next,
	.sent = pipeline_sent,
	.owes = pipeline_owes,
	.inflight = pipeline_inflight,
	.partial = pipeline_partial,
	.may_resume = pipeline_may_resume,
	.has_output = pipeline_has_output,
	.timeout = pipeline_timeout,
	.goodbye = NULL,
	.idle = pipeline_idle,
	.free = pipeline_free,
	.pool_free = pipeline_pool_free,
};
