/*
 * ratelimitctl - the operator's client of ratelimitd: asks a running daemon
 * over the line protocol (allow, peek, reset, overrides, ping), checks a
 * configuration file with the daemon's own loader, and tells the daemon to
 * reload. Exit codes a script can use: 0 allowed / done, 1 denied (or an
 * invalid file), 2 error. See man/ratelimitctl.1.scd.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "config.h"
#include "ctl_grpc.h"
#include "envoy_rules.h"
#include "line_reply.h"
#include "policy.h"

#define EXIT_ALLOWED 0
#define EXIT_DENIED 1
#define EXIT_ERROR 2

/* Where the systemd unit has the daemon write its pid (RuntimeDirectory). */
#define CTL_DEFAULT_PID_FILE "/run/ratelimitd/ratelimitd.pid"
#define CTL_DEFAULT_ADDRESS "127.0.0.1:7379"
#define CTL_DEFAULT_ADMIN_ADDRESS "127.0.0.1:7380"
#define CTL_REPLY_MAX 2048
/* OVERRIDES answers one item per request: a bound on a listing's length */
#define CTL_OVERRIDES_MAX 1000000

struct ctl {
	const char *address; /* -s; NULL: from the config file, else the defaults */
	const char *config_path;
	int config_given;
	const char *pid_file; /* -p; NULL: the default, else systemctl */
	int json;
	int64_t timeout_ms;
	const char *command;
	int fd;
	int64_t deadline_ms;
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
		"  reset USER ACTION                           forget a user's state (admin)\n"
		"  override USER ACTION SPEC [TTL]             set a run-time override (admin)\n"
		"  unoverride USER ACTION                      clear it (admin)\n"
		"  overrides                                   list run-time overrides (admin)\n"
		"  ping                                        is the daemon answering?\n"
		"  check-config [FILE]                         ratelimitd -t on FILE\n"
		"  policies                                    the config file's policy names\n"
		"  reload                                      check the config, then SIGHUP\n"
		"  rls [--addr HOST:PORT] [--hits N] DOMAIN KEY=VALUE[,KEY=VALUE...] [DESCRIPTOR]...\n"
		"                        Envoy's ShouldRateLimit on the first grpc listener\n"
		"  health [--addr HOST:PORT] [SERVICE]         gRPC health Check there\n"
		"options:\n"
		"  -s, --address ADDR    host:port, [v6]:port or unix:PATH of a line listener\n"
		"                        (default: from the config file, else %s;\n"
		"                        admin commands %s)\n"
		"  -c, --config FILE     the daemon's config (default %s)\n"
		"  -p, --pid-file FILE   the daemon's pid file, for reload (default %s;\n"
		"                        without one, `systemctl reload ratelimitd`)\n"
		"  -j, --json            print one JSON object\n"
		"  -T, --timeout DUR     give up after DUR (default 5s; 500ms, 2s...)\n"
		"  -V, --version, -h, --help\n"
		"exit status: 0 allowed or done, 1 denied or an invalid config, 2 error\n",
		CTL_DEFAULT_ADDRESS, CTL_DEFAULT_ADMIN_ADDRESS, CONFIG_DEFAULT_PATH,
		CTL_DEFAULT_PID_FILE);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -- output */

/* A JSON string: bytes that are not UTF-8 are written as \u00XX (their
 * Latin-1 reading), so any user the daemon takes can be printed. */
static void json_str(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	putchar('"');
	for (size_t i = 0; i < len; i++) {
		unsigned c = p[i];
		if (c == '"' || c == '\\') {
			printf("\\%c", c);
		} else if (c < 0x20 || c == 0x7f) {
			printf("\\u%04x", c);
		} else if (c < 0x80) {
			putchar((int)c);
		} else {
			/* a whole UTF-8 sequence passes; a stray byte is escaped */
			size_t n = c >= 0xf0 && c < 0xf5   ? 4
				   : c >= 0xe0		   ? 3
				   : c >= 0xc2 && c < 0xe0 ? 2
							   : 0;
			size_t k = 1;
			while (n && k < n && i + k < len && (p[i + k] & 0xc0) == 0x80)
				k++;
			if (n && k == n) {
				fwrite(p + i, 1, n, stdout);
				i += n - 1;
			} else {
				printf("\\u%04x", c);
			}
		}
	}
	putchar('"');
}

