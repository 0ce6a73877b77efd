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

#include "activation.h"
#include "config.h"
#include "config_files.h"
#include "conn.h"
#include "envoy_rules.h"
#include "log.h"
#include "metrics.h"
#include "pidfile.h"
#include "sd.h"
#include "server.h"
#include "stats.h"
#include "status.h"
#include "store.h"
#include "store_factory.h"
#include "watch.h"

/* After SIGTERM, replies owed are normally written within redis.timeout;
 * this bounds the wait for clients that do not read them. */
#define DRAIN_GRACE_MS 2000

struct daemon {
	struct event_base *base;
	const char *config_path;
	struct server *srv;
	struct store *store;
	struct metrics *metrics; /* NULL: no metrics endpoint */
	struct status *status;	 /* STATUS= and the watchdog; NULL: out of memory */
	/* The start-up snapshot: what runs for the keys only a restart applies. */
	struct config *running;
	int stopping;
	struct event *drain_timeout;
	struct watch *watch; /* watch: true; NULL when out of memory */
	size_t watching;     /* files watched now (0: watch is off) */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ratelimitd [-c FILE] [-p FILE] [-t] [-V] [-h] [--config-keys] [--reload-keys]\n"
		"  -c, --config FILE  configuration file (default " CONFIG_DEFAULT_PATH ")\n"
		"  -p, --pid-file FILE  write the pid there once listening (ratelimitctl reload)\n"
		"  -t, --test         check the configuration and exit\n"
		"  -V, --version      print the version and exit\n"
		"  -h, --help         print this help and exit\n"
		"  --config-keys      list every key a configuration file may hold and exit\n"
		"  --reload-keys      the same, each with what a reload does with it (applies,\n"
		"                     restart, section or per-policy)\n");
}

/*
 * What a reload logs comes from config.c's key tables, key by key: a key a
 * reload applies is logged with its old and new values; a key only a
 * restart applies (the listeners, the metrics endpoint and the store are
 * set up once) is compared with the value running (the start-up snapshot),
 * not with the previous file, so a pending restart is reported on every
 * reload until it happens. Policies are reported one by one.
 */
static void reload_report(const struct config_change *ch, void *arg)
{
	(void)arg;
	switch (ch->kind) {
	case CONFIG_CHANGE_APPLIED:
		if (!ch->old)
			log_error("reload: out of memory showing the change of %s", ch->name);
		else if (ch->secret)
			log_info("reload: %s changed (not shown)", ch->name);
		else
			log_info("reload: %s %s -> %s", ch->name, ch->old, ch->new);
		break;
	case CONFIG_CHANGE_RESTART_PENDING:
		if (!ch->old)
			log_error("reload: out of memory comparing %s with the running value",
				  ch->name);
		else if (ch->secret)
			log_warn("reload: %s differs from the running one (not shown); restart "
				 "ratelimitd to apply it",
				 ch->name);
		else
			log_warn("reload: %s differs: running %s, file %s; restart ratelimitd "
				 "to apply it",
				 ch->name, ch->old, ch->new);
		break;
	case CONFIG_CHANGE_POLICY_ADDED:
		log_info("reload: policy %s added: %s", ch->name, ch->new);
		break;
	case CONFIG_CHANGE_POLICY_CHANGED:
		log_info("reload: policy %s changed: %s", ch->name, ch->new);
		break;
	case CONFIG_CHANGE_POLICY_REMOVED:
		log_info("reload: policy %s removed", ch->name);
		break;
	}
}

static double wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void notify_ready(struct daemon *d)
{
	char text[512] = "serving";
	if (d->status)
		status_text(d->status, text, sizeof(text));
	sd_notify_ready(text);
}

/* "3 policies", and ", 5 envoy rules" when envoy.config has any: an
 * envoy-only file has no policies of its own, but each of its counting rules
 * is a policy (ratelimitctl policies lists their names). */
