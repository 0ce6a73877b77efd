/*
 * store_memory.h - the memory store (store: memory): every decision made in
 * this daemon by limiter.c, on the same keys and with the same expiries as
 * the Redis script, no Redis at all. Bounded by max_keys (least recently
 * used first out); lost on exit.
 */
#ifndef RL_STORE_MEMORY_H
#define RL_STORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct config_memory;
struct store;

struct store *store_memory_new(struct event_base *base, const struct config_memory *cfg, char *err,
			       size_t errlen);

/* The clock decisions and expiries use (microseconds); by default the
 * monotonic clock, started at the wall clock's time so that fixed windows
 * are aligned as Redis's are. For tests: a clock they move. */
typedef int64_t store_memory_clock_fn(void *arg);
void store_memory_set_clock(struct store *s, store_memory_clock_fn *fn, void *arg);

/* What it holds, for metrics and tests. */
struct store_memory_stats {
	size_t keys;		     /* kept now */
	size_t bytes;		     /* their memory, as allocated (estimate) */
	unsigned long long evicted;  /* dropped because max_keys was reached */
	unsigned long long expired;  /* dropped when Redis would have dropped them */
	unsigned long long failures; /* decisions not made: out of memory */
};
/* 0, or -1 when s is not a memory store. */
int store_memory_stats(const struct store *s, struct store_memory_stats *st);

#endif
