/*
 * lease_book.c - the leases this daemon granted (see lease_book.h): a hash
 * table by nonce, chained, grown by doubling; a sweep walks it all, which
 * the callers do at most once a second and at a scrape.
 */
#include "lease_book.h"

#include <stdlib.h>

#include "stats.h"

struct entry {
	struct entry *next;
	uint64_t nonce, pair;
	int64_t expiry_us;
	struct stats_action *a;
};

struct lease_book {
	struct entry **buckets;
	size_t nbuckets, n, max;
};

#define BOOK_BUCKETS 256

struct lease_book *lease_book_new(size_t max)
{
	struct lease_book *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->nbuckets = BOOK_BUCKETS;
	b->buckets = calloc(b->nbuckets, sizeof(*b->buckets));
	if (!b->buckets) {
		free(b);
		return NULL;
	}
	b->max = max;
	return b;
}

void lease_book_free(struct lease_book *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nbuckets; i++)
		for (struct entry *e = b->buckets[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	free(b->buckets);
	free(b);
}

/* Nonces are SipHash outputs: their low bits spread well. */
static struct entry **slot_of(const struct lease_book *b, uint64_t nonce)
{
	struct entry **pp = &b->buckets[nonce & (b->nbuckets - 1)];
	while (*pp && (*pp)->nonce != nonce)
		pp = &(*pp)->next;
	return pp;
}

static void grow(struct lease_book *b)
{
	size_t n = b->nbuckets * 2;
	struct entry **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < b->nbuckets; i++)
		for (struct entry *e = b->buckets[i], *next; e; e = next) {
			next = e->next;
			e->next = nb[e->nonce & (n - 1)];
			nb[e->nonce & (n - 1)] = e;
		}
	free(b->buckets);
	b->buckets = nb;
	b->nbuckets = n;
}

/* Takes *pp out of the book; expired: counted as such. */
static void drop(struct lease_book *b, struct entry **pp, int expired)
{
	struct entry *e = *pp;
	*pp = e->next;
	if (e->a) {
		e->a->leases_held--;
		if (expired)
			e->a->leases_expired++;
	}
	free(e);
	b->n--;
}

int lease_book_granted(struct lease_book *b, uint64_t nonce, uint64_t pair, int64_t expiry_us,
		       struct stats_action *a)
{
	if (b->n >= b->max)
		return -1;
	if (b->n >= b->nbuckets)
		grow(b);
	struct entry **pp = slot_of(b, nonce);
	if (*pp) /* the same nonce twice cannot be (a 64-bit counter's SipHash) */
		return 0;
	struct entry *e = malloc(sizeof(*e));
	if (!e)
		return -1;
	*e = (struct entry){NULL, nonce, pair, expiry_us, a};
	*pp = e;
	b->n++;
	if (a)
		a->leases_held++;
	return 0;
}

void lease_book_renewed(struct lease_book *b, uint64_t nonce, int64_t expiry_us)
{
	struct entry *e = *slot_of(b, nonce);
	if (e)
		e->expiry_us = expiry_us;
}

void lease_book_released(struct lease_book *b, uint64_t nonce)
{
	struct entry **pp = slot_of(b, nonce);
	if (*pp)
		drop(b, pp, 0);
}

void lease_book_gone(struct lease_book *b, uint64_t nonce)
{
	struct entry **pp = slot_of(b, nonce);
	if (*pp)
		drop(b, pp, 1);
}

void lease_book_reset(struct lease_book *b, uint64_t pair)
{
	for (size_t i = 0; i < b->nbuckets; i++)
		for (struct entry **pp = &b->buckets[i]; *pp;)
			if ((*pp)->pair == pair)
				drop(b, pp, 0);
			else
				pp = &(*pp)->next;
}

void lease_book_sweep(struct lease_book *b, int64_t now_us)
{
	for (size_t i = 0; i < b->nbuckets; i++)
		for (struct entry **pp = &b->buckets[i]; *pp;)
			if ((*pp)->expiry_us <= now_us)
				drop(b, pp, 1);
			else
				pp = &(*pp)->next;
}

size_t lease_book_size(const struct lease_book *b)
{
	return b->n;
}