static const char *policies_text(const struct config *cfg, char *buf, size_t len)
{
	size_t n = cfg->envoy.rules ? cfg->envoy.rules->nnames : 0;
	int k = snprintf(buf, len, "%zu %s", cfg->npolicies,
			 log_plural(cfg->npolicies, "policy", "policies"));
	if (n && k > 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, ", %zu envoy %s", n,
			 log_plural(n, "rule", "rules"));
	return buf;
}

/* The config file and every file it names, watched when cfg says watch:
 * true (ops/watch.h); said in the log when that changes. */
static void watch_update(struct daemon *d, const struct config *cfg);

static void reload(struct daemon *d)
{
	char err[CONFIG_ERR_MAX];
	sd_notify_reloading();
	struct config *cfg = config_load(d->config_path, err, sizeof(err));
	/* a policy may move to another store only among those running */
	if (cfg && server_check_stores(d->srv, cfg, err, sizeof(err)) < 0) {
		config_unref(cfg);
		cfg = NULL;
	}
	if (!cfg) {
		config_log_errors("reload failed, keeping the running configuration: ", err);
		stats.reloads_failed++;
	} else {
		struct config *old = server_config(d->srv);
		/* Keys that need a restart keep their running values. */
		int pending = config_diff(d->running, old, cfg, reload_report, NULL) > 0;
		if (!pending && stats.restart_pending)
			log_info("reload: the restart-only keys match the running values again; "
				 "no restart pending");
		stats.restart_pending = pending;
		if (cfg->log_level != old->log_level)
			log_set_level(cfg->log_level);
		/* certificates renewed in place take effect without a restart */
		char tlserr[400];
		int tls = store_reload_tls(d->store, cfg, tlserr, sizeof(tlserr));
		if (tls < 0)
			log_error("reload: %s; new Redis connections keep the certificates "
				  "loaded before",
				  tlserr);
		else if (tls > 0)
			log_info("reload: redis.tls certificates read again; new Redis "
				 "connections use them");
		server_reload_stores_tls(d->srv, cfg);
		metrics_reload_tls(d->metrics, &cfg->metrics_tls);
		char counts[96];
		policies_text(cfg, counts, sizeof(counts));
		server_set_config(d->srv, cfg);
		watch_update(d, cfg);
		config_unref(cfg);
		stats.reloads_ok++;
		stats.last_reload_time = wall_seconds();
		log_info("reload: configuration %s loaded (%s)", d->config_path, counts);
	}
	notify_ready(d);
}

/* The files to watch: the config file and those it names (config_files
 * gives each once; SEEN_MAX there bounds them far below this). */
struct paths {
	const char *path[128];
	size_t n;
};

static void add_path(const char *path, void *arg)
{
	struct paths *p = arg;
	if (p->n < sizeof(p->path) / sizeof(p->path[0]))
		p->path[p->n++] = path;
}

static void watch_update(struct daemon *d, const struct config *cfg)
{
	if (!d->watch)
		return;
	struct paths p = {.n = 0};
	if (cfg->watch) {
		p.path[p.n++] = d->config_path;
		config_files(cfg, add_path, &p);
	}
	char err[128];
	if (watch_set(d->watch, p.path, p.n, err, sizeof(err)) < 0) {
		log_error("watch: %s; changed files are applied on SIGHUP only", err);
		p.n = 0;
	}
	if (p.n && p.n != d->watching)
		log_info("watch: following %zu %s (a change reloads)", p.n,
			 log_plural(p.n, "file", "files"));
	else if (!p.n && d->watching)
		log_info("watch: off; files are applied on SIGHUP only");
	d->watching = p.n;
}

/* A watched file changed: as SIGHUP (a file that will not do keeps the
 * running configuration, and says so). */
static void files_changed(void *arg, const char *path)
{
	struct daemon *d = arg;
	if (d->stopping)
		return;
	log_info("reload: %s changed", path);
	reload(d);
}

static void console_drained(void *arg)
{
	struct daemon *d = arg;
	event_base_loopbreak(d->base);
}

/* No client is left: the console's overrides waiting for Redis are
 * answered too before the loop ends. */
