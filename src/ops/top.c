/*
 * top.c - heavy hitters of one policy (top.h): two Space-Saving lists per
 * window, a window rotated on the caller's clock, and reads that estimate
 * the last minute from this window and the one before.
 */
#include "top.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "siphash.h"

static uint8_t hash_key[16];
static int hash_keyed;

uint64_t top_hash(const char *user, size_t len)
{
	if (!hash_keyed) {
		/* unpredictable, so that nobody can pick users that share an entry's
		 * hash; a clock-made key is still one per process if there is no
		 * entropy yet */
		if (getrandom(hash_key, sizeof(hash_key), GRND_NONBLOCK) != sizeof(hash_key)) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			memcpy(hash_key, &ts, sizeof(ts) < sizeof(hash_key) ? sizeof(ts) : 16);
		}
		hash_keyed = 1;
	}
	return siphash24(hash_key, user, len);
}

/* Moves the windows on to the one holding now. */
static void rotate(struct top *t, uint64_t now_us)
{
	if (!t->start_us) {
		t->start_us = now_us ? now_us : 1;
		return;
	}
	if (now_us < t->start_us + TOP_WINDOW_US)
		return;
	uint64_t windows = (now_us - t->start_us) / TOP_WINDOW_US;
	if (windows == 1)
		memcpy(t->prev, t->cur, sizeof(t->prev));
	else
		memset(t->prev, 0, sizeof(t->prev));
	memset(t->cur, 0, sizeof(t->cur));
	t->start_us += windows * TOP_WINDOW_US;
}

static int same_user(const struct top_entry *e, uint64_t hash, const char *user, size_t kept)
{
	return e->hash == hash && e->len == kept && memcmp(e->name, user, kept) == 0;
}

static void list_add(struct top_list *l, uint64_t hash, const char *user, size_t len)
{
	size_t kept = len < TOP_NAME_MAX ? len : TOP_NAME_MAX;
	l->total++;
	for (uint32_t i = 0; i < l->n; i++)
		if (same_user(&l->e[i], hash, user, kept)) {
			if (l->e[i].count < UINT32_MAX)
				l->e[i].count++;
			return;
		}
	struct top_entry *e;
	uint32_t base = 0;
	if (l->n < TOP_ENTRIES) {
		e = &l->e[l->n++];
	} else {
		/* the smallest gives its place, and its count as the newcomer's
		 * possible overcount */
		e = &l->e[0];
		for (uint32_t i = 1; i < TOP_ENTRIES; i++)
			if (l->e[i].count < e->count)
				e = &l->e[i];
		base = e->count;
	}
	e->hash = hash;
	e->count = base + (base < UINT32_MAX);
	e->err = base;
	e->len = (uint16_t)kept;
	e->cut = len > TOP_NAME_MAX;
	memcpy(e->name, user, kept);
}

void top_count(struct top *t, uint64_t hash, const char *user, size_t len, int request, int denied,
	       uint64_t now_us)
{
	rotate(t, now_us);
	if (request)
		list_add(&t->cur[TOP_BY_REQUESTS], hash, user, len);
	if (denied)
		list_add(&t->cur[TOP_BY_DENIED], hash, user, len);
}

/* The part of the previous window still inside the last TOP_WINDOW_US. */
static double prev_weight(const struct top *t, uint64_t now_us)
{
	uint64_t in = now_us > t->start_us ? now_us - t->start_us : 0;
	if (in >= TOP_WINDOW_US)
		return 0;
	return 1.0 - (double)in / (double)TOP_WINDOW_US;
}

static const struct top_entry *find(const struct top_list *l, const struct top_entry *u)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (same_user(&l->e[i], u->hash, u->name, u->len))
			return &l->e[i];
	return NULL;
}

/* A user's estimate in one list pair (count, and its possible overcount). */
static void estimate(const struct top_list *cur, const struct top_list *prev, double w,
		     const struct top_entry *u, double *count, double *over)
{
	const struct top_entry *c = find(cur, u), *p = find(prev, u);
	*count = (c ? c->count : 0) + w * (p ? p->count : 0);
	*over = (c ? c->err : 0) + w * (p ? p->err : 0);
}

struct candidate {
	const struct top_entry *u;
	double count, over;
};

static int by_count(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	size_t n = x->u->len < y->u->len ? x->u->len : y->u->len;
	int c = memcmp(x->u->name, y->u->name, n);
	if (c)
		return c;
	return x->u->len < y->u->len ? -1 : x->u->len > y->u->len;
}

static uint64_t rounded(double v)
{
	return v <= 0 ? 0 : (uint64_t)(v + 0.5);
}

size_t top_read(struct top *t, enum top_by by, uint64_t now_us, struct top_row *rows, size_t max)
{
	if (!t->start_us)
		return 0;
	rotate(t, now_us);
	double w = prev_weight(t, now_us);
	const struct top_list *cur = &t->cur[by], *prev = &t->prev[by];
	enum top_by other = by == TOP_BY_DENIED ? TOP_BY_REQUESTS : TOP_BY_DENIED;
	struct candidate cand[2 * TOP_ENTRIES];
	size_t n = 0;
	for (uint32_t i = 0; i < cur->n; i++)
		cand[n++].u = &cur->e[i];
	for (uint32_t i = 0; i < prev->n; i++)
		if (!find(cur, &prev->e[i]))
			cand[n++].u = &prev->e[i];
	for (size_t i = 0; i < n; i++)
		estimate(cur, prev, w, cand[i].u, &cand[i].count, &cand[i].over);
	qsort(cand, n, sizeof(cand[0]), by_count);
	if (max > TOP_ROWS_MAX)
		max = TOP_ROWS_MAX;
	size_t k = 0;
	for (size_t i = 0; i < n && k < max; i++) {
		if (rounded(cand[i].count) == 0)
			continue;
		struct top_row *r = &rows[k++];
		const struct top_entry *u = cand[i].u;
		memcpy(r->name, u->name, u->len);
		r->len = u->len;
		r->cut = u->cut;
		double o, ignored;
		estimate(&t->cur[other], &t->prev[other], w, u, &o, &ignored);
		uint64_t mine = rounded(cand[i].count), theirs = rounded(o);
		r->over = rounded(cand[i].over);
		if (by == TOP_BY_DENIED) {
			r->denied = mine;
			/* a denial is a request: the requests list may have let the
			 * user go while its denials stayed */
			r->requests = theirs > mine ? theirs : mine;
		} else {
			r->requests = mine;
			r->denied = theirs < mine ? theirs : mine;
		}
	}
	return k;
}

void top_totals(struct top *t, uint64_t now_us, uint64_t *requests, uint64_t *denied)
{
	*requests = *denied = 0;
	if (!t->start_us)
		return;
	rotate(t, now_us);
	double w = prev_weight(t, now_us);
	*requests = rounded((double)t->cur[TOP_BY_REQUESTS].total +
			    w * (double)t->prev[TOP_BY_REQUESTS].total);
	*denied = rounded((double)t->cur[TOP_BY_DENIED].total +
			  w * (double)t->prev[TOP_BY_DENIED].total);
}