static void json_cstr(const char *s)
{
	json_str(s, strlen(s));
}

/* An error the daemon did not send (usage, connection, timeout): on stderr,
 * and with --json also as {"result":"error"} on stdout. */
static void vfail(struct ctl *c, const char *code, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "ratelimitctl: %s\n", msg);
	if (c->json) {
		printf("{\"command\":");
		json_cstr(c->command ? c->command : "");
		printf(",\"result\":\"error\",\"error\":");
		json_cstr(code);
		printf(",\"message\":");
		json_cstr(msg);
		printf("}\n");
	}
}

/* vfail(), then the exit status. */
static int fail(struct ctl *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct ctl *c, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(c, code, fmt, ap);
	va_end(ap);
	return EXIT_ERROR;
}

/* vfail(), then -1: for the steps (connect, read, pid file) whose failure
 * their caller turns into the exit status. */
static int failed(struct ctl *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int failed(struct ctl *c, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(c, code, fmt, ap);
	va_end(ap);
	return -1;
}

static int print_err_reply(struct ctl *c, const struct line_reply *r)
{
	fprintf(stderr, "ratelimitctl: %.*s%s%.*s\n", (int)r->code.len, r->code.p,
		r->message.len ? ": " : "", (int)r->message.len, r->message.p);
	if (c->json) {
		printf("{\"command\":");
		json_cstr(c->command);
		printf(",\"result\":\"error\",\"error\":");
		json_str(r->code.p, r->code.len);
		printf(",\"message\":");
		json_str(r->message.p, r->message.len);
		printf("}\n");
	}
	return EXIT_ERROR;
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
	if (c->json) {
		printf("{\"command\":");
		json_cstr(c->command);
		printf(",\"result\":\"%s\",\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,"
		       "\"retry_after_ms\":%lld,\"reset_ms\":%lld,\"fallback\":%s",
		       allowed ? "allowed" : "denied", allowed ? "true" : "false",
		       (long long)r->limit, (long long)r->remaining, (long long)r->retry_after_ms,
		       (long long)r->reset_ms, fallback ? "true" : "false");
		if (r->pair >= 0)
			printf(",\"pair\":%lld", (long long)r->pair);
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
		printf("\n");
	}
	return allowed ? EXIT_ALLOWED : EXIT_DENIED;
}

static int print_done(struct ctl *c, const char *word)
{
	if (c->json) {
		printf("{\"command\":");
		json_cstr(c->command);
		printf(",\"result\":\"%s\"}\n", word);
	} else {
		printf("%s\n", word);
	}
	return EXIT_ALLOWED;
}

/* -- the connection */

static int connect_tcp(struct ctl *c, const char *address)
{
	char host[256];
	char port[16];
	int p;
	if (addr_split(address, host, sizeof(host), &p) < 0 || p <= 0 || p > 65535)
		return failed(c, "usage", "bad address %s: host:port, [v6]:port or unix:PATH",
			      address);
	/* a listener on every address is reached on loopback */
	if (strcmp(host, "0.0.0.0") == 0 || host[0] == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (strcmp(host, "::") == 0)
		snprintf(host, sizeof(host), "::1");
	snprintf(port, sizeof(port), "%d", p);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0)
		return failed(c, "connect", "%s: %s", address, gai_strerror(rc));
	int fd = -1, err = 0;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return failed(c, "connect", "cannot connect to %s: %s", address, strerror(err));
	return fd;
}

static int connect_unix(struct ctl *c, const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sun.sun_path))
		return failed(c, "usage", "unix socket path too long: %s", path);
	strcpy(sun.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return failed(c, "connect", "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 && errno != EINPROGRESS &&
	    errno != EAGAIN) {
		int e = errno;
		close(fd);
		return failed(c, "connect", "cannot connect to unix:%s: %s", path, strerror(e));
	}
	return fd;
}

/* Waits for fd to be ready for events before the deadline: 0, or -1 (an
 * error printed). */
static int wait_fd(struct ctl *c, short events)
{
	for (;;) {
		int64_t left = c->deadline_ms - now_ms();
		if (left <= 0)
			return failed(c, "timeout", "no answer from %s within %lldms", c->address,
				      (long long)c->timeout_ms);
		struct pollfd pfd = {.fd = c->fd, .events = events};
		int n = poll(&pfd, 1, (int)(left > 60000 ? 60000 : left));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return failed(c, "connect", "poll: %s", strerror(errno));
	}
}

