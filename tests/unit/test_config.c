/* test_config.c - YAML config: values, defaults, every error with its FILE:LINE:COL, lookups. */
#include <check.h>

#include "runner.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "override.h"

#ifndef TEST_SRCDIR
#define TEST_SRCDIR "."
#endif
#define CONFIGS TEST_SRCDIR "/tests/unit/configs/"

static char err[CONFIG_ERR_MAX];

static struct config *parse(const char *yaml)
{
	memset(err, 'X', sizeof(err));
	err[sizeof(err) - 1] = '\0';
	return config_parse("t.yaml", yaml, strlen(yaml), err, sizeof(err));
}

static struct config *must_parse(const char *yaml)
{
	struct config *c = parse(yaml);
	ck_assert_msg(c != NULL, "rejected: %s", err);
	ck_assert_int_eq(c->refs, 1);
	return c;
}

static const struct policy *find(const struct config *c, const char *name)
{
	return config_find_policy(c, name, strlen(name));
}

START_TEST(example_config)
{
	struct config *c = config_load(CONFIGS "example.yaml", err, sizeof(err));
	ck_assert_msg(c != NULL, "rejected: %s", err);
	ck_assert_int_eq(c->refs, 1);
	ck_assert_str_eq(c->path, CONFIGS "example.yaml");
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0].address, "127.0.0.1:7379");
	ck_assert_str_eq(c->redis.address, "127.0.0.1:6379");
	ck_assert_str_eq(c->redis.username, "ratelimitd");
	ck_assert_str_eq(c->redis.password, "s3cret");
	ck_assert_int_eq(c->redis.database, 0);
	ck_assert_int_eq(c->redis.timeout_ms, 50);
	ck_assert_int_eq(c->redis.connections, 2);
	ck_assert_str_eq(c->prefix, "rl:");
	ck_assert_int_eq(c->on_store_error, POLICY_ON_ERROR_ALLOW);
	ck_assert_uint_eq(c->max_line, 4096);
	ck_assert_int_eq(c->log_level, LOG_LEVEL_INFO);
	ck_assert_ptr_null(c->metrics_listen); /* off unless configured */

	/* sorted by name */
	ck_assert_uint_eq(c->npolicies, 4);
	ck_assert_str_eq(c->policies[0].name, "comment");
	ck_assert_str_eq(c->policies[1].name, "login");
	ck_assert_str_eq(c->policies[2].name, "reply");
	ck_assert_str_eq(c->policies[3].name, "upload");

	const struct policy *p = find(c, "reply");
	ck_assert_ptr_eq(p, &c->policies[2]);
	ck_assert_uint_eq(p->name_len, 5);
	ck_assert_int_eq(p->algo, POLICY_SLIDING_WINDOW);
	ck_assert_int_eq(p->nlimits, 1);
	ck_assert_int_eq(p->limits[0].count, 5);
	ck_assert_int_eq(p->limits[0].capacity, 5);
	ck_assert_int_eq(p->limits[0].period_ms, 60000);
	ck_assert_int_eq(p->on_store_error, POLICY_ON_ERROR_INHERIT);
	ck_assert_int_eq(config_on_error(c, p), POLICY_ON_ERROR_ALLOW);

	p = find(c, "login");
	ck_assert_int_eq(p->algo, POLICY_SLIDING_WINDOW);
	ck_assert_int_eq(p->nlimits, 2);
	ck_assert_int_eq(p->limits[0].count, 3);
	ck_assert_int_eq(p->limits[0].capacity, 3);
	ck_assert_int_eq(p->limits[0].period_ms, 1000);
	ck_assert_int_eq(p->limits[1].count, 20);
	ck_assert_int_eq(p->limits[1].period_ms, 60000);

	p = find(c, "upload");
	ck_assert_int_eq(p->algo, POLICY_FUNNEL);
	ck_assert_int_eq(p->nlimits, 1);
	ck_assert_int_eq(p->limits[0].capacity, 15);
	ck_assert_int_eq(p->limits[0].count, 30);
	ck_assert_int_eq(p->limits[0].period_ms, 60000);

	p = find(c, "comment");
	ck_assert_int_eq(p->algo, POLICY_SLIDING_WINDOW);
	ck_assert_int_eq(p->nlimits, 1);
	ck_assert_int_eq(p->limits[0].count, 5);
	ck_assert_int_eq(p->limits[0].period_ms, 60000);
	ck_assert_int_eq(p->on_store_error, POLICY_ON_ERROR_DENY);
	ck_assert_int_eq(config_on_error(c, p), POLICY_ON_ERROR_DENY);
	config_unref(c);
}
END_TEST

START_TEST(defaults)
{
	struct config *c = must_parse("policies:\n  a: 1/1s\n");
	ck_assert_str_eq(c->path, "t.yaml");
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0].address, "127.0.0.1:7379");
	ck_assert_str_eq(c->redis.address, "127.0.0.1:6379");
	ck_assert_ptr_null(c->redis.username);
	ck_assert_ptr_null(c->redis.password);
	ck_assert_int_eq(c->redis.database, 0);
	ck_assert_int_eq(c->redis.timeout_ms, 50);
	ck_assert_int_eq(c->redis.connections, 2);
	ck_assert_str_eq(c->prefix, "rl:");
	ck_assert_int_eq(c->on_store_error, POLICY_ON_ERROR_ALLOW);
	ck_assert_uint_eq(c->max_line, 4096);
	ck_assert_int_eq(c->log_level, LOG_LEVEL_INFO);
	ck_assert_uint_eq(c->npolicies, 1);
	config_unref(c);
}
END_TEST

START_TEST(every_key_set)
{
	struct config *c = must_parse(
		"listen:\n"
		"  - 0.0.0.0:7000\n"
		"  - '[::1]:7001'\n"
		"  - unix:/run/ratelimitd.sock\n"
		"redis:\n"
		"  address: unix:/run/redis/redis.sock\n"
		"  password: \"pw\"\n"
		"  database: '15'\n"
		"  timeout: 2s\n"
		"  connections: 64\n"
		"prefix: ''\n"
		"on_store_error: error\n"
		"max_line: 64\n"
		"log_level: debug\n"
		"metrics: {listen: \"[::1]:9464\"}\n"
		"policies:\n"
		"  b: {limits: 100000/1d, on_store_error: allow}\n"
		"  a: {algorithm: funnel, rate: 1000000000/366d, capacity: 1000000000}\n");
	ck_assert_uint_eq(c->nlisten, 3);
	ck_assert_str_eq(c->listen[0].address, "0.0.0.0:7000");
	ck_assert_str_eq(c->listen[1].address, "[::1]:7001");
	ck_assert_str_eq(c->listen[2].address, "unix:/run/ratelimitd.sock");
	ck_assert_str_eq(c->redis.address, "unix:/run/redis/redis.sock");
	ck_assert_ptr_null(c->redis.username);
	ck_assert_str_eq(c->redis.password, "pw");
	ck_assert_int_eq(c->redis.database, 15);
	ck_assert_int_eq(c->redis.timeout_ms, 2000);
	ck_assert_int_eq(c->redis.connections, 64);
	ck_assert_str_eq(c->prefix, "");
	ck_assert_int_eq(c->on_store_error, POLICY_ON_ERROR_ERROR);
	ck_assert_uint_eq(c->max_line, 64);
	ck_assert_int_eq(c->log_level, LOG_LEVEL_DEBUG);
	ck_assert_str_eq(c->metrics_listen, "[::1]:9464");
	ck_assert_str_eq(c->policies[0].name, "a");
	ck_assert_int_eq(c->policies[0].algo, POLICY_FUNNEL);
	ck_assert_int_eq(c->policies[0].limits[0].capacity, 1000000000);
	ck_assert_int_eq(config_on_error(c, &c->policies[0]), POLICY_ON_ERROR_ERROR);
	ck_assert_int_eq(c->policies[1].limits[0].count, 100000);
	ck_assert_int_eq(c->policies[1].limits[0].period_ms, 86400000);
	ck_assert_int_eq(config_on_error(c, &c->policies[1]), POLICY_ON_ERROR_ALLOW);
	config_unref(c);
}
END_TEST

