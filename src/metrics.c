/*
 * metrics.c - the HTTP endpoint for operators (evhttp). /metrics renders
 * the counters of stats.c, the server's gauges and the store's connection
 * health in the Prometheus text format; /health (and /readyz) answer 200
 * while Redis is reachable and 503 otherwise, so a load balancer can route
 * clients to a daemon that decides for real rather than per
 * on_store_error; /livez, 200 while the loop turns. With
 * metrics.tls, HTTPS: evhttp over libevent's OpenSSL bufferevents, the
 * session from lib/tls.c's listener context (re-read on reload).
 */
#include "metrics.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <hiredis/hiredis.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "blocks.h"
#include "config.h"
#include "console.h"
#include "decimal.h"
#include "declog.h"
#include "envoy_rules.h"
#include "hist.h"
#include "leases.h"
#include "listener.h"
#include "local.h"
#include "log.h"
#include "override_live.h"
#include "metrics_conn.h"
#include "process.h"
#include "proto.h"
#include "server.h"
#include "stats.h"
#include "store.h"
#include "tls.h"
#include "trace.h"
#include "view.h"

/* A scrape is one short GET; anything bigger is not one. */
#define METRICS_MAX_HEADERS 8192
#define METRICS_TIMEOUT_S 10
/* ... and a console's override, a short form (console.c) */
#define METRICS_MAX_BODY 8192

struct metrics {
	struct evhttp *http;
	struct server *srv;
	struct listener *listener;	    /* its evconnlistener belongs to http */
	struct tls_server *tls;		    /* metrics.tls, or NULL: plain HTTP */
	enum tls_client_certs client_certs; /* as started: restart-only */
	struct console *console;	    /* /console (console.h) */
	struct metrics_conns *conns;	    /* bounded: metrics_conn.h */
	int stopping;
};

/* What one scrape reads, once, before any family is written. */
struct scrape {
	struct metrics *m;
	const struct config *cfg;
	struct store *store;
	struct store_health health;
	struct process_info proc;
};

/* The metrics.top_series users with the most denials, over every action
 * of the running configuration: a fixed label budget, however many users. */
static void top_denied(struct evbuffer *b, const char *name, const struct scrape *s)
{
	const struct config *cfg = s->cfg;
	size_t n;
	struct view_hitter *h = view_hitters(cfg, (size_t)cfg->metrics_top_series, &n);
	for (size_t i = 0; h && i < n && i < (size_t)cfg->metrics_top_series; i++) {
		evbuffer_add_printf(b, "%s{action=\"%s\",user=\"", name, h[i].p->name);
		view_put_user(b, h[i].row.name, h[i].row.len, h[i].row.cut);
		evbuffer_add_printf(b, "\"} %llu\n", (unsigned long long)h[i].row.denied);
	}
	free(h);
}

/* Spans of traced decisions, by what became of them. */
static void trace_spans(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	const char *what[] = {"made", "dropped", "exported", "failed"};
	unsigned long long v[] = {trace_spans_made, trace_spans_dropped, trace_spans_exported,
				  trace_spans_failed};
	for (int i = 0; i < 4; i++)
		evbuffer_add_printf(b, "%s{result=\"%s\"} %llu\n", name, what[i], v[i]);
}

/* One action's decisions, allowed and denied. */
static void put_action(struct evbuffer *b, const char *name, const struct policy *p,
		       const struct stats_action *a)
{
	if (!a)
		return;
	unsigned long long allowed, denied;
	view_action_totals(a, &allowed, &denied);
	evbuffer_add_printf(b, "%s{action=\"%s\",result=\"allowed\"} %llu\n", name, p->name,
			    allowed);
	evbuffer_add_printf(b, "%s{action=\"%s\",result=\"denied\"} %llu\n", name, p->name, denied);
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

/* The samples of the labelled families (and of the histograms): each
 * writes the family `name`'s lines. */

static void build_info(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	evbuffer_add_printf(b,
			    "%s{version=\"%s\",libevent=\"%s\",hiredis=\"%d.%d.%d\","
			    "nghttp2=\"%s\",systemd=\"%s\"} 1\n",
			    name, RATELIMITD_VERSION, event_get_version(), HIREDIS_MAJOR,
			    HIREDIS_MINOR, HIREDIS_PATCH, nghttp2_version(0)->version_str,
#ifdef HAVE_SYSTEMD
			    "yes"
#else
			    "no"
#endif
	);
}

/* Each store: "default" (redis: or store: memory), then those of stores:. */
static void store_up(struct evbuffer *b, const char *name, const struct scrape *s)
{
	const struct cmd_env *env = server_env(s->m->srv);
	const char *why, *refusal;
	evbuffer_add_printf(b, "%s{store=\"default\"} %d\n", name,
			    store_verdict(s->store, POLICY_ON_ERROR_ERROR, 0, &why, &refusal) ==
				    STORE_VERDICT_OK);
	for (size_t i = 0; i < env->nnamed; i++)
		evbuffer_add_printf(b, "%s{store=\"%s\"} %d\n", name, env->named[i].name,
				    store_verdict(env->named[i].store, POLICY_ON_ERROR_ERROR, 0,
						  &why, &refusal) == STORE_VERDICT_OK);
}

static void requests(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int v = 0; v < CMD_VERB_N; v++)
		evbuffer_add_printf(b, "%s{command=\"%s\"} %llu\n", name,
				    proto_verb_name((enum cmd_verb)v), stats.requests[v]);
}

