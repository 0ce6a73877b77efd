/*
 * local.h - on_store_error: local. While Redis cannot decide (down, hung,
 * refusing), decisions are made in this daemon's memory store with the same
 * policies, each limit cut to the configured share (local_share); the first
 * decision Redis makes again drops what was counted locally. Each switch is
 * logged, and /health tells while it lasts.
 */
#ifndef RL_LOCAL_H
#define RL_LOCAL_H

#include <stddef.h>

struct config;
struct event_base;
struct store_request;
struct store_result;
struct local;

/* NULL with err when out of memory. Bounded by cfg->memory.max_keys. */
struct local *local_new(struct event_base *base, const struct config *cfg, char *err,
			size_t errlen);
void local_free(struct local *l);

/* Decides req (ALLOW or PEEK; one pair or several) in memory, its limits
 * cut to share (0 < share <= 1; a limit of at least 1), because Redis could
 * not: why says what Redis did (for the log). Fills *res. */
void local_decide(struct local *l, const struct store_request *req, double share, const char *why,
		  struct store_result *res);

/* Redis decided again: if decisions were being made here, their counts are
 * dropped and the return is logged. */
void local_redis_back(struct local *l);

/* 1 from the first local decision until Redis decides again. */
int local_active(const struct local *l);

#endif
