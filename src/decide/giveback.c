/*
 * giveback.c - a graceful stop's give-back of the units blocks hold (see
 * giveback.h): blocks_close hands each block on, store_give asks Redis to
 * take its units back, and the answers are counted here and in the
 * blocks' own counts (returned, or lapsed).
 */
#include "giveback.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "clock.h"
#include "cmd_types.h"
#include "config.h"
#include "log.h"
#include "policy.h"
#include "store.h"
#include "store_give.h"

struct giveback {
	void (*done)(void *arg);
	void *arg;
	size_t pending; /* calls out, and 1 while starting */
	int abandoned;
	/* blocks handed on, the units they held, those Redis took back,
	 * the calls that failed and the first one's why */
	size_t blocks;
	long long units, returned;
	size_t failed;
	char why[128];
	/* while closing one store's table */
	const struct config *cfg;
	struct store *store;
	struct blocks *table;
};

/* One block's call. */
struct give_one {
	struct giveback *g;
	struct blocks *table;
	int64_t units;
};

static void report(const struct giveback *g, const char *when)
{
	long long lapsed = g->units - g->returned;
	if (!g->blocks)
		return;
	if (lapsed == 0) {
		log_info("gave back %lld units of %zu %s%s", g->returned, g->blocks,
			 log_plural(g->blocks, "block", "blocks"), when);
		return;
	}
	/* not taken back: their window had ended (Redis's clock), or no answer */
	log_info("gave back %lld units of %zu %s%s; %lld lapsed (%zu %s failed%s%s)", g->returned,
		 g->blocks, log_plural(g->blocks, "block", "blocks"), when, lapsed, g->failed,
		 log_plural(g->failed, "call", "calls"), g->failed ? ": " : "", g->why);
}

/* One call fewer out: the last one ends the give-back. */
static void settle(struct giveback *g)
{
	if (--g->pending)
		return;
	if (!g->abandoned) {
		report(g, "");
		g->done(g->arg);
	}
	free(g);
}

static void given(void *arg, const struct store_give_result *res)
{
	struct give_one o = *(struct give_one *)arg;
	free(arg);
	struct giveback *g = o.g;
	int64_t returned = res->why ? 0 : res->returned;
	blocks_returned(o.table, o.units, returned);
	g->returned += returned;
	if (res->why && g->failed++ == 0) {
		size_t n = strlen(res->why);
		if (n >= sizeof(g->why))
			n = sizeof(g->why) - 1;
		memcpy(g->why, res->why, n);
		g->why[n] = '\0';
	}
	settle(g);
}

/* blocks_close's: a block with units, counted in window. */
static void hand(void *arg, const char *action, size_t alen, const char *user, size_t ulen,
		 int64_t units, int64_t window)
{
	struct giveback *g = arg;
	g->blocks++;
	g->units += units;
	const struct policy *p = config_find_policy(g->cfg, action, alen);
	const struct config_redis *rc = p ? config_redis_of(g->cfg, p) : NULL;
	struct give_one *o = rc ? malloc(sizeof(*o)) : NULL;
	if (!o) {
		/* its policy is gone (cannot be: a reload drops blocks) */
		blocks_returned(g->table, units, 0);
		g->failed++;
		return;
	}
	*o = (struct give_one){g, g->table, units};
	g->pending++;
	struct store_give_request req = {
		.policy = p,
		.prefix = g->cfg->prefix,
		.prefix_len = strlen(g->cfg->prefix),
		.user = user,
		.user_len = ulen,
		.units = units,
		.window = window,
		.timeout_ms = rc->timeout_ms,
	};
	store_give(g->store, &req, given, o);
}

struct giveback *giveback_start(const struct cmd_env *env, const struct config *cfg,
				void (*done)(void *arg), void *arg)
{
	struct giveback *g = calloc(1, sizeof(*g));
	if (!g) {
		done(arg);
		return NULL;
	}
	g->done = done;
	g->arg = arg;
	g->cfg = cfg;
	g->pending = 1;
	uint64_t now = clock_mono_us();
	for (size_t i = 0; i <= env->nnamed; i++) {
		g->table = i == 0 ? env->blocks : env->named[i - 1].blocks;
		g->store = i == 0 ? env->store : env->named[i - 1].store;
		if (g->table)
			blocks_close(g->table, now, hand, g);
	}
	g->cfg = NULL;
	if (g->pending == 1) {
		settle(g);
		return NULL;
	}
	g->pending--;
	return g;
}

void giveback_abandon(struct giveback *g)
{
	if (!g)
		return;
	g->abandoned = 1;
	report(g, " before the drain's end");
}