static void decisions(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int f = 0; f < STATS_FROM_N; f++)
		for (int a = 1; a >= 0; a--) {
			if ((f == STATS_FROM_CACHE && a == 1) || (f == STATS_FROM_BLOCK && a == 0))
				continue; /* the cache only ever denies, a block allows */
			evbuffer_add_printf(b, "%s{result=\"%s\",source=\"%s\"} %llu\n", name,
					    a ? "allowed" : "denied",
					    stats_from_name((enum stats_from)f),
					    stats.decisions[f][a]);
		}
}

static void action_decisions(struct evbuffer *b, const char *name, const struct scrape *s)
{
	const struct config *cfg = s->cfg;
	for (size_t i = 0; i < cfg->npolicies; i++)
		put_action(b, name, &cfg->policies[i], stats_action_of(cfg, &cfg->policies[i]));
	/* envoy rules: only those used so far (there may be thousands) */
	const struct envoy_rules *er = cfg->envoy.rules;
	for (size_t i = 0; er && i < er->nnames; i++)
		put_action(b, name, er->by_name[i],
			   stats_action_find(er->by_name[i]->name, er->by_name[i]->name_len));
}

static void action_shadow_denied(struct evbuffer *b, const char *name, const struct scrape *s)
{
	const struct config *cfg = s->cfg;
	for (size_t i = 0; i < cfg->npolicies; i++) {
		const struct policy *p = &cfg->policies[i];
		const struct stats_action *a = stats_action_of(cfg, p);
		if (a)
			evbuffer_add_printf(b, "%s{action=\"%s\"} %llu\n", name, p->name,
					    a->shadow_denied);
	}
}

/* Per concurrency policy of the running configuration: its leases held
 * (granted here) or expired. */
static void action_leases(struct evbuffer *b, const char *name, const struct scrape *s, int expired)
{
	const struct config *cfg = s->cfg;
	for (size_t i = 0; i < cfg->npolicies; i++) {
		const struct policy *p = &cfg->policies[i];
		const struct stats_action *a = stats_action_of(cfg, p);
		if (a && p->algo == POLICY_CONCURRENCY) {
			if (expired)
				evbuffer_add_printf(b, "%s{action=\"%s\"} %llu\n", name, p->name,
						    a->leases_expired);
			else
				evbuffer_add_printf(b, "%s{action=\"%s\"} %lld\n", name, p->name,
						    a->leases_held);
		}
	}
}

static void action_leases_held(struct evbuffer *b, const char *name, const struct scrape *s)
{
	action_leases(b, name, s, 0);
}

static void action_leases_expired(struct evbuffer *b, const char *name, const struct scrape *s)
{
	action_leases(b, name, s, 1);
}

static void store_errors(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int st = STORE_TIMEOUT; st < STATS_STORE_STATUS_N; st++)
		evbuffer_add_printf(b, "%s{reason=\"%s\"} %llu\n", name,
				    store_status_name((enum store_status)st),
				    stats.store_errors[st]);
}

static void store_failures(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int e = STORE_ERROR_NONE + 1; e < STORE_ERROR_N; e++)
		evbuffer_add_printf(b, "%s{error=\"%s\"} %llu\n", name,
				    store_error_name((enum store_error)e), stats.store_failures[e]);
}

static void client_tls_failures(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int f = 0; f < STATS_TLS_N; f++)
		evbuffer_add_printf(b, "%s{reason=\"%s\"} %llu\n", name,
				    stats_tls_failure_name((enum stats_tls_failure)f),
				    stats.client_tls_failures[f]);
}

static void auth_failures(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int f = 0; f < STATS_AUTH_N; f++)
		evbuffer_add_printf(b, "%s{reason=\"%s\"} %llu\n", name,
				    stats_auth_failure_name((enum stats_auth_failure)f),
				    stats.auth_failures[f]);
}

static void block_units(struct evbuffer *b, const char *name, const struct scrape *s)
{
	struct blocks_counts sum;
	long long held;
	const struct blocks_counts *c = &sum;
	server_blocks_counts(s->m->srv, &sum, &held);
	evbuffer_add_printf(b, "%s{event=\"granted\"} %llu\n", name, c->granted);
	evbuffer_add_printf(b, "%s{event=\"lapsed\"} %llu\n", name, c->lapsed);
	evbuffer_add_printf(b, "%s{event=\"revoked\"} %llu\n", name, c->revoked);
	evbuffer_add_printf(b, "%s{event=\"returned\"} %llu\n", name, c->returned);
}

static void lease_events(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int e = 0; e < STATS_LEASE_N; e++)
		evbuffer_add_printf(b, "%s{event=\"%s\"} %llu\n", name,
				    stats_lease_event_name((enum stats_lease_event)e),
				    stats.leases[e]);
}

