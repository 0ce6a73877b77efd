/*
 * fuzz_envoy.c - libFuzzer harness for envoyproxy/ratelimit's rule files
 * (envoy_rules_parse and envoy_lookup in src/config/envoy_rules.c), which a
 * SIGHUP reads from whatever the operator's directory holds.
 *
 * Input: a rules file up to the first NUL byte; after it, a descriptor to
 * look up, one entry per line, "key=value" (a line without '=' is a key with
 * an empty value).
 * On failure the error text has the loaders' shape (fuzz_errors.h), and a
 * tiny buffer gets a NUL-terminated prefix of it. On success: one domain,
 * found by its name; every rule that counts is a policy with a valid
 * unique name, sorted, that validates and is found by name; the lookup
 * (entries in exact-size copies, so ASan sees any overread) is stable and
 * lands on a limit whose policy is the one its name finds exactly when it
 * counts; and envoy_glob agrees with a reference matcher on the entries.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config_yaml.h"
#include "envoy_rules.h"
#include "fuzz_errors.h"
#include "fuzz_log.h"
#include "policy.h"

const char *const fuzz_name = "fuzz_envoy";

#define NAME "fuzz.yaml"
#define ENTRIES_MAX (ENVOY_MAX_DEPTH + 2)
#define GLOB_MAX 64 /* longest pattern or text given to the reference matcher */

/* The reference: '*' matches any run of bytes, by dynamic programming over
 * suffixes (m[i][j]: pat[i..] matches s[j..]). */
static int ref_glob(const char *pat, size_t plen, const char *s, size_t slen)
{
	static unsigned char m[GLOB_MAX + 1][GLOB_MAX + 1];
	for (size_t i = plen + 1; i-- > 0;)
		for (size_t j = slen + 1; j-- > 0;) {
			if (i == plen)
				m[i][j] = j == slen;
			else if (pat[i] == '*')
				m[i][j] = m[i + 1][j] || (j < slen && m[i][j + 1]);
			else
				m[i][j] = j < slen && pat[i] == s[j] && m[i + 1][j + 1];
		}
	return m[0][0];
}

static void check_glob(const char *pat, size_t plen, const char *s, size_t slen)
{
	if (plen > GLOB_MAX || slen > GLOB_MAX)
		return;
	check(envoy_glob(pat, plen, s, slen) == ref_glob(pat, plen, s, slen),
	      "envoy_glob agrees with the reference");
}

static int counts(const struct envoy_limit *l)
{
	return !l->unlimited && l->requests_per_unit > 0;
}

/* envoy_rules_each (ratelimitctl policies): each counting rule once, in
 * its domain, with a path in bounds, its policy the one its name finds. */
struct each_seen {
	const struct envoy_rules *r;
	size_t n;
};

static void each_rule(void *arg, const char *domain, const char *path, size_t path_len,
		      const struct envoy_limit *l)
{
	struct each_seen *e = arg;
	e->n++;
	check(domain == e->r->domains[0].name, "each: the rule's domain");
	check(path_len >= 1 && path_len < 1024 && path[path_len] == '\0', "each: the path");
	check(counts(l), "each: only rules that count");
	check(envoy_find_policy(e->r, l->policy.name, l->policy.name_len) == &l->policy,
	      "each: the rule's policy is found by its name");
	check(envoy_unit_name(l->unit)[0] != '\0', "each: a unit name");
}

static void check_rules(const struct envoy_rules *r)
{
	struct each_seen seen = {r, 0};
	envoy_rules_each(r, each_rule, &seen);
	check(seen.n == r->nnames, "each: every rule that counts");
	check(r->ndomains == 1 && r->domains[0].name && r->domains[0].name[0], "one domain, named");
	const struct envoy_domain *d = &r->domains[0];
	check(envoy_domain_find(r, d->name, strlen(d->name)) == d, "the domain is found by name");
	check(envoy_domain_find(r, "", 0) == NULL, "no domain has an empty name");
	check(r->nnames <= r->nlimits, "no more policies than limits");
	for (size_t i = 0; i < r->nnames; i++) {
		const struct policy *p = r->by_name[i];
		const char *why = NULL;
		check(p->name_len >= 1 && p->name_len <= POLICY_NAME_MAX, "policy name length");
		check(p->name[p->name_len] == '\0', "policy name NUL-terminated");
		check(policy_name_valid(p->name, p->name_len), "policy name valid");
		check(policy_validate(p, &why) == 0, "policy validates");
		check(p->nlimits == 1 && p->limits[0].count >= 1, "one limit that counts");
		check(envoy_find_policy(r, p->name, p->name_len) == p, "found by its name");
		if (i > 0)
			check(strcmp(r->by_name[i - 1]->name, p->name) < 0, "sorted, unique");
	}
}

