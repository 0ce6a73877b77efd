/*
 * rls.c - Envoy's ShouldRateLimit, pure: request bytes to a plan, the plan
 * and the decision to response bytes (rls.h).
 *
 * Each descriptor is looked up in the envoy rules of the request's domain
 * (envoy_rules.h), or takes the limit it carries; the descriptors with a
 * limit become the pairs of one MALLOW (all or nothing: OVER_LIMIT charges
 * none of them). A rule is a policy; its user is the descriptor's entries,
 * so every distinct set of values has its own counter, as in
 * envoyproxy/ratelimit.
 */
#include "rls.h"

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "decimal.h"
#include "grpc.h"
#include "rls_wire.h"

/* envoy_lookup joins an entry's key and value in a buffer that size */
_Static_assert(GRPC_MAX_MESSAGE <= ENVOY_ENTRY_MAX, "an entry always fits");
_Static_assert(RLS_WIRE_MAX_DESCRIPTORS >= RLS_MAX_DESCRIPTORS, "every descriptor taken is read");
_Static_assert(RLS_WIRE_MAX_ENTRIES >= ENVOY_MAX_DEPTH, "every entry taken is read");
_Static_assert(CMD_MULTI_MAX >= RLS_MAX_DESCRIPTORS,
	       "every descriptor may be a pair of one decision");

/* ---- the descriptors' users ---- */

static size_t put_escaped(char *out, size_t at, size_t cap, struct rls_wire_str str, int *fits)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p = (const unsigned char *)str.s;
	for (size_t i = 0; i < str.len; i++) {
		int plain = p[i] > 0x20 && p[i] < 0x7F && p[i] != '%' && p[i] != '|' && p[i] != '=';
		if (at + (plain ? 1 : 3) > cap) {
			*fits = 0;
			return at;
		}
		if (plain) {
			out[at++] = (char)p[i];
		} else {
			out[at++] = '%';
			out[at++] = hex[p[i] >> 4];
			out[at++] = hex[p[i] & 15];
		}
	}
	return at;
}

/* A hashed user's length: KEYS_USER_MAX - 1, which no user written out
 * in full has (they are shorter), so the two forms never meet. */
#define RLS_HASHED_USER_LEN (KEYS_USER_MAX - 1)

/*
 * The user of a descriptor: its entries as "key=value|key=value", with
 * '%', '|', '=', spaces and control bytes escaped, so distinct entries
 * never share a counter. When that is RLS_HASHED_USER_LEN or longer: its
 * first part, '#' and a hash of every entry, RLS_HASHED_USER_LEN bytes.
 * The hash is keyed with nothing secret (every daemon must agree), so
 * two long descriptors could be made to share a counter; whoever can
 * choose a value can as well send the other's value itself.
 */
static size_t descriptor_user(const struct rls_wire_descriptor *d, size_t first, char *out)
{
	char whole[8192];
	size_t n = 0;
	int fits = 1;
	for (size_t i = first; i < d->n_entries && fits; i++) {
		if (i > first && n < sizeof(whole))
			whole[n++] = '|';
		n = put_escaped(whole, n, sizeof(whole), d->entries[i].key, &fits);
		if (fits && n < sizeof(whole))
			whole[n++] = '=';
		n = put_escaped(whole, n, sizeof(whole), d->entries[i].value, &fits);
	}
	if (fits && n < RLS_HASHED_USER_LEN) {
		memcpy(out, whole, n);
		return n;
	}
	/* FNV-1a 64 over every byte of every entry, not only what fit */
	uint64_t h = 14695981039346656037ull;
	for (size_t i = first; i < d->n_entries; i++)
		for (int part = 0; part < 2; part++) {
			struct rls_wire_str str = part ? d->entries[i].value : d->entries[i].key;
			for (size_t j = 0; j < str.len; j++)
				h = (h ^ (unsigned char)str.s[j]) * 1099511628211ull;
			h = (h ^ 0xFF) * 1099511628211ull;
		}
	size_t keep = RLS_HASHED_USER_LEN - 17;
	memcpy(out, whole, keep);
	snprintf(out + keep, KEYS_USER_MAX - keep, "#%016llx", (unsigned long long)h);
	return RLS_HASHED_USER_LEN;
}

