/*
 * ratelimitctl - the operator's client of ratelimitd: asks a running daemon
 * over the line protocol (allow, peek, reset, overrides, ping), checks a
 * configuration file with the daemon's own loader, and tells the daemon to
 * reload. Exit codes a script can use: 0 allowed / done, 1 denied (or an
 * invalid file), 2 error. See man/ratelimitctl.1.scd. rls and health are
 * ctl_grpc.c's; what the two share, ctl_util.c's.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "ctl_grpc.h"
#include "ctl_replay.h"
#include "edits.h"
#include "ctl_util.h"
#include "envoy_rules.h"
#include "decimal.h"
#include "line_reply.h"
#include "policy.h"

/* Where the systemd unit has the daemon write its pid (RuntimeDirectory). */
#define CTL_DEFAULT_PID_FILE "/run/ratelimitd/ratelimitd.pid"
#define CTL_DEFAULT_ADDRESS "127.0.0.1:7379"
#define CTL_DEFAULT_ADMIN_ADDRESS "127.0.0.1:7380"
#define CTL_REPLY_MAX 2048
/* long options without a letter */
enum { OPT_TLS = 256, OPT_CACERT, OPT_CERT, OPT_KEY, OPT_SERVERNAME, OPT_ADDR };
/* OVERRIDES answers one item per request: a bound on a listing's length */
#define CTL_OVERRIDES_MAX 1000000

struct ctl {
	struct ctl_ctx x; /* address: -s; NULL: from the config file, else the defaults */
	const char *config_path;
	const char *pid_file;  /* -p; NULL: the default, else systemctl */
	const char *grpc_addr; /* --addr before the command: rls's and health's listener */
	int64_t wait_ms;       /* -w: allow may wait this long (WAIT); -1: not given */
	int fd;
	char in[CTL_REPLY_MAX];
	size_t in_len, consumed; /* consumed: the last reply's line */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ratelimitctl [options] COMMAND [ARGS]\n"
		"commands:\n"
		"  allow USER ACTION [USER ACTION]... [COST]   ask and count (several pairs: "
		"MALLOW)\n"
		"  peek USER ACTION [USER ACTION]... [COST]    ask without counting\n"
		"  state USER ACTION                           every limit of the pair as it\n"
		"                                              stands, counting nothing\n"
		"  reset USER ACTION                           forget a user's state (admin)\n"
		"  override USER ACTION SPEC [TTL]             set a run-time override (admin)\n"
		"  unoverride USER ACTION                      clear it (admin)\n"
		"  overrides                                   list run-time overrides (admin)\n"
		"  top ACTION [N] [denied|requests]            the users most denied (or asking\n"
		"                                              most) in the last minute (admin)\n"
		"  ping                                        is the daemon answering?\n"
		"  acquire USER ACTION [COST]                  take a concurrency lease (given\n"
		"                                              back when ratelimitctl exits)\n"
		"  release LEASE-ID                            give a lease back\n"
		"  renew LEASE-ID                              extend a lease\n"
		"  charge USER ACTION COST                     count a cost known afterwards\n"
		"                                              (never denied)\n"
		"  hold USER ACTION ESTIMATE                   allow an estimate, open a hold\n"
		"  settle HOLD-ID ACTUAL                       charge or give back the difference\n"
		"  cancel HOLD-ID                              give the estimate back\n"
		"  check-config [FILE]                         ratelimitd -t on FILE\n"
		"  policies                                    the config file's policy names\n"
		"  reload                                      check the config, then SIGHUP\n"
		"  replay LOG [LOG...] CANDIDATE.yaml          decide a decision log again under\n"
		"                                              another configuration: what changes\n"
		"  rls [--addr HOST:PORT] [--hits N] DOMAIN KEY=VALUE[,KEY=VALUE...] [DESCRIPTOR]...\n"
		"                        Envoy's ShouldRateLimit on the first grpc listener\n"
		"  health [--addr HOST:PORT] [SERVICE]         gRPC health Check there\n"
		"options:\n"
		"  -s, --address ADDR    host:port, [v6]:port or unix:PATH of a line listener\n"
		"                        (default: from the config file, else %s;\n"
		"                        admin commands %s)\n"
		"      --addr HOST:PORT  the gRPC listener of rls and health (before or after\n"
		"                        the command)\n"
		"  -c, --config FILE     the daemon's config (default %s)\n"
		"  -p, --pid-file FILE   the daemon's pid file, for reload (default %s;\n"
		"                        without one, `systemctl reload ratelimitd`)\n"
		"  -j, --json            print one JSON object\n"
		"  -T, --timeout DUR     give up after DUR (default 5s; 500ms, 2s...)\n"
		"  -w, --wait DUR        allow: wait up to DUR (at most 60s) for a delayed slot\n"
		"                        (WAIT; the timeout is counted after it)\n"
		"  -k, --token-file FILE AUTH with the token in FILE first (a listener with\n"
		"                        auth: required; default: RATELIMITCTL_TOKEN, if set);\n"
		"                        rls and health send it as gRPC authorization\n"
		"      --tls             TLS to the listener (on by itself when the config's\n"
		"                        listener has tls, or with --cacert, --cert)\n"
		"      --cacert FILE     trust the CAs in FILE (default: the system's)\n"
		"      --cert FILE, --key FILE\n"
		"                        a client certificate (client_certs, identities'\n"
		"                        cert_name)\n"
		"      --servername NAME verify the listener's certificate as NAME (default:\n"
		"                        the address's host)\n"
		"  -V, --version, -h, --help\n"
		"exit status: 0 allowed or done, 1 denied or an invalid config, 2 error\n",
		CTL_DEFAULT_ADDRESS, CTL_DEFAULT_ADMIN_ADDRESS, CONFIG_DEFAULT_PATH,
		CTL_DEFAULT_PID_FILE);
}

