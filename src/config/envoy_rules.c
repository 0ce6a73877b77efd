/*
 * envoy_rules.c - envoyproxy/ratelimit's YAML files and their lookup.
 *
 * A level of the tree is a list of nodes, each named by its composite key:
 * "key" alone, or "key_value". A request entry (k, v) is looked up at a
 * level as "k_v" among the exact names (binary search), then among the
 * names holding '*' (wildcards, in file order), then as "k" alone; the
 * limit is the one of the node the last entry lands on. These are
 * envoyproxy/ratelimit's rules, composite names included (a key "a_b"
 * alone matches the entry (a, b) there too, and so here).
 */
#include "envoy_rules.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_yaml.h"
#include "yenum.h"

/* The largest file taken, and the most files of a directory. */
#define ENVOY_FILE_MAX (16 * 1024 * 1024)
#define ENVOY_FILES_MAX 1024

struct envoy_node {
	char *composite; /* "key" or "key_value" */
	size_t composite_len;
	int wildcard; /* composite holds '*' */
	struct envoy_limit *limit;
	int shadow;
	yaml_mark_t mark;
	struct envoy_node *children;
	size_t nchildren, cap;
	/* lookup: children sorted by composite (exact ones), wildcards in order */
	size_t *exact, nexact;
	size_t *wild, nwild;
};

/* memcmp's order over two byte strings of their own lengths. */
static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

int64_t envoy_unit_seconds(int unit)
{
	switch (unit) {
	case ENVOY_UNIT_SECOND:
		return 1;
	case ENVOY_UNIT_MINUTE:
		return 60;
	case ENVOY_UNIT_HOUR:
		return 3600;
	case ENVOY_UNIT_DAY:
		return 86400;
	case ENVOY_UNIT_WEEK:
		return 7 * 86400;
	case ENVOY_UNIT_MONTH:
		return 30 * 86400;
	case ENVOY_UNIT_YEAR:
		return 365 * 86400;
	}
	return 0;
}

static const char *const unit_names[] = {
	[ENVOY_UNIT_SECOND] = "second", [ENVOY_UNIT_MINUTE] = "minute", [ENVOY_UNIT_HOUR] = "hour",
	[ENVOY_UNIT_DAY] = "day",	[ENVOY_UNIT_MONTH] = "month",	[ENVOY_UNIT_YEAR] = "year",
	[ENVOY_UNIT_WEEK] = "week",
};

int envoy_glob(const char *pat, size_t plen, const char *s, size_t slen)
{
	/* one backtrack point (the last '*') is enough: linear in practice,
	 * O(plen * slen) at worst, never exponential */
	size_t p = 0, i = 0, star = (size_t)-1, mark = 0;
	while (i < slen) {
		if (p < plen && pat[p] == '*') {
			star = p++;
			mark = i;
		} else if (p < plen && pat[p] == s[i]) {
			p++;
			i++;
		} else if (star != (size_t)-1) {
			p = star + 1;
			i = ++mark;
		} else {
			return 0;
		}
	}
	while (p < plen && pat[p] == '*')
		p++;
	return p == plen;
}

/* ---- freeing ---- */

static void limit_free(struct envoy_limit *l)
{
	if (!l)
		return;
	free(l->name);
	for (size_t i = 0; i < l->nreplaces; i++)
		free(l->replaces[i]);
	free(l->replaces);
	free(l);
}

static void node_clear(struct envoy_node *n)
{
	for (size_t i = 0; i < n->nchildren; i++)
		node_clear(&n->children[i]);
	free(n->children);
	free(n->composite);
	limit_free(n->limit);
	free(n->exact);
	free(n->wild);
	memset(n, 0, sizeof(*n));
}

void envoy_rules_free(struct envoy_rules *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ndomains; i++) {
		free(r->domains[i].name);
		if (r->domains[i].root) {
			node_clear(r->domains[i].root);
			free(r->domains[i].root);
		}
	}
	free(r->domains);
	free(r->by_name);
	free(r);
}

/* ---- reading one file ---- */

/* A descriptor while it is read. */
struct desc_form {
	char *key, *value;
	int has_value;
	int has_limit;
	struct limit_form {
		char *unit;
		int64_t requests_per_unit;
		int unlimited;
		char *name;
		char *algorithm;
		char **replaces;
		size_t nreplaces, cap;
		int64_t delay_ms; /* ours: the policy's delay.max */
		int calendar;	  /* ours: day, week, month, year as calendar windows */
		char *timezone, *anchor;
		yaml_mark_t unit_mark, mark, replaces_mark, algorithm_mark;
		unsigned seen;
	} limit;
	int shadow, ignored_flag;
	struct envoy_node *node; /* its children go here */
};

struct file_read {
	struct envoy_domain domain;
	enum policy_algo algo;
};