/* ---- the answer ---- */

/* Seconds until the fixed window of unit ends (never 0), as
 * envoyproxy/ratelimit reports a window's reset. */
static int64_t window_left_s(const struct envoy_limit *el, int64_t now_s)
{
	int64_t d = envoy_unit_seconds(el->unit);
	return d > 0 ? d - now_s % d : 0;
}

/* Whether status s speaks for the headers rather than than: over the limit
 * first, then the least remaining. */
static int tighter(const struct rls_wire_status *s, const struct rls_wire_status *than)
{
	int s_over = s->code == RLS_WIRE_OVER_LIMIT;
	int t_over = than->code == RLS_WIRE_OVER_LIMIT;
	if (s_over != t_over)
		return s_over;
	return s->limit_remaining < than->limit_remaining;
}

size_t rls_encode(const struct rls_plan *plan, const struct cmd_result *res, int allowed,
		  int headers, int64_t now_s, uint8_t *buf)
{
	/* one thread: nothing of these outlives the call */
	static struct rls_wire_status st[RLS_MAX_DESCRIPTORS];
	static char hval[4][24];
	struct rls_wire_header hdr[4];
	int nhdr = 0;
	int hdr_at = -1; /* the status the headers speak of */
	for (int i = 0; i < plan->n; i++) {
		const struct rls_desc *d = &plan->d[i];
		struct rls_wire_status *s = &st[i];
		*s = (struct rls_wire_status){.code = RLS_WIRE_OK};
		switch (d->kind) {
		case RLS_NONE:
			continue;
		case RLS_UNLIMITED:
			s->limit_remaining = UINT32_MAX;
			continue;
		case RLS_ZERO:
		case RLS_COUNTED:
			break;
		}
		s->has_limit = 1;
		s->requests_per_unit = d->limit->requests_per_unit;
		s->unit = (int)d->limit->unit;
		s->name = d->limit->name ? d->limit->name : "";
		int over;
		int64_t remaining, reset_ms;
		const struct cmd_pair_result *pr = d->kind == RLS_COUNTED && res && res->pairs
							   ? &res->pairs[d->pair - 1]
							   : NULL;
		if (d->kind == RLS_ZERO) {
			over = d->cost > 0;
			remaining = 0;
			reset_ms = window_left_s(d->limit, now_s) * 1000;
		} else if (pr && pr->known) {
			over = !pr->allowed;
			remaining = pr->remaining;
			reset_ms = pr->reset_ms;
		} else if (res && res->pair == d->pair && res->limit >= 0) {
			/* the pair the decision speaks of */
			over = !res->allowed;
			remaining = res->remaining;
			reset_ms = res->reset_ms;
		} else if (res && res->pair > 0) {
			/* decided by another pair (a cached denial): this one was
			 * not looked at */
			over = 0;
			remaining = 0;
			reset_ms = 0;
		} else {
			/* a fallback decision (the store could not decide) */
			over = !allowed;
			remaining = 0;
			reset_ms = 0;
		}
		if (over && d->limit->shadow)
			over = 0; /* shadow_mode: reported OK, remaining as it is */
		if (d->kind == RLS_COUNTED && plan->cost == 0)
			over = 0; /* a look (hits_addend 0) takes nothing: never over */
		if (over)
			s->code = RLS_WIRE_OVER_LIMIT;
		s->limit_remaining = remaining < 0	      ? 0
				     : remaining > UINT32_MAX ? UINT32_MAX
							      : (uint32_t)remaining;
		/* when what the key holds is gone (a fixed window's end, in
		 * the store's clock); a window not begun: a whole unit away */
		s->reset_seconds =
			reset_ms > 0 ? (reset_ms + 999) / 1000 : window_left_s(d->limit, now_s);
		if (hdr_at < 0 || tighter(s, &st[hdr_at]))
			hdr_at = i;
	}
	if (hdr_at >= 0 && headers != CONFIG_ENVOY_HEADERS_NONE) {
		int x = headers == CONFIG_ENVOY_HEADERS_XRATELIMIT;
		const struct rls_wire_status *s = &st[hdr_at];
		int64_t v[4] = {s->requests_per_unit, s->limit_remaining, s->reset_seconds,
				res ? (res->retry_after_ms + 999) / 1000 : 0};
		const char *names[4] = {x ? "X-RateLimit-Limit" : "RateLimit-Limit",
					x ? "X-RateLimit-Remaining" : "RateLimit-Remaining",
					x ? "X-RateLimit-Reset" : "RateLimit-Reset", "Retry-After"};
		int n = !allowed && res && res->retry_after_ms > 0 ? 4 : 3;
		for (; nhdr < n; nhdr++) {
			hval[nhdr][decimal_put(hval[nhdr], (uint64_t)v[nhdr])] = '\0';
			hdr[nhdr] = (struct rls_wire_header){names[nhdr], hval[nhdr]};
		}
	}
	/* at most 64 statuses of at most 128 bytes (a name is at most 64), 4 headers */
	return rls_wire_response(allowed ? RLS_WIRE_OK : RLS_WIRE_OVER_LIMIT, st, plan->n, hdr,
				 nhdr, buf);
}

