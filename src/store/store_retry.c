/* store_retry.c - retry backoff within a deadline, on a libevent timer (see store_retry.h). */
#include "store_retry.h"

#include <event2/event.h>

#include "clock.h"

int store_retry_delay_ms(int n, int min_ms, int max_ms, uint64_t deadline_us)
{
	int ms = min_ms;
	for (int i = 0; i < n && ms < max_ms; i++)
		ms *= 2;
	if (ms > max_ms)
		ms = max_ms;
	if (clock_mono_us() + (uint64_t)ms * 1000u >= deadline_us)
		return -1;
	return ms;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct store_retry *r = arg;
	r->fn(r->arg);
}

int store_retry_after(struct store_retry *r, struct event_base *base, int ms)
{
	if (!r->timer)
		r->timer = evtimer_new(base, retry_cb, r);
	if (!r->timer)
		return -1;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	evtimer_add(r->timer, &tv);
	return 0;
}

void store_retry_free(struct store_retry *r)
{
	if (r->timer)
		event_free(r->timer);
	r->timer = NULL;
}
