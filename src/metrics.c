/*
 * metrics.c - the HTTP endpoint for operators (evhttp). /metrics renders
 * the counters of stats.c, the server's gauges and the store's connection
 * health in the Prometheus text format; /health answers 200 while Redis is
 * reachable and 503 otherwise, so a load balancer can route clients to a
 * daemon that decides for real rather than per on_store_error.
 */
#include "metrics.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <hiredis/hiredis.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "config.h"
#include "envoy_rules.h"
#include "hist.h"
#include "listener.h"
#include "local.h"
#include "log.h"
#include "process.h"
#include "proto.h"
#include "server.h"
#include "stats.h"
#include "store.h"

/* A scrape is one short GET; anything bigger is not one. */
#define METRICS_MAX_HEADERS 8192
#define METRICS_TIMEOUT_S 10

struct metrics {
	struct evhttp *http;
	struct server *srv;
	struct listener *listener; /* its evconnlistener belongs to http */
	int stopping;
};

static void family(struct evbuffer *b, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One action's decisions, allowed and denied. */
static void put_action(struct evbuffer *b, const struct policy *p, const struct stats_action *a)
{
	if (!a)
		return;
	for (int r = 1; r >= 0; r--) {
		unsigned long long n = 0;
		for (int f = 0; f < STATS_FROM_N; f++)
			n += a->decisions[f][r];
		evbuffer_add_printf(
			b,
			"ratelimitd_action_decisions_total{action=\"%s\",result=\"%s\"} "
			"%llu\n",
			p->name, r ? "allowed" : "denied", n);
	}
}

/*
 * One histogram's series: its cumulative buckets, +Inf, sum and count.
 * label: "" or one name="value" pair shared by every series.
 */
static void put_hist(struct evbuffer *b, const char *name, const char *label, const struct hist *h,
		     const struct hist_bounds *bd)
{
	char text[HIST_TEXT_MAX];
	const char *sep = label[0] ? "," : "";
	uint64_t cum = 0;
	for (size_t i = 0; i < bd->n; i++) {
		cum += h->bucket[i];
		hist_format(text, bd->le[i], bd->scale);
		evbuffer_add_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, label, sep, text,
				    (unsigned long long)cum);
	}
	evbuffer_add_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep,
			    (unsigned long long)h->count);
	hist_format(text, h->sum, bd->scale);
	const char *open = label[0] ? "{" : "", *close = label[0] ? "}" : "";
	evbuffer_add_printf(b, "%s_sum%s%s%s %s\n", name, open, label, close, text);
	evbuffer_add_printf(b, "%s_count%s%s%s %llu\n", name, open, label, close,
			    (unsigned long long)h->count);
}

/* The standard process_* families, as Prometheus's client libraries name
 * them; read now (a scrape is seldom), never on a request's path. */
static void put_process(struct evbuffer *b)
{
	struct process_info pi;
	process_read(&pi);
	if (pi.have_stat) {
		family(b, "process_cpu_seconds_total", "counter",
		       "User and system CPU time spent, in seconds.");
		evbuffer_add_printf(b, "process_cpu_seconds_total %.2f\n", pi.cpu_seconds);
		family(b, "process_resident_memory_bytes", "gauge", "Resident memory, in bytes.");
		evbuffer_add_printf(b, "process_resident_memory_bytes %llu\n",
				    (unsigned long long)pi.resident_bytes);
		family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory, in bytes.");
		evbuffer_add_printf(b, "process_virtual_memory_bytes %llu\n",
				    (unsigned long long)pi.virtual_bytes);
	}
	if (pi.open_fds >= 0) {
		family(b, "process_open_fds", "gauge", "Open file descriptors.");
		evbuffer_add_printf(b, "process_open_fds %ld\n", pi.open_fds);
	}
	if (pi.max_fds >= 0) {
		family(b, "process_max_fds", "gauge",
		       "The most file descriptors the process may open (RLIMIT_NOFILE).");
		evbuffer_add_printf(b, "process_max_fds %ld\n", pi.max_fds);
	}
	family(b, "process_start_time_seconds", "gauge",
	       "When the process started, in seconds since the epoch.");
	evbuffer_add_printf(b, "process_start_time_seconds %.3f\n", stats.start_time);
}