static void identity_requests(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	size_t n;
	const struct stats_identity *ids = stats_identities(&n);
	for (size_t i = 0; i < n; i++)
		evbuffer_add_printf(b, "%s{identity=\"%s\"} %llu\n", name, ids[i].name,
				    ids[i].requests);
}

static void errors(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int e = 0; e < CMD_ERR_N; e++)
		evbuffer_add_printf(b, "%s{code=\"%s\"} %llu\n", name,
				    proto_error_code((enum cmd_error)e), stats.errors[e]);
}

static void decision_duration(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	for (int f = 0; f < STATS_FRONT_N; f++) {
		char label[32];
		snprintf(label, sizeof(label), "protocol=\"%s\"",
			 stats_front_name((enum stats_front)f));
		put_hist(b, name, label, &stats.decision_us[f], &stats_latency_bounds);
	}
}

static void store_round_trip(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	put_hist(b, name, "", &stats.store_rtt_us, &stats_latency_bounds);
}

static void store_batch_size(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	put_hist(b, name, "", &stats.batch_size, &stats_batch_bounds);
}

static void reloads(struct evbuffer *b, const char *name, const struct scrape *s)
{
	(void)s;
	evbuffer_add_printf(b, "%s{result=\"ok\"} %llu\n", name, stats.reloads_ok);
	evbuffer_add_printf(b, "%s{result=\"failed\"} %llu\n", name, stats.reloads_failed);
}

static struct blocks_counts blocks_sum(const struct server *srv)
{
	struct blocks_counts c;
	long long held;
	server_blocks_counts(srv, &c, &held);
	return c;
}

static long long blocks_held(const struct server *srv)
{
	struct blocks_counts c;
	long long held;
	server_blocks_counts(srv, &c, &held);
	return held;
}

/* The values of the scalar families, each read from the scrape s. */
#define COUNT(fn, expr)                                      \
	static unsigned long long fn(const struct scrape *s) \
	{                                                    \
		(void)s;                                     \
		return (unsigned long long)(expr);           \
	}
#define SECONDS(fn, expr)                        \
	static double fn(const struct scrape *s) \
	{                                        \
		(void)s;                         \
		return (expr);                   \
	}

SECONDS(cpu_seconds, s->proc.cpu_seconds)
COUNT(resident_bytes, s->proc.resident_bytes)
COUNT(virtual_bytes, s->proc.virtual_bytes)
COUNT(open_fds, s->proc.open_fds)
COUNT(max_fds, s->proc.max_fds)
SECONDS(start_time, stats.start_time)
COUNT(shadow_denied, stats.shadow_denied)
COUNT(overrides_live, server_noverrides(s->m->srv))
COUNT(multi_partial, stats.multi_partial)
COUNT(clients, server_nclients(s->m->srv))
COUNT(clients_accepted, stats.clients_accepted)
COUNT(delayed, stats.delayed)
COUNT(delayed_waiting, stats.delayed_waiting)
COUNT(envoy_unknown_domain, stats.envoy_unknown_domain)
COUNT(store_pending_now, store_pending(s->store))
COUNT(deny_cache_entries, server_deny_entries(s->m->srv))
COUNT(blocks_granted, blocks_sum(s->m->srv).blocks)
COUNT(block_units_held, blocks_held(s->m->srv))
COUNT(redis_up, s->health.conns_up > 0)
COUNT(redis_refusing, s->health.refusing)
COUNT(redis_connections, s->health.conns)
COUNT(redis_connections_up, s->health.conns_up)
COUNT(redis_connections_lost, s->health.conns_lost)
COUNT(redis_tls_failures, stats.redis_tls_failures)
COUNT(client_tls_handshakes, stats.client_tls_handshakes)
COUNT(local_is_active, local_active(server_local(s->m->srv)))
COUNT(memory_keys, s->health.memory_keys)
COUNT(memory_bytes, s->health.memory_bytes)
COUNT(memory_evicted, s->health.memory_evicted)
COUNT(memory_expired, s->health.memory_expired)
SECONDS(last_reload_time, stats.last_reload_time)
COUNT(restart_pending, stats.restart_pending)
COUNT(policies, s->cfg->npolicies)
COUNT(top_untracked, stats_top_untracked)
COUNT(declog_written, declog_lines)
COUNT(declog_lost, declog_dropped)
COUNT(have_top_series, s->cfg->metrics_top_series > 0)

/* When a family is shown: the process's values read, the memory store's. */
COUNT(have_stat, s->proc.have_stat)
COUNT(have_open_fds, s->proc.open_fds >= 0)
COUNT(have_max_fds, s->proc.max_fds >= 0)
COUNT(have_mem, s->health.memory)

/*
 * One family, after twemproxy's nc_stats.h: its name, type and help are
 * written here and nowhere else. A scalar family has one sample without
 * labels: `count` (an integer), or `seconds` printed with `decimals`
 * digits. Any other family writes its samples with `samples`. A family is
 * left out when `shown` says 0.
 */
struct family {
	const char *name, *type, *help;
	unsigned long long (*count)(const struct scrape *s);
	double (*seconds)(const struct scrape *s);
	int decimals;
	void (*samples)(struct evbuffer *b, const char *name, const struct scrape *s);
	unsigned long long (*shown)(const struct scrape *s);
};

