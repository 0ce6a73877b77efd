/*
 * store_give.h - a block's units given back to the window they were
 * counted in (blocks.h's blocks_close, on a graceful stop) as a store
 * operation: the decision script's "b" on the pair's key, through the
 * store's call (routed by the key: one Redis, Sentinel's master, a
 * Cluster's slot owner), answered with the units Redis took back. The
 * script takes them only while Redis's clock is in that window.
 */
#ifndef RL_STORE_GIVE_H
#define RL_STORE_GIVE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Everything is copied during store_give; nothing needs to outlive the call. */
struct store_give_request {
	const struct policy *policy; /* of one window limit (policy_nkeys 1) */
	const char *prefix, *user;
	size_t prefix_len, user_len;
	int64_t units;
	int64_t window; /* the script's id of the window ("k"'s answer) */
	int64_t timeout_ms;
};

struct store_give_result {
	/* NULL: answered, returned says how many units Redis took back;
	 * else why not (valid during the callback), and none were */
	const char *why;
	int64_t returned;
};

typedef void store_give_fn(void *arg, const struct store_give_result *res);

/* Runs req on s; done is called exactly once, possibly from inside. */
void store_give(struct store *s, const struct store_give_request *req, store_give_fn *done,
		void *arg);

#endif
