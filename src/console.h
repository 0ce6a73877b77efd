/*
 * console.h - the live console on the metrics endpoint (metrics.console):
 * a page for operators, the JSON it reads, and run-time overrides made
 * from it by an identity with the admin right (docs/operations.md, "The
 * live console").
 */
#ifndef RL_CONSOLE_H
#define RL_CONSOLE_H

#include <stddef.h>

struct console;
struct evhttp_request;
struct metrics_conns;
struct server;

/* NULL when out of memory. conns: the endpoint's connections, whose close
 * callbacks are theirs (metrics_conn.h). */
struct console *console_new(struct server *srv, struct metrics_conns *conns);
/* 1 when path is the console's (under /console, and metrics.console on):
 * req is answered, now or once the store has an override. 0: not its. */
int console_request(struct console *c, struct evhttp_request *req, const char *path);
/* Overrides waiting for the store now. */
size_t console_pending(const struct console *c);
/* Shutting down: new overrides are refused (503), and done(arg) is called
 * once none is pending (at once when none is). */
void console_drain(struct console *c, void (*done)(void *arg), void *arg);
/* Before evhttp_free: overrides still in the store's hands then answer nobody. */
void console_free(struct console *c);

#endif