static int ctl_connect(struct ctl *c)
{
	c->deadline_ms = now_ms() + c->timeout_ms;
	if (strncmp(c->address, "unix:", 5) == 0)
		c->fd = connect_unix(c, c->address + 5);
	else
		c->fd = connect_tcp(c, c->address);
	if (c->fd < 0)
		return -1;
	if (wait_fd(c, POLLOUT) < 0)
		return -1;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		fail(c, "connect", "cannot connect to %s: %s", c->address, strerror(err));
		return -1;
	}
	return 0;
}

static int send_all(struct ctl *c, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (wait_fd(c, POLLOUT) < 0)
				return -1;
		} else {
			return failed(c, "connect", "sending to %s: %s", c->address,
				      strerror(errno));
		}
	}
	return 0;
}

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
				return failed(c, "protocol", "not a ratelimitd reply from %s: %.*s",
					      c->address, (int)(len > 200 ? 200 : len), c->in);
			return 0;
		}
		if (c->in_len == sizeof(c->in))
			return failed(c, "protocol", "reply line from %s too long", c->address);
		ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
		if (n > 0) {
			c->in_len += (size_t)n;
		} else if (n == 0) {
			return failed(c, "connect", "%s closed the connection", c->address);
		} else if (errno == EAGAIN || errno == EINTR) {
			if (wait_fd(c, POLLIN) < 0)
				return -1;
		} else {
			return failed(c, "connect", "reading from %s: %s", c->address,
				      strerror(errno));
		}
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
			return fail(c, "usage", "request too long");
		line[n++] = ' ';
		memcpy(line + n, args[i], len);
		n += len;
	}
	line[n++] = '\n';
	if (send_all(c, line, n) < 0 || read_reply(c, r) < 0)
		return EXIT_ERROR;
	return EXIT_ALLOWED;
}

/* -- commands */

static int cmd_decide(struct ctl *c, int peek, char **args, int nargs)
{
	if (nargs < 2) /* pairs, then a cost when the count is odd */
		return fail(c, "usage", "usage: %s USER ACTION [USER ACTION]... [COST]",
			    c->command);
	int pairs = nargs / 2;
	const char *verb = pairs > 1 ? (peek ? "MPEEK" : "MALLOW") : (peek ? "PEEK" : "ALLOW");
	struct line_reply r;
	if (request(c, verb, args, nargs, &r) != 0)
		return EXIT_ERROR;
	if (r.kind == LINE_REPLY_ERR)
		return print_err_reply(c, &r);
	if (r.kind != LINE_REPLY_ALLOWED && r.kind != LINE_REPLY_DENIED)
		return fail(c, "protocol", "unexpected reply to %s", verb);
	return print_decision(c, &r);
}

static int cmd_simple(struct ctl *c, const char *verb, char **args, int nargs, int min, int max,
		      const char *usage_text)
{
	if (nargs < min || nargs > max)
		return fail(c, "usage", "usage: %s %s", c->command, usage_text);
	struct line_reply r;
	if (request(c, verb, args, nargs, &r) != 0)
		return EXIT_ERROR;
	if (r.kind == LINE_REPLY_ERR)
		return print_err_reply(c, &r);
	if (r.kind == LINE_REPLY_OK)
		return print_done(c, "ok");
	if (r.kind == LINE_REPLY_PONG)
		return print_done(c, "pong");
	return fail(c, "protocol", "unexpected reply to %s", verb);
}

