/*
 * test_decide.c - the decision half in process: cmd_execute (cmd.c, multi.c)
 * with the deny cache and the local fallback, against the memory store
 * dressed up as Redis (RESETs followed, so denials are cached; failing on
 * demand; granting blocks as the script does; answering later on demand),
 * on one clock the test moves (clock_mono_set and the memory store's
 * clock). tests/vectors.txt through cmd, then every verb and stage: the
 * deny cache, MALLOW all or nothing, shadow mode, bans, overrides (in the
 * configuration and at run time), PEEK, cost above the limit, unknown
 * actions, CHARGE, HOLD/SETTLE/CANCEL, ACQUIRE/RELEASE/RENEW (the memory
 * store's leases), rights (listen[].auth, identities), delays, blocks for
 * hot keys, TOP, on_store_error, STATE.
 */
#include <check.h>

#include "runner.h"
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "clock.h"
#include "cmd.h"
#include "config.h"
#include "config_area.h"
#include "delay.h"
#include "denycache.h"
#include "lease.h"
#include "leases.h"
#include "local.h"
#include "override_live.h"
#include "policy.h"
#include "stats.h"
#include "store.h"
#include "store_memory.h"
#include "vectors.h"

/* ---- a store like Redis, deciding in memory ---- */

struct fake {
	struct store base; /* first: the store's ops find the fake */
	struct store *mem;
	int fail;		  /* answer every request STORE_FAILED */
	unsigned long generation; /* moved by the test: Redis lost its state */
	int submits;		  /* requests that reached the memory store */
	/* held, not decided, while defer is set: fake_flush decides them
	 * (Redis answering later); the requests' bytes are the test's */
	int defer, nheld;
	struct fake_held {
		struct store_request req;
		store_done_fn *done;
		void *arg;
	} held[8];
};

/* The memory store's answer to a request that asked for a block, as the
 * script's 'k' has it (block_take): a window's block of at most a quarter
 * of what the limit has left, charged with the decision, valid until the
 * window ends; the request's own figures as if no block were taken. */
struct fake_grant {
	struct store *mem;
	const struct store_request *req;
	store_done_fn *done;
	void *arg;
};

static void fake_charged(void *arg, const struct store_result *res)
{
	ck_assert_int_eq(res->status, STORE_OK);
	*(int *)arg = 1;
}

static void fake_granted(void *arg, const struct store_result *res)
{
	struct fake_grant *g = arg;
	struct store_result out = *res;
	ck_assert_int_eq(g->req->policy->algo, POLICY_FIXED_WINDOW);
	int64_t extra = res->remaining / 4;
	if (extra > g->req->block_want)
		extra = g->req->block_want;
	if (res->status == STORE_OK && res->allowed && extra > 0) {
		struct store_request charge = *g->req;
		int charged = 0;
		charge.op = STORE_CHARGE;
		charge.cost = extra;
		charge.block_want = 0;
		store_submit(g->mem, &charge, fake_charged, &charged);
		ck_assert_int_eq(charged, 1);
		out.block = extra;
		out.block_ms = res->reset_ms;
	}
	g->done(g->arg, &out);
}

static void fake_decide(struct fake *f, const struct store_request *req, store_done_fn *done,
			void *arg)
{
	f->submits++;
	if (req->block_want > 0) {
		struct fake_grant g = {f->mem, req, done, arg};
		struct store_request plain = *req;
		plain.block_want = 0;
		store_submit(f->mem, &plain, fake_granted, &g);
		return;
	}
	store_submit(f->mem, req, done, arg);
}

static void fake_submit(struct store *s, const struct store_request *req, store_done_fn *done,
			void *arg)
{
	struct fake *f = (struct fake *)s;
	if (f->fail) {
		struct store_result res = {.status = STORE_FAILED,
					   .error = STORE_ERROR_OTHER,
					   .detail = "the fake is down"};
		done(arg, &res);
		return;
	}
	if (f->defer) {
		ck_assert_int_lt(f->nheld, 8);
		f->held[f->nheld++] = (struct fake_held){*req, done, arg};
		return;
	}
	fake_decide(f, req, done, arg);
}

/* Decides the held requests, in order (those they set off decided too;
 * failed if the fake is down now). */
static void fake_flush(struct fake *f)
{
	f->defer = 0;
	for (int i = 0; i < f->nheld; i++)
		fake_submit(&f->base, &f->held[i].req, f->held[i].done, f->held[i].arg);
	f->nheld = 0;
}

static void fake_free(struct store *s)
{
	(void)s;
}

static size_t fake_pending(const struct store *s)
{
	(void)s;
	return 0;
}

static unsigned long fake_generation(const struct store *s)
{
	return ((const struct fake *)s)->generation;
}

static void fake_watch_resets(struct store *s, const char *prefix, store_reset_fn *fn, void *arg)
{
	(void)s, (void)prefix, (void)fn, (void)arg;
}

static int fake_resets_followed(const struct store *s)
{
	(void)s;
	return 1;
}

static void fake_health(const struct store *s, struct store_health *h)
{
	(void)s;
	h->conns = h->conns_up = 1;
}

static void fake_call(struct store *s, const struct store_call *c, store_call_fn *done, void *arg)
{
	(void)s, (void)c;
	done(arg, NULL, "no redis here");
}

/* One Redis: several pairs in one atomic call. */
static const struct store_ops fake_atomic_ops = {
	fake_submit,	      fake_free,   fake_pending, fake_generation, fake_watch_resets,
	fake_resets_followed, fake_health, fake_call,	 .multi = 1,
};
/* A Cluster: pairs checked, then charged one by one (multi.c). */
static const struct store_ops fake_cluster_ops = {
	fake_submit,	      fake_free,   fake_pending, fake_generation, fake_watch_resets,
	fake_resets_followed, fake_health, fake_call,	 .multi = 0,
};

/* ---- the fixture: one configuration, one clock ---- */

static const char config_yaml[] =
	"local_share: 0.5\n"
	"throttle: {enabled: true}\n"
	"policies:\n"
	"  login: {limits: [3/1m]}\n"
	"  api: {limits: [5/1m]}\n"
	"  big: {limits: [100/1m]}\n"
	"  quiet: {limits: [1/1m], shadow: true}\n"
	"  banned: {limits: [1/1s], ban: {after: 3, within: 1m, for: 10m}}\n"
	"  vip: {limits: [2/1m], overrides: {alice: unlimited, mallory: blocked, bob: 4/1m}}\n"
	"  open: {limits: [1/1m], on_store_error: allow}\n"
	"  closed: {limits: [1/1m], on_store_error: deny}\n"
	"  strict: {limits: [1/1m], on_store_error: error}\n"
	"  loc: {limits: [4/1m], on_store_error: local}\n"
	"  spend: {algorithm: fixed_window, limits: [10/1m], hold: 5s}\n"
	"  pool: {algorithm: concurrency, limit: 2, lease: 30s}\n"
	"  pool_deny: {algorithm: concurrency, limit: 2, lease: 30s, on_store_error: deny}\n"
	"  pool_local: {algorithm: concurrency, limit: 2, lease: 30s, on_store_error: local}\n"
	"  smooth: {algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 2s}}\n"
	"  wwin: {algorithm: fixed_window, limits: [2/1s], delay: {max: 2s}}\n"
	"  hot: {algorithm: fixed_window, limits: [100/1m], blocks: {max: 8}}\n"
	"  warm: {algorithm: fixed_window, limits: [10/1m], blocks: {max: 8},\n"
	"         overrides: {bob: 20/1m}}\n"
	"  layered: {limits: [2/1s, 5/1m], ban: {after: 2, within: 1m, for: 10m},\n"
	"            on_store_error: allow}\n"
	"  daily: {algorithm: sliding_window_counter, limits: [10/day]}\n"
	"  gcra: {algorithm: funnel, capacity: 4, rate: 2/1s}\n";

static struct fixture {
	struct event_base *base;
	struct fake fake;
	struct config *cfg;
	struct denycache *deny;
	struct local *local;
	struct leases *leases;
	struct delays *delays; /* the delay tests' */
	struct blocks *blocks; /* the block tests' */
	struct cmd_env env;
	int64_t now; /* microseconds, both clocks */
	struct cmd_slot slot;
	int completed;
} F;

static uint64_t fixture_mono(void *arg)
{
	(void)arg;
	return (uint64_t)F.now;
}

static int64_t fixture_store_clock(void *arg)
{
	(void)arg;
	return F.now;
}

static void fixture_open(const struct store_ops *ops)
{
	memset(&F, 0, sizeof(F));
	F.now = 1800000000000000LL; /* a whole minute: fixed windows start here */
	clock_mono_set(fixture_mono, NULL);
	F.base = event_base_new();
	ck_assert_ptr_nonnull(F.base);
	char err[512];
	F.cfg = config_parse("t.yaml", config_yaml, strlen(config_yaml), err, sizeof(err));
	if (!F.cfg)
		ck_abort_msg("config: %s", err);
	F.fake.mem = store_memory_new(F.base, &F.cfg->memory, err, sizeof(err));
	ck_assert_ptr_nonnull(F.fake.mem);
	store_memory_set_clock(F.fake.mem, fixture_store_clock, NULL);
	F.fake.base.ops = ops;
	F.deny = denycache_new(1024);
	ck_assert_ptr_nonnull(F.deny);
	F.local = local_new(F.base, F.cfg, err, sizeof(err));
	ck_assert_ptr_nonnull(F.local);
	F.leases = leases_new();
	ck_assert_ptr_nonnull(F.leases);
	F.env = (struct cmd_env){&F.fake.base, F.deny, NULL, F.local, F.leases,
				 NULL,	       NULL,   NULL, 0};
}

static void fixture_atomic(void)
{
	fixture_open(&fake_atomic_ops);
}

static void fixture_cluster(void)
{
	fixture_open(&fake_cluster_ops);
}

static void fixture_close(void)
{
	cmd_result_release(&F.slot.res);
	if (F.delays) {
		ck_assert_uint_eq(delays_waiting(F.delays), 0);
		delays_free(F.delays);
	}
	blocks_free(F.blocks);
	leases_free(F.leases);
	local_free(F.local);
	denycache_free(F.deny);
	store_free(F.fake.mem);
	config_unref(F.cfg);
	event_base_free(F.base);
	clock_mono_set(NULL, NULL);
}

static void on_complete(struct cmd_slot *slot)
{
	(void)slot;
	F.completed++;
}

/* Executes req and returns its result, running the loop until it is
 * answered (the memory store answers inside; the loop is for any that
 * would not). */
