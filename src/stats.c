/* stats.c - the process-wide counters and the names they are reported under. */
#include "stats.h"

#include <string.h>

struct stats stats;

static const char *const err_names[STATS_ERR_N] = {
	[STATS_ERR_SYNTAX] = "syntax",
	[STATS_ERR_UNKNOWN_COMMAND] = "unknown-command",
	[STATS_ERR_UNKNOWN_ACTION] = "unknown-action",
	[STATS_ERR_BAD_COST] = "bad-cost",
	[STATS_ERR_BAD_USER] = "bad-user",
	[STATS_ERR_LINE_TOO_LONG] = "line-too-long",
	[STATS_ERR_FORBIDDEN] = "forbidden",
	[STATS_ERR_TOO_MANY_CLIENTS] = "too-many-clients",
	[STATS_ERR_STORE_UNAVAILABLE] = "store-unavailable",
	[STATS_ERR_OTHER] = "other",
};

void stats_count_error(const char *code)
{
	int i;
	for (i = 0; i < STATS_ERR_OTHER; i++)
		if (strcmp(err_names[i], code) == 0)
			break;
	stats.errors[i]++;
}

const char *stats_err_name(enum stats_err e)
{
	return (unsigned)e < STATS_ERR_N ? err_names[e] : "other";
}

static const char *const verb_names[STATS_VERB_N] = {
	[PROTO_ALLOW] = "allow",
	[PROTO_PEEK] = "peek",
	[PROTO_RESET] = "reset",
	[PROTO_PING] = "ping",
	[PROTO_QUIT] = "quit",
};

static const char *const from_names[STATS_FROM_N] = {
	[STATS_FROM_STORE] = "redis",
	[STATS_FROM_CACHE] = "cache",
	[STATS_FROM_FALLBACK] = "fallback",
};

const char *stats_verb_name(enum proto_verb v)
{
	return (unsigned)v < STATS_VERB_N ? verb_names[v] : "other";
}

const char *stats_from_name(enum stats_from f)
{
	return (unsigned)f < STATS_FROM_N ? from_names[f] : "other";
}
