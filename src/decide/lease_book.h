/*
 * lease_book.h - the leases this daemon granted and counts as held, per
 * action: ratelimitd_leases_held{action} and
 * ratelimitd_leases_expired_total{action}. A lease leaves the book when it
 * is released or reset through this daemon, or, counted as expired, when
 * its time runs out or a RELEASE or RENEW finds it gone. Bounded; the
 * clock is the caller's (monotonic, us).
 */
#ifndef RL_LEASE_BOOK_H
#define RL_LEASE_BOOK_H

#include <stddef.h>
#include <stdint.h>

struct lease_book;
struct stats_action;

/* At most `max` leases booked at once. NULL when out of memory. */
struct lease_book *lease_book_new(size_t max);
void lease_book_free(struct lease_book *b);

/* A lease granted here: its nonce, its expiry, its action's counters
 * (NULL: not counted per action). 0, or -1 when the book is full or out of
 * memory (the lease is then not booked). */
int lease_book_granted(struct lease_book *b, uint64_t nonce, uint64_t pair, int64_t expiry_us,
		       struct stats_action *a);
/* Renewed here: its new expiry (unknown nonces are ignored). */
void lease_book_renewed(struct lease_book *b, uint64_t nonce, int64_t expiry_us);
/* Released here (unknown nonces are ignored). */
void lease_book_released(struct lease_book *b, uint64_t nonce);
/* A RELEASE or RENEW here found it gone: expired (or released elsewhere). */
void lease_book_gone(struct lease_book *b, uint64_t nonce);
/* A RESET of the pair (its action and user, hashed by the caller): every
 * lease of it goes, as released. */
void lease_book_reset(struct lease_book *b, uint64_t pair);
/* Drops the leases past their expiry at now_us, counting them as expired. */
void lease_book_sweep(struct lease_book *b, int64_t now_us);
size_t lease_book_size(const struct lease_book *b);

#endif
