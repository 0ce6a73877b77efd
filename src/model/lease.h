/*
 * lease.h - concurrency leases (algorithm: concurrency): at most `limit`
 * units held at once per (user, action), each lease returned by RELEASE or
 * dropped at its expiry. A lease's id names its key, so any daemon sharing
 * the store can release or renew it; the set of leases one key holds is
 * kept here in C (the memory store's; src/store/lua/ratelimit.lua's
 * 'lease' mode does the same inside Redis). Pure: the clock is passed in.
 */
#ifndef RL_LEASE_H
#define RL_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "policy.h"

/* A lease's own part: 16 hex digits of a nonce, ':', its cost. */
#define LEASE_NONCE_LEN 16
#define LEASE_MEMBER_MAX (LEASE_NONCE_LEN + 1 + 10 + 1)
/* "<action>:<user, base64url>:<nonce>:<cost>" and a NUL */
#define LEASE_ID_MAX (POLICY_NAME_MAX + 1 + (KEYS_USER_MAX + 2) / 3 * 4 + 1 + LEASE_MEMBER_MAX)

/* What an id says. */
struct lease_id {
	const char *action; /* into the id's bytes */
	size_t action_len;
	char user[KEYS_USER_MAX];
	size_t user_len;
	char member[LEASE_MEMBER_MAX]; /* "<nonce>:<cost>": the lease in its set */
	size_t member_len;
	int64_t cost;
	uint64_t nonce; /* the member's nonce, its 16 hex digits read */
};

/* Writes the id of a lease (out: LEASE_ID_MAX bytes; NUL-terminated);
 * returns its length. */
size_t lease_id_format(char *out, const char *action, size_t alen, const char *user, size_t ulen,
		       uint64_t nonce, int64_t cost);
/* Reads an id: 0, or -1 when it is not one lease_id_format writes. */
int lease_id_parse(const char *s, size_t len, struct lease_id *out);
/* The action an id names (its bytes before the first ':'): its length, or
 * 0 when there is none. */
size_t lease_id_action(const char *s, size_t len);

enum lease_op {
	LEASE_ACQUIRE, /* take cost units if they fit */
	LEASE_RELEASE, /* give a lease back */
	LEASE_RENEW,   /* push a held lease's expiry to now + lease */
	LEASE_PEEK,    /* would cost units fit now? nothing taken */
	LEASE_RESET,   /* forget every lease of the key */
};

struct lease_entry {
	char member[LEASE_MEMBER_MAX];
	int64_t cost;
	int64_t expire_us;
};

/* The leases one key holds. */
struct lease_set {
	struct lease_entry *v;
	size_t n, cap;
};

struct lease_result {
	int ok;		   /* acquired / released / renewed / would fit */
	int64_t limit;	   /* the policy's */
	int64_t remaining; /* units free after the op */
	/* ok: the lease's time left (ACQUIRE, RENEW; 0 otherwise); not ok: the
	 * time until the soonest lease expires (-1: never enough, cost >
	 * limit; 0 for RELEASE and RENEW of a lease not held); a PEEK of
	 * cost 0 (STATE): ok, and the time until the last lease expires */
	int64_t ms;
	int64_t expired; /* leases found expired, not released (dropped now) */
};

/*
 * Does op on s at now_us: leases past their expiry are dropped first
 * (counted in out->expired); member is the lease's (ACQUIRE adds it, for
 * lease_ms). 0, or -1 when memory runs out (s unchanged).
 */
int lease_apply(struct lease_set *s, enum lease_op op, const char *member, int64_t cost,
		int64_t limit, int64_t lease_ms, int64_t now_us, struct lease_result *out);
/* The latest expiry in s (0 when empty): when the whole set may go. */
int64_t lease_set_last_us(const struct lease_set *s);
void lease_set_free(struct lease_set *s);

#endif