START_TEST(limits_bounds)
{
	/* 8 distinct windows is the most; the upper bounds of each range are accepted. */
	struct config *c = must_parse("redis: {database: 2147483647, timeout: 60s}\n"
				      "max_line: 1048576\n"
				      "policies:\n"
				      "  p: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s]\n");
	ck_assert_int_eq(c->redis.database, 2147483647);
	ck_assert_int_eq(c->redis.timeout_ms, 60000);
	ck_assert_uint_eq(c->max_line, 1048576);
	ck_assert_int_eq(c->policies[0].nlimits, 8);
	ck_assert_int_eq(c->policies[0].limits[7].period_ms, 8000);
	config_unref(c);
}
END_TEST

/* Each bad config and the exact error it must give. */
static const struct {
	const char *yaml;
	const char *err;
} bad[] = {
	/* unknown top-level key */
	{"policies: {a: 1/1s}\nlisen: [127.0.0.1:1]\n",
	 "t.yaml:2:1: unknown key \"lisen\" (did you mean \"listen\"?)"},
	/* unknown redis key */
	{"policies: {a: 1/1s}\nredis:\n  adress: x:1\n",
	 "t.yaml:3:3: unknown key \"redis.adress\" (did you mean \"redis.address\"?)"},
	/* unknown key inside a policy */
	{"policies:\n  a: {limit: 1/1s}\n",
	 "t.yaml:2:14: policies.a.limit: a concurrency policy's limit is a number of leases; a "
	 "rate goes in limits"},
	{"policies:\n  a: {limitz: [1/1s]}\n",
	 "t.yaml:2:7: unknown key \"policies.a.limitz\" (did you mean \"policies.a.limits\"?)"},
	/* a delay: any rate's (not a concurrency policy's), with a max */
	{"policies:\n  a: {algorithm: concurrency, limit: 2, lease: 5s, delay: {max: 1s}}\n",
	 "t.yaml:2:52: policies.a.delay: a concurrency policy does not delay (a lease is held, "
	 "not spent: ACQUIRE again after its retry hint)"},
	{"policies:\n  a: {algorithm: funnel, capacity: 1, rate: 1/1s, delay: {}}\n",
	 "t.yaml:2:58: policies.a.delay: a delay needs max (the longest wait: 500ms)"},
	{"policies:\n  a: {algorithm: funnel, capacity: 1, rate: 1/1s, delay: {max: 61s}}\n",
	 "t.yaml:2:64: policies.a.delay.max: must be from 1ms to 60s"},
	/* concurrency: limit and lease, nothing of a rate's */
	{"policies:\n  a: {limits: [1/1s], limit: 3}\n",
	 "t.yaml:2:23: policies.a.limit: only a concurrency policy has a limit (algorithm: "
	 "concurrency)"},
	{"policies:\n  a: {algorithm: concurrency, limit: 3}\n",
	 "t.yaml:2:6: policies.a: a concurrency policy needs a lease (how long one is held at "
	 "most: 30s)"},
	{"policies:\n  a: {algorithm: concurrency, lease: 30s}\n",
	 "t.yaml:2:6: policies.a: a concurrency policy needs a limit"},
	{"policies:\n  a: {algorithm: concurrency, limit: 3, lease: 30s, limits: [1/1s]}\n",
	 "t.yaml:2:53: policies.a.limits: a concurrency policy takes limit and lease, not limits"},
	{"policies:\n  a: {algorithm: concurrency, limit: 100001, lease: 30s}\n",
	 "t.yaml:2:38: policies.a.limit: must be an integer from 1 to 100000"},
	{"policies:\n  a: {algorithm: concurrency, limit: 3, lease: 500ms}\n",
	 "t.yaml:2:48: policies.a.lease: must be from 1s to 86400s"},
	{"policies:\n  a: {algorithm: concurrency, limit: 3, lease: 1m, ban: {after: 1, within: "
	 "1m, for: 1m}}\n",
	 "t.yaml:2:52: policies.a.ban: a concurrency policy has no ban (a lease denied is not an "
	 "abuse to punish)"},
	/* "did you mean": the nearest key valid there, within 2 edits (a swap is one) */
	{"policies:\n  a:\n    limts: [1/1s]\n",
	 "t.yaml:3:5: unknown key \"policies.a.limts\" (did you mean \"policies.a.limits\"?)"},
	{"policies:\n  a: {algorihtm: funnel, capacity: 3, rate: 1/1s}\n",
	 "t.yaml:2:7: unknown key \"policies.a.algorihtm\" (did you mean \"policies.a.algorithm\"?)"},
	{"redis: {timout: 1s}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: unknown key \"redis.timout\" (did you mean \"redis.timeout\"?)"},
	/* nothing near: no guess (nor for a short key two edits away) */
	{"policies: {a: 1/1s}\nzzzzzz: 1\n", "t.yaml:2:1: unknown key \"zzzzzz\""},
	{"redis: {db: 1}\npolicies: {a: 1/1s}\n", "t.yaml:1:9: unknown key \"redis.db\""},
	/* duplicate keys */
	{"policies: {a: 1/1s}\nprefix: x\nprefix: y\n", "t.yaml:3:1: duplicate key \"prefix\""},
	{"policies: {a: 1/1s}\nredis: {timeout: 1s, timeout: 2s}\n",
	 "t.yaml:2:22: duplicate key \"redis.timeout\""},
	{"policies:\n  b: 1/1s\n  a: 2/1s\n  b: 3/1s\n", "t.yaml:4:3: duplicate policy \"b\""},
	/* bad durations */
	{"policies: {a: 1/1s}\nredis:\n  timeout: 5x\n",
	 "t.yaml:3:12: redis.timeout: unknown duration unit \"x\" (use ms, s, m, h or d)"},
	{"policies: {a: 1/1s}\nredis:\n  timeout: 61s\n",
	 "t.yaml:3:12: redis.timeout: must be from 1ms to 60s"},
	{"policies: {a: 1/1s}\nredis:\n  timeout: 0ms\n",
	 "t.yaml:3:12: redis.timeout: duration must be greater than zero"},
	/* bad rates */
	{"policies:\n  a: 5/\n",
	 "t.yaml:2:6: policies.a: a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s"},
	{"policies:\n  a: [1/1s, 0/1m]\n",
	 "t.yaml:2:13: policies.a: rate count must be greater than zero"},
	{"policies:\n  a: 5 per minute\n",
	 "t.yaml:2:6: policies.a: a rate is COUNT/DURATION, e.g. 5/60s"},
	{"policies:\n  a: {limits: [1/1s, [2/1s]]}\n",
	 "t.yaml:2:22: policies.a.limits: expected a rate such as 5/60s"},
	/* bad algorithm */
	{"policies:\n  a: {algorithm: token_bucket, limits: 1/1s}\n",
	 "t.yaml:2:18: policies.a.algorithm: must be sliding_window, sliding_window_counter, "
	 "fixed_window, funnel or concurrency"},
	{"policies:\n  a: {algorithm: fixed_window, limits: 1000000001/1h}\n",
	 "t.yaml:2:40: policies.a.limits: rate count must be an integer from 1 to 1000000000"},
	{"policies:\n  a: {algorithm: sliding_window_counter, capacity: 5, limits: 1/1s}\n",
	 "t.yaml:2:42: policies.a.capacity: only a funnel has a capacity (algorithm: funnel)"},
	{"policies:\n  a: {algorithm: fixed_window, rate: 1/1s}\n",
	 "t.yaml:2:32: policies.a.rate: only a funnel has a rate; a fixed_window takes limits"},
	{"policies:\n  a: {limits: [3/1s], ban: {after: 5, within: 1m}}\n",
	 "t.yaml:2:28: policies.a.ban: a ban needs after, within and for"},
	{"policies:\n  a: {limits: [3/1s], ban: 5}\n",
	 "t.yaml:2:28: policies.a.ban: expected a mapping {after, within, for}"},
	{"policies:\n  a: {limits: [3/1s], ban: {after: 1001, within: 1m, for: 1s}}\n",
	 "t.yaml:2:36: policies.a.ban.after: must be an integer from 1 to 1000"},
	/* an override's user may hold any bytes; its error line may not */
	{"policies:\n  a: {limits: 1/1s, overrides: {\"x\\ny*\": foo}}\n",
	 "t.yaml:2:42: policies.a.overrides.x?y*: a rate is COUNT/DURATION, e.g. 5/60s"},
	{"policies:\n  a: {limits: 1/1s, overrides: {x: 2/1s, y: blocked, x: unlimited}}\n",
	 "t.yaml:2:32: policies.a.overrides: \"x\" is given twice"},
	{"policies:\n  a: {limits: 1/1s, shadow: yes}\n",
	 "t.yaml:2:29: policies.a.shadow: must be true or false"},
	{"policies:\n  a: {algorithm: sliding_window_counter}\n",
	 "t.yaml:2:6: policies.a: a sliding_window_counter needs limits"},
	{"policies:\n  a: {algorithm: fixed_window, limits: [1/1s, 2/1000ms]}\n",
	 "t.yaml:2:47: policies.a: two limits of one policy have the same window"},

	/* bad policy names */
	{"policies:\n  a b: 1/1s\n",
	 "t.yaml:2:3: policy name must be 1 to 64 characters of A-Z a-z 0-9 _ . -"},
	{"policies:\n  \"\": 1/1s\n",
	 "t.yaml:2:3: policy name must be 1 to 64 characters of A-Z a-z 0-9 _ . -"},
	{"policies:\n  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: 1/1s\n",
	 "t.yaml:2:3: policy name must be 1 to 64 characters of A-Z a-z 0-9 _ . -"},
	/* funnel without rate / capacity, with limits; sliding_window with funnel keys */
	{"policies:\n  up:\n    algorithm: funnel\n    capacity: 5\n",
	 "t.yaml:3:5: policies.up: a funnel needs a rate"},
	{"policies:\n  up: {rate: 1/1s, algorithm: funnel}\n",
	 "t.yaml:2:7: policies.up: a funnel needs a capacity"},
	{"policies:\n  up: {algorithm: funnel, limits: [1/1s], capacity: 5, rate: 1/1s}\n",
	 "t.yaml:2:27: policies.up.limits: a funnel takes capacity and rate, not limits"},
	{"policies:\n  up: {algorithm: funnel, capacity: 0, rate: 1/1s}\n",
	 "t.yaml:2:37: policies.up.capacity: must be an integer from 1 to 1000000000"},
	{"policies:\n  a: {limits: 1/1s, capacity: 3}\n",
	 "t.yaml:2:21: policies.a.capacity: only a funnel has a capacity (algorithm: funnel)"},
	{"policies:\n  a: {rate: 1/1s}\n",
	 "t.yaml:2:7: policies.a.rate: only a funnel has a rate; a sliding_window takes limits"},
	{"policies:\n  a: {}\n", "t.yaml:2:6: policies.a: a sliding_window needs limits"},
	{"policies:\n  a: []\n", "t.yaml:2:6: policies.a: at least one rate is required"},
	{"policies:\n  a:\n", "t.yaml:2:5: policies.a: expected a rate such as 5/60s"},
	/* policy_validate, reported at the limit that broke it */
	{"policies:\n  a: [3/1s, 20/60s, 7/1m]\n",
	 "t.yaml:2:21: policies.a: two limits of one policy have the same window"},
	{"policies:\n  a: 100001/1h\n",
	 "t.yaml:2:6: policies.a: a sliding_window limit allows at most 100000 per window "
	 "(its log keeps one entry per unit); use sliding_window_counter, fixed_window or a funnel"},
	{"policies:\n  a: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s]\n",
	 "t.yaml:2:55: policies.a: too many limits (at most 8)"},
	/* on_store_error */
	{"policies:\n  a: {limits: 1/1s, on_store_error: maybe}\n",
	 "t.yaml:2:37: policies.a.on_store_error: must be allow, deny, error or local"},
	{"on_store_error: inherit\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:17: on_store_error: must be allow, deny, error or local"},
	/* prefix */
	{"prefix: \"rl:{x}\"\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: prefix: must not contain '{', '}', whitespace or control characters"},
	{"prefix: \"rl: x\"\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: prefix: must not contain '{', '}', whitespace or control characters"},
	{"prefix: \"a\\0b\"\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: prefix: must not contain a NUL byte"},
	{"prefix: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: prefix: longer than 128 bytes"},
	/* listen and redis addresses */
	{"listen: [localhost]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: expected host:port, [IPv6]:port or unix:/path"},
	{"listen:\n  - 127.0.0.1:7379\n  - 127.0.0.1:0\npolicies: {a: 1/1s}\n",
	 "t.yaml:3:5: listen: port must be an integer from 1 to 65535"},
	{"listen: [\"127.0.0.1:65536\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: port must be an integer from 1 to 65535"},
	{"listen: [\":7379\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: expected host:port, [IPv6]:port or unix:/path"},
	{"listen: [\"::1:7379\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: an IPv6 address goes in brackets: [::1]:port"},
	{"listen: [\"unix:run/x.sock\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: a unix socket path must be absolute: unix:/path"},
	{"listen: 127.0.0.1:7379\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: listen: expected a list of addresses"},
	{"listen: []\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:9: listen: at least one address is required"},
	/* addresses no two sockets can bind: the daemon could not start */
	{"listen:\n  - 127.0.0.1:7379\n  - {address: \"127.0.0.1:7379\", admin: true}\n"
	 "policies: {a: 1/1s}\n",
	 "t.yaml:3:6: listen: 127.0.0.1:7379 is given twice (line 2): one socket per address"},
	{"listen: [\"0.0.0.0:7379\", \"[::1]:7379\", \"10.1.2.3:7379\", \"unix:/r/a\", "
	 "\"unix:/r/a\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:40: listen: 10.1.2.3:7379 overlaps 0.0.0.0:7379 (line 1): both cannot be "
	 "bound\n"
	 "t.yaml:1:70: listen: unix:/r/a is given twice (line 1): one socket per address"},
	{"listen: [\"[::1]:7379\", \"[0:0::1]:7379\"]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:24: listen: [0:0::1]:7379 overlaps [::1]:7379 (line 1): both cannot be bound"},
	{"metrics: {listen: \"127.0.0.1:9100\"}\nlisten: [\"127.0.0.1:7379\", \"127.0.0.1:9100\"]\n"
	 "policies: {a: 1/1s}\n",
	 "t.yaml:1:11: metrics.listen: 127.0.0.1:9100 is taken by listen's 127.0.0.1:9100: give "
	 "the metrics endpoint a port of its own"},
	/* the default listen address (127.0.0.1:7379) counts too */
	{"metrics: {listen: \"[::ffff:127.0.0.1]:7379\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:11: metrics.listen: [::ffff:127.0.0.1]:7379 is taken by listen's "
	 "127.0.0.1:7379: give the metrics endpoint a port of its own"},
	{"redis: {address: \"unix:/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:18: redis.address: unix socket path too long (at most 107 bytes)"},
	{"redis: {address: \"host name:1\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:18: redis.address: invalid character in host name"},
	/* integers */
	{"redis: {database: -1}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:19: redis.database: must be an integer from 0 to 2147483647"},
	{"redis: {connections: 65}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:22: redis.connections: must be an integer from 1 to 64"},
	{"redis: {connections: 2x}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:22: redis.connections: must be an integer from 1 to 64"},
	{"max_line: 63\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:11: max_line: must be an integer from 64 to 1048576"},
	{"max_line: 0x100\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:11: max_line: must be an integer from 64 to 1048576"},
	{"max_line: 99999999999999999999999\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:11: max_line: must be an integer from 64 to 1048576"},
	{"log_level: verbose\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:12: log_level: must be debug, info, warn or error"},
	/* an enum key's names come from its table, with their glosses */
	{"listen: [{address: \"127.0.0.1:1\", protocol: memcache}]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:45: listen.protocol: must be line (the line protocol and RESP), http, grpc "
	 "(Envoy's rate limit service) or spoe (HAProxy's SPOE agent)"},
	{"envoy: {config: r, response_headers: []}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:38: envoy.response_headers: expected none, ratelimit or x-ratelimit"},
	/* metrics */
	{"metrics: 127.0.0.1:9464\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: metrics: expected a mapping"},
	{"metrics: {}\npolicies: {a: 1/1s}\n", "t.yaml:1:10: metrics: needs listen: host:port"},
	{"metrics: {listen: \"unix:/run/m.sock\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:19: metrics.listen: expected host:port, not a unix socket"},
	{"metrics: {listen: 127.0.0.1}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:19: metrics.listen: expected host:port, [IPv6]:port or unix:/path"},
	{"metrics:\n  listen: 127.0.0.1:9464\n  path: /m\npolicies: {a: 1/1s}\n",
	 "t.yaml:3:3: unknown key \"metrics.path\""},
	/* the dotted section path follows nesting and is put back after it */
	{"redis:\n  sentinel: {master: m}\n  timeout: 0ms\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:13: redis.sentinel: needs master and addresses\n"
	 "t.yaml:3:12: redis.timeout: duration must be greater than zero"},
	{"redis:\n  sentinel: {master: m, addresses: [\"unix:/s\"]}\nprefix: \"a b\"\n"
	 "policies: {a: 1/1s}\n",
	 "t.yaml:2:37: redis.sentinel.addresses: expected host:port, not a unix socket\n"
	 "t.yaml:3:9: prefix: must not contain '{', '}', whitespace or control characters"},
	{"listen:\n  - {admin: true}\n  - {address: \"127.0.0.1:1\", mode: \"0600\"}\n"
	 "  - {port: 1}\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:5: listen: an entry needs an address\n"
	 "t.yaml:3:30: listen.mode: only applies to unix:/path addresses\n"
	 "t.yaml:4:6: unknown key \"listen.port\""},
	{"policies:\n  a: {limits: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s]}\n"
	 "  b: {rate: 1/1s}\n  c: 1/0s\n",
	 "t.yaml:2:64: policies.a.limits: too many limits (at most 8)\n"
	 "t.yaml:3:7: policies.b.rate: only a funnel has a rate; a sliding_window takes limits\n"
	 "t.yaml:4:6: policies.c: duration must be greater than zero"},
	/* policies required and non-empty */
	{"policies: {}\n", "t.yaml:1:11: policies: at least one policy is required"},
	{"policies:\n", "t.yaml:1:10: policies: expected a mapping of policy names to limits"},
	{"prefix: x\n",
	 "t.yaml:1:1: policies: required, with at least one policy (or envoy: with rules)"},
	/* YAML syntax errors, at libyaml's position */
	{"policies:\n  a: [1/1s\n", "t.yaml:3:1: YAML syntax error: while parsing a flow sequence, "
				    "did not find expected ',' or ']'"},
	{"policies:\n  a: 1/1s\n b: 2/1s\n",
	 "t.yaml:3:2: YAML syntax error: while parsing a block mapping, did not find expected key"},
	{"policies: {a: 1/1s}\nprefix: \"x\n",
	 "t.yaml:3:1: YAML syntax error: while scanning a quoted scalar, found unexpected end of stream"},
	/* a tab indenting a line: libyaml's words alone do not name it */
	{"policies:\n\ta: 1/1s\n",
	 "t.yaml:2:1: YAML syntax error: while scanning for the next token, found character that "
	 "cannot start any token (a tab: YAML forbids tabs for indentation; indent with spaces)"},
	/* ... found after other characters (columns count characters, not bytes) */
	{"policies:\n  a: 1/1s # \xc3\xa9\n\t b: 2/1s\n",
	 "t.yaml:3:1: YAML syntax error: while scanning for the next token, found character that "
	 "cannot start any token (a tab: YAML forbids tabs for indentation; indent with spaces)"},
	/* no hint where the character is not a tab, nor where libyaml says tab */
	{"policies: {a: 1/1s}\nprefix: \"\xc3\xa9\"\t@\n",
	 "t.yaml:2:13: YAML syntax error: while scanning for the next token, found character that "
	 "cannot start any token"},
	/* bytes libyaml's reader refuses: a NUL and invalid UTF-8 */
	{"policies: {a: 1/1s}\nprefix: \x01\n",
	 "t.yaml:2:9: YAML syntax error: control characters are not allowed"},
	{"policies: {a: 1/1s}\nprefix: \xff\n",
	 "t.yaml:2:9: YAML syntax error: invalid leading UTF-8 octet"},
	/* root */
	{"", "t.yaml:1:1: the configuration is empty"},
	{"# nothing\n", "t.yaml:2:1: the configuration is empty"},
	{"- policies\n", "t.yaml:1:1: the top level must be a mapping of keys"},
	{"just a string\n", "t.yaml:1:1: the top level must be a mapping of keys"},
	{"policies: {a: 1/1s}\n---\npolicies: {b: 1/1s}\n",
	 "t.yaml:2:1: only one YAML document is allowed"},
	/* username without password */
	{"redis:\n  address: 10.0.0.1:6379\n  username: rl\npolicies: {a: 1/1s}\n",
	 "t.yaml:3:3: redis.username: requires redis.password"},
	{"redis: {password: \"\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:19: redis.password: must not be empty"},
	/* TLS on a listener: a certificate and key, client certificates with their CAs */
	{"listen: [{address: 127.0.0.1:1, tls: {cert_file: /c.pem}}]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:38: listen.tls: needs cert_file and key_file"},
	{"listen: [{address: 127.0.0.1:1, tls: {cert_file: /c, key_file: /k, client_certs: "
	 "required}}]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:68: listen.tls.client_certs: needs ca_file or ca_dir (the CAs that sign client "
	 "certificates)"},
	{"listen: [{address: 127.0.0.1:1, tls: {cert_file: /c, key_file: /k, ca_file: /ca}}]\n"
	 "policies: {a: 1/1s}\n",
	 "t.yaml:1:68: listen.tls.ca_file: only applies with client_certs: optional or required"},
	{"listen: [{address: 127.0.0.1:1, tls: {cert_file: /c, key_file: /k, client_certs: "
	 "maybe}}]\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:82: listen.tls.client_certs: must be none (no certificate asked), optional "
	 "(asked; one shown must verify) or required (a client without one is refused)"},
	/* TLS to Redis: a certificate and its key go together */
	{"redis:\n  tls: {cert_file: /c.pem}\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:9: redis.tls.cert_file: requires redis.tls.key_file"},
	{"redis:\n  tls: {key_file: /k.pem}\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:9: redis.tls.key_file: requires redis.tls.cert_file"},
	{"redis:\n  tls: yes\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:8: redis.tls: expected a mapping (tls: {} for the system's CAs)"},
	{"redis:\n  tls: {ca_file: \"\"}\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:18: redis.tls.ca_file: must not be empty"},
	{"redis: 127.0.0.1:6379\npolicies: {a: 1/1s}\n", "t.yaml:1:8: redis: expected a mapping"},
	/* anchors, aliases, complex keys */
	{"policies:\n  a: &r 1/1s\n  b: *r\n", "t.yaml:2:6: YAML anchors are not supported"},
	{"policies:\n  a: *r\n", "t.yaml:2:6: YAML aliases are not supported"},
	{"? [policies]\n: 1\n",
	 "t.yaml:1:3: a key must be a plain string\n"
	 "t.yaml:1:1: policies: required, with at least one policy (or envoy: with rules)"},
	{"policies:\n  [a]: 1/1s\n", "t.yaml:2:3: a policy name must be a plain string"},
	/* a duration without its unit, in a rate and alone */
	{"policies:\n  reply: 5/60\n",
	 "t.yaml:2:10: policies.reply: missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)"},
	{"redis:\n  timeout: 50\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:12: redis.timeout: missing unit: write 50s or 50ms (units: ms, s, m, h, d)"},
	/* fractions: the whole-unit spelling when there is one */
	{"policies:\n  reply: 5/1.5s\n",
	 "t.yaml:2:10: policies.reply: a duration is a whole number of a unit: write 5/1500ms"},
	{"policies:\n  reply: 5/1.5m\n",
	 "t.yaml:2:10: policies.reply: a duration is a whole number of a unit: write 5/90s"},
	{"redis:\n  timeout: 0.5s\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:12: redis.timeout: a duration is a whole number of a unit: write 500ms"},
	{"policies:\n  reply: 5/1.2345s\n",
	 "t.yaml:2:10: policies.reply: a duration is a whole number of a unit (ms, s, m, h, d), "
	 "without a fraction"},
	/* spaces, case and trailing junk */
	{"policies:\n  reply: 5 / 60s\n",
	 "t.yaml:2:10: policies.reply: no spaces in a rate: write 5/60s"},
	{"policies:\n  reply: 5/ 60s\n",
	 "t.yaml:2:10: policies.reply: no spaces in a rate: write 5/60s"},
	{"policies:\n  reply: 5/60 s\n",
	 "t.yaml:2:10: policies.reply: no space between a number and its unit: write 5/60s"},
	{"policies:\n  reply: 5/60S\n",
	 "t.yaml:2:10: policies.reply: units are lowercase: write 5/60s"},
	{"policies:\n  reply: 5/60sec\n",
	 "t.yaml:2:10: policies.reply: unknown duration unit \"sec\" (use ms, s, m, h or d)"},
	{"policies:\n  reply: 5/60s/2\n",
	 "t.yaml:2:10: policies.reply: unexpected \"/2\" after 60s"},
	/* a line indented too far continues the value above it */
	{"policies:\n  reply:\n    limits: 5/60s\n     on_store_error: deny\n",
	 "t.yaml:4:6: policies.reply.limits: this line continues the value on line 3 "
	 "(\"5/60s on_store_error\"); is it indented too far?"},
	{"policies:\n  reply: 5/60s\n   login: 3/1s\n",
	 "t.yaml:3:4: policies.reply: this line continues the value on line 2 (\"5/60s login\"); "
	 "is it indented too far?"},
	{"policies:\n  up:\n    algorithm: funnel\n    rate: 5/60s\n\n     capacity: 3\n",
	 "t.yaml:6:6: policies.up.rate: this line continues the value on line 4 "
	 "(\"5/60s capacity\"); is it indented too far?"},
	{"policies:\n  a:\n    - 5/60s\n     - 3/1s\n",
	 "t.yaml:4:6: policies.a: this line continues the value on line 3 (\"5/60s - 3/1s\"); "
	 "is it indented too far?"},
	/* a string may be a password: the value is not quoted */
	{"redis:\n  password: s3cret\n   database: 1\npolicies: {a: 1/1s}\n",
	 "t.yaml:3:4: this line continues the value on line 2; is it indented too far?"},
	{"redis:\n  pasword: s3cret\n   database: 1\npolicies: {a: 1/1s}\n",
	 "t.yaml:2:3: unknown key \"redis.pasword\" (did you mean \"redis.password\"?)\n"
	 "t.yaml:3:4: this line continues the value on line 2; is it indented too far?"},
	{"policies: {a: 5/60s\n  b: 1/1s}\n",
	 "t.yaml:2:3: policies.a: this line continues the value on line 1 (\"5/60s b\"); "
	 "is a ',' or a closing bracket missing before it?"},
	/* independent errors are all reported; those that follow from one are not */
	{"redis: {timeout: 50, connections: 0}\nprefix: \"a b\"\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:18: redis.timeout: missing unit: write 50s or 50ms (units: ms, s, m, h, d)\n"
	 "t.yaml:1:35: redis.connections: must be an integer from 1 to 64\n"
	 "t.yaml:2:9: prefix: must not contain '{', '}', whitespace or control characters"},
	{"listen: [localhost, \"127.0.0.1:0\", 127.0.0.1:1]\nbogus: {x: [1]}\npolicies: {a: 1/1s}\n",
	 "t.yaml:1:10: listen: expected host:port, [IPv6]:port or unix:/path\n"
	 "t.yaml:1:21: listen: port must be an integer from 1 to 65535\n"
	 "t.yaml:2:1: unknown key \"bogus\""},
	{"policies:\n  up: {algorithm: funnel, capacity: 5, rate: 5/60}\n  a b: {x: 1}\n"
	 "  b: [1/1s, 2/1x, 3/1s]\n  b: 1/1s\n",
	 "t.yaml:2:46: policies.up.rate: missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)\n"
	 "t.yaml:3:3: policy name must be 1 to 64 characters of A-Z a-z 0-9 _ . -\n"
	 "t.yaml:4:13: policies.b: unknown duration unit \"x\" (use ms, s, m, h or d)\n"
	 "t.yaml:5:3: duplicate policy \"b\""},
	{"policies:\n  a: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s, 1/10s]\n  b: 5/60\n",
	 "t.yaml:2:55: policies.a: too many limits (at most 8)\n"
	 "t.yaml:3:6: policies.b: missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)"},
	/* stores: names, their keys, and a policy's store (issue 46) */
	{"stores:\n  default: {address: \"127.0.0.1:6380\"}\n  Eu: {}\npolicies:\n  a: 1/1s\n",
	 "t.yaml:2:3: stores: \"default\" is the store redis: configures: name this one "
	 "otherwise\n"
	 "t.yaml:3:3: stores: a store's name is 1 to 32 characters of a-z 0-9 _ -"},
	{"stores:\n  eu: {adress: \"h:1\"}\n  eu: {}\npolicies:\n  a: 1/1s\n",
	 "t.yaml:2:8: unknown key \"stores.eu.adress\" (did you mean \"stores.eu.address\"?)\n"
	 "t.yaml:3:3: duplicate store \"eu\""},
	{"stores:\n  eu: {address: \"h:1\"}\npolicies:\n  a: {limits: [1/1s], store: us}\n"
	 "  b: {limits: [1/1s], store: eu}\n",
	 "t.yaml:4:30: policies.a.store: no store us in stores: (the default store is redis:'s; "
	 "leave store: out for it)"},
	{"stores:\n  eu: {address: \"h:1\"}\non_store_error: local\npolicies:\n"
	 "  a: {limits: [1/1s], store: eu}\n  b: {limits: [1/1s], store: eu, on_store_error: deny}\n"
	 "  c: {limits: [1/1s], store: eu, on_store_error: local}\n",
	 "t.yaml:5:30: policies.a.store: on_store_error: local is the default store's only (yet); "
	 "give this policy on_store_error: allow, deny or error\n"
	 "t.yaml:7:30: policies.c.store: on_store_error: local is the default store's only (yet); "
	 "give this policy on_store_error: allow, deny or error"},
	/* a remote default store: local would admit the limit again in every
	 * region cut off from it */
	{"redis: {address: \"h:1\", remote: true}\npolicies:\n"
	 "  a: {limits: [1/1s]}\n  b: {limits: [1/1s], on_store_error: local}\n",
	 "t.yaml:4:3: policies.b: on_store_error: local on a remote store would admit the limit "
	 "in every region cut off from it; use deny (or allow, error)"},
	{"redis: {remote: yes}\npolicies:\n  a: 1/1s\n",
	 "t.yaml:1:17: redis.remote: must be true or false"},
	{"policies:\n  a: {algorithm: fixed_window, limits: [1/1s], blocks: {max: automatic}}\n",
	 "t.yaml:2:62: policies.a.blocks.max: must be an integer from 1 to 1000000, or auto"},
	/* a YAML syntax error ends the search */
	{"policies:\n  a: 5/60\n  b: 1/1s\n c: 5/60\n",
	 "t.yaml:2:6: policies.a: missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)\n"
	 "t.yaml:4:2: YAML syntax error: while parsing a block mapping, did not find expected key"},
	{"policies:\n  a: 5/60\n  b: [1/1s\n  c: 5/60\n",
	 "t.yaml:2:6: policies.a: missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)\n"
	 "t.yaml:4:3: policies.b: this line continues the value on line 3 (\"1/1s c\"); "
	 "is a ',' or a closing bracket missing before it?"},
};

