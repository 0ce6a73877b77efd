/*
 * override_live.h - overrides set at run time through an admin listener
 * (OVERRIDE, UNOVERRIDE, OVERRIDES): one Redis hash is the source of truth,
 * shared by every daemon on the Redis and kept across restarts; each daemon
 * mirrors it in memory, so a decision looks an override up without asking
 * Redis (and pays nothing while there is none), and follows changes through
 * notices on the RESET channel. With the memory store (no Redis) they
 * live in this daemon only, until it stops.
 */
#ifndef RL_OVERRIDE_LIVE_H
#define RL_OVERRIDE_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "override.h"

struct config;
struct event_base;
struct policy;
struct store;
struct override_live;

/* The longest spec kept. */
#define OVERRIDE_LIVE_SPEC_MAX 256

/* A RESET-channel notice that starts with this is about an override. */
#define OVERRIDE_LIVE_NOTICE "!o"

/* NULL when out of memory. Loads the hash once Redis answers. */
struct override_live *override_live_new(struct event_base *base, struct store *store,
					struct config *cfg);
void override_live_free(struct override_live *l);
/* The snapshot in force (a reload): each override's limits are rebuilt on
 * its action's new policy; those whose action is gone wait, inert. */
void override_live_set_config(struct override_live *l, struct config *cfg);
/* The override of (p's action, user) now, or NULL; O(1) while there is none. */
const struct override *override_live_find(const struct override_live *l, const struct policy *p,
					  const char *user, size_t ulen);
/* A notice (OVERRIDE_LIVE_NOTICE, then the pair): reads that pair again. */
void override_live_notice(struct override_live *l, const char *msg, size_t len);

/* A run-time override's spec for p: override_spec_parse's, and a zone it
 * names (timezone=) one tzdata has. 0 or -1 as override_spec_parse. */
int override_live_spec(const struct policy *p, const char *spec, size_t len,
		       enum override_kind *kind, struct policy **policy, char *err, size_t errlen);

/* What an admin command's completion is told: NULL when done, else why not. */
typedef void override_live_done_fn(void *arg, const char *why);
/* Sets (spec non-NULL, as override_live_spec takes it, checked by the
 * caller; ttl_ms 0: no expiry) or clears (spec NULL) the override of
 * (action, user) in Redis, for every daemon. done is called once. */
void override_live_put(struct override_live *l, const char *action, size_t alen, const char *user,
		       size_t ulen, const char *spec, size_t spec_len, int64_t ttl_ms,
		       override_live_done_fn *done, void *arg);

/* Whether a run-time override may name user: what the line protocol can
 * carry (1 to 512 bytes, no blank, CR, LF or NUL), so OVERRIDES shows it
 * on one line whatever protocol set it. */
int override_live_user_valid(const char *user, size_t ulen);

/* The i-th override in force (by action, then user), for OVERRIDES. */
struct override_live_item {
	const char *action, *user, *spec;
	size_t alen, ulen, spec_len;
	int64_t ttl_ms; /* -1: no expiry */
};
/* 0 with *it (valid until the loop turns), or -1 past the last. */
int override_live_nth(const struct override_live *l, size_t i, struct override_live_item *it);
size_t override_live_count(const struct override_live *l);
/* 1 once the hash has been read (or there is none to read: the memory
 * store): until then an override set before this daemon started is not
 * applied. 0 with *why: the last read's error, or "" when none failed. */
int override_live_ready(const struct override_live *l, const char **why);

#endif