static void render(struct metrics *m, struct evbuffer *b)
{
	const struct config *cfg = server_config(m->srv);
	struct store *store = server_store(m->srv);
	struct store_health h;
	store_health(store, &h);

	family(b, "ratelimitd_build_info", "gauge",
	       "The running version, and the versions of the libraries it runs with; always 1.");
	evbuffer_add_printf(
		b,
		"ratelimitd_build_info{version=\"%s\",libevent=\"%s\",hiredis=\"%d.%d.%d\","
		"nghttp2=\"%s\",systemd=\"%s\"} 1\n",
		RATELIMITD_VERSION, event_get_version(), HIREDIS_MAJOR, HIREDIS_MINOR,
		HIREDIS_PATCH, nghttp2_version(0)->version_str,
#ifdef HAVE_SYSTEMD
		"yes"
#else
		"no"
#endif
	);
	put_process(b);
	family(b, "ratelimitd_start_time_seconds", "gauge",
	       "When the daemon started, in seconds since the epoch.");
	evbuffer_add_printf(b, "ratelimitd_start_time_seconds %.3f\n", stats.start_time);

	family(b, "ratelimitd_requests_total", "counter", "Requests parsed, by command.");
	for (int v = 0; v < CMD_VERB_N; v++)
		evbuffer_add_printf(b, "ratelimitd_requests_total{command=\"%s\"} %llu\n",
				    proto_verb_name((enum cmd_verb)v), stats.requests[v]);

	family(b, "ratelimitd_decisions_total", "counter",
	       "ALLOW and PEEK answers, by result and by who decided: redis, the local deny "
	       "cache, the on_store_error fallback, an override, the memory store (store: "
	       "memory), or this daemon while Redis could not (on_store_error: local).");
	for (int f = 0; f < STATS_FROM_N; f++)
		for (int a = 1; a >= 0; a--) {
			if (f == STATS_FROM_CACHE && a == 1)
				continue; /* the cache only ever denies */
			evbuffer_add_printf(
				b, "ratelimitd_decisions_total{result=\"%s\",source=\"%s\"} %llu\n",
				a ? "allowed" : "denied", stats_from_name((enum stats_from)f),
				stats.decisions[f][a]);
		}

	family(b, "ratelimitd_action_decisions_total", "counter",
	       "ALLOW and PEEK answers per action (policy) of the running configuration, by "
	       "result, whoever decided.");
	for (size_t i = 0; i < cfg->npolicies; i++)
		put_action(b, &cfg->policies[i], stats_action_of(cfg, &cfg->policies[i]));
	/* envoy rules: only those used so far (there may be thousands) */
	const struct envoy_rules *er = cfg->envoy.rules;
	for (size_t i = 0; er && i < er->nnames; i++)
		put_action(b, er->by_name[i],
			   stats_action_find(er->by_name[i]->name, er->by_name[i]->name_len));

	family(b, "ratelimitd_shadow_denied_total", "counter",
	       "Denials that shadow mode answered ALLOWED (counted as denied above too).");
	evbuffer_add_printf(b, "ratelimitd_shadow_denied_total %llu\n", stats.shadow_denied);
	family(b, "ratelimitd_overrides_live", "gauge",
	       "Run-time overrides (OVERRIDE) in force, as this daemon mirrors them from Redis.");
	evbuffer_add_printf(b, "ratelimitd_overrides_live %zu\n", server_noverrides(m->srv));
	family(b, "ratelimitd_multi_partial_total", "counter",
	       "MALLOWs a Redis Cluster denied after charging some of their pairs "
	       "(another request took the last units between check and charge)");
	evbuffer_add_printf(b, "ratelimitd_multi_partial_total %llu\n", stats.multi_partial);
	family(b, "ratelimitd_action_shadow_denied_total", "counter",
	       "Denials that shadow mode answered ALLOWED, per action of the running "
	       "configuration.");
	for (size_t i = 0; i < cfg->npolicies; i++) {
		const struct policy *p = &cfg->policies[i];
		const struct stats_action *a = stats_action_of(cfg, p);
		if (a)
			evbuffer_add_printf(
				b, "ratelimitd_action_shadow_denied_total{action=\"%s\"} %llu\n",
				p->name, a->shadow_denied);
	}

	family(b, "ratelimitd_store_errors_total", "counter",
	       "Requests Redis did not decide, by reason; answered per on_store_error "
	       "(RESET: ERR store-unavailable).");
	for (int st = STORE_TIMEOUT; st < STATS_STORE_STATUS_N; st++)
		evbuffer_add_printf(b, "ratelimitd_store_errors_total{reason=\"%s\"} %llu\n",
				    store_status_name((enum store_status)st),
				    stats.store_errors[st]);

	family(b, "ratelimitd_store_failures_total", "counter",
	       "Requests Redis answered with an error (reason=\"failed\" above), by kind: "
	       "noperm (the ACL lacks what the script needs), oom, busy, loading, key (a key "
	       "of the wrong type), script, reply (an unexpected reply), ...");
	for (int e = STORE_ERROR_NONE + 1; e < STORE_ERROR_N; e++)
		evbuffer_add_printf(b, "ratelimitd_store_failures_total{error=\"%s\"} %llu\n",
				    store_error_name((enum store_error)e), stats.store_failures[e]);

	family(b, "ratelimitd_errors_total", "counter", "ERR replies, by code.");
	for (int e = 0; e < CMD_ERR_N; e++)
		evbuffer_add_printf(b, "ratelimitd_errors_total{code=\"%s\"} %llu\n",
				    proto_error_code((enum cmd_error)e), stats.errors[e]);

	family(b, "ratelimitd_clients", "gauge", "Clients connected now.");
	evbuffer_add_printf(b, "ratelimitd_clients %zu\n", server_nclients(m->srv));
	family(b, "ratelimitd_clients_accepted_total", "counter",
	       "Client connections accepted (those refused by max_clients are in "
	       "ratelimitd_errors_total{code=\"too-many-clients\"}).");
	evbuffer_add_printf(b, "ratelimitd_clients_accepted_total %llu\n", stats.clients_accepted);

	family(b, "ratelimitd_envoy_unknown_domain_total", "counter",
	       "gRPC ShouldRateLimit calls for a domain no envoy rule file has (answered OK).");
	evbuffer_add_printf(b, "ratelimitd_envoy_unknown_domain_total %llu\n",
			    stats.envoy_unknown_domain);

	family(b, "ratelimitd_store_pending", "gauge", "Requests waiting on Redis now.");
	evbuffer_add_printf(b, "ratelimitd_store_pending %zu\n", store_pending(store));
	family(b, "ratelimitd_deny_cache_entries", "gauge",
	       "Denials the local deny cache holds now (its hits: ratelimitd_decisions_total"
	       "{source=\"cache\"}).");
	evbuffer_add_printf(b, "ratelimitd_deny_cache_entries %zu\n", server_deny_entries(m->srv));

	family(b, "ratelimitd_decision_duration_seconds", "histogram",
	       "Decisions (ALLOW, PEEK, MALLOW, MPEEK, CL.THROTTLE, gRPC ShouldRateLimit), from "
	       "the request parsed to its answer ready to write, by front end.");
	for (int f = 0; f < STATS_FRONT_N; f++) {
		char label[32];
		snprintf(label, sizeof(label), "protocol=\"%s\"",
			 stats_front_name((enum stats_front)f));
		put_hist(b, "ratelimitd_decision_duration_seconds", label, &stats.decision_us[f],
			 &stats_latency_bounds);
	}
	family(b, "ratelimitd_store_round_trip_seconds", "histogram",
	       "Calls to Redis (a batch of decisions, or one), from sent to their reply read.");
	put_hist(b, "ratelimitd_store_round_trip_seconds", "", &stats.store_rtt_us,
		 &stats_latency_bounds);
	family(b, "ratelimitd_store_batch_size", "histogram",
	       "Requests per call sent to Redis (requests of one event loop turn go together).");
	put_hist(b, "ratelimitd_store_batch_size", "", &stats.batch_size, &stats_batch_bounds);
	family(b, "ratelimitd_redis_up", "gauge",
	       "1 while at least one connection to Redis answers, else 0.");
	evbuffer_add_printf(b, "ratelimitd_redis_up %d\n", h.conns_up > 0);
	family(b, "ratelimitd_redis_refusing", "gauge",
	       "Redis servers that are up but answer decisions with errors (an ACL without what "
	       "the script needs, maxmemory, loading...); /health then answers 503.");
	evbuffer_add_printf(b, "ratelimitd_redis_refusing %u\n", h.refusing);
	family(b, "ratelimitd_redis_connections", "gauge",
	       "Request connections to Redis the daemon keeps (on every node).");
	evbuffer_add_printf(b, "ratelimitd_redis_connections %u\n", h.conns);
	family(b, "ratelimitd_redis_connections_up", "gauge",
	       "Of those, the ones connected and answering now.");
	evbuffer_add_printf(b, "ratelimitd_redis_connections_up %u\n", h.conns_up);
	family(b, "ratelimitd_redis_connections_lost_total", "counter",
	       "Connections to Redis that were up and were lost.");
	evbuffer_add_printf(b, "ratelimitd_redis_connections_lost_total %llu\n", h.conns_lost);

	family(b, "ratelimitd_local_active", "gauge",
	       "1 while decisions are made in this daemon because Redis cannot "
	       "(on_store_error: local), else 0.");
	evbuffer_add_printf(b, "ratelimitd_local_active %d\n", local_active(server_local(m->srv)));
	if (h.memory) {
		family(b, "ratelimitd_memory_keys", "gauge",
		       "Keys the memory store holds now (store: memory).");
		evbuffer_add_printf(b, "ratelimitd_memory_keys %zu\n", h.memory_keys);
		family(b, "ratelimitd_memory_bytes", "gauge",
		       "Memory those keys take, as allocated (an estimate).");
		evbuffer_add_printf(b, "ratelimitd_memory_bytes %zu\n", h.memory_bytes);
		family(b, "ratelimitd_memory_evicted_total", "counter",
		       "Keys dropped, least recently used first, because memory.max_keys was "
		       "reached (their limits started afresh).");
		evbuffer_add_printf(b, "ratelimitd_memory_evicted_total %llu\n", h.memory_evicted);
		family(b, "ratelimitd_memory_expired_total", "counter",
		       "Keys dropped when Redis would have expired them.");
		evbuffer_add_printf(b, "ratelimitd_memory_expired_total %llu\n", h.memory_expired);
	}

	family(b, "ratelimitd_reloads_total", "counter", "Configuration reloads, by result.");
	evbuffer_add_printf(b, "ratelimitd_reloads_total{result=\"ok\"} %llu\n", stats.reloads_ok);
	evbuffer_add_printf(b, "ratelimitd_reloads_total{result=\"failed\"} %llu\n",
			    stats.reloads_failed);
	family(b, "ratelimitd_config_last_reload_success_timestamp_seconds", "gauge",
	       "When the running configuration was loaded, in seconds since the epoch.");
	evbuffer_add_printf(b, "ratelimitd_config_last_reload_success_timestamp_seconds %.3f\n",
			    stats.last_reload_time);
	family(b, "ratelimitd_restart_pending", "gauge",
	       "1 while the configuration file sets listen, metrics.listen or a redis connection "
	       "setting other than the running one (a restart applies it), else 0.");
	evbuffer_add_printf(b, "ratelimitd_restart_pending %d\n", stats.restart_pending);
	family(b, "ratelimitd_policies", "gauge", "Policies in the running configuration.");
	evbuffer_add_printf(b, "ratelimitd_policies %zu\n", cfg->npolicies);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason,
		       struct evbuffer *body, const char *type)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	evhttp_add_header(hdr, "Content-Type", type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	evhttp_send_reply(req, code, reason, body);
}

