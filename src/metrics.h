/*
 * metrics.h - the optional HTTP endpoint for operators: GET /metrics in the
 * Prometheus text format, GET /health for load balancers and probes.
 */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stddef.h>

struct event_base;
struct server;
struct metrics;
struct config_listen_tls;

/* Listens on "host:port", or on fd when it is not -1 (the socket systemd
 * passed for that address, which it then owns); HTTPS when tls is enabled
 * (metrics.tls). NULL with err on failure (fd closed). */
struct metrics *metrics_new(struct event_base *base, const char *address, int fd,
			    const struct config_listen_tls *tls, struct server *srv, char *err,
			    size_t errlen);
/* A reload: HTTPS's certificate files read again (new connections). */
void metrics_reload_tls(struct metrics *m, const struct config_listen_tls *tls);
/* From now on /health answers 503: the daemon is shutting down. */
void metrics_set_stopping(struct metrics *m);
/* Shutting down: done(arg) once no console override waits for the store
 * (new ones are refused), at once when none does. */
void metrics_drain(struct metrics *m, void (*done)(void *arg), void *arg);
/* Console overrides waiting for the store now. */
size_t metrics_pending(const struct metrics *m);
void metrics_free(struct metrics *m);

#endif