START_TEST(stores_values)
{
	struct config *c = must_parse("stores:\n"
				      "  eu: {address: \"10.0.0.1:6379\", timeout: 80ms}\n"
				      "  us-2: {cluster: [\"10.0.0.2:7000\"], wait_replicas: 1,\n"
				      "         wait_timeout: 10ms, tls: {}}\n"
				      "policies:\n"
				      "  a: 1/1s\n"
				      "  b: {limits: [1/1s], store: us-2,\n"
				      "      overrides: {vip: 5/1s}}\n");
	ck_assert_uint_eq(c->nstores, 2);
	ck_assert_str_eq(c->stores[0].name, "eu");
	ck_assert_str_eq(c->stores[0].redis.address, "10.0.0.1:6379");
	ck_assert_int_eq(c->stores[0].redis.timeout_ms, 80);
	ck_assert_int_eq(c->stores[0].redis.connections, c->redis.connections);
	ck_assert_int_eq(c->stores[1].redis.mode, CONFIG_REDIS_CLUSTER);
	ck_assert_int_eq(c->stores[1].redis.wait_replicas, 1);
	ck_assert_int_eq(c->stores[1].redis.tls.enabled, 1);
	ck_assert_str_eq(find(c, "a")->store, "");
	ck_assert_str_eq(find(c, "b")->store, "us-2");
	/* an override's policy decides in its policy's store */
	ck_assert_str_eq(find(c, "b")->overrides->v[0].policy->store, "us-2");
	ck_assert_ptr_eq(config_redis_of(c, find(c, "a")), &c->redis);
	ck_assert_ptr_eq(config_redis_of(c, find(c, "b")), &c->stores[1].redis);
	ck_assert_ptr_null(config_find_store(c, "default"));
	config_unref(c);
}
END_TEST