static int cmd_overrides(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return fail(c, "usage", "usage: overrides");
	for (int64_t i = 0; i < CTL_OVERRIDES_MAX; i++) {
		char idx[24];
		char *arg = idx;
		snprintf(idx, sizeof(idx), "%lld", (long long)i);
		struct line_reply r;
		if (request(c, "OVERRIDES", &arg, 1, &r) != 0)
			return EXIT_ERROR;
		if (r.kind == LINE_REPLY_ERR && i == 0)
			return print_err_reply(c, &r); /* forbidden, typically */
		if (c->json && i == 0) /* the object opens once the listing is allowed */
			printf("{\"command\":\"overrides\",\"result\":\"ok\",\"overrides\":[");
		if (r.kind == LINE_REPLY_END) {
			if (c->json)
				printf("],\"count\":%lld}\n", (long long)i);
			return EXIT_ALLOWED;
		}
		if (r.kind != LINE_REPLY_OVERRIDE || r.index != i) {
			if (c->json) /* the listing so far, marked incomplete */
				printf("],\"count\":%lld,\"complete\":false}\n", (long long)i);
			c->json = 0;
			if (r.kind == LINE_REPLY_ERR)
				return print_err_reply(c, &r);
			return fail(c, "protocol", "unexpected reply to OVERRIDES %lld",
				    (long long)i);
		}
		if (c->json) {
			printf("%s{\"user\":", i ? "," : "");
			json_str(r.user.p, r.user.len);
			printf(",\"action\":");
			json_str(r.action.p, r.action.len);
			printf(",\"spec\":");
			json_str(r.spec.p, r.spec.len);
			printf(",\"ttl_ms\":%lld}", (long long)r.ttl_ms);
		} else {
			printf("%.*s %.*s %.*s", (int)r.user.len, r.user.p, (int)r.action.len,
			       r.action.p, (int)r.spec.len, r.spec.p);
			if (r.ttl_ms >= 0)
				printf(" ttl=%.3fs", (double)r.ttl_ms / 1000);
			printf("\n");
		}
	}
	return fail(c, "protocol", "more than %d overrides", CTL_OVERRIDES_MAX);
}

/* Loads the config as the daemon would; prints its errors unless quiet. */
static struct config *load_config(struct ctl *c, const char *path, int quiet)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = config_load(path, err, sizeof(err));
	if (!cfg && !quiet) {
		fprintf(stderr, "%s\n", err);
		if (c->json) {
			printf("{\"command\":");
			json_cstr(c->command);
			printf(",\"result\":\"invalid\",\"file\":");
			json_cstr(path);
			printf(",\"errors\":[");
			/* one error per line, as ratelimitd -t prints them */
			const char *p = err;
			for (int i = 0; *p; i++) {
				const char *nl = strchr(p, '\n');
				size_t len = nl ? (size_t)(nl - p) : strlen(p);
				if (i)
					putchar(',');
				json_str(p, len);
				p += len + (nl ? 1 : 0);
			}
			printf("]}\n");
		}
	}
	return cfg;
}

static int cmd_check_config(struct ctl *c, char **args, int nargs)
{
	if (nargs > 1)
		return fail(c, "usage", "usage: check-config [FILE]");
	const char *path = nargs ? args[0] : c->config_path;
	struct config *cfg = load_config(c, path, 0);
	if (!cfg)
		return EXIT_DENIED;
	config_unref(cfg);
	if (c->json) {
		printf("{\"command\":\"check-config\",\"result\":\"ok\",\"file\":");
		json_cstr(path);
		printf("}\n");
	} else {
		printf("configuration OK\n");
	}
	return EXIT_ALLOWED;
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
	if (!e->c->json) {
		printf("%s (envoy domain %s, descriptor %.*s: %u per %s%s)\n", l->policy.name,
		       domain, (int)path_len, path, l->requests_per_unit, envoy_unit_name(l->unit),
		       l->shadow ? ", shadow_mode" : "");
	} else if (e->pass == 0) {
		if (e->n++)
			putchar(',');
		json_cstr(l->policy.name);
	} else {
		printf("%s{\"policy\":", e->n++ ? "," : "");
		json_cstr(l->policy.name);
		printf(",\"domain\":");
		json_cstr(domain);
		printf(",\"descriptor\":");
		json_str(path, path_len);
		printf(",\"requests_per_unit\":%u,\"unit\":\"%s\",\"shadow\":%s}",
		       l->requests_per_unit, envoy_unit_name(l->unit),
		       l->shadow ? "true" : "false");
	}
}

static int cmd_policies(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return fail(c, "usage", "usage: policies");
	struct config *cfg = load_config(c, c->config_path, 0);
	if (!cfg)
		return EXIT_ERROR;
	if (c->json)
		printf("{\"command\":\"policies\",\"result\":\"ok\",\"policies\":[");
	for (size_t i = 0; i < cfg->npolicies; i++) {
		if (c->json) {
			if (i)
				putchar(',');
			json_cstr(cfg->policies[i].name);
		} else {
			printf("%s\n", cfg->policies[i].name);
		}
	}
	struct envoy_listing e = {c, 0, cfg->npolicies};
	envoy_rules_each(cfg->envoy.rules, print_envoy_rule, &e);
	if (c->json) {
		printf("],\"envoy_rules\":[");
		e.pass = 1;
		e.n = 0;
		envoy_rules_each(cfg->envoy.rules, print_envoy_rule, &e);
		printf("]}\n");
	}
	config_unref(cfg);
	return EXIT_ALLOWED;
}

