/* override.c - a policy's per-user exceptions: sorted once, found by binary search. */
#include "override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int override_add(struct override_set *s, const char *pattern, size_t len, int prefix,
		 enum override_kind kind, struct policy *policy)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct override *v = realloc(s->v, cap * sizeof(*v));
		if (!v) {
			free(policy);
			return -1;
		}
		s->v = v;
		s->cap = cap;
	}
	char *copy = malloc(len + 1);
	if (!copy) {
		free(policy);
		return -1;
	}
	memcpy(copy, pattern, len);
	copy[len] = '\0';
	s->v[s->n++] = (struct override){copy, len, prefix, kind, policy};
	return 0;
}

static int bytes_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int d = memcmp(a, b, al < bl ? al : bl);
	if (d)
		return d;
	return al < bl ? -1 : al > bl;
}

/* Exact users first, by bytes; then prefixes, longest first, by bytes. */
static int order(const void *x, const void *y)
{
	const struct override *a = x, *b = y;
	if (a->prefix != b->prefix)
		return a->prefix - b->prefix;
	if (a->prefix && a->len != b->len)
		return a->len > b->len ? -1 : 1;
	return bytes_cmp(a->pattern, a->len, b->pattern, b->len);
}

int override_finish(struct override_set *s, const struct override **dup)
{
	if (s->n > 1)
		qsort(s->v, s->n, sizeof(*s->v), order);
	s->nexact = 0;
	while (s->nexact < s->n && !s->v[s->nexact].prefix)
		s->nexact++;
	for (size_t i = 1; i < s->n; i++)
		if (order(&s->v[i - 1], &s->v[i]) == 0) {
			*dup = &s->v[i];
			return 1;
		}
	free(s->groups);
	s->groups = malloc((s->n - s->nexact + 1) * sizeof(*s->groups));
	if (!s->groups)
		return -1;
	s->ngroups = 0;
	for (size_t i = s->nexact; i < s->n; i++)
		if (i == s->nexact || s->v[i].len != s->v[i - 1].len)
			s->groups[s->ngroups++] = i;
	s->groups[s->ngroups] = s->n;
	return 0;
}

/* The entry of v[lo..hi) whose pattern is key[0..len), or NULL. */
static const struct override *search(const struct override *v, size_t lo, size_t hi,
				     const char *key, size_t len)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int d = bytes_cmp(v[mid].pattern, v[mid].len, key, len);
		if (d == 0)
			return &v[mid];
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct override *override_find(const struct override_set *s, const char *user, size_t len)
{
	if (!s || s->n == 0)
		return NULL;
	const struct override *o = search(s->v, 0, s->nexact, user, len);
	if (o)
		return o;
	for (size_t g = 0; g < s->ngroups; g++) {
		size_t plen = s->v[s->groups[g]].len;
		if (plen > len)
			continue;
		o = search(s->v, s->groups[g], s->groups[g + 1], user, plen);
		if (o)
			return o;
	}
	return NULL;
}

int override_set_equal(const struct override_set *a, const struct override_set *b)
{
	size_t na = a ? a->n : 0, nb = b ? b->n : 0;
	if (na != nb)
		return 0;
	for (size_t i = 0; i < na; i++) {
		const struct override *x = &a->v[i], *y = &b->v[i];
		if (x->prefix != y->prefix || x->kind != y->kind ||
		    bytes_cmp(x->pattern, x->len, y->pattern, y->len) != 0)
			return 0;
		if (x->kind == OVERRIDE_LIMITS && !policy_equal(x->policy, y->policy))
			return 0;
	}
	return 1;
}

void override_set_free(struct override_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].pattern);
		free(s->v[i].policy);
	}
	free(s->v);
	free(s->groups);
	free(s);
}

static int fail_spec(char *err, size_t errlen, const char *why)
{
	snprintf(err, errlen, "%s", why);
	return -1;
}