static int set_string_any(struct yparser *P, const struct ykey *k, void *dst)
{
	/* a value may be any scalar: 123 and true are strings here */
	const char *s;
	size_t len;
	if (yp_scalar_text(P, k->name, "a string", &s, &len) < 0)
		return -1;
	return yp_dup_string(P, (char **)dst, s, len);
}

static int set_u32(struct yparser *P, const struct ykey *k, void *dst)
{
	return yp_set_int64(P, k, dst);
}

/* One replaces entry: {name: NAME}. */
enum { RPK_NAME, RPK_N };
static const struct ykey replace_keys[RPK_N] = {
	[RPK_NAME] = {"name", set_string_any, 0, 0, 0, YP_RELOAD, NULL, NULL},
};

static int replace_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct limit_form *lf = dst;
	(void)i;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected {name: NAME}");
	yaml_mark_t start = P->ev.start_mark;
	char *name = NULL;
	unsigned seen;
	yaml_mark_t marks[RPK_N];
	if (yp_map(P, k->name, replace_keys, RPK_N, &name, &seen, marks) < 0) {
		free(name);
		return -1;
	}
	if (!name || !name[0]) {
		free(name);
		return yp_failk(P, start, k->name, "should not have an empty replaces entry");
	}
	if (yp_grow((void **)&lf->replaces, &lf->cap, lf->nreplaces, sizeof(char *)) < 0) {
		free(name);
		return yp_fail_fatal(P, start, "out of memory");
	}
	lf->replaces[lf->nreplaces++] = name;
	return 0;
}

static int set_replaces(struct yparser *P, const struct ykey *k, void *dst)
{
	struct limit_form *lf = dst;
	lf->replaces_mark = P->ev.start_mark;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of {name: NAME}");
	size_t n;
	return yp_seq(P, k, "entries", replace_entry, lf, &n);
}

enum {
	LMK_UNIT,
	LMK_RPU,
	LMK_UNLIMITED,
	LMK_NAME,
	LMK_REPLACES,
	LMK_ALGORITHM,
	LMK_DELAY,
	LMK_CALENDAR,
	LMK_TIMEZONE,
	LMK_ANCHOR,
	LMK_N
};
static const struct ykey limit_keys[LMK_N] = {
	[LMK_UNIT] = {"unit", set_string_any, offsetof(struct limit_form, unit), 0, 0, YP_RELOAD,
		      NULL, NULL},
	[LMK_RPU] = {"requests_per_unit", set_u32, offsetof(struct limit_form, requests_per_unit),
		     0, POLICY_MAX_COUNT, YP_RELOAD, NULL, NULL},
	[LMK_UNLIMITED] = {"unlimited", yp_set_bool, offsetof(struct limit_form, unlimited), 0, 0,
			   YP_RELOAD, NULL, NULL},
	[LMK_NAME] = {"name", set_string_any, offsetof(struct limit_form, name), 0, 0, YP_RELOAD,
		      NULL, NULL},
	[LMK_REPLACES] = {"replaces", set_replaces, 0, 0, 0, YP_RELOAD, NULL, NULL},
	[LMK_ALGORITHM] = {"algorithm", set_string_any, offsetof(struct limit_form, algorithm), 0,
			   0, YP_RELOAD, NULL, NULL},
	/* ours, as `algorithm`: a policy's delay: {max} (docs/envoy.md) */
	[LMK_DELAY] = {"delay", yp_set_duration, offsetof(struct limit_form, delay_ms), 1,
		       POLICY_DELAY_MAX_MS, YP_RELOAD, NULL, NULL},
	/* ours: a day, week, month or year as a calendar window (envoyproxy's
	 * month is 30 days from the epoch), in a zone, from an anchor */
	[LMK_CALENDAR] = {"calendar", yp_set_bool, offsetof(struct limit_form, calendar), 0, 0,
			  YP_RELOAD, NULL, NULL},
	[LMK_TIMEZONE] = {"timezone", set_string_any, offsetof(struct limit_form, timezone), 0, 0,
			  YP_RELOAD, NULL, NULL},
	[LMK_ANCHOR] = {"anchor", set_string_any, offsetof(struct limit_form, anchor), 0, 0,
			YP_RELOAD, NULL, NULL},
};

static int set_rate_limit(struct yparser *P, const struct ykey *k, void *dst)
{
	struct desc_form *f = dst;
	struct limit_form *lf = &f->limit;
	yaml_mark_t marks[LMK_N];
	f->has_limit = 1;
	lf->mark = P->ev.start_mark;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping {unit, requests_per_unit}");
	int rc = yp_map(P, k->name, limit_keys, LMK_N, lf, &lf->seen, marks);
	lf->unit_mark = marks[LMK_UNIT];
	lf->algorithm_mark = marks[LMK_ALGORITHM];
	return rc;
}

#define RL_STR_(x) #x
#define RL_STR(x) RL_STR_(x)

static int descriptor_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i);