/* Every family, in the order of the scrape. */
static const struct family families[] = {
	{"ratelimitd_build_info", "gauge",
	 "The running version, and the versions of the libraries it runs with; always 1.",
	 .samples = build_info},
	/* The standard process_* families, as Prometheus's client libraries
	 * name them; read when scraped, never on a request's path. */
	{"process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.",
	 .seconds = cpu_seconds, .decimals = 2, .shown = have_stat},
	{"process_resident_memory_bytes", "gauge", "Resident memory, in bytes.",
	 .count = resident_bytes, .shown = have_stat},
	{"process_virtual_memory_bytes", "gauge", "Virtual memory, in bytes.",
	 .count = virtual_bytes, .shown = have_stat},
	{"process_open_fds", "gauge", "Open file descriptors.", .count = open_fds,
	 .shown = have_open_fds},
	{"process_max_fds", "gauge",
	 "The most file descriptors the process may open (RLIMIT_NOFILE).", .count = max_fds,
	 .shown = have_max_fds},
	{"process_start_time_seconds", "gauge",
	 "When the process started, in seconds since the epoch.", .seconds = start_time,
	 .decimals = 3},
	{"ratelimitd_start_time_seconds", "gauge",
	 "When the daemon started, in seconds since the epoch.", .seconds = start_time,
	 .decimals = 3},
	{"ratelimitd_requests_total", "counter", "Requests parsed, by command.",
	 .samples = requests},
	{"ratelimitd_decisions_total", "counter",
	 "ALLOW and PEEK answers, by result and by who decided: redis, the local deny cache, the "
	 "on_store_error fallback, an override, the memory store (store: memory), or this "
	 "daemon while Redis could not (on_store_error: local).",
	 .samples = decisions},
	{"ratelimitd_action_decisions_total", "counter",
	 "ALLOW and PEEK answers per action (policy) of the running configuration, by result, "
	 "whoever decided.",
	 .samples = action_decisions},
	{"ratelimitd_shadow_denied_total", "counter",
	 "Denials that shadow mode answered ALLOWED (counted as denied above too).",
	 .count = shadow_denied},
	{"ratelimitd_overrides_live", "gauge",
	 "Run-time overrides (OVERRIDE) in force, as this daemon mirrors them from Redis.",
	 .count = overrides_live},
	{"ratelimitd_multi_partial_total", "counter",
	 "MALLOWs a Redis Cluster denied after charging some of their pairs (another request "
	 "took the last units between check and charge)",
	 .count = multi_partial},
	{"ratelimitd_action_shadow_denied_total", "counter",
	 "Denials that shadow mode answered ALLOWED, per action of the running configuration.",
	 .samples = action_shadow_denied},
	{"ratelimitd_top_denied", "gauge",
	 "Heavy hitters: the users with the most denials over about the last minute, "
	 "estimated (docs/operations.md), metrics.top_series of them over all actions; users "
	 "shown as TOP shows them.",
	 .samples = top_denied, .shown = have_top_series},
	{"ratelimitd_top_untracked_actions", "gauge",
	 "Actions whose heavy hitters are not kept: more than 1024 actions decided.",
	 .count = top_untracked},
	{"ratelimitd_decision_log_lines_total", "counter",
	 "Decisions written to the decision log (decision_log).", .count = declog_written},
	{"ratelimitd_decision_log_dropped_total", "counter",
	 "Decisions of sampled users the decision log could not write (no file, a failed "
	 "write).",
	 .count = declog_lost},
	{"ratelimitd_trace_spans_total", "counter",
	 "Spans of traced decisions (tracing): made, dropped (the queue was full), exported "
	 "(the collector took them), failed (it did not).",
	 .samples = trace_spans},
	{"ratelimitd_store_errors_total", "counter",
	 "Requests Redis did not decide, by reason; answered per on_store_error (RESET: ERR "
	 "store-unavailable).",
	 .samples = store_errors},
	{"ratelimitd_store_failures_total", "counter",
	 "Requests Redis answered with an error (reason=\"failed\" above), by kind: noperm (the "
	 "ACL lacks what the script needs), oom, busy, loading, key (a key of the wrong type), "
	 "script, reply (an unexpected reply), ...",
	 .samples = store_failures},
	{"ratelimitd_errors_total", "counter", "ERR replies, by code.", .samples = errors},
	{"ratelimitd_clients", "gauge", "Clients connected now.", .count = clients},
	{"ratelimitd_client_tls_handshakes_total", "counter",
	 "TLS handshakes with clients that finished (listen[].tls).",
	 .count = client_tls_handshakes},
	{"ratelimitd_client_tls_failures_total", "counter",
	 "Client connections to a TLS listener (or TLS to a plaintext one) that failed, by "
	 "reason: handshake, timeout (not finished within request_timeout), plaintext (a "
	 "client spoke plain text to a TLS listener), tls_on_plaintext.",
	 .samples = client_tls_failures},
	{"ratelimitd_auth_failures_total", "counter",
	 "Requests refused by listen[].auth before anything else, by reason: noauth (no "
	 "identity proved), bad_token, forbidden (a right or a policy the identity lacks). "
	 "Never charged.",
	 .samples = auth_failures},
	{"ratelimitd_delayed_total", "counter",
	 "Requests a policy's delay (or WAIT) answered ALLOWED later instead of DENIED now "
	 "(their slot reserved when they came).",
	 .count = delayed},
	{"ratelimitd_delayed_waiting", "gauge",
	 "Requests waiting now for their delayed slot (at most max_delayed).",
	 .count = delayed_waiting},
	{"ratelimitd_leases_total", "counter",
	 "Concurrency leases (algorithm: concurrency), by event: acquired, released (RELEASE), "
	 "released_on_close (the connection that took it closed), expired (found past its "
	 "lease, never released), failed (the store could not answer a lease request), "
	 "unbooked (granted past the 1048576 leases a daemon books for "
	 "ratelimitd_leases_held).",
	 .samples = lease_events},
	{"ratelimitd_leases_held", "gauge",
	 "Concurrency leases this daemon granted and holds now, per action: neither released "
	 "nor reset through it nor past their expiry. Summed over the daemons: the leases "
	 "held, when each is released through the daemon that granted it (always so for line "
	 "and RESP leases).",
	 .samples = action_leases_held},
	{"ratelimitd_leases_expired_total", "counter",
	 "Concurrency leases this daemon granted that ran out without a RELEASE through it "
	 "(or that a RELEASE or RENEW through it found gone), per action.",
	 .samples = action_leases_expired},
	{"ratelimitd_identity_requests_total", "counter",
	 "Requests taken from each identity (listen[].auth: required), by its name.",
	 .samples = identity_requests},
	{"ratelimitd_clients_accepted_total", "counter",
	 "Client connections accepted (those refused by max_clients are in "
	 "ratelimitd_errors_total{code=\"too-many-clients\"}).",
	 .count = clients_accepted},
	{"ratelimitd_envoy_unknown_domain_total", "counter",
	 "gRPC ShouldRateLimit calls for a domain no envoy rule file has (answered OK).",
	 .count = envoy_unknown_domain},
	{"ratelimitd_store_pending", "gauge", "Requests waiting on Redis now.",
	 .count = store_pending_now},
	{"ratelimitd_deny_cache_entries", "gauge",
	 "Denials the local deny cache holds now (its hits: "
	 "ratelimitd_decisions_total{source=\"cache\"}).",
	 .count = deny_cache_entries},
	{"ratelimitd_blocks_total", "counter",
	 "Blocks of units this daemon took from Redis for hot keys (policies' blocks); its "
	 "answers from them: ratelimitd_decisions_total{source=\"block\"}.",
	 .count = blocks_granted},
	{"ratelimitd_block_units_total", "counter",
	 "Units of those blocks, by event: granted (counted in Redis for this daemon), lapsed "
	 "(their window or ttl ended before they were answered), revoked (dropped by a RESET, "
	 "an override or a reload), returned (given back to their window on a graceful stop).",
	 .samples = block_units},
	{"ratelimitd_block_units_held", "gauge",
	 "Units of blocks this daemon holds now (some may have lapsed unseen).",
	 .count = block_units_held},
	{"ratelimitd_decision_duration_seconds", "histogram",
	 "Decisions (ALLOW, PEEK, MALLOW, MPEEK, CL.THROTTLE, gRPC ShouldRateLimit), from the "
	 "request parsed to its answer ready to write, by front end.",
	 .samples = decision_duration},
	{"ratelimitd_store_round_trip_seconds", "histogram",
	 "Calls to Redis (a batch of decisions, or one), from sent to their reply read.",
	 .samples = store_round_trip},
	{"ratelimitd_store_batch_size", "histogram",
	 "Requests per call sent to Redis (requests of one event loop turn go together).",
	 .samples = store_batch_size},
	{"ratelimitd_store_up", "gauge",
	 "1 while the store decides, else 0: the default one and each of stores:.",
	 .samples = store_up},
	{"ratelimitd_redis_up", "gauge",
	 "1 while at least one connection to Redis answers, else 0.", .count = redis_up},
	{"ratelimitd_redis_refusing", "gauge",
	 "Redis servers that are up but answer decisions with errors (an ACL without what the "
	 "script needs, maxmemory, loading...); /health then answers 503.",
	 .count = redis_refusing},
	{"ratelimitd_redis_connections", "gauge",
	 "Request connections to Redis the daemon keeps (on every node).",
	 .count = redis_connections},
	{"ratelimitd_redis_connections_up", "gauge",
	 "Of those, the ones connected and answering now.", .count = redis_connections_up},
	{"ratelimitd_redis_connections_lost_total", "counter",
	 "Connections to Redis that were up and were lost.", .count = redis_connections_lost},
	{"ratelimitd_redis_tls_failures_total", "counter",
	 "TLS handshakes and sessions with Redis or a sentinel that failed (an untrusted or "
	 "expired certificate, another name, our certificate refused).",
	 .count = redis_tls_failures},
	{"ratelimitd_local_active", "gauge",
	 "1 while decisions are made in this daemon because Redis cannot (on_store_error: "
	 "local), else 0.",
	 .count = local_is_active},
	{"ratelimitd_memory_keys", "gauge", "Keys the memory store holds now (store: memory).",
	 .count = memory_keys, .shown = have_mem},
	{"ratelimitd_memory_bytes", "gauge", "Memory those keys take, as allocated (an estimate).",
	 .count = memory_bytes, .shown = have_mem},
	{"ratelimitd_memory_evicted_total", "counter",
	 "Keys dropped, least recently used first, because memory.max_keys was reached (their "
	 "limits started afresh).",
	 .count = memory_evicted, .shown = have_mem},
	{"ratelimitd_memory_expired_total", "counter",
	 "Keys dropped when Redis would have expired them.", .count = memory_expired,
	 .shown = have_mem},
	{"ratelimitd_reloads_total", "counter", "Configuration reloads, by result.",
	 .samples = reloads},
	{"ratelimitd_config_last_reload_success_timestamp_seconds", "gauge",
	 "When the running configuration was loaded, in seconds since the epoch.",
	 .seconds = last_reload_time, .decimals = 3},
	{"ratelimitd_restart_pending", "gauge",
	 "1 while the configuration file sets listen, metrics.listen or a redis connection "
	 "setting other than the running one (a restart applies it), else 0.",
	 .count = restart_pending},
	{"ratelimitd_policies", "gauge", "Policies in the running configuration.",
	 .count = policies},
};

