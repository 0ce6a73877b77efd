/* main.c - command line, start-up order, signals through the event loop, reload and shutdown. */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "metrics.h"
#include "sd.h"
#include "server.h"
#include "stats.h"
#include "store.h"

/* After SIGTERM, replies owed are normally written within redis.timeout;
 * this bounds the wait for clients that do not read them. */
#define DRAIN_GRACE_MS 2000

struct daemon {
	struct event_base *base;
	const char *config_path;
	struct server *srv;
	struct store *store;
	struct metrics *metrics; /* NULL: no metrics endpoint */
	/* The start-up snapshot: what runs for the keys only a restart applies. */
	struct config *running;
	int stopping;
	struct event *drain_timeout;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ratelimitd [-c FILE] [-t] [-V] [-h]\n"
		   "  -c, --config FILE  configuration file (default " CONFIG_DEFAULT_PATH ")\n"
		   "  -t, --test         check the configuration and exit\n"
		   "  -V, --version      print the version and exit\n"
		   "  -h, --help         print this help and exit\n");
}

/*
 * Keys only a restart applies: the listeners, the metrics endpoint and the
 * connections to Redis are set up once. A reload compares the file with
 * the values running (the start-up snapshot), not with the previous file,
 * so a pending restart is reported on every reload until it happens.
 */
enum restart_key {
	RESTART_LISTEN,
	RESTART_METRICS_LISTEN,
	RESTART_REDIS_ADDRESS,
	RESTART_REDIS_CLUSTER,
	RESTART_REDIS_SENTINEL,
	RESTART_REDIS_USERNAME,
	RESTART_REDIS_PASSWORD,
	RESTART_REDIS_DATABASE,
	RESTART_REDIS_CONNECTIONS,
	RESTART_N
};

static const struct {
	const char *name;
	int secret; /* compared, never logged */
} restart_keys[RESTART_N] = {
	[RESTART_LISTEN] = {"listen", 0},
	[RESTART_METRICS_LISTEN] = {"metrics.listen", 0},
	[RESTART_REDIS_ADDRESS] = {"redis.address", 0},
	[RESTART_REDIS_CLUSTER] = {"redis.cluster", 0},
	[RESTART_REDIS_SENTINEL] = {"redis.sentinel", 0},
	[RESTART_REDIS_USERNAME] = {"redis.username", 0},
	[RESTART_REDIS_PASSWORD] = {"redis.password", 1},
	[RESTART_REDIS_DATABASE] = {"redis.database", 0},
	[RESTART_REDIS_CONNECTIONS] = {"redis.connections", 0},
};

#define UNSET "(none)"

static void put_addrs(FILE *f, const struct config_addrs *a)
{
	fputc('[', f);
	for (size_t i = 0; i < a->n; i++)
		fprintf(f, "%s%s", i ? ", " : "", a->addr[i]);
	fputc(']', f);
}

/* Key k of c as text, "(none)" when unset or not in use; malloc'd, NULL when out of memory. */
static char *restart_value(const struct config *c, enum restart_key k)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	const struct config_redis *r = &c->redis;
	switch (k) {
	case RESTART_LISTEN:
		fputc('[', f);
		for (size_t i = 0; i < c->nlisten; i++) {
			const struct config_listen *l = &c->listen[i];
			int is_unix = strncmp(l->address, "unix:", 5) == 0;
			fprintf(f, "%s%s", i ? ", " : "", l->address);
			if (l->admin && is_unix)
				fprintf(f, " (admin, mode %04o)", (unsigned)l->mode);
			else if (l->admin)
				fputs(" (admin)", f);
			else if (is_unix)
				fprintf(f, " (mode %04o)", (unsigned)l->mode);
		}
		fputc(']', f);
		break;
	case RESTART_METRICS_LISTEN:
		fputs(c->metrics_listen ? c->metrics_listen : UNSET, f);
		break;
	case RESTART_REDIS_ADDRESS:
		fputs(r->mode == CONFIG_REDIS_SINGLE ? r->address : UNSET, f);
		break;
	case RESTART_REDIS_CLUSTER:
		if (r->mode == CONFIG_REDIS_CLUSTER)
			put_addrs(f, &r->cluster);
		else
			fputs(UNSET, f);
		break;
	case RESTART_REDIS_SENTINEL:
		if (r->mode == CONFIG_REDIS_SENTINEL) {
			fprintf(f, "master %s via ", r->sentinel_master);
			put_addrs(f, &r->sentinels);
		} else {
			fputs(UNSET, f);
		}
		break;
	case RESTART_REDIS_USERNAME:
		fputs(r->username ? r->username : UNSET, f);
		break;
	case RESTART_REDIS_PASSWORD:
		fputs(r->password ? r->password : UNSET, f);
		break;
	case RESTART_REDIS_DATABASE:
		fprintf(f, "%d", r->database);
		break;
	case RESTART_REDIS_CONNECTIONS:
		fprintf(f, "%d", r->connections);
		break;
	default:
		break;
	}
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