static int set_descriptors(struct yparser *P, const struct ykey *k, void *dst)
{
	struct envoy_node *parent = *(struct envoy_node **)dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of descriptors");
	size_t n;
	return yp_seq(P, k, "descriptors", descriptor_entry, parent, &n);
}

/* metadata: any mapping, kept by envoyproxy/ratelimit for its responses'
 * dynamic metadata; read past here. */
static int skip_value(struct yparser *P, const struct ykey *k, void *dst)
{
	(void)k;
	(void)dst;
	if (P->ev.type == YAML_MAPPING_START_EVENT || P->ev.type == YAML_SEQUENCE_START_EVENT)
		return yp_skip_to(P, P->depth - 1);
	return 0;
}

static int refuse_flag(struct yparser *P, const struct ykey *k, void *dst)
{
	(void)dst;
	return yp_failk(P, P->ev.start_mark, k->name,
			"is not supported by ratelimitd (docs/envoy.md lists what is)");
}

enum {
	DK_KEY,
	DK_VALUE,
	DK_RATE_LIMIT,
	DK_DESCRIPTORS,
	DK_SHADOW,
	DK_DETAILED,
	DK_VALUE_TO_METRIC,
	DK_METADATA,
	DK_QUOTA,
	DK_SHARE,
	DK_N
};
static const struct ykey desc_keys[DK_N] = {
	[DK_KEY] = {"key", set_string_any, offsetof(struct desc_form, key), 0, 0, YP_RELOAD, NULL,
		    NULL},
	[DK_VALUE] = {"value", set_string_any, offsetof(struct desc_form, value), 0, 0, YP_RELOAD,
		      NULL, NULL},
	[DK_RATE_LIMIT] = {"rate_limit", set_rate_limit, 0, 0, 0, YP_RELOAD, NULL, NULL},
	[DK_DESCRIPTORS] = {"descriptors", set_descriptors, offsetof(struct desc_form, node), 0, 0,
			    YP_RELOAD, NULL, NULL},
	[DK_SHADOW] = {"shadow_mode", yp_set_bool, offsetof(struct desc_form, shadow), 0, 0,
		       YP_RELOAD, NULL, NULL},
	/* metric names only, in envoyproxy/ratelimit: accepted, no effect */
	[DK_DETAILED] = {"detailed_metric", yp_set_bool, offsetof(struct desc_form, ignored_flag),
			 0, 0, YP_RELOAD, NULL, NULL},
	[DK_VALUE_TO_METRIC] = {"value_to_metric", yp_set_bool,
				offsetof(struct desc_form, ignored_flag), 0, 0, YP_RELOAD, NULL,
				NULL},
	[DK_METADATA] = {"metadata", skip_value, 0, 0, 0, YP_RELOAD, NULL, NULL},
	[DK_QUOTA] = {"quota_mode", refuse_flag, 0, 0, 0, YP_RELOAD, NULL, NULL},
	[DK_SHARE] = {"share_threshold", refuse_flag, 0, 0, 0, YP_RELOAD, NULL, NULL},
};

static int parse_unit(const char *s, enum envoy_unit *out)
{
	for (size_t u = 1; u < sizeof(unit_names) / sizeof(unit_names[0]); u++)
		if (strcasecmp(s, unit_names[u]) == 0) {
			*out = (enum envoy_unit)u;
			return 0;
		}
	return -1;
}

static void form_clear(struct desc_form *f)
{
	free(f->key);
	free(f->value);
	free(f->limit.unit);
	free(f->limit.name);
	free(f->limit.algorithm);
	free(f->limit.timezone);
	free(f->limit.anchor);
	for (size_t i = 0; i < f->limit.nreplaces; i++)
		free(f->limit.replaces[i]);
	free(f->limit.replaces);
}

/* calendar: true: the rule's unit as a calendar window of p (its anchor
 * and time zone as a policy's limits and timezone take them). */
static int calendar_limit(struct yparser *P, const struct limit_form *lf,
			  const struct envoy_limit *l, struct policy *p)
{
	static const char *const units[] = {[ENVOY_UNIT_DAY] = "day",
					    [ENVOY_UNIT_WEEK] = "week",
					    [ENVOY_UNIT_MONTH] = "month",
					    [ENVOY_UNIT_YEAR] = "year"};
	const char *u =
		(unsigned)l->unit < sizeof(units) / sizeof(units[0]) ? units[l->unit] : NULL;
	if (!u)
		return yp_fail(P, lf->mark,
			       "rate_limit: calendar windows are a day, week, month or year");
	char spec[96], why[POLICY_ERR_MAX];
	snprintf(spec, sizeof(spec), "%lld/%s%s%.40s", (long long)p->limits[0].count, u,
		 lf->anchor ? "@" : "", lf->anchor ? lf->anchor : "");
	if (policy_parse_limit(spec, strlen(spec), &p->limits[0], why, sizeof(why)) < 0)
		return yp_fail(P, lf->mark, "rate_limit.anchor: %s", why);
	if (lf->timezone) {
		if (strlen(lf->timezone) > CALENDAR_TZ_MAX ||
		    calendar_tz_check(lf->timezone, why, sizeof(why)) < 0)
			return yp_fail(P, lf->mark, "rate_limit.timezone: %s",
				       strlen(lf->timezone) > CALENDAR_TZ_MAX ? "too long" : why);
		snprintf(p->timezone, sizeof(p->timezone), "%s", lf->timezone);
	}
	if (p->algo != POLICY_FIXED_WINDOW && p->algo != POLICY_SLIDING_COUNTER)
		return yp_fail(P, lf->mark,
			       "rate_limit: a calendar window is for fixed_window and "
			       "sliding_window_counter");
	return 0;
}

