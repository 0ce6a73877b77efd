/* lease_table.c - the memory store's concurrency leases (see lease_table.h). */
#include "lease_table.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hashkey.h"
#include "siphash.h"
#include "stats.h"

#define BUCKETS 1024
/* a sweep of expired sets at most this often (us) */
#define SWEEP_US 1000000

/* One key's leases. */
struct lset {
	struct lset *next;
	uint64_t hash;
	struct lease_set set;
	size_t key_len;
	char key[];
};

struct lease_table {
	uint8_t seed[16]; /* clients choose the users: an unguessable hash */
	struct lset **buckets;
	size_t nbuckets, n;
	int64_t swept_us;
};

struct lease_table *lease_table_new(void)
{
	struct lease_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	hashkey_new(t->seed);
	t->nbuckets = BUCKETS;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		return NULL;
	}
	return t;
}

void lease_table_free(struct lease_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nbuckets; i++)
		for (struct lset *e = t->buckets[i], *next; e; e = next) {
			next = e->next;
			lease_set_free(&e->set);
			free(e);
		}
	free(t->buckets);
	free(t);
}

static struct lset *find(struct lease_table *t, const char *key, size_t len, int make)
{
	uint64_t h = siphash24(t->seed, key, len);
	struct lset **b = &t->buckets[h & (t->nbuckets - 1)];
	for (struct lset *e = *b; e; e = e->next)
		if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
			return e;
	if (!make)
		return NULL;
	struct lset *e = calloc(1, sizeof(*e) + len);
	if (!e)
		return NULL;
	e->hash = h;
	e->key_len = len;
	memcpy(e->key, key, len);
	e->next = *b;
	*b = e;
	t->n++;
	return e;
}

/* Drops the sets whose every lease has expired, as Redis drops the key at
 * its last lease's expiry: at most once a second, all of them. */
static void sweep(struct lease_table *t, int64_t now_us)
{
	if (now_us - t->swept_us < SWEEP_US)
		return;
	t->swept_us = now_us;
	for (size_t i = 0; i < t->nbuckets; i++)
		for (struct lset **pp = &t->buckets[i]; *pp;) {
			struct lset *e = *pp;
			if (lease_set_last_us(&e->set) <= now_us) {
				*pp = e->next;
				stats.leases[STATS_LEASE_EXPIRED] += e->set.n;
				lease_set_free(&e->set);
				free(e);
				t->n--;
			} else {
				pp = &e->next;
			}
		}
}

int lease_table_apply(struct lease_table *t, const char *key, size_t klen, enum lease_op op,
		      const char *member, int64_t cost, int64_t limit, int64_t lease_ms,
		      int64_t now_us, struct lease_result *out)
{
	sweep(t, now_us);
	struct lset *e = find(t, key, klen, op == LEASE_ACQUIRE);
	if (!e) {
		if (op == LEASE_ACQUIRE)
			return -1;
		struct lease_set none = {0};
		return lease_apply(&none, op, member, cost, limit, lease_ms, now_us, out);
	}
	return lease_apply(&e->set, op, member, cost, limit, lease_ms, now_us, out);
}
