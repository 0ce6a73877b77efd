/* admission.c - a Redis connection's admission bound, measured and applied (see admission.h). */
#include "admission.h"

#include <string.h>

/*
 * While a connection is behind (a request on it timed out, or this bound
 * refused one, within ADMISSION_BEHIND_US), it holds no more requests than
 * Redis decides within half of their timeout at the rate it was measured,
 * and never fewer than ADMISSION_MIN: two small batches, one in Redis and
 * one waiting behind it, which is what measuring the rate again needs. More
 * would not do: the measured rate is what the daemon gets done, its own
 * delays included, and a floor of two full batches (128) outlasted a 50 ms
 * timeout when a starved daemon (ASan, two busy cores) decided 800 a
 * second; 512 (as it was before) did once a decision cost Redis 50 us.
 */

void admission_reset(struct admission *a)
{
	memset(a, 0, sizeof(*a));
}

void admission_measure(struct admission *a, uint64_t sent_us, uint64_t prev_rx_us, uint64_t rx_us,
		       unsigned n)
{
	if (sent_us > prev_rx_us || rx_us < prev_rx_us)
		return;
	a->win_us += rx_us - prev_rx_us;
	a->win_n += n;
	if (a->win_us < ADMISSION_RATE_WINDOW_US)
		return;
	double sample = (double)a->win_n * 1e6 / (double)a->win_us;
	a->rate = a->rate > 0 ? (a->rate + sample) / 2 : sample;
	a->win_us = 0;
	a->win_n = 0;
}

void admission_late(struct admission *a, uint64_t now_us)
{
	a->behind_until_us = now_us + ADMISSION_BEHIND_US;
}

/*
 * A queue longer than Redis can work through in time would only make every
 * request in it time out (and closed-loop clients keep it full): throughput
 * would fall to almost nothing exactly when demand is highest. Refused at
 * once instead, the excess costs Redis nothing and those admitted are
 * decided in time. The measured rate also counts the daemon's own delays in
 * reading replies (a loop turn busy with thousands of clients), so it can be
 * low; the bound applies only once requests on the connection have actually
 * been late, and keeps applying while it refuses.
 */
int admission_admits(struct admission *a, unsigned queued, int64_t timeout_ms, uint64_t now_us)
{
	if (queued >= ADMISSION_QUEUED_MAX)
		return 0;
	if (queued < ADMISSION_MIN || a->rate <= 0 || a->behind_until_us == 0)
		return 1;
	if (now_us >= a->behind_until_us) {
		a->behind_until_us = 0;
		return 1;
	}
	if ((double)queued < a->rate * (double)timeout_ms / 2000.0)
		return 1;
	a->behind_until_us = now_us + ADMISSION_BEHIND_US;
	return 0;
}
