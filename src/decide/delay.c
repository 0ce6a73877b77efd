/*
 * delay.c - requests answered when their reserved slot comes (see
 * delay.h). Each is one libevent timer: waiting costs no CPU, and the
 * answer goes through the slot's own completion like any other.
 */
#include "delay.h"

#include <event2/event.h>
#include <stdlib.h>

#include "decide.h"
#include "list.h"
#include "log.h"
#include "stats.h"

struct held {
	struct list_link link; /* d->list */
	struct delays *d;
	struct event *ev;
	struct cmd_slot *slot;
};

struct delays {
	struct event_base *base;
	struct list list; /* of struct held */
	unsigned waiting, claimed;
	int flushed; /* SIGTERM: whatever is delayed from now on is answered at once */
};

struct delays *delays_new(struct event_base *base)
{
	struct delays *d = calloc(1, sizeof(*d));
	if (d)
		d->base = base;
	return d;
}

static void answer(struct held *h)
{
	struct delays *d = h->d;
	list_unlink(&h->link);
	d->waiting--;
	d->claimed--;
	stats.delayed_waiting = d->waiting;
	struct cmd_slot *slot = h->slot;
	event_free(h->ev);
	free(h);
	decide_complete(slot);
}

static void fire(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	answer(arg);
}

int delays_claim(struct delays *d, int64_t max)
{
	if (!d || d->claimed >= max)
		return 0;
	d->claimed++;
	return 1;
}

void delays_unclaim(struct delays *d)
{
	d->claimed--;
}

void delays_hold(struct delays *d, struct cmd_slot *slot, int64_t wait_ms)
{
	if (d->flushed) {
		/* draining: its slot is reserved, and the drain ends sooner
		 * than a wait may (delay.max up to 60 s) */
		d->claimed--;
		decide_complete(slot);
		return;
	}
	struct held *h = calloc(1, sizeof(*h));
	if (h)
		h->ev = evtimer_new(d->base, fire, h);
	if (!h || !h->ev) {
		/* its slot is reserved: answered now rather than lost */
		log_error("out of memory delaying a request: answered at once");
		free(h);
		d->claimed--;
		decide_complete(slot);
		return;
	}
	h->d = d;
	h->slot = slot;
	list_push(&d->list, &h->link);
	d->waiting++;
	stats.delayed_waiting = d->waiting;
	stats.delayed++;
	struct timeval tv = {(time_t)(wait_ms / 1000), (suseconds_t)(wait_ms % 1000 * 1000)};
	evtimer_add(h->ev, &tv);
}

void delays_flush(struct delays *d)
{
	if (d)
		d->flushed = 1;
	if (d && d->waiting)
		log_info("answering %u delayed requests now", d->waiting);
	while (d && !list_empty(&d->list))
		answer(list_entry(d->list.first, struct held, link));
}

void delays_free(struct delays *d)
{
	delays_flush(d);
	free(d);
}

unsigned delays_waiting(const struct delays *d)
{
	return d ? d->waiting : 0;
}
