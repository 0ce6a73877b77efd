/*
 * limiter.c - the decision script src/lua/ratelimit.lua in C: the memory
 * store's algorithms (store_memory.c) and the tests' oracle. `now` is passed
 * in and state is kept in memory. Every formula mirrors the script line for
 * line (same doubles, same rounding), so the decisions in tests/vectors.txt
 * check both: this file in tests/unit/test_limiter.c, the script in a real
 * Redis in tests/integration/test_vectors.py; tests/integration/test_memory.py
 * compares the two on random sequences.
 */
#include "limiter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

/* The window holding now, of a fixed period or a calendar (the script's
 * frame): ids as the key's value carries them, times in us, lengths p in
 * ms; cal: a calendar's, which a delay does not reach past. */
struct frame {
	int64_t id, prev, prev2, start, len, p, next_len, p_next;
	int cal;
};

struct check {
	int ok;
	int64_t limit, remaining, retry, reset;
	/* sliding: fit, the first instant it has room */
	int64_t used, window, newest, period_ms, fit;
	int has_newest;
	/* funnel */
	double new_tat, tat, interval, tau; /* tat: the stored one, at least now */
	int64_t after_remaining;
	/* fixed window, counter; nx what a delay counted in the next window */
	int64_t cost, to_end, cur, prev, nx, e, est;
	struct frame f;
};

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int64_t ceil_ms(double us)
{
	if (us <= 0)
		return 0;
	return (int64_t)ceil(us / 1000);
}

/* When Redis drops a key the script set to expire in ttl_ms (PEXPIRE, SET PX). */
static int64_t expire_at(int64_t now, int64_t ttl_ms)
{
	return now + ttl_ms * 1000;
}

/* The script's verdict: never, now, or later (returns 1: set c->retry). */
static int verdict(struct check *c, int64_t cost, int64_t limit, int64_t used)
{
	c->retry = 0;
	if (cost > limit) {
		c->ok = 0;
		c->retry = -1;
		return 0;
	}
	c->ok = used + cost <= limit;
	return !c->ok;
}

/* Entries with score > cutoff are live. */
static size_t first_live(const struct limiter_state *s, int64_t cutoff)
{
	size_t lo = 0, hi = s->nlog;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->log[mid] > cutoff)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void sliding_check(const struct policy_limit *l, const struct limiter_state *s, int64_t cost,
			  int64_t now, struct check *c)
{
	int64_t window = l->period_ms * 1000;
	size_t first = first_live(s, now - window);
	c->window = window;
	c->used = (int64_t)(s->nlog - first);
	c->limit = l->count;
	c->has_newest = c->used > 0;
	c->newest = c->has_newest ? s->log[s->nlog - 1] : 0;
	c->cost = cost;
	c->fit = now;
	if (verdict(c, cost, l->count, c->used)) {
		int64_t need = c->used + cost - l->count;
		c->fit = s->log[first + (size_t)need - 1] + window;
		c->retry = min64(l->period_ms, ceil_ms((double)(c->fit - now)));
	}
	c->remaining = l->count - c->used > 0 ? l->count - c->used : 0;
	c->reset = c->has_newest ? min64(l->period_ms, ceil_ms((double)(c->newest + window - now)))
				 : 0;
	c->period_ms = l->period_ms;
}

/* Whether the log has an entry scored exactly x. */
static int log_has(const struct limiter_state *s, int64_t x)
{
	size_t i = first_live(s, x - 1);
	return i < s->nlog && s->log[i] == x;
}

/* The script's sliding_score: a score for entries that run at `at` that no
 * other request's entries have. */
static int64_t sliding_score(const struct limiter_state *s, const struct check *c, int64_t at)
{
	if (!c->has_newest || c->newest < at)
		return at;
	if (c->newest <= at + 1000)
		return c->newest + 1;
	int64_t x = at;
	size_t near = first_live(s, at + 1000); /* entries [0, near) are <= at + 1000 */
	if (near > 0 && s->log[near - 1] >= x)
		x = s->log[near - 1] + 1;
	while (log_has(s, x))
		x++;
	return x;
}

static int sliding_commit_at(struct limiter_state *s, int64_t cost, int64_t now, int64_t at,
			     struct check *c)
{
	int64_t score = sliding_score(s, c, at);
	size_t first = first_live(s, now - c->window);
	if (first) {
		memmove(s->log, s->log + first, (s->nlog - first) * sizeof(int64_t));
		s->nlog -= first;
	}
	if (s->nlog + (size_t)cost > s->caplog) {
		size_t cap = s->nlog + (size_t)cost;
		int64_t *log = realloc(s->log, cap * sizeof(int64_t));
		if (!log)
			return -1;
		s->log = log;
		s->caplog = cap;
	}
	/* in score order: a delay's entries may go before others placed ahead */
	size_t pos = first_live(s, score);
	memmove(s->log + pos + cost, s->log + pos, (s->nlog - pos) * sizeof(int64_t));
	for (int64_t i = 0; i < cost; i++)
		s->log[pos + (size_t)i] = score;
	s->nlog += (size_t)cost;
	int64_t last = c->has_newest && c->newest > score ? c->newest : score;
	int64_t ttl = ceil_ms((double)(last + c->window - now));
	if (at > now) {
		/* what its window has left when it runs, and its reset from then */
		int64_t left = c->limit - (int64_t)(s->nlog - first_live(s, at - c->window));
		c->remaining = left > 0 ? left : 0;
		c->reset = min64(c->period_ms, ceil_ms((double)(last + c->window - at)));
	} else {
		c->remaining = c->limit - c->used - cost;
		c->reset = min64(c->period_ms, ttl);
	}
	s->expire_us = expire_at(now, ttl);
	return 0;
}