int override_spec_parse(const struct policy *p, const char *spec, size_t len,
			enum override_kind *kind, struct policy **policy, char *err, size_t errlen)
{
	*policy = NULL;
	if (len == 9 && memcmp(spec, "unlimited", 9) == 0) {
		*kind = OVERRIDE_UNLIMITED;
		return 0;
	}
	if (len == 7 && memcmp(spec, "blocked", 7) == 0) {
		*kind = OVERRIDE_BLOCKED;
		return 0;
	}
	struct policy d = *p;
	d.overrides = NULL;
	d.nlimits = 0;
	memset(d.limits, 0, sizeof(d.limits));
	int funnel = policy_algo_shape(p->algo) == POLICY_SHAPE_RATE, zoned = 0;
	size_t i = 0;
	while (i <= len) {
		size_t start = i;
		while (i < len && spec[i] != ',')
			i++;
		const char *tok = spec + start;
		size_t tl = i - start;
		i++; /* the ',' (or past the end) */
		char why[160];
		if (!funnel && tl >= 9 && memcmp(tok, "timezone=", 9) == 0) {
			/* the calendar windows' zone, as a file's override's
			 * `timezone:` (the policy's otherwise); whether tzdata has
			 * it is the caller's to ask (calendar_tz_check) */
			if (zoned)
				return fail_spec(err, errlen, "at most one timezone=");
			if (!calendar_tz_name_valid(tok + 9, tl - 9))
				return fail_spec(err, errlen,
						 "timezone= takes a name of tzdata: "
						 "timezone=Europe/Berlin");
			memcpy(d.timezone, tok + 9, tl - 9);
			d.timezone[tl - 9] = '\0';
			zoned = 1;
			continue;
		}
		if (funnel && d.nlimits == 0 && d.limits[0].capacity == 0) {
			/* the capacity: 1 to POLICY_MAX_COUNT */
			int64_t c = 0;
			for (size_t k = 0; k < tl; k++) {
				if (tok[k] < '0' || tok[k] > '9' || c > POLICY_MAX_COUNT)
					return fail_spec(err, errlen,
							 "a funnel's override is CAPACITY,RATE "
							 "(15,30/1m), unlimited or blocked");
				c = c * 10 + (tok[k] - '0');
			}
			if (tl == 0 || c < 1 || c > POLICY_MAX_COUNT)
				return fail_spec(err, errlen,
						 "a funnel's capacity is 1 to 1000000000");
			d.limits[0].capacity = c;
			continue;
		}
		if (d.nlimits == (funnel ? 1 : POLICY_MAX_LIMITS))
			return fail_spec(err, errlen,
					 funnel ? "a funnel's override is CAPACITY,RATE (15,30/1m)"
						: "at most 8 limits");
		struct policy_limit *l = &d.limits[d.nlimits];
		if ((funnel ? policy_parse_rate(tok, tl, &l->count, &l->period_ms, why, sizeof(why))
			    : policy_parse_limit(tok, tl, l, why, sizeof(why))) < 0) {
			snprintf(err, errlen, "%s; an override is unlimited, blocked or %s", why,
				 funnel ? "CAPACITY,RATE (15,30/1m)"
					: "RATE[,RATE]... (5/1m,100/1h)");
			return -1;
		}
		if (!funnel)
			l->capacity = l->count;
		d.nlimits++;
	}
	if (d.nlimits == 0)
		return fail_spec(err, errlen,
				 funnel ? "a funnel's override is CAPACITY,RATE"
					: "an override needs a rate");
	int calendar = 0;
	for (int k = 0; k < d.nlimits; k++)
		calendar |= d.limits[k].calendar != CALENDAR_NONE;
	if (zoned && !calendar)
		return fail_spec(err, errlen,
				 "timezone= is for calendar limits (600/day, 10000/month): "
				 "these have none");
	const char *why;
	if (policy_validate(&d, &why) < 0)
		return fail_spec(err, errlen, why);
	struct policy *out = malloc(sizeof(*out));
	if (!out)
		return fail_spec(err, errlen, "out of memory");
	*out = d;
	*policy = out;
	*kind = OVERRIDE_LIMITS;
	return 0;
}
