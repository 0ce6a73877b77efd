/*
 * blocks.h - blocks for hot keys: units a daemon took from Redis in the
 * same script call as a decision (policy blocks: {max, ttl}), and answers
 * later requests of the same pair from, without Redis. Never over-admits:
 * every unit answered was counted in Redis before it was answered, within
 * the window it was counted in (the script's block_take says why that
 * holds for a funnel too). Pure: the clock is passed in.
 *
 * Sizing adapts per pair: no block until a pair is seen twice within a
 * second (HOT_US), then blocks double while they are used up and shrink to
 * what was used when they lapse; the script gives at most a quarter of
 * what the limits have left, so near a limit every answer is Redis's.
 * With max: auto (a remote store's default) a block is what the pair
 * takes at its measured rate in about a second (or four round trips),
 * never past its fixed window's end. Either way the next block is asked
 * while what is left still lasts two round trips, so steady traffic
 * under the limit does not wait for the store.
 *
 * On a graceful stop (blocks_close) the units held are given back to the
 * window they were counted in, where the script can (giveback.h).
 */
#ifndef RL_BLOCKS_H
#define RL_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

struct blocks;
struct policy;

/* What an answer from a block says: the figures of the grant, moved on
 * by what was answered from it since and the time passed. */
struct blocks_hit {
	int64_t limit, remaining, reset_ms;
};

/* What became of block units, for the metrics. */
struct blocks_counts {
	unsigned long long blocks;   /* blocks granted */
	unsigned long long granted;  /* their units */
	unsigned long long lapsed;   /* units whose time ran out unanswered */
	unsigned long long revoked;  /* dropped by a RESET, an override, a reload */
	unsigned long long returned; /* given back to Redis on a graceful stop */
};

/* Room for about `entries` pairs (rounded up); memory is bounded by it. */
struct blocks *blocks_new(size_t entries);
void blocks_free(struct blocks *b);

/* What blocks_take says to do with a request. */
enum blocks_route {
	BLOCKS_ANSWERED, /* answered from the pair's block: *hit; with *want > 0,
			  * ask for the next block beside it (blocks_ask_begin) */
	BLOCKS_ASK,	 /* ask Redis, and for *want units with it (blocks_put) */
	BLOCKS_FOLLOW,	 /* wait for the ask out (*asker's) and come again */
	BLOCKS_REDIS,	 /* ask Redis alone */
};

/*
 * An ALLOW of cost units for (p, user) at now_us, by `me` (a token the
 * caller knows its request by). BLOCKS_ASK makes me the pair's asker until
 * blocks_put or blocks_unask; *epoch is blocks_epoch now (a follower's
 * check that nothing moved while it waited).
 * BLOCKS_FOLLOW: the pair's block ran out and an ask is out, *asker's;
 * the request is taken again when it is answered (at most
 * BLOCKS_FOLLOWERS_MAX follow one ask). With may_ask 0 (a request that
 * may wait, or has a deadline of its own) only BLOCKS_ANSWERED or
 * BLOCKS_REDIS.
 */
#define BLOCKS_FOLLOWERS_MAX 4096
enum blocks_route blocks_take(struct blocks *b, const struct policy *p, const char *user,
			      size_t ulen, int64_t cost, uint64_t now_us, int may_ask, void *me,
			      struct blocks_hit *hit, int64_t *want, unsigned long *epoch,
			      void **asker);
/* A BLOCKS_FOLLOW not taken (a request whose deadline already runs goes
 * to the store instead): the ask has one follower less. */
void blocks_unfollow(struct blocks *b, const struct policy *p, const char *user, size_t ulen);
/* An ask of its own for the pair's next block, by me (a request made for
 * it, of no cost), after blocks_take answered and said *want: me is the
 * pair's asker, as BLOCKS_ASK makes a request (-1: an ask is out, or the
 * pair has no entry). */
int blocks_ask_begin(struct blocks *b, const struct policy *p, const char *user, size_t ulen,
		     void *me, uint64_t now_us);
/* Moves on every RESET, override and reload: a request that waited across
 * a move was decided under what may have changed. */
unsigned long blocks_epoch(const struct blocks *b);
/*
 * Redis answered me's ask of blocks_take (sent no earlier than sent_us):
 * units (0: none) valid for valid_ms from sent_us, counted in window (the
 * script's id of it; 0: not to be given back), and the request's own
 * figures. Ignored (counted revoked) when the pair's RESET or override,
 * or a reload, came in between: the units may be gone; and after
 * blocks_close.
 */
void blocks_put(struct blocks *b, const struct policy *p, const char *user, size_t ulen, void *me,
		uint64_t sent_us, int64_t units, int64_t valid_ms, int64_t window, int64_t limit,
		int64_t remaining, int64_t reset_ms);
/* me's ask failed, or was denied (retry_after_ms > 0: no ask is made
 * before then, as none could be granted; -1 or 0: none): another may go. */
void blocks_unask(struct blocks *b, const struct policy *p, const char *user, size_t ulen, void *me,
		  uint64_t sent_us, int64_t retry_after_ms);
/* An ask Redis denied: cost units from the pair's block if it still holds
 * them (1, *hit), as blocks_take would have answered without the ask. */
int blocks_spend(struct blocks *b, const struct policy *p, const char *user, size_t ulen,
		 int64_t cost, uint64_t now_us, struct blocks_hit *hit);
/* An ask sent at sent_us was answered at now_us: the store's round trip,
 * smoothed, sizes blocks (how early the next is asked; max: auto's size). */
void blocks_rtt_sample(struct blocks *b, uint64_t sent_us, uint64_t now_us);
uint64_t blocks_rtt_us(const struct blocks *b);
/* The ttl to ask p's funnel blocks with: the policy's, or for max: auto
 * at least three round trips (a block must outlive its way back). */
int64_t blocks_ttl_ms(const struct blocks *b, const struct policy *p);
/* RESET of (action, user) or an override of it, through any daemon. */
void blocks_reset_pair(struct blocks *b, const char *action, size_t alen, const char *user,
		       size_t ulen);
/* A reload, or the store may have lost its state: every block goes. */
void blocks_clear(struct blocks *b);
/* blocks_clear when the store's generation moved. */
void blocks_sync(struct blocks *b, unsigned long store_generation);
/*
 * A graceful stop: no block is answered from or asked for from now on
 * (blocks_take says BLOCKS_REDIS), and every block with units left at
 * now_us is taken out of the table first, then handed to fn with the
 * pair (action '\0' user), its units and the window they were counted
 * in, to be given back; a block that cannot be (window 0: a funnel's,
 * several limits') is counted lapsed here. Returns how many were handed.
 */
typedef void blocks_close_fn(void *arg, const char *action, size_t alen, const char *user,
			     size_t ulen, int64_t units, int64_t window);
size_t blocks_close(struct blocks *b, uint64_t now_us, blocks_close_fn *fn, void *arg);
/* Of units handed on by blocks_close, Redis took `returned` back: counted
 * returned, the rest lapsed (their window had ended, or no answer). */
void blocks_returned(struct blocks *b, int64_t units, int64_t returned);
const struct blocks_counts *blocks_counts(const struct blocks *b);
/* Units held now, valid or not yet found lapsed (for tests and metrics). */
long long blocks_units(const struct blocks *b);

#endif