/* -- output */

static int print_err_reply(struct ctl *c, const struct line_reply *r)
{
	fprintf(stderr, "ratelimitctl: %.*s%s%.*s\n", (int)r->code.len, r->code.p,
		r->message.len ? ": " : "", (int)r->message.len, r->message.p);
	if (c->x.json) {
		printf("{\"command\":");
		ctl_json_cstr(c->x.command);
		printf(",\"result\":\"error\",\"error\":");
		ctl_json_str(r->code.p, r->code.len);
		printf(",\"message\":");
		ctl_json_str(r->message.p, r->message.len);
		printf("}\n");
	}
	return CTL_EXIT_ERROR;
}

static void print_seconds(const char *what, int64_t ms)
{
	if (ms < 0)
		printf("; %s never", what);
	else if (ms % 1000 == 0)
		printf("; %s in %llds", what, (long long)(ms / 1000));
	else
		printf("; %s in %.3fs", what, (double)ms / 1000);
}

static int print_decision(struct ctl *c, const struct line_reply *r)
{
	int allowed = r->kind == LINE_REPLY_ALLOWED;
	int fallback = line_reply_is_fallback(r);
	if (c->x.json) {
		printf("{\"command\":");
		ctl_json_cstr(c->x.command);
		printf(",\"result\":\"%s\",\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,"
		       "\"retry_after_ms\":%lld,\"reset_ms\":%lld,\"fallback\":%s",
		       allowed ? "allowed" : "denied", allowed ? "true" : "false",
		       (long long)r->limit, (long long)r->remaining, (long long)r->retry_after_ms,
		       (long long)r->reset_ms, fallback ? "true" : "false");
		if (r->pair >= 0)
			printf(",\"pair\":%lld", (long long)r->pair);
		if (r->lease.len) { /* a lease's id, or a hold's */
			printf(",\"%s\":", strcmp(c->x.command, "hold") ? "lease" : "hold");
			ctl_json_str(r->lease.p, r->lease.len);
		}
		printf("}\n");
	} else {
		/* an override's fixed answers have no counts to show (-1, never) */
		int fixed = fallback || line_reply_is_unlimited(r) || line_reply_is_blocked(r);
		printf("%s", allowed ? "allowed" : "denied");
		if (fallback)
			printf(" (the store did not decide: on_store_error's answer; limit %lld)",
			       (long long)r->limit);
		else if (line_reply_is_unlimited(r))
			printf(" (unlimited)");
		else if (line_reply_is_blocked(r))
			printf(" (blocked; limit %lld)", (long long)r->limit);
		else
			printf(" (%lld of %lld remaining", (long long)r->remaining,
			       (long long)r->limit);
		if (!fixed) {
			if (!allowed)
				print_seconds("retry", r->retry_after_ms);
			print_seconds("full again", r->reset_ms);
			printf(")");
		}
		if (r->pair > 0)
			printf(" decided by pair %lld", (long long)r->pair);
		if (r->lease.len)
			printf(" %s %.*s", strcmp(c->x.command, "hold") ? "lease" : "hold",
			       (int)r->lease.len, r->lease.p);
		printf("\n");
	}
	return allowed ? CTL_EXIT_OK : CTL_EXIT_DENIED;
}

static int print_done(struct ctl *c, const char *word)
{
	if (c->x.json) {
		printf("{\"command\":");
		ctl_json_cstr(c->x.command);
		printf(",\"result\":\"%s\"}\n", word);
	} else {
		printf("%s\n", word);
	}
	return CTL_EXIT_OK;
}

/* -- the connection */

/* Reads one reply line into *r (its strings point into c->in until the next
 * call). 0, or -1 with an error printed. */
