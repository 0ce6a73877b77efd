/*
 * store_lease.h - concurrency leases as a store operation: ACQUIRE, RELEASE,
 * RENEW, PEEK or RESET on one key's leases, answered with a typed result.
 * A backend that keeps them itself says so in its store_ops (the memory
 * store's table); the others run the decision script's 'lease' mode
 * through their call (routed by key: one Redis, Sentinel's master, a
 * Cluster's slot owner).
 */
#ifndef RL_STORE_LEASE_H
#define RL_STORE_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "lease.h"
#include "store.h"

/* Everything is copied during store_lease; nothing needs to outlive the call. */
struct store_lease_request {
	enum lease_op op;
	const char *key; /* the leases' key (keys_build's) */
	size_t key_len;
	const char *member; /* the lease's, NUL-terminated ("" for RESET) */
	int64_t cost, limit, lease_ms;
	int64_t timeout_ms;
};

struct store_lease_result {
	/* NULL: answered, lease says how; else why not (valid during the
	 * callback), and nothing is known of the lease */
	const char *why;
	/* with why: this daemon ran out of memory (a store in it) */
	int out_of_memory;
	/* decided in this daemon's memory (the metrics' source="memory") */
	int memory;
	struct lease_result lease;
};

/* Runs req on s; done is called exactly once, possibly from inside. */
void store_lease(struct store *s, const struct store_lease_request *req, store_lease_fn *done,
		 void *arg);

#endif