static struct cmd_result execute(const struct cmd_request *req, int admin)
{
	cmd_result_release(&F.slot.res);
	memset(&F.slot, 0, sizeof(F.slot));
	cmd_slot_init(&F.slot, 0, 0, on_complete);
	F.completed = 0;
	struct cmd_caller caller = {.admin = admin};
	cmd_execute(F.cfg, &F.env, req, &caller, &F.slot);
	for (int i = 0; i < 100 && !F.completed; i++)
		event_base_loop(F.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert_int_eq(F.completed, 1);
	ck_assert_ptr_null(F.slot.cfg); /* released once answered */
	return F.slot.res;
}

/* Executes req for caller, as parsed by front (enum stats_front). */
static struct cmd_result execute_as(const struct cmd_request *req, struct cmd_caller *caller,
				    int front)
{
	cmd_result_release(&F.slot.res);
	memset(&F.slot, 0, sizeof(F.slot));
	cmd_slot_init(&F.slot, front, 0, on_complete);
	F.completed = 0;
	cmd_execute(F.cfg, &F.env, req, caller, &F.slot);
	ck_assert_int_eq(F.completed, 1);
	ck_assert_ptr_null(F.slot.cfg);
	return F.slot.res;
}

/* Runs on yaml's configuration from now on (as a reload brings). */
static void fixture_reload(const char *yaml)
{
	char err[512];
	struct config *next = config_parse("t.yaml", yaml, strlen(yaml), err, sizeof(err));
	if (!next || config_identity_load(next, "t.yaml", err, sizeof(err)) < 0)
		ck_abort_msg("config: %s", err);
	config_unref(F.cfg);
	F.cfg = next;
}

static struct cmd_result one(enum cmd_verb verb, const char *action, const char *user, int64_t cost)
{
	struct cmd_request req = {
		.verb = verb,
		.user = user,
		.user_len = strlen(user),
		.action = action,
		.action_len = strlen(action),
		.cost = cost,
	};
	return execute(&req, 1);
}

static struct cmd_result allow(const char *action, const char *user)
{
	return one(CMD_ALLOW, action, user, 1);
}

static struct cmd_result peek(const char *action, const char *user)
{
	return one(CMD_PEEK, action, user, 1);
}

static void reset(const char *action, const char *user)
{
	ck_assert_int_eq(one(CMD_RESET, action, user, 0).kind, CMD_REPLY_OK);
}

/* MALLOW or MPEEK of user over n actions, each charged cost. */
static struct cmd_result many_cost(enum cmd_verb verb, const char *user, int n,
				   const char *const *actions, int64_t cost)
{
	struct cmd_request req = {.verb = verb, .cost = cost, .npairs = n};
	for (int i = 0; i < n; i++)
		req.pairs[i] =
			(struct cmd_pair){user, strlen(user), actions[i], strlen(actions[i]), NULL};
	return execute(&req, 0);
}

static struct cmd_result many(enum cmd_verb verb, const char *user, int n,
			      const char *const *actions)
{
	return many_cost(verb, user, n, actions, 1);
}

/* A request naming an id (SETTLE, CANCEL, RELEASE, RENEW), its action the
 * id's as the parsers set it; actual: a SETTLE's. */
static struct cmd_result on_id(enum cmd_verb verb, const char *id, int64_t actual)
{
	struct cmd_request req = {
		.verb = verb,
		.action = id,
		.action_len = lease_id_action(id, strlen(id)),
		.lease_id = id,
		.lease_id_len = strlen(id),
		.actual = actual,
	};
	return execute(&req, 0);
}

/* The id a HOLD or ACQUIRE answered with, checked for what it must name
 * (action, user, cost), copied into buf: the result's goes with the next
 * request. */
static const char *id_of(struct cmd_result r, const char *action, const char *user, int64_t cost,
			 char *buf)
{
	ck_assert_int_eq(r.kind, CMD_REPLY_LEASE);
	ck_assert_ptr_nonnull(r.item);
	memcpy(buf, r.item->text, r.item->ulen);
	buf[r.item->ulen] = '\0';
	struct lease_id id;
	ck_assert_int_eq(lease_id_parse(buf, r.item->ulen, &id), 0);
	ck_assert_int_eq((int)id.action_len, (int)strlen(action));
	ck_assert(memcmp(id.action, action, id.action_len) == 0);
	ck_assert_int_eq((int)id.user_len, (int)strlen(user));
	ck_assert(memcmp(id.user, user, id.user_len) == 0);
	ck_assert_int_eq(id.cost, cost);
	return buf;
}

#define ck_error(r, e, m)                                   \
	do {                                                \
		struct cmd_result r_ = (r);                 \
		ck_assert_int_eq(r_.kind, CMD_REPLY_ERROR); \
		ck_assert_int_eq(r_.error, (e));            \
		ck_assert_str_eq(r_.msg, (m));              \
	} while (0)

#define ck_reply(r, k, a, l, rem, retry)                      \
	do {                                                  \
		struct cmd_result r_ = (r);                   \
		ck_assert_int_eq(r_.kind, (k));               \
		ck_assert_int_eq(r_.allowed, (a));            \
		ck_assert_int_eq(r_.limit, (l));              \
		ck_assert_int_eq(r_.remaining, (rem));        \
		ck_assert_int_eq(r_.retry_after_ms, (retry)); \
	} while (0)
#define ck_decision(r, a, l, rem, retry) ck_reply(r, CMD_REPLY_DECISION, a, l, rem, retry)
/* allowed with an id: a HOLD's, an ACQUIRE's or a RENEW's */
#define ck_lease(r, l, rem, reset)                            \
	do {                                                  \
		struct cmd_result rl_ = (r);                  \
		ck_reply(rl_, CMD_REPLY_LEASE, 1, l, rem, 0); \
		ck_assert_int_eq(rl_.reset_ms, (reset));      \
	} while (0)

/* ---- tests/vectors.txt through cmd_execute ---- */

struct replay {
	struct policy p, groups[CMD_PAIRS_MAX];
	int ngroups, all_shadow, scenario, failures;
	/* a Cluster checks the pairs with PEEK, which a ban does not count:
	 * its multi scenarios with a ban answer otherwise (skipped, counted) */
	int skip_banned_multi, skipping, skipped;
	int cached; /* steps answered without the store */
	char user[32];
};

static void replay_policy(const struct policy *p, void *arg)
{
	struct replay *r = arg;
	r->p = *p;
	r->p.shadow = 0;
	r->ngroups = 0;
	r->skipping = 0;
	snprintf(r->user, sizeof(r->user), "u%d", ++r->scenario);
}

static void replay_multi(void *arg)
{
	struct replay *r = arg;
	r->ngroups = 0;
	r->all_shadow = 1;
	r->skipping = 0;
	snprintf(r->user, sizeof(r->user), "u%d", ++r->scenario);
}

static void replay_group(const struct policy *p, int shadow, void *arg)
{
	struct replay *r = arg;
	ck_assert_int_lt(r->ngroups, CMD_PAIRS_MAX);
	struct policy *g = &r->groups[r->ngroups];
	*g = *p;
	snprintf(g->name, sizeof(g->name), "g%d", r->ngroups);
	g->name_len = strlen(g->name);
	g->shadow = shadow; /* config_shadow reads the policy's own first */
	r->all_shadow &= shadow;
	r->ngroups++;
	if (p->ban.after && r->skip_banned_multi)
		r->skipping = 1;
}

static void replay_step(const struct vector_step *s, void *arg)
{
	static const enum cmd_verb verbs[] = {[LIMITER_ALLOW] = CMD_ALLOW,
					      [LIMITER_PEEK] = CMD_PEEK,
					      [LIMITER_RESET] = CMD_RESET};
	struct replay *r = arg;
	if (r->skipping) {
		r->skipped++;
		return;
	}
	struct cmd_request req = {
		.verb = verbs[s->op],
		.user = r->user,
		.user_len = strlen(r->user),
		.action = r->p.name,
		.action_len = r->p.name_len,
		.cost = s->cost,
		.policy = &r->p,
	};
	if (s->multi) {
		req.verb = s->op == LIMITER_ALLOW ? CMD_MALLOW : CMD_MPEEK;
		req.npairs = r->ngroups;
		for (int g = 0; g < r->ngroups; g++)
			req.pairs[g] =
				(struct cmd_pair){r->user, strlen(r->user), r->groups[g].name,
						  r->groups[g].name_len, &r->groups[g]};
	}
	F.now = s->now_us;
	int submits = F.fake.submits;
	struct cmd_result got = execute(&req, 1);
	r->cached += F.fake.submits == submits;
	struct limiter_result want = s->want;
	if (s->multi && r->all_shadow && !want.allowed) {
		want.allowed = 1; /* shadow mode: a denial answered ALLOWED */
		want.retry_after_ms = 0;
	}
	int ok = s->op == LIMITER_RESET
			 ? got.kind == CMD_REPLY_OK
			 : got.kind == CMD_REPLY_DECISION && got.allowed == want.allowed &&
				   got.limit == want.limit && got.remaining == want.remaining &&
				   got.retry_after_ms == want.retry_after_ms &&
				   got.reset_ms == want.reset_ms &&
				   (!s->multi || got.pair == s->want_group);
	if (!ok) {
		r->failures++;
		fprintf(stderr, "vectors.txt:%d: cmd got kind %d: %d %lld %lld %lld %lld pair %d\n",
			s->line, got.kind, got.allowed, (long long)got.limit,
			(long long)got.remaining, (long long)got.retry_after_ms,
			(long long)got.reset_ms, got.pair);
	}
}

static void replay_vectors(void)
{
	struct replay r = {.skip_banned_multi = !F.fake.base.ops->multi};
	const struct vector_calls calls = {replay_policy, replay_multi, replay_group, replay_step};
	int n = vectors_read(TEST_SRCDIR "/tests/vectors.txt", &calls, &r);
	ck_assert_int_gt(n, 50);
	ck_assert_int_eq(r.failures, 0);
	ck_assert_int_lt(r.skipped, 20);
	if (F.env.deny)
		ck_assert_int_gt(r.cached, 0);
	else
		ck_assert_int_eq(r.cached, 0);
}

/* Every vector, with the deny cache answering the repeated denials it may:
 * no answer may differ from the store's. */
START_TEST(vectors_through_cmd)
{
	replay_vectors();
}
END_TEST

START_TEST(vectors_without_deny_cache)
{
	F.env.deny = NULL;
	replay_vectors();
}
END_TEST

/* ---- the deny cache ---- */

START_TEST(deny_cache_answers_repeated_denials)
{
	for (int i = 0; i < 3; i++)
		ck_decision(allow("login", "eve"), 1, 3, 2 - i, 0);
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	int submits = F.fake.submits;
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	F.now += 5000000;
	/* from the cache: the store is not asked, the wait counts down */
	ck_decision(allow("login", "eve"), 0, 3, 0, 55000);
	ck_decision(peek("login", "eve"), 0, 3, 0, 55000);
	ck_assert_int_eq(F.fake.submits, submits);
	/* another user, another action: not cached */
	ck_decision(allow("login", "mallet"), 1, 3, 2, 0);
	ck_decision(allow("api", "eve"), 1, 5, 4, 0);
	ck_assert_int_eq(F.fake.submits, submits + 2);
}
END_TEST

START_TEST(deny_cache_expires)
{
	for (int i = 0; i < 3; i++)
		allow("login", "eve");
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	/* once the wait is over the store decides again, and allows */
	F.now += 60000000;
	int submits = F.fake.submits;
	ck_decision(allow("login", "eve"), 1, 3, 0, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	ck_assert_uint_eq(denycache_size(F.deny), 0);
}
END_TEST

START_TEST(deny_cache_reset_clears)
{
	for (int i = 0; i < 3; i++)
		allow("login", "eve");
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	reset("login", "eve");
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	ck_decision(allow("login", "eve"), 1, 3, 2, 0);
}
END_TEST

START_TEST(deny_cache_reset_needs_admin)
{
	struct cmd_request req = {.verb = CMD_RESET,
				  .user = "eve",
				  .user_len = 3,
				  .action = "login",
				  .action_len = 5};
	struct cmd_result r = execute(&req, 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_FORBIDDEN);
}
END_TEST

START_TEST(deny_cache_store_generation_clears)
{
	for (int i = 0; i < 3; i++)
		allow("login", "eve");
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	/* Redis lost its state (a reconnect): the cached denial goes, and
	 * the store is asked again (here, still denying) */
	F.fake.generation++;
	int submits = F.fake.submits;
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	ck_assert_int_eq(F.fake.submits, submits + 1);
}
END_TEST

/* A configuration with an override for the denied user (as a reload
 * brings): the override answers, not the cached denial. */
START_TEST(deny_cache_override_wins)
{
	for (int i = 0; i < 3; i++)
		allow("login", "eve");
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	static const char yaml[] =
		"policies:\n"
		"  login: {limits: [3/1m], overrides: {eve: unlimited, bob: 5/1m}}\n";
	char err[256];
	struct config *next = config_parse("t.yaml", yaml, strlen(yaml), err, sizeof(err));
	ck_assert_ptr_nonnull(next);
	config_unref(F.cfg);
	F.cfg = next;
	ck_decision(allow("login", "eve"), 1, -1, -1, 0);
	/* an override's limits: decided by the store, never from the cache */
	for (int i = 0; i < 3; i++)
		allow("login", "bob");
	int submits = F.fake.submits;
	ck_decision(allow("login", "bob"), 1, 5, 1, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
}
END_TEST

START_TEST(deny_cache_cost_is_part_of_the_key)
{
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 1, 3, 1, 0);
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 0, 3, 1, 60000);
	/* a smaller request still fits: the cached denial of cost 2 is not its answer */
	ck_decision(one(CMD_ALLOW, "login", "eve", 1), 1, 3, 0, 0);
	/* which made the cached denial's remaining stale: the store answers */
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 0, 3, 0, 60000);
}
END_TEST

/* A CHARGE or an allowed HOLD takes units: a denial cached before it has a
 * stale remaining, so the store must answer the next one (as after an
 * allowed ALLOW or MALLOW): no answer may differ from the store's. */