/* The limit a descriptor carries, as a limit of its own; NULL with why. */
static const char *own_limit(struct rls_plan *plan, struct rls_desc *d,
			     const struct rls_wire_descriptor *in, struct rls_wire_str domain,
			     enum policy_algo algo)
{
	if (plan->nown == RLS_MAX_OWN)
		return "at most 16 descriptors with a limit of their own per request";
	struct envoy_limit *l = &plan->own[plan->nown];
	int unit = in->unit;
	memset(l, 0, sizeof(*l));
	/* rls.proto's RateLimit.Unit: SECOND (1) to YEAR (6), then WEEK (7),
	 * numbered as ours; a unit has seconds, UNKNOWN and other numbers none */
	if (envoy_unit_seconds(unit) == 0)
		return "a descriptor's limit needs a unit (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH "
		       "or YEAR)";
	if (in->requests_per_unit > POLICY_MAX_COUNT)
		return "a descriptor's limit allows at most 1000000000 per unit";
	l->unit = (enum envoy_unit)unit;
	l->requests_per_unit = in->requests_per_unit;
	struct policy *p = &l->policy;
	/* one name per domain, unit and count: two limits carried for the
	 * same entries never share a key (a funnel's has no window in it),
	 * nor a cached denial */
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < domain.len; i++)
		h = (h ^ (unsigned char)domain.s[i]) * 16777619u;
	uint32_t extra[2] = {(uint32_t)unit, in->requests_per_unit};
	for (size_t i = 0; i < sizeof(extra); i++)
		h = (h ^ ((const unsigned char *)extra)[i]) * 16777619u;
	snprintf(p->name, sizeof(p->name), "envoy-override-%08x", h);
	p->name_len = strlen(p->name);
	p->algo = algo;
	p->nlimits = 1;
	p->on_store_error = POLICY_ON_ERROR_INHERIT;
	p->shadow = -1;
	int64_t n = l->requests_per_unit;
	p->limits[0] = (struct policy_limit){
		.capacity = n, .count = n, .period_ms = envoy_unit_seconds(l->unit) * 1000};
	if (n > 0) {
		const char *why;
		if (policy_validate(p, &why) < 0)
			return why;
	}
	d->limit = l;
	d->own = ++plan->nown;
	return NULL;
}

