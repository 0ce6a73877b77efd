/*
 * fuzz_config.c - libFuzzer harness for the YAML configuration loader
 * (config_parse in src/config/config.c).
 *
 * The input is the whole file. On failure the error must be 1 to
 * CONFIG_ERRORS_SHOWN printable lines "fuzz.yaml:LINE:COL: message" (LINE and
 * COL 1-based and within the input), perhaps followed by "... and N more
 * errors", and a short error buffer must hold a NUL-terminated prefix of it.
 * On success the snapshot must satisfy everything the rest of the daemon
 * assumes: at least one policy, sorted by unique valid names, each passing
 * policy_validate and found by config_find_policy; every setting within the
 * range the contract gives. Any violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_errors.h"
#include "fuzz_log.h"
#include "keys.h"
#include "log.h"
#include "policy.h"

#define NAME "fuzz.yaml"

const char *const fuzz_name = "fuzz_config";

static int on_error_set(enum policy_on_error e)
{
	return e == POLICY_ON_ERROR_ALLOW || e == POLICY_ON_ERROR_DENY ||
	       e == POLICY_ON_ERROR_ERROR;
}

static void check_policy(const struct config *c, size_t i)
{
	const struct policy *p = &c->policies[i];
	const char *why = NULL;
	check(p->name_len >= 1 && p->name_len <= POLICY_NAME_MAX, "policy name length");
	check(p->name[p->name_len] == '\0', "policy name NUL-terminated");
	check(policy_name_valid(p->name, p->name_len), "policy name valid");
	check(policy_validate(p, &why) == 0, "policy validates");
	check((unsigned)p->algo < POLICY_ALGO_N, "algorithm");
	if (policy_algo_shape(p->algo) == POLICY_SHAPE_WINDOWS)
		for (int k = 0; k < p->nlimits; k++)
			check(p->limits[k].capacity == p->limits[k].count,
			      "sliding window capacity is its count");
	check(p->on_store_error == POLICY_ON_ERROR_INHERIT || on_error_set(p->on_store_error),
	      "policy on_store_error");
	check(on_error_set(config_on_error(c, p)), "effective on_store_error is never inherit");
	check(config_find_policy(c, p->name, p->name_len) == p, "config_find_policy finds it");
	check(policy_equal(p, p), "a policy equals itself");
	if (i > 0) {
		const struct policy *q = &c->policies[i - 1];
		size_t n = q->name_len < p->name_len ? q->name_len : p->name_len;
		int d = memcmp(q->name, p->name, n);
		check(d < 0 || (d == 0 && q->name_len < p->name_len),
		      "policies sorted, names unique");
	}
	/* Describing into small exact-size buffers must stay inside them. */
	for (size_t cap = 1; cap <= 256; cap = cap * 4 + 1) {
		char *buf = malloc(cap);
		check(buf != NULL, "out of memory");
		size_t n = policy_describe(p, buf, cap);
		check(n < cap && buf[n] == '\0', "policy_describe stays in its buffer");
		free(buf);
	}
}

static void check_config(const struct config *c)
{
	check(c->refs == 1, "refs == 1");
	check(c->path && strcmp(c->path, NAME) == 0, "path is the name given");
	check(c->nlisten >= 1 && c->listen, "at least one listen address");
	for (size_t i = 0; i < c->nlisten; i++) {
		const struct config_listen *l = &c->listen[i];
		check(l->address && l->address[0], "listen address set");
		check(l->admin == 0 || l->admin == 1, "listen admin is a boolean");
		check(l->mode >= 0 && l->mode <= 0777, "listen mode: permission bits only");
		check(l->mode == CONFIG_DEFAULT_SOCKET_MODE || strncmp(l->address, "unix:", 5) == 0,
		      "listen mode only on unix sockets");
	}
	check(c->redis.address && c->redis.address[0], "redis.address set");
	check(!c->redis.username || c->redis.password, "redis.username needs redis.password");
	check(!c->redis.username || c->redis.username[0], "redis.username not empty");
	check(!c->redis.password || c->redis.password[0], "redis.password not empty");
	check(c->redis.database >= 0, "redis.database >= 0");
	check(c->redis.timeout_ms >= 1 && c->redis.timeout_ms <= 60000, "redis.timeout 1ms..60s");
	check(c->redis.connections >= 1 && c->redis.connections <= 64, "redis.connections 1..64");
	check(c->prefix != NULL && strlen(c->prefix) <= KEYS_PREFIX_MAX, "prefix 0..128 bytes");
	for (const char *q = c->prefix; *q; q++)
		check(*q != '{' && *q != '}' && (unsigned char)*q > ' ' && *q != 0x7f,
		      "prefix characters");
	check(on_error_set(c->on_store_error), "on_store_error");
	check(c->max_line >= 64 && c->max_line <= 1048576, "max_line 64..1048576");
	check(c->max_clients >= 1 && c->max_clients <= 1000000, "max_clients 1..1000000");
	check(c->idle_timeout_ms == 0 ||
		      (c->idle_timeout_ms >= 1000 && c->idle_timeout_ms <= POLICY_MAX_PERIOD_MS),
	      "idle_timeout unset or 1s..366d");
	check(c->log_level >= LOG_LEVEL_DEBUG && c->log_level <= LOG_LEVEL_ERROR, "log_level");
	/* an envoy-only file has none of its own: its rules are its policies
	 * (loaded by config_load, which reads files; config_parse does not) */
	check((c->npolicies >= 1 && c->policies) || c->envoy.config,
	      "at least one policy, or envoy rules");
	for (size_t i = 0; i < c->npolicies; i++)
		check_policy(c, i);
	check(config_find_policy(c, "", 0) == NULL, "empty name finds nothing");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[CONFIG_ERR_MAX];
	memset(err, 'X', sizeof(err));
	struct config *c = config_parse(NAME, (const char *)data, size, err, sizeof(err));
	if (!c) {
		check(memchr(err, '\0', sizeof(err)) != NULL, "error is NUL-terminated");
		check_errors(NAME, err, size, CONFIG_ERRORS_SHOWN);
		/* Same input, tiny exact-size buffer: a NUL-terminated prefix. */
		size_t small = 1 + size % 24;
		char *buf = malloc(small);
		check(buf != NULL, "out of memory");
		check(config_parse(NAME, (const char *)data, size, buf, small) == NULL,
		      "same input, same verdict");
		check(memchr(buf, '\0', small) != NULL, "short error is NUL-terminated");
		size_t full = strlen(err), got = strlen(buf);
		check(got == (full < small ? full : small - 1) && strncmp(buf, err, got) == 0,
		      "short error is a prefix of the full one");
		free(buf);
		/* And with no buffer at all. */
		check(config_parse(NAME, (const char *)data, size, NULL, 0) == NULL,
		      "no-buffer verdict");
		return 0;
	}
	check_config(c);
	config_ref(c);
	config_unref(c);
	check(c->refs == 1, "ref/unref balance");
	config_unref(c);
	return 0;
}
