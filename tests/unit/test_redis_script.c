/*
 * test_redis_script.c - the decision script's calls (redis_script.c): each
 * decision's arguments, golden, and a batch walked as the script walks it
 * (its decision_argc, ported below), keys before or after the arguments;
 * the RESP form.
 */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "policy.h"
#include "redis_script.h"

#define BATCH 8

struct call {
	const char *argv[1024];
	size_t argl[1024];
	char arena[262144];
	struct redis_argv a;
};

static void call_init(struct call *c)
{
	ck_assert_uint_le(redis_script_argv_max(BATCH), 1024);
	ck_assert_uint_le(redis_script_arena_size(BATCH), sizeof(c->arena));
	c->a = (struct redis_argv){c->argv, c->argl, 0, c->arena, 0};
}

static struct policy make(enum policy_algo algo, int nlimits, int ban)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	strcpy(p.name, "login");
	p.name_len = 5;
	p.algo = algo;
	p.nlimits = nlimits;
	for (int i = 0; i < nlimits; i++)
		p.limits[i] =
			(struct policy_limit){.capacity = algo == POLICY_FUNNEL ? 15 : 10 * (i + 1),
					      .count = 10 * (i + 1),
					      .period_ms = 1000LL * 60 * (i + 1)};
	if (ban)
		p.ban = (struct policy_ban){3, 60000, 600000};
	return p;
}

static void saved(struct store_saved_request *sv, enum store_op op, const struct policy *p,
		  const char *user, int64_t cost)
{
	memset(sv, 0, sizeof(*sv));
	sv->op = op;
	sv->cost = cost;
	sv->policy = *p;
	sv->user = user;
	sv->user_len = strlen(user);
	sv->prefix = "rl:";
	sv->prefix_len = 3;
}

/* argv[from..to) joined by spaces. */
static void joined(const struct call *c, int from, int to, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = '\0';
	for (int i = from; i < to; i++)
		n += (size_t)snprintf(out + n, cap - n, "%s%.*s", i > from ? " " : "",
				      (int)c->argl[i], c->argv[i]);
}

/* ---- one decision: its arguments, golden ---- */

struct dcase {
	enum store_op op;
	enum policy_algo algo;
	int nlimits, ban;
	int64_t cost;
	const char *keys, *args; /* after "0 1" */
};

static const struct dcase dcases[] = {
	{STORE_ALLOW, POLICY_FUNNEL, 1, 0, 1, "rl:{login:bob}:f", "a 1 1 f 15 10 60000"},
	{STORE_PEEK, POLICY_SLIDING_WINDOW, 1, 0, 7, "rl:{login:bob}:s60000",
	 "p 7 1 s 10 10 60000"},
	{STORE_ALLOW, POLICY_SLIDING_WINDOW, 2, 1, 2, NULL,
	 "a 2 3 s 10 10 60000 s 20 20 120000 b 3 60000 600000"},
	{STORE_ALLOW, POLICY_FIXED_WINDOW, 3, 0, 1, NULL,
	 "a 1 3 w 10 10 60000 w 20 20 120000 w 30 30 180000"},
	{STORE_ALLOW, POLICY_SLIDING_COUNTER, 1, 0, 1, NULL, "a 1 1 c 10 10 60000"},
	{STORE_RESET, POLICY_FUNNEL, 1, 0, 1, NULL, "r 1 1 f 15 10 60000 rl:reset login:bob"},
	{STORE_RESET, POLICY_SLIDING_WINDOW, 1, 1, 1, NULL,
	 "r 1 2 s 10 10 60000 b 3 60000 600000 rl:reset login:bob"},
};

