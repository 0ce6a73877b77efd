/*
 * denycache.h - remembers "denied until t" answers from Redis so a client
 * hammering a limit it has hit is answered locally. Exact, not approximate:
 * until t no daemon can make room for that request (others can only consume
 * more), so Redis would say the same. Pure: the clock is passed in.
 */
#ifndef RL_DENYCACHE_H
#define RL_DENYCACHE_H

#include <stddef.h>
#include <stdint.h>

struct denycache;

struct denycache_hit {
	int64_t limit, remaining, retry_after_ms, reset_ms;
};

/* Room for about `entries` denials (rounded up); memory is bounded by it. */
struct denycache *denycache_new(size_t entries);
void denycache_free(struct denycache *dc);

/*
 * Records that (action, user, cost) was denied by a decision Redis made no
 * earlier than sent_us, with these reply fields. retry_after_ms -1 (never)
 * is kept for a second only: reloads may change capacities.
 */
void denycache_put(struct denycache *dc, unsigned long epoch, const char *action, size_t alen,
		   const char *user, size_t ulen, int64_t cost, uint64_t sent_us, int64_t limit,
		   int64_t remaining, int64_t retry_after_ms, int64_t reset_ms);
/*
 * Changes whenever denials may have become wrong (reload, lost store state,
 * RESET). A request notes it when sent; denycache_put with an older epoch is
 * ignored, so an answer decided before the change is never cached after it.
 */
unsigned long denycache_epoch(const struct denycache *dc);
/* 1 with *hit (times adjusted to now_us) while the denial holds, else 0. */
int denycache_lookup(struct denycache *dc, const char *action, size_t alen, const char *user,
		     size_t ulen, int64_t cost, uint64_t now_us, struct denycache_hit *hit);
/* This daemon consumed for (action, user): cached remaining values are stale. */
void denycache_forget(struct denycache *dc, const char *action, size_t alen, const char *user,
		      size_t ulen);
/* RESET of (action, user), here or through another daemon: forgets it and
 * moves the epoch. */
void denycache_reset_pair(struct denycache *dc, const char *action, size_t alen, const char *user,
			  size_t ulen);
/* Reload: policies may have changed. */
void denycache_clear(struct denycache *dc);
/* Clears the cache when the store's generation moved (it may have lost the
 * state the denials were based on, e.g. a Redis restarted empty). */
void denycache_sync(struct denycache *dc, unsigned long store_generation);
size_t denycache_size(const struct denycache *dc);

#endif
