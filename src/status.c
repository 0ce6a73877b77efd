/* status.c - STATUS= lines and watchdog pings from the event loop (see status.h). */
#include "status.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "config.h"
#include "local.h"
#include "log.h"
#include "sd.h"
#include "server.h"
#include "stats.h"
#include "store.h"
#include "store_factory.h"

struct status {
	struct server *srv;
	struct event *status_timer, *watchdog_timer;
	unsigned long long watchdog_usec;
	/* decisions counted at the last refresh, and when (monotonic s) */
	unsigned long long last_decisions;
	double last_time;
	double rate;
};

static double mono_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long decisions_total(void)
{
	unsigned long long n = 0;
	for (int f = 0; f < STATS_FROM_N; f++)
		n += stats.decisions[f][0] + stats.decisions[f][1];
	return n;
}

void status_text(struct status *st, char *buf, size_t cap)
{
	const struct config *cfg = server_config(st->srv);
	const char *why, *refusal;
	enum store_verdict v = store_verdict(server_store(st->srv), cfg->on_store_error,
					     local_active(server_local(st->srv)), &why, &refusal);
	char store[160];
	const char *kind = store_backend_of(cfg)->kind;
	if (v == STORE_VERDICT_OK)
		snprintf(store, sizeof(store), "%s up", kind);
	else
		snprintf(store, sizeof(store), "%s %s: %s", kind,
			 v == STORE_VERDICT_DEGRADED ? "degraded" : "DOWN", why);
	size_t nclients = server_nclients(st->srv);
	snprintf(buf, cap, "serving: %zu %s, %zu %s, %s, %.1f decisions/s%s", cfg->npolicies,
		 log_plural(cfg->npolicies, "policy", "policies"), nclients,
		 log_plural(nclients, "client", "clients"), store, st->rate,
		 stats.restart_pending ? "; restart pending" : "");
}

static void refresh(struct status *st)
{
	double now = mono_seconds();
	unsigned long long n = decisions_total();
	if (now > st->last_time)
		st->rate = (double)(n - st->last_decisions) / (now - st->last_time);
	st->last_decisions = n;
	st->last_time = now;
	char text[512];
	status_text(st, text, sizeof(text));
	sd_notify_status(text);
}

static void status_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	refresh(arg);
}

static void watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	/* runs only when the loop turns: that is the whole point */
	sd_notify_watchdog();
}

static int add_persist(struct event_base *base, struct event **ev, event_callback_fn fn, void *arg,
		       unsigned long long usec)
{
	*ev = event_new(base, -1, EV_PERSIST, fn, arg);
	struct timeval tv = {.tv_sec = (time_t)(usec / 1000000), .tv_usec = (long)(usec % 1000000)};
	return *ev && event_add(*ev, &tv) == 0 ? 0 : -1;
}

struct status *status_new(struct event_base *base, struct server *srv)
{
	struct status *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->srv = srv;
	st->last_time = mono_seconds();
	st->last_decisions = decisions_total();
	if (add_persist(base, &st->status_timer, status_cb, st, STATUS_INTERVAL_MS * 1000ull) < 0)
		log_error("status: cannot start its timer; systemctl status will not be updated");
	st->watchdog_usec = sd_watchdog_usec();
	if (st->watchdog_usec) {
		/* three pings per interval: one late turn of the loop is no restart */
		unsigned long long every = st->watchdog_usec / 3;
		if (add_persist(base, &st->watchdog_timer, watchdog_cb, st, every ? every : 1) < 0)
			log_error("watchdog: cannot start its timer; systemd will restart the "
				  "daemon");
		else
			log_info("watchdog: WATCHDOG=1 every %llu ms (WatchdogSec=%llu ms)",
				 every / 1000, st->watchdog_usec / 1000);
	}
	return st;
}

void status_free(struct status *st)
{
	if (!st)
		return;
	if (st->status_timer)
		event_free(st->status_timer);
	if (st->watchdog_timer)
		event_free(st->watchdog_timer);
	free(st);
}