static int sliding_commit(struct limiter_state *s, int64_t cost, int64_t now, struct check *c)
{
	return sliding_commit_at(s, cost, now, now, c);
}

static int64_t sliding_at(const struct check *c, int64_t t)
{
	if (c->cost > c->limit)
		return -1;
	return max64(t, c->fit);
}

static void funnel_check(const struct policy_limit *l, const struct limiter_state *s, int64_t cost,
			 int64_t now, struct check *c)
{
	double interval = (double)(l->period_ms * 1000) / (double)l->count;
	double tau = (double)l->capacity * interval;
	double tat = s->tat_us;
	if (tat == 0 || tat < (double)now)
		tat = (double)now;
	double new_tat = tat + (double)cost * interval;
	c->limit = l->capacity;
	c->new_tat = new_tat;
	c->tat = tat;
	c->interval = interval;
	c->tau = tau;
	if (cost > l->capacity) {
		c->ok = 0;
		c->retry = -1;
	} else if (new_tat - (double)now <= tau + 1) {
		c->ok = 1;
		c->retry = 0;
	} else {
		c->ok = 0;
		c->retry = ceil_ms(new_tat - (double)now - tau);
	}
	c->remaining = (int64_t)floor((tau - (tat - (double)now)) / interval + 1e-6);
	if (c->remaining < 0) /* capacity lowered by a reload */
		c->remaining = 0;
	c->reset = ceil_ms(tat - (double)now);
	c->after_remaining = (int64_t)floor((tau - (new_tat - (double)now)) / interval + 1e-6);
}

static void funnel_commit(struct limiter_state *s, int64_t now, struct check *c)
{
	s->tat_us = c->new_tat;
	int64_t ttl = ceil_ms(c->new_tat - (double)now);
	s->expire_us = expire_at(now, ttl > 1 ? ttl : 1);
	c->remaining = c->after_remaining;
	c->reset = ceil_ms(c->new_tat - (double)now);
}

/* The number of the window of `period` us holding now (aligned to the clock). */
static int64_t window_of(int64_t now, int64_t period)
{
	return now / period;
}

/* The script's frame: the window holding now, of a fixed period or of a
 * calendar (its id the start in ms, the bounds from lib/calendar.c on
 * now's clock, as the daemon sends them). -1 when the calendar cannot be
 * read (the script fails such a decision too). */
static int frame_of(const struct policy_limit *l, const char *tz, int64_t now, struct frame *f)
{
	if (l->calendar == CALENDAR_NONE) {
		int64_t period = l->period_ms * 1000, idx = window_of(now, period);
		*f = (struct frame){.id = idx,
				    .prev = idx - 1,
				    .prev2 = idx - 2,
				    .start = idx * period,
				    .len = period,
				    .p = l->period_ms,
				    .next_len = period,
				    .p_next = l->period_ms};
		return 0;
	}
	int64_t b[5];
	int64_t ms = now >= 0 ? now / 1000 : -((-now + 999) / 1000);
	if (calendar_bounds(tz, l->calendar, l->anchor, ms, b) < 0)
		return -1;
	*f = (struct frame){.id = b[2],
			    .prev = b[1],
			    .prev2 = b[0],
			    .start = b[2] * 1000,
			    .len = (b[3] - b[2]) * 1000,
			    .p = b[3] - b[2],
			    .next_len = (b[4] - b[3]) * 1000,
			    .p_next = b[4] - b[3],
			    .cal = 1};
	return 0;
}

/* What an earlier window's value leaves to this one: what a delay counted
 * ahead in the next window, and a count past the limit (a CHARGE's debt),
 * less the limit of each window since (a fixed period's; a calendar's two
 * windows back at most). */
static int64_t carried(const struct limiter_state *s, int64_t limit, const struct frame *f)
{
	int64_t debt = s->next + (s->n > limit ? s->n - limit : 0);
	int64_t gap = f->cal ? (s->window == f->prev	? 1
				: s->window == f->prev2 ? 2
							: -1)
			     : f->id - s->window;
	if (gap < 1 || gap - 1 > debt / limit) /* (gap - 1) * limit could overflow */
		return 0;
	int64_t left = debt - (gap - 1) * limit;
	return left > 0 ? left : 0;
}

/* The script's fixed_keep: ms until the window's count is spent (this
 * window's end, or that of the last later window what it carries reaches),
 * at most 400 days; also how long the value lives. */
