/*
 * leases.h - ACQUIRE, RELEASE and RENEW of concurrency leases (and RESET of
 * a concurrency policy), each a store_lease (store_lease.h) on the key of
 * the pair: the store keeps the leases (Redis, by the decision script's
 * 'lease' mode; the memory store, in its table). Here: the ids, their
 * nonces, the answers and the book of leases granted here. Also the
 * releases nobody waits for: those a closed connection owes.
 */
#ifndef RL_LEASES_H
#define RL_LEASES_H

#include <stddef.h>
#include <stdint.h>

#include "cmd_types.h"

struct config;
struct policy;

/* The nonces of ids and the book of leases granted here, made once. NULL
 * when out of memory. */
struct leases *leases_new(void);
void leases_free(struct leases *l);
/* A nonce no other of any daemon's leases or holds has, but by chance
 * (2^-64): ids' and holds'. */
uint64_t leases_nonce(struct leases *l);
/* Drops from the metrics' book the leases past their expiry (a scrape:
 * ratelimitd_leases_held is then current). */
void leases_sweep(struct leases *l);

/*
 * Executes pc on the concurrency policy p (ACQUIRE; RESET, which forgets
 * every lease of the user; STATE, which reads them) or on the lease pc->lease_id names (RELEASE,
 * RENEW; p: its action's policy, or NULL when the configuration has it no
 * more), answering slot as cmd_execute does.
 */
void leases_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		    const struct policy *p, struct cmd_slot *slot);

/* What the leases of a pair hold now (STATE): their limit, the units
 * free, and ms until the last one held expires. */
typedef void leases_peek_fn(struct cmd_slot *slot, const struct policy *p, int64_t limit,
			    int64_t remaining, int64_t last_ms);
/* Reads the leases (p's action, user) holds, taking nothing; peeked answers
 * slot, unless the store fails (then slot is answered as leases_execute's). */
void leases_peek(struct config *cfg, const struct cmd_env *env, const struct policy *p,
		 const char *user, size_t ulen, struct cmd_slot *slot, leases_peek_fn *peeked);

/* Releases the lease id names (a closed connection's); nobody waits for
 * the answer, which is only counted. */
void leases_release_detached(struct config *cfg, const struct cmd_env *env, const char *id,
			     size_t len);

#endif