static void drained(void *arg)
{
	struct daemon *d = arg;
	if (d->metrics)
		metrics_drain(d->metrics, console_drained, d);
	else
		event_base_loopbreak(d->base);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct daemon *d = arg;
	size_t n = server_nclients(d->srv), o = d->metrics ? metrics_pending(d->metrics) : 0;
	if (n || !o)
		log_warn("shutdown: %zu %s still owed replies after the grace period; closing %s",
			 n, log_plural(n, "client", "clients"), log_plural(n, "it", "them"));
	if (o)
		log_warn("shutdown: %zu console %s still waiting for redis after the grace "
			 "period; not answered",
			 o, log_plural(o, "override", "overrides"));
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

static void print_key(const char *path, void *arg)
{
	(void)arg;
	printf("%s\n", path);
}

/* --reload-keys: the path and what a reload does with the key. */
static void print_key_reload(const char *path, enum config_reload how, void *arg)
{
	(void)arg;
	printf("%s %s\n", path, config_reload_name(how));
}

/* What the command line asks for. */
struct options {
	const char *path, *pid_file;
	int test_only;
};

/* -1: go on with *o; else the exit status of an option that was the whole
 * job (--version, --help...) or of a bad command line. */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},   {"test", no_argument, NULL, 't'},
		{"version", no_argument, NULL, 'V'},	    {"help", no_argument, NULL, 'h'},
		{"config-keys", no_argument, NULL, 'K'},    {"reload-keys", no_argument, NULL, 'R'},
		{"pid-file", required_argument, NULL, 'p'}, {NULL, 0, NULL, 0},
	};
	*o = (struct options){.path = CONFIG_DEFAULT_PATH};
	int opt;
	while ((opt = getopt_long(argc, argv, "c:p:tVh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			o->path = optarg;
			break;
		case 'p':
			o->pid_file = optarg;
			break;
		case 't':
			o->test_only = 1;
			break;
		case 'V':
			printf("ratelimitd %s\n", RATELIMITD_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		case 'K':
			config_key_paths(print_key, NULL);
			return 0;
		case 'R':
			config_key_reloads(print_key_reload, NULL);
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
	return -1;
}

/* The configuration, with the TLS files it names loaded once to check
 * them; NULL when it will not do, said on stderr (-t) or in the log. */
static struct config *load_checked(const struct options *o)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = config_load(o->path, err, sizeof(err));
	if (!cfg) {
		if (o->test_only)
			fprintf(stderr, "%s\n", err);
		else
			config_log_errors("", err);
		return NULL;
	}
	if (store_check_tls(cfg, err, sizeof(err)) < 0 ||
	    server_check_tls(cfg, err, sizeof(err)) < 0) {
		if (o->test_only)
			fprintf(stderr, "%s: %s\n", o->path, err);
		else
			log_error("%s: %s", o->path, err);
		config_unref(cfg);
		return NULL;
	}
	return cfg;
}

/* The store, the listeners (systemd's sockets first) and the metrics
 * endpoint, in that order: a server needs its store, and every socket
 * systemd passed must be claimed by one of them. Exits on failure. */
static void daemon_build(struct daemon *d, struct config *cfg)
{
	char err[CONFIG_ERR_MAX];
	d->base = event_base_new();
	if (!d->base || event_base_priority_init(d->base, 2) < 0)
		log_fatal("cannot create the event loop");
	/* Everything runs at priority 1 but the RESET notices (redis_conn.c). */
	d->store = store_new(d->base, cfg, err, sizeof(err));
	if (!d->store)
		log_fatal("redis: %s", err);
	/* sockets systemd passes (ratelimitd.socket) stand for listen entries */
	struct activation *act = activation_take(err, sizeof(err));
	if (!act && err[0])
		log_fatal("%s", err);
	if (act)
		log_info("socket activation: %zu %s passed by systemd", activation_count(act),
			 log_plural(activation_count(act), "socket", "sockets"));
	d->srv = server_new(d->base, cfg, d->store, act, err, sizeof(err));
	if (!d->srv)
		log_fatal("%s", err);
	/* the metrics endpoint's socket: named "metrics", or at its address */
	int metrics_fd =
		cfg->metrics_listen ? activation_claim(act, cfg->metrics_listen, "metrics") : -1;
	if (metrics_fd >= 0)
		log_info("metrics %s: the socket systemd passed", cfg->metrics_listen);
	if (activation_check_claimed(act, err, sizeof(err)) < 0)
		log_fatal("%s", err);
	activation_free(act);
	if (cfg->metrics_listen) {
		d->metrics = metrics_new(d->base, cfg->metrics_listen, metrics_fd,
					 &cfg->metrics_tls, d->srv, err, sizeof(err));
		if (!d->metrics)
			log_fatal("%s", err);
	}
}

/* "ratelimitd 1.2 ready, listening on ... (3 policies, redis ...)". */
static void log_ready(const struct config *cfg)
{
	char listening[512];
	size_t n = 0;
	listening[0] = 0;
	for (size_t i = 0; i < cfg->nlisten && n < sizeof(listening); i++)
		n += (size_t)snprintf(listening + n, sizeof(listening) - n, "%s%s", i ? " " : "",
				      cfg->listen[i].address);
	char redis[300];
	store_describe(cfg, redis, sizeof(redis));
	char counts[96];
	const char *metrics = !cfg->metrics_listen	 ? ""
			      : cfg->metrics_tls.enabled ? "; metrics on https://"
							 : "; metrics on http://";
	log_info("ratelimitd %s ready, listening on %s (%s, %s)%s%s", RATELIMITD_VERSION, listening,
		 policies_text(cfg, counts, sizeof(counts)), redis, metrics,
		 cfg->metrics_listen ? cfg->metrics_listen : "");
}

/* What daemon_build made, in the order that lets each go cleanly. */
static void daemon_free(struct daemon *d)
{
	watch_free(d->watch);
	status_free(d->status);
	metrics_free(d->metrics);
	server_free(d->srv);
	store_free(d->store); /* answers anything still waiting; frees those clients */
	server_free_after_store();
	config_unref(d->running);
	conn_pool_free();
	stats_free();
	event_free(d->drain_timeout);
	event_base_free(d->base);
}

int main(int argc, char **argv)
{
	struct options o;
	int rc = parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;
	struct config *cfg = load_checked(&o);
	if (!cfg)
		return 1;
	if (o.test_only) {
		printf("configuration OK\n");
		config_unref(cfg);
		return 0;
	}
	log_set_level(cfg->log_level);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	srand((unsigned)time(NULL) ^ (unsigned)getpid());

	struct daemon d = {.config_path = o.path};
	daemon_build(&d, cfg);
	stats.start_time = stats.last_reload_time = wall_seconds();
	/* signals through the loop: handled between callbacks, never inside one */
	struct event *sigs[3];
	static const int signos[3] = {SIGHUP, SIGTERM, SIGINT};
	for (int i = 0; i < 3; i++) {
		sigs[i] = evsignal_new(d.base, signos[i], signal_cb, &d);
		evsignal_add(sigs[i], NULL);
	}
	d.drain_timeout = evtimer_new(d.base, drain_timeout_cb, &d);
	d.watch = watch_new(d.base, files_changed, &d);
	watch_update(&d, cfg);
	log_ready(cfg);
	d.running = cfg; /* the server holds its own reference to the current file */
	char err[CONFIG_ERR_MAX];
	if (o.pid_file && pidfile_write(o.pid_file, err, sizeof(err)) < 0)
		log_fatal("%s", err);
	d.status = status_new(d.base, d.srv);
	notify_ready(&d);

	event_base_dispatch(d.base);

	for (int i = 0; i < 3; i++)
		event_free(sigs[i]);
	daemon_free(&d);
	if (o.pid_file)
		pidfile_remove(o.pid_file);
	log_info("exiting");
	return 0;
}