static int64_t fixed_keep(const struct check *c, int64_t used, int64_t now)
{
	const struct frame *f = &c->f;
	int64_t carry = c->nx + (used > c->limit ? used - c->limit : 0);
	int64_t k = (int64_t)ceil((double)carry / (double)c->limit);
	if (k < 1)
		return c->to_end;
	if (f->cal && k > 2)
		k = 2;
	int64_t ms = ceil_ms((double)f->start + (double)f->len + (double)k * (double)f->next_len -
			     (double)now);
	return ms < 34560000000LL ? ms : 34560000000LL;
}

static void fixed_check(const struct policy_limit *l, const struct limiter_state *s, int64_t cost,
			int64_t now, struct check *c)
{
	const struct frame *f = &c->f;
	int64_t used = 0, nx = 0;
	if (s->has_window && s->window == f->id) {
		used = s->n;
		nx = s->next;
	} else if (s->has_window && s->window < f->id) {
		used = carried(s, l->count, f);
	}
	c->to_end = ceil_ms((double)(f->start + f->len - now));
	c->limit = l->count;
	c->used = used;
	c->nx = nx;
	c->cost = cost;
	if (verdict(c, cost, l->count, used))
		c->retry = c->to_end;
	c->remaining = l->count - used > 0 ? l->count - used : 0;
	c->reset = nx > 0 || used > 0 ? fixed_keep(c, used, now) : 0;
}

static void fixed_write(struct limiter_state *s, int64_t now, struct check *c, int64_t used)
{
	c->reset = fixed_keep(c, used, now);
	s->expire_us = expire_at(now, c->reset);
	s->has_window = 1;
	s->window = c->f.id;
	s->n = used;
	s->next = c->nx;
}

static void fixed_commit(struct limiter_state *s, int64_t now, struct check *c)
{
	fixed_write(s, now, c, c->used + c->cost);
	c->remaining = c->limit - s->n;
}

static int64_t fixed_at(const struct check *c, int64_t t)
{
	const struct frame *f = &c->f;
	if (c->cost > c->limit)
		return -1;
	int64_t next_start = f->start + f->len;
	if (t < next_start && c->used + c->cost <= c->limit)
		return t;
	if (!f->cal && c->nx + c->cost <= c->limit && t < next_start + f->next_len)
		return max64(t, next_start);
	return -1;
}

static void fixed_commit_at(struct limiter_state *s, int64_t now, int64_t t, struct check *c)
{
	const struct frame *f = &c->f;
	if (t < f->start + f->len) {
		fixed_commit(s, now, c);
	} else {
		c->nx += c->cost;
		fixed_write(s, now, c, c->used);
		c->remaining = c->limit - c->nx;
	}
	/* from when it runs: the end of the last window holding units */
	c->reset = ceil_ms((double)(f->start + f->len + (c->nx > 0 ? f->next_len : 0) - t));
}

/* The script's floor(n * (p - e) / p), in the same doubles. */
static int64_t weighted(int64_t n, int64_t p, int64_t e)
{
	return (int64_t)floor((double)n * (double)(p - e) / (double)p);
}

static int64_t first_ms(int64_t n, int64_t p, int64_t k, int64_t lo)
{
	if (weighted(n, p, lo) <= k)
		return lo;
	if (weighted(n, p, p - 1) > k)
		return p;
	int64_t a = lo, b = p - 1;
	while (b - a > 1) {
		int64_t m = (a + b) / 2;
		if (weighted(n, p, m) <= k)
			b = m;
		else
			a = m;
	}
	return b;
}

/* ms from base until the estimate, with cur units in the current window, is
 * at most k (base: now, or when a delayed request runs). */
static int64_t counter_wait(const struct check *c, int64_t cur, int64_t k, int64_t base)
{
	const struct frame *f = &c->f;
	int64_t at = -1;
	if (cur <= k) {
		int64_t e = first_ms(c->prev, f->p, k - cur, c->e);
		if (e < f->p)
			at = e * 1000;
	}
	if (at < 0) {
		int64_t e = first_ms(cur, f->p_next, k, 0);
		at = f->len + (e < f->p_next ? e : f->p_next) * 1000;
	}
	return ceil_ms((double)(f->start + at - base));
}

static int64_t counter_reset(const struct check *c, int64_t cur, int64_t base)
{
	const struct frame *f = &c->f;
	if (c->nx > 0)
		return ceil_ms((double)(f->start + f->len + f->next_len +
					first_ms(c->nx, f->p_next, 0, 0) * 1000 - base));
	return counter_wait(c, cur, 0, base);
}