START_TEST(deny_cache_forgets_on_charge_and_hold)
{
	char id[LEASE_ID_MAX];
	ck_decision(one(CMD_ALLOW, "spend", "eve", 7), 1, 10, 3, 0);
	ck_decision(one(CMD_ALLOW, "spend", "eve", 4), 0, 10, 3, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	ck_decision(one(CMD_CHARGE, "spend", "eve", 1), 1, 10, 2, 0);
	ck_decision(one(CMD_ALLOW, "spend", "eve", 4), 0, 10, 2, 60000);
	id_of(one(CMD_HOLD, "spend", "eve", 1), "spend", "eve", 1, id);
	ck_decision(one(CMD_ALLOW, "spend", "eve", 4), 0, 10, 1, 60000);
	/* a SETTLE above its estimate takes one more */
	ck_decision(on_id(CMD_SETTLE, id, 2), 1, 10, 0, 0);
	ck_decision(one(CMD_ALLOW, "spend", "eve", 4), 0, 10, 0, 60000);
}
END_TEST

/* ---- MALLOW and MPEEK ---- */

static const char *const two[] = {"login", "api"};

START_TEST(mallow_all_or_nothing)
{
	/* login runs out first: then nothing is charged to api */
	for (int i = 0; i < 3; i++) {
		struct cmd_result r = many(CMD_MALLOW, "eve", 2, two);
		ck_assert_int_eq(r.allowed, 1);
		ck_assert_int_eq(r.pair, 1); /* the least room left */
	}
	for (int i = 0; i < 3; i++) {
		struct cmd_result r = many(CMD_MALLOW, "eve", 2, two);
		ck_decision(r, 0, 3, 0, 60000);
		ck_assert_int_eq(r.pair, 1);
	}
	ck_decision(peek("api", "eve"), 1, 5, 2, 0);
	ck_decision(peek("login", "eve"), 0, 3, 0, 60000);
}
END_TEST

START_TEST(mallow_one_denied_charges_none)
{
	for (int i = 0; i < 5; i++)
		allow("api", "eve");
	struct cmd_result r = many(CMD_MALLOW, "eve", 2, two);
	ck_decision(r, 0, 5, 0, 60000);
	ck_assert_int_eq(r.pair, 2);
	ck_assert_int_eq(r.multi, 1);
	ck_decision(peek("login", "eve"), 1, 3, 3, 0);
}
END_TEST

/* The pair that denies has more room left, as a share of its limit, than
 * one that allows: a Cluster would charge that one first. */
START_TEST(mallow_denied_by_the_roomier_pair)
{
	static const char *const pairs[] = {"big", "login"};
	ck_decision(one(CMD_ALLOW, "big", "eve", 95), 1, 100, 5, 0);
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 1, 3, 1, 0);
	struct cmd_result r = many_cost(CMD_MALLOW, "eve", 2, pairs, 2);
	ck_decision(r, 0, 3, 1, 60000);
	ck_assert_int_eq(r.pair, 2);
	ck_decision(peek("big", "eve"), 1, 100, 5, 0);
}
END_TEST

/* An allowed MALLOW forgets every pair's cached denial: a denial cached at
 * another cost is not its cache hit, and once the MALLOW is charged that
 * denial's remaining is stale, so the store must answer the next one. */
START_TEST(mallow_allowed_forgets_cached_denials)
{
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 1, 3, 1, 0);
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 0, 3, 1, 60000);
	ck_decision(one(CMD_ALLOW, "api", "eve", 3), 1, 5, 2, 0);
	ck_decision(one(CMD_ALLOW, "api", "eve", 3), 0, 5, 2, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 2);
	struct cmd_result r = many(CMD_MALLOW, "eve", 2, two);
	ck_decision(r, 1, 3, 0, 0);
	ck_assert_int_eq(r.pair, 1);
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	/* asked again at the cached cost: the store answers, with what is left */
	int submits = F.fake.submits;
	ck_decision(one(CMD_ALLOW, "login", "eve", 2), 0, 3, 0, 60000);
	ck_decision(one(CMD_ALLOW, "api", "eve", 3), 0, 5, 1, 60000);
	ck_assert_int_eq(F.fake.submits, submits + 2);
}
END_TEST

START_TEST(mpeek_consumes_nothing)
{
	for (int i = 0; i < 4; i++) {
		struct cmd_result r = many(CMD_MPEEK, "eve", 2, two);
		ck_decision(r, 1, 3, 3, 0);
		ck_assert_int_eq(r.pair, 1);
	}
	ck_decision(peek("api", "eve"), 1, 5, 5, 0);
}
END_TEST

START_TEST(mallow_unknown_action)
{
	static const char *const bad[] = {"login", "nope"};
	struct cmd_result r = many(CMD_MALLOW, "eve", 2, bad);
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_UNKNOWN_ACTION);
	ck_decision(peek("login", "eve"), 1, 3, 3, 0);
}
END_TEST

START_TEST(mallow_shadow_pair_never_denies)
{
	static const char *const pairs[] = {"quiet", "api"};
	for (int i = 0; i < 3; i++) {
		struct cmd_result r = many(CMD_MALLOW, "eve", 2, pairs);
		ck_assert_int_eq(r.kind, CMD_REPLY_DECISION);
		ck_assert_int_eq(r.allowed, 1);
	}
	/* the enforced pair was charged each time */
	ck_decision(peek("api", "eve"), 1, 5, 2, 0);
}
END_TEST

/* ---- single requests ---- */

START_TEST(peek_consumes_nothing)
{
	for (int i = 0; i < 5; i++)
		ck_decision(peek("login", "eve"), 1, 3, 3, 0);
	ck_decision(allow("login", "eve"), 1, 3, 2, 0);
	ck_decision(peek("login", "eve"), 1, 3, 2, 0);
}
END_TEST

START_TEST(cost_above_limit)
{
	/* never allowed: retry -1; and nothing is charged */
	ck_decision(one(CMD_ALLOW, "login", "eve", 4), 0, 3, 3, -1);
	ck_decision(one(CMD_ALLOW, "login", "eve", 3), 1, 3, 0, 0);
}
END_TEST

START_TEST(unknown_action)
{
	struct cmd_result r = allow("nope", "eve");
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_UNKNOWN_ACTION);
	ck_assert_int_eq(F.fake.submits, 0);
}
END_TEST

START_TEST(ping_quit_unknown)
{
	ck_assert_int_eq(one(CMD_PING, "", "", 0).kind, CMD_REPLY_PONG);
	ck_assert_int_eq(one(CMD_QUIT, "", "", 0).kind, CMD_REPLY_BYE);
	struct cmd_result r = one((enum cmd_verb)CMD_VERB_N, "", "", 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_UNKNOWN_COMMAND);
}
END_TEST

START_TEST(shadow_always_allows)
{
	ck_decision(allow("quiet", "eve"), 1, 1, 0, 0);
	/* denied by the store, answered ALLOWED with no wait; counted as a denial */
	ck_decision(allow("quiet", "eve"), 1, 1, 0, 0);
	ck_decision(allow("quiet", "eve"), 1, 1, 0, 0);
	ck_decision(peek("quiet", "eve"), 1, 1, 0, 0);
	F.env.deny = NULL;
	ck_decision(allow("quiet", "eve"), 1, 1, 0, 0);
}
END_TEST

START_TEST(ban_after_denials)
{
	/* 1/1s; three denials within a minute ban for ten */
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(allow("banned", "eve").allowed, 0);
	/* the ban never goes through the deny cache: a ban counts every denial */
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	F.now += 2000000; /* the limit alone would allow again */
	struct cmd_result r = allow("banned", "eve");
	ck_assert_int_eq(r.allowed, 0);
	ck_assert_int_gt(r.retry_after_ms, 590000);
	F.now += 600000000;
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
}
END_TEST

START_TEST(ban_needs_denials_within)
{
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(allow("banned", "eve").allowed, 0);
	F.now += 61000000; /* the two denials are out of the window */
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
	ck_assert_int_eq(allow("banned", "eve").allowed, 0);
	F.now += 1000000;
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
}
END_TEST

START_TEST(override_unlimited)
{
	for (int i = 0; i < 10; i++)
		ck_decision(allow("vip", "alice"), 1, -1, -1, 0);
	ck_assert_int_eq(F.fake.submits, 0);
}
END_TEST

START_TEST(override_blocked)
{
	ck_decision(allow("vip", "mallory"), 0, 2, 0, -1);
	ck_decision(peek("vip", "mallory"), 0, 2, 0, -1);
	ck_assert_int_eq(F.fake.submits, 0);
}
END_TEST

START_TEST(override_limits)
{
	for (int i = 0; i < 4; i++)
		ck_decision(allow("vip", "bob"), 1, 4, 3 - i, 0);
	ck_decision(allow("vip", "bob"), 0, 4, 0, 60000);
	/* an override's denials are not cached (its limits may end) */
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	/* everyone else has the policy's own */
	ck_decision(allow("vip", "carol"), 1, 2, 1, 0);
}
END_TEST