/*
 * Warns about each restart-only key whose value in `file` differs from the
 * one running, naming both (but never a password). Returns how many differ;
 * a key that cannot be compared for lack of memory counts as differing.
 */
static int restart_check(const struct config *running, const struct config *file)
{
	int n = 0;
	for (int k = 0; k < RESTART_N; k++) {
		const char *name = restart_keys[k].name;
		char *run = restart_value(running, (enum restart_key)k);
		char *want = restart_value(file, (enum restart_key)k);
		if (!run || !want) {
			log_error("reload: out of memory comparing %s with the running value",
				  name);
			n++;
		} else if (strcmp(run, want) != 0) {
			n++;
			if (restart_keys[k].secret)
				log_warn(
					"reload: %s differs from the running one (not shown); restart "
					"ratelimitd to apply it",
					name);
			else
				log_warn(
					"reload: %s differs: running %s, file %s; restart ratelimitd "
					"to apply it",
					name, run, want);
		}
		free(run);
		free(want);
	}
	return n;
}

/* Logs what a reload changes of the keys it applies (restart_check does the others). */
static void log_changes(const struct config *old, const struct config *new)
{
	const struct config_redis *a = &old->redis, *b = &new->redis;
	if (a->timeout_ms != b->timeout_ms)
		log_info("reload: redis.timeout %lldms -> %lldms", (long long)a->timeout_ms,
			 (long long)b->timeout_ms);
	if (old->max_clients != new->max_clients)
		log_info("reload: max_clients %d -> %d", old->max_clients, new->max_clients);
	if (old->idle_timeout_ms != new->idle_timeout_ms)
		log_info("reload: idle_timeout %lldms -> %lldms (for new clients)",
			 (long long)old->idle_timeout_ms, (long long)new->idle_timeout_ms);
	if (old->max_line != new->max_line)
		log_info("reload: max_line %zu -> %zu", old->max_line, new->max_line);
	if (strcmp(old->prefix, new->prefix) != 0)
		log_info("reload: prefix \"%s\" -> \"%s\"", old->prefix, new->prefix);
	if (old->on_store_error != new->on_store_error)
		log_info("reload: on_store_error %s -> %s",
			 policy_on_error_name(old->on_store_error),
			 policy_on_error_name(new->on_store_error));
	char desc[256];
	for (size_t i = 0; i < new->npolicies; i++) {
		const struct policy *np = &new->policies[i];
		const struct policy *op = config_find_policy(old, np->name, np->name_len);
		policy_describe(np, desc, sizeof(desc));
		if (!op)
			log_info("reload: policy %s added: %s", np->name, desc);
		else if (!policy_equal(op, np))
			log_info("reload: policy %s changed: %s", np->name, desc);
	}
	for (size_t i = 0; i < old->npolicies; i++) {
		const struct policy *op = &old->policies[i];
		if (!config_find_policy(new, op->name, op->name_len))
			log_info("reload: policy %s removed", op->name);
	}
}

static double wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void reload(struct daemon *d)
{
	char err[CONFIG_ERR_MAX];
	sd_notify_reloading();
	struct config *cfg = config_load(d->config_path, err, sizeof(err));
	if (!cfg) {
		config_log_errors("reload failed, keeping the running configuration: ", err);
		stats.reloads_failed++;
	} else {
		struct config *old = server_config(d->srv);
		log_changes(old, cfg);
		/* Keys that need a restart keep their running values. */
		int pending = restart_check(d->running, cfg) > 0;
		if (!pending && stats.restart_pending)
			log_info(
				"reload: listen, metrics.listen and redis connection settings match "
				"the running ones again; no restart pending");
		stats.restart_pending = pending;
		if (cfg->log_level != old->log_level)
			log_set_level(cfg->log_level);
		size_t npolicies = cfg->npolicies;
		server_set_config(d->srv, cfg);
		config_unref(cfg);
		stats.reloads_ok++;
		stats.last_reload_time = wall_seconds();
		log_info("reload: configuration %s loaded (%zu %s)", d->config_path, npolicies,
			 log_plural(npolicies, "policy", "policies"));
	}
	sd_notify_ready(stats.restart_pending ? "serving; restart pending" : "serving");
}