static void counter_check(const struct policy_limit *l, const struct limiter_state *s, int64_t cost,
			  int64_t now, struct check *c)
{
	const struct frame *f = &c->f;
	int64_t cur = 0, prev = 0, nx = 0;
	if (s->has_window && s->window == f->id) {
		cur = s->n;
		prev = s->prev;
		nx = s->next;
	} else if (s->has_window && s->window == f->prev) {
		cur = s->next;
		prev = s->n;
	} else if (s->has_window && s->window == f->prev2) {
		prev = s->next;
	}
	c->limit = l->count;
	c->cur = cur;
	c->prev = prev;
	c->nx = nx;
	c->cost = cost;
	c->e = (now - f->start) / 1000;
	c->est = cur + weighted(prev, f->p, c->e);
	if (verdict(c, cost, l->count, c->est))
		c->retry = counter_wait(c, cur, l->count - cost, now);
	c->remaining = l->count - c->est > 0 ? l->count - c->est : 0;
	c->reset = counter_reset(c, cur, now);
}

static void counter_write(struct limiter_state *s, int64_t now, struct check *c, int64_t cur)
{
	const struct frame *f = &c->f;
	s->has_window = 1;
	s->window = f->id;
	s->n = cur;
	s->prev = c->prev;
	s->next = c->nx;
	/* the value counts until the window after the next one ends (as prev) */
	int64_t ends = f->start + f->len + (c->nx > 0 ? 2 * f->next_len : f->p_next * 1000);
	s->expire_us = expire_at(now, ceil_ms((double)(ends - now)));
	c->reset = counter_reset(c, cur, now);
}

static void counter_commit(struct limiter_state *s, int64_t now, struct check *c)
{
	counter_write(s, now, c, c->cur + c->cost);
	int64_t left = c->limit - c->est - c->cost;
	c->remaining = left > 0 ? left : 0;
}

static int64_t counter_at(const struct check *c, int64_t t)
{
	const struct frame *f = &c->f;
	int64_t limit = c->limit, cost = c->cost;
	if (cost > limit)
		return -1;
	int64_t next_start = f->start + f->len;
	if (t < next_start && c->cur + cost <= limit) {
		int64_t e = first_ms(c->prev, f->p, limit - cost - c->cur, (t - f->start) / 1000);
		if (e < f->p)
			return max64(t, f->start + e * 1000);
	}
	if (!f->cal && c->nx + cost <= limit && t < next_start + f->next_len) {
		int64_t lo = t > next_start ? (t - next_start) / 1000 : 0;
		int64_t e = first_ms(max64(c->cur, limit), f->p_next, limit - cost - c->nx, lo);
		if (e < f->p_next)
			return max64(t, next_start + e * 1000);
	}
	return -1;
}

static void counter_commit_at(struct limiter_state *s, int64_t now, int64_t t, struct check *c)
{
	const struct frame *f = &c->f;
	int64_t next_start = f->start + f->len, left;
	if (t < next_start) {
		counter_write(s, now, c, c->cur + c->cost);
		left = c->limit - c->cur - c->cost - weighted(c->prev, f->p, (t - f->start) / 1000);
		c->reset = counter_reset(c, c->cur + c->cost, t);
	} else {
		c->nx += c->cost;
		counter_write(s, now, c, c->cur);
		left = c->limit - c->nx -
		       weighted(max64(c->cur, c->limit), f->p_next, (t - next_start) / 1000);
		c->reset = counter_reset(c, c->cur, t);
	}
	c->remaining = left > 0 ? left : 0;
}

/* One limit's check: its numbers and, when it passes, what committing
 * writes. -1: a calendar window's zone could not be read. */
static int check_limit(enum policy_algo algo, const struct policy_limit *l, const char *tz,
		       const struct limiter_state *s, int64_t cost, int64_t now, struct check *c)
{
	switch (algo) {
	case POLICY_SLIDING_WINDOW:
		sliding_check(l, s, cost, now, c);
		return 0;
	case POLICY_FUNNEL:
		funnel_check(l, s, cost, now, c);
		return 0;
	case POLICY_FIXED_WINDOW:
		if (frame_of(l, tz, now, &c->f) < 0)
			return -1;
		fixed_check(l, s, cost, now, c);
		return 0;
	case POLICY_SLIDING_COUNTER:
		if (frame_of(l, tz, now, &c->f) < 0)
			return -1;
		counter_check(l, s, cost, now, c);
		return 0;
	case POLICY_CONCURRENCY: /* leases are lease.c's; never decided here */
		memset(c, 0, sizeof(*c));
		return 0;
	}
	return 0;
}

static int commit_limit(enum policy_algo algo, struct limiter_state *s, int64_t cost, int64_t now,
			struct check *c)
{
	switch (algo) {
	case POLICY_SLIDING_WINDOW:
		return sliding_commit(s, cost, now, c);
	case POLICY_FUNNEL:
		funnel_commit(s, now, c);
		return 0;
	case POLICY_FIXED_WINDOW:
		fixed_commit(s, now, c);
		return 0;
	case POLICY_SLIDING_COUNTER:
		counter_commit(s, now, c);
		return 0;
	case POLICY_CONCURRENCY:
		break;
	}
	return -1;
}

/* ---- holds: refunds where the units still count (the script's refund) */

