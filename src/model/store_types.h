/*
 * store_types.h - the store's words alone: what a decision asks (store_op),
 * how it ended (store_status) and why Redis refused it (store_error). For
 * those that only count or name them (stats.h); using a store is store.h's.
 */
#ifndef RL_STORE_TYPES_H
#define RL_STORE_TYPES_H

/* STORE_CHARGE: count the cost in every limit, never denied (CHARGE);
 * STORE_HOLD: an ALLOW that opens a hold; STORE_SETTLE, STORE_CANCEL: the
 * hold's actual cost, or none (store_request's hold fields); STORE_STATE:
 * a PEEK that tells every limit's own figures too (store_result.keys). */
enum store_op {
	STORE_ALLOW,
	STORE_PEEK,
	STORE_RESET,
	STORE_CHARGE,
	STORE_HOLD,
	STORE_SETTLE,
	STORE_CANCEL,
	STORE_STATE
};

enum store_status {
	STORE_OK,
	STORE_TIMEOUT,	   /* no answer within the deadline */
	STORE_UNAVAILABLE, /* no connection to the store */
	STORE_OVERLOAD,	   /* too many requests already waiting on the store */
	STORE_FAILED,	   /* the store answered with an error */
};

/*
 * Why the store could not decide, when it answered with an error. The Redis
 * backends classify Redis's error texts once, where replies are decoded
 * (store_reply.c); everyone downstream switches on this. Where a Cluster
 * node says to ask instead travels beside the result, between the two
 * backends that know of it (store_redis.h).
 */
enum store_error {
	STORE_ERROR_NONE,
	STORE_ERROR_NOSCRIPT,	/* the script is not in Redis's cache: send it (EVAL) */
	STORE_ERROR_NOPERM,	/* the ACL user lacks a command, key or channel */
	STORE_ERROR_AUTH,	/* NOAUTH, WRONGPASS: credentials missing or wrong */
	STORE_ERROR_READONLY,	/* a replica (a demoted master): find the master */
	STORE_ERROR_MASTERDOWN, /* a replica that lost its master */
	STORE_ERROR_MOVED,	/* Cluster: the slot lives on another node */
	STORE_ERROR_ASK,	/* Cluster: the key is being migrated */
	STORE_ERROR_TRYAGAIN,	/* Cluster: a multi-key operation during resharding */
	STORE_ERROR_CLUSTERDOWN,
	STORE_ERROR_WRONG_NODE, /* Cluster: a batched decision's keys were not on the node */
	STORE_ERROR_OOM,	/* maxmemory reached with a no-eviction policy */
	STORE_ERROR_BUSY,	/* another script is running too long */
	STORE_ERROR_LOADING,	/* Redis is loading its dataset */
	STORE_ERROR_KEY,	/* a decision failed inside the script (a key of the wrong type) */
	STORE_ERROR_SCRIPT,	/* the script failed as a whole */
	STORE_ERROR_REPLY,	/* a reply the script cannot produce */
	STORE_ERROR_REPLICAS,	/* fewer replicas took the writes than redis.wait_replicas */
	STORE_ERROR_OTHER,
	STORE_ERROR_N
};

#endif