static void render(struct metrics *m, struct evbuffer *b)
{
	struct scrape s = {.m = m, .cfg = server_config(m->srv), .store = server_store(m->srv)};
	store_health(s.store, &s.health);
	if (server_leases(m->srv)) /* the held leases as of now */
		leases_sweep(server_leases(m->srv));
	process_read(&s.proc);
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const struct family *f = &families[i];
		if (f->shown && !f->shown(&s))
			continue;
		evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
				    f->type);
		if (f->count)
			evbuffer_add_printf(b, "%s %llu\n", f->name, f->count(&s));
		else if (f->seconds)
			evbuffer_add_printf(b, "%s %.*f\n", f->name, f->decimals, f->seconds(&s));
		else
			f->samples(b, f->name, &s);
	}
}

static void reply_text(struct evhttp_request *req, int code, const char *reason,
		       struct evbuffer *body, const char *type)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	evhttp_add_header(hdr, "Content-Type", type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	evhttp_send_reply(req, code, reason, body);
}

struct top_action {
	const struct policy *p;
	uint64_t req, den;
};

static int by_action_denied(const void *a, const void *b)
{
	const struct top_action *x = a, *y = b;
	if (x->den != y->den)
		return x->den > y->den ? -1 : 1;
	if (x->req != y->req)
		return x->req > y->req ? -1 : 1;
	return strcmp(x->p->name, y->p->name);
}