static void request_cb(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct evbuffer *body = evbuffer_new();
	if (!body) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	if (path && strcmp(path, "/metrics") == 0) {
		render(m, body);
		reply_text(req, HTTP_OK, "OK", body, "text/plain; version=0.0.4; charset=utf-8");
	} else if (path && strcmp(path, "/health") == 0) {
		const char *why, *refusal;
		enum store_verdict v =
			store_verdict(server_store(m->srv), server_config(m->srv)->on_store_error,
				      local_active(server_local(m->srv)), &why, &refusal);
		if (m->stopping) {
			evbuffer_add_printf(body, "stopping\n");
			reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", body,
				   "text/plain");
		} else if (v == STORE_VERDICT_DEGRADED) {
			/* every daemon decides alone: taking this one out helps nobody */
			evbuffer_add_printf(body,
					    "degraded: %.*s; deciding locally (on_store_error: "
					    "local)\n",
					    log_reason_len(why, strlen(why)), why);
			reply_text(req, HTTP_OK, "OK", body, "text/plain");
		} else if (v == STORE_VERDICT_DOWN) {
			if (refusal)
				evbuffer_add_printf(body, "%s: %s\n", why, refusal);
			else
				evbuffer_add_printf(body, "%s\n", why);
			reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", body,
				   "text/plain");
		} else {
			evbuffer_add_printf(body, "ok\n");
			reply_text(req, HTTP_OK, "OK", body, "text/plain");
		}
	} else {
		evbuffer_add_printf(body, "not found: try /metrics or /health\n");
		reply_text(req, HTTP_NOTFOUND, "Not Found", body, "text/plain");
	}
	evbuffer_free(body);
}

