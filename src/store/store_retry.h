/*
 * store_retry.h - trying a decision again later, inside its deadline: the
 * backoff and timer shared by the stores made of others (store_cluster.c,
 * store_sentinel.c).
 */
#ifndef RL_STORE_RETRY_H
#define RL_STORE_RETRY_H

#include <stdint.h>

struct event;
struct event_base;

/* Calls fn(arg) from the loop after each store_retry_after; zero it first. */
struct store_retry {
	struct event *timer; /* made on first use */
	void (*fn)(void *arg);
	void *arg;
};

/*
 * The wait before a retry: min_ms doubled n times, at most max_ms; -1 when
 * it would not end before deadline_us (clock_mono_us): answer now instead.
 */
int store_retry_delay_ms(int n, int min_ms, int max_ms, uint64_t deadline_us);

/* Arms r to call r->fn(r->arg) in ms. 0, or -1 when no timer could be made. */
int store_retry_after(struct store_retry *r, struct event_base *base, int ms);

void store_retry_free(struct store_retry *r);

#endif
