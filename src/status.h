/*
 * status.h - what systemd hears while the daemon runs: a STATUS= line every
 * few seconds (policies, clients, the store, decisions/s) for `systemctl
 * status`, and WATCHDOG=1 from a timer of the event loop, so a loop that
 * stops turning stops the pings and systemd restarts the daemon.
 */
#ifndef RL_STATUS_H
#define RL_STATUS_H

#include <stddef.h>

struct event_base;
struct server;
struct status;

/* How often STATUS= is refreshed. */
#define STATUS_INTERVAL_MS 5000

/* Starts both timers (the watchdog's only when systemd asks for one). */
struct status *status_new(struct event_base *base, struct server *srv);
/* The current status line (also what READY=1 carries). */
void status_text(struct status *st, char *buf, size_t cap);
void status_free(struct status *st);

#endif
