/*
 * top.c - heavy hitters of one policy (top.h): two Space-Saving lists per
 * window, a window rotated on the caller's clock, and reads that estimate
 * the last minute from this window and the one before.
 */
#include "top.h"

#include <stdlib.h>
#include <string.h>


/* A user's first 8 bytes as one word, zero-padded: most users differ in
 * them or in their length, so a scan compares a word and a length first.
 * (No hash: the list is short, and nothing here can be flooded.) */
static uint64_t head_of(const char *user, size_t len)
{
	uint64_t h = 0;
	if (len >= 8) {
		memcpy(&h, user, 8); /* one load */
		return h;
	}
	for (size_t i = 0; i < len; i++)
		h |= (uint64_t)(unsigned char)user[i] << (8 * i);
	return h;
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

static size_t kept_of(size_t len)
{
	return len < TOP_NAME_MAX ? len : TOP_NAME_MAX;
}

/* (the head holds the first 8 bytes: only the rest is compared) */
static int same_user(const struct top_entry *e, uint64_t head, const char *user, size_t len)
{
	return e->head == head && e->len == len &&
	       (len <= 8 || memcmp(e->name + 8, user + 8, kept_of(len) - 8) == 0);
}

static void list_add(struct top_list *l, uint64_t head, const char *user, size_t len)
{
	l->total++;
	for (uint32_t i = 0; i < l->n; i++)
		if (same_user(&l->e[i], head, user, len)) {
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
	e->head = head;
	e->count = base + (base < UINT32_MAX);
	e->err = base;
	e->len = (uint16_t)len;
	memcpy(e->name, user, kept_of(len));
}

void top_count(struct top *t, const char *user, size_t len, int request, int denied,
	       uint64_t now_us)
{
	if (len > UINT16_MAX)
		len = UINT16_MAX;
	rotate(t, now_us);
	uint64_t head = head_of(user, len);
	if (request)
		list_add(&t->cur[TOP_BY_REQUESTS], head, user, len);
	if (denied)
		list_add(&t->cur[TOP_BY_DENIED], head, user, len);
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
		if (same_user(&l->e[i], u->head, u->name, u->len))
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
	size_t n = kept_of(x->u->len < y->u->len ? x->u->len : y->u->len);
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
		r->len = kept_of(u->len);
		memcpy(r->name, u->name, r->len);
		r->cut = u->len > TOP_NAME_MAX ? u->len : 0;
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
