/*
 * override.h - a policy's exceptions for some users: other limits, no limit
 * (unlimited) or always denied (blocked), for an exact user or for every
 * user starting with a prefix ("partner-*"). The most specific one wins: an
 * exact user over any prefix, a longer prefix over a shorter one. Pure
 * data and lookup; config_policy.c reads them from the file.
 */
#ifndef RL_OVERRIDE_H
#define RL_OVERRIDE_H

#include <stddef.h>

#include "policy.h"

/* At most this many overrides per policy (a lookup is O(log n) for exact
 * users, plus one binary search per distinct prefix length). */
#define OVERRIDE_MAX 100000

enum override_kind {
	OVERRIDE_LIMITS,    /* decided by `policy`, the policy with other limits */
	OVERRIDE_UNLIMITED, /* always allowed, nothing stored */
	OVERRIDE_BLOCKED,   /* always denied, retry_after -1 */
};

struct override {
	char *pattern; /* the user, or the prefix without its '*' */
	size_t len;
	int prefix;
	enum override_kind kind;
	struct policy *policy; /* OVERRIDE_LIMITS: owned */
};

struct override_set {
	struct override *v; /* exact users sorted, then prefixes longest first */
	size_t n, cap, nexact;
	size_t *groups; /* where each prefix length starts in v, then n */
	size_t ngroups;
};

/*
 * A run-time override's spec for policy p (OVERRIDE, proto/protocol.md):
 * "unlimited", "blocked", or other limits in p's shape: "RATE[,RATE]..."
 * ("5/1m,100/1h") for a window algorithm, where calendar limits may take a
 * zone of their own, "timezone=NAME" among them ("600/day,timezone=Asia/Tokyo";
 * p's zone otherwise), and "CAPACITY,RATE" ("15,30/1m") for a funnel.
 * Pure: a zone's name is checked as written, not looked up in tzdata. 0
 * with *kind and, for OVERRIDE_LIMITS, *policy (p with those limits,
 * allocated: the caller frees it); -1 with a one-line err.
 */
int override_spec_parse(const struct policy *p, const char *spec, size_t len,
			enum override_kind *kind, struct policy **policy, char *err, size_t errlen);

/* Adds one; pattern is copied, policy (OVERRIDE_LIMITS) is taken over.
 * 0, or -1 out of memory (policy is then freed). */
int override_add(struct override_set *s, const char *pattern, size_t len, int prefix,
		 enum override_kind kind, struct policy *policy);
/* Sorts for lookup once all are added. 0; -1 out of memory; or 1 with
 * *dup one of two overrides of the same pattern. */
int override_finish(struct override_set *s, const struct override **dup);
/* The override for this user, or NULL. */
const struct override *override_find(const struct override_set *s, const char *user, size_t len);
int override_set_equal(const struct override_set *a, const struct override_set *b);
void override_set_free(struct override_set *s);

#endif