/* GET /top[?action=A][&by=denied|requests][&n=N]: the heavy hitters of one
 * action (n 10 by default), or of every action that decided in the last
 * minute or two, most denied first (n 3 each). 200 with JSON, 400 for a
 * bad parameter, 404 for an action with no policy or with metrics.top_series
 * 0 (then no user is named on this endpoint). */
static int top_reply(struct metrics *m, struct evhttp_request *req, struct evbuffer *body)
{
	const struct config *cfg = server_config(m->srv);
	struct evkeyvalq q;
	TAILQ_INIT(&q);
	const char *qs = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	if (qs && evhttp_parse_query_str(qs, &q) < 0) {
		evbuffer_add_printf(body, "{\"error\":\"a query of key=value pairs\"}\n");
		return HTTP_BADREQUEST;
	}
	if (cfg->metrics_top_series == 0) {
		/* one key keeps users off this endpoint altogether */
		evhttp_clear_headers(&q);
		evbuffer_add_printf(body, "{\"error\":\"heavy hitters are not shown here "
					  "(metrics.top_series: 0)\"}\n");
		return HTTP_NOTFOUND;
	}
	const char *action = evhttp_find_header(&q, "action");
	const char *bys = evhttp_find_header(&q, "by");
	const char *ns = evhttp_find_header(&q, "n");
	enum top_by by = TOP_BY_DENIED;
	int64_t n = action ? 10 : 3;
	int code = HTTP_OK;
	const struct policy *p = NULL;
	if (bys && strcmp(bys, "requests") == 0) {
		by = TOP_BY_REQUESTS;
	} else if (bys && strcmp(bys, "denied") != 0) {
		evbuffer_add_printf(body, "{\"error\":\"by is denied or requests\"}\n");
		code = HTTP_BADREQUEST;
	}
	if (code == HTTP_OK && ns &&
	    (decimal_parse(ns, strlen(ns), TOP_ROWS_MAX, &n) < 0 || n < 1)) {
		evbuffer_add_printf(body, "{\"error\":\"n is 1 to %d\"}\n", TOP_ROWS_MAX);
		code = HTTP_BADREQUEST;
	}
	if (code == HTTP_OK && action && !(p = config_find_policy(cfg, action, strlen(action)))) {
		evbuffer_add_printf(body, "{\"error\":\"no policy for this action\"}\n");
		code = HTTP_NOTFOUND;
	}
	if (code != HTTP_OK) {
		evhttp_clear_headers(&q);
		return code;
	}
	struct top_row rows[TOP_ROWS_MAX];
	uint64_t rq, dn;
	evbuffer_add_printf(body, "{\"window_s\":%llu,\"by\":\"%s\",",
			    (unsigned long long)(TOP_WINDOW_US / 1000000),
			    by == TOP_BY_DENIED ? "denied" : "requests");
	if (p) {
		size_t k = stats_top(p->name, p->name_len, by, (size_t)n, rows, &rq, &dn);
		evbuffer_add_printf(body, "\"top\":");
		view_top_action_json(body, p, rows, k, rq, dn);
		evbuffer_add_printf(body, "}\n");
		evhttp_clear_headers(&q);
		return HTTP_OK;
	}
	size_t nall;
	const struct policy **all = view_actions(cfg, &nall);
	struct top_action *acts = all ? calloc(nall + 1, sizeof(*acts)) : NULL;
	size_t na = 0;
	for (size_t i = 0; acts && i < nall; i++) {
		const struct policy *ap = all[i];
		stats_top(ap->name, ap->name_len, by, 0, rows, &rq, &dn);
		if (rq || dn)
			acts[na++] = (struct top_action){ap, rq, dn};
	}
	if (na)
		qsort(acts, na, sizeof(*acts), by_action_denied);
	evbuffer_add_printf(body, "\"actions\":[");
	for (size_t i = 0; i < na; i++) {
		size_t k = stats_top(acts[i].p->name, acts[i].p->name_len, by, (size_t)n, rows, &rq,
				     &dn);
		if (i)
			evbuffer_add_printf(body, ",");
		view_top_action_json(body, acts[i].p, rows, k, rq, dn);
	}
	evbuffer_add_printf(body, "]}\n");
	free(acts);
	free(all);
	evhttp_clear_headers(&q);
	return HTTP_OK;
}