/* The rate_limit of a descriptor read into f, checked, as a limit (*out
 * NULL for none). */
static int make_limit(struct yparser *P, struct desc_form *f, enum policy_algo algo,
		      struct envoy_limit **out)
{
	struct limit_form *lf = &f->limit;
	*out = NULL;
	if (!f->has_limit)
		return 0;
	struct envoy_limit *l = calloc(1, sizeof(*l));
	if (!l)
		return yp_fail_fatal(P, lf->mark, "out of memory");
	l->unlimited = lf->unlimited;
	if (lf->unlimited && lf->unit) {
		limit_free(l);
		return yp_fail(P, lf->unit_mark,
			       "rate_limit: should not specify rate limit unit when unlimited");
	}
	if (!lf->unlimited && (!lf->unit || parse_unit(lf->unit, &l->unit) < 0)) {
		limit_free(l);
		return yp_fail(P, lf->unit ? lf->unit_mark : lf->mark,
			       "rate_limit: invalid rate limit unit '%s' (second, minute, hour, "
			       "day, week, month or year)",
			       lf->unit ? lf->unit : "");
	}
	if (lf->algorithm) {
		if (policy_algo_parse(lf->algorithm, strlen(lf->algorithm), &algo) < 0 ||
		    policy_algo_shape(algo) == POLICY_SHAPE_LEASE) {
			char names[128];
			limit_free(l);
			return yp_fail(P, lf->algorithm_mark, "rate_limit.algorithm: expected %s",
				       yenum_list(policy_algo_names, 0, names, sizeof(names)));
		}
	}
	if (lf->name && strlen(lf->name) > ENVOY_NAME_MAX) {
		limit_free(l);
		return yp_fail(P, lf->mark, "rate_limit.name: at most %d bytes", ENVOY_NAME_MAX);
	}
	l->requests_per_unit = (uint32_t)lf->requests_per_unit;
	l->name = lf->name;
	lf->name = NULL;
	l->replaces = lf->replaces;
	l->nreplaces = lf->nreplaces;
	lf->replaces = NULL;
	lf->nreplaces = 0;
	for (size_t i = 0; l->name && i < l->nreplaces; i++)
		if (strcmp(l->replaces[i], l->name) == 0) {
			limit_free(l);
			return yp_fail(P, lf->replaces_mark,
				       "rate_limit.replaces: should not contain name of same "
				       "descriptor");
		}
	l->shadow = f->shadow;
	struct policy *p = &l->policy;
	p->algo = algo;
	p->nlimits = 1;
	p->on_store_error = POLICY_ON_ERROR_INHERIT;
	p->shadow = f->shadow ? 1 : -1;
	p->delay.max_ms = lf->delay_ms;
	if ((lf->timezone || lf->anchor) && !lf->calendar) {
		limit_free(l);
		return yp_fail(P, lf->mark,
			       "rate_limit: timezone and anchor go with calendar: true");
	}
	if (!l->unlimited && l->requests_per_unit > 0) {
		int64_t n = l->requests_per_unit;
		p->limits[0] = (struct policy_limit){
			.capacity = n, .count = n, .period_ms = envoy_unit_seconds(l->unit) * 1000};
		if (lf->calendar && calendar_limit(P, lf, l, p) < 0) {
			limit_free(l);
			return -1;
		}
		const char *why;
		if (policy_validate(p, &why) < 0) {
			limit_free(l);
			return yp_fail(P, lf->mark, "rate_limit: %s", why);
		}
	}
	*out = l;
	return 0;
}

