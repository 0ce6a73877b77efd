/*
 * denycache.c - a set-associative cache of recent denials.
 *
 * A bucket is chosen by hash(action, user) and holds WAYS entries, so a RESET
 * finds every cost of that pair in one bucket. A full bucket replaces its
 * entry that expires first; a lost entry only costs one trip to Redis.
 */
#include "denycache.h"

#include <stdlib.h>
#include <string.h>

#define WAYS 4
#define NEVER_HOLD_US 1000000u

struct entry {
	char *key; /* action '\0' user; NULL when empty */
	size_t alen, ulen;
	int64_t cost;
	uint64_t until_us, at_us;
	int64_t limit, remaining, retry_after_ms, reset_ms;
};

struct denycache {
	struct entry *e;
	size_t nbuckets; /* power of two */
	size_t used;
	unsigned long generation;
	unsigned long epoch;
};

static uint64_t hash_pair(const char *a, size_t alen, const char *u, size_t ulen)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < alen; i++)
		h = (h ^ (uint8_t)a[i]) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull; /* separator: (ab, c) != (a, bc) */
	for (size_t i = 0; i < ulen; i++)
		h = (h ^ (uint8_t)u[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

struct denycache *denycache_new(size_t entries)
{
	struct denycache *dc = calloc(1, sizeof(*dc));
	if (!dc)
		return NULL;
	size_t n = 1;
	while (n * WAYS < entries)
		n <<= 1;
	dc->nbuckets = n;
	dc->e = calloc(n * WAYS, sizeof(struct entry));
	if (!dc->e) {
		free(dc);
		return NULL;
	}
	return dc;
}

static void drop(struct denycache *dc, struct entry *e)
{
	if (e->key) {
		free(e->key);
		e->key = NULL;
		dc->used--;
	}
}

unsigned long denycache_epoch(const struct denycache *dc)
{
	return dc->epoch;
}

void denycache_clear(struct denycache *dc)
{
	dc->epoch++;
	for (size_t i = 0; i < dc->nbuckets * WAYS; i++)
		drop(dc, &dc->e[i]);
}

void denycache_sync(struct denycache *dc, unsigned long store_generation)
{
	if (dc->generation != store_generation) {
		denycache_clear(dc);
		dc->generation = store_generation;
	}
}

void denycache_free(struct denycache *dc)
{
	if (!dc)
		return;
	denycache_clear(dc);
	free(dc->e);
	free(dc);
}

size_t denycache_size(const struct denycache *dc)
{
	return dc->used;
}

static struct entry *bucket(struct denycache *dc, const char *a, size_t alen, const char *u,
			    size_t ulen)
{
	return &dc->e[(hash_pair(a, alen, u, ulen) & (dc->nbuckets - 1)) * WAYS];
}

static int same_pair(const struct entry *e, const char *a, size_t alen, const char *u, size_t ulen)
{
	return e->key && e->alen == alen && e->ulen == ulen && memcmp(e->key, a, alen) == 0 &&
	       memcmp(e->key + alen + 1, u, ulen) == 0;
}

void denycache_put(struct denycache *dc, unsigned long epoch, const char *action, size_t alen,
		   const char *user, size_t ulen, int64_t cost, uint64_t sent_us, int64_t limit,
		   int64_t remaining, int64_t retry_after_ms, int64_t reset_ms)
{
	uint64_t until;
	if (epoch != dc->epoch)
		return;
	if (retry_after_ms < 0)
		until = sent_us + NEVER_HOLD_US;
	else if (retry_after_ms <= 1)
		return; /* nothing to gain */
	else
		/* retry_after is rounded up to whole ms: the true instant is later than
		 * (retry - 1) ms after Redis decided, which is after we sent. */
		until = sent_us + (uint64_t)(retry_after_ms - 1) * 1000u;
	struct entry *b = bucket(dc, action, alen, user, ulen);
	struct entry *slot = NULL;
	for (int i = 0; i < WAYS; i++) {
		if (same_pair(&b[i], action, alen, user, ulen) && b[i].cost == cost) {
			slot = &b[i];
			break;
		}
	}
	if (!slot) {
		for (int i = 0; i < WAYS; i++)
			if (!b[i].key || !slot || b[i].until_us < slot->until_us) {
				slot = &b[i];
				if (!b[i].key)
					break;
			}
		drop(dc, slot);
		slot->key = malloc(alen + 1 + ulen);
		if (!slot->key)
			return;
		memcpy(slot->key, action, alen);
		slot->key[alen] = '\0';
		memcpy(slot->key + alen + 1, user, ulen);
		slot->alen = alen;
		slot->ulen = ulen;
		slot->cost = cost;
		dc->used++;
	}
	slot->until_us = until;
	slot->at_us = sent_us;
	slot->limit = limit;
	slot->remaining = remaining;
	slot->retry_after_ms = retry_after_ms;
	slot->reset_ms = reset_ms;
}

int denycache_lookup(struct denycache *dc, const char *action, size_t alen, const char *user,
		     size_t ulen, int64_t cost, uint64_t now_us, struct denycache_hit *hit)
{
	/* Every request asks; while nobody is over a limit the answer costs no
	 * hash and no cache miss on a random bucket. */
	if (dc->used == 0)
		return 0;
	struct entry *b = bucket(dc, action, alen, user, ulen);
	for (int i = 0; i < WAYS; i++) {
		struct entry *e = &b[i];
		if (!same_pair(e, action, alen, user, ulen) || e->cost != cost)
			continue;
		if (now_us >= e->until_us) {
			drop(dc, e);
			return 0;
		}
		int64_t elapsed_ms = (int64_t)((now_us - e->at_us) / 1000u);
		hit->limit = e->limit;
		hit->remaining = e->remaining;
		hit->retry_after_ms = e->retry_after_ms < 0
					      ? -1
					      : (int64_t)((e->until_us - now_us + 999) / 1000u) + 1;
		hit->reset_ms = e->reset_ms > elapsed_ms ? e->reset_ms - elapsed_ms : 0;
		return 1;
	}
	return 0;
}

void denycache_forget(struct denycache *dc, const char *action, size_t alen, const char *user,
		      size_t ulen)
{
	if (dc->used == 0)
		return;
	struct entry *b = bucket(dc, action, alen, user, ulen);
	for (int i = 0; i < WAYS; i++)
		if (same_pair(&b[i], action, alen, user, ulen))
			drop(dc, &b[i]);
}

void denycache_reset_pair(struct denycache *dc, const char *action, size_t alen, const char *user,
			  size_t ulen)
{
	dc->epoch++;
	denycache_forget(dc, action, alen, user, ulen);
}
