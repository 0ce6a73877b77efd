/*
 * envoy_rules.h - envoyproxy/ratelimit's configuration files, loaded as
 * they are: one domain per file, a tree of descriptors (key, optional
 * value, optional rate_limit, nested descriptors), and the lookup that maps
 * a request's descriptor to the rule where its last entry lands. Each rule
 * with a limit becomes a policy of its own (fixed window aligned to the
 * unit unless the file or the rule names another algorithm).
 */
#ifndef RL_ENVOY_RULES_H
#define RL_ENVOY_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

/* Numbered as RateLimitResponse.RateLimit.Unit. */
enum envoy_unit {
	ENVOY_UNIT_UNKNOWN = 0,
	ENVOY_UNIT_SECOND = 1,
	ENVOY_UNIT_MINUTE = 2,
	ENVOY_UNIT_HOUR = 3,
	ENVOY_UNIT_DAY = 4,
	ENVOY_UNIT_MONTH = 5,
	ENVOY_UNIT_YEAR = 6,
	ENVOY_UNIT_WEEK = 7,
};

/* Seconds of a unit (a month is 30 days, a year 365, as envoyproxy/ratelimit
 * counts them); 0 for UNKNOWN or a number that is no unit. */
int64_t envoy_unit_seconds(int unit);

/* A rule's rate_limit. */
struct envoy_limit {
	struct policy policy; /* what decides (unused when unlimited or zero) */
	char *name;	      /* rate_limit.name (at most ENVOY_NAME_MAX bytes), or NULL */
	uint32_t requests_per_unit;
	enum envoy_unit unit;
	int unlimited; /* never limited, never counted */
	int shadow;    /* the rule's shadow_mode */
	char **replaces;
	size_t nreplaces;
};

struct envoy_node;

/* A domain: its file's tree. */
struct envoy_domain {
	char *name;
	struct envoy_node *root; /* children only */
};

/* Every file's domains, sorted by name. */
struct envoy_rules {
	struct envoy_domain *domains;
	size_t ndomains;
	size_t nlimits; /* rules with a limit, all domains */
	/* the policies of those that count (neither unlimited nor zero),
	 * sorted by name (envoy_find_policy) */
	const struct policy **by_name;
	size_t nnames;
};

/* One entry of a request's descriptor. */
struct envoy_entry {
	const char *key;
	size_t key_len;
	const char *value;
	size_t value_len;
};

/* The longest rate_limit.name (it goes into every answer). */
#define ENVOY_NAME_MAX 64

/* The longest key plus value of an entry looked up (a request's whole
 * message is no longer). */
#define ENVOY_ENTRY_MAX (64 * 1024)

/* The most entries a descriptor may have (deeper trees are an error). */
#define ENVOY_MAX_DEPTH 16

/*
 * Loads path: one file, or every *.yaml and *.yml file of a directory (not
 * its subdirectories), in name order. algo: the algorithm of rules that
 * name none. NULL on failure with every error found in err, one
 * "FILE:LINE:COL: message" per line.
 */
/* Every rule's policy decides in the store `store` (a store of stores:;
 * "" for the default one): envoy.store. */
void envoy_rules_set_store(struct envoy_rules *r, const char *store);
struct envoy_rules *envoy_rules_load(const char *path, enum policy_algo algo, char *err,
				     size_t errlen);
/* Same on one file's text (tests, fuzzing); `name` stands for the file. */
struct envoy_rules *envoy_rules_parse(const char *name, const char *buf, size_t len,
				      enum policy_algo algo, char *err, size_t errlen);
void envoy_rules_free(struct envoy_rules *r);

const struct envoy_domain *envoy_domain_find(const struct envoy_rules *r, const char *name,
					     size_t len);
/*
 * The limit of a descriptor with entries e[0..n): walks the tree as
 * envoyproxy/ratelimit does (at each level the exact key_value, then the
 * wildcard values in file order, then the key alone) and returns the
 * limit of the node where the last entry lands, or NULL (no limit there).
 * The limit's shadow is that node's shadow_mode.
 */
const struct envoy_limit *envoy_lookup(const struct envoy_domain *d, const struct envoy_entry *e,
				       size_t n);

/* The policy of the rule named name (a line protocol's ALLOW, PEEK or
 * RESET on a rule's counters), or NULL. */
const struct policy *envoy_find_policy(const struct envoy_rules *r, const char *name, size_t len);

/* A rule that counts (a policy of its own), as envoy_rules_each gives it:
 * its domain, its descriptor's path from the domain down (the composite
 * keys "key_value" or "key" joined by '.', as its policy name shows them;
 * cut at 1023 bytes), its limit. */
typedef void envoy_rule_fn(void *arg, const char *domain, const char *path, size_t path_len,
			   const struct envoy_limit *limit);
/* Calls fn for each rule that counts, by domain and then in file order.
 * ratelimitctl policies lists them: a rule's policy name is what PEEK and
 * RESET take. */
void envoy_rules_each(const struct envoy_rules *r, envoy_rule_fn *fn, void *arg);
/* "second" ... "year", "week"; "unknown" for any other number. */
const char *envoy_unit_name(int unit);

/* '*' in pattern matches any run of bytes (also none); all else is literal. */
int envoy_glob(const char *pat, size_t plen, const char *s, size_t slen);

#endif