/* The pid in a pid file, if that process is a ratelimitd: >0, or -1 with
 * an error printed. */
static long read_pid(struct ctl *c, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return failed(c, "reload", "cannot read the pid file %s: %s", path,
			      strerror(errno));
	char buf[32] = {0};
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	char *end;
	errno = 0;
	long pid = strtol(buf, &end, 10);
	if (n == 0 || errno || pid <= 0 || end == buf || (*end && *end != '\n'))
		return failed(c, "reload", "%s holds no pid", path);
	/* a stale file may name a pid reused by another program */
	char comm_path[64], comm[64] = {0};
	snprintf(comm_path, sizeof(comm_path), "/proc/%ld/comm", pid);
	f = fopen(comm_path, "r");
	if (!f)
		return failed(c, "reload", "no process %ld (stale pid file %s?)", pid, path);
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	if (strcmp(comm, "ratelimitd") != 0)
		return failed(c, "reload", "process %ld of %s is %s, not ratelimitd", pid, path,
			      comm);
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
		return fail(c, "reload", "no pid file %s, and cannot run systemctl: %s", pid_file,
			    strerror(rc));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return fail(c, "reload", "waiting for systemctl: %s", strerror(errno));
	if (WIFSIGNALED(status))
		return fail(c, "reload", "systemctl reload ratelimitd: killed by signal %d",
			    WTERMSIG(status));
	if (WEXITSTATUS(status) != 0)
		return fail(c, "reload", "systemctl reload ratelimitd: exit status %d",
			    WEXITSTATUS(status));
	if (c->json)
		printf("{\"command\":\"reload\",\"result\":\"ok\",\"via\":\"systemctl\"}\n");
	else
		printf("reload done by systemctl (no pid file %s); the daemon logs the outcome\n",
		       pid_file);
	return EXIT_ALLOWED;
}

static int cmd_reload(struct ctl *c, int nargs)
{
	if (nargs != 0)
		return fail(c, "usage", "usage: reload");
	/* as the unit's ExecReload: a bad file fails here, visibly, and the
	 * daemon is not asked (it would keep its old config anyway) */
	struct config *cfg = load_config(c, c->config_path, 0);
	if (!cfg)
		return EXIT_DENIED;
	config_unref(cfg);
	const char *pid_file = c->pid_file ? c->pid_file : CTL_DEFAULT_PID_FILE;
	if (!c->pid_file && access(pid_file, F_OK) < 0)
		return reload_by_systemctl(c, pid_file); /* a daemon systemd runs without one */
	long pid = read_pid(c, pid_file);
	if (pid < 0)
		return EXIT_ERROR;
	if (kill((pid_t)pid, SIGHUP) < 0)
		return fail(c, "reload", "cannot signal pid %ld: %s", pid, strerror(errno));
	if (c->json) {
		printf("{\"command\":\"reload\",\"result\":\"ok\",\"pid\":%ld}\n", pid);
	} else {
		printf("reload signalled to ratelimitd (pid %ld); the daemon logs the outcome\n",
		       pid);
	}
	return EXIT_ALLOWED;
}

/* The address of a listener of the config file that speaks the line
 * protocol (an admin one for admin commands), or NULL. */
static const char *address_from_config(struct ctl *c, int admin, char *buf, size_t cap)
{
	struct config *cfg = load_config(c, c->config_path, 1);
	if (!cfg)
		return NULL;
	const char *found = NULL;
	for (size_t i = 0; i < cfg->nlisten && !found; i++) {
		const struct config_listen *l = &cfg->listen[i];
		if (l->protocol == CONFIG_PROTOCOL_LINE && (!admin || l->admin)) {
			snprintf(buf, cap, "%s", l->address);
			found = buf;
		}
	}
	config_unref(cfg);
	return found;
}

static int is_admin_command(const char *cmd)
{
	return !strcmp(cmd, "reset") || !strcmp(cmd, "override") || !strcmp(cmd, "unoverride") ||
	       !strcmp(cmd, "overrides");
}

