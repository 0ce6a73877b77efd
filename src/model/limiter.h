/*
 * limiter.h - the algorithms of src/lua/ratelimit.lua in C (the memory
 * store's, and the tests' oracle; see limiter.c), with the clock passed in
 * and state in memory.
 */
#ifndef RL_LIMITER_H
#define RL_LIMITER_H

#include <stddef.h>
#include <stdint.h>

struct policy;

/* LIMITER_CHARGE: every limit counts the cost, allowed whatever it holds
 * (a limit may go past its count: later requests are denied until it is
 * earned back); the script's "g". */
enum limiter_op { LIMITER_ALLOW, LIMITER_PEEK, LIMITER_RESET, LIMITER_CHARGE };

struct limiter_result {
	int allowed;
	int64_t limit;
	int64_t remaining;
	int64_t retry_after_ms; /* 0 when allowed, -1 when it never can */
	int64_t reset_ms;
};

/* One group's own figures in a decision over several: whether it passed,
 * and the remaining and reset of its tightest limit (a ban in force: 0 and
 * its end). */
struct limiter_group {
	int ok;
	int64_t remaining, reset_ms;
};

/* The state of one limit: a funnel's TAT, a sliding window's log, or a
 * window key's value "<window>:<n>[:<n>[:<n>]]" (fixed window: n, next;
 * counter: n, prev, next; next is what a delay counted in the next window). */
/* An open hold (HOLD, SETTLE): its estimate, charged at t_h, open until
 * expiry (us, on now's clock). */
struct limiter_hold {
	uint64_t nonce;
	int64_t estimate, t_h, expiry;
};

struct limiter_state {
	double tat_us; /* funnel; 0 = empty */
	int64_t *log;  /* sliding window: one score (us) per unit, ascending */
	size_t nlog, caplog;
	int has_window; /* fixed window and counter: the key exists */
	int64_t window, n, prev, next;
	int64_t ban_until; /* a ban's key: banned until then (0: not banned) */
	/* a pair's holds key (the script's hash "<prefix>{...}:h") */
	struct limiter_hold *holds;
	size_t nholds, capholds;
	/* when Redis would drop the key (us, on now's clock): set by whatever
	 * writes it as the script sets its expiry; 0 once RESET */
	int64_t expire_us;
};

/*
 * Decides `op` for `cost` units at time now_us against the policy's limits,
 * whose states are st[0..policy_nkeys(p)-1] (the ban's last). Same
 * semantics as the Lua script.
 * Returns 0, or -1 on allocation failure.
 */
int limiter_decide(const struct policy *p, struct limiter_state *st, enum limiter_op op,
		   int64_t cost, int64_t now_us, struct limiter_result *out);
/*
 * LIMITER_ALLOW, but a request the window algorithms would deny now and
 * allow within wait_us is charged as running then (the script's "d"): it
 * is allowed with retry_after_ms the wait (ms, > 0) and remaining what its
 * window has left then. A funnel's delay is the daemon's (src/decide/cmd.c),
 * so a funnel is decided as by LIMITER_ALLOW.
 */
int limiter_decide_wait(const struct policy *p, struct limiter_state *st, int64_t cost,
			int64_t now_us, int64_t wait_us, struct limiter_result *out);
/*
 * One decision over several (user, action) pairs, as the script's
 * decide_all ("A" for LIMITER_ALLOW, "P" for LIMITER_PEEK): group g is
 * policies[g] on states[g][0..policy_nkeys(policies[g])-1]; a shadow group
 * (shadow[g] != 0) is decided and charged when it passes but never denies.
 * Sets *group to the deciding group and *shadow_group to the first shadow
 * group that would have denied (1-based, 0 for none), and, when groups is
 * not NULL, groups[g] to group g's own figures as the script returns them.
 * Returns 0, or -1 on allocation failure, a bad op or ngroups, or no limit
 * to answer with (which the script fails too).
 */
int limiter_decide_all(const struct policy *const *policies, const int *shadow,
		       struct limiter_state *const *states, int ngroups, enum limiter_op op,
		       int64_t cost, int64_t now_us, struct limiter_result *out, int *group,
		       int *shadow_group, struct limiter_group *groups);
/*
 * HOLD: decides as LIMITER_ALLOW for `estimate` units and, allowed, opens
 * a hold `nonce` in hs for hold_us (the script's "h"). Returns 0, or -1 on
 * allocation failure.
 */
int limiter_hold(const struct policy *p, struct limiter_state *st, struct limiter_state *hs,
		 int64_t estimate, uint64_t nonce, int64_t hold_us, int64_t now_us,
		 struct limiter_result *out);
/*
 * SETTLE (actual >= 0) or CANCEL (actual -1: nothing spent) of hold nonce
 * (the script's "s", "x"): the difference to its estimate is charged, or
 * refunded where its units still count (docs/algorithms.md, "Holds").
 * Returns 0 with out allowed, 1 when the hold is not open (settled,
 * cancelled, expired or never taken), -1 on allocation failure.
 */
int limiter_settle(const struct policy *p, struct limiter_state *st, struct limiter_state *hs,
		   uint64_t nonce, int64_t actual, int64_t now_us, struct limiter_result *out);
/* One key's own figures in a STATE (the script's state_out): the units
 * counted (a log's entries, a window's count, a counter's estimate, what
 * fills a funnel), remaining, reset and the window holding now (ms on
 * now's clock; 0 0 for a log or a funnel); a ban's: used 1 while in
 * force, reset_ms what it has left. */
struct limiter_key {
	int64_t used, remaining, reset_ms, start_ms, end_ms;
};
/*
 * STATE: decides as LIMITER_PEEK of one unit into out, changing nothing,
 * and tells keys[0..policy_nkeys(p)) their own figures (the limits', then
 * the ban's). Returns 0, or -1 as limiter_decide.
 */
int limiter_look(const struct policy *p, struct limiter_state *st, int64_t now_us,
		 struct limiter_result *out, struct limiter_key *keys);
void limiter_state_free(struct limiter_state *st);

#endif