static void fixed_refund(struct limiter_state *s, int64_t now, struct check *c, int64_t amount,
			 int64_t th)
{
	if (th < c->f.start) /* an earlier window's units: that window is over */
		return;
	int64_t used = c->used > amount ? c->used - amount : 0;
	fixed_write(s, now, c, used);
	c->remaining = c->limit - used > 0 ? c->limit - used : 0;
}

static void counter_refund(struct limiter_state *s, int64_t now, struct check *c, int64_t amount,
			   int64_t th)
{
	const struct frame *f = &c->f;
	int64_t cur = c->cur;
	int64_t prev_start =
		f->cal ? (f->prev >= 0 ? f->prev * 1000 : INT64_MAX) : f->start - f->len;
	if (th >= f->start)
		cur = cur > amount ? cur - amount : 0;
	else if (th >= prev_start)
		c->prev = c->prev > amount ? c->prev - amount : 0;
	else
		return;
	counter_write(s, now, c, cur);
	int64_t left = c->limit - cur - weighted(c->prev, f->p, c->e);
	c->remaining = left > 0 ? left : 0;
}

static void sliding_refund(struct limiter_state *s, int64_t now, struct check *c, int64_t amount,
			   int64_t th)
{
	int64_t lo = th > now - c->window + 1 ? th : now - c->window + 1;
	size_t at = first_live(s, lo - 1); /* the first entry scored >= lo */
	size_t n = s->nlog - at < (size_t)amount ? s->nlog - at : (size_t)amount;
	if (n > 0) { /* (an empty log has no array to move) */
		memmove(s->log + at, s->log + at + n, (s->nlog - at - n) * sizeof(int64_t));
		s->nlog -= n;
	}
	int64_t left = c->limit - (c->used - (int64_t)n);
	c->remaining = left > 0 ? left : 0;
	if (c->used - (int64_t)n <= 0)
		c->reset = 0;
}

static void funnel_refund(struct limiter_state *s, int64_t now, struct check *c, int64_t amount)
{
	double was = c->tat, tat = c->tat - (double)amount * c->interval;
	if (tat < (double)now)
		tat = (double)now;
	if (was > (double)now) { /* the key holds a TAT ahead of now */
		if (tat > (double)now) {
			s->tat_us = tat;
			int64_t ttl = ceil_ms(tat - (double)now);
			s->expire_us = expire_at(now, ttl > 1 ? ttl : 1);
		} else {
			s->tat_us = 0;
			s->expire_us = now; /* deleted */
		}
	}
	c->remaining = (int64_t)floor((c->tau - (tat - (double)now)) / c->interval + 1e-6);
	if (c->remaining < 0)
		c->remaining = 0;
	c->reset = ceil_ms(tat - (double)now);
}

static void refund_limit(enum policy_algo algo, struct limiter_state *s, int64_t now,
			 struct check *c, int64_t amount, int64_t th)
{
	switch (algo) {
	case POLICY_SLIDING_WINDOW:
		sliding_refund(s, now, c, amount, th);
		return;
	case POLICY_FUNNEL:
		funnel_refund(s, now, c, amount);
		return;
	case POLICY_FIXED_WINDOW:
		fixed_refund(s, now, c, amount, th);
		return;
	case POLICY_SLIDING_COUNTER:
		counter_refund(s, now, c, amount, th);
		return;
	case POLICY_CONCURRENCY:
		return;
	}
}

/* The first instant from t at which a window algorithm's limit passes
 * (the script's at), or -1: none it can hold (and a funnel's never here). */
static int64_t limit_at(enum policy_algo algo, const struct check *c, int64_t t)
{
	switch (algo) {
	case POLICY_SLIDING_WINDOW:
		return sliding_at(c, t);
	case POLICY_FIXED_WINDOW:
		return fixed_at(c, t);
	case POLICY_SLIDING_COUNTER:
		return counter_at(c, t);
	case POLICY_FUNNEL:
	case POLICY_CONCURRENCY:
		break;
	}
	return -1;
}

static int commit_limit_at(enum policy_algo algo, struct limiter_state *s, int64_t cost,
			   int64_t now, int64_t t, struct check *c)
{
	switch (algo) {
	case POLICY_SLIDING_WINDOW:
		return sliding_commit_at(s, cost, now, t, c);
	case POLICY_FIXED_WINDOW:
		fixed_commit_at(s, now, t, c);
		return 0;
	case POLICY_SLIDING_COUNTER:
		counter_commit_at(s, now, t, c);
		return 0;
	case POLICY_FUNNEL:
	case POLICY_CONCURRENCY:
		break;
	}
	return -1;
}

/* The ban's key: banned until ban_until, else the times of recent denials. */
static int ban_banned(const struct limiter_state *s, int64_t now, struct check *c)
{
	if (s->ban_until > now) {
		c->ok = 0;
		c->retry = ceil_ms((double)(s->ban_until - now));
		c->reset = c->retry;
		return 1;
	}
	return 0;
}