/* The descriptor after the NUL: entries into exact-size heap copies. */
static size_t read_entries(const char *p, size_t n, struct envoy_entry *e, char **bufs)
{
	size_t k = 0;
	while (n > 0 && k < ENTRIES_MAX) {
		const char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;
		const char *eq = memchr(p, '=', len);
		size_t kl = eq ? (size_t)(eq - p) : len;
		size_t vl = eq ? len - kl - 1 : 0;
		/* key and value in buffers of their own exact sizes */
		bufs[2 * k] = malloc(kl ? kl : 1);
		bufs[2 * k + 1] = malloc(vl ? vl : 1);
		check(bufs[2 * k] && bufs[2 * k + 1], "out of memory");
		memcpy(bufs[2 * k], p, kl);
		if (vl)
			memcpy(bufs[2 * k + 1], eq + 1, vl);
		e[k] = (struct envoy_entry){bufs[2 * k], kl, bufs[2 * k + 1], vl};
		k++;
		if (!nl)
			break;
		n -= len + 1;
		p = nl + 1;
	}
	return k;
}

static void check_lookup(const struct envoy_rules *r, const char *p, size_t n)
{
	struct envoy_entry e[ENTRIES_MAX];
	char *bufs[2 * ENTRIES_MAX];
	size_t k = read_entries(p, n, e, bufs);
	const struct envoy_domain *d = &r->domains[0];
	for (size_t len = 1; len <= k; len++) {
		const struct envoy_limit *l = envoy_lookup(d, e, len);
		check(envoy_lookup(d, e, len) == l, "the lookup is stable");
		if (!l)
			continue;
		const struct policy *p = &l->policy;
		const struct policy *named = envoy_find_policy(r, p->name, p->name_len);
		check(counts(l) ? named == p : named == NULL,
		      "a limit's policy is found by name exactly when it counts");
		check(!l->name || strlen(l->name) <= ENVOY_NAME_MAX, "rate_limit.name length");
		check(l->unlimited || envoy_unit_seconds((int)l->unit) > 0, "a limit has a unit");
	}
	for (size_t i = 0; i < k; i++) {
		check_glob(e[i].key, e[i].key_len, e[i].value, e[i].value_len);
		check_glob(e[i].value, e[i].value_len, e[i].key, e[i].key_len);
	}
	for (size_t i = 0; i < 2 * k; i++)
		free(bufs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	const char *nul = memchr(text, '\0', size);
	size_t len = nul ? (size_t)(nul - text) : size;
	char err[YP_ERR_MAX];
	memset(err, 'X', sizeof(err));
	struct envoy_rules *r =
		envoy_rules_parse(NAME, text, len, POLICY_FIXED_WINDOW, err, sizeof(err));
	if (!r) {
		check(memchr(err, '\0', sizeof(err)) != NULL, "error is NUL-terminated");
		/* two rules whose names' 32-bit hashes collide: no position */
		if (strncmp(err, "two envoy rules have the policy name ", 37) != 0)
			check_errors(NAME, err, len, YP_ERRORS_SHOWN);
		size_t small = 1 + size % 24;
		char *buf = malloc(small);
		check(buf != NULL, "out of memory");
		check(envoy_rules_parse(NAME, text, len, POLICY_FIXED_WINDOW, buf, small) == NULL,
		      "same input, same verdict");
		size_t full = strlen(err), got = strnlen(buf, small);
		check(got < small, "short error is NUL-terminated");
		check(got == (full < small ? full : small - 1) && strncmp(buf, err, got) == 0,
		      "short error is a prefix of the full one");
		free(buf);
		return 0;
	}
	check_rules(r);
	if (nul)
		check_lookup(r, nul + 1, size - len - 1);
	envoy_rules_free(r);
	return 0;
}
