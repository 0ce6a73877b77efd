/* config_policy.c - the schema of policies: limits or a funnel, ban, shadow, overrides. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"
#include "keys.h"
#include "override.h"

/* One policy while the policies mapping is read; the key mark survives the
 * sort so a duplicate name can be reported where it occurs. */
struct pentry {
	struct policy p;
	yaml_mark_t mark;
	yaml_mark_t store_mark; /* its store key's, when p.store is set */
};

/* Policy mapping form, gathered before it can be checked: which keys are
 * allowed depends on `algorithm`, which may come last. */
struct rate {
	int64_t count, period_ms;
};

struct override_form;

struct policy_form {
	enum policy_algo algo;
	int nlimits;
	struct policy_limit limits[POLICY_MAX_LIMITS];
	yaml_mark_t limit_marks[POLICY_MAX_LIMITS];
	int64_t capacity;
	struct rate rate;
	int64_t limit, lease_ms; /* concurrency */
	struct policy_delay delay;
	struct policy_blocks blocks;
	enum policy_on_error on_error;
	int shadow;
	struct policy_ban ban;
	char timezone[CALENDAR_TZ_MAX + 1]; /* calendar windows' */
	int64_t hold_ms;
	char store[POLICY_STORE_NAME_MAX + 1]; /* store: NAME; empty: the default */
	yaml_mark_t store_mark;
	/* overrides as read; made into the policy's override set once its
	 * algorithm and limits are known */
	struct override_form *ov;
	size_t nov, capov;
	yaml_mark_t ov_mark;
};

/* One entry under a policy's overrides, as read. */
struct override_form {
	char *pattern; /* without a final '*' */
	size_t len;
	int prefix;
	char shown[72]; /* for messages: printable, cut at 64 bytes, with its '*' */
	enum override_kind kind;
	struct policy_form f; /* OVERRIDE_LIMITS: limits, or capacity and rate */
	unsigned seen;	      /* of them, which were given (1u << PK_...) */
	yaml_mark_t mark;     /* the value */
};

/* One rate string at the current event, appended to f; a bad one counts
 * too, towards POLICY_MAX_LIMITS (yp_seq checks there is room). */
static int add_limit(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct policy_form *f = dst;
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	(void)i;
	int rc = yp_scalar(P, k->name, "a rate such as 5/60s", &s, &len);
	struct policy_limit *l = &f->limits[f->nlimits];
	if (rc == 0 && policy_parse_limit(s, len, l, why, sizeof(why)) < 0)
		rc = yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	l->capacity = l->count;
	f->limit_marks[f->nlimits++] = P->ev.start_mark;
	return rc;
}

/* A single rate or a list of rates; k->max is POLICY_MAX_LIMITS. */
static int set_limits(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return add_limit(P, k, f, 0);
	yaml_mark_t start = P->ev.start_mark;
	size_t n;
	if (yp_seq(P, k, "limits", add_limit, f, &n) < 0)
		return -1;
	if (f->nlimits == 0)
		return yp_failk(P, start, k->name, "at least one rate is required");
	return 0;
}

static int set_rate(struct yparser *P, const struct ykey *k, void *dst)
{
	struct rate *r = dst;
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	if (yp_scalar(P, k->name, "a rate such as 30/60s", &s, &len) < 0)
		return -1;
	if (policy_parse_rate(s, len, &r->count, &r->period_ms, why, sizeof(why)) < 0)
		return yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	return 0;
}

enum { BK_AFTER, BK_WITHIN, BK_FOR, BK_N };

static const struct ykey ban_keys[BK_N] = {
	[BK_AFTER] = {"after", yp_set_int64, offsetof(struct policy_ban, after), 1,
		      POLICY_BAN_MAX_AFTER, YP_PER_POLICY, NULL, NULL},
	[BK_WITHIN] = {"within", yp_set_duration, offsetof(struct policy_ban, within_ms), 1,
		       POLICY_BAN_MAX_WITHIN_MS, YP_PER_POLICY, NULL, NULL},
	[BK_FOR] = {"for", yp_set_duration, offsetof(struct policy_ban, for_ms), 1,
		    POLICY_MAX_PERIOD_MS, YP_PER_POLICY, NULL, NULL},
};

enum { DK_MAX, DK_N };