/* A denial not caused by the ban: noted; the after-th within `within` bans. */
static int ban_denied(const struct policy_ban *b, struct limiter_state *s, int64_t now,
		      struct check *c)
{
	s->ban_until = 0;
	size_t first = first_live(s, now - b->within_ms * 1000);
	if (first) {
		memmove(s->log, s->log + first, (s->nlog - first) * sizeof(int64_t));
		s->nlog -= first;
	}
	if ((int64_t)s->nlog + 1 >= b->after) {
		s->nlog = 0;
		s->ban_until = now + b->for_ms * 1000;
		s->expire_us = expire_at(now, ceil_ms((double)(b->for_ms * 1000)));
		c->ok = 0;
		c->retry = c->reset = ceil_ms((double)(b->for_ms * 1000));
		return 0;
	}
	int64_t score = now;
	if (s->nlog && s->log[s->nlog - 1] >= score)
		score = s->log[s->nlog - 1] + 1;
	if (s->nlog + 1 > s->caplog) {
		size_t cap = s->nlog + 16;
		int64_t *log = realloc(s->log, cap * sizeof(int64_t));
		if (!log)
			return -1;
		s->log = log;
		s->caplog = cap;
	}
	s->log[s->nlog++] = score;
	s->expire_us = expire_at(now, ceil_ms((double)(score + b->within_ms * 1000 - now)));
	return 0;
}

/* One policy's checks: its limits', then its ban's (ok unless banned now). */
struct group {
	struct check c[POLICY_MAX_LIMITS + 1];
	struct check *ban; /* NULL: no ban */
	int ok, banned;
};

static int check_group(const struct policy *p, const struct limiter_state *st, int64_t cost,
		       int64_t now, struct group *g)
{
	memset(g, 0, sizeof(*g));
	g->ok = 1;
	for (int i = 0; i < p->nlimits; i++) {
		if (check_limit(p->algo, &p->limits[i], p->timezone, &st[i], cost, now, &g->c[i]) <
		    0)
			return -1;
		if (!g->c[i].ok)
			g->ok = 0;
	}
	if (p->ban.after > 0) {
		g->ban = &g->c[p->nlimits];
		g->ban->ok = 1;
		g->ban->limit = g->c[0].limit; /* a ban answers with the first limit */
		g->banned = ban_banned(&st[p->nlimits], now, g->ban);
		if (g->banned)
			g->ok = 0;
	}
	return 0;
}

/* Charges every limit of a group that passed (a ban has nothing to charge). */
static int commit_group(const struct policy *p, struct limiter_state *st, int64_t cost, int64_t now,
			struct group *g)
{
	for (int i = 0; i < p->nlimits; i++)
		if (commit_limit(p->algo, &st[i], cost, now, &g->c[i]) < 0)
			return -1;
	return 0;
}

/* Whether c answers for the decision rather than bind (the first of equals
 * stays): allowed, the smallest remaining of the limits (not the ban);
 * denied, the longest wait of the failing ones, -1 (never) above all. */
static int binds(int allowed, const struct check *c, const struct check *ban,
		 const struct check *bind)
{
	if (allowed)
		return c != ban && (!bind || c->remaining < bind->remaining);
	return !c->ok &&
	       (!bind || (bind->retry != -1 && (c->retry == -1 || c->retry > bind->retry)));
}

static void result_of(int allowed, const struct check *bind, struct limiter_result *out)
{
	*out = (struct limiter_result){allowed, bind->limit, bind->remaining, bind->retry,
				       bind->reset};
}

/* The script's delay_at: the first instant within wait us at which every
 * limit passes, or -1. */
static int64_t delay_at(const struct policy *p, const struct group *g, int64_t now, int64_t wait)
{
	int64_t t = now;
	for (int round = 0; round < 8; round++) {
		int64_t t2 = t;
		for (int i = 0; i < p->nlimits; i++) {
			int64_t at = limit_at(p->algo, &g->c[i], t);
			if (at < 0)
				return -1;
			t2 = max64(t2, at);
		}
		if (t2 > now + wait)
			return -1;
		if (t2 == t)
			return t;
		t = t2;
	}
	return -1;
}

static int decide(const struct policy *p, struct limiter_state *st, enum limiter_op op,
		  int64_t cost, int64_t now_us, int64_t wait_us, struct limiter_result *out);

int limiter_decide(const struct policy *p, struct limiter_state *st, enum limiter_op op,
		   int64_t cost, int64_t now_us, struct limiter_result *out)
{
	return decide(p, st, op, cost, now_us, 0, out);
}

int limiter_decide_wait(const struct policy *p, struct limiter_state *st, int64_t cost,
			int64_t now_us, int64_t wait_us, struct limiter_result *out)
{
	return decide(p, st, LIMITER_ALLOW, cost, now_us, wait_us, out);
}