/*
 * /health (for load balancers: 200 while this daemon decides for real, or
 * alone when every daemon must), /readyz (Kubernetes' readiness: the same,
 * and 503 until the run-time overrides are read, an override set before
 * the daemon started being a decision it would get wrong; 503 too from
 * the moment SIGTERM arrives, so the pod leaves the Service's endpoints
 * before its listeners close) and /livez (liveness: 200 whenever
 * the event loop turns to answer, whatever Redis does: a Redis outage must
 * not restart healthy pods). /health also turns 503 at SIGTERM.
 */
enum probe { PROBE_HEALTH, PROBE_READY, PROBE_LIVE };

/* Whether a policy of cfg (or its envoy rules) decides in the store named
 * `name` (stores:). */
static int store_used(const struct config *cfg, const char *name)
{
	if (cfg->envoy.rules && strcmp(cfg->envoy.store, name) == 0)
		return 1;
	for (size_t i = 0; i < cfg->npolicies; i++)
		if (strcmp(cfg->policies[i].store, name) == 0)
			return 1;
	return 0;
}

/* The worst verdict of the default store and every store of stores: a
 * policy uses; *store: that store's name (NULL: the default one). */
static enum store_verdict stores_verdict(struct metrics *m, const char **store, const char **why,
					 const char **refusal)
{
	const struct config *cfg = server_config(m->srv);
	const struct cmd_env *env = server_env(m->srv);
	int local = local_active(server_local(m->srv));
	enum store_verdict v =
		store_verdict(server_store(m->srv), cfg->on_store_error, local, why, refusal);
	*store = NULL;
	for (size_t i = 0; i < env->nnamed; i++) {
		const char *w, *r;
		if (!store_used(cfg, env->named[i].name))
			continue;
		enum store_verdict n =
			store_verdict(env->named[i].store, cfg->on_store_error, local, &w, &r);
		if (n > v) {
			v = n;
			*store = env->named[i].name;
			*why = w;
			*refusal = r;
		}
	}
	return v;
}

static void probe_reply(struct metrics *m, struct evhttp_request *req, struct evbuffer *body,
			enum probe probe)
{
	if (probe == PROBE_LIVE) {
		evbuffer_add_printf(body, m->stopping ? "ok (stopping)\n" : "ok\n");
		reply_text(req, HTTP_OK, "OK", body, "text/plain");
		return;
	}
	const char *why, *refusal, *store;
	enum store_verdict v = stores_verdict(m, &store, &why, &refusal);
	if (store && !m->stopping) /* "store eu: " before what is wrong with it */
		evbuffer_add_printf(body, "store %s: ", store);
	const struct override_live *live = server_env(m->srv)->live;
	if (m->stopping) {
		evbuffer_add_printf(body, "stopping\n");
		reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", body, "text/plain");
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
		reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", body, "text/plain");
	} else if (probe == PROBE_READY && live && !override_live_ready(live, &why)) {
		/* it decides, but would miss an override set before it started */
		evbuffer_add_printf(body, "run-time overrides not read yet%s%s\n",
				    why[0] ? ": " : "", why);
		reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", body, "text/plain");
	} else {
		evbuffer_add_printf(body, "ok\n");
		reply_text(req, HTTP_OK, "OK", body, "text/plain");
	}
}