static const struct ykey delay_keys[DK_N] = {
	[DK_MAX] = {"max", yp_set_duration, offsetof(struct policy_delay, max_ms), 1,
		    POLICY_DELAY_MAX_MS, YP_PER_POLICY, NULL, NULL},
};

/* delay: {max: DURATION}. */
static int set_delay(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[DK_N], start;
	if (yp_section(P, k, "expected a mapping {max: DURATION}", delay_keys, DK_N, dst, &seen,
		       marks, &start) < 0)
		return -1;
	if (!(seen & (1u << DK_MAX)))
		return yp_fail_section(P, start, "a delay needs max (the longest wait: 500ms)");
	return 0;
}

enum { XK_MAX, XK_TTL, XK_N };

/* max: N, or auto (sized by rate and round trip: blocks.h) */
static int set_blocks_max(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_blocks *b = (struct policy_blocks *)((char *)dst - k->offset);
	if (P->ev.type == YAML_SCALAR_EVENT && P->ev.data.scalar.length == 4 &&
	    memcmp(P->ev.data.scalar.value, "auto", 4) == 0) {
		b->max = POLICY_BLOCKS_MAX;
		b->autosize = 1;
		return 0;
	}
	b->autosize = 0;
	const char *v =
		P->ev.type == YAML_SCALAR_EVENT ? (const char *)P->ev.data.scalar.value : "";
	if (*v < '0' || *v > '9')
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be an integer from 1 to %d, or auto", POLICY_BLOCKS_MAX);
	return yp_set_int64(P, k, dst);
}

static const struct ykey blocks_keys[XK_N] = {
	[XK_MAX] = {"max", set_blocks_max, offsetof(struct policy_blocks, max), 1,
		    POLICY_BLOCKS_MAX, YP_PER_POLICY, NULL, NULL},
	[XK_TTL] = {"ttl", yp_set_duration, offsetof(struct policy_blocks, ttl_ms), 1,
		    POLICY_BLOCKS_TTL_MAX_MS, YP_PER_POLICY, NULL, NULL},
};

/* blocks: {max: N, ttl: DURATION}. */
static int set_blocks(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[XK_N], start;
	if (yp_section(P, k, "expected a mapping {max: N, ttl: DURATION}", blocks_keys, XK_N, dst,
		       &seen, marks, &start) < 0)
		return -1;
	if (!(seen & (1u << XK_MAX)))
		return yp_fail_section(P, start,
				       "blocks need max (the most units taken at once: 1000, or "
				       "auto)");
	return 0;
}

/* timezone: a name of tzdata, for calendar windows (lib/calendar.h). */
static int set_timezone(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	char why[POLICY_ERR_MAX], tz[CALENDAR_TZ_MAX + 2];
	if (yp_scalar(P, k->name, "a time zone such as Europe/Berlin", &s, &len) < 0)
		return -1;
	snprintf(tz, sizeof(tz), "%.*s", (int)(len < sizeof(tz) - 1 ? len : sizeof(tz) - 1), s);
	if (len > CALENDAR_TZ_MAX || memchr(s, '\0', len) ||
	    calendar_tz_check(tz, why, sizeof(why)) < 0) {
		if (len > CALENDAR_TZ_MAX)
			snprintf(why, sizeof(why), "a time zone's name is at most %d bytes",
				 CALENDAR_TZ_MAX);
		return yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	}
	memcpy(dst, tz, strlen(tz) + 1);
	return 0;
}

/* ban: {after: N, within: DURATION, for: DURATION}, all three required. */
static int set_ban(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[BK_N], start;
	if (yp_section(P, k, "expected a mapping {after, within, for}", ban_keys, BK_N, dst, &seen,
		       marks, &start) < 0)
		return -1;
	for (int i = 0; i < BK_N; i++)
		if (!(seen & (1u << i)))
			return yp_fail_section(P, start, "a ban needs after, within and for");
	return 0;
}

enum {
	PK_ALGORITHM,
	PK_LIMITS,
	PK_CAPACITY,
	PK_RATE,
	PK_ON_ERROR,
	PK_SHADOW,
	PK_BAN,
	PK_OVERRIDES,
	PK_LIMIT,
	PK_LEASE,
	PK_DELAY,
	PK_TIMEZONE,
	PK_HOLD,
	PK_BLOCKS,
	PK_STORE,
	PK_N
};