static int descriptor_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct envoy_node *parent = dst;
	struct file_read *F = P->ctx;
	(void)i;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a descriptor {key, value, rate_limit, descriptors}");
	/* the domain's mapping, then a sequence and a mapping a level: refused
	 * here, where it is, before the recursion runs the stack out */
	if (P->depth > 2 * ENVOY_MAX_DEPTH + 1)
		return yp_fail_fatal(
			P, P->ev.start_mark,
			"descriptors nested deeper than " RL_STR(ENVOY_MAX_DEPTH) " levels");
	if (yp_grow((void **)&parent->children, &parent->cap, parent->nchildren,
		    sizeof(*parent->children)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	/* children are read into a node of their own, then moved in: the
	 * parent's array may move while they are read */
	struct envoy_node node = {.mark = P->ev.start_mark};
	struct desc_form f = {.node = &node};
	unsigned seen;
	yaml_mark_t marks[DK_N];
	int rc = yp_map(P, k->name, desc_keys, DK_N, &f, &seen, marks);
	if (rc == 0 && (!f.key || !f.key[0]))
		rc = yp_fail_section(P, node.mark, "descriptor has empty key");
	struct envoy_limit *limit = NULL;
	if (rc == 0)
		rc = make_limit(P, &f, F->algo, &limit);
	if (rc == 0) {
		size_t kl = strlen(f.key), vl = f.value ? strlen(f.value) : 0;
		node.composite_len = f.value && vl ? kl + 1 + vl : kl;
		node.composite = malloc(node.composite_len + 1);
		if (!node.composite) {
			rc = yp_fail_fatal(P, node.mark, "out of memory");
		} else {
			memcpy(node.composite, f.key, kl);
			if (f.value && vl) {
				node.composite[kl] = '_';
				memcpy(node.composite + kl + 1, f.value, vl);
			}
			node.composite[node.composite_len] = '\0';
			node.wildcard = memchr(node.composite, '*', node.composite_len) != NULL;
			node.limit = limit;
			limit = NULL;
			node.shadow = f.shadow;
		}
	}
	limit_free(limit);
	form_clear(&f);
	if (rc < 0) {
		node_clear(&node);
		return -1;
	}
	parent->children[parent->nchildren++] = node;
	return 0;
}

static int set_domain(struct yparser *P, const struct ykey *k, void *dst)
{
	return set_string_any(P, k, dst);
}

/* The file's algorithm (ours, not envoyproxy/ratelimit's): the rules read
 * after it use it, so it must come first. */
static int set_file_algorithm(struct yparser *P, const struct ykey *k, void *dst)
{
	struct file_read *F = dst;
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "an algorithm", &s, &len) < 0)
		return -1;
	char names[128];
	if (policy_algo_parse(s, len, &F->algo) < 0)
		return yp_failk(P, P->ev.start_mark, k->name, "expected %s",
				yenum_list(policy_algo_names, 0, names, sizeof(names)));
	if (F->domain.root->nchildren)
		return yp_failk(P, P->ev.start_mark, k->name,
				"must come before descriptors to apply to them");
	return 0;
}

enum { FK_DOMAIN, FK_DESCRIPTORS, FK_ALGORITHM, FK_N };
static const struct ykey file_keys[FK_N] = {
	[FK_DOMAIN] = {"domain", set_domain, offsetof(struct file_read, domain.name), 0, 0,
		       YP_RELOAD, NULL, NULL},
	[FK_DESCRIPTORS] = {"descriptors", set_descriptors, offsetof(struct file_read, domain.root),
			    0, 0, YP_RELOAD, NULL, NULL},
	[FK_ALGORITHM] = {"algorithm", set_file_algorithm, 0, 0, 0, YP_RELOAD, NULL, NULL},
};

/* ---- after reading: lookup tables, names, checks ---- */

static const struct envoy_node *sort_base;

static int by_composite(const void *a, const void *b)
{
	const struct envoy_node *x = &sort_base[*(const size_t *)a];
	const struct envoy_node *y = &sort_base[*(const size_t *)b];
	return cmp_bytes(x->composite, x->composite_len, y->composite, y->composite_len);
}

/* 32-bit FNV-1a: stable across runs and builds (names, hence Redis keys). */
static uint32_t fnv1a(uint32_t h, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h;
}

/*
 * A rule's policy name: the readable path "domain.key_value.key" (bytes
 * outside [A-Za-z0-9_.-] become '_', cut to 55), then '-' and 8 hex digits
 * of the exact path, so that names stay distinct and the same from one
 * load to the next: a reload keeps each rule's counters.
 */