START_TEST(test_decision_table)
{
	const struct dcase *d = &dcases[_i];
	struct policy p = make(d->algo, d->nlimits, d->ban);
	struct store_saved_request sv;
	saved(&sv, d->op, &p, "bob", d->cost);
	const struct store_saved_request *reqs[] = {&sv};
	static struct call c;
	call_init(&c);
	redis_script_call(&c.a, "EVALSHA", "sha", 3, reqs, 1, 0);
	int nkeys = policy_nkeys(&p);
	ck_assert_int_eq(nkeys, d->nlimits + (d->ban ? 1 : 0));
	/* EVALSHA sha numkeys keys... 0 1 args... */
	ck_assert_int_eq(c.a.argc, 3 + nkeys + 2 + REDIS_SCRIPT_DECISION_ARGC(d->op, nkeys));
	char buf[1024];
	joined(&c, 0, 3, buf, sizeof(buf));
	char want[64];
	snprintf(want, sizeof(want), "EVALSHA sha %d", nkeys);
	ck_assert_str_eq(buf, want);
	if (d->keys) {
		joined(&c, 3, 3 + nkeys, buf, sizeof(buf));
		ck_assert_str_eq(buf, d->keys);
	}
	/* each key is keys_build's, all in the pair's hash tag */
	for (int i = 0; i < nkeys; i++) {
		char k[KEYS_MAX];
		size_t kl = keys_build(k, "rl:", 3, &p, i, "bob", 3);
		ck_assert_uint_eq(c.argl[3 + i], kl);
		ck_assert_mem_eq(c.argv[3 + i], k, kl);
		ck_assert_ptr_nonnull(memmem(k, kl, "{login:bob}", 11));
	}
	joined(&c, 3 + nkeys, 5 + nkeys, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0 1");
	joined(&c, 5 + nkeys, c.a.argc, buf, sizeof(buf));
	ck_assert_str_eq(buf, d->args);
}
END_TEST

/* ---- a batch, walked as the script walks it ---- */

static long num(const struct call *c, int i)
{
	char b[32];
	ck_assert_uint_lt(c->argl[i], sizeof(b));
	memcpy(b, c->argv[i], c->argl[i]);
	b[c->argl[i]] = '\0';
	char *end;
	long v = strtol(b, &end, 10);
	ck_assert_msg(*end == '\0' && end != b, "argument %d is not a number: %s", i, b);
	return v;
}

static int is(const struct call *c, int i, const char *s)
{
	return c->argl[i] == strlen(s) && memcmp(c->argv[i], s, c->argl[i]) == 0;
}

/* src/store/lua/ratelimit.lua's decision_argc, on argv from `a` on (ARGV[a]):
 * how many arguments the decision takes, and how many keys. */
static int decision_argc(const struct call *c, int a, int *nkeys)
{
	if (c->argl[a] > 1 && c->argv[a][0] == '=') {
		*nkeys = 1;
		return 1;
	}
	if (is(c, a, "A") || is(c, a, "P")) {
		int n = 3, k = 0;
		for (long g = 0; g < num(c, a + 2); g++) {
			int nl = (int)num(c, a + n + 1);
			n += 2 + 4 * nl;
			k += nl;
		}
		*nkeys = k;
		return n;
	}
	int nl = (int)num(c, a + 2);
	*nkeys = nl;
	return 3 + 4 * nl + (is(c, a, "r") ? 2 : 0);
}

/* A batch of every kind: single decisions and one over two pairs. */
static int batch(struct store_saved_request *sv, struct store_saved_pair *pairs)
{
	struct policy f = make(POLICY_FUNNEL, 1, 0), s = make(POLICY_SLIDING_WINDOW, 2, 1),
		      w = make(POLICY_FIXED_WINDOW, 3, 0), c = make(POLICY_SLIDING_COUNTER, 2, 1);
	saved(&sv[0], STORE_ALLOW, &f, "u0", 1);
	saved(&sv[1], STORE_RESET, &s, "u1", 1);
	saved(&sv[2], STORE_PEEK, &w, "u2", 5);
	saved(&sv[3], STORE_ALLOW, &f, "u3", 1);
	memset(pairs, 0, 2 * sizeof(*pairs));
	pairs[0].policy = c;
	pairs[0].user_len = 2;
	memcpy(pairs[0].user, "p0", 2);
	pairs[1].policy = w;
	pairs[1].shadow = 1;
	pairs[1].user_len = 2;
	memcpy(pairs[1].user, "p1", 2);
	sv[3].npairs = 2;
	sv[3].pairs = pairs;
	saved(&sv[4], STORE_RESET, &c, "u4", 1);
	return 5;
}

static int keys_of(const struct store_saved_request *sv)
{
	if (sv->npairs == 0)
		return policy_nkeys(&sv->policy);
	int n = 0;
	for (int j = 0; j < sv->npairs; j++)
		n += policy_nkeys(&sv->pairs[j].policy);
	return n;
}

static void check_batch(int keys_after)
{
	struct store_saved_request sv[5];
	struct store_saved_pair pairs[2];
	int n = batch(sv, pairs);
	const struct store_saved_request *reqs[5];
	int total_keys = 0;
	for (int j = 0; j < n; j++) {
		reqs[j] = &sv[j];
		total_keys += keys_of(&sv[j]);
	}
	static struct call c;
	call_init(&c);
	redis_script_call(&c.a, "EVAL", "body", 4, reqs, n, keys_after);
	ck_assert(is(&c, 0, "EVAL") && is(&c, 1, "body"));
	ck_assert_int_eq(num(&c, 2), keys_after ? 0 : total_keys);
	int a = 3 + (keys_after ? 0 : total_keys);
	ck_assert(is(&c, a, "0"));
	ck_assert_int_eq(num(&c, a + 1), n);
	a += 2;
	int k = 0;
	for (int j = 0; j < n; j++) {
		int nk, argc = decision_argc(&c, a, &nk);
		ck_assert_msg(nk == keys_of(&sv[j]), "decision %d: %d keys", j, nk);
		if (sv[j].npairs == 0)
			ck_assert_int_eq(argc, REDIS_SCRIPT_DECISION_ARGC(sv[j].op, nk));
		else
			ck_assert(is(&c, a, sv[j].op == STORE_ALLOW ? "A" : "P"));
		ck_assert_int_eq(num(&c, a + 1), sv[j].cost);
		a += argc;
		k += nk;
	}
	/* the walk ends at the keys (after them: the keys themselves) */
	ck_assert_int_eq(k, total_keys);
	ck_assert_int_eq(c.a.argc, a + (keys_after ? total_keys : 0));
	/* the pairs' groups: shadow flags and key counts */
	int ks = keys_after ? a : 3;
	for (int j = 0; j < n; j++) {
		const struct store_saved_request *r = &sv[j];
		int np = r->npairs ? r->npairs : 1;
		for (int q = 0; q < np; q++) {
			const struct policy *p = r->npairs ? &r->pairs[q].policy : &r->policy;
			const char *u = r->npairs ? r->pairs[q].user : r->user;
			size_t ul = r->npairs ? r->pairs[q].user_len : r->user_len;
			for (int i = 0; i < policy_nkeys(p); i++) {
				char key[KEYS_MAX];
				size_t kl = keys_build(key, "rl:", 3, p, i, u, ul);
				ck_assert_uint_eq(c.argl[ks], kl);
				ck_assert_mem_eq(c.argv[ks], key, kl);
				ks++;
			}
		}
	}
	ck_assert_uint_le((size_t)c.a.argc, redis_script_argv_max(BATCH));
	ck_assert_uint_le(c.a.arena_used, redis_script_arena_size(BATCH));
}

START_TEST(test_batch_keys_first)
{
	check_batch(0);
}
END_TEST

START_TEST(test_batch_keys_after)
{
	check_batch(1);
}
END_TEST

START_TEST(test_pairs_args)
{
	struct store_saved_request sv[5];
	struct store_saved_pair pairs[2];
	batch(sv, pairs);
	const struct store_saved_request *reqs[] = {&sv[3]};
	static struct call c;
	call_init(&c);
	redis_script_call(&c.a, "EVALSHA", "sha", 3, reqs, 1, 1);
	char buf[512];
	joined(&c, 0, 5, buf, sizeof(buf));
	ck_assert_str_eq(buf, "EVALSHA sha 0 0 1");
	/* A cost ngroups, then per group: shadow nkeys limits (a ban is a limit) */
	joined(&c, 5, 5 + 3 + 2 + 4 * 3 + 2 + 4 * 3, buf, sizeof(buf));
	ck_assert_str_eq(buf, "A 1 2 0 3 c 10 10 60000 c 20 20 120000 b 3 60000 600000 "
			      "1 3 w 10 10 60000 w 20 20 120000 w 30 30 180000");
}
END_TEST

/* An ALLOW of the same one limit as the ALLOW just before is "=<cost>";
 * anything else between (another limit, a ban, a wait, a block, another
 * op) sends the next one in full again. Keys are unchanged. */
START_TEST(test_repeats)
{
	struct policy f = make(POLICY_FUNNEL, 1, 0), w = make(POLICY_FIXED_WINDOW, 1, 0),
		      b = make(POLICY_FIXED_WINDOW, 1, 1);
	struct policy f2 = f;
	f2.limits[0].count = 11;
	struct store_saved_request sv[11];
	saved(&sv[0], STORE_ALLOW, &f, "u0", 1);
	saved(&sv[1], STORE_ALLOW, &f, "u1", 1);
	saved(&sv[2], STORE_ALLOW, &f, "u2", 3);  /* another cost: still "=" */
	saved(&sv[3], STORE_ALLOW, &f2, "u3", 1); /* another count */
	saved(&sv[4], STORE_ALLOW, &w, "u4", 1);
	saved(&sv[5], STORE_PEEK, &w, "u5", 1);
	saved(&sv[6], STORE_ALLOW, &w, "u6", 1); /* after a PEEK: in full */
	saved(&sv[7], STORE_ALLOW, &w, "u7", 1);
	saved(&sv[8], STORE_ALLOW, &w, "u8", 1);
	sv[8].wait_ms = 100;			 /* may wait: "d", in full */
	saved(&sv[9], STORE_ALLOW, &b, "u9", 1); /* a ban: two keys, in full */
	saved(&sv[10], STORE_ALLOW, &b, "u10", 1);
	const struct store_saved_request *reqs[11];
	for (int j = 0; j < 11; j++)
		reqs[j] = &sv[j];
	for (int keys_after = 0; keys_after <= 1; keys_after++) {
		static struct call c;
		call_init(&c);
		redis_script_call(&c.a, "EVALSHA", "sha", 3, reqs, 11, keys_after);
		int nkeys = keys_after ? 0 : (int)num(&c, 2);
		ck_assert_int_eq(nkeys, keys_after ? 0 : 13);
		char buf[1024];
		joined(&c, 3 + nkeys, c.a.argc - (keys_after ? 13 : 0), buf, sizeof(buf));
		ck_assert_str_eq(buf,
				 "0 11 a 1 1 f 15 10 60000 =1 =3 a 1 1 f 15 11 60000 "
				 "a 1 1 w 10 10 60000 p 1 1 w 10 10 60000 a 1 1 w 10 10 60000 =1 "
				 "d 1 1 w 10 10 60000 100000 a 1 2 w 10 10 60000 b 3 60000 600000 "
				 "a 1 2 w 10 10 60000 b 3 60000 600000");
		/* the keys, one per limit, in order */
		int k0 = keys_after ? c.a.argc - 13 : 3;
		char key[KEYS_MAX];
		size_t kl = keys_build(key, "rl:", 3, &f, 0, "u2", 2);
		ck_assert(c.argl[k0 + 2] == kl && memcmp(c.argv[k0 + 2], key, kl) == 0);
		kl = keys_build(key, "rl:", 3, &w, 0, "u7", 2);
		ck_assert(c.argl[k0 + 7] == kl && memcmp(c.argv[k0 + 7], key, kl) == 0);
	}
}
END_TEST

/* A decision over pairs whose op, groups and limits are those of the last
 * one in full in the call is "~<cost>", whatever came between; another op
 * (P after A), shadow flag or limit sends it in full, and that one is what
 * a "~" after it repeats. */
static void pairs_saved(struct store_saved_request *sv, struct store_saved_pair *sp,
			enum store_op op, const struct policy *p0, const struct policy *p1,
			int shadow1, const char *user, int64_t cost)
{
	saved(sv, op, p0, user, cost);
	sp[0] = (struct store_saved_pair){.policy = *p0, .user_len = strlen(user)};
	sp[1] = (struct store_saved_pair){
		.policy = *p1, .shadow = shadow1, .user_len = strlen(user)};
	memcpy(sp[0].user, user, sp[0].user_len);
	memcpy(sp[1].user, user, sp[1].user_len);
	sv->npairs = 2;
	sv->pairs = sp;
}

START_TEST(test_pair_repeats)
{
	struct policy w = make(POLICY_FIXED_WINDOW, 1, 0), f = make(POLICY_FUNNEL, 1, 0);
	struct policy w2 = w;
	w2.limits[0].count = 11;
	struct store_saved_request sv[8];
	struct store_saved_pair sp[8][2];
	pairs_saved(&sv[0], sp[0], STORE_ALLOW, &w, &f, 0, "u0", 1);
	pairs_saved(&sv[1], sp[1], STORE_ALLOW, &w, &f, 0, "u1", 2);  /* "~2" */
	saved(&sv[2], STORE_ALLOW, &w, "u2", 1);		      /* between: a plain ALLOW */
	pairs_saved(&sv[3], sp[3], STORE_ALLOW, &w, &f, 0, "u3", 1);  /* still "~1" */
	pairs_saved(&sv[4], sp[4], STORE_PEEK, &w, &f, 0, "u4", 1);   /* P: in full */
	pairs_saved(&sv[5], sp[5], STORE_ALLOW, &w, &f, 0, "u5", 1);  /* A after P: in full */
	pairs_saved(&sv[6], sp[6], STORE_ALLOW, &w, &f, 1, "u6", 1);  /* shadow: in full */
	pairs_saved(&sv[7], sp[7], STORE_ALLOW, &w2, &f, 1, "u7", 1); /* another count */
	const struct store_saved_request *reqs[8];
	for (int j = 0; j < 8; j++)
		reqs[j] = &sv[j];
	for (int keys_after = 0; keys_after <= 1; keys_after++) {
		static struct call c;
		call_init(&c);
		redis_script_call(&c.a, "EVALSHA", "sha", 3, reqs, 8, keys_after);
		int nkeys = keys_after ? 0 : (int)num(&c, 2);
		ck_assert_int_eq(nkeys, keys_after ? 0 : 15);
		char buf[1024];
		joined(&c, 3 + nkeys, c.a.argc - (keys_after ? 15 : 0), buf, sizeof(buf));
		ck_assert_str_eq(buf, "0 8 A 1 2 0 1 w 10 10 60000 0 1 f 15 10 60000 ~2 "
				      "a 1 1 w 10 10 60000 ~1 "
				      "P 1 2 0 1 w 10 10 60000 0 1 f 15 10 60000 "
				      "A 1 2 0 1 w 10 10 60000 0 1 f 15 10 60000 "
				      "A 1 2 0 1 w 10 10 60000 1 1 f 15 10 60000 "
				      "A 1 2 0 1 w 10 11 60000 1 1 f 15 10 60000");
		/* the keys, one per limit, in order: u3's after u2's */
		int k0 = keys_after ? c.a.argc - 15 : 3;
		char key[KEYS_MAX];
		size_t kl = keys_build(key, "rl:", 3, &w, 0, "u3", 2);
		ck_assert(c.argl[k0 + 5] == kl && memcmp(c.argv[k0 + 5], key, kl) == 0);
	}
}
END_TEST

/* A calendar window's pairs are compared as encoded (their bounds come
 * from the clock): the same again is still "~". */
START_TEST(test_pair_repeats_calendar)
{
	struct policy m = make(POLICY_FIXED_WINDOW, 1, 0), f = make(POLICY_FUNNEL, 1, 0);
	m.limits[0].calendar = CALENDAR_DAY;
	m.limits[0].period_ms = 86400000;
	struct store_saved_request sv[2];
	struct store_saved_pair sp[2][2];
	pairs_saved(&sv[0], sp[0], STORE_ALLOW, &m, &f, 0, "u0", 1);
	pairs_saved(&sv[1], sp[1], STORE_ALLOW, &m, &f, 0, "u1", 1);
	const struct store_saved_request *reqs[] = {&sv[0], &sv[1]};
	static struct call c;
	call_init(&c);
	redis_script_call(&c.a, "EVALSHA", "sha", 3, reqs, 2, 0);
	ck_assert_int_eq(c.a.argc, 3 + 4 + 2 + 3 + 2 * 6 + 1);
	ck_assert_int_eq((int)c.argl[c.a.argc - 1], 2);
	ck_assert(memcmp(c.argv[c.a.argc - 1], "~1", 2) == 0);
	ck_assert(c.argl[3 + 4 + 2 + 3 + 2] == 1 && c.argv[3 + 4 + 2 + 3 + 2][0] == 'W');
}
END_TEST

/* The RESP form is what hiredis would send. */
START_TEST(test_resp_format)
{
	struct policy p = make(POLICY_FUNNEL, 1, 0);
	struct store_saved_request sv;
	saved(&sv, STORE_ALLOW, &p, "bob", 1);
	const struct store_saved_request *reqs[] = {&sv};
	static struct call c;
	call_init(&c);
	redis_script_call(&c.a, "EVALSHA", "abc", 3, reqs, 1, 0);
	static char out[4096];
	size_t n = redis_resp_format(out, &c.a);
	ck_assert_uint_le(n, redis_script_resp_max(BATCH));
	static const char want[] = "*13\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n"
				   "$16\r\nrl:{login:bob}:f\r\n$1\r\n0\r\n$1\r\n1\r\n$1\r\na\r\n"
				   "$1\r\n1\r\n$1\r\n1\r\n$1\r\nf\r\n$2\r\n15\r\n$2\r\n10\r\n"
				   "$5\r\n60000\r\n";
	ck_assert_uint_eq(n, sizeof(want) - 1);
	ck_assert_mem_eq(out, want, n);
	char b[32];
	ck_assert_uint_eq(redis_resp_bulk(b, "", 0), 6);
	ck_assert_mem_eq(b, "$0\r\n\r\n", 6);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("redis_script");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_decision_table, 0, (int)(sizeof(dcases) / sizeof(dcases[0])));
	tcase_add_test(tc, test_batch_keys_first);
	tcase_add_test(tc, test_batch_keys_after);
	tcase_add_test(tc, test_pairs_args);
	tcase_add_test(tc, test_repeats);
	tcase_add_test(tc, test_pair_repeats);
	tcase_add_test(tc, test_pair_repeats_calendar);
	tcase_add_test(tc, test_resp_format);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
