/*
 * admission.h - whether a Redis connection may take one more request: a
 * queue longer than Redis can work through before the requests' timeout is
 * refused at once (store overload) rather than let every request in it time
 * out. Pure: the clock is passed in, as limiter.c's is.
 */
#ifndef RL_ADMISSION_H
#define RL_ADMISSION_H

#include <stdint.h>

/* Requests sent on one connection and not yet called back, timed-out ones
 * included: bounds memory and Redis's backlog when Redis stalls. */
#define ADMISSION_QUEUED_MAX 8192
/* The bound never goes below this many (see admission.c). */
#define ADMISSION_MIN 16
/* The rate is averaged over windows this long... */
#define ADMISSION_RATE_WINDOW_US 10000u
/* ...and enforced this long after a request was late or refused. */
#define ADMISSION_BEHIND_US 1000000u

/* One connection's admission state; all zero is a fresh connection. */
struct admission {
	/* decisions a second Redis got done on the connection (0: not
	 * measured yet), averaged over windows of ADMISSION_RATE_WINDOW_US */
	double rate;
	uint64_t win_us;
	unsigned win_n;
	uint64_t behind_until_us; /* the bound is enforced until then; 0: it is not */
};

/* A fresh connection (perhaps to another Redis, after a failover): measured afresh. */
void admission_reset(struct admission *a);

/*
 * A reply to a call of n decisions sent at sent_us arrived at rx_us; the
 * previous reply on the connection arrived at prev_rx_us. Only a call sent
 * before that previous reply waited in Redis all the gap, so only then does
 * the gap measure what its decisions cost (an idle connection does not look
 * slow).
 */
void admission_measure(struct admission *a, uint64_t sent_us, uint64_t prev_rx_us, uint64_t rx_us,
		       unsigned n);

/* A request on the connection was not answered in time (at now_us). */
void admission_late(struct admission *a, uint64_t now_us);

/*
 * 1 if a connection with `queued` requests may take one more that has
 * timeout_ms to be decided, at now_us; 0: refuse it. A refusal keeps the
 * bound in force for ADMISSION_BEHIND_US more.
 */
int admission_admits(struct admission *a, unsigned queued, int64_t timeout_ms, uint64_t now_us);

#endif