static int read_reply(struct ctl *c, struct line_reply *r)
{
	memmove(c->in, c->in + c->consumed, c->in_len - c->consumed);
	c->in_len -= c->consumed;
	c->consumed = 0;
	for (;;) {
		char *nl = memchr(c->in, '\n', c->in_len);
		if (nl) {
			size_t len = (size_t)(nl - c->in);
			c->consumed = len + 1;
			if (line_reply_parse(c->in, len, r) < 0)
				return ctl_failed(
					&c->x, "protocol", "not a ratelimitd reply from %s: %.*s",
					c->x.address, (int)(len > 200 ? 200 : len), c->in);
			return 0;
		}
		if (c->in_len == sizeof(c->in))
			return ctl_failed(&c->x, "protocol", "reply line from %s too long",
					  c->x.address);
		long n = ctl_recv(&c->x, c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
		if (n < 0)
			return -1;
		c->in_len += (size_t)n;
	}
}

/* Sends one request (words joined by spaces) and reads its reply. */
static int request(struct ctl *c, const char *verb, char **args, int nargs, struct line_reply *r)
{
	char line[8192];
	size_t n = (size_t)snprintf(line, sizeof(line), "%s", verb);
	for (int i = 0; i < nargs; i++) {
		size_t len = strlen(args[i]); /* no blank: run() checked */
		if (n + 1 + len + 1 >= sizeof(line))
			return ctl_fail(&c->x, "usage", "request too long");
		line[n++] = ' ';
		memcpy(line + n, args[i], len);
		n += len;
	}
	line[n++] = '\n';
	if (ctl_send_all(&c->x, c->fd, line, n) < 0 || read_reply(c, r) < 0)
		return CTL_EXIT_ERROR;
	return CTL_EXIT_OK;
}

/* The token of -k (the file's first line), else RATELIMITCTL_TOKEN: sent
 * with AUTH before the command. 0 (also when there is none), -1 printed. */
static int authenticate(struct ctl *c)
{
	char tok[4100];
	int have = ctl_token(&c->x, tok, sizeof(tok));
	if (have <= 0)
		return have;
	char *args[1] = {tok};
	struct line_reply r;
	int rc = request(c, "AUTH", args, 1, &r);
	memset(tok, 0, sizeof(tok));
	if (rc != CTL_EXIT_OK)
		return -1;
	if (r.kind == LINE_REPLY_ERR) {
		print_err_reply(c, &r);
		return -1;
	}
	if (r.kind != LINE_REPLY_OK)
		return ctl_failed(&c->x, "protocol", "unexpected reply to AUTH");
	return 0;
}

/* -- commands */

/* A request answered with a decision (ALLOW, PEEK, MALLOW, MPEEK;
 * ACQUIRE and RENEW with the lease's id), printed. */
static int decision_request(struct ctl *c, const char *verb, char **args, int nargs)
{
	struct line_reply r;
	if (request(c, verb, args, nargs, &r) != 0)
		return CTL_EXIT_ERROR;
	if (r.kind == LINE_REPLY_ERR)
		return print_err_reply(c, &r);
	if (r.kind != LINE_REPLY_ALLOWED && r.kind != LINE_REPLY_DENIED)
		return ctl_fail(&c->x, "protocol", "unexpected reply to %s", verb);
	return print_decision(c, &r);
}

/* acquire USER ACTION [COST]; renew LEASE-ID */
static int cmd_lease(struct ctl *c, const char *verb, char **args, int nargs, int min, int max,
		     const char *usage_text)
{
	if (nargs < min || nargs > max)
		return ctl_fail(&c->x, "usage", "usage: %s %s", c->x.command, usage_text);
	return decision_request(c, verb, args, nargs);
}

static int cmd_decide(struct ctl *c, int peek, char **args, int nargs)
{
	if (nargs < 2) /* pairs, then a cost when the count is odd */
		return ctl_fail(&c->x, "usage", "usage: %s USER ACTION [USER ACTION]... [COST]",
				c->x.command);
	int pairs = nargs / 2;
	const char *verb = pairs > 1 ? (peek ? "MPEEK" : "MALLOW") : (peek ? "PEEK" : "ALLOW");
	if (c->wait_ms >= 0) {
		if (peek || pairs > 1)
			return ctl_fail(&c->x, "usage",
					"--wait goes with allow USER ACTION [COST] (one pair)");
		/* ALLOW ... WAIT <ms>: the daemon may answer ALLOWED later */
		char ms[24], *wargs[5];
		snprintf(ms, sizeof(ms), "%lld", (long long)c->wait_ms);
		for (int i = 0; i < nargs; i++)
			wargs[i] = args[i];
		wargs[nargs] = "WAIT";
		wargs[nargs + 1] = ms;
		return decision_request(c, verb, wargs, nargs + 2);
	}
	return decision_request(c, verb, args, nargs);
}

/* A window's bound (Unix ms) as UTC: 2026-12-01T00:00:00Z. */
static void print_time(int64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char s[32];
	if (!gmtime_r(&t, &tm) || !strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(s, sizeof(s), "%lld ms", (long long)ms);
	printf("%s", s);
}

/* state USER ACTION: STATE's limits, a line each (or JSON). */
static int cmd_state(struct ctl *c, char **args, int nargs)
{
	if (nargs != 2)
		return ctl_fail(&c->x, "usage", "usage: state USER ACTION");
	struct line_reply r;
	if (request(c, "STATE", args, nargs, &r) != 0)
		return CTL_EXIT_ERROR;
	if (r.kind == LINE_REPLY_ERR)
		return print_err_reply(c, &r);
	if (r.kind != LINE_REPLY_STATE)
		return ctl_fail(&c->x, "protocol", "unexpected reply to STATE");
	static const char *const keys[7] = {"window_ms", "limit",    "used",  "remaining",
					    "reset_ms",	 "start_ms", "end_ms"};
	if (c->x.json) {
		printf("{\"command\":\"state\",\"result\":\"ok\",\"algorithm\":");
		ctl_json_str(r.algorithm.p, r.algorithm.len);
		printf(",\"override\":");
		ctl_json_str(r.override.p, r.override.len);
		printf(",\"ban_ms\":%lld,\"limits\":[", (long long)r.ban_ms);
		for (int i = 0; i < r.nlimits; i++) {
			for (int j = 0; j < 7; j++)
				printf("%s\"%s\":%lld",
				       j   ? ","
				       : i ? ",{"
					   : "{",
				       keys[j], (long long)r.limits[i][j]);
			printf("}");
		}
		printf("]}\n");
		return CTL_EXIT_OK;
	}
	printf("%.*s", (int)r.algorithm.len, r.algorithm.p);
	if (!(r.override.len == 4 && !memcmp(r.override.p, "none", 4)))
		printf(" (override: %.*s)", (int)r.override.len, r.override.p);
	if (r.ban_ms > 0)
		print_seconds("banned: free", r.ban_ms);
	printf("\n");
	for (int i = 0; i < r.nlimits; i++) {
		const int64_t *l = r.limits[i];
		if (l[0] % 1000 == 0)
			printf("  %lld per %llds", (long long)l[1], (long long)(l[0] / 1000));
		else
			printf("  %lld per %.3fs", (long long)l[1], (double)l[0] / 1000);
		printf(": %lld used, %lld remaining", (long long)l[2], (long long)l[3]);
		print_seconds("full again", l[4]);
		if (l[6] > 0) {
			printf("; window ");
			print_time(l[5]);
			printf(" to ");
			print_time(l[6]);
		}
		printf("\n");
	}
	return CTL_EXIT_OK;
}

static int cmd_simple(struct ctl *c, const char *verb, char **args, int nargs, int min, int max,
		      const char *usage_text)
{
	if (nargs < min || nargs > max)
		return ctl_fail(&c->x, "usage", "usage: %s %s", c->x.command, usage_text);
	struct line_reply r;
	if (request(c, verb, args, nargs, &r) != 0)
		return CTL_EXIT_ERROR;
	if (r.kind == LINE_REPLY_ERR)
		return print_err_reply(c, &r);
	if (r.kind == LINE_REPLY_OK)
		return print_done(c, "ok");
	if (r.kind == LINE_REPLY_PONG)
		return print_done(c, "pong");
	return ctl_fail(&c->x, "protocol", "unexpected reply to %s", verb);
}

static int cmd_overrides(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return ctl_fail(&c->x, "usage", "usage: overrides");
	for (int64_t i = 0; i < CTL_OVERRIDES_MAX; i++) {
		char idx[24];
		char *arg = idx;
		snprintf(idx, sizeof(idx), "%lld", (long long)i);
		struct line_reply r;
		if (request(c, "OVERRIDES", &arg, 1, &r) != 0)
			return CTL_EXIT_ERROR;
		if (r.kind == LINE_REPLY_ERR && i == 0)
			return print_err_reply(c, &r); /* forbidden, typically */
		if (c->x.json && i == 0) /* the object opens once the listing is allowed */
			printf("{\"command\":\"overrides\",\"result\":\"ok\",\"overrides\":[");
		if (r.kind == LINE_REPLY_END) {
			if (c->x.json)
				printf("],\"count\":%lld}\n", (long long)i);
			return CTL_EXIT_OK;
		}
		if (r.kind != LINE_REPLY_OVERRIDE || r.index != i) {
			if (c->x.json) /* the listing so far, marked incomplete */
				printf("],\"count\":%lld,\"complete\":false}\n", (long long)i);
			c->x.json = 0;
			if (r.kind == LINE_REPLY_ERR)
				return print_err_reply(c, &r);
			return ctl_fail(&c->x, "protocol", "unexpected reply to OVERRIDES %lld",
					(long long)i);
		}
		if (c->x.json) {
			printf("%s{\"user\":", i ? "," : "");
			ctl_json_str(r.user.p, r.user.len);
			printf(",\"action\":");
			ctl_json_str(r.action.p, r.action.len);
			printf(",\"spec\":");
			ctl_json_str(r.spec.p, r.spec.len);
			printf(",\"ttl_ms\":%lld}", (long long)r.ttl_ms);
		} else {
			printf("%.*s %.*s %.*s", (int)r.user.len, r.user.p, (int)r.action.len,
			       r.action.p, (int)r.spec.len, r.spec.p);
			if (r.ttl_ms >= 0)
				printf(" ttl=%.3fs", (double)r.ttl_ms / 1000);
			printf("\n");
		}
	}
	return ctl_fail(&c->x, "protocol", "more than %d overrides", CTL_OVERRIDES_MAX);
}

/* top ACTION [N] [denied|requests]: TOP ACTION 0, 1, ... until END or N
 * users (default 10), as a table or JSON. */
static int cmd_top(struct ctl *c, char **args, int nargs)
{
	static const char usage_top[] = "usage: top ACTION [N] [denied|requests] (N 1 to 32)";
	int64_t n = 10;
	int by_requests = 0;
	for (int i = 1; i < nargs; i++) {
		if (!strcmp(args[i], "requests") || !strcmp(args[i], "denied"))
			by_requests = args[i][0] == 'r';
		else if (decimal_parse(args[i], strlen(args[i]), 32, &n) < 0 || n < 1)
			return ctl_fail(&c->x, "usage", "%s", usage_top);
	}
	if (nargs < 1 || nargs > 3)
		return ctl_fail(&c->x, "usage", "%s", usage_top);
	for (int64_t i = 0; i <= n; i++) {
		char idx[24];
		char *targs[3] = {args[0], idx, "REQUESTS"};
		snprintf(idx, sizeof(idx), "%lld", (long long)i);
		struct line_reply r;
		if (i == n) { /* the totals come with END: ask one past the last */
			snprintf(idx, sizeof(idx), "%d", 1000000);
		}
		if (request(c, "TOP", targs, by_requests ? 3 : 2, &r) != 0)
			return CTL_EXIT_ERROR;
		if (r.kind == LINE_REPLY_ERR && i == 0)
			return print_err_reply(c, &r); /* forbidden, an unknown action */
		if (i == 0) {
			if (c->x.json) {
				printf("{\"command\":\"top\",\"result\":\"ok\",\"action\":");
				ctl_json_str(args[0], strlen(args[0]));
				printf(",\"by\":\"%s\",\"users\":[",
				       by_requests ? "requests" : "denied");
			} else {
				printf("%-5s %-32s %10s %10s %8s\n", "rank", "user", "denied",
				       "requests", "max over");
			}
		}
		if (r.kind == LINE_REPLY_END && r.requests >= 0) {
			if (c->x.json)
				printf("],\"requests\":%lld,\"denied\":%lld,\"window_s\":60}\n",
				       (long long)r.requests, (long long)r.denied);
			else
				printf("%s: %lld requests, %lld denied in about the last minute "
				       "(estimates)\n",
				       args[0], (long long)r.requests, (long long)r.denied);
			return CTL_EXIT_OK;
		}
		if (r.kind != LINE_REPLY_TOP || r.index != i) {
			if (c->x.json)
				printf("],\"complete\":false}\n");
			c->x.json = 0;
			if (r.kind == LINE_REPLY_ERR)
				return print_err_reply(c, &r);
			return ctl_fail(&c->x, "protocol", "unexpected reply to TOP %lld",
					(long long)i);
		}
		if (c->x.json) {
			printf("%s{\"user\":", i ? "," : "");
			ctl_json_str(r.user.p, r.user.len);
			printf(",\"denied\":%lld,\"requests\":%lld,\"over\":%lld}",
			       (long long)r.denied, (long long)r.requests, (long long)r.over);
		} else {
			printf("%-5lld %-32.*s %10lld %10lld %8lld\n", (long long)i + 1,
			       (int)r.user.len, r.user.p, (long long)r.denied,
			       (long long)r.requests, (long long)r.over);
		}
	}
	return ctl_fail(&c->x, "protocol", "TOP never ended");
}

static int cmd_check_config(struct ctl *c, char **args, int nargs)
{
	if (nargs > 1)
		return ctl_fail(&c->x, "usage", "usage: check-config [FILE]");
	const char *path = nargs ? args[0] : c->config_path;
	struct config *cfg = ctl_load_config(&c->x, path);
	if (!cfg)
		return CTL_EXIT_DENIED;
	config_unref(cfg);
	if (c->x.json) {
		printf("{\"command\":\"check-config\",\"result\":\"ok\",\"file\":");
		ctl_json_cstr(path);
		printf("}\n");
	} else {
		printf("configuration OK\n");
	}
	return CTL_EXIT_OK;
}

/* envoy.config's rules that count: each is a policy of its own, whose
 * name (made from its path, docs/envoy.md) PEEK and RESET take. */
struct envoy_listing {
	struct ctl *c;
	int pass; /* JSON: 0 the names, 1 the rules */
	size_t n;
};

static void print_envoy_rule(void *arg, const char *domain, const char *path, size_t path_len,
			     const struct envoy_limit *l)
{
	struct envoy_listing *e = arg;
	if (!e->c->x.json) {
		printf("%s (envoy domain %s, descriptor %.*s: %u per %s%s)\n", l->policy.name,
		       domain, (int)path_len, path, l->requests_per_unit, envoy_unit_name(l->unit),
		       l->shadow ? ", shadow_mode" : "");
	} else if (e->pass == 0) {
		if (e->n++)
			putchar(',');
		ctl_json_cstr(l->policy.name);
	} else {
		printf("%s{\"policy\":", e->n++ ? "," : "");
		ctl_json_cstr(l->policy.name);
		printf(",\"domain\":");
		ctl_json_cstr(domain);
		printf(",\"descriptor\":");
		ctl_json_str(path, path_len);
		printf(",\"requests_per_unit\":%u,\"unit\":\"%s\",\"shadow\":%s}",
		       l->requests_per_unit, envoy_unit_name(l->unit),
		       l->shadow ? "true" : "false");
	}
}

static int cmd_policies(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return ctl_fail(&c->x, "usage", "usage: policies");
	struct config *cfg = ctl_load_config(&c->x, c->config_path);
	if (!cfg)
		return CTL_EXIT_ERROR;
	if (c->x.json)
		printf("{\"command\":\"policies\",\"result\":\"ok\",\"policies\":[");
	for (size_t i = 0; i < cfg->npolicies; i++) {
		if (c->x.json) {
			if (i)
				putchar(',');
			ctl_json_cstr(cfg->policies[i].name);
		} else {
			printf("%s\n", cfg->policies[i].name);
		}
	}
	struct envoy_listing e = {c, 0, cfg->npolicies};
	envoy_rules_each(cfg->envoy.rules, print_envoy_rule, &e);
	if (c->x.json) {
		printf("],\"envoy_rules\":[");
		e.pass = 1;
		e.n = 0;
		envoy_rules_each(cfg->envoy.rules, print_envoy_rule, &e);
		printf("]}\n");
	}
	config_unref(cfg);
	return CTL_EXIT_OK;
}

/* The pid in a pid file, if that process is a ratelimitd: >0, or -1 with
 * an error printed. */
static long read_pid(struct ctl *c, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return ctl_failed(&c->x, "reload", "cannot read the pid file %s: %s", path,
				  strerror(errno));
	char buf[32] = {0};
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	char *end;
	errno = 0;
	long pid = strtol(buf, &end, 10);
	if (n == 0 || errno || pid <= 0 || end == buf || (*end && *end != '\n'))
		return ctl_failed(&c->x, "reload", "%s holds no pid", path);
	/* a stale file may name a pid reused by another program */
	char comm_path[64], comm[64] = {0};
	snprintf(comm_path, sizeof(comm_path), "/proc/%ld/comm", pid);
	f = fopen(comm_path, "r");
	if (!f)
		return ctl_failed(&c->x, "reload", "no process %ld (stale pid file %s?)", pid,
				  path);
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	if (strcmp(comm, "ratelimitd") != 0)
		return ctl_failed(&c->x, "reload", "process %ld of %s is %s, not ratelimitd", pid,
				  path, comm);
	return pid;
}

/* `systemctl reload ratelimitd`, waited for: its output goes to stderr, so
 * that stdout holds our own answer alone (--json). */
static int reload_by_systemctl(struct ctl *c, const char *pid_file)
{
	char *argv[] = {"systemctl", "reload", "ratelimitd", NULL};
	posix_spawn_file_actions_t fa;
	pid_t pid;
	/* an ignored SIGCHLD (inherited) would reap it and hide its status */
	signal(SIGCHLD, SIG_DFL);
	fflush(stdout);
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
	if (rc == 0)
		rc = posix_spawnp(&pid, "systemctl", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return ctl_fail(&c->x, "reload", "no pid file %s, and cannot run systemctl: %s",
				pid_file, strerror(rc));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return ctl_fail(&c->x, "reload", "waiting for systemctl: %s",
					strerror(errno));
	if (WIFSIGNALED(status))
		return ctl_fail(&c->x, "reload", "systemctl reload ratelimitd: killed by signal %d",
				WTERMSIG(status));
	if (WEXITSTATUS(status) != 0)
		return ctl_fail(&c->x, "reload", "systemctl reload ratelimitd: exit status %d",
				WEXITSTATUS(status));
	if (c->x.json)
		printf("{\"command\":\"reload\",\"result\":\"ok\",\"via\":\"systemctl\"}\n");
	else
		printf("reload done by systemctl (no pid file %s); the daemon logs the outcome\n",
		       pid_file);
	return CTL_EXIT_OK;
}

static int cmd_reload(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return ctl_fail(&c->x, "usage", "usage: reload");
	/* as the unit's ExecReload: a bad file fails here, visibly, and the
	 * daemon is not asked (it would keep its old config anyway) */
	struct config *cfg = ctl_load_config(&c->x, c->config_path);
	if (!cfg)
		return CTL_EXIT_DENIED;
	config_unref(cfg);
	const char *pid_file = c->pid_file ? c->pid_file : CTL_DEFAULT_PID_FILE;
	if (!c->pid_file && access(pid_file, F_OK) < 0)
		return reload_by_systemctl(c, pid_file); /* a daemon systemd runs without one */
	long pid = read_pid(c, pid_file);
	if (pid < 0)
		return CTL_EXIT_ERROR;
	if (kill((pid_t)pid, SIGHUP) < 0)
		return ctl_fail(&c->x, "reload", "cannot signal pid %ld: %s", pid, strerror(errno));
	if (c->x.json) {
		printf("{\"command\":\"reload\",\"result\":\"ok\",\"pid\":%ld}\n", pid);
	} else {
		printf("reload signalled to ratelimitd (pid %ld); the daemon logs the outcome\n",
		       pid);
	}
	return CTL_EXIT_OK;
}

static int is_admin_command(const char *cmd)
{
	return !strcmp(cmd, "reset") || !strcmp(cmd, "override") || !strcmp(cmd, "unoverride") ||
	       !strcmp(cmd, "overrides") || !strcmp(cmd, "top");
}


/* The commands a person types, for nearest_command. */
static const char *const commands[] = {
	"allow",     "peek",   "state",	 "reset",   "override",	    "unoverride",
	"overrides", "top",    "ping",	 "acquire", "release",	    "renew",
	"charge",    "hold",   "settle", "cancel",  "check-config", "policies",
	"reload",    "replay", "rls",	 "health",
};

/* The one command a typo of cmd is nearest to (at most 2 edits), or NULL. */
static const char *nearest_command(const char *cmd)
{
	const char *best = NULL;
	size_t best_d = 3;
	int ties = 0;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		size_t e = edits_between(cmd, strlen(cmd), commands[i], 2);
		if (e < best_d) {
			best_d = e;
			best = commands[i];
			ties = 0;
		} else if (e == best_d) {
			ties++;
		}
	}
	return best && !ties ? best : NULL;
}

static int run(struct ctl *c, char **args, int nargs)
{
	const char *cmd = c->x.command;
	if (!strcmp(cmd, "check-config"))
		return cmd_check_config(c, args, nargs);
	if (!strcmp(cmd, "policies"))
		return cmd_policies(c, nargs);
	if (!strcmp(cmd, "reload"))
		return cmd_reload(c, nargs);
	if (!strcmp(cmd, "replay"))
		return ctl_replay(&c->x, args, nargs); /* in this process: no daemon */
	if (!strcmp(cmd, "rls") || !strcmp(cmd, "health")) {
		/* gRPC, not the line protocol: ctl_grpc.c, which finds its own listener */
		if (c->x.address)
			return ctl_fail(&c->x, "usage", "-s names a line listener; %s takes --addr",
					cmd);
		c->x.address = c->grpc_addr; /* an --addr after the command overrides it */
		return ctl_grpc(&c->x, c->config_path, args, nargs);
	}
	if (c->grpc_addr)
		return ctl_fail(&c->x, "usage",
				"--addr names a gRPC listener (rls, health); %s takes -s ADDRESS",
				cmd);
	int known = !strcmp(cmd, "allow") || !strcmp(cmd, "peek") || !strcmp(cmd, "state") ||
		    !strcmp(cmd, "ping") || !strcmp(cmd, "acquire") || !strcmp(cmd, "release") ||
		    !strcmp(cmd, "renew") || !strcmp(cmd, "charge") || !strcmp(cmd, "hold") ||
		    !strcmp(cmd, "settle") || !strcmp(cmd, "cancel") || is_admin_command(cmd);
	if (!known) {
		/* one line, with the command meant if it is a typo away, not
		 * the whole usage (which --help prints) */
		const char *near = nearest_command(cmd);
		if (near)
			return ctl_fail(&c->x, "usage",
					"unknown command %s: did you mean %s? (--help "
					"lists them)",
					cmd, near);
		return ctl_fail(&c->x, "usage", "unknown command %s (--help lists them)", cmd);
	}

	/* refused before connecting: the line protocol splits at blanks */
	for (int i = 0; i < nargs; i++)
		if (!args[i][0] || strpbrk(args[i], " \t\r\n"))
			return ctl_fail(
				&c->x, "usage",
				"argument %d (%s) is empty or has a blank: the line protocol "
				"splits at blanks",
				i + 1, args[i]);

	/* -s, else the environment, else the config file's (or a default) */
	const char *env = getenv("RATELIMITCTL_ADDRESS");
	if (!c->x.address && env && *env) {
		c->x.address = env;
		snprintf(c->x.why, sizeof(c->x.why), "from RATELIMITCTL_ADDRESS");
	}
	int admin = is_admin_command(cmd);
	if (ctl_choose_address(&c->x, c->config_path,
			       admin ? CTL_LISTENER_ADMIN : CTL_LISTENER_LINE,
			       admin ? CTL_DEFAULT_ADMIN_ADDRESS : CTL_DEFAULT_ADDRESS, "-s") < 0)
		return CTL_EXIT_ERROR;
	c->fd = ctl_connect(&c->x, 1);
	if (c->fd < 0)
		return CTL_EXIT_ERROR;
	if (authenticate(c) < 0)
		return CTL_EXIT_ERROR;

	if (!strcmp(cmd, "allow") || !strcmp(cmd, "peek"))
		return cmd_decide(c, cmd[0] == 'p', args, nargs);
	if (!strcmp(cmd, "state"))
		return cmd_state(c, args, nargs);
	if (!strcmp(cmd, "ping"))
		return cmd_simple(c, "PING", args, nargs, 0, 0, "");
	if (!strcmp(cmd, "charge"))
		return cmd_lease(c, "CHARGE", args, nargs, 3, 3, "USER ACTION COST");
	if (!strcmp(cmd, "hold"))
		return cmd_lease(c, "HOLD", args, nargs, 3, 3, "USER ACTION ESTIMATE");
	if (!strcmp(cmd, "settle"))
		return cmd_lease(c, "SETTLE", args, nargs, 2, 2, "HOLD-ID ACTUAL");
	if (!strcmp(cmd, "cancel"))
		return cmd_simple(c, "CANCEL", args, nargs, 1, 1, "HOLD-ID");
	if (!strcmp(cmd, "acquire"))
		return cmd_lease(c, "ACQUIRE", args, nargs, 2, 3, "USER ACTION [COST]");
	if (!strcmp(cmd, "renew"))
		return cmd_lease(c, "RENEW", args, nargs, 1, 1, "LEASE-ID");
	if (!strcmp(cmd, "release"))
		return cmd_simple(c, "RELEASE", args, nargs, 1, 1, "LEASE-ID");
	if (!strcmp(cmd, "reset"))
		return cmd_simple(c, "RESET", args, nargs, 2, 2, "USER ACTION");
	if (!strcmp(cmd, "override"))
		return cmd_simple(c, "OVERRIDE", args, nargs, 3, 4, "USER ACTION SPEC [TTL]");
	if (!strcmp(cmd, "unoverride"))
		return cmd_simple(c, "UNOVERRIDE", args, nargs, 2, 2, "USER ACTION");
	if (!strcmp(cmd, "top"))
		return cmd_top(c, args, nargs);
	return cmd_overrides(c, nargs);
}

int main(int argc, char **argv)
{
	struct ctl c = {.x = {.timeout_ms = 5000},
			.config_path = CONFIG_DEFAULT_PATH,
			.fd = -1,
			.wait_ms = -1};
	static const struct option longopts[] = {
		{"address", required_argument, NULL, 's'},
		/* its own entry: else getopt takes --addr for an abbreviated --address */
		{"addr", required_argument, NULL, OPT_ADDR},
		{"config", required_argument, NULL, 'c'},
		{"pid-file", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 'T'},
		{"wait", required_argument, NULL, 'w'},
		{"token-file", required_argument, NULL, 'k'},
		{"tls", no_argument, NULL, OPT_TLS},
		{"cacert", required_argument, NULL, OPT_CACERT},
		{"cert", required_argument, NULL, OPT_CERT},
		{"key", required_argument, NULL, OPT_KEY},
		{"servername", required_argument, NULL, OPT_SERVERNAME},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;
	char why[128];
	/* "+": options end at the command, so a user may begin with '-' */
	while ((opt = getopt_long(argc, argv, "+s:c:p:jT:w:k:Vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'k':
			c.x.token_file = optarg;
			break;
		case OPT_TLS:
			c.x.tls = 1;
			break;
		case OPT_CACERT:
			c.x.tls = 1;
			c.x.ca_file = optarg;
			break;
		case OPT_CERT:
			c.x.tls = 1;
			c.x.cert_file = optarg;
			break;
		case OPT_KEY:
			c.x.key_file = optarg;
			break;
		case OPT_SERVERNAME:
			c.x.server_name = optarg;
			break;
		case 's':
			c.x.address = optarg;
			break;
		case OPT_ADDR:
			c.grpc_addr = optarg;
			break;
		case 'c':
			c.config_path = optarg;
			break;
		case 'p':
			c.pid_file = optarg;
			break;
		case 'j':
			c.x.json = 1;
			break;
		case 'T':
			if (policy_parse_duration(optarg, strlen(optarg), &c.x.timeout_ms, why,
						  sizeof(why)) < 0 ||
			    c.x.timeout_ms <= 0)
				return ctl_fail(&c.x, "usage", "bad --timeout %s: %s", optarg,
						c.x.timeout_ms <= 0 ? "must be more than 0" : why);
			break;
		case 'w':
			if (policy_parse_duration(optarg, strlen(optarg), &c.wait_ms, why,
						  sizeof(why)) < 0 ||
			    c.wait_ms > 60000)
				return ctl_fail(&c.x, "usage", "bad --wait %s: %s", optarg,
						c.wait_ms > 60000 ? "at most 60s" : why);
			break;
		case 'V':
			printf("ratelimitctl %s\n", RATELIMITD_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return CTL_EXIT_ERROR;
		}
	}
	if (optind == argc) {
		usage(stderr);
		return CTL_EXIT_ERROR;
	}
	if (!c.x.cert_file != !c.x.key_file)
		return ctl_fail(&c.x, "usage", "--cert and --key go together");
	if (c.wait_ms > 0) /* a delayed answer comes up to the wait later */
		c.x.timeout_ms += c.wait_ms;
	c.x.command = argv[optind];
	int rc = run(&c, argv + optind + 1, argc - optind - 1);
	ctl_close(&c.x, c.fd);
	fflush(stdout);
	return rc;
}