static int set_overrides(struct yparser *P, const struct ykey *k, void *dst);

/* store: NAME, a store of stores: (checked once the whole file is read:
 * config_policy_check_stores). */
static int set_store(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst; /* the key's offset is 0: the mark goes there too */
	if (config_store_name(P, k, f->store) < 0)
		return -1;
	f->store_mark = P->ev.start_mark;
	return 0;
}

/* limit: a number of leases; a rate written there meant limits. */
static int set_lease_limit(struct yparser *P, const struct ykey *k, void *dst)
{
	if (P->ev.type == YAML_SCALAR_EVENT &&
	    memchr(P->ev.data.scalar.value, '/', P->ev.data.scalar.length))
		return yp_failk(P, P->ev.start_mark, k->name,
				"a concurrency policy's limit is a number of leases; a rate "
				"goes in limits");
	return yp_set_int64(P, k, dst);
}

static const struct ykey policy_keys[PK_N] = {
	[PK_ALGORITHM] = {"algorithm", yp_set_enum, offsetof(struct policy_form, algo), 0, 0,
			  YP_PER_POLICY, NULL, policy_algo_names},
	[PK_LIMITS] = {"limits", set_limits, 0, 0, POLICY_MAX_LIMITS, YP_PER_POLICY, NULL, NULL},
	[PK_CAPACITY] = {"capacity", yp_set_int64, offsetof(struct policy_form, capacity), 1,
			 POLICY_MAX_COUNT, YP_PER_POLICY, NULL, NULL},
	[PK_RATE] = {"rate", set_rate, offsetof(struct policy_form, rate), 0, 0, YP_PER_POLICY,
		     NULL, NULL},
	[PK_SHADOW] = {"shadow", yp_set_bool, offsetof(struct policy_form, shadow), 0, 0,
		       YP_PER_POLICY, NULL, NULL},
	[PK_BAN] = {"ban", set_ban, offsetof(struct policy_form, ban), 0, 0, YP_PER_POLICY, NULL,
		    NULL},
	[PK_OVERRIDES] = {"overrides", set_overrides, 0, 0, OVERRIDE_MAX, YP_PER_POLICY, NULL,
			  NULL},
	[PK_ON_ERROR] = {"on_store_error", yp_set_enum, offsetof(struct policy_form, on_error), 0,
			 0, YP_PER_POLICY, NULL, policy_on_error_names},
	[PK_LIMIT] = {"limit", set_lease_limit, offsetof(struct policy_form, limit), 1,
		      POLICY_CONCURRENCY_MAX, YP_PER_POLICY, NULL, NULL},
	[PK_LEASE] = {"lease", yp_set_duration, offsetof(struct policy_form, lease_ms), 1000,
		      24LL * 3600 * 1000, YP_PER_POLICY, NULL, NULL},
	[PK_DELAY] = {"delay", set_delay, offsetof(struct policy_form, delay), 0, 0, YP_PER_POLICY,
		      NULL, NULL},
	[PK_TIMEZONE] = {"timezone", set_timezone, offsetof(struct policy_form, timezone), 0, 0,
			 YP_PER_POLICY, NULL, NULL},
	[PK_HOLD] = {"hold", yp_set_duration, offsetof(struct policy_form, hold_ms), 1000,
		     POLICY_HOLD_MAX_MS, YP_PER_POLICY, NULL, NULL},
	[PK_BLOCKS] = {"blocks", set_blocks, offsetof(struct policy_form, blocks), 0, 0,
		       YP_PER_POLICY, NULL, NULL},
	[PK_STORE] = {"store", set_store, 0, 0, 0, YP_PER_POLICY, NULL, NULL},
};

/* The keys an override's mapping may have: the policy's limits, and a
 * time zone of its own for calendar windows (a customer's). */