/* Drops every limit another matched limit of the request replaces. */
static void apply_replaces(struct rls_plan *rc)
{
	for (int i = 0; i < rc->n; i++) {
		const struct envoy_limit *a = rc->d[i].limit;
		if (!a || !a->nreplaces)
			continue;
		for (int j = 0; j < rc->n; j++) {
			const struct envoy_limit *b = rc->d[j].limit;
			if (!b || !b->name)
				continue;
			for (size_t r = 0; r < a->nreplaces; r++)
				if (strcmp(a->replaces[r], b->name) == 0)
					rc->d[j].kind = RLS_NONE;
		}
	}
}


/* One descriptor of the request (the i-th): its rule, its own limit or none,
 * and its cost. NULL, or why the request is invalid. */
static const char *plan_descriptor(const struct config *cfg, const struct rls_wire_request *req,
				   const struct envoy_domain *dom, int i, struct rls_plan *plan)
{
	const struct rls_wire_descriptor *in = &req->d[i];
	struct rls_desc *d = &plan->d[i];
	*d = (struct rls_desc){.kind = RLS_NONE};
	if (in->n_entries == 0 || in->n_entries > ENVOY_MAX_DEPTH)
		return "a descriptor has 1 to 16 entries";
	int charge = in->entries[0].key.len == sizeof(RLS_CHARGE_KEY) - 1 &&
		     memcmp(in->entries[0].key.s, RLS_CHARGE_KEY, in->entries[0].key.len) == 0;
	if (i > 0 && charge != plan->charge)
		return "a request's descriptors are all charged (" RLS_CHARGE_KEY " first) or none";
	plan->charge = charge;
	d->first = charge;
	if (charge && in->n_entries == 1)
		return "a charged descriptor needs entries after " RLS_CHARGE_KEY;
	if (!dom)
		return NULL; /* an unknown domain limits nothing (its overrides neither) */
	if (in->has_limit) {
		const char *why = own_limit(plan, d, in, req->domain, cfg->envoy.algorithm);
		if (why)
			return why;
	} else {
		struct envoy_entry e[ENVOY_MAX_DEPTH];
		size_t ne = 0;
		for (size_t j = (size_t)d->first; j < in->n_entries; j++)
			e[ne++] = (struct envoy_entry){in->entries[j].key.s, in->entries[j].key.len,
						       in->entries[j].value.s,
						       in->entries[j].value.len};
		d->limit = envoy_lookup(dom, e, ne);
	}
	if (!d->limit)
		return NULL;
	d->cost = in->has_hits_addend ? in->hits_addend : (req->hits_addend ? req->hits_addend : 1);
	d->kind = d->limit->unlimited		     ? RLS_UNLIMITED
		  : d->limit->requests_per_unit == 0 ? RLS_ZERO
						     : RLS_COUNTED;
	return NULL;
}

/* The pairs of the decision: one per distinct (rule, user) of the counted
 * descriptors, whose users are copied into users. NULL, or why not. */
static const char *plan_pairs(const struct config *cfg, const struct rls_wire_request *req,
			      struct rls_plan *plan, char (*users)[KEYS_USER_MAX])
{
	int have_cost = 0;
	for (int i = 0; i < plan->n; i++) {
		struct rls_desc *d = &plan->d[i];
		if (d->kind == RLS_ZERO)
			plan->zero_over |= d->cost > 0 && !config_shadow(cfg, &d->limit->policy);
		if (d->kind != RLS_COUNTED)
			continue;
		if (have_cost && d->cost != plan->cost)
			return "descriptors with different hits_addend in one request are not "
			       "supported";
		plan->cost = d->cost;
		have_cost = 1;
		char user[KEYS_USER_MAX];
		size_t ulen = descriptor_user(&req->d[i], (size_t)d->first, user);
		for (int p = 0; p < plan->npairs && !d->pair; p++) {
			const struct rls_desc *o = &plan->d[plan->pair_desc[p]];
			/* the same keys: one rule (or overrides of one unit) and user */
			int same_limit =
				o->limit == d->limit ||
				(o->own && d->own && o->limit->unit == d->limit->unit &&
				 o->limit->requests_per_unit == d->limit->requests_per_unit);
			if (same_limit && plan->user_len[p] == ulen &&
			    memcmp(plan->user[p], user, ulen) == 0)
				d->pair = p + 1; /* decided once, for both */
		}
		if (d->pair)
			continue;
		int p = plan->npairs++; /* one descriptor, at most one pair */
		memcpy(users[p], user, ulen);
		plan->user[p] = users[p];
		plan->user_len[p] = ulen;
		plan->pair_desc[p] = i;
		d->pair = p + 1;
	}
	if (plan->charge && plan->npairs > 1)
		return "a charge names one limited descriptor (its rule and key)";
	return NULL;
}