static void request_cb(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	metrics_conns_request(m->conns, req); /* whole: its request_timeout ends */
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct evbuffer *body = evbuffer_new();
	if (!body) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	if (console_request(m->console, req, path)) {
		evbuffer_free(body);
		return;
	}
	if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
		/* POST and DELETE are the console's overrides' only */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		evbuffer_add_printf(body, "method not allowed: GET or HEAD\n");
		reply_text(req, 405, "Method Not Allowed", body, "text/plain");
	} else if (path && strcmp(path, "/metrics") == 0) {
		render(m, body);
		reply_text(req, HTTP_OK, "OK", body, "text/plain; version=0.0.4; charset=utf-8");
	} else if (path && strcmp(path, "/health") == 0) {
		probe_reply(m, req, body, PROBE_HEALTH);
	} else if (path && strcmp(path, "/readyz") == 0) {
		probe_reply(m, req, body, PROBE_READY);
	} else if (path && strcmp(path, "/livez") == 0) {
		probe_reply(m, req, body, PROBE_LIVE);
	} else if (path && strcmp(path, "/top") == 0) {
		int code = top_reply(m, req, body);
		reply_text(req, code,
			   code == HTTP_OK	   ? "OK"
			   : code == HTTP_NOTFOUND ? "Not Found"
						   : "Bad Request",
			   body, "application/json");
	} else {
		evbuffer_add_printf(
			body,
			"not found: try /metrics, /health, /readyz, /livez, /top or /console\n");
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

/* evhttp's connection for an accepted client, HTTPS: the handshake runs
 * inside the bufferevent, bounded by request_timeout like a request
 * (metrics_conn.c). */
static struct bufferevent *https_bev(struct event_base *base, struct metrics *m)
{
	char why[256];
	struct ssl_st *s = tls_server_session(m->tls, -1, why, sizeof(why));
	if (!s) {
		/* evhttp would then speak plain HTTP: the client's handshake
		 * fails on it, nothing is served in clear to a TLS client */
		log_error("metrics: %s", why);
		return NULL;
	}
	/* libevent's bufferevent reads until SSL_pending() is 0, which
	 * leaves bytes read ahead from the socket (a request sent with the
	 * client's Finished) unread until more come: none would */
	SSL_set_read_ahead(s, 0);
	struct bufferevent *bev = bufferevent_openssl_socket_new(
		base, -1, s, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	if (!bev)
		tls_session_drop(s);
	return bev;
}

/* evhttp's bufferevent for every accepted client, as evhttp would make
 * it, handed to metrics_conn.c to be counted and timed. */
static struct bufferevent *client_bev(struct event_base *base, void *arg)
{
	struct metrics *m = arg;
	struct bufferevent *bev = m->tls ? https_bev(base, m)
					 : bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (bev)
		metrics_conns_add(m->conns, bev, m->tls != NULL);
	return bev;
}

void metrics_reload_tls(struct metrics *m, const struct config_listen_tls *tls)
{
	if (!m || !m->tls || !tls->enabled)
		return; /* turning HTTPS on or off takes a restart (reported) */
	struct tls_server_files f;
	server_tls_files(tls, &f);
	f.client_certs = m->client_certs;
	char why[300];
	if (tls_server_reload(m->tls, &f, why, sizeof(why)) < 0)
		log_error("reload: metrics tls: %s; new connections keep the certificate "
			  "loaded before",
			  why);
	else
		log_info("reload: metrics certificate read again; new connections use it");
}

struct metrics *metrics_new(struct event_base *base, const char *address, int fd,
			    const struct config_listen_tls *tls, struct server *srv, char *err,
			    size_t errlen)
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
	if (!(m->conns = metrics_conns_new(base, srv)) ||
	    !(m->console = console_new(srv, m->conns))) {
		snprintf(err, errlen, "metrics: out of memory");
		metrics_free(m);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (tls && tls->enabled) {
		struct tls_server_files f;
		server_tls_files(tls, &f);
		char why[300];
		m->client_certs = f.client_certs;
		m->tls = tls_server_new(&f, "http/1.1", why, sizeof(why));
		if (!m->tls) {
			snprintf(err, errlen, "metrics %s: tls: %s", address, why);
			metrics_free(m);
			if (fd >= 0)
				close(fd);
			return NULL;
		}
	}
	evhttp_set_bevcb(m->http, client_bev, m);
	/* POST and DELETE for the console's overrides, with a small form */
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
						    EVHTTP_REQ_DELETE);
	evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, METRICS_MAX_BODY);
	/* a connection that sends nothing for this long is closed: idle
	 * between requests, or stalled in one (request_timeout bounds a
	 * request that keeps trickling: metrics_conn.c) */
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

void metrics_drain(struct metrics *m, void (*done)(void *arg), void *arg)
{
	console_drain(m->console, done, arg);
}

size_t metrics_pending(const struct metrics *m)
{
	return console_pending(m->console);
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	listener_free(m->listener);
	console_free(m->console);
	if (m->http)
		evhttp_free(m->http);
	metrics_conns_free(m->conns); /* after evhttp_free closed the connections */
	if (m->tls)
		tls_server_unref(m->tls);
	free(m);
}
