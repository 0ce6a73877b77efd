/*
 * lease_table.h - the memory store's concurrency leases: each key's set of
 * leases (lease.h), found through a keyed hash, dropped once its last lease
 * has expired, as Redis drops the key the script keeps them in.
 */
#ifndef RL_LEASE_TABLE_H
#define RL_LEASE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "lease.h"

struct lease_table;

/* NULL when out of memory. */
struct lease_table *lease_table_new(void);
void lease_table_free(struct lease_table *t);
/* Does op on the leases of key at now_us (lease_apply's). 0 with *out, or
 * -1 when memory runs out. */
int lease_table_apply(struct lease_table *t, const char *key, size_t klen, enum lease_op op,
		      const char *member, int64_t cost, int64_t limit, int64_t lease_ms,
		      int64_t now_us, struct lease_result *out);

#endif