static void make_name(struct policy *p, const char *path, size_t path_len, uint32_t hash)
{
	size_t n = 0;
	for (size_t i = 0; i < path_len && n < 55; i++) {
		char c = path[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			 (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		p->name[n++] = ok ? c : '_';
	}
	n += (size_t)snprintf(p->name + n, sizeof(p->name) - n, "-%08x", hash);
	p->name_len = n;
}

struct finish {
	struct yparser *P;
	struct envoy_rules *r;
	char path[1024];
};

static int finish_level(struct finish *fin, struct envoy_node *n, size_t path_len, uint32_t hash)
{
	int rc = 0;
	if (n->nchildren) {
		n->exact = malloc(n->nchildren * sizeof(size_t));
		n->wild = malloc(n->nchildren * sizeof(size_t));
		if (!n->exact || !n->wild)
			return yp_fail_fatal(fin->P, n->mark, "out of memory");
	}
	for (size_t i = 0; i < n->nchildren; i++) {
		if (n->children[i].wildcard)
			n->wild[n->nwild++] = i;
		else
			n->exact[n->nexact++] = i;
	}
	sort_base = n->children;
	if (n->nexact > 1) /* (qsort of NULL, 0 is undefined) */
		qsort(n->exact, n->nexact, sizeof(size_t), by_composite);
	for (size_t i = 1; i < n->nexact; i++)
		if (by_composite(&n->exact[i - 1], &n->exact[i]) == 0) {
			struct envoy_node *d = &n->children[n->exact[i]];
			rc = yp_fail(fin->P, d->mark, "duplicate descriptor composite key '%.*s%s'",
				     (int)path_len, fin->path, d->composite);
		}
	for (size_t i = 0; i < n->nwild; i++)
		for (size_t j = 0; j < i; j++) {
			struct envoy_node *a = &n->children[n->wild[j]],
					  *b = &n->children[n->wild[i]];
			if (strcmp(a->composite, b->composite) == 0)
				rc = yp_fail(fin->P, b->mark,
					     "duplicate descriptor composite key '%.*s%s'",
					     (int)path_len, fin->path, b->composite);
		}
	for (size_t i = 0; i < n->nchildren; i++) {
		struct envoy_node *c = &n->children[i];
		size_t len = path_len;
		int fits = len + c->composite_len + 1 < sizeof(fin->path);
		if (fits) {
			memcpy(fin->path + len, c->composite, c->composite_len);
			len += c->composite_len;
			fin->path[len++] = '.';
		}
		uint32_t h = fnv1a(fnv1a(hash, c->composite, c->composite_len), "\n", 1);
		if (c->limit) {
			fin->r->nlimits++;
			make_name(&c->limit->policy, fin->path, len - 1, h);
		}
		/* a path past the buffer is cut (the name uses its first 55
		 * bytes; the hash covers it all) */
		if (finish_level(fin, c, len, h) < 0)
			rc = -1;
	}
	return rc;
}

static int depth_of(const struct envoy_node *n)
{
	int d = 0;
	for (size_t i = 0; i < n->nchildren; i++) {
		int c = depth_of(&n->children[i]);
		if (c > d)
			d = c;
	}
	return d + 1;
}

/* Reads one file's text into a domain appended to r. */
static int read_file(struct envoy_rules *r, size_t *cap, const char *name, const char *buf,
		     size_t len, enum policy_algo algo, char *err, size_t errlen)
{
	struct yparser P;
	struct file_read F = {.algo = algo};
	yaml_mark_t root;
	unsigned seen = 0;
	yaml_mark_t marks[FK_N];
	F.domain.root = calloc(1, sizeof(*F.domain.root));
	yp_begin(&P, name, buf, len);
	P.ctx = &F;
	if (!F.domain.root) {
		yp_fail_fatal(&P, (yaml_mark_t){0, 0, 0}, "out of memory");
	} else if (yp_open_document(&P, &root) == 0) {
		int rc = yp_map(&P, NULL, file_keys, FK_N, &F, &seen, marks);
		if (rc == 0 && (!F.domain.name || !F.domain.name[0]))
			yp_fail(&P, root, "config file cannot have empty domain");
		if (!P.fatal)
			yp_close_document(&P);
	}
	if (!P.nerr && depth_of(F.domain.root) - 1 > ENVOY_MAX_DEPTH)
		yp_fail(&P, root, "descriptors nested deeper than %d levels", ENVOY_MAX_DEPTH);
	if (!P.nerr) {
		struct finish fin = {.P = &P, .r = r};
		size_t dl = strlen(F.domain.name);
		if (dl + 1 < sizeof(fin.path)) {
			memcpy(fin.path, F.domain.name, dl);
			fin.path[dl] = '.';
			finish_level(&fin, F.domain.root, dl + 1,
				     fnv1a(fnv1a(2166136261u, F.domain.name, dl), "\n", 1));
		}
	}
	for (size_t i = 0; !P.nerr && i < r->ndomains; i++)
		if (strcmp(r->domains[i].name, F.domain.name) == 0)
			yp_fail(&P, root, "duplicate domain '%s' in config file", F.domain.name);
	if (!P.nerr && yp_grow((void **)&r->domains, cap, r->ndomains, sizeof(*r->domains)) < 0)
		yp_fail_fatal(&P, root, "out of memory");
	if (yp_end(&P, err, errlen) < 0) {
		free(F.domain.name);
		if (F.domain.root) {
			node_clear(F.domain.root);
			free(F.domain.root);
		}
		return -1;
	}
	r->domains[r->ndomains++] = F.domain;
	return 0;
}

static void collect_names(const struct envoy_node *n, const struct policy **out, size_t *k)
{
	for (size_t i = 0; i < n->nchildren; i++) {
		const struct envoy_node *c = &n->children[i];
		if (c->limit && !c->limit->unlimited && c->limit->requests_per_unit > 0)
			out[(*k)++] = &c->limit->policy;
		collect_names(c, out, k);
	}
}

static int by_policy_name(const void *a, const void *b)
{
	return strcmp((*(const struct policy *const *)a)->name,
		      (*(const struct policy *const *)b)->name);
}

/* The policies by name; two rules whose names collide (a hash of 32 bits
 * over their paths) are an error to rename one. */
static int index_names(struct envoy_rules *r, char *err, size_t errlen)
{
	r->by_name = malloc((r->nlimits ? r->nlimits : 1) * sizeof(*r->by_name));
	if (!r->by_name) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < r->ndomains; i++)
		collect_names(r->domains[i].root, r->by_name, &k);
	if (k > 1)
		qsort(r->by_name, k, sizeof(*r->by_name), by_policy_name);
	r->nnames = k;
	for (size_t i = 1; i < k; i++)
		if (strcmp(r->by_name[i - 1]->name, r->by_name[i]->name) == 0) {
			snprintf(err, errlen,
				 "two envoy rules have the policy name %s: rename a key or value "
				 "of one",
				 r->by_name[i]->name);
			return -1;
		}
	return 0;
}

static void node_set_store(struct envoy_node *n, const char *store)
{
	for (size_t i = 0; i < n->nchildren; i++) {
		struct envoy_node *c = &n->children[i];
		if (c->limit)
			snprintf(c->limit->policy.store, sizeof(c->limit->policy.store), "%s",
				 store);
		node_set_store(c, store);
	}
}

void envoy_rules_set_store(struct envoy_rules *r, const char *store)
{
	for (size_t i = 0; r && i < r->ndomains; i++)
		node_set_store(r->domains[i].root, store);
}

const struct policy *envoy_find_policy(const struct envoy_rules *r, const char *name, size_t len)
{
	size_t lo = 0, hi = r ? r->nnames : 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct policy *p = r->by_name[mid];
		int c = cmp_bytes(p->name, p->name_len, name, len);
		if (c == 0)
			return p;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

struct envoy_rules *envoy_rules_parse(const char *name, const char *buf, size_t len,
				      enum policy_algo algo, char *err, size_t errlen)
{
	struct envoy_rules *r = calloc(1, sizeof(*r));
	size_t cap = 0;
	if (!r) {
		snprintf(err, errlen, "%s: out of memory", name);
		return NULL;
	}
	if (read_file(r, &cap, name, buf, len, algo, err, errlen) < 0 ||
	    index_names(r, err, errlen) < 0) {
		envoy_rules_free(r);
		return NULL;
	}
	return r;
}

static int by_domain(const void *a, const void *b)
{
	return strcmp(((const struct envoy_domain *)a)->name,
		      ((const struct envoy_domain *)b)->name);
}

static int by_string(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int yaml_name(const char *n)
{
	size_t l = strlen(n);
	return n[0] != '.' && ((l > 5 && strcmp(n + l - 5, ".yaml") == 0) ||
			       (l > 4 && strcmp(n + l - 4, ".yml") == 0));
}

/* Appends err's lines after what out holds already. */
static void add_errors(char *out, size_t outlen, const char *err)
{
	size_t n = strlen(out);
	if (n + 1 < outlen)
		snprintf(out + n, outlen - n, "%s%s", n ? "\n" : "", err);
}

struct envoy_rules *envoy_rules_load(const char *path, enum policy_algo algo, char *err,
				     size_t errlen)
{
	struct envoy_rules *r = calloc(1, sizeof(*r));
	size_t cap = 0;
	char **files = NULL;
	size_t nfiles = 0, fcap = 0;
	int bad = 0;
	if (!r) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	err[0] = '\0';
	DIR *dir = opendir(path);
	if (!dir) {
		files = malloc(sizeof(*files));
		if (!files || !(files[0] = strdup(path))) {
			free(files);
			envoy_rules_free(r);
			snprintf(err, errlen, "%s: out of memory", path);
			return NULL;
		}
		nfiles = 1;
	} else {
		struct dirent *d;
		while ((d = readdir(dir)) != NULL) {
			if (!yaml_name(d->d_name))
				continue;
			if (nfiles == ENVOY_FILES_MAX) {
				snprintf(err, errlen, "%s: more than %d files", path,
					 ENVOY_FILES_MAX);
				bad = 1;
				break;
			}
			char *full = NULL;
			if (yp_grow((void **)&files, &fcap, nfiles, sizeof(*files)) < 0 ||
			    asprintf(&full, "%s/%s", path, d->d_name) < 0) {
				snprintf(err, errlen, "%s: out of memory", path);
				bad = 1;
				break;
			}
			files[nfiles++] = full;
		}
		closedir(dir);
		if (!bad && nfiles == 0) {
			snprintf(err, errlen, "%s: no *.yaml or *.yml file in this directory",
				 path);
			bad = 1;
		}
		qsort(files, nfiles, sizeof(*files), by_string);
	}
	/* every file is read, so that one run shows every error */
	for (size_t i = 0; i < nfiles && !bad; i++) {
		char *buf, one[YP_ERR_MAX];
		size_t len;
		if (yp_read_file(files[i], ENVOY_FILE_MAX, &buf, &len, one, sizeof(one)) < 0) {
			add_errors(err, errlen, one);
			continue;
		}
		if (read_file(r, &cap, files[i], buf, len, algo, one, sizeof(one)) < 0)
			add_errors(err, errlen, one);
		free(buf);
	}
	for (size_t i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	if (bad || err[0]) {
		envoy_rules_free(r);
		return NULL;
	}
	qsort(r->domains, r->ndomains, sizeof(*r->domains), by_domain);
	if (index_names(r, err, errlen) < 0) {
		envoy_rules_free(r);
		return NULL;
	}
	return r;
}

const struct envoy_domain *envoy_domain_find(const struct envoy_rules *r, const char *name,
					     size_t len)
{
	size_t lo = 0, hi = r ? r->ndomains : 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *d = r->domains[mid].name;
		int c = cmp_bytes(d, strlen(d), name, len);
		if (c == 0)
			return &r->domains[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The child of n named exactly s[0..len), or NULL. */
static const struct envoy_node *child_exact(const struct envoy_node *n, const char *s, size_t len)
{
	size_t lo = 0, hi = n->nexact;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct envoy_node *c = &n->children[n->exact[mid]];
		int cmp = cmp_bytes(c->composite, c->composite_len, s, len);
		if (cmp == 0)
			return c;
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Room for "key_value" of any entry: a request's message is at most
 * ENVOY_ENTRY_MAX bytes (gRPC's GRPC_MAX_MESSAGE); static, one thread. */
static char fk[ENVOY_ENTRY_MAX + 2];

const struct envoy_limit *envoy_lookup(const struct envoy_domain *d, const struct envoy_entry *e,
				       size_t n)
{
	const struct envoy_node *level = d->root;
	for (size_t i = 0; i < n; i++) {
		const struct envoy_node *next = NULL;
		size_t fl = e[i].key_len + 1 + e[i].value_len;
		if (fl > sizeof(fk))
			return NULL; /* cannot be (envoy_entry_fits): no entry is longer */
		{
			memcpy(fk, e[i].key, e[i].key_len);
			fk[e[i].key_len] = '_';
			memcpy(fk + e[i].key_len + 1, e[i].value, e[i].value_len);
			next = child_exact(level, fk, fl);
			for (size_t w = 0; !next && w < level->nwild; w++) {
				const struct envoy_node *c = &level->children[level->wild[w]];
				if (envoy_glob(c->composite, c->composite_len, fk, fl))
					next = c;
			}
		}
		if (!next)
			next = child_exact(level, e[i].key, e[i].key_len);
		if (!next)
			return NULL;
		if (i == n - 1)
			return next->limit;
		if (next->nchildren == 0)
			return NULL;
		level = next;
	}
	return NULL;
}

const char *envoy_unit_name(int unit)
{
	if (unit > 0 && (size_t)unit < sizeof(unit_names) / sizeof(unit_names[0]) &&
	    unit_names[unit])
		return unit_names[unit];
	return "unknown";
}

struct each {
	envoy_rule_fn *fn;
	void *arg;
	const char *domain;
	char path[1024];
};

static void each_level(struct each *e, const struct envoy_node *n, size_t path_len)
{
	for (size_t i = 0; i < n->nchildren; i++) {
		const struct envoy_node *c = &n->children[i];
		size_t len = path_len;
		if (len && len < sizeof(e->path) - 1)
			e->path[len++] = '.';
		size_t k = c->composite_len;
		if (k > sizeof(e->path) - 1 - len)
			k = sizeof(e->path) - 1 - len; /* cut, as the name is */
		memcpy(e->path + len, c->composite, k);
		len += k;
		e->path[len] = '\0';
		/* the rules collect_names indexes: those with counters */
		if (c->limit && !c->limit->unlimited && c->limit->requests_per_unit > 0)
			e->fn(e->arg, e->domain, e->path, len, c->limit);
		each_level(e, c, len);
	}
}

void envoy_rules_each(const struct envoy_rules *r, envoy_rule_fn *fn, void *arg)
{
	struct each e = {.fn = fn, .arg = arg};
	for (size_t i = 0; r && i < r->ndomains; i++) {
		e.domain = r->domains[i].name;
		if (r->domains[i].root)
			each_level(&e, r->domains[i].root, 0);
	}
}