START_TEST(override_in_mallow)
{
	static const char *const pairs[] = {"vip", "login"};
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(many(CMD_MALLOW, "mallory", 2, pairs).allowed, 0);
	/* blocked: nothing charged to login */
	ck_decision(peek("login", "mallory"), 1, 3, 3, 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(many(CMD_MALLOW, "alice", 2, pairs).allowed, 1);
	ck_assert_int_eq(many(CMD_MALLOW, "alice", 2, pairs).allowed, 0);
}
END_TEST

START_TEST(throttle_own_limit)
{
	struct cmd_request req = {.verb = CMD_THROTTLE,
				  .user = "k",
				  .user_len = 1,
				  .cost = 1,
				  .max_burst = 1,
				  .count = 1,
				  .period_s = 10};
	ck_decision(execute(&req, 0), 1, 2, 1, 0);
	ck_decision(execute(&req, 0), 1, 2, 0, 0);
	struct cmd_result r = execute(&req, 0);
	ck_decision(r, 0, 2, 0, 10000);
	/* not cached: the next request may bring another limit */
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	req.count = 0;
	r = execute(&req, 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_SYNTAX);
}
END_TEST

/* ---- CHARGE ---- */

/* A cost known afterwards: counted whatever the limit holds, never denied,
 * never answered from the deny cache; what went past the limit is denied
 * until the window ends. */
START_TEST(charge_never_denied)
{
	struct cmd_result r = one(CMD_CHARGE, "spend", "eve", 4);
	ck_decision(r, 1, 10, 6, 0);
	ck_assert_int_eq(r.reset_ms, 60000);
	ck_decision(one(CMD_CHARGE, "spend", "eve", 8), 1, 10, 0, 0);
	F.now += 10000000;
	r = allow("spend", "eve");
	ck_decision(r, 0, 10, 0, 50000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	/* a CHARGE past a cached denial: the store counts it */
	int submits = F.fake.submits;
	ck_decision(one(CMD_CHARGE, "spend", "eve", 1), 1, 10, 0, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	/* the 3 past the limit are carried into the next window (a debt,
	 * docs/algorithms.md), and forgotten in the one after */
	F.now += 50000000;
	ck_decision(allow("spend", "eve"), 1, 10, 6, 0);
	F.now += 60000000;
	ck_decision(allow("spend", "eve"), 1, 10, 9, 0);
	/* a concurrency policy takes no CHARGE */
	ck_error(one(CMD_CHARGE, "pool", "eve", 1), CMD_ERR_POLICY_KIND,
		 "a concurrency policy: ACQUIRE a lease (RELEASE it when done)");
}
END_TEST

/* ---- HOLD, SETTLE, CANCEL ---- */

/* HOLD charges the estimate and answers an id naming action, user and
 * estimate; SETTLE charges the actual cost (giving back the rest), once. */
START_TEST(hold_settle_below_estimate)
{
	char id[LEASE_ID_MAX];
	struct cmd_result r = one(CMD_HOLD, "spend", "eve", 4);
	ck_lease(r, 10, 6, 60000);
	ck_assert_int_eq(r.item->index, 1); /* a hold's id, not a lease's */
	id_of(r, "spend", "eve", 4, id);
	ck_decision(peek("spend", "eve"), 1, 10, 6, 0);
	F.now += 1000000;
	r = on_id(CMD_SETTLE, id, 1);
	ck_decision(r, 1, 10, 9, 0);
	ck_assert_int_eq(r.reset_ms, 59000);
	ck_assert_ptr_null(r.item);
	ck_decision(peek("spend", "eve"), 1, 10, 9, 0);
	ck_error(on_id(CMD_SETTLE, id, 1), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
	ck_error(on_id(CMD_CANCEL, id, 0), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
	ck_decision(peek("spend", "eve"), 1, 10, 9, 0);
}
END_TEST

START_TEST(hold_settle_above_estimate)
{
	char id[LEASE_ID_MAX];
	id_of(one(CMD_HOLD, "spend", "eve", 3), "spend", "eve", 3, id);
	/* the difference is charged, never denied, even past the limit */
	ck_decision(on_id(CMD_SETTLE, id, 5), 1, 10, 5, 0);
	id_of(one(CMD_HOLD, "spend", "eve", 5), "spend", "eve", 5, id);
	ck_decision(on_id(CMD_SETTLE, id, 9), 1, 10, 0, 0);
	ck_decision(allow("spend", "eve"), 0, 10, 0, 60000);
}
END_TEST

/* CANCEL gives the whole estimate back, and with it goes this daemon's
 * cached denial of the pair (else it would deny what now fits). */
START_TEST(hold_cancel_clears_cached_denial)
{
	char id[LEASE_ID_MAX];
	id_of(one(CMD_HOLD, "spend", "eve", 8), "spend", "eve", 8, id);
	ck_decision(one(CMD_ALLOW, "spend", "eve", 2), 1, 10, 0, 0);
	ck_decision(allow("spend", "eve"), 0, 10, 0, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	struct cmd_result r = on_id(CMD_CANCEL, id, 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_OK);
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	ck_decision(allow("spend", "eve"), 1, 10, 7, 0);
	ck_error(on_id(CMD_CANCEL, id, 0), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
}
END_TEST

/* A HOLD is decided as an ALLOW of its estimate (denied: no id, nothing
 * charged), never from the deny cache; ids are unique; a hold expires
 * after the policy's hold: its estimate stays charged. */
START_TEST(hold_denied_and_expired)
{
	char a[LEASE_ID_MAX], b[LEASE_ID_MAX];
	struct cmd_result r = one(CMD_HOLD, "spend", "eve", 11);
	ck_decision(r, 0, 10, 10, -1);
	ck_assert_ptr_null(r.item);
	id_of(one(CMD_HOLD, "spend", "eve", 4), "spend", "eve", 4, a);
	id_of(one(CMD_HOLD, "spend", "eve", 4), "spend", "eve", 4, b);
	ck_assert_str_ne(a, b);
	r = one(CMD_HOLD, "spend", "eve", 4);
	ck_decision(r, 0, 10, 2, 60000);
	ck_assert_ptr_null(r.item);
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	F.now += 6000000; /* past hold: 5s */
	ck_error(on_id(CMD_SETTLE, a, 1), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
	ck_error(on_id(CMD_CANCEL, b, 0), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
	ck_decision(peek("spend", "eve"), 1, 10, 2, 0);
}
END_TEST

/* Ids that name no hold: refused before the store is asked. */
START_TEST(hold_bad_ids)
{
	char id[LEASE_ID_MAX];
	ck_error(on_id(CMD_SETTLE, "garbage", 1), CMD_ERR_NO_HOLD, "not a hold id");
	id_of(one(CMD_HOLD, "spend", "eve", 2), "spend", "eve", 2, id);
	int submits = F.fake.submits;
	char other[LEASE_ID_MAX + 8];
	snprintf(other, sizeof(other), "nope%s", id + strlen("spend"));
	ck_error(on_id(CMD_CANCEL, other, 0), CMD_ERR_NO_HOLD,
		 "not a hold id of a policy configured now");
	snprintf(other, sizeof(other), "pool%s", id + strlen("spend"));
	ck_error(on_id(CMD_SETTLE, other, 1), CMD_ERR_POLICY_KIND,
		 "a concurrency policy: RELEASE its leases (holds are a rate's)");
	ck_assert_int_eq(F.fake.submits, submits);
	ck_error(one(CMD_HOLD, "pool", "eve", 1), CMD_ERR_POLICY_KIND,
		 "a concurrency policy: ACQUIRE a lease (RELEASE it when done)");
}
END_TEST

/* ---- ACQUIRE, RELEASE, RENEW (the memory store's lease table) ---- */

static struct cmd_result acquire(const char *action, const char *user, int64_t cost)
{
	return one(CMD_ACQUIRE, action, user, cost);
}

/* At most the limit held per user; an id per lease naming action, user
 * and cost; denied: the wait until the soonest lease ends. */
START_TEST(lease_acquire_up_to_limit)
{
	char a[LEASE_ID_MAX], b[LEASE_ID_MAX];
	F.env.store = F.fake.mem;
	struct cmd_result r = acquire("pool", "eve", 1);
	ck_lease(r, 2, 1, 30000);
	ck_assert_int_eq(r.item->index, 0); /* a lease's id, not a hold's */
	id_of(r, "pool", "eve", 1, a);
	F.now += 10000000;
	ck_lease(acquire("pool", "eve", 1), 2, 0, 30000);
	id_of(F.slot.res, "pool", "eve", 1, b);
	ck_assert_str_ne(a, b);
	r = acquire("pool", "eve", 1);
	ck_decision(r, 0, 2, 0, 20000);
	ck_assert_int_eq(r.reset_ms, 20000);
	ck_assert_ptr_null(r.item);
	/* never enough: more than the limit */
	ck_decision(acquire("pool", "mallet", 3), 0, 2, 2, -1);
	/* another user has his own */
	ck_lease(acquire("pool", "mallet", 2), 2, 0, 30000);
	id_of(F.slot.res, "pool", "mallet", 2, b);
	/* past the first lease's end, its unit is free again */
	F.now += 20000000;
	ck_lease(acquire("pool", "eve", 1), 2, 0, 30000);
}
END_TEST

/* RELEASE gives the lease back once; RENEW pushes its end to now + lease;
 * an expired or released lease is neither. */
START_TEST(lease_release_renew)
{
	char a[LEASE_ID_MAX], b[LEASE_ID_MAX];
	F.env.store = F.fake.mem;
	id_of(acquire("pool", "eve", 1), "pool", "eve", 1, a);
	id_of(acquire("pool", "eve", 1), "pool", "eve", 1, b);
	ck_assert_int_eq(on_id(CMD_RELEASE, b, 0).kind, CMD_REPLY_OK);
	ck_error(on_id(CMD_RELEASE, b, 0), CMD_ERR_NO_LEASE,
		 "lease not held: released, expired or never taken");
	ck_error(on_id(CMD_RENEW, b, 0), CMD_ERR_NO_LEASE,
		 "lease not held: released, expired or never taken");
	F.now += 20000000;
	struct cmd_result r = on_id(CMD_RENEW, a, 0);
	ck_lease(r, 2, 1, 30000);
	/* the same lease (an item's text is not NUL-terminated: its ulen) */
	ck_assert_uint_eq(r.item->ulen, strlen(a));
	ck_assert(memcmp(r.item->text, a, r.item->ulen) == 0);
	/* renewed at 20 s: held at 40 s, gone at 50 s */
	F.now += 20000000;
	ck_lease(acquire("pool", "eve", 1), 2, 0, 30000);
	F.now += 10000000;
	ck_error(on_id(CMD_RENEW, a, 0), CMD_ERR_NO_LEASE,
		 "lease not held: released, expired or never taken");
	ck_error(on_id(CMD_RELEASE, a, 0), CMD_ERR_NO_LEASE,
		 "lease not held: released, expired or never taken");
}
END_TEST

/* RESET of a concurrency policy forgets every lease of the user. */
START_TEST(lease_reset_forgets_the_users)
{
	char a[LEASE_ID_MAX];
	F.env.store = F.fake.mem;
	id_of(acquire("pool", "eve", 2), "pool", "eve", 2, a);
	ck_lease(acquire("pool", "mallet", 1), 2, 1, 30000);
	ck_decision(acquire("pool", "eve", 1), 0, 2, 0, 30000);
	reset("pool", "eve");
	ck_error(on_id(CMD_RELEASE, a, 0), CMD_ERR_NO_LEASE,
		 "lease not held: released, expired or never taken");
	ck_lease(acquire("pool", "eve", 1), 2, 1, 30000);
	ck_lease(acquire("pool", "mallet", 1), 2, 0, 30000);
}
END_TEST

START_TEST(lease_wrong_policy_or_id)
{
	char a[LEASE_ID_MAX], other[LEASE_ID_MAX + 8];
	F.env.store = F.fake.mem;
	ck_error(acquire("nope", "eve", 1), CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
	ck_error(acquire("spend", "eve", 1), CMD_ERR_POLICY_KIND,
		 "a rate policy: ALLOW it (ACQUIRE takes concurrency policies)");
	ck_error(allow("pool", "eve"), CMD_ERR_POLICY_KIND,
		 "a concurrency policy: ACQUIRE a lease (RELEASE it when done)");
	ck_error(on_id(CMD_RELEASE, "garbage", 0), CMD_ERR_NO_LEASE,
		 "not a lease id of a policy configured now");
	ck_error(on_id(CMD_RENEW, "pool:garbage", 0), CMD_ERR_NO_LEASE, "not a lease id");
	id_of(acquire("pool", "eve", 1), "pool", "eve", 1, a);
	snprintf(other, sizeof(other), "spend%s", a + strlen("pool"));
	ck_error(on_id(CMD_RELEASE, other, 0), CMD_ERR_POLICY_KIND,
		 "a rate policy: ALLOW it (ACQUIRE takes concurrency policies)");
	/* a hold's verbs refuse a lease's id */
	ck_error(on_id(CMD_SETTLE, a, 1), CMD_ERR_POLICY_KIND,
		 "a concurrency policy: RELEASE its leases (holds are a rate's)");
}
END_TEST

/* Redis not answering a lease's call: the policy's on_store_error answers,
 * with no id (allow: nothing to release; deny: a retry of 1 s; local: an
 * error, the fallback keeps no leases); RELEASE and RENEW have none. */
START_TEST(lease_store_down)
{
	struct cmd_result r = acquire("pool", "eve", 1);
	ck_decision(r, 1, 2, -1, 0);
	ck_assert_int_eq(r.reset_ms, -1);
	ck_assert_ptr_null(r.item);
	ck_decision(acquire("pool_deny", "eve", 1), 0, 2, -1, 1000);
	ck_error(acquire("pool_local", "eve", 1), CMD_ERR_STORE_UNAVAILABLE,
		 "redis: no redis here");
	char id[LEASE_ID_MAX];
	lease_id_format(id, "pool", 4, "eve", 3, 1, 1);
	ck_error(on_id(CMD_RELEASE, id, 0), CMD_ERR_STORE_UNAVAILABLE, "redis: no redis here");
	ck_error(on_id(CMD_RENEW, id, 0), CMD_ERR_STORE_UNAVAILABLE, "redis: no redis here");
}
END_TEST

/* ---- rights: listen[].auth, identities ---- */

#define TOKEN_WEB "web-token-0123456789"
#define TOKEN_OPS "ops-token-0123456789"

static const char rights_yaml[] =
	"identities:\n"
	"  web: {token_env: RL_TEST_TOKEN_WEB, rights: [decide], policies: [login, pool]}\n"
	"  ops: {token_env: RL_TEST_TOKEN_OPS, rights: [decide, admin]}\n"
	"  watcher: {cert_name: watcher.example, rights: [admin]}\n"
	"policies:\n"
	"  login: {limits: [3/1m]}\n"
	"  api: {limits: [5/1m]}\n"
	"  pool: {algorithm: concurrency, limit: 2, lease: 30s}\n"
	"  pool_deny: {algorithm: concurrency, limit: 2, lease: 30s, on_store_error: deny}\n"
	"  pool_local: {algorithm: concurrency, limit: 2, lease: 30s, on_store_error: local}\n";

static void rights_config(void)
{
	setenv("RL_TEST_TOKEN_WEB", TOKEN_WEB, 1);
	setenv("RL_TEST_TOKEN_OPS", TOKEN_OPS, 1);
	fixture_reload(rights_yaml);
}

static struct cmd_request pair_req(enum cmd_verb verb, const char *action, const char *user)
{
	return (struct cmd_request){.verb = verb,
				    .user = user,
				    .user_len = strlen(user),
				    .action = action,
				    .action_len = strlen(action),
				    .cost = 1};
}

/* auth: required and no identity proved: noauth, in the front end's words;
 * PING and QUIT need none; nothing charged. */
START_TEST(rights_noauth)
{
	rights_config();
	struct cmd_caller c = {.auth = 1};
	struct cmd_request req = pair_req(CMD_ALLOW, "login", "eve");
	unsigned long long before = stats.auth_failures[STATS_AUTH_NOAUTH];
	ck_error(execute_as(&req, &c, STATS_FRONT_LINE), CMD_ERR_NOAUTH,
		 "authentication required: AUTH <token> (or a token, or a client "
		 "certificate of an identity) first");
	ck_error(execute_as(&req, &c, STATS_FRONT_HTTP), CMD_ERR_NOAUTH,
		 "authentication required: an Authorization: Bearer <token> header on each "
		 "request (or a client certificate of an identity)");
	ck_assert_uint_eq(stats.auth_failures[STATS_AUTH_NOAUTH], before + 2);
	req = pair_req(CMD_PING, "", "");
	ck_assert_int_eq(execute_as(&req, &c, STATS_FRONT_LINE).kind, CMD_REPLY_PONG);
	req = pair_req(CMD_QUIT, "", "");
	ck_assert_int_eq(execute_as(&req, &c, STATS_FRONT_LINE).kind, CMD_REPLY_BYE);
	ck_assert_int_eq(F.fake.submits, 0);
	/* a listener without auth takes every request, and ignores tokens */
	struct cmd_caller open = {0};
	req = pair_req(CMD_ALLOW, "login", "eve");
	req.token = "wrong";
	req.token_len = 5;
	ck_decision(execute_as(&req, &open, STATS_FRONT_LINE), 1, 3, 2, 0);
}
END_TEST

/* AUTH: a token no identity has is auth-failed, the third in a row closes
 * the connection; a good one names the caller and ends the row. */
START_TEST(rights_auth)
{
	struct cmd_caller c = {.auth = 1};
	struct cmd_request req = {.verb = CMD_AUTH, .token = "whatever", .token_len = 8};
	/* no identity configured: Redis's words */
	ck_error(execute_as(&req, &c, STATS_FRONT_RESP), CMD_ERR_AUTH_FAILED,
		 CMD_AUTH_NO_IDENTITIES);
	rights_config();
	for (int i = 1; i <= 3; i++) {
		struct cmd_result r = execute_as(&req, &c, STATS_FRONT_LINE);
		ck_error(r, CMD_ERR_AUTH_FAILED, "invalid token");
		ck_assert_int_eq(r.close_after, i == 3);
	}
	c.failures = 1;
	req.token = TOKEN_WEB;
	req.token_len = strlen(TOKEN_WEB);
	ck_assert_int_eq(execute_as(&req, &c, STATS_FRONT_LINE).kind, CMD_REPLY_OK);
	ck_assert_str_eq(c.who, "web");
	ck_assert_uint_eq(c.failures, 0);
	req = pair_req(CMD_ALLOW, "login", "eve");
	ck_decision(execute_as(&req, &c, STATS_FRONT_LINE), 1, 3, 2, 0);
	/* a token with the request speaks for it, whoever AUTH proved */
	req.token = "not-a-token-of-anyone";
	req.token_len = strlen(req.token);
	ck_error(execute_as(&req, &c, STATS_FRONT_HTTP), CMD_ERR_AUTH_FAILED, "invalid token");
	req = pair_req(CMD_ALLOW, "api", "eve");
	req.token = TOKEN_OPS;
	req.token_len = strlen(TOKEN_OPS);
	ck_decision(execute_as(&req, &c, STATS_FRONT_HTTP), 1, 5, 4, 0);
}
END_TEST

/* An identity's policies and rights: forbidden names the action its list
 * lacks or the right it lacks; nothing charged. */
START_TEST(rights_forbidden)
{
	rights_config();
	struct cmd_caller web = {.auth = 1, .admin = 1, .who = "web"};
	struct cmd_request req = pair_req(CMD_ALLOW, "api", "eve");
	ck_error(execute_as(&req, &web, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity web may not decide on api (its policies: list lacks it)");
	req = pair_req(CMD_HOLD, "api", "eve");
	ck_error(execute_as(&req, &web, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity web may not decide on api (its policies: list lacks it)");
	static const char *const pairs[] = {"login", "api"};
	req = (struct cmd_request){.verb = CMD_MALLOW, .cost = 1, .npairs = 2};
	for (int i = 0; i < 2; i++)
		req.pairs[i] = (struct cmd_pair){"eve", 3, pairs[i], strlen(pairs[i]), NULL};
	ck_error(execute_as(&req, &web, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity web may not decide on api (its policies: list lacks it)");
	ck_assert_int_eq(F.fake.submits, 0);
	req = pair_req(CMD_RESET, "login", "eve");
	ck_error(execute_as(&req, &web, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity web may not administer (its rights: lack admin)");
	/* an id names its action: a hold of api is not web's to settle */
	char id[LEASE_ID_MAX];
	id_of(one(CMD_HOLD, "api", "eve", 2), "api", "eve", 2, id);
	req = (struct cmd_request){.verb = CMD_SETTLE,
				   .action = id,
				   .action_len = 3,
				   .lease_id = id,
				   .lease_id_len = strlen(id),
				   .actual = 0};
	ck_error(execute_as(&req, &web, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity web may not decide on api (its policies: list lacks it)");
	ck_decision(peek("api", "eve"), 1, 5, 3, 0);
	/* its own policies: decided (a lease too, and its release) */
	F.env.store = F.fake.mem;
	req = pair_req(CMD_ACQUIRE, "pool", "eve");
	ck_lease(execute_as(&req, &web, STATS_FRONT_LINE), 2, 1, 30000);
	id_of(F.slot.res, "pool", "eve", 1, id);
	req = (struct cmd_request){.verb = CMD_RELEASE,
				   .action = id,
				   .action_len = 4,
				   .lease_id = id,
				   .lease_id_len = strlen(id)};
	ck_assert_int_eq(execute_as(&req, &web, STATS_FRONT_LINE).kind, CMD_REPLY_OK);
	/* a certificate's identity, with admin alone */
	struct cmd_caller watcher = {.auth = 1, .admin = 1, .cert_cn = "watcher.example"};
	req = pair_req(CMD_ALLOW, "login", "eve");
	ck_error(execute_as(&req, &watcher, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "identity watcher may not decide (its rights: lack decide)");
	req = pair_req(CMD_RESET, "login", "eve");
	ck_assert_int_eq(execute_as(&req, &watcher, STATS_FRONT_LINE).kind, CMD_REPLY_OK);
}
END_TEST

/* Admin verbs need an admin listener, whatever the identity's rights. */
START_TEST(rights_admin_listener)
{
	rights_config();
	struct cmd_caller ops = {.auth = 1, .who = "ops"};
	struct cmd_request req = pair_req(CMD_RESET, "login", "eve");
	ck_error(execute_as(&req, &ops, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "RESET needs a listener with admin: true");
	req = pair_req(CMD_OVERRIDE, "login", "eve");
	req.spec = "unlimited";
	req.spec_len = 9;
	ck_error(execute_as(&req, &ops, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "overrides need a listener with admin: true");
	req = pair_req(CMD_TOP, "login", "");
	ck_error(execute_as(&req, &ops, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "TOP needs a listener with admin: true");
	/* nor without auth */
	struct cmd_caller plain = {0};
	req = pair_req(CMD_UNOVERRIDE, "login", "eve");
	ck_error(execute_as(&req, &plain, STATS_FRONT_LINE), CMD_ERR_FORBIDDEN,
		 "overrides need a listener with admin: true");
	ck_decision(peek("login", "eve"), 1, 3, 3, 0);
}
END_TEST

/* ---- delays: a policy's delay, WAIT ---- */

static int held_done;

static void on_held(struct cmd_slot *slot)
{
	(void)slot;
	held_done++;
}

/* Starts req in its own slot (a delayed one is answered later). */
static void launch(struct cmd_slot *slot, const struct cmd_request *req)
{
	memset(slot, 0, sizeof(*slot));
	slot->complete = on_held;
	struct cmd_caller caller = {0};
	cmd_execute(F.cfg, &F.env, req, &caller, slot);
}

static void delays_on(void)
{
	F.delays = delays_new(F.base);
	ck_assert_ptr_nonnull(F.delays);
	F.env.delays = F.delays;
}

/* Answers every request waiting now (as SIGTERM does), for a fresh start. */
static void delays_answer_all(void)
{
	delays_free(F.delays);
	delays_on();
}

/* A funnel's delay: a request that would be denied waits for its slot
 * instead, answered ALLOWED as the policy counts it when the slot comes;
 * past delay.max it is denied. */
START_TEST(delay_funnel)
{
	struct cmd_slot s[3];
	struct cmd_request req = pair_req(CMD_ALLOW, "smooth", "eve");
	delays_on();
	held_done = 0;
	launch(&s[0], &req); /* room: answered at once */
	ck_assert_int_eq(held_done, 1);
	ck_decision(s[0].res, 1, 1, 0, 0);
	ck_assert_int_eq(s[0].res.reset_ms, 100);
	launch(&s[1], &req); /* its slot in 100 ms: held by a timer until then */
	ck_assert_int_eq(held_done, 1);
	ck_assert_uint_eq(delays_waiting(F.delays), 1);
	for (int i = 0; i < 100 && held_done < 2; i++)
		event_base_loop(F.base, EVLOOP_ONCE);
	ck_assert_int_eq(held_done, 2);
	ck_decision(s[1].res, 1, 1, 0, 0);
	ck_assert_int_eq(s[1].res.reset_ms, 100);
	ck_assert_ptr_null(s[1].cfg);
	/* delay.max holds 20 slots (2 s of 10/1s) beyond the capacity: with
	 * the clock still, 19 more are each held (the last for 2 s) */
	held_done = 0;
	for (int i = 0; i < 19; i++) {
		launch(&s[2], &req);
		ck_assert_int_eq(held_done, i);
		delays_answer_all();
		ck_decision(s[2].res, 1, 1, 0, 0);
	}
	held_done = 0;
	launch(&s[2], &req);
	/* past delay.max: denied at once, its retry the time until one would
	 * be taken with its delay (docs/algorithms.md), its reset the funnel's */
	ck_assert_int_eq(held_done, 1);
	ck_decision(s[2].res, 0, 1, 0, 100);
	ck_assert_int_eq(s[2].res.reset_ms, 2100);
	/* WAIT 0: this request will not wait at all */
	F.now += 2100000;
	req.wait_given = 1;
	req.wait_ms = 0;
	held_done = 0;
	launch(&s[2], &req);
	ck_decision(s[2].res, 1, 1, 0, 0);
	launch(&s[2], &req);
	ck_assert_int_eq(held_done, 2);
	ck_decision(s[2].res, 0, 1, 0, 100);
}
END_TEST

/* A window's delay: the store charges the request as running once the
 * window has room (the next one), and it is answered then with that
 * window's figures. */
START_TEST(delay_window)
{
	struct cmd_slot s;
	struct cmd_request req = pair_req(CMD_ALLOW, "wwin", "eve");
	delays_on();
	held_done = 0;
	for (int i = 0; i < 2; i++) {
		launch(&s, &req);
		ck_decision(s.res, 1, 2, 1 - i, 0);
	}
	ck_assert_int_eq(held_done, 2);
	F.now += 400000;
	launch(&s, &req);
	ck_assert_int_eq(held_done, 2);
	ck_assert_uint_eq(delays_waiting(F.delays), 1);
	delays_answer_all();
	ck_assert_int_eq(held_done, 3);
	/* as it runs, at 1 s: the next window's first, a second to its end */
	ck_decision(s.res, 1, 2, 1, 0);
	ck_assert_int_eq(s.res.reset_ms, 1000);
	/* not a denial: nothing cached */
	ck_assert_uint_eq(denycache_size(F.deny), 0);
}
END_TEST

/* WAIT on a policy without a delay: this request's own bound; a deadline
 * shorter than it bounds it instead. */
START_TEST(delay_wait_and_deadline)
{
	struct cmd_slot s;
	struct cmd_request req = pair_req(CMD_ALLOW, "login", "eve");
	delays_on();
	held_done = 0;
	for (int i = 0; i < 3; i++) {
		launch(&s, &req);
		ck_decision(s.res, 1, 3, 2 - i, 0);
	}
	held_done = 0;
	req.wait_given = 1;
	req.wait_ms = 30000; /* login is 3/1m: a slot in 60 s */
	launch(&s, &req);
	ck_decision(s.res, 0, 3, 0, 60000);
	req.wait_ms = 60000;
	req.timeout_ms = 100; /* the caller's deadline is shorter */
	launch(&s, &req);
	ck_decision(s.res, 0, 3, 0, 60000);
	ck_assert_int_eq(held_done, 2);
	req.timeout_ms = 0;
	launch(&s, &req);
	ck_assert_int_eq(held_done, 2);
	delays_answer_all();
	ck_decision(s.res, 1, 3, 0, 0);
	ck_assert_int_eq(held_done, 3);
}
END_TEST

/* max_delayed bounds the requests waiting at once: past it, decided
 * without a delay; 0 turns delays off. */
START_TEST(delay_max_delayed)
{
	fixture_reload(
		"max_delayed: 1\n"
		"policies:\n"
		"  smooth: {algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 2s}}\n");
	struct cmd_slot s[3];
	struct cmd_request req = pair_req(CMD_ALLOW, "smooth", "eve");
	delays_on();
	held_done = 0;
	launch(&s[0], &req);
	launch(&s[1], &req);
	ck_assert_uint_eq(delays_waiting(F.delays), 1);
	/* decided at the policy's own capacity: the funnel is 200 ms full */
	launch(&s[2], &req);
	ck_assert_int_eq(held_done, 2);
	ck_decision(s[2].res, 0, 1, 0, 200);
	delays_answer_all();
	ck_decision(s[1].res, 1, 1, 0, 0);
	fixture_reload(
		"max_delayed: 0\n"
		"policies:\n"
		"  smooth: {algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 2s}}\n");
	F.now += 1000000;
	held_done = 0;
	launch(&s[0], &req);
	launch(&s[1], &req);
	ck_assert_int_eq(held_done, 2);
	ck_decision(s[1].res, 0, 1, 0, 100);
}
END_TEST

/* The store failing a delayed request: answered per on_store_error at
 * once, and its claim on max_delayed given back (else delays would stop
 * once max_delayed had failed). */
START_TEST(delay_store_down_gives_claims_back)
{
	fixture_reload("max_delayed: 1\n"
		       "policies:\n"
		       "  smooth: {algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 2s}}\n"
		       "  wwin: {algorithm: fixed_window, limits: [1/1s], delay: {max: 2s}}\n");
	struct cmd_slot s;
	struct cmd_request funnel = pair_req(CMD_ALLOW, "smooth", "eve");
	struct cmd_request window = pair_req(CMD_ALLOW, "wwin", "eve");
	delays_on();
	held_done = 0;
	F.fake.fail = 1;
	for (int i = 0; i < 3; i++) {
		launch(&s, &funnel);
		ck_decision(s.res, 1, 1, -1, 0);
		launch(&s, &window);
		ck_decision(s.res, 1, 1, -1, 0);
	}
	ck_assert_int_eq(held_done, 6);
	F.fake.fail = 0;
	launch(&s, &funnel);
	launch(&s, &funnel); /* the one claim: delayed */
	ck_assert_int_eq(held_done, 7);
	ck_assert_uint_eq(delays_waiting(F.delays), 1);
	delays_answer_all();
	ck_assert_int_eq(held_done, 8);
	ck_decision(s.res, 1, 1, 0, 0);
	launch(&s, &window);
	launch(&s, &window);
	ck_assert_int_eq(held_done, 9);
	ck_assert_uint_eq(delays_waiting(F.delays), 1);
	delays_answer_all();
	ck_decision(s.res, 1, 1, 0, 0);
}
END_TEST

/* ---- blocks for hot keys ---- */

static void blocks_on(void)
{
	F.blocks = blocks_new(1024);
	ck_assert_ptr_nonnull(F.blocks);
	F.env.blocks = F.blocks;
}

/* A pair seen twice within a second asks for a block (2 units, then
 * double while they run low, up to max), taken with the decision; the
 * next requests are answered from it without the store, each unit counted
 * in the store before it is answered; the block lapses with its window. */
START_TEST(blocks_answer_hot_pair)
{
	blocks_on();
	ck_decision(allow("hot", "eve"), 1, 100, 99, 0); /* not hot yet */
	ck_assert_int_eq(F.fake.submits, 1);
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	/* hot: asks 2 units with this decision, answered as if none were taken */
	struct cmd_result r = allow("hot", "eve");
	ck_decision(r, 1, 100, 98, 0);
	ck_assert_int_eq(r.reset_ms, 60000);
	ck_assert_int_eq(F.fake.submits, 2);
	ck_assert_int_eq(blocks_units(F.blocks), 2);
	F.now += 1000000;
	r = allow("hot", "eve"); /* from the block */
	ck_decision(r, 1, 100, 97, 0);
	ck_assert_int_eq(r.reset_ms, 59000);
	ck_assert_int_eq(F.fake.submits, 2);
	/* half left: this one asks for the next block (4) */
	ck_decision(allow("hot", "eve"), 1, 100, 95, 0);
	ck_assert_int_eq(F.fake.submits, 3);
	ck_assert_int_eq(blocks_units(F.blocks), 5);
	for (int i = 0; i < 3; i++)
		ck_decision(allow("hot", "eve"), 1, 100, 94 - i, 0);
	ck_assert_int_eq(F.fake.submits, 3);
	ck_assert_int_eq(blocks_units(F.blocks), 2);
	/* the store counted the 7 answered and the 2 held */
	ck_decision(peek("hot", "eve"), 1, 100, 91, 0);
	/* another user of the policy is not hot */
	ck_decision(allow("hot", "mallet"), 1, 100, 99, 0);
	/* the window ends: the held units lapse, the store decides */
	F.now += 59000000;
	int submits = F.fake.submits;
	ck_decision(allow("hot", "eve"), 1, 100, 99, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	ck_assert_uint_eq(blocks_counts(F.blocks)->lapsed, 2);
	ck_assert_uint_eq(blocks_counts(F.blocks)->blocks, 2);
	ck_assert_uint_eq(blocks_counts(F.blocks)->granted, 6);
}
END_TEST

/* Never over-admits: blocks shrink to a quarter of what the limit has left,
 * and the last units are the store's, one by one. */
START_TEST(blocks_never_over_admit)
{
	blocks_on();
	int allowed = 0;
	for (int i = 0; i < 20; i++) {
		struct cmd_result r = allow("warm", "eve");
		ck_assert_int_eq(r.kind, CMD_REPLY_DECISION);
		ck_assert_int_eq(r.limit, 10);
		allowed += r.allowed;
		if (!r.allowed)
			ck_assert_int_eq(r.retry_after_ms, 60000);
	}
	ck_assert_int_eq(allowed, 10);
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	ck_assert_int_gt((long long)blocks_counts(F.blocks)->granted, 0);
	ck_decision(peek("warm", "eve"), 0, 10, 0, 60000);
}
END_TEST

/* A RESET of the pair revokes its block (the units went with the count);
 * a store that lost its state drops every block; an override's limits
 * never take one. */
START_TEST(blocks_revoked)
{
	blocks_on();
	for (int i = 0; i < 2; i++)
		allow("hot", "eve");
	ck_assert_int_eq(blocks_units(F.blocks), 2);
	reset("hot", "eve");
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	ck_assert_uint_eq(blocks_counts(F.blocks)->revoked, 2);
	int submits = F.fake.submits;
	ck_decision(allow("hot", "eve"), 1, 100, 99, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	/* hot again: a new block */
	ck_decision(allow("hot", "eve"), 1, 100, 98, 0);
	ck_assert_int_eq(blocks_units(F.blocks), 2);
	F.fake.generation++;
	submits = F.fake.submits;
	/* (the fake kept its count: the 2 units dropped stay counted) */
	ck_decision(allow("hot", "eve"), 1, 100, 95, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	ck_assert_uint_eq(blocks_counts(F.blocks)->revoked, 4);
	/* bob's override: every request the store's */
	submits = F.fake.submits;
	for (int i = 0; i < 4; i++)
		ck_decision(allow("warm", "bob"), 1, 20, 19 - i, 0);
	ck_assert_int_eq(F.fake.submits, submits + 4);
}
END_TEST

/* While a pair's ask is out, a request the block still covers is answered
 * from it; one that finds it empty waits for the ask, then is answered
 * from the new block, without the store. */
START_TEST(blocks_follow_the_ask)
{
	struct cmd_slot a, b, c;
	struct cmd_request req = pair_req(CMD_ALLOW, "hot", "eve");
	blocks_on();
	for (int i = 0; i < 3; i++)
		allow("hot", "eve"); /* the store, an ask of 2, one from the block */
	ck_assert_int_eq(blocks_units(F.blocks), 1);
	held_done = 0;
	F.fake.defer = 1;
	launch(&a, &req); /* half left: asks, and the store holds it */
	ck_assert_int_eq(F.fake.nheld, 1);
	launch(&b, &req); /* the last unit */
	ck_assert_int_eq(held_done, 1);
	ck_decision(b.res, 1, 100, 96, 0);
	launch(&c, &req); /* none left: follows a's ask */
	ck_assert_int_eq(held_done, 1);
	ck_assert_int_eq(F.fake.nheld, 1);
	int submits = F.fake.submits;
	fake_flush(&F.fake);
	ck_assert_int_eq(held_done, 3);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	ck_decision(a.res, 1, 100, 95, 0);
	ck_decision(c.res, 1, 100, 94, 0);
	ck_assert_ptr_null(c.cfg);
	ck_assert_int_eq(blocks_units(F.blocks), 3);
	ck_decision(peek("hot", "eve"), 1, 100, 91, 0);
}
END_TEST

/* Redis denied the ask (another daemon took the rest meanwhile): those
 * that waited for it, asking as many units, get the same denial at once,
 * without the store. */
START_TEST(blocks_denied_ask_answers_followers)
{
	struct cmd_slot a, b, c, d;
	struct cmd_request req = pair_req(CMD_ALLOW, "warm", "eve");
	blocks_on();
	ck_decision(allow("warm", "eve"), 1, 10, 9, 0);
	ck_decision(allow("warm", "eve"), 1, 10, 8, 0); /* and a block of 2 */
	ck_decision(allow("warm", "eve"), 1, 10, 7, 0); /* from it */
	held_done = 0;
	F.fake.defer = 1;
	launch(&a, &req); /* asks */
	launch(&b, &req); /* the last unit */
	ck_decision(b.res, 1, 10, 6, 0);
	launch(&c, &req);
	launch(&d, &req);
	ck_assert_int_eq(held_done, 1);
	ck_assert_int_eq(F.fake.nheld, 1);
	/* another daemon charges the rest */
	struct store_request charge = {.op = STORE_CHARGE,
				       .policy = config_find_policy(F.cfg, "warm", 4),
				       .prefix = F.cfg->prefix,
				       .prefix_len = strlen(F.cfg->prefix),
				       .user = "eve",
				       .user_len = 3,
				       .cost = 6,
				       .timeout_ms = 1000};
	int charged = 0;
	store_submit(F.fake.mem, &charge, fake_charged, &charged);
	ck_assert_int_eq(charged, 1);
	int submits = F.fake.submits;
	fake_flush(&F.fake);
	ck_assert_int_eq(F.fake.submits, submits + 1);
	ck_assert_int_eq(held_done, 4);
	ck_decision(a.res, 0, 10, 0, 60000);
	ck_decision(c.res, 0, 10, 0, 60000);
	ck_decision(d.res, 0, 10, 0, 60000);
	ck_assert_ptr_null(c.cfg);
	ck_assert_ptr_null(d.cfg);
}
END_TEST

/* A RESET of the pair while its ask is out: the units held go at once, the
 * ask's come after the RESET was sent and are never answered from (revoked),
 * and the next request is the store's again. */
START_TEST(blocks_reset_while_asking)
{
	struct cmd_slot a, c, r;
	struct cmd_request req = pair_req(CMD_ALLOW, "hot", "eve");
	struct cmd_request rst = pair_req(CMD_RESET, "hot", "eve");
	struct cmd_caller admin = {.admin = 1};
	blocks_on();
	for (int i = 0; i < 4; i++)
		allow("hot", "eve"); /* the store, an ask of 2, one from it, an ask of 4 */
	for (int i = 0; i < 3; i++)
		allow("hot", "eve"); /* from the blocks: 2 left of 4, half */
	ck_assert_int_eq(blocks_units(F.blocks), 2);
	held_done = 0;
	F.fake.defer = 1;
	launch(&a, &req); /* asks for 8 */
	memset(&r, 0, sizeof(r));
	r.complete = on_held;
	cmd_execute(F.cfg, &F.env, &rst, &admin, &r);
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	ck_assert_uint_eq(blocks_counts(F.blocks)->revoked, 2);
	launch(&c, &req); /* neither answered from a block nor waiting for a's */
	ck_assert_int_eq(F.fake.nheld, 3);
	fake_flush(&F.fake);
	ck_assert_int_eq(held_done, 3);
	/* a: the 10th counted, and 8 more for its block, which is dropped */
	ck_decision(a.res, 1, 100, 90, 0);
	ck_assert_int_eq(r.res.kind, CMD_REPLY_OK);
	ck_decision(c.res, 1, 100, 99, 0);
	ck_assert_int_eq(blocks_units(F.blocks), 0);
	ck_assert_uint_eq(blocks_counts(F.blocks)->revoked, 2 + 8);
}
END_TEST

/* The ask failed: those that waited for it fail the same way. */
START_TEST(blocks_failed_ask_fails_followers)
{
	struct cmd_slot a, b, c;
	struct cmd_request req = pair_req(CMD_ALLOW, "strict_hot", "eve");
	fixture_reload(
		"policies:\n"
		"  strict_hot: {algorithm: fixed_window, limits: [100/1m], blocks: {max: 8},\n"
		"               on_store_error: error}\n");
	blocks_on();
	for (int i = 0; i < 3; i++)
		allow("strict_hot", "eve"); /* the store, an ask of 2, one from it */
	held_done = 0;
	F.fake.defer = 1;
	launch(&a, &req); /* asks */
	launch(&b, &req); /* the last unit */
	launch(&c, &req); /* follows */
	ck_assert_int_eq(held_done, 1);
	ck_decision(b.res, 1, 100, 96, 0);
	F.fake.fail = 1;
	fake_flush(&F.fake);
	ck_assert_int_eq(held_done, 3);
	ck_error(a.res, CMD_ERR_STORE_UNAVAILABLE, "store failed: the fake is down");
	ck_error(c.res, CMD_ERR_STORE_UNAVAILABLE, "store failed: the fake is down");
	ck_assert_ptr_null(c.cfg);
	/* back: the pair asks again */
	F.fake.fail = 0;
	F.now += 1000000;
	int submits = F.fake.submits;
	ck_decision(allow("strict_hot", "eve"), 1, 100, 95, 0);
	ck_assert_int_eq(F.fake.submits, submits + 1);
}
END_TEST

/* ---- overrides and bans on CHARGE and holds ---- */

/* unlimited: answered -1 -1 with nothing counted and no hold id (so no
 * SETTLE); blocked: denied; an override's limits: a hold charged to them,
 * and settled on them. */
START_TEST(override_charge_and_hold)
{
	char id[LEASE_ID_MAX];
	struct cmd_result r = one(CMD_CHARGE, "vip", "alice", 5);
	ck_decision(r, 1, -1, -1, 0);
	ck_assert_int_eq(r.reset_ms, -1);
	r = one(CMD_HOLD, "vip", "alice", 5);
	ck_decision(r, 1, -1, -1, 0);
	ck_assert_ptr_null(r.item);
	ck_decision(one(CMD_CHARGE, "vip", "mallory", 1), 0, 2, 0, -1);
	r = one(CMD_HOLD, "vip", "mallory", 1);
	ck_decision(r, 0, 2, 0, -1);
	ck_assert_ptr_null(r.item);
	ck_assert_int_eq(F.fake.submits, 0);
	lease_id_format(id, "vip", 3, "alice", 5, 7, 5);
	ck_error(on_id(CMD_SETTLE, id, 1), CMD_ERR_NO_HOLD,
		 "hold not open: settled, cancelled, expired or never taken");
	ck_assert_int_eq(F.fake.submits, 0);
	/* bob's 4/1m, not the policy's 2/1m */
	r = one(CMD_HOLD, "vip", "bob", 3);
	ck_lease(r, 4, 1, 60000);
	id_of(r, "vip", "bob", 3, id);
	ck_decision(on_id(CMD_SETTLE, id, 1), 1, 4, 3, 0);
	ck_decision(one(CMD_CHARGE, "vip", "bob", 2), 1, 4, 1, 0);
	ck_decision(allow("vip", "bob"), 1, 4, 0, 0);
}
END_TEST

/* A banned user's CHARGE and HOLD are denied and count nothing. */
START_TEST(ban_denies_charge_and_hold)
{
	ck_decision(allow("banned", "eve"), 1, 1, 0, 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(allow("banned", "eve").allowed, 0);
	F.now += 2000000; /* the limit alone would allow again */
	struct cmd_result r = one(CMD_CHARGE, "banned", "eve", 1);
	ck_assert_int_eq(r.kind, CMD_REPLY_DECISION);
	ck_assert_int_eq(r.allowed, 0);
	ck_assert_int_eq(r.retry_after_ms, 598000); /* the ban began at the third denial */
	r = one(CMD_HOLD, "banned", "eve", 1);
	ck_assert_int_eq(r.kind, CMD_REPLY_DECISION);
	ck_assert_int_eq(r.allowed, 0);
	ck_assert_int_eq(r.retry_after_ms, 598000);
	ck_assert_ptr_null(r.item);
	/* the ban over: neither was counted */
	F.now += 600000000;
	ck_decision(peek("banned", "eve"), 1, 1, 1, 0);
}
END_TEST

/* ---- admin: run-time overrides, TOP ---- */

static struct cmd_result live(enum cmd_verb verb, const char *action, const char *user,
			      const char *spec, int64_t index)
{
	struct cmd_request req = pair_req(verb, action, user);
	req.spec = spec;
	req.spec_len = spec ? strlen(spec) : 0;
	req.index = index;
	return execute(&req, 1);
}

/* OVERRIDE sets one (here, with the memory store, in this daemon alone):
 * it answers before the cached denial; OVERRIDES lists them; UNOVERRIDE
 * clears it. */
START_TEST(live_overrides)
{
	ck_error(live(CMD_OVERRIDE, "login", "eve", "unlimited", 0), CMD_ERR_OUT_OF_MEMORY,
		 "out of memory at start");
	F.env.live = override_live_new(F.base, F.fake.mem, F.cfg);
	ck_assert_ptr_nonnull(F.env.live);
	for (int i = 0; i < 3; i++)
		allow("login", "eve");
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	ck_assert_uint_eq(denycache_size(F.deny), 1);
	ck_assert_int_eq(live(CMD_OVERRIDE, "login", "eve", "unlimited", 0).kind, CMD_REPLY_OK);
	ck_decision(allow("login", "eve"), 1, -1, -1, 0);
	ck_assert_int_eq(live(CMD_OVERRIDE, "login", "frank", "blocked", 0).kind, CMD_REPLY_OK);
	ck_decision(allow("login", "frank"), 0, 3, 0, -1);
	/* by action, then user */
	struct cmd_result r = live(CMD_OVERRIDES, "", "", NULL, 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_ITEM);
	ck_assert_ptr_nonnull(r.item);
	ck_assert_int_eq(r.item->index, 0);
	ck_assert_int_eq(r.item->ttl_ms, -1);
	ck_assert_int_eq((int)r.item->ulen, 3);
	ck_assert_int_eq((int)r.item->alen, 5);
	ck_assert_int_eq((int)r.item->spec_len, 9);
	ck_assert(memcmp(r.item->text, "eveloginunlimited", 17) == 0);
	r = live(CMD_OVERRIDES, "", "", NULL, 1);
	ck_assert_ptr_nonnull(r.item);
	ck_assert(memcmp(r.item->text, "frankloginblocked", 17) == 0);
	r = live(CMD_OVERRIDES, "", "", NULL, 2);
	ck_assert_int_eq(r.kind, CMD_REPLY_ITEM);
	ck_assert_ptr_null(r.item);
	ck_assert_int_eq(r.limit, 2);
	ck_assert_int_eq(live(CMD_UNOVERRIDE, "login", "eve", NULL, 0).kind, CMD_REPLY_OK);
	ck_decision(allow("login", "eve"), 0, 3, 0, 60000);
	ck_assert_int_eq(live(CMD_OVERRIDES, "", "", NULL, 1).limit, 1);
	/* refused before anything is set */
	ck_error(live(CMD_OVERRIDE, "nope", "eve", "unlimited", 0), CMD_ERR_UNKNOWN_ACTION,
		 "no policy for this action");
	ck_error(live(CMD_OVERRIDE, "login", "a b", "unlimited", 0), CMD_ERR_BAD_USER,
		 "an override's user has no blank, CR, LF or NUL byte");
	r = live(CMD_OVERRIDE, "login", "eve", "lots", 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_SYNTAX);
	ck_assert_int_eq(live(CMD_OVERRIDES, "", "", NULL, 1).limit, 1);
	override_live_free(F.env.live);
	F.env.live = NULL;
}
END_TEST

/* TOP: the action's heavy hitters by denials, then the end with how many
 * and the action's totals. */
START_TEST(top_heavy_hitters)
{
	/* each action's counters from scratch: in one process (CK_FORK=no, as
	 * valgrind runs it) the tests before counted eve's denials too */
	stats_free();
	stats_bind(F.cfg);
	for (int i = 0; i < 5; i++)
		allow("login", "eve");
	for (int i = 0; i < 4; i++)
		allow("login", "mallet");
	allow("login", "carol");
	struct cmd_result r = live(CMD_TOP, "login", "", NULL, 0);
	ck_assert_int_eq(r.kind, CMD_REPLY_TOP);
	ck_assert_ptr_nonnull(r.item);
	ck_assert_int_eq((int)r.item->ulen, 3);
	ck_assert(memcmp(r.item->text, "eve", 3) == 0);
	ck_assert_int_eq(r.item->denied, 2);
	ck_assert_int_eq(r.item->requests, 5);
	r = live(CMD_TOP, "login", "", NULL, 1);
	ck_assert_ptr_nonnull(r.item);
	ck_assert(memcmp(r.item->text, "mallet", 6) == 0);
	ck_assert_int_eq(r.item->denied, 1);
	r = live(CMD_TOP, "login", "", NULL, 9);
	ck_assert_int_eq(r.kind, CMD_REPLY_TOP);
	ck_assert_ptr_null(r.item);
	ck_assert_int_eq(r.limit, 2);	       /* users denied: carol was not */
	ck_assert_int_eq(r.remaining, 10);     /* requests */
	ck_assert_int_eq(r.retry_after_ms, 3); /* denials */
	/* by requests: every user that asked */
	struct cmd_request req = pair_req(CMD_TOP, "login", "");
	req.by_requests = 1;
	req.index = 2;
	r = execute(&req, 1);
	ck_assert_ptr_nonnull(r.item);
	ck_assert(memcmp(r.item->text, "carol", 5) == 0);
	ck_assert_int_eq(r.item->requests, 1);
	req.index = 3;
	ck_assert_int_eq(execute(&req, 1).limit, 3);
	ck_error(live(CMD_TOP, "nope", "", NULL, 0), CMD_ERR_UNKNOWN_ACTION,
		 "no policy for this action");
}
END_TEST

/* ---- on_store_error ---- */

START_TEST(store_down_allow_deny_error)
{
	F.fake.fail = 1;
	ck_decision(allow("open", "eve"), 1, 1, -1, 0);
	ck_decision(allow("closed", "eve"), 0, 1, -1, 1000);
	struct cmd_result r = allow("strict", "eve");
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_STORE_UNAVAILABLE);
	/* a RESET is never a fallback */
	struct cmd_request req = {
		.verb = CMD_RESET, .user = "eve", .user_len = 3, .action = "open", .action_len = 4};
	ck_assert_int_eq(execute(&req, 1).kind, CMD_REPLY_ERROR);
	/* MALLOW: the strictest pair's answer */
	static const char *const pairs[] = {"open", "closed"};
	ck_decision(many(CMD_MALLOW, "eve", 2, pairs), 0, 1, -1, 1000);
}
END_TEST

START_TEST(store_down_local_share)
{
	/* loc is 4/1m; local_share 0.5 leaves 2 while the store is down */
	F.fake.fail = 1;
	ck_assert_int_eq(local_active(F.local), 0);
	ck_decision(allow("loc", "eve"), 1, 2, 1, 0);
	ck_assert_int_eq(local_active(F.local), 1);
	ck_decision(allow("loc", "eve"), 1, 2, 0, 0);
	ck_assert_int_eq(allow("loc", "eve").allowed, 0);
	/* back: the store decides on its own count, the local one is dropped */
	F.fake.fail = 0;
	ck_decision(allow("loc", "eve"), 1, 4, 3, 0);
	ck_assert_int_eq(local_active(F.local), 0);
}
END_TEST

START_TEST(store_down_local_mallow)
{
	static const char *const pairs[] = {"loc", "api"};
	F.fake.fail = 1;
	ck_assert_int_eq(many(CMD_MALLOW, "eve", 2, pairs).allowed, 1);
	ck_assert_int_eq(local_active(F.local), 1);
}
END_TEST

/* CHARGE, HOLD, SETTLE and CANCEL with the store down: a charge not
 * counted is an error whatever on_store_error says (local counts it
 * locally); a HOLD follows on_store_error with no id (local: an error, the
 * fallback opens no holds); SETTLE and CANCEL are errors. */
START_TEST(store_down_charge_and_holds)
{
	char id[LEASE_ID_MAX];
	id_of(one(CMD_HOLD, "open", "eve", 1), "open", "eve", 1, id);
	F.fake.fail = 1;
	const char *why = "store failed: the fake is down";
	ck_error(one(CMD_CHARGE, "open", "eve", 1), CMD_ERR_STORE_UNAVAILABLE, why);
	ck_error(one(CMD_CHARGE, "closed", "eve", 1), CMD_ERR_STORE_UNAVAILABLE, why);
	ck_decision(one(CMD_CHARGE, "loc", "eve", 1), 1, 2, 1, 0);
	struct cmd_result r = one(CMD_HOLD, "open", "eve", 1);
	ck_decision(r, 1, 1, -1, 0);
	ck_assert_ptr_null(r.item);
	r = one(CMD_HOLD, "closed", "eve", 1);
	ck_decision(r, 0, 1, -1, 1000);
	ck_assert_ptr_null(r.item);
	ck_error(one(CMD_HOLD, "strict", "eve", 1), CMD_ERR_STORE_UNAVAILABLE, why);
	ck_error(one(CMD_HOLD, "loc", "eve", 1), CMD_ERR_STORE_UNAVAILABLE, why);
	ck_error(on_id(CMD_SETTLE, id, 1), CMD_ERR_STORE_UNAVAILABLE, why);
	ck_error(on_id(CMD_CANCEL, id, 0), CMD_ERR_STORE_UNAVAILABLE, why);
	/* back: the hold is still open */
	F.fake.fail = 0;
	ck_assert_int_eq(on_id(CMD_CANCEL, id, 0).kind, CMD_REPLY_OK);
}
END_TEST

/* ---- STATE ---- */

static struct cmd_result state(const char *action, const char *user)
{
	return one(CMD_STATE, action, user, 1);
}

/* limit i of a STATE reply: its window, limit, used, remaining, reset */
#define ck_state_limit(r, i, w, l, u, rem, reset)                            \
	do {                                                                 \
		const struct cmd_state_limit *sl_ = &(r).state->limits[(i)]; \
		ck_assert_int_eq(sl_->window_ms, (w));                       \
		ck_assert_int_eq(sl_->limit, (l));                           \
		ck_assert_int_eq(sl_->used, (u));                            \
		ck_assert_int_eq(sl_->remaining, (rem));                     \
		ck_assert_int_eq(sl_->reset_ms, (reset));                    \
	} while (0)

/* Every limit in the policy's order, each with its own count; nothing
 * counted, cached or denied by asking, however often. */
START_TEST(state_every_limit_counts_nothing)
{
	struct cmd_result r = state("layered", "eve");
	ck_assert_int_eq(r.kind, CMD_REPLY_STATE);
	ck_assert_ptr_nonnull(r.state);
	ck_assert_int_eq(r.state->algo, POLICY_SLIDING_WINDOW);
	ck_assert_int_eq(r.state->override, CMD_STATE_NONE);
	ck_assert_int_eq(r.state->ban_ms, 0);
	ck_assert_int_eq(r.state->nlimits, 2);
	ck_state_limit(r, 0, 1000, 2, 0, 2, 0);
	ck_state_limit(r, 1, 60000, 5, 0, 5, 0);
	ck_decision(allow("layered", "eve"), 1, 2, 1, 0);
	F.now += 400000;
	ck_decision(allow("layered", "eve"), 1, 2, 0, 0);
	for (int i = 0; i < 5; i++) {
		r = state("layered", "eve");
		ck_state_limit(r, 0, 1000, 2, 2, 0, 1000);
		ck_state_limit(r, 1, 60000, 5, 2, 3, 60000);
		ck_assert_int_eq(r.state->limits[0].start_ms, 0); /* a log: no window */
		ck_assert_int_eq(r.state->limits[0].end_ms, 0);
	}
	/* full: STATE tells it, and neither denies nor caches a denial */
	ck_assert_uint_eq(denycache_size(F.deny), 0);
	ck_decision(peek("layered", "eve"), 0, 2, 0, 600);
	ck_decision(one(CMD_PEEK, "login", "eve", 1), 1, 3, 3, 0);
	/* another user has his own */
	ck_state_limit(state("layered", "bob"), 1, 60000, 5, 0, 5, 0);
}
END_TEST

/* A ban in force: its time left; the limits still tell their counts. */
START_TEST(state_ban)
{
	ck_decision(allow("layered", "eve"), 1, 2, 1, 0);
	ck_decision(allow("layered", "eve"), 1, 2, 0, 0);
	ck_assert_int_eq(allow("layered", "eve").allowed, 0);
	ck_assert_int_eq(state("layered", "eve").state->ban_ms, 0); /* one denial of two */
	ck_assert_int_eq(allow("layered", "eve").allowed, 0);
	F.now += 1001000; /* the second's window has passed both */
	struct cmd_result r = state("layered", "eve");
	ck_assert_int_eq(r.state->ban_ms, 598999);
	ck_state_limit(r, 0, 1000, 2, 0, 2, 0);
	ck_state_limit(r, 1, 60000, 5, 2, 3, 59000);
}
END_TEST

/* Windows tell the window holding now: a fixed one's, a counter's
 * current one, a calendar day's; a funnel its level, no window. */
START_TEST(state_windows_and_funnel)
{
	int64_t now_ms = F.now / 1000;
	ck_assert_int_eq(one(CMD_ALLOW, "spend", "eve", 3).allowed, 1);
	struct cmd_result r = state("spend", "eve");
	ck_assert_int_eq(r.state->algo, POLICY_FIXED_WINDOW);
	ck_state_limit(r, 0, 60000, 10, 3, 7, 60000);
	ck_assert_int_eq(r.state->limits[0].start_ms, now_ms); /* a whole minute */
	ck_assert_int_eq(r.state->limits[0].end_ms, now_ms + 60000);
	ck_assert_int_eq(r.state->limits[0].calendar, CALENDAR_NONE);

	ck_assert_int_eq(one(CMD_ALLOW, "daily", "eve", 4).allowed, 1);
	r = state("daily", "eve");
	const struct cmd_state_limit *d = &r.state->limits[0];
	int64_t day = now_ms / 86400000 * 86400000;
	ck_assert_int_eq(d->calendar, CALENDAR_DAY);
	ck_assert_int_eq(d->start_ms, day);
	ck_assert_int_eq(d->end_ms, day + 86400000);
	ck_assert_int_eq(d->window_ms, 86400000);
	ck_assert_int_eq(d->used, 4);
	ck_assert_int_eq(d->remaining, 6);

	ck_assert_int_eq(one(CMD_ALLOW, "gcra", "eve", 3).allowed, 1);
	r = state("gcra", "eve");
	ck_assert_int_eq(r.state->algo, POLICY_FUNNEL);
	/* capacity 4 draining 2 a second: 2 s when full; 3 in it, 1.5 s to empty */
	ck_state_limit(r, 0, 2000, 4, 3, 1, 1500);
	ck_assert_int_eq(r.state->limits[0].end_ms, 0);
	F.now += 1000000;
	ck_state_limit(state("gcra", "eve"), 0, 2000, 4, 1, 3, 500);
	ck_decision(one(CMD_PEEK, "gcra", "eve", 3), 1, 4, 3, 0);
}
END_TEST

/* An override's kind; its limits when it has some. */
START_TEST(state_overrides)
{
	struct cmd_result r = state("vip", "alice");
	ck_assert_int_eq(r.state->override, CMD_STATE_UNLIMITED);
	ck_state_limit(r, 0, 60000, 2, 0, 2, 0);
	ck_assert_int_eq(state("vip", "mallory").state->override, CMD_STATE_BLOCKED);
	ck_decision(allow("vip", "bob"), 1, 4, 3, 0);
	r = state("vip", "bob");
	ck_assert_int_eq(r.state->override, CMD_STATE_LIMITS);
	ck_state_limit(r, 0, 60000, 4, 1, 3, 60000);
	ck_assert_int_eq(state("vip", "carol").state->override, CMD_STATE_NONE);
}
END_TEST

/* A concurrency policy: the units its leases hold, until the last ends. */
START_TEST(state_leases)
{
	F.env.store = F.fake.mem;
	struct cmd_result r = state("pool", "eve");
	ck_assert_int_eq(r.state->algo, POLICY_CONCURRENCY);
	ck_state_limit(r, 0, 30000, 2, 0, 2, 0);
	ck_lease(acquire("pool", "eve", 1), 2, 1, 30000);
	F.now += 10000000;
	ck_lease(acquire("pool", "eve", 1), 2, 0, 30000);
	ck_state_limit(state("pool", "eve"), 0, 30000, 2, 2, 0, 30000);
	/* taking nothing: the next ACQUIRE is still denied */
	ck_assert_int_eq(acquire("pool", "eve", 1).allowed, 0);
	F.now += 25000000; /* the first lease is gone, the second ends in 5 s */
	ck_state_limit(state("pool", "eve"), 0, 30000, 2, 1, 1, 5000);
}
END_TEST

/* What PEEK refuses, STATE refuses; a store that cannot read is an error,
 * never a fallback's made-up figures. */
START_TEST(state_errors)
{
	ck_error(state("nope", "eve"), CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
	ck_assert_int_eq(F.fake.submits, 0);
	F.fake.fail = 1;
	struct cmd_result r = state("layered", "eve"); /* on_store_error: allow */
	ck_assert_int_eq(r.kind, CMD_REPLY_ERROR);
	ck_assert_int_eq(r.error, CMD_ERR_STORE_UNAVAILABLE);
	ck_assert_ptr_null(r.state);
}
END_TEST

/* One case per store kind: the atomic call of one Redis, and a Cluster's
 * check-then-charge. */
static void add(Suite *s, const char *name, void (*setup)(void), const TTest *const *tests)
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, setup, fixture_close);
	for (; *tests; tests++)
		tcase_add_test(tc, *tests);
	suite_add_tcase(s, tc);
}

int main(void)
{
	const TTest *const tests[] = {
		vectors_through_cmd,
		vectors_without_deny_cache,
		deny_cache_answers_repeated_denials,
		deny_cache_expires,
		deny_cache_reset_clears,
		deny_cache_reset_needs_admin,
		deny_cache_store_generation_clears,
		deny_cache_override_wins,
		deny_cache_cost_is_part_of_the_key,
		deny_cache_forgets_on_charge_and_hold,
		mallow_all_or_nothing,
		mallow_one_denied_charges_none,
		mallow_denied_by_the_roomier_pair,
		mallow_allowed_forgets_cached_denials,
		mpeek_consumes_nothing,
		mallow_unknown_action,
		mallow_shadow_pair_never_denies,
		peek_consumes_nothing,
		cost_above_limit,
		unknown_action,
		ping_quit_unknown,
		shadow_always_allows,
		ban_after_denials,
		ban_needs_denials_within,
		override_unlimited,
		override_blocked,
		override_limits,
		override_in_mallow,
		throttle_own_limit,
		charge_never_denied,
		hold_settle_below_estimate,
		hold_settle_above_estimate,
		hold_cancel_clears_cached_denial,
		hold_denied_and_expired,
		hold_bad_ids,
		lease_acquire_up_to_limit,
		lease_release_renew,
		lease_reset_forgets_the_users,
		lease_wrong_policy_or_id,
		lease_store_down,
		rights_noauth,
		rights_auth,
		rights_forbidden,
		rights_admin_listener,
		delay_funnel,
		delay_window,
		delay_wait_and_deadline,
		delay_max_delayed,
		delay_store_down_gives_claims_back,
		blocks_answer_hot_pair,
		blocks_never_over_admit,
		blocks_revoked,
		blocks_follow_the_ask,
		blocks_denied_ask_answers_followers,
		blocks_reset_while_asking,
		blocks_failed_ask_fails_followers,
		override_charge_and_hold,
		ban_denies_charge_and_hold,
		live_overrides,
		top_heavy_hitters,
		store_down_allow_deny_error,
		store_down_local_share,
		store_down_local_mallow,
		store_down_charge_and_holds,
		state_every_limit_counts_nothing,
		state_ban,
		state_windows_and_funnel,
		state_overrides,
		state_leases,
		state_errors,
		NULL,
	};
	Suite *s = suite_create("decide");
	add(s, "redis", fixture_atomic, tests);
	add(s, "cluster", fixture_cluster, tests);
	return run_suite(s);
}