static int run(struct ctl *c, char **args, int nargs)
{
	const char *cmd = c->command;
	if (!strcmp(cmd, "check-config"))
		return cmd_check_config(c, args, nargs);
	if (!strcmp(cmd, "policies"))
		return cmd_policies(c, nargs);
	if (!strcmp(cmd, "reload"))
		return cmd_reload(c, nargs);
	if (!strcmp(cmd, "rls") || !strcmp(cmd, "health")) {
		/* gRPC, not the line protocol: ctl_grpc.c, which finds its own listener */
		if (c->address)
			return fail(c, "usage", "-s names a line listener; %s takes --addr", cmd);
		struct ctl_grpc_opts o = {.command = cmd,
					  .config_path = c->config_path,
					  .json = c->json,
					  .timeout_ms = c->timeout_ms};
		return ctl_grpc(&o, args, nargs);
	}
	int known = !strcmp(cmd, "allow") || !strcmp(cmd, "peek") || !strcmp(cmd, "ping") ||
		    is_admin_command(cmd);
	if (!known) {
		usage(stderr);
		return fail(c, "usage", "unknown command %s", cmd);
	}

	/* refused before connecting: the line protocol splits at blanks */
	for (int i = 0; i < nargs; i++)
		if (!args[i][0] || strpbrk(args[i], " \t\r\n"))
			return fail(c, "usage",
				    "argument %d (%s) is empty or has a blank: the line protocol "
				    "splits at blanks",
				    i + 1, args[i]);

	char from_config[512];
	if (!c->address)
		c->address = getenv("RATELIMITCTL_ADDRESS");
	if (!c->address || !*c->address)
		c->address = address_from_config(c, is_admin_command(cmd), from_config,
						 sizeof(from_config));
	if (!c->address)
		c->address =
			is_admin_command(cmd) ? CTL_DEFAULT_ADMIN_ADDRESS : CTL_DEFAULT_ADDRESS;
	if (ctl_connect(c) < 0)
		return EXIT_ERROR;

	if (!strcmp(cmd, "allow") || !strcmp(cmd, "peek"))
		return cmd_decide(c, cmd[0] == 'p', args, nargs);
	if (!strcmp(cmd, "ping"))
		return cmd_simple(c, "PING", args, nargs, 0, 0, "");
	if (!strcmp(cmd, "reset"))
		return cmd_simple(c, "RESET", args, nargs, 2, 2, "USER ACTION");
	if (!strcmp(cmd, "override"))
		return cmd_simple(c, "OVERRIDE", args, nargs, 3, 4, "USER ACTION SPEC [TTL]");
	if (!strcmp(cmd, "unoverride"))
		return cmd_simple(c, "UNOVERRIDE", args, nargs, 2, 2, "USER ACTION");
	return cmd_overrides(c, nargs);
}

int main(int argc, char **argv)
{
	struct ctl c = {.config_path = CONFIG_DEFAULT_PATH, .timeout_ms = 5000, .fd = -1};
	static const struct option longopts[] = {
		{"address", required_argument, NULL, 's'},
		{"config", required_argument, NULL, 'c'},
		{"pid-file", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 'T'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;
	char why[128];
	/* "+": options end at the command, so a user may begin with '-' */
	while ((opt = getopt_long(argc, argv, "+s:c:p:jT:Vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			c.address = optarg;
			break;
		case 'c':
			c.config_path = optarg;
			c.config_given = 1;
			break;
		case 'p':
			c.pid_file = optarg;
			break;
		case 'j':
			c.json = 1;
			break;
		case 'T':
			if (policy_parse_duration(optarg, strlen(optarg), &c.timeout_ms, why,
						  sizeof(why)) < 0 ||
			    c.timeout_ms <= 0)
				return fail(&c, "usage", "bad --timeout %s: %s", optarg,
					    c.timeout_ms <= 0 ? "must be more than 0" : why);
			break;
		case 'V':
			printf("ratelimitctl %s\n", RATELIMITD_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_ERROR;
		}
	}
	if (optind == argc) {
		usage(stderr);
		return EXIT_ERROR;
	}
	c.command = argv[optind];
	int rc = run(&c, argv + optind + 1, argc - optind - 1);
	if (c.fd >= 0)
		close(c.fd);
	fflush(stdout);
	return rc;
}
