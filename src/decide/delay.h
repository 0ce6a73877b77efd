/*
 * delay.h - requests answered later instead of denied (a policy's
 * `delay`, or WAIT): the store has already reserved each one's slot, and it is
 * answered ALLOWED when that slot comes, by one timer per request. At most
 * max_delayed wait in a daemon; SIGTERM answers them all at once.
 */
#ifndef RL_DELAY_H
#define RL_DELAY_H

#include <stdint.h>

struct event_base;
struct cmd_slot;
struct delays;

struct delays *delays_new(struct event_base *base);
/* Answers every request still waiting, then frees d. */
void delays_free(struct delays *d);

/* Whether one more may be delayed (below max, counting those the store is
 * deciding): 1 and counted (release with delays_hold or delays_unclaim), or 0. */
int delays_claim(struct delays *d, int64_t max);
/* A claimed request the store answered without a wait. */
void delays_unclaim(struct delays *d);
/* Completes slot (its result filled) wait_ms from now; claimed before. */
void delays_hold(struct delays *d, struct cmd_slot *slot, int64_t wait_ms);
/* Answers every waiting request now (SIGTERM: their slots are theirs),
 * and from then on any request delays_hold is given at once. */
void delays_flush(struct delays *d);
/* Requests waiting now. */
unsigned delays_waiting(const struct delays *d);

#endif
