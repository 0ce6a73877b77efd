/* stats.c - the process-wide counters and the names they are reported under. */
#include "stats.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "log.h"

_Static_assert(STATS_ACTIONS_MAX >= CONFIG_POLICIES_MAX, "a whole file is counted");

struct stats stats;

/* Decision latency and Redis round trips: the local deny cache answers in
 * microseconds, a Redis nearby in a few hundred, redis.timeout (default
 * 1 s in the example) bounds the rest. */
const struct hist_bounds stats_latency_bounds = {14,
						 6,
						 {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000,
						  50000, 100000, 250000, 500000, 1000000}};
/* Up to store_redis.c's MAX_BATCH (256) requests in one call. */
const struct hist_bounds stats_batch_bounds = {9, 0, {1, 2, 4, 8, 16, 32, 64, 128, 256}};

/*
 * Per-action counters: an open-addressing table by name that only grows
 * (a policy removed by a reload keeps its counts should it come back), and
 * for the running configuration an array by policy index, so the hot path
 * finds its counters without hashing. Requests still running under an
 * older configuration look theirs up by name.
 */
static struct stats_action **table;
static size_t table_cap, table_n;
static int table_full_logged;
static struct stats_action **bound;
static const struct config *bound_cfg;

static uint64_t name_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static struct stats_action **slot_for(struct stats_action **t, size_t cap, const char *name,
				      size_t len)
{
	size_t i = (size_t)name_hash(name, len) & (cap - 1);
	while (t[i] && !(t[i]->name_len == len && memcmp(t[i]->name, name, len) == 0))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

static int table_grow(void)
{
	size_t ncap = table_cap ? table_cap * 2 : 64;
	struct stats_action **nt = calloc(ncap, sizeof(*nt));
	if (!nt)
		return -1;
	for (size_t i = 0; i < table_cap; i++)
		if (table[i])
			*slot_for(nt, ncap, table[i]->name, table[i]->name_len) = table[i];
	free(table);
	table = nt;
	table_cap = ncap;
	return 0;
}

/* The counters of `name`, created on first use; NULL when out of room. */
static struct stats_action *action_get(const char *name, size_t len)
{
	if (table_cap) {
		struct stats_action *a = *slot_for(table, table_cap, name, len);
		if (a)
			return a;
	}
	struct stats_action *a = NULL;
	if (table_n < STATS_ACTIONS_MAX && ((table_n + 1) * 2 <= table_cap || table_grow() == 0))
		a = calloc(1, sizeof(*a));
	if (!a) {
		if (!table_full_logged)
			log_warn("metrics: no room to count action %.*s separately", (int)len,
				 name);
		table_full_logged = 1;
		return NULL;
	}
	memcpy(a->name, name, len);
	a->name_len = len;
	*slot_for(table, table_cap, name, len) = a;
	table_n++;
	return a;
}

static size_t tops_made; /* actions with heavy hitters (at most STATS_TOP_MAX) */

void stats_bind(const struct config *cfg)
{
	struct stats_action **nb = calloc(cfg->npolicies ? cfg->npolicies : 1, sizeof(*nb));
	if (nb)
		for (size_t i = 0; i < cfg->npolicies; i++)
			nb[i] = action_get(cfg->policies[i].name, cfg->policies[i].name_len);
	free(bound);
	bound = nb;
	bound_cfg = nb ? cfg : NULL;
	/* the heavy hitters of actions gone (their counts stay, by name) */
	for (size_t i = 0; i < table_cap; i++) {
		struct stats_action *a = table[i];
		if (a && a->top && !config_find_policy(cfg, a->name, a->name_len)) {
			free(a->top);
			a->top = NULL;
			tops_made--;
		}
		if (a)
			a->top_failed = 0; /* there may be room now */
	}
}

static struct stats_action *action_of(const struct config *cfg, const struct policy *p)
{
	/* an override's policy is not one of cfg's: found by its name */
	if (cfg && cfg == bound_cfg && p >= cfg->policies && p < cfg->policies + cfg->npolicies)
		return bound[p - cfg->policies];
	return action_get(p->name, p->name_len);
}

const struct stats_action *stats_action_find(const char *name, size_t len)
{
	return table_cap ? *slot_for(table, table_cap, name, len) : NULL;
}

const struct stats_action *stats_action_of(const struct config *cfg, const struct policy *p)
{
	return action_of(cfg, p);
}

struct stats_action *stats_action_counters(const struct config *cfg, const struct policy *p)
{
	return action_of(cfg, p);
}

unsigned long long stats_top_untracked;

/* a's heavy hitters, made on first use; NULL past STATS_TOP_MAX or out of memory */
static struct top *top_of(struct stats_action *a)
{
	if (a->top)
		return a->top;
	if (tops_made >= STATS_TOP_MAX || !(a->top = calloc(1, sizeof(*a->top)))) {
		if (!stats_top_untracked++)
			log_warn("metrics: no room for the heavy hitters of action %.*s "
				 "(%d actions have theirs)",
				 (int)a->name_len, a->name, STATS_TOP_MAX);
		return NULL;
	}
	tops_made++;
	return a->top;
}

void stats_count_decision(const struct config *cfg, const struct policy *p, enum stats_from from,
			  int allowed, const char *user, size_t user_len, int peek, uint64_t now_us)
{
	allowed = !!allowed;
	stats.decisions[from][allowed]++;
	struct stats_action *a = action_of(cfg, p);
	if (!a)
		return;
	a->decisions[from][allowed]++;
	/* a PEEK is neither a request nor a denial: it changes nothing */
	if (peek || !user_len)
		return;
	struct top *t = a->top_failed ? NULL : top_of(a);
	if (t)
		top_count(t, user, user_len, !peek, !allowed, now_us ? now_us : clock_mono_us());
	else
		a->top_failed = 1;
}

size_t stats_top(const char *name, size_t len, enum top_by by, size_t max, struct top_row *rows,
		 uint64_t *requests, uint64_t *denied)
{
	struct stats_action *a = table_cap ? *slot_for(table, table_cap, name, len) : NULL;
	*requests = *denied = 0;
	if (!a || !a->top)
		return 0;
	uint64_t now = clock_mono_us();
	top_totals(a->top, now, requests, denied);
	return top_read(a->top, by, now, rows, max);
}

void stats_count_shadow(const struct config *cfg, const struct policy *p)
{
	stats.shadow_denied++;
	struct stats_action *a = action_of(cfg, p);
	if (a)
		a->shadow_denied++;
}

void stats_free(void)
{
	for (size_t i = 0; i < table_cap; i++)
		if (table[i]) {
			free(table[i]->top);
			free(table[i]);
		}
	free(table);
	free(bound);
	table = bound = NULL;
	bound_cfg = NULL;
	table_cap = table_n = 0;
}

void stats_count_error(enum cmd_error e)
{
	if ((unsigned)e < CMD_ERR_N)
		stats.errors[e]++;
}

void stats_observe_decision(enum stats_front f, uint64_t us)
{
	if ((unsigned)f < STATS_FRONT_N)
		hist_observe(&stats.decision_us[f], &stats_latency_bounds, us);
}

const char *stats_lease_event_name(enum stats_lease_event e)
{
	switch (e) {
	case STATS_LEASE_ACQUIRED:
		return "acquired";
	case STATS_LEASE_RELEASED:
		return "released";
	case STATS_LEASE_RELEASED_ON_CLOSE:
		return "released_on_close";
	case STATS_LEASE_EXPIRED:
		return "expired";
	case STATS_LEASE_FAILED:
		return "failed";
	case STATS_LEASE_UNBOOKED:
		return "unbooked";
	case STATS_LEASE_N:
		break;
	}
	return "?";
}

const char *stats_auth_failure_name(enum stats_auth_failure f)
{
	switch (f) {
	case STATS_AUTH_NOAUTH:
		return "noauth";
	case STATS_AUTH_BAD_TOKEN:
		return "bad_token";
	case STATS_AUTH_FORBIDDEN:
		return "forbidden";
	case STATS_AUTH_N:
		break;
	}
	return "?";
}

static struct stats_identity identities[STATS_IDENTITIES_MAX];
static size_t nidentities;

void stats_count_identity(const char *name)
{
	for (size_t i = 0; i < nidentities; i++)
		if (strcmp(identities[i].name, name) == 0) {
			identities[i].requests++;
			return;
		}
	if (nidentities == STATS_IDENTITIES_MAX || strlen(name) >= sizeof(identities[0].name))
		return;
	memcpy(identities[nidentities].name, name, strlen(name) + 1);
	identities[nidentities++].requests = 1;
}

const struct stats_identity *stats_identities(size_t *n)
{
	*n = nidentities;
	return identities;
}

const char *stats_tls_failure_name(enum stats_tls_failure f)
{
	switch (f) {
	case STATS_TLS_HANDSHAKE:
		return "handshake";
	case STATS_TLS_TIMEOUT:
		return "timeout";
	case STATS_TLS_PLAINTEXT:
		return "plaintext";
	case STATS_TLS_ON_PLAIN:
		return "tls_on_plaintext";
	case STATS_TLS_N:
		break;
	}
	return "?";
}

const char *stats_front_name(enum stats_front f)
{
	if ((unsigned)f < CONFIG_PROTOCOL_N)
		return config_protocol_name((enum config_protocol)f);
	return f == STATS_FRONT_RESP ? "resp" : "other";
}

static const char *const from_names[STATS_FROM_N] = {
	[STATS_FROM_STORE] = "redis",	    /* Redis decided */
	[STATS_FROM_CACHE] = "cache",	    /* a cached denial */
	[STATS_FROM_FALLBACK] = "fallback", /* on_store_error allow or deny */
	[STATS_FROM_OVERRIDE] = "override", /* unlimited or blocked */
	[STATS_FROM_MEMORY] = "memory",	    /* store: memory */
	[STATS_FROM_LOCAL] = "local",	    /* on_store_error: local */
	[STATS_FROM_BLOCK] = "block",	    /* a hot key's block (blocks.h) */
};

const char *stats_from_name(enum stats_from f)
{
	return (unsigned)f < STATS_FROM_N ? from_names[f] : "other";
}
