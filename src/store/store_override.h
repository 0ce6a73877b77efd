/*
 * store_override.h - the run-time overrides' hash as store operations
 * (override_live.c mirrors it): read it all, read one field, set or clear
 * one, answered with a typed result. A backend that keeps them itself says
 * so in its store_ops (the memory store: they live in the caller's mirror
 * alone); the others keep the Redis hash <prefix>overrides, field
 * "<action>\n<user>", value "<until_ms> <spec>" (until in Redis's clock, 0
 * for never), through their call: HGETALL, or the decision script's
 * override modes (oload, oget, oput), which answer Redis's now first.
 */
#ifndef RL_STORE_OVERRIDE_H
#define RL_STORE_OVERRIDE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum store_override_op {
	STORE_OVERRIDE_LOAD,  /* every field, as they are (a plain read) */
	STORE_OVERRIDE_PRUNE, /* every field in force, the expired ones dropped */
	STORE_OVERRIDE_GET,   /* one field */
	STORE_OVERRIDE_PUT,   /* set (spec) or clear (spec NULL) one field, and tell every daemon */
};

/* Everything is copied during store_override; nothing needs to outlive the call. */
struct store_override_request {
	enum store_override_op op;
	const char *hash; /* the hash's key */
	size_t hash_len;
	const char *field; /* GET, PUT */
	size_t field_len;
	const char *spec; /* PUT: the value's spec; NULL clears */
	size_t spec_len;
	int64_t ttl_ms; /* PUT: 0 for none */
	/* PUT: the notice published on channel, notice then the field */
	const char *channel, *notice;
	size_t channel_len, notice_len;
	int64_t timeout_ms;
};

enum store_override_status {
	STORE_OVERRIDE_OK,	/* answered: fields */
	STORE_OVERRIDE_KEPT,	/* the store keeps none: the caller's own are all there are */
	STORE_OVERRIDE_ODD,	/* an answer not of the expected shape: nothing in it */
	STORE_OVERRIDE_REFUSED, /* an error answer: why */
	STORE_OVERRIDE_DOWN,	/* no answer: why */
};

/* A field and its value (NULL: the field is gone), valid during the callback. */
struct store_override_field {
	const char *field, *value;
	size_t field_len, value_len;
};

struct store_override_result {
	enum store_override_status status;
	const char *why; /* REFUSED, DOWN; valid during the callback */
	/* the store's clock (ms, the values' until) when it answered; 0 when
	 * not told (a plain read; a store on this daemon's clock) */
	int64_t now_ms;
	/* OK: LOAD's and PRUNE's fields; GET's and PUT's one (none when its
	 * answer named none) */
	size_t n;
	const struct store_override_field *fields;
};

/* Runs req on s; done is called exactly once, possibly from inside. */
void store_override(struct store *s, const struct store_override_request *req,
		    store_override_fn *done, void *arg);

#endif