static const struct ykey override_keys[4] = {
	[0] = {"limits", set_limits, 0, 0, POLICY_MAX_LIMITS, YP_PER_POLICY, NULL, NULL},
	[1] = {"capacity", yp_set_int64, offsetof(struct policy_form, capacity), 1,
	       POLICY_MAX_COUNT, YP_PER_POLICY, NULL, NULL},
	[2] = {"rate", set_rate, offsetof(struct policy_form, rate), 0, 0, YP_PER_POLICY, NULL,
	       NULL},
	[3] = {"timezone", set_timezone, offsetof(struct policy_form, timezone), 0, 0,
	       YP_PER_POLICY, NULL, NULL},
};
static const int override_pk[4] = {PK_LIMITS, PK_CAPACITY, PK_RATE, PK_TIMEZONE};

/* One override: its user (or prefix*) and what applies to it, read as given. */
static int override_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	if (P->ev.type != YAML_SCALAR_EVENT) {
		yp_fail_section(P, km, "an override's user must be a plain string");
		return YP_BAD_KEY;
	}
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	int prefix = len > 0 && s[len - 1] == '*';
	if (prefix)
		len--;
	if ((len == 0 && !prefix) || len > KEYS_USER_MAX || memchr(s, '\0', len)) {
		yp_fail_section(P, km,
				"an override's user is 1 to %d bytes, or a prefix ending in '*'",
				KEYS_USER_MAX);
		return YP_BAD_KEY;
	}
	if (yp_grow((void **)&f->ov, &f->capov, f->nov, sizeof(*f->ov)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	struct override_form *o = &f->ov[f->nov];
	memset(o, 0, sizeof(*o));
	if (!(o->pattern = malloc(len + 1)))
		return yp_fail_fatal(P, km, "out of memory");
	memcpy(o->pattern, s, len);
	o->pattern[len] = '\0';
	o->len = len;
	o->prefix = prefix;
	size_t w = 0; /* a user may hold any bytes; an error line may not */
	for (size_t i = 0; i < len && w < 64; i++)
		o->shown[w++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (len > 64)
		w += (size_t)snprintf(o->shown + w, sizeof(o->shown) - w, "...");
	if (prefix)
		o->shown[w++] = '*';
	o->shown[w] = '\0';
	f->nov++;
	if (yp_next(P) < 0)
		return -1;
	o->mark = P->ev.start_mark;
	o->kind = OVERRIDE_LIMITS;
	/* errors name the user: policies.<name>.overrides.<user> */
	struct ykey named = override_keys[0];
	named.name = o->shown;
	switch (P->ev.type) {
	case YAML_SCALAR_EVENT: {
		const char *v = (const char *)P->ev.data.scalar.value;
		size_t vl = P->ev.data.scalar.length;
		if (vl == 9 && memcmp(v, "unlimited", 9) == 0) {
			o->kind = OVERRIDE_UNLIMITED;
			return 0;
		}
		if (vl == 7 && memcmp(v, "blocked", 7) == 0) {
			o->kind = OVERRIDE_BLOCKED;
			return 0;
		}
		o->seen = 1u << PK_LIMITS;
		return set_limits(P, &named, &o->f);
	}
	case YAML_SEQUENCE_START_EVENT:
		o->seen = 1u << PK_LIMITS;
		return set_limits(P, &named, &o->f);
	case YAML_MAPPING_START_EVENT: {
		unsigned seen;
		yaml_mark_t marks[4];
		if (yp_map(P, o->shown, override_keys, 4, &o->f, &seen, marks) < 0)
			return -1;
		for (int i = 0; i < 4; i++)
			if (seen & (1u << i))
				o->seen |= 1u << override_pk[i];
		return 0;
	}
	default:
		return yp_failk(P, o->mark, o->shown,
				"expected limits, {limits: ...}, {capacity, rate}, unlimited or "
				"blocked");
	}
}

static int set_overrides(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of users to limits, unlimited or blocked");
	f->ov_mark = P->ev.start_mark;
	size_t n;
	return yp_dict(P, k, "overrides", override_entry, f, &n);
}

static void override_forms_free(struct policy_form *f)
{
	for (size_t i = 0; i < f->nov; i++)
		free(f->ov[i].pattern);
	free(f->ov);
	f->ov = NULL;
	f->nov = 0;
}

/* The policy an override's limits make: p with other limits, checked as p's. */
static int override_policy(struct yparser *P, const struct policy *p, const char *name,
			   const struct override_form *o, struct policy **out)
{
	const struct policy_form *of = &o->f;
	const char *algo = policy_algo_name(p->algo);
	char at[POLICY_NAME_MAX + 96]; /* policies.<name>.overrides.<user> */
	snprintf(at, sizeof(at), "policies.%s.overrides.%s", name, o->shown);
	switch (policy_algo_shape(p->algo)) {
	case POLICY_SHAPE_RATE:
		if (o->seen & (1u << PK_LIMITS))
			return yp_fail(P, o->mark,
				       "%s: a funnel's override is {capacity, "
				       "rate}",
				       at);
		if ((o->seen & ((1u << PK_CAPACITY) | (1u << PK_RATE))) !=
		    ((1u << PK_CAPACITY) | (1u << PK_RATE)))
			return yp_fail(P, o->mark,
				       "%s: a funnel's override needs a capacity "
				       "and a rate",
				       at);
		break;
	case POLICY_SHAPE_LEASE:
		return yp_fail(P, o->mark, "%s: a concurrency policy has no overrides", at);
	case POLICY_SHAPE_WINDOWS:
		if (o->seen & ((1u << PK_CAPACITY) | (1u << PK_RATE)))
			return yp_fail(P, o->mark,
				       "%s: a %s's override takes limits, not "
				       "capacity or rate",
				       at, algo);
		if (!(o->seen & (1u << PK_LIMITS)) || of->nlimits == 0)
			return yp_fail(P, o->mark, "%s: limits are required", at);
		break;
	}
	struct policy *d = malloc(sizeof(*d));
	if (!d)
		return yp_fail_fatal(P, o->mark, "out of memory");
	*d = *p;
	d->overrides = NULL;
	if (policy_algo_shape(p->algo) == POLICY_SHAPE_RATE) {
		d->nlimits = 1;
		d->limits[0] = (struct policy_limit){.capacity = of->capacity,
						     .count = of->rate.count,
						     .period_ms = of->rate.period_ms};
	} else {
		d->nlimits = of->nlimits;
		memcpy(d->limits, of->limits, sizeof(d->limits));
	}
	if (o->seen & (1u << PK_TIMEZONE)) /* the customer's own */
		memcpy(d->timezone, of->timezone, sizeof(d->timezone));
	const char *why;
	if (policy_validate(d, &why) < 0) {
		free(d);
		return yp_fail(P, o->mark, "%s: %s", at, why);
	}
	*out = d;
	return 0;
}

/* Makes p's override set from what was read. */
static int make_overrides(struct yparser *P, struct policy *p, const char *name,
			  const struct policy_form *f)
{
	if (f->nov == 0)
		return 0;
	struct override_set *set = calloc(1, sizeof(*set));
	if (!set)
		return yp_fail_fatal(P, f->ov_mark, "out of memory");
	int rc = 0;
	for (size_t i = 0; i < f->nov && rc == 0; i++) {
		const struct override_form *o = &f->ov[i];
		struct policy *d = NULL;
		if (o->kind == OVERRIDE_LIMITS && override_policy(P, p, name, o, &d) < 0) {
			rc = -1;
			break;
		}
		if (override_add(set, o->pattern, o->len, o->prefix, o->kind, d) < 0)
			rc = yp_fail_fatal(P, o->mark, "out of memory");
	}
	const struct override *dup = NULL;
	if (rc == 0) {
		int r = override_finish(set, &dup);
		if (r < 0)
			rc = yp_fail_fatal(P, f->ov_mark, "out of memory");
		else if (r > 0) {
			const char *shown = "?";
			for (size_t i = 0; i < f->nov; i++)
				if (f->ov[i].prefix == dup->prefix && f->ov[i].len == dup->len &&
				    memcmp(f->ov[i].pattern, dup->pattern, dup->len) == 0)
					shown = f->ov[i].shown;
			rc = yp_fail(P, f->ov_mark, "policies.%s.overrides: \"%s\" is given twice",
				     name, shown);
		}
	}
	if (rc < 0) {
		override_set_free(set);
		return -1;
	}
	p->overrides = set;
	return 0;
}

/* Mapping form: decides what the gathered keys mean once algorithm is known. */
static int policy_mapping(struct yparser *P, struct policy_form *f, const char *name)
{
	yaml_mark_t start = P->ev.start_mark;
	unsigned seen;
	yaml_mark_t marks[PK_N];
	if (yp_map(P, name, policy_keys, PK_N, f, &seen, marks) < 0)
		return -1;
	if ((seen & (1u << PK_DELAY)) && policy_algo_shape(f->algo) == POLICY_SHAPE_LEASE)
		return yp_failk(P, marks[PK_DELAY], "delay",
				"a concurrency policy does not delay (a lease is held, not "
				"spent: ACQUIRE again after its retry hint)");
	if (seen & (1u << PK_BLOCKS)) {
		const char *why = NULL;
		if (f->algo == POLICY_SLIDING_WINDOW)
			why = "a sliding_window keeps one entry per unit, so a block would save "
			      "Redis nothing: use sliding_window_counter or fixed_window";
		else if (policy_algo_shape(f->algo) == POLICY_SHAPE_LEASE)
			why = "a concurrency policy has no blocks (a lease is one already)";
		else if (seen & (1u << PK_BAN))
			why = "a policy with a ban has no blocks (a ban must see every request)";
		else if (f->blocks.ttl_ms > 0 && f->algo != POLICY_FUNNEL)
			why = "a window's block lasts until its window ends; ttl is a funnel's";
		if (why)
			return yp_failk(P, marks[PK_BLOCKS], "blocks", "%s", why);
	}
	int lease_keys = (seen & (1u << PK_LIMIT)) || (seen & (1u << PK_LEASE));
	if (lease_keys && policy_algo_shape(f->algo) != POLICY_SHAPE_LEASE) {
		int at = (seen & (1u << PK_LIMIT)) ? PK_LIMIT : PK_LEASE;
		return yp_failk(P, marks[at], policy_keys[at].name,
				"only a concurrency policy has a %s (algorithm: concurrency)",
				policy_keys[at].name);
	}
	switch (policy_algo_shape(f->algo)) {
	case POLICY_SHAPE_LEASE:
		for (int k = PK_LIMITS; k <= PK_RATE; k++)
			if (seen & (1u << k))
				return yp_failk(P, marks[k], policy_keys[k].name,
						"a concurrency policy takes limit and lease, not "
						"%s",
						policy_keys[k].name);
		if (seen & (1u << PK_BAN))
			return yp_failk(P, marks[PK_BAN], "ban",
					"a concurrency policy has no ban (a lease denied "
					"is not an abuse to punish)");
		if (seen & (1u << PK_SHADOW))
			return yp_failk(P, marks[PK_SHADOW], "shadow",
					"a concurrency policy has no shadow mode");
		if (seen & (1u << PK_OVERRIDES))
			return yp_failk(P, marks[PK_OVERRIDES], "overrides",
					"a concurrency policy has no overrides (yet): give the "
					"users another policy");
		if (!(seen & (1u << PK_LIMIT)))
			return yp_fail_section(P, start, "a concurrency policy needs a limit");
		if (!(seen & (1u << PK_LEASE)))
			return yp_fail_section(P, start,
					       "a concurrency policy needs a lease (how long "
					       "one is held at most: 30s)");
		f->limits[0].capacity = f->limit;
		f->limits[0].count = f->limit;
		f->limits[0].period_ms = f->lease_ms;
		f->limit_marks[0] = marks[PK_LIMIT];
		f->nlimits = 1;
		break;
	case POLICY_SHAPE_RATE:
		if (seen & (1u << PK_LIMITS))
			return yp_failk(P, marks[PK_LIMITS], "limits",
					"a funnel takes capacity and rate, not limits");
		if (!(seen & (1u << PK_CAPACITY)))
			return yp_fail_section(P, start, "a funnel needs a capacity");
		if (!(seen & (1u << PK_RATE)))
			return yp_fail_section(P, start, "a funnel needs a rate");
		f->limits[0].capacity = f->capacity;
		f->limits[0].count = f->rate.count;
		f->limits[0].period_ms = f->rate.period_ms;
		f->limit_marks[0] = marks[PK_RATE];
		f->nlimits = 1;
		break;
	case POLICY_SHAPE_WINDOWS:
		if (seen & (1u << PK_CAPACITY))
			return yp_failk(P, marks[PK_CAPACITY], "capacity",
					"only a funnel has a capacity (algorithm: funnel)");
		if (seen & (1u << PK_RATE))
			return yp_failk(P, marks[PK_RATE], "rate",
					"only a funnel has a rate; a %s takes limits",
					policy_algo_name(f->algo));
		if (!(seen & (1u << PK_LIMITS)))
			return yp_fail_section(P, start, "a %s needs limits",
					       policy_algo_name(f->algo));
		break;
	}
	return 0;
}

static int policy_from_form(struct yparser *P, struct policy *p, const char *name,
			    const struct policy_form *f);

/* The value of one entry under policies: a rate, a list of rates or a mapping. */
static int parse_policy(struct yparser *P, struct policy *p, const char *name,
			yaml_mark_t *store_mark)
{
	struct policy_form f;
	memset(&f, 0, sizeof(f));
	f.algo = POLICY_SLIDING_WINDOW;
	f.on_error = POLICY_ON_ERROR_INHERIT;
	f.shadow = -1;
	/* The short forms are the limits key of the mapping form. */
	struct ykey limits = policy_keys[PK_LIMITS];
	limits.name = name;
	int rc = P->ev.type == YAML_MAPPING_START_EVENT ? policy_mapping(P, &f, name)
							: set_limits(P, &limits, &f);
	/* before the overrides are made of p: theirs is the policy's store */
	memcpy(p->store, f.store, sizeof(p->store));
	*store_mark = f.store_mark;
	if (rc == 0)
		rc = policy_from_form(P, p, name, &f);
	override_forms_free(&f);
	return rc;
}

static int policy_from_form(struct yparser *P, struct policy *p, const char *name,
			    const struct policy_form *f)
{
	p->algo = f->algo;
	p->on_store_error = f->on_error;
	p->shadow = f->shadow;
	p->ban = f->ban;
	p->delay = f->delay;
	p->blocks = f->blocks;
	if (p->blocks.max > 0 && p->blocks.ttl_ms == 0)
		p->blocks.ttl_ms = POLICY_BLOCKS_TTL_DEFAULT_MS;
	memcpy(p->timezone, f->timezone, sizeof(p->timezone));
	p->hold_ms = f->hold_ms ? f->hold_ms : POLICY_HOLD_DEFAULT_MS;
	memcpy(p->limits, f->limits, sizeof(p->limits));
	/* Validate one limit at a time so a bad or repeated window is reported
	 * at the rate that introduced it. */
	for (int i = 1; i <= f->nlimits; i++) {
		const char *why;
		p->nlimits = i;
		if (policy_validate(p, &why) < 0)
			return yp_fail(P, f->limit_marks[i - 1], "policies.%s: %s", name, why);
	}
	return make_overrides(P, p, name, f);
}

static int name_cmp(const struct policy *x, const struct policy *y)
{
	size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
	int d = memcmp(x->name, y->name, n);
	if (d)
		return d;
	return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int pentry_cmp(const void *a, const void *b)
{
	const struct pentry *x = a, *y = b;
	int d = name_cmp(&x->p, &y->p);
	if (d)
		return d;
	/* Equal names keep file order, so the later one is reported as the duplicate. */
	return x->mark.index < y->mark.index ? -1 : x->mark.index > y->mark.index;
}

/* One entry under policies: its name (current event) and its value. */
static int policy_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config_read *R = dst;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	if (P->ev.type != YAML_SCALAR_EVENT) {
		yp_fail(P, km, "a policy name must be a plain string");
		return YP_BAD_KEY;
	}
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	if (!policy_name_valid(s, len)) {
		yp_fail(P, km, "policy name must be 1 to %d characters of A-Z a-z 0-9 _ . -",
			POLICY_NAME_MAX);
		return YP_BAD_KEY;
	}
	if (yp_grow((void **)&R->pol, &R->cappol, R->npol, sizeof(*R->pol)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	/* Kept even when its value is bad, so that a duplicate name is still found. */
	struct pentry *e = &R->pol[R->npol++];
	memset(e, 0, sizeof(*e));
	memcpy(e->p.name, s, len);
	e->p.name_len = len;
	e->mark = km;
	if (yp_next(P) < 0)
		return -1;
	return parse_policy(P, &e->p, e->p.name, &e->store_mark);
}

int config_policy_set(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config *c = dst;
	struct config_read *R = P->ctx;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of policy names to limits");
	yaml_mark_t start = P->ev.start_mark;
	unsigned nerr = P->nerr;
	size_t n;
	if (yp_dict(P, k, "policies", policy_entry, R, &n) < 0 && P->fatal)
		return -1;
	if (R->npol == 0 && P->nerr == nerr)
		return yp_fail_section(P, start, "at least one policy is required");
	if (R->npol > 1)
		qsort(R->pol, R->npol, sizeof(*R->pol), pentry_cmp);
	for (size_t i = 1; i < R->npol; i++)
		if (name_cmp(&R->pol[i - 1].p, &R->pol[i].p) == 0)
			yp_fail(P, R->pol[i].mark, "duplicate policy \"%s\"", R->pol[i].p.name);
	if (P->nerr != nerr)
		return -1;
	c->policies = calloc(R->npol, sizeof(*c->policies));
	if (!c->policies)
		return yp_fail_fatal(P, start, "out of memory");
	for (size_t i = 0; i < R->npol; i++)
		c->policies[i] = R->pol[i].p;
	c->npolicies = R->npol;
	return 0;
}

/* Can p's limits be taken ahead in blocks (the reasons set_blocks' checks give)? */
static int blocks_fit(const struct policy *p)
{
	return p->algo != POLICY_SLIDING_WINDOW &&
	       policy_algo_shape(p->algo) != POLICY_SHAPE_LEASE && p->ban.after == 0;
}

void config_policy_check_stores(struct yparser *P, struct config *c)
{
	const struct config_read *R = P->ctx;
	if (!c->policies)
		return;
	for (size_t i = 0; i < R->npol; i++) {
		const struct pentry *e = &R->pol[i];
		struct policy *p = &c->policies[i]; /* e's, as handed over */
		const struct config_redis *r = config_redis_of(c, p);
		if (!r) {
			yp_fail(P, e->store_mark,
				"policies.%s.store: no store %s in stores: (the default store "
				"is redis:'s; leave store: out for it)",
				e->p.name, e->p.store);
			continue;
		}
		/* local.c keeps one fallback, dropped whenever a store answers
		 * again: another store's answers would drop this one's counts */
		if (e->p.store[0] && config_on_error(c, p) == POLICY_ON_ERROR_LOCAL) {
			yp_fail(P, e->store_mark,
				"policies.%s.store: on_store_error: local is the default "
				"store's only (yet); give this policy on_store_error: allow, "
				"deny or error",
				e->p.name);
			continue;
		}
		if (!r->remote)
			continue;
		/* a region cut off from a remote store deciding from its own
		 * counts would admit the limit again beside every other region */
		if (config_on_error(c, p) == POLICY_ON_ERROR_LOCAL)
			yp_fail(P, e->mark,
				"policies.%s: on_store_error: local on a remote store would "
				"admit the limit in every region cut off from it; use deny (or "
				"allow, error)",
				e->p.name);
		else if (p->blocks.max == 0 && blocks_fit(p)) {
			/* decided at local latency: units taken ahead, sized for
			 * the round trip */
			p->blocks.max = POLICY_BLOCKS_MAX;
			p->blocks.autosize = 1;
			p->blocks.ttl_ms = POLICY_BLOCKS_TTL_DEFAULT_MS;
		}
	}
}

void config_policy_read_done(struct config_read *R, int handed)
{
	if (!handed)
		for (size_t i = 0; i < R->npol; i++)
			override_set_free(R->pol[i].p.overrides);
	free(R->pol);
	R->pol = NULL;
	R->npol = R->cappol = 0;
}

/* A policy's keys, its ban's and an override's, for config.c's list of tables. */
const struct ktable config_policy_table = {"policies.NAME.", policy_keys, PK_N, KT_POLICY, 0};
const struct ktable config_ban_table = {"policies.NAME.ban.", ban_keys, BK_N, KT_POLICY, 0};
const struct ktable config_delay_table = {"policies.NAME.delay.", delay_keys, DK_N, KT_POLICY, 0};
const struct ktable config_blocks_table = {"policies.NAME.blocks.", blocks_keys, XK_N, KT_POLICY,
					   0};
const struct ktable config_override_table = {"policies.NAME.overrides.USER.", override_keys, 4,
					     KT_POLICY, 0};
