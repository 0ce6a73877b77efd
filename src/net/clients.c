/* clients.c - the client registry: admission, end-of-turn writes and frees, draining. */
#include "clients.h"

#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "refuse.h"
#include "stats.h"

struct clients {
	struct conn_ctx ctx; /* first: the callbacks get its address */
	struct conn *head;   /* list through conn_link */
	size_t n;
	struct conn **reap; /* closed, to free */
	size_t nreap, capreap;
	struct conn **dirty; /* replies ready, to write */
	size_t ndirty, capdirty;
	struct event *turn_ev; /* end of loop turn: write, then free */
	int draining;
	void (*drained)(void *);
	void *drained_arg;
	struct event *drained_ev;
	struct refuse *refuse; /* those beyond max_clients, being told so */
};

void clients_set_config(struct clients *cl, struct config *cfg)
{
	cl->ctx.cfg = cfg;
}

size_t clients_count(const struct clients *cl)
{
	return cl->n;
}

static void added(struct clients *cl, struct conn *c)
{
	struct conn_link *l = conn_link(c);
	l->prev = NULL;
	l->next = cl->head;
	if (cl->head)
		conn_link(cl->head)->prev = c;
	cl->head = c;
	cl->n++;
	stats.clients_accepted++;
}

static void removed(struct clients *cl, struct conn *c)
{
	struct conn_link *l = conn_link(c);
	if (l->prev)
		conn_link(l->prev)->next = l->next;
	else
		cl->head = l->next;
	if (l->next)
		conn_link(l->next)->prev = l->prev;
	l->prev = l->next = NULL;
	cl->n--;
	if (cl->draining && cl->n == 0)
		event_active(cl->drained_ev, EV_TIMEOUT, 0);
}

/* Appends c to a list that only grows between two end-of-turn events. */
static int list_push(struct conn ***list, size_t *n, size_t *cap, struct conn *c)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		struct conn **l = realloc(*list, ncap * sizeof(**list));
		if (!l)
			return -1;
		*list = l;
		*cap = ncap;
	}
	(*list)[(*n)++] = c;
	return 0;
}

/* conn.c calls closed() and ready() through struct conn_ctx. */
static void closed(struct conn_ctx *ctx, struct conn *c)
{
	struct clients *cl = (struct clients *)ctx;
	removed(cl, c);
	/* On failure leak one connection rather than free it under its own callback. */
	if (list_push(&cl->reap, &cl->nreap, &cl->capreap, c) < 0)
		log_error("out of memory while closing a client");
	event_active(cl->turn_ev, EV_TIMEOUT, 0);
}

static void ready(struct conn_ctx *ctx, struct conn *c)
{
	struct clients *cl = (struct clients *)ctx;
	if (list_push(&cl->dirty, &cl->ndirty, &cl->capdirty, c) < 0) {
		conn_flush(c); /* out of memory: write now instead */
		return;
	}
	event_active(cl->turn_ev, EV_TIMEOUT, 0);
}

/* Writes first (a connection closed meanwhile is skipped by conn_flush),
 * then frees: nothing on the dirty list is freed before it is looked at. */
static void turn_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct clients *cl = arg;
	for (size_t i = 0; i < cl->ndirty; i++)
		conn_flush(cl->dirty[i]); /* may close: adds to reap */
	cl->ndirty = 0;
	for (size_t i = 0; i < cl->nreap; i++)
		conn_reap(cl->reap[i]);
	cl->nreap = 0;
}

static void drained_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct clients *cl = arg;
	if (cl->drained)
		cl->drained(cl->drained_arg);
}

void clients_accept(struct clients *cl, evutil_socket_t fd, const struct sockaddr *sa,
		    const struct conn_port *port)
{
	if (cl->n >= (size_t)cl->ctx.cfg->max_clients) {
		/* A TLS listener's client would read the plain answer as a
		 * broken handshake; it is closed, which it reports as such
		 * (telling it in its protocol would take a handshake each). */
		if (port->tls)
			evutil_closesocket(fd);
		else
			refuse_start(cl->refuse, fd, port->protocol);
		unsigned long long refused = ++stats.errors[CMD_ERR_TOO_MANY_CLIENTS];
		if ((refused & (refused - 1)) == 0) /* 1, 2, 4, ...: not a log flood */
			log_warn("max_clients (%d) reached; %llu %s refused so far",
				 cl->ctx.cfg->max_clients, refused,
				 log_plural(refused, "connection", "connections"));
		return;
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	struct conn *c = conn_new(&cl->ctx, fd, sa, port);
	if (c)
		added(cl, c);
}

struct clients *clients_new(struct event_base *base, const struct cmd_env *env, struct config *cfg)
{
	struct clients *cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	cl->ctx.base = base;
	cl->ctx.cfg = cfg;
	cl->ctx.env = env;
	cl->ctx.closed = closed;
	cl->ctx.ready = ready;
	cl->turn_ev = event_new(base, -1, 0, turn_cb, cl);
	cl->drained_ev = event_new(base, -1, 0, drained_cb, cl);
	cl->refuse = refuse_new(base);
	if (!cl->turn_ev || !cl->drained_ev || !cl->refuse) {
		clients_free(cl);
		return NULL;
	}
	return cl;
}

void clients_drain(struct clients *cl, void (*done)(void *arg), void *arg)
{
	cl->draining = 1;
	cl->drained = done;
	cl->drained_arg = arg;
	refuse_close_all(cl->refuse);
	struct conn *c = cl->head;
	while (c) {
		struct conn *next = conn_link(c)->next;
		conn_drain(c);
		c = next;
	}
	if (cl->n == 0)
		event_active(cl->drained_ev, EV_TIMEOUT, 0);
}

void clients_free(struct clients *cl)
{
	if (!cl)
		return;
	while (cl->head)
		conn_close(cl->head);
	turn_cb(-1, 0, cl);
	refuse_free(cl->refuse);
	free(cl->reap);
	free(cl->dirty);
	if (cl->turn_ev)
		event_free(cl->turn_ev);
	if (cl->drained_ev)
		event_free(cl->drained_ev);
	free(cl);
}
