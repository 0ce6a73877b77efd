/*
 * view.h - what the operators' HTTP views share (metrics.c's /metrics and
 * /top, console.c's page): every action of a configuration, heavy hitters
 * ranked across actions, an action's totals, and users written into label
 * values and JSON strings.
 */
#ifndef RL_VIEW_H
#define RL_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "top.h"

struct config;
struct evbuffer;
struct policy;
struct stats_action;

/* Every action of cfg: its policies, then its envoy rules' (they are
 * actions too); *n of them, NULL when out of memory. */
const struct policy **view_actions(const struct config *cfg, size_t *n);

/* One action's heavy hitter, ranked among every action's. */
struct view_hitter {
	const struct policy *p;
	struct top_row row;
};
/* Up to `per` users of each action of cfg, most denied first across them
 * all (ties by action, then user); *n of them, NULL when none or out of
 * memory. */
struct view_hitter *view_hitters(const struct config *cfg, size_t per, size_t *n);

/* A user as TOP shows it (shown.h), escaped again for a label value or a
 * JSON string: a backslash before \ and " (nothing else needs it). */
void view_put_user(struct evbuffer *b, const char *user, size_t len, size_t cut);

/* One action's heavy hitters as a JSON object: the action, its estimated
 * totals, and k users. */
void view_top_action_json(struct evbuffer *b, const struct policy *p, const struct top_row *rows,
			  size_t k, uint64_t requests, uint64_t denied);

/* An action's decisions so far, allowed and denied, wherever decided. */
void view_action_totals(const struct stats_action *a, unsigned long long *allowed,
			unsigned long long *denied);

#endif