static void drained(void *arg)
{
	struct daemon *d = arg;
	event_base_loopbreak(d->base);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct daemon *d = arg;
	size_t n = server_nclients(d->srv);
	log_warn("shutdown: %zu %s still owed replies after the grace period; closing %s", n,
		 log_plural(n, "client", "clients"), log_plural(n, "it", "them"));
	event_base_loopbreak(d->base);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	struct daemon *d = arg;
	if (sig == SIGHUP) {
		if (!d->stopping)
			reload(d);
		return;
	}
	if (d->stopping) {
		log_info("second %s: exiting now", sig == SIGINT ? "SIGINT" : "SIGTERM");
		event_base_loopbreak(d->base);
		return;
	}
	d->stopping = 1;
	sd_notify_stopping();
	if (d->metrics)
		metrics_set_stopping(d->metrics);
	size_t inflight = store_pending(d->store);
	log_info("%s: no longer accepting; answering %zu in-flight %s",
		 sig == SIGINT ? "SIGINT" : "SIGTERM", inflight,
		 log_plural(inflight, "request", "requests"));
	int64_t ms = server_config(d->srv)->redis.timeout_ms + DRAIN_GRACE_MS;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	evtimer_add(d->drain_timeout, &tv);
	server_drain(d->srv, drained, d);
}

/* Many clients need many descriptors; take what the hard limit allows. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the open files limit: %s", strerror(errno));
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		log_debug("open files limit: %llu", (unsigned long long)rl.rlim_cur);
}

int main(int argc, char **argv)
{
	const char *path = CONFIG_DEFAULT_PATH;
	int test_only = 0;
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"test", no_argument, NULL, 't'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;
	while ((opt = getopt_long(argc, argv, "c:tVh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			path = optarg;
			break;
		case 't':
			test_only = 1;
			break;
		case 'V':
			printf("ratelimitd %s\n", RATELIMITD_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	char err[CONFIG_ERR_MAX];
	struct config *cfg = config_load(path, err, sizeof(err));
	if (!cfg) {
		if (test_only)
			fprintf(stderr, "%s\n", err);
		else
			config_log_errors("", err);
		return 1;
	}
	if (test_only) {
		printf("configuration OK\n");
		config_unref(cfg);
		return 0;
	}
	log_set_level(cfg->log_level);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	srand((unsigned)time(NULL) ^ (unsigned)getpid());

	struct daemon d = {.config_path = path};
	d.base = event_base_new();
	if (!d.base || event_base_priority_init(d.base, 2) < 0)
		log_fatal("cannot create the event loop");
	/* Everything runs at priority 1 but the RESET notices (redis_conn.c). */
	d.store = store_new(d.base, &cfg->redis, err, sizeof(err));
	if (!d.store)
		log_fatal("redis: %s", err);
	d.srv = server_new(d.base, cfg, d.store, err, sizeof(err));
	if (!d.srv)
		log_fatal("%s", err);
	if (cfg->metrics_listen) {
		d.metrics = metrics_new(d.base, cfg->metrics_listen, d.srv, err, sizeof(err));
		if (!d.metrics)
			log_fatal("%s", err);
	}
	stats.start_time = stats.last_reload_time = wall_seconds();
	struct event *sig_hup = evsignal_new(d.base, SIGHUP, signal_cb, &d);
	struct event *sig_term = evsignal_new(d.base, SIGTERM, signal_cb, &d);
	struct event *sig_int = evsignal_new(d.base, SIGINT, signal_cb, &d);
	d.drain_timeout = evtimer_new(d.base, drain_timeout_cb, &d);
	evsignal_add(sig_hup, NULL);
	evsignal_add(sig_term, NULL);
	evsignal_add(sig_int, NULL);

	char listening[512];
	size_t n = 0;
	listening[0] = 0;
	for (size_t i = 0; i < cfg->nlisten && n < sizeof(listening); i++)
		n += (size_t)snprintf(listening + n, sizeof(listening) - n, "%s%s", i ? " " : "",
				      cfg->listen[i].address);
	char redis[300];
	store_describe(&cfg->redis, redis, sizeof(redis));
	log_info("ratelimitd %s ready, listening on %s (%zu %s, %s)%s%s", RATELIMITD_VERSION,
		 listening, cfg->npolicies, log_plural(cfg->npolicies, "policy", "policies"), redis,
		 cfg->metrics_listen ? "; metrics on http://" : "",
		 cfg->metrics_listen ? cfg->metrics_listen : "");
	d.running = cfg; /* the server holds its own reference to the current file */
	sd_notify_ready("serving");

	event_base_dispatch(d.base);

	metrics_free(d.metrics);
	server_free(d.srv);
	store_free(d.store); /* answers anything still waiting; frees those clients */
	config_unref(d.running);
	conn_pool_free();
	stats_free();
	event_free(sig_hup);
	event_free(sig_term);
	event_free(sig_int);
	event_free(d.drain_timeout);
	event_base_free(d.base);
	log_info("exiting");
	return 0;
}