int rls_plan(const struct config *cfg, const uint8_t *msg, size_t len, struct rls_plan *plan,
	     enum grpc_status *status, const char **why)
{
	/* one thread: nothing read outlives the plan but what it copies */
	static struct rls_wire_request wreq;
	struct rls_wire_request *req = &wreq;
	static char users[RLS_MAX_DESCRIPTORS][KEYS_USER_MAX];
	plan->n = plan->npairs = plan->nown = 0;
	plan->unknown_domain = plan->zero_over = plan->charge = 0;
	plan->cost = 0;
	*status = GRPC_INVALID_ARGUMENT;
	*why = NULL;
	if (rls_wire_request_read(msg, len, req) < 0)
		*why = "cannot decode the RateLimitRequest";
	else if (req->domain.len == 0)
		*why = "rate limit domain must not be empty";
	else if (req->n_descriptors == 0)
		*why = "rate limit descriptor list must not be empty";
	else if (req->n_descriptors > RLS_MAX_DESCRIPTORS)
		*why = "too many descriptors (at most 64)";
	if (*why)
		return -1;
	const struct envoy_domain *dom =
		envoy_domain_find(cfg->envoy.rules, req->domain.s, req->domain.len);
	plan->unknown_domain = !dom;
	plan->n = (int)req->n_descriptors;
	for (int i = 0; i < plan->n; i++)
		if ((*why = plan_descriptor(cfg, req, dom, i, plan)) != NULL)
			return -1;
	apply_replaces(plan);
	*why = plan_pairs(cfg, req, plan, users);
	return *why ? -1 : 0;
}

void rls_request(const struct rls_plan *plan, struct cmd_pair *pairs, struct cmd_request *req)
{
	memset(req, 0, sizeof(*req));
	/* hits_addend 0, or a limit of 0 that denies anyway: look, take nothing */
	req->verb = plan->cost && !plan->zero_over ? CMD_MALLOW : CMD_MPEEK;
	req->cost = plan->cost == 0		? 1
		    : plan->cost > CMD_COST_MAX ? CMD_COST_MAX
						: (int64_t)plan->cost;
	if (plan->npairs == 1) {
		/* one pair: a plain ALLOW or PEEK, the cheapest path there is (a
		 * charged one: a CHARGE, unless its cost is 0) */
		const struct policy *pol = &plan->d[plan->pair_desc[0]].limit->policy;
		req->verb = req->verb == CMD_MALLOW ? (plan->charge ? CMD_CHARGE : CMD_ALLOW)
						    : CMD_PEEK;
		req->user = plan->user[0];
		req->user_len = plan->user_len[0];
		req->action = pol->name;
		req->action_len = pol->name_len;
		req->policy = pol;
		return;
	}
	req->npairs = plan->npairs;
	for (int p = 0; p < plan->npairs; p++) {
		const struct policy *pol = &plan->d[plan->pair_desc[p]].limit->policy;
		pairs[p] = (struct cmd_pair){plan->user[p], plan->user_len[p], pol->name,
					     pol->name_len, pol};
	}
	req->many = pairs;
}