START_TEST(errors)
{
	struct config *c = parse(bad[_i].yaml);
	if (c)
		config_unref(c);
	ck_assert_msg(c == NULL, "accepted bad config #%d", _i);
	ck_assert_str_eq(err, bad[_i].err);
}
END_TEST

START_TEST(error_from_file)
{
	struct config *c = config_load(CONFIGS "unknown-redis-key.yaml", err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(err, CONFIGS "unknown-redis-key.yaml:4:3: unknown key \"redis.adress\" "
				      "(did you mean \"redis.address\"?)");
}
END_TEST

START_TEST(three_errors_from_file)
{
	struct config *c = config_load(CONFIGS "three-errors.yaml", err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(
		err,
		CONFIGS "three-errors.yaml:4:12: redis.timeout: missing unit: write 50s or 50ms "
			"(units: ms, s, m, h, d)\n" CONFIGS
			"three-errors.yaml:6:10: policies.reply: missing unit: write 5/60s or "
			"5/60ms (units: ms, s, m, h, d)\n" CONFIGS
			"three-errors.yaml:11:11: policies.upload.rate: no spaces in a rate: write "
			"30/60s");
}
END_TEST

/* 30 bad policies: the first 20 errors, then how many more there were. */
START_TEST(errors_capped)
{
	char yaml[2048], want[CONFIG_ERR_MAX];
	size_t n = (size_t)snprintf(yaml, sizeof(yaml), "policies:\n"), w = 0;
	for (int i = 1; i <= 30; i++) {
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "  p%d: %d/60\n", i, i);
		if (i <= CONFIG_ERRORS_SHOWN)
			w += (size_t)snprintf(
				want + w, sizeof(want) - w,
				"t.yaml:%d:%d: policies.p%d: missing unit: write %d/60s or "
				"%d/60ms (units: ms, s, m, h, d)\n",
				i + 1, i < 10 ? 7 : 8, i, i, i);
	}
	snprintf(want + w, sizeof(want) - w, "... and 10 more errors");
	ck_assert_ptr_null(parse(yaml));
	ck_assert_str_eq(err, want);

	/* 21: exactly one more */
	snprintf(yaml + n, sizeof(yaml) - n, "bogus: 1\n");
	ck_assert_ptr_null(parse(yaml));
	ck_assert_ptr_nonnull(strstr(err, "\n... and 11 more errors"));
}
END_TEST

/* Several lines cut to a short buffer: a NUL-terminated prefix of the whole. */
START_TEST(errors_small_buffer)
{
	const char *yaml = "policies:\n  a: 5/60\n  b: 5/60\n";
	char whole[CONFIG_ERR_MAX], small[100];
	ck_assert_ptr_null(config_parse("t.yaml", yaml, strlen(yaml), whole, sizeof(whole)));
	ck_assert_ptr_nonnull(strchr(whole, '\n'));
	ck_assert_uint_gt(strlen(whole), sizeof(small));
	memset(small, 'X', sizeof(small));
	ck_assert_ptr_null(config_parse("t.yaml", yaml, strlen(yaml), small, sizeof(small)));
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
	ck_assert(strncmp(small, whole, sizeof(small) - 1) == 0);
}
END_TEST

START_TEST(load_missing_file)
{
	char want[CONFIG_ERR_MAX];
	snprintf(want, sizeof(want), "%s: cannot read: %s", CONFIGS "no-such-file.yaml",
		 strerror(ENOENT));
	struct config *c = config_load(CONFIGS "no-such-file.yaml", err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(load_directory)
{
	struct config *c = config_load(CONFIGS, err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(err, ": cannot read: "));
}
END_TEST

START_TEST(find_policy)
{
	/* given out of order, looked up by binary search over the sorted array */
	struct config *c = must_parse("policies:\n"
				      "  zeta: 1/1s\n"
				      "  login: 2/1s\n"
				      "  a: 3/1s\n"
				      "  login.api: 4/1s\n"
				      "  LOGIN: 5/1s\n"
				      "  log: 6/1s\n");
	ck_assert_uint_eq(c->npolicies, 6);
	const char *names[] = {"zeta", "login", "a", "login.api", "LOGIN", "log"};
	for (int i = 0; i < 6; i++) {
		const struct policy *p = find(c, names[i]);
		ck_assert_msg(p != NULL, "%s not found", names[i]);
		ck_assert_str_eq(p->name, names[i]);
		ck_assert_int_eq(p->limits[0].count, i + 1);
	}
	for (size_t i = 1; i < c->npolicies; i++)
		ck_assert_int_lt(strcmp(c->policies[i - 1].name, c->policies[i].name), 0);
	ck_assert_ptr_null(find(c, "logi"));
	ck_assert_ptr_null(find(c, "login2"));
	ck_assert_ptr_null(find(c, "Login"));
	ck_assert_ptr_null(find(c, "b"));
	ck_assert_ptr_null(find(c, ""));
	/* the length counts, not a terminator: protocol tokens are not NUL-terminated */
	const struct policy *p = config_find_policy(c, "login admin", 5);
	ck_assert_ptr_nonnull(p);
	ck_assert_str_eq(p->name, "login");
	ck_assert_ptr_eq(config_find_policy(c, "login.api", 3), find(c, "log"));
	config_unref(c);
}
END_TEST

START_TEST(on_error_inherit)
{
	struct config *c = must_parse("on_store_error: deny\n"
				      "policies:\n"
				      "  a: 1/1s\n"
				      "  b: {limits: [1/1s], on_store_error: error}\n"
				      "  c: {limits: [1/1s], on_store_error: allow}\n");
	ck_assert_int_eq(c->on_store_error, POLICY_ON_ERROR_DENY);
	ck_assert_int_eq(find(c, "a")->on_store_error, POLICY_ON_ERROR_INHERIT);
	ck_assert_int_eq(config_on_error(c, find(c, "a")), POLICY_ON_ERROR_DENY);
	ck_assert_int_eq(config_on_error(c, find(c, "b")), POLICY_ON_ERROR_ERROR);
	ck_assert_int_eq(config_on_error(c, find(c, "c")), POLICY_ON_ERROR_ALLOW);
	config_unref(c);
}
END_TEST

START_TEST(shadow_inherit)
{
	struct config *c = must_parse("shadow: true\n"
				      "policies:\n"
				      "  a: 1/1s\n"
				      "  b: {limits: [1/1s], shadow: false}\n"
				      "  w: {algorithm: fixed_window, limits: 1000000000/1d}\n");
	ck_assert_int_eq(c->shadow, 1);
	ck_assert_int_eq(find(c, "a")->shadow, -1);
	ck_assert_int_eq(config_shadow(c, find(c, "a")), 1);
	ck_assert_int_eq(config_shadow(c, find(c, "b")), 0);
	ck_assert_int_eq(find(c, "w")->algo, POLICY_FIXED_WINDOW);
	ck_assert_int_eq(find(c, "w")->ban.after, 0);
	config_unref(c);
	c = must_parse(
		"policies:\n  l: {limits: [3/1s], ban: {for: 15m, after: 10, within: 1m}}\n");
	ck_assert_int_eq(find(c, "l")->ban.after, 10);
	ck_assert_int_eq(find(c, "l")->ban.within_ms, 60000);
	ck_assert_int_eq(find(c, "l")->ban.for_ms, 900000);
	ck_assert_int_eq(policy_nkeys(find(c, "l")), 2);
	char d[160];
	policy_describe(find(c, "l"), d, sizeof(d));
	ck_assert_str_eq(d, "sliding_window 3/1s ban after 10 within 1m for 15m");
	config_unref(c);
	c = must_parse("policies:\n  a: {limits: [1/1s], shadow: true}\n  b: 1/1s\n"
		       "  c: {algorithm: sliding_window_counter, limits: [10/1s, 100/1h]}\n");
	ck_assert_int_eq(c->shadow, 0);
	ck_assert_int_eq(config_shadow(c, find(c, "a")), 1);
	ck_assert_int_eq(config_shadow(c, find(c, "b")), 0);
	ck_assert_int_eq(find(c, "c")->algo, POLICY_SLIDING_COUNTER);
	ck_assert_int_eq(find(c, "c")->nlimits, 2);
	config_unref(c);
}
END_TEST

START_TEST(policy_forms)
{
	struct config *c =
		must_parse("policies:\n"
			   "  s: 10/1m\n"
			   "  l: [10/1m, 100/1h]\n"
			   "  m: {limits: 10/1m}\n"
			   "  w: {algorithm: sliding_window, limits: [10/1m, 100/1h]}\n"
			   "  f: {rate: \"30/60s\", capacity: '15', algorithm: funnel}\n");
	const struct policy *s = find(c, "s"), *l = find(c, "l"), *m = find(c, "m"),
			    *w = find(c, "w"), *f = find(c, "f");
	ck_assert(policy_equal(s, m));
	ck_assert(policy_equal(l, w));
	ck_assert(!policy_equal(s, l));
	char buf[128];
	policy_describe(l, buf, sizeof(buf));
	ck_assert_str_eq(buf, "sliding_window 10/1m 100/1h");
	policy_describe(f, buf, sizeof(buf));
	ck_assert_str_eq(buf, "funnel capacity 15 rate 30/1m");
	config_unref(c);
}
END_TEST

/* config_diff: a reload's report, from the reload column of the key tables. */
struct diffs {
	char text[2048];
	int n;
};

static void collect(const struct config_change *d, void *arg)
{
	static const char *const kinds[] = {
		[CONFIG_CHANGE_APPLIED] = "",	      [CONFIG_CHANGE_RESTART_PENDING] = "!",
		[CONFIG_CHANGE_POLICY_ADDED] = "+",   [CONFIG_CHANGE_POLICY_CHANGED] = "~",
		[CONFIG_CHANGE_POLICY_REMOVED] = "-",
	};
	struct diffs *D = arg;
	size_t len = strlen(D->text);
	snprintf(D->text + len, sizeof(D->text) - len, "%s%s%s=%s>%s", D->n ? ";" : "",
		 kinds[d->kind], d->name,
		 d->secret ? "?"
		 : d->old  ? d->old
			   : "",
		 d->secret ? "?"
		 : d->new  ? d->new
			   : "");
	D->n++;
}

START_TEST(restart_diff)
{
	struct config *a =
		must_parse("redis: {address: \"127.0.0.1:6379\"}\npolicies: {p: 1/1s}\n");
	struct config *b =
		must_parse("listen: [\"127.0.0.1:1\", {address: \"unix:/r.sock\", admin: true}]\n"
			   "metrics: {listen: \"127.0.0.1:2\"}\n"
			   "redis:\n  sentinel: {master: m, addresses: [\"h:1\", \"h:2\"]}\n"
			   "  password: pw\n  database: 3\n  timeout: 1s\n"
			   "max_clients: 5\npolicies: {q: 2/1s}\n");
	struct diffs D = {"", 0};
	/* every key with a value is printed, equal or not: a table entry
	 * without its printer would crash here */
	ck_assert_int_eq(config_diff(a, a, a, collect, &D), 0);
	ck_assert_int_eq(D.n, 0);
	ck_assert_int_eq(config_diff(a, a, b, collect, &D), 7);
	ck_assert_str_eq(D.text,
			 "!listen=[127.0.0.1:7379]>[127.0.0.1:1, unix:/r.sock (admin, mode "
			 "0660)];max_clients=10000>5;+q=>sliding_window 2/1s;-p=sliding_window "
			 "1/1s>;!redis.address=127.0.0.1:6379>(none);"
			 "!redis.password=?>?;!redis.database=0>3;redis.timeout=50ms>1s;"
			 "!redis.sentinel.master=(none)>m;"
			 "!redis.sentinel.addresses=(none)>[h:1, h:2];"
			 "!metrics.listen=(none)>127.0.0.1:2");
	config_unref(a);
	config_unref(b);
}
END_TEST

/* Keys a reload applies are compared with the previous file, restart-only
 * ones with what runs; a listen entry is compared key by key. */
START_TEST(reload_diff)
{
	struct config *run = must_parse("listen: [\"127.0.0.1:1\", {address: \"127.0.0.1:2\", "
					"protocol: http}]\npolicies: {p: 1/1s}\n");
	struct config *old = must_parse("listen: [\"127.0.0.1:1\", {address: \"127.0.0.1:2\", "
					"protocol: http}]\nlog_level: warn\npolicies: {p: 1/1s}\n");
	struct config *file = must_parse(
		"listen: [{address: \"127.0.0.1:1\", name: n}, {address: \"127.0.0.1:2\", "
		"protocol: http, deny_status: 403, trusted_proxies: [10.0.0.0/8]}]\n"
		"log_level: debug\nlocal_share: 0.5\non_store_error: local\nshadow: true\n"
		"prefix: \"\"\nthrottle: {enabled: true, namespace: t, max_burst: 7, max_period: "
		"2m}\nenvoy: {config: rules, algorithm: funnel, response_headers: ratelimit}\n"
		"policies: {p: {limits: 1/1s, ban: {after: 2, within: 1m, for: 1h}}}\n");
	struct diffs D = {"", 0};
	ck_assert_int_eq(config_diff(run, old, file, collect, &D), 3);
	ck_assert_str_eq(
		D.text, "prefix=\"rl:\">\"\";on_store_error=allow>local;local_share=1>0.5;"
			"log_level=warn>debug;shadow=false>true;~p=sliding_window 1/1s>"
			"sliding_window 1/1s ban after 2 within 1m for 1h;"
			"!listen[0].name=(none)>n;!listen[1].trusted_proxies=[127.0.0.0/8 ::1/128]>"
			"[10.0.0.0/8];!listen[1].deny_status=429>403;"
			"throttle.enabled=false>true;throttle.namespace=cl.throttle>t;"
			"throttle.max_burst=100000>7;throttle.max_period=86400s>120s;"
			"envoy.config=(none)>rules;envoy.algorithm=fixed_window>funnel;"
			"envoy.response_headers=none>ratelimit");
	config_unref(run);
	config_unref(old);
	config_unref(file);
}
END_TEST

/* Every key has a reload kind, and only sections and policies have none of their own. */
static void count_kind(const char *path, enum config_reload how, void *arg)
{
	int *n = arg;
	n[how]++;
	ck_assert_str_ne(config_reload_name(how), "?");
	if (how == CONFIG_RELOAD_PER_POLICY)
		ck_assert_msg(strncmp(path, "policies", 8) == 0, "%s", path);
	else
		ck_assert_msg(strncmp(path, "policies", 8) != 0, "%s", path);
}

/* redis.tls: on with the section, paths from the file's directory unless absolute. */
START_TEST(redis_tls_values)
{
	char err[CONFIG_ERR_MAX];
	const char *y = "redis:\n  tls: {ca_file: ca.pem, cert_file: /abs/c.pem, key_file: "
			"k/k.key, server_name: r.example}\npolicies: {a: 1/1s}\n";
	struct config *c = config_parse("/etc/rl/t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	ck_assert_int_eq(c->redis.tls.enabled, 1);
	ck_assert_str_eq(c->redis.tls.ca_file, "/etc/rl/ca.pem");
	ck_assert_str_eq(c->redis.tls.cert_file, "/abs/c.pem");
	ck_assert_str_eq(c->redis.tls.key_file, "/etc/rl/k/k.key");
	ck_assert_str_eq(c->redis.tls.server_name, "r.example");
	ck_assert_ptr_null(c->redis.tls.ca_dir);
	config_unref(c);
	/* a name without a directory: the path as written */
	y = "redis: {tls: {ca_dir: certs}}\npolicies: {a: 1/1s}\n";
	c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	ck_assert_str_eq(c->redis.tls.ca_dir, "certs");
	config_unref(c);
	y = "redis: {tls: {}}\npolicies: {a: 1/1s}\n";
	c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	ck_assert_int_eq(c->redis.tls.enabled, 1);
	ck_assert_ptr_null(c->redis.tls.ca_file);
	config_unref(c);
	y = "redis: {tls: {enabled: false, ca_file: x.pem}}\npolicies: {a: 1/1s}\n";
	c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	ck_assert_int_eq(c->redis.tls.enabled, 0);
	config_unref(c);
	y = "policies: {a: 1/1s}\n";
	c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	ck_assert_int_eq(c->redis.tls.enabled, 0);
	config_unref(c);
}
END_TEST

START_TEST(reload_kinds)
{
	int n[CONFIG_RELOAD_PER_POLICY + 1] = {0};
	config_key_reloads(count_kind, n);
	/* memory redis metrics throttle envoy decision_log tracing sentinel redis.tls
	 * listen[].tls metrics.tls stores.NAME.sentinel stores.NAME.tls */
	ck_assert_int_eq(n[CONFIG_RELOAD_SECTION], 13);
	ck_assert_int_gt(n[CONFIG_RELOAD_APPLIES], 10);
	ck_assert_int_gt(n[CONFIG_RELOAD_RESTART], 10);
}
END_TEST

/* Count limits are errors where the first entry too many is. */
START_TEST(count_limits)
{
	size_t cap = 16 * 65600 + 256, len;
	char *y = malloc(cap), err[CONFIG_ERR_MAX];
	ck_assert_ptr_nonnull(y);
	len = (size_t)snprintf(y, cap, "redis:\n  cluster:\n");
	for (int i = 0; i < CONFIG_CLUSTER_SEEDS_MAX + 2; i++)
		len += (size_t)snprintf(y + len, cap - len, "    - h:%d\n", i + 1);
	snprintf(y + len, cap - len, "policies: {a: 1/1s}\n");
	ck_assert_ptr_null(config_parse("t.yaml", y, strlen(y), err, sizeof(err)));
	ck_assert_str_eq(err, "t.yaml:259:7: redis.cluster: too many addresses (at most 256)");
	/* at the limit: fine */
	len = (size_t)snprintf(y, cap, "redis:\n  cluster:\n");
	for (int i = 0; i < CONFIG_CLUSTER_SEEDS_MAX; i++)
		len += (size_t)snprintf(y + len, cap - len, "    - h:%d\n", i + 1);
	snprintf(y + len, cap - len, "policies: {a: 1/1s}\n");
	struct config *c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(c->redis.cluster.n, CONFIG_CLUSTER_SEEDS_MAX);
	config_unref(c);

	len = (size_t)snprintf(y, cap, "policies:\n");
	for (int i = 0; i < CONFIG_POLICIES_MAX + 2; i++)
		len += (size_t)snprintf(y + len, cap - len, "  p%d: 1/1s\n", i);
	ck_assert_ptr_null(config_parse("t.yaml", y, strlen(y), err, sizeof(err)));
	ck_assert_str_eq(err, "t.yaml:65538:3: policies: too many policies (at most 65536)");
	len = (size_t)snprintf(y, cap, "policies:\n");
	for (int i = 0; i < CONFIG_POLICIES_MAX; i++)
		len += (size_t)snprintf(y + len, cap - len, "  p%d: 1/1s\n", i);
	c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(c->npolicies, CONFIG_POLICIES_MAX);
	config_unref(c);
	free(y);
}
END_TEST

START_TEST(refcount)
{
	struct config *c = must_parse("policies: {a: 1/1s}\n");
	config_ref(c);
	config_ref(c);
	ck_assert_int_eq(c->refs, 3);
	config_unref(c);
	config_unref(c);
	ck_assert_int_eq(c->refs, 1);
	/* still whole while a reference remains */
	ck_assert_ptr_nonnull(find(c, "a"));
	ck_assert_str_eq(c->prefix, "rl:");
	config_unref(c); /* frees; ASan's leak check catches a miss */
	config_unref(NULL);
}
END_TEST

START_TEST(small_error_buffer)
{
	char small[12];
	memset(small, 'X', sizeof(small));
	struct config *c = config_parse("t.yaml", "x: 1\n", 5, small, sizeof(small));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(small, "t.yaml:1:1:");
	ck_assert_ptr_null(config_parse("t.yaml", "x: 1\n", 5, NULL, 0));
}
END_TEST

START_TEST(not_nul_terminated)
{
	/* Only len bytes are parsed: the tail would be an unknown key. */
	const char *yaml = "policies: {a: 1/1s}\nbogus: 1\n";
	struct config *c = config_parse("t.yaml", yaml, 20, err, sizeof(err));
	ck_assert_msg(c != NULL, "rejected: %s", err);
	config_unref(c);
	c = config_parse("t.yaml", NULL, 0, err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(err, "t.yaml:1:1: the configuration is empty");
}
END_TEST

START_TEST(raw_nul_byte)
{
	static const char yaml[] = "policies: {a: 1/1s}\nprefix: a\0b\n";
	struct config *c = config_parse("t.yaml", yaml, sizeof(yaml) - 1, err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_str_eq(err, "t.yaml:2:10: YAML syntax error: control characters are not allowed");
}
END_TEST

/* Reads the example config into memory for the robustness tests. */
static char *read_example(size_t *len)
{
	FILE *f = fopen(CONFIGS "example.yaml", "rb");
	ck_assert_ptr_nonnull(f);
	char *buf = malloc(8192);
	ck_assert_ptr_nonnull(buf);
	*len = fread(buf, 1, 8192, f);
	fclose(f);
	ck_assert_uint_gt(*len, 0);
	ck_assert_uint_lt(*len, 8192);
	return buf;
}

/* Every outcome is either a config or a positioned error, never a crash. */
static void check_outcome(struct config *c)
{
	if (c) {
		ck_assert_int_eq(c->refs, 1);
		ck_assert_uint_ge(c->npolicies, 1);
		config_unref(c);
	} else {
		ck_assert_msg(strncmp(err, "t.yaml:", 7) == 0, "no position: %s", err);
	}
}

START_TEST(truncations)
{
	size_t len;
	char *buf = read_example(&len);
	int accepted = 0;
	for (size_t n = 0; n <= len; n++) {
		err[0] = '\0';
		struct config *c = config_parse("t.yaml", buf, n, err, sizeof(err));
		accepted += c != NULL;
		check_outcome(c);
	}
	/* the whole file and cuts inside the last comment at least */
	ck_assert_int_gt(accepted, 1);
	free(buf);
}
END_TEST

START_TEST(corruptions)
{
	static const char bytes[] = {'\0', '{', '}',  '[',  ']',  ':', '-', '&', '*',	 '!',	'|',
				     '>',  '"', '\'', '\n', '\t', ' ', '#', '%', '\x80', '\xff'};
	size_t len;
	char *buf = read_example(&len);
	for (size_t i = 0; i < len; i++) {
		char saved = buf[i];
		for (size_t b = 0; b < sizeof(bytes); b++) {
			buf[i] = bytes[b];
			err[0] = '\0';
			check_outcome(config_parse("t.yaml", buf, len, err, sizeof(err)));
		}
		buf[i] = saved;
	}
	free(buf);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("values");
	tcase_add_test(tc, example_config);
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, every_key_set);
	tcase_add_test(tc, limits_bounds);
	tcase_add_test(tc, policy_forms);
	tcase_add_test(tc, restart_diff);
	tcase_add_test(tc, reload_diff);
	tcase_add_test(tc, reload_kinds);
	tcase_add_test(tc, redis_tls_values);
	tcase_add_test(tc, count_limits);
	tcase_add_test(tc, on_error_inherit);
	tcase_add_test(tc, shadow_inherit);
	tcase_add_test(tc, stores_values);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_loop_test(tc, errors, 0, (int)(sizeof(bad) / sizeof(bad[0])));
	tcase_add_test(tc, error_from_file);
	tcase_add_test(tc, three_errors_from_file);
	tcase_add_test(tc, errors_capped);
	tcase_add_test(tc, errors_small_buffer);
	tcase_add_test(tc, load_missing_file);
	tcase_add_test(tc, load_directory);
	tcase_add_test(tc, small_error_buffer);
	tcase_add_test(tc, not_nul_terminated);
	tcase_add_test(tc, raw_nul_byte);
	suite_add_tcase(s, tc);

	tc = tcase_create("api");
	tcase_add_test(tc, find_policy);
	tcase_add_test(tc, refcount);
	suite_add_tcase(s, tc);

	tc = tcase_create("robustness");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, truncations);
	tcase_add_test(tc, corruptions);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(config_suite());
}