/* The first address host resolves to, as evhttp_bind_socket would bind.
 * NULL if none, with why. */
static struct evutil_addrinfo *resolve(const char *host, int port, const char **why)
{
	char sport[8];
	snprintf(sport, sizeof(sport), "%d", port);
	struct evutil_addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_ADDRCONFIG;
	int rc = evutil_getaddrinfo(host, sport, &hints, &ai);
	if (rc != 0) {
		*why = evutil_gai_strerror(rc);
		return NULL;
	}
	return ai;
}

struct metrics *metrics_new(struct event_base *base, const char *address, int fd,
			    struct server *srv, char *err, size_t errlen)
{
	char host[256];
	int port;
	if (addr_split(address, host, sizeof(host), &port) < 0 || port < 1 || port > 65535) {
		snprintf(err, errlen, "metrics.listen: cannot use %s", address);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	struct metrics *m = calloc(1, sizeof(*m));
	if (!m || !(m->http = evhttp_new(base))) {
		snprintf(err, errlen, "metrics: out of memory");
		metrics_free(m);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	m->srv = srv;
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, 0);
	evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
	evhttp_set_gencb(m->http, request_cb, m);
	char name[300];
	snprintf(name, sizeof(name), "metrics %s", address);
	/* why a socket could not be had: an operator must know (the port
	 * taken, an address not this host's) without strace */
	const char *why = "the HTTP server refused the socket";
	char fd_why[256];
	if (fd >= 0) {
		m->listener = listener_new_fd(base, fd, name, NULL, NULL, err, errlen);
		if (!m->listener) {
			snprintf(fd_why, sizeof(fd_why), "%s", err);
			why = fd_why;
			close(fd);
		}
	} else {
		struct evutil_addrinfo *ai = resolve(host, port, &why);
		if (ai) {
			m->listener = listener_new_sockaddr(base, ai->ai_addr, (int)ai->ai_addrlen,
							    name, NULL, NULL, err, errlen);
			if (!m->listener)
				why = strerror(errno); /* the bind's (listener.c keeps it) */
			evutil_freeaddrinfo(ai);
		}
	}
	if (!m->listener || !evhttp_bind_listener(m->http, listener_give(m->listener))) {
		snprintf(err, errlen, "metrics.listen: cannot listen on %s: %s", address, why);
		metrics_free(m);
		return NULL;
	}
	return m;
}

void metrics_set_stopping(struct metrics *m)
{
	m->stopping = 1;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	listener_free(m->listener);
	if (m->http)
		evhttp_free(m->http);
	free(m);
}
