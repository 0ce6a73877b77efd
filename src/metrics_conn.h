/*
 * metrics_conn.h - the metrics endpoint's connections, which evhttp serves:
 * at most metrics.max_clients at once, and each request whole within
 * request_timeout of its first byte, as on the API's listeners.
 */
#ifndef RL_METRICS_CONN_H
#define RL_METRICS_CONN_H

struct bufferevent;
struct event_base;
struct evhttp_connection;
struct evhttp_request;
struct metrics_conns;
struct server;

/* NULL when out of memory. srv's running configuration sets the bounds. */
struct metrics_conns *metrics_conns_new(struct event_base *base, struct server *srv);
/* After evhttp_free (which closes every connection). NULL is fine. */
void metrics_conns_free(struct metrics_conns *mc);

/* evhttp's bevcb made bev for a new connection (tls: bev is OpenSSL's):
 * counted from now on, or, beyond max_clients, refused. */
void metrics_conns_add(struct metrics_conns *mc, struct bufferevent *bev, int tls);
/* The request_cb's first call: req is whole, its clock stops. */
void metrics_conns_request(struct metrics_conns *mc, struct evhttp_request *req);
/* evhttp_connection_set_closecb for a connection of mc's: evhttp keeps one
 * close callback, and mc needs it, so mc calls cb(evcon, arg) from its own
 * (cb NULL: none). */
void metrics_conns_closecb(struct metrics_conns *mc, struct evhttp_connection *evcon,
			   void (*cb)(struct evhttp_connection *evcon, void *arg), void *arg);

#endif