static int decide(const struct policy *p, struct limiter_state *st, enum limiter_op op,
		  int64_t cost, int64_t now_us, int64_t wait_us, struct limiter_result *out)
{
	if (op == LIMITER_RESET) {
		for (int i = 0; i < policy_nkeys(p); i++) {
			st[i].tat_us = 0;
			st[i].nlog = 0;
			st[i].has_window = 0;
			st[i].ban_until = 0;
			st[i].expire_us = 0;
		}
		*out = (struct limiter_result){.allowed = 1};
		return 0;
	}
	struct group g;
	if (check_group(p, st, cost, now_us, &g) < 0)
		return -1;
	if (g.banned) {
		result_of(0, g.ban, out);
		return 0;
	}
	if (op == LIMITER_CHARGE) {
		/* counted whatever the limits hold: the cost was spent */
		struct check *bind = NULL;
		for (int i = 0; i < p->nlimits; i++) {
			if (commit_limit(p->algo, &st[i], cost, now_us, &g.c[i]) < 0)
				return -1;
			if (!bind || g.c[i].remaining < bind->remaining)
				bind = &g.c[i];
		}
		*out = (struct limiter_result){
			1, bind->limit, bind->remaining > 0 ? bind->remaining : 0, 0, bind->reset};
		return 0;
	}
	int64_t at = !g.ok && wait_us > 0 ? delay_at(p, &g, now_us, wait_us) : -1;
	if (at >= 0) {
		/* delayed: charged as running at `at`, allowed then */
		struct check *bind = NULL;
		for (int i = 0; i < p->nlimits; i++) {
			if (commit_limit_at(p->algo, &st[i], cost, now_us, at, &g.c[i]) < 0)
				return -1;
			if (!bind || g.c[i].remaining < bind->remaining)
				bind = &g.c[i];
		}
		int64_t wait_ms = ceil_ms((double)(at - now_us));
		*out = (struct limiter_result){1, bind->limit, bind->remaining,
					       wait_ms > 1 ? wait_ms : 1, bind->reset};
		return 0;
	}
	if (!g.ok && g.ban && op == LIMITER_ALLOW &&
	    ban_denied(&p->ban, &st[p->nlimits], now_us, g.ban) < 0)
		return -1;
	if (g.ok && op == LIMITER_ALLOW && commit_group(p, st, cost, now_us, &g) < 0)
		return -1;
	struct check *bind = NULL;
	for (int i = 0; i < policy_nkeys(p); i++)
		if (binds(g.ok, &g.c[i], g.ban, bind))
			bind = &g.c[i];
	result_of(g.ok, bind, out);
	return 0;
}

int limiter_decide_all(const struct policy *const *policies, const int *shadow,
		       struct limiter_state *const *states, int ngroups, enum limiter_op op,
		       int64_t cost, int64_t now_us, struct limiter_result *out, int *group,
		       int *shadow_group, struct limiter_group *groups)
{
	if (ngroups < 1 || op == LIMITER_RESET)
		return -1;
	struct group *g = calloc((size_t)ngroups, sizeof(*g));
	int *sh = calloc((size_t)ngroups, sizeof(*sh));
	int rc = -1;
	if (!g || !sh)
		goto out;
	int real = 0;
	for (int i = 0; i < ngroups; i++) {
		if (check_group(policies[i], states[i], cost, now_us, &g[i]) < 0)
			goto out;
		real += !shadow[i];
	}
	/* only shadow groups (the daemon never sends that): none is one */
	for (int i = 0; i < ngroups; i++)
		sh[i] = real > 0 && shadow[i];
	int all_ok = 1, banned = -1;
	for (int i = 0; i < ngroups; i++) {
		if (sh[i])
			continue;
		if (!g[i].ok)
			all_ok = 0;
		if (banned < 0 && g[i].banned)
			banned = i;
	}
	struct check *bind = NULL;
	int bind_group = 0;
	if (banned >= 0) {
		bind = g[banned].ban;
		bind_group = banned;
	} else {
		for (int i = 0; i < ngroups; i++) {
			const struct policy *p = policies[i];
			if (all_ok && g[i].ok && op == LIMITER_ALLOW &&
			    commit_group(p, states[i], cost, now_us, &g[i]) < 0)
				goto out;
			if (!all_ok && !sh[i] && !g[i].ok && g[i].ban && op == LIMITER_ALLOW &&
			    ban_denied(&p->ban, &states[i][p->nlimits], now_us, g[i].ban) < 0)
				goto out;
			if (sh[i])
				continue;
			/* only the real groups answer */
			for (int j = 0; j < policy_nkeys(p); j++) {
				if (binds(all_ok, &g[i].c[j], g[i].ban, bind)) {
					bind = &g[i].c[j];
					bind_group = i;
				}
			}
		}
	}
	/* a shadow group that fails is reported, and its ban counts the denial
	 * as if it were enforced, whatever the real groups decided */
	*shadow_group = 0;
	for (int i = 0; i < ngroups; i++) {
		const struct policy *p = policies[i];
		if (!sh[i] || g[i].ok)
			continue;
		if (!*shadow_group)
			*shadow_group = i + 1;
		if (g[i].ban && !g[i].banned && op == LIMITER_ALLOW &&
		    ban_denied(&p->ban, &states[i][p->nlimits], now_us, g[i].ban) < 0)
			goto out;
	}
	/* no limit to answer with (a group of none, or only a ban): the
	 * script fails such a decision (-1) too */
	if (!bind)
		goto out;
	result_of(all_ok && banned < 0, bind, out);
	*group = bind_group + 1;
	for (int i = 0; groups && i < ngroups; i++) {
		const struct policy *p = policies[i];
		/* a ban in force: before this call, or turned on by it */
		if (g[i].ban && (g[i].banned || !g[i].ban->ok)) {
			groups[i] = (struct limiter_group){0, 0, g[i].ban->reset};
			continue;
		}
		const struct check *b = NULL;
		for (int j = 0; j < p->nlimits; j++)
			if (!b || g[i].c[j].remaining < b->remaining)
				b = &g[i].c[j];
		groups[i] = (struct limiter_group){g[i].ok, b->remaining, b->reset};
	}
	rc = 0;
out:
	free(g);
	free(sh);
	return rc;
}

int limiter_hold(const struct policy *p, struct limiter_state *st, struct limiter_state *hs,
		 int64_t estimate, uint64_t nonce, int64_t hold_us, int64_t now_us,
		 struct limiter_result *out)
{
	if (decide(p, st, LIMITER_ALLOW, estimate, now_us, 0, out) < 0)
		return -1;
	if (out->allowed != 1 || out->retry_after_ms != 0)
		return 0;
	struct limiter_hold h = {nonce, estimate, now_us, now_us + hold_us};
	size_t i = 0;
	while (i < hs->nholds && hs->holds[i].nonce != nonce)
		i++;
	if (i < hs->nholds) { /* the same nonce again: replaced, as HSET does */
		hs->holds[i] = h;
	} else if (hs->nholds == hs->capholds) {
		size_t cap = hs->capholds ? 2 * hs->capholds : 4;
		struct limiter_hold *grown = realloc(hs->holds, cap * sizeof(*grown));
		if (!grown)
			return -1;
		hs->holds = grown;
		hs->capholds = cap;
	}
	if (i == hs->nholds)
		hs->holds[hs->nholds++] = h;
	/* the hash lives as long as its longest hold (PEXPIRE only lengthens) */
	int64_t until = expire_at(now_us, hold_us / 1000);
	if (hs->expire_us < until)
		hs->expire_us = until;
	return 0;
}

int limiter_settle(const struct policy *p, struct limiter_state *st, struct limiter_state *hs,
		   uint64_t nonce, int64_t actual, int64_t now_us, struct limiter_result *out)
{
	size_t i = 0;
	while (i < hs->nholds && hs->holds[i].nonce != nonce)
		i++;
	if (i == hs->nholds)
		return 1;
	struct limiter_hold h = hs->holds[i];
	hs->holds[i] = hs->holds[--hs->nholds];
	if (h.expiry <= now_us) /* settled at its estimate when it expired */
		return 1;
	int64_t diff = (actual < 0 ? 0 : actual) - h.estimate;
	int64_t amount = diff < 0 ? -diff : diff;
	struct group g;
	if (check_group(p, st, amount, now_us, &g) < 0)
		return -1;
	struct check *bind = NULL;
	for (int k = 0; k < p->nlimits; k++) {
		if (diff > 0 && commit_limit(p->algo, &st[k], amount, now_us, &g.c[k]) < 0)
			return -1;
		if (diff < 0)
			refund_limit(p->algo, &st[k], now_us, &g.c[k], amount, h.t_h);
		if (!bind || g.c[k].remaining < bind->remaining)
			bind = &g.c[k];
	}
	*out = (struct limiter_result){1, bind->limit, bind->remaining > 0 ? bind->remaining : 0, 0,
				       bind->reset};
	return 0;
}

int limiter_look(const struct policy *p, struct limiter_state *st, int64_t now_us,
		 struct limiter_result *out, struct limiter_key *keys)
{
	struct group g;
	if (decide(p, st, LIMITER_PEEK, 1, now_us, 0, out) < 0 ||
	    check_group(p, st, 1, now_us, &g) < 0)
		return -1;
	for (int i = 0; i < p->nlimits; i++) {
		const struct check *c = &g.c[i];
		struct limiter_key *k = &keys[i];
		*k = (struct limiter_key){.remaining = c->remaining, .reset_ms = c->reset};
		switch (p->algo) {
		case POLICY_FUNNEL:
			k->used = c->limit - c->remaining;
			break;
		case POLICY_FIXED_WINDOW:
		case POLICY_SLIDING_COUNTER:
			k->used = p->algo == POLICY_FIXED_WINDOW ? c->used : c->est;
			k->start_ms = c->f.start / 1000;
			k->end_ms = (c->f.start + c->f.len) / 1000;
			break;
		case POLICY_SLIDING_WINDOW:
		case POLICY_CONCURRENCY:
			k->used = c->used;
			break;
		}
	}
	if (g.ban)
		keys[p->nlimits] = (struct limiter_key){.used = g.banned,
							.reset_ms = g.banned ? g.ban->retry : 0};
	return 0;
}

void limiter_state_free(struct limiter_state *st)
{
	free(st->log);
	free(st->holds);
	memset(st, 0, sizeof(*st));
}
