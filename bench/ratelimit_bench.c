/*
 * ratelimit_bench.c - load generator for ratelimitd, and for the same Lua
 * decisions sent straight to Redis, so one run can compare the two.
 *
 * One thread, one libevent loop, C connections with P requests in flight
 * each. Every connection owns fixed buffers sized at start-up:
 *
 *   out:  [sent ... | unsent requests ........ | free]   one write() per batch
 *   in:   [replies parsed | partial reply | free]          one read() per event
 *   sent: ring of P send times (ns), replies come back in request order
 *         (gRPC: a slot per stream, (id / 2) % P, as answers come in any order)
 *
 * Nothing is allocated per request. Requests are built directly into `out`
 * from precomputed head/tail bytes; replies are parsed in place.
 *
 * With --tls each daemon connection carries a TLS session (src/lib/tls.h)
 * whose handshake, like AUTH with --token-file, is over before the load
 * starts; every read and write goes through link_read / link_write, which
 * serve a plaintext socket the same way.
 *
 * Direct mode speaks RESP itself instead of using hiredis: hiredis async
 * allocates a command buffer and a callback node per command and a tree of
 * redisReply objects (6 for a 5-integer array) per reply. On a 2-core box
 * that shares its CPUs between this tool, Redis and the daemon, that extra
 * work would slow the direct figure more than the daemon figure (whose
 * replies are one short line) and skew the ratio. The RESP subset needed
 * here (one command shape, integer arrays and errors back) is small.
 *
 * With --grpc the daemon target is a protocol: grpc listener, asked Envoy's
 * ShouldRateLimit over h2c (bench_grpc.c frames it).
 *
 * The command line is in bench_opts.c, the latency histogram in bench_hist.c.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "bench_grpc.h"
#include "bench_hist.h"
#include "bench_opts.h"
#include "decimal.h"
#include "keys.h"
#include "line_reply.h"
#include "lua_scripts.h"
#include "policy.h"
#include "redis_script.h"
#include "store.h"
#include "tls.h"

/* After the last request is sent, how long to wait for the replies owed. */
#define DRAIN_TIMEOUT_NS (10ULL * 1000000000ULL)
#define TICK_US 10000
#define RATE_TICK_US 1000
/* Longest reply line or RESP value we accept, beyond P typical replies. */
#define IN_SLACK 4096
#define ERR_TEXT_MAX 160
/* The set-up's exchanges (TLS handshake, AUTH, PEEK, FLUSHDB, SCRIPT LOAD)
 * each give up after this long rather than hang the run. */
#define SETUP_TIMEOUT_S 30

/* ---- clock, rng ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* xorshift64*: fast, good enough to pick keys */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- results ---- */

struct result {
	int ran;
	double elapsed_s;
	double dps; /* decisions (ALLOWED + DENIED) per second */
	uint64_t allowed, denied, err;
	double p50_us, p99_us, p999_us, max_us;
	double cpu_redis, cpu_daemon, cpu_bench; /* us per decision, < 0 when unknown */
	double idle_rss_bytes; /* target's RSS growth per idle connection, < 0 unknown */
	char first_err[ERR_TEXT_MAX];
};

/* ---- one run ---- */

/* How to reach a target: where, over TLS or not, with a token or not. */
struct endpoint {
	const char *name; /* "redis" or "daemon", for errors */
	const char *addr;
	struct tls_client *tls; /* NULL: plaintext */
	const char *token;	/* NULL: no AUTH */
	size_t token_len;
	const char *token_source; /* a file or a variable, for errors */
};

/* A connection's transport: its socket (nonblocking once open), and its TLS
 * session when the endpoint has TLS. */
struct link {
	int fd;
	struct ssl_st *ssl;
	int broken; /* TLS failed: OpenSSL must not send close_notify */
};

enum phase { PH_WARMUP, PH_MEASURE, PH_DRAIN, PH_DONE };

struct run;

struct conn {
	struct run *run;
	struct link link;
	int dead;
	int write_armed;
	int read_wants_write; /* TLS must send before it reads on: write_cb reads */
	int write_wants_read; /* TLS must read before it writes on: read_cb flushes */
	struct event *ev_read, *ev_write;
	char *in;
	size_t in_len, in_cap;
	char *out;
	size_t out_off, out_len, out_cap;
	uint64_t *sent; /* ring of send times; gRPC: by stream slot, 0 free */
	unsigned head, count;
	struct bench_grpc_conn g; /* --grpc: the connection's HTTP/2 state */
	signed char *answer;	  /* --grpc: a stream slot's outcome so far */
};

struct run {
	const struct bench_opts *o;
	enum bench_opts_target target;
	struct event_base *base;
	struct event *tick;
	struct conn *conns;
	int nconns, nlive;
	enum phase phase;
	uint64_t t0, measure_start, end_at, drain_start, last_reply;
	uint64_t issued_total, issued_measured, inflight;
	double budget_base; /* rate mode: issued_total when the clock started */
	uint64_t rate_t0;
	int rr;
	uint64_t allowed, denied, err;
	struct bench_hist hist;
	uint64_t rng;
	double *zipf_cdf;
	/* request bytes around the per-request user / keys */
	char head[160];
	size_t head_len;
	char tail[1024];
	size_t tail_len;
	size_t max_req;
	const char *prefix;
	size_t prefix_len;
	int grpc; /* the daemon target is asked ShouldRateLimit (--grpc) */
	struct bench_grpc_call call;
	/* cpu snapshots at measure start (us, -1 unknown) */
	long long cpu0_redis, cpu0_daemon, cpu0_bench;
	char first_err[ERR_TEXT_MAX];
};

static void note_err(struct run *r, const char *text, size_t len)
{
	r->err++;
	if (r->first_err[0])
		return;
	if (len >= ERR_TEXT_MAX)
		len = ERR_TEXT_MAX - 1;
	for (size_t i = 0; i < len; i++)
		r->first_err[i] = (text[i] == '\r' || text[i] == '\n') ? ' ' : text[i];
	r->first_err[len] = 0;
}

/* ---- CPU accounting ---- */

/* utime + stime of a whole process (all threads) in microseconds, or -1. */
static long long proc_cpu_us(int pid)
{
	if (pid <= 0)
		return -1;
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	/* the command name (field 2) may hold spaces: count fields after its ')' */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	p++;
	unsigned long long ut = 0, st = 0;
	for (int field = 3; field <= 15; field++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return -1;
		if (field == 14)
			ut = strtoull(p, NULL, 10);
		else if (field == 15)
			st = strtoull(p, NULL, 10);
		while (*p && *p != ' ')
			p++;
	}
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		return -1;
	return (long long)((ut + st) * 1000000ULL / (unsigned long long)hz);
}

static long long self_cpu_us(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
	       (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

/* VmRSS of a process in KiB, or -1. */
static long long proc_rss_kib(int pid)
{
	if (pid <= 0)
		return -1;
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0) {
			kib = strtoll(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kib;
}

/* ---- small formatting helpers (hot path: no printf) ---- */


/* "$<len>\r\n<bytes>\r\n" */
static size_t put_bulk(char *p, const char *s, size_t len)
{
	return redis_resp_bulk(p, s, len);
}

static size_t put_bulk_str(char *p, const char *s)
{
	return put_bulk(p, s, strlen(s));
}

static size_t put_bulk_i64(char *p, int64_t v)
{
	char tmp[24];
	size_t n = 0;
	if (v < 0) {
		tmp[n++] = '-';
		v = -v;
	}
	n += decimal_put(tmp + n, (uint64_t)v);
	return put_bulk(p, tmp, n);
}

/* ---- RESP parsing ---- */

/* Parses a signed decimal ending at '\r'. Returns 0, or -1 if malformed. */
static int parse_i64(const char *p, const char *end, long long *out)
{
	int neg = 0;
	long long v = 0;
	if (p < end && *p == '-') {
		neg = 1;
		p++;
	}
	if (p >= end || *p < '0' || *p > '9')
		return -1;
	while (p < end && *p >= '0' && *p <= '9') {
		if (v > (LLONG_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*p++ - '0');
	}
	if (p >= end || *p != '\r')
		return -1;
	*out = neg ? -v : v;
	return 0;
}

/*
 * Length of the complete RESP value at p (at most n bytes), 0 when more bytes
 * are needed, -1 when the bytes are not RESP.
 */
static long resp_len(const char *p, size_t n, int depth)
{
	if (n == 0)
		return 0;
	const char *nl = memchr(p, '\n', n);
	if (!nl)
		return 0;
	size_t line = (size_t)(nl - p) + 1;
	if (line < 3 || nl[-1] != '\r')
		return -1;
	long long v;
	switch (p[0]) {
	case '+':
	case '-':
	case ':':
		return (long)line;
	case '$':
		if (parse_i64(p + 1, nl, &v) < 0)
			return -1;
		if (v < 0)
			return (long)line;
		if (n < line + (size_t)v + 2)
			return 0;
		return (long)(line + (size_t)v + 2);
	case '*': {
		if (parse_i64(p + 1, nl, &v) < 0 || depth > 8)
			return -1;
		size_t off = line;
		for (long long i = 0; i < v; i++) {
			long r = resp_len(p + off, n - off, depth + 1);
			if (r <= 0)
				return r;
			off += (size_t)r;
		}
		return (long)off;
	}
	default:
		return -1;
	}
}

/*
 * Classifies one complete decision reply: 1 allowed, 0 denied, -1 error
 * (with *why pointing at text to report and *why_len its length). The script
 * answers five integers per decision; anything else is an error.
 */
static int resp_decision(const char *p, size_t len, const char **why, size_t *why_len)
{
	long long v, allowed = -1;
	const char *end = p + len;
	const char *nl = memchr(p, '\n', len);
	*why = p;
	*why_len = (size_t)(nl - p);
	if (p[0] != '*' || parse_i64(p + 1, nl, &v) < 0 || v < 5)
		return -1;
	p = nl + 1;
	for (int i = 0; i < 5; i++) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl || p[0] != ':' || parse_i64(p + 1, nl, &v) < 0)
			return -1;
		if (i == 0)
			allowed = v;
		p = nl + 1;
	}
	if (allowed != 0 && allowed != 1)
		return -1;
	return (int)allowed;
}

/* ---- sockets, and TLS on them ---- */

/*
 * The host of "host:port" or "[v6]:port" into host (brackets dropped), and
 * where its port begins; -1 with err.
 */
static int split_addr(const char *addr, char *host, size_t cap, const char **port, char *err,
		      size_t errlen)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || !colon[1]) {
		snprintf(err, errlen, "%s: expected host:port or unix:/path", addr);
		return -1;
	}
	size_t hl = (size_t)(colon - addr);
	if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
		addr++;
		hl -= 2;
	}
	if (hl >= cap) {
		snprintf(err, errlen, "host name too long");
		return -1;
	}
	memcpy(host, addr, hl);
	host[hl] = 0;
	*port = colon + 1;
	return 0;
}

/* Blocking connect to "host:port", "[v6]:port" or "unix:/path"; fd or -1 with err. */
static int dial(const char *addr, char *err, size_t errlen)
{
	if (strncmp(addr, "unix:", 5) == 0) {
		struct sockaddr_un sun = {.sun_family = AF_UNIX};
		if (strlen(addr + 5) >= sizeof(sun.sun_path)) {
			snprintf(err, errlen, "%s: path too long", addr);
			return -1;
		}
		strcpy(sun.sun_path, addr + 5);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
			snprintf(err, errlen, "%s: %s", addr, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		return fd;
	}
	char host[256];
	const char *port;
	if (split_addr(addr, host, sizeof(host), &port, err, errlen) < 0)
		return -1;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -1;
	}
	int fd = -1, e = 0;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		snprintf(err, errlen, "%s:%s: %s", host, port, strerror(e));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * One nonblocking read into buf: TLS_IO_DONE with *n > 0 bytes, or what
 * stops it (tls.h's results serve plaintext too: EAGAIN is WANT_READ, EOF
 * CLOSED). err says why on TLS_IO_ERROR.
 */
static enum tls_io link_read(struct link *l, void *buf, size_t len, size_t *n, char *err,
			     size_t errlen)
{
	if (l->ssl) {
		enum tls_io io = tls_read(l->ssl, buf, len, n, err, errlen);
		if (io == TLS_IO_ERROR)
			l->broken = 1;
		return io;
	}
	for (;;) {
		ssize_t got = read(l->fd, buf, len);
		if (got > 0) {
			*n = (size_t)got;
			return TLS_IO_DONE;
		}
		if (got == 0)
			return TLS_IO_CLOSED;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return TLS_IO_WANT_READ;
		snprintf(err, errlen, "%s", strerror(errno));
		return TLS_IO_ERROR;
	}
}

/* One nonblocking write of up to len bytes (*n written), as link_read. */
static enum tls_io link_write(struct link *l, const void *buf, size_t len, size_t *n, char *err,
			      size_t errlen)
{
	if (l->ssl) {
		enum tls_io io = tls_write(l->ssl, buf, len, n, err, errlen);
		if (io == TLS_IO_ERROR)
			l->broken = 1;
		return io;
	}
	for (;;) {
		ssize_t w = write(l->fd, buf, len);
		if (w > 0) {
			*n = (size_t)w;
			return TLS_IO_DONE;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return TLS_IO_WANT_WRITE;
		snprintf(err, errlen, "%s", w < 0 ? strerror(errno) : "nothing written");
		return TLS_IO_ERROR;
	}
}

/* Closes l (close_notify first when its TLS session is sound). */
static void link_close(struct link *l)
{
	if (l->ssl) {
		if (l->broken)
			tls_session_drop(l->ssl);
		else
			tls_session_free(l->ssl);
		l->ssl = NULL;
	}
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

/* Waits for l's socket to be ready for what a step wants (TLS_IO_WANT_*),
 * until deadline; -1 with err. Set-up only: the load never waits here. */
static int link_wait(const struct link *l, enum tls_io want, uint64_t deadline, char *err,
		     size_t errlen)
{
	for (;;) {
		uint64_t now = now_ns();
		if (now >= deadline) {
			snprintf(err, errlen, "no answer within %d s", SETUP_TIMEOUT_S);
			return -1;
		}
		struct pollfd p = {.fd = l->fd,
				   .events = want == TLS_IO_WANT_WRITE ? POLLOUT : POLLIN};
		int ms = (int)((deadline - now + 999999) / 1000000);
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0; /* ready, or an error the next step will report */
		if (n < 0 && errno != EINTR) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			return -1;
		}
	}
}

static int link_write_all(struct link *l, const char *p, size_t len, uint64_t deadline, char *err,
			  size_t errlen)
{
	while (len) {
		size_t n;
		enum tls_io io = link_write(l, p, len, &n, err, errlen);
		if (io == TLS_IO_DONE) {
			p += n;
			len -= n;
		} else if (io == TLS_IO_CLOSED) {
			snprintf(err, errlen, "connection closed");
			return -1;
		} else if (io == TLS_IO_ERROR || link_wait(l, io, deadline, err, errlen) < 0) {
			return -1;
		}
	}
	return 0;
}

/* A complete reply at the start of buf: its length (buf NUL-terminated
 * after it), 0 when more bytes are needed, -1 when it is malformed. */
typedef long reply_end_fn(char *buf, size_t len);

static long resp_end(char *buf, size_t len)
{
	long r = resp_len(buf, len, 0);
	if (r > 0)
		buf[r] = 0;
	return r;
}

static long line_end(char *buf, size_t len)
{
	char *nl = memchr(buf, '\n', len);
	if (!nl)
		return 0;
	*nl = 0;
	if (nl > buf && nl[-1] == '\r')
		nl[-1] = 0;
	return (long)strlen(buf) + 1; /* an empty line is complete too */
}

/* Sends cmd, reads until `end` finds a complete reply in buf. Returns what
 * `end` returned, or -1 with err. Only for set-up, never timed. */
static long blocking_call(struct link *l, const char *cmd, size_t cmdlen, char *buf, size_t cap,
			  reply_end_fn *end, char *err, size_t errlen)
{
	uint64_t deadline = now_ns() + (uint64_t)SETUP_TIMEOUT_S * 1000000000ULL;
	if (link_write_all(l, cmd, cmdlen, deadline, err, errlen) < 0)
		return -1;
	size_t len = 0;
	for (;;) {
		long r = end(buf, len);
		if (r != 0) {
			if (r < 0)
				snprintf(err, errlen, "malformed reply");
			return r;
		}
		if (len + 1 >= cap) {
			snprintf(err, errlen, "reply longer than %zu bytes", cap - 1);
			return -1;
		}
		size_t n;
		enum tls_io io = link_read(l, buf + len, cap - 1 - len, &n, err, errlen);
		if (io == TLS_IO_DONE) {
			len += n;
		} else if (io == TLS_IO_CLOSED) {
			snprintf(err, errlen, "connection closed before a reply");
			return -1;
		} else if (io == TLS_IO_ERROR || link_wait(l, io, deadline, err, errlen) < 0) {
			return -1;
		}
	}
}

/* One complete RESP reply into buf (NUL-terminated); its length or -1 with err. */
static long resp_call(struct link *l, const char *cmd, size_t cmdlen, char *buf, size_t cap,
		      char *err, size_t errlen)
{
	return blocking_call(l, cmd, cmdlen, buf, cap, resp_end, err, errlen);
}

/* One reply line into buf, without its line end; its length or -1 with err. */
static long line_call(struct link *l, const char *cmd, size_t cmdlen, char *buf, size_t cap,
		      char *err, size_t errlen)
{
	long r = blocking_call(l, cmd, cmdlen, buf, cap, line_end, err, errlen);
	return r < 0 ? -1 : r - 1;
}

/* Proves ep's token on l: AUTH in RESP or as a line, OK / +OK back. */
static int link_auth(struct link *l, const struct endpoint *ep, int resp, char *err, size_t errlen)
{
	char cmd[CONFIG_TOKEN_MAX + 64], reply[512], why[ERR_TEXT_MAX];
	size_t n;
	if (resp) {
		n = (size_t)snprintf(cmd, sizeof(cmd), "*2\r\n");
		n += put_bulk_str(cmd + n, "AUTH");
		n += put_bulk(cmd + n, ep->token, ep->token_len);
	} else {
		n = (size_t)snprintf(cmd, sizeof(cmd), "AUTH ");
		memcpy(cmd + n, ep->token, ep->token_len);
		n += ep->token_len;
		cmd[n++] = '\n';
	}
	long len = blocking_call(l, cmd, n, reply, sizeof(reply), resp ? resp_end : line_end, why,
				 sizeof(why));
	memset(cmd, 0, sizeof(cmd)); /* the token lives on in ep only */
	if (len < 0) {
		snprintf(err, errlen, "%s %s: AUTH with the token in %s: %s", ep->name, ep->addr,
			 ep->token_source, why);
		return -1;
	}
	if (strcmp(reply, resp ? "+OK\r\n" : "OK") == 0)
		return 0;
	reply[strcspn(reply, "\r\n")] = 0;
	snprintf(err, errlen, "%s %s: AUTH with the token in %s refused: %.200s", ep->name,
		 ep->addr, ep->token_source, reply);
	return -1;
}

/*
 * Opens l to ep: connects, makes the socket nonblocking, and with TLS
 * completes the handshake; with a token, proves it (AUTH in RESP when resp,
 * else as a line). -1 with err, l closed.
 */
static int link_open(const struct endpoint *ep, int resp, struct link *l, char *err, size_t errlen)
{
	char why[ERR_TEXT_MAX];
	*l = (struct link){.fd = dial(ep->addr, err, errlen)};
	if (l->fd < 0)
		return -1;
	int fl = fcntl(l->fd, F_GETFL);
	if (fl < 0 || fcntl(l->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		snprintf(err, errlen, "%s: fcntl: %s", ep->addr, strerror(errno));
		goto fail;
	}
	if (ep->tls) {
		/* the name to verify: --servername when given (tls_client_new has it), else
		 * the address's host; a unix: address has none (options demand --servername) */
		char host[256] = "";
		const char *port;
		if (strncmp(ep->addr, "unix:", 5) != 0 &&
		    split_addr(ep->addr, host, sizeof(host), &port, err, errlen) < 0)
			goto fail;
		l->ssl =
			tls_client_session(ep->tls, l->fd, host[0] ? host : NULL, why, sizeof(why));
		if (!l->ssl) {
			snprintf(err, errlen, "%s %s: %s", ep->name, ep->addr, why);
			goto fail;
		}
		uint64_t deadline = now_ns() + (uint64_t)SETUP_TIMEOUT_S * 1000000000ULL;
		for (;;) {
			enum tls_io io = tls_handshake(l->ssl, why, sizeof(why));
			if (io == TLS_IO_DONE)
				break;
			if (io == TLS_IO_ERROR)
				l->broken = 1;
			if (io == TLS_IO_ERROR ||
			    link_wait(l, io, deadline, why, sizeof(why)) < 0) {
				snprintf(err, errlen, "%s %s: TLS handshake: %s", ep->name,
					 ep->addr, why);
				goto fail;
			}
		}
	}
	if (ep->token && link_auth(l, ep, resp, err, errlen) < 0)
		goto fail;
	return 0;
fail:
	link_close(l);
	return -1;
}

/* ---- request building ---- */

static size_t user_of(struct run *r, char *user)
{
	const struct bench_opts *o = r->o;
	uint64_t id = 0;
	switch (o->dist) {
	case BENCH_OPTS_KEYS_HOT:
		id = 0;
		break;
	case BENCH_OPTS_KEYS_UNIFORM:
		id = rng_next(&r->rng) % o->nkeys;
		break;
	case BENCH_OPTS_KEYS_ZIPF: {
		double u = rng_unit(&r->rng);
		size_t lo = 0, hi = (size_t)o->nkeys - 1;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (r->zipf_cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		id = lo;
		break;
	}
	}
	user[0] = 'u';
	return 1 + decimal_put(user + 1, id);
}

/* Appends one request at p; returns its length (at most r->max_req). */
static size_t build_request(struct run *r, char *p)
{
	char user[32];
	size_t ul = user_of(r, user);
	size_t n = 0;
	memcpy(p, r->head, r->head_len);
	n += r->head_len;
	if (r->target == BENCH_OPTS_TARGET_DAEMON && r->o->resp) {
		n += put_bulk(p + n, user, ul);
	} else if (r->target == BENCH_OPTS_TARGET_DAEMON) {
		memcpy(p + n, user, ul);
		n += ul;
	} else {
		const struct policy *pol = &r->o->policy;
		char key[KEYS_MAX];
		for (int i = 0; i < pol->nlimits; i++) {
			size_t kl = keys_build(key, r->prefix, r->prefix_len, pol, i, user, ul);
			n += put_bulk(p + n, key, kl);
		}
	}
	memcpy(p + n, r->tail, r->tail_len);
	return n + r->tail_len;
}

/*
 * Precomputes what surrounds the user in every request.
 * Daemon:  "ALLOW " <user> " <action>[ <cost>]\n"
 * Direct:  EVALSHA <sha> <nkeys> <key per limit...> 0 1 a <cost> <nlimits>
 *          {<s|f> <capacity> <count> <period_ms>}...
 *          exactly the call redis_script.c builds for one ALLOW.
 */
static int build_templates(struct run *r, char *err, size_t errlen)
{
	const struct bench_opts *o = r->o;
	if (r->grpc) {
		const char *d[BENCH_GRPC_DESCRIPTORS_MAX];
		d[0] = o->action;
		for (int i = 0; i < o->grpc_ndescriptors; i++)
			d[i + 1] = o->grpc_descriptors[i];
		if (bench_grpc_call_init(&r->call, o->daemon_addr, o->grpc_domain, d,
					 1 + o->grpc_ndescriptors, o->cost_given ? o->cost : 0, err,
					 errlen) < 0)
			return -1;
		r->max_req = bench_grpc_call_max(&r->call, 24);
		return 0;
	}
	if (r->target == BENCH_OPTS_TARGET_DAEMON && o->resp) {
		/* RESP: *3 (or *4 with a cost) $5 ALLOW $<n> <user> $<n> <action> */
		size_t n = (size_t)snprintf(r->head, sizeof(r->head), "*%d\r\n",
					    o->cost_given ? 4 : 3);
		n += put_bulk_str(r->head + n, "ALLOW");
		r->head_len = n;
		n = put_bulk_str(r->tail, o->action);
		if (o->cost_given)
			n += put_bulk_i64(r->tail + n, o->cost);
		r->tail_len = n;
		r->max_req = r->head_len + 24 + 8 + r->tail_len;
		return 0;
	}
	if (r->target == BENCH_OPTS_TARGET_DAEMON) {
		r->head_len = (size_t)snprintf(r->head, sizeof(r->head), "ALLOW ");
		if (o->cost_given)
			r->tail_len = (size_t)snprintf(r->tail, sizeof(r->tail), " %s %lld\n",
						       o->action, (long long)o->cost);
		else
			r->tail_len =
				(size_t)snprintf(r->tail, sizeof(r->tail), " %s\n", o->action);
		r->max_req = r->head_len + 24 + r->tail_len;
		return 0;
	}
	const struct policy *p = &o->policy;
	/* after the keys: the arguments the daemon's store sends for one ALLOW */
	struct store_saved_request sv = {
		.op = STORE_ALLOW, .cost = o->cost, .policy = *p, .user = "", .prefix = ""};
	const struct store_saved_request *one = &sv;
	const char *argv[2 + REDIS_SCRIPT_DECISION_ARGC_MAX];
	size_t argl[2 + REDIS_SCRIPT_DECISION_ARGC_MAX];
	char arena[(2 + REDIS_SCRIPT_DECISION_ARGC_MAX) * 24];
	struct redis_argv a = {.argv = argv, .argl = argl, .arena = arena};
	redis_script_args(&a, &one, 1);
	int argc = 3 + p->nlimits + a.argc;
	size_t n = (size_t)snprintf(r->head, sizeof(r->head), "*%d\r\n", argc);
	n += put_bulk_str(r->head + n, "EVALSHA");
	n += put_bulk(r->head + n, lua_ratelimit_sha, 40);
	n += put_bulk_i64(r->head + n, p->nlimits);
	r->head_len = n;
	n = 0;
	for (int i = 0; i < a.argc; i++)
		n += redis_resp_bulk(r->tail + n, argv[i], argl[i]);
	r->tail_len = n;
	/* key: prefix{action:user}:s<period>, user "u" + at most 20 digits */
	size_t key_max = r->prefix_len + p->name_len + 24 + 24 + 8;
	r->max_req = r->head_len + (size_t)p->nlimits * (key_max + 16) + r->tail_len;
	return 0;
}

/* ---- the event loop ---- */

static void conn_fail(struct conn *c, const char *why);
static void run_step(struct run *r, uint64_t now);

static int may_issue(struct run *r, uint64_t now)
{
	const struct bench_opts *o = r->o;
	if (r->phase >= PH_DRAIN)
		return 0;
	if (o->requests && r->phase == PH_MEASURE && r->issued_measured >= o->requests) {
		r->phase = PH_DRAIN;
		r->drain_start = now;
		return 0;
	}
	if (o->rate > 0) {
		double allowed = o->rate * (double)(now - r->rate_t0) / 1e9;
		if ((double)(r->issued_total) - r->budget_base >= allowed)
			return 0;
	}
	return 1;
}

/* Moves c's unsent bytes to the front of its output buffer (they never
 * exceed P requests and the frames a gRPC connection answers). */
static void out_compact(struct conn *c)
{
	memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
	c->out_len -= c->out_off;
	c->out_off = 0;
}

/* Appends up to `max` requests to c's output (bounded by its free slots). */
static unsigned conn_fill(struct conn *c, uint64_t now, unsigned max)
{
	struct run *r = c->run;
	unsigned P = (unsigned)r->o->pipeline, n = 0;
	if (c->dead)
		return 0;
	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	while (n < max && c->count < P && may_issue(r, now)) {
		if (c->out_len + r->max_req > c->out_cap)
			out_compact(c);
		if (r->grpc) {
			/* the next stream's slot, if its last call is done */
			unsigned slot = (c->g.next_stream / 2) % P;
			if (c->sent[slot] || !bench_grpc_may_send(&c->g, &r->call, 24, c->count))
				break;
			char user[32];
			uint32_t id;
			size_t ul = user_of(r, user);
			c->out_len += bench_grpc_call_put(&c->g, &r->call, user, ul,
							  c->out + c->out_len, &id);
			c->sent[slot] = now;
			c->answer[slot] = -1;
		} else {
			c->out_len += build_request(r, c->out + c->out_len);
			c->sent[(c->head + c->count) % P] = now;
		}
		c->count++;
		n++;
		r->inflight++;
		r->issued_total++;
		if (r->phase == PH_MEASURE)
			r->issued_measured++;
	}
	return n;
}

static void arm_write(struct conn *c)
{
	if (!c->write_armed) {
		event_add(c->ev_write, NULL);
		c->write_armed = 1;
	}
}

static void conn_flush(struct conn *c)
{
	char err[ERR_TEXT_MAX], why[ERR_TEXT_MAX + 16];
	c->write_wants_read = 0;
	while (!c->dead && c->out_off < c->out_len) {
		size_t n;
		enum tls_io io = link_write(&c->link, c->out + c->out_off, c->out_len - c->out_off,
					    &n, err, sizeof(err));
		if (io == TLS_IO_DONE) {
			c->out_off += n;
			continue;
		}
		if (io == TLS_IO_WANT_WRITE) {
			arm_write(c);
			return;
		}
		if (io == TLS_IO_WANT_READ) {
			/* the read event, always armed, flushes again */
			c->write_wants_read = 1;
			break;
		}
		if (io == TLS_IO_CLOSED)
			snprintf(why, sizeof(why), "connection closed by server");
		else
			snprintf(why, sizeof(why), "write failed: %s", err);
		conn_fail(c, why);
		return;
	}
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->write_armed && !c->dead && !c->read_wants_write) {
		event_del(c->ev_write);
		c->write_armed = 0;
	}
}

/* One reply arrived for a request sent at `sent`. */
static void complete_sent(struct conn *c, uint64_t sent, uint64_t now, int outcome, const char *why,
			  size_t why_len)
{
	struct run *r = c->run;
	c->count--;
	r->inflight--;
	if (r->phase == PH_WARMUP || sent < r->measure_start)
		return; /* sent during warm-up */
	r->last_reply = now;
	if (outcome > 0)
		r->allowed++;
	else if (outcome == 0)
		r->denied++;
	else
		note_err(r, why, why_len);
	bench_hist_add(&r->hist, now - sent);
}

/* One reply arrived for the oldest request in flight on c. */
static void complete(struct conn *c, uint64_t now, int outcome, const char *why, size_t why_len)
{
	unsigned P = (unsigned)c->run->o->pipeline;
	uint64_t sent = c->sent[c->head];
	c->head = (c->head + 1) % P;
	complete_sent(c, sent, now, outcome, why, why_len);
}

/* A gRPC stream of c ended (or was reset: outcome -1). */
static void complete_stream(struct conn *c, uint32_t stream, uint64_t now, int outcome,
			    const char *why)
{
	unsigned slot = (stream / 2) % (unsigned)c->run->o->pipeline;
	uint64_t sent = c->sent[slot];
	if (!sent)
		return; /* not a call in flight: already counted */
	c->sent[slot] = 0;
	complete_sent(c, sent, now, outcome, why, strlen(why));
}

/* Frames the server sent on c: answers, ends, and what HTTP/2 makes us
 * answer (queued in c->out). -1 on a protocol error. */
static long grpc_parse(struct conn *c, uint64_t now, int *reply)
{
	unsigned P = (unsigned)c->run->o->pipeline;
	size_t off = 0;
	for (;;) {
		struct bench_grpc_frame f;
		long n = bench_grpc_frame(&c->g, c->in + off, c->in_len - off, &f);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		off += (size_t)n;
		if (f.reply_len) {
			if (c->out_len + f.reply_len > c->out_cap)
				out_compact(c);
			if (c->out_len + f.reply_len > c->out_cap)
				return -1; /* the server makes us answer more than we send */
			memcpy(c->out + c->out_len, f.reply, f.reply_len);
			c->out_len += f.reply_len;
			*reply = 1;
		}
		unsigned slot = (f.stream / 2) % P;
		switch (f.event) {
		case BENCH_GRPC_ANSWER:
			if (c->sent[slot])
				c->answer[slot] = f.code == 1 ? 1 : f.code == 2 ? 0 : -1;
			break;
		case BENCH_GRPC_RESET:
			complete_stream(c, f.stream, now, -1, "stream reset by the server");
			continue;
		case BENCH_GRPC_GOAWAY:
			return -1;
		case BENCH_GRPC_NONE:
			break;
		}
		if (f.end && c->sent[slot])
			complete_stream(c, f.stream, now, c->answer[slot],
					c->answer[slot] < 0
						? "a call ended without OK or OVER_LIMIT "
						  "(a gRPC error status)"
						: "");
	}
	return (long)off;
}

/* Daemon reply line: ALLOWED / DENIED (1 / 0), else an error (-1). A
 * fallback reply (remaining -1: Redis did not decide) counts as an error. */
static int line_decision(const char *p, size_t len)
{
	struct line_reply r;
	if (line_reply_parse(p, len, &r) < 0 || line_reply_is_fallback(&r))
		return -1;
	if (r.kind == LINE_REPLY_ALLOWED)
		return 1;
	return r.kind == LINE_REPLY_DENIED ? 0 : -1;
}

/* Parses every complete reply in c->in; returns -1 on a protocol error. */
static int conn_parse(struct conn *c, uint64_t now, int *reply)
{
	struct run *r = c->run;
	size_t off = 0;
	if (r->grpc) {
		long n = grpc_parse(c, now, reply);
		if (n < 0)
			return -1;
		off = (size_t)n;
	}
	while (!r->grpc && off < c->in_len) {
		const char *p = c->in + off;
		size_t left = c->in_len - off;
		if (c->count == 0)
			return -1; /* a reply nobody asked for */
		if (r->target == BENCH_OPTS_TARGET_DAEMON && !r->o->resp) {
			const char *nl = memchr(p, '\n', left);
			if (!nl)
				break;
			size_t len = (size_t)(nl - p);
			if (len && p[len - 1] == '\r')
				len--;
			complete(c, now, line_decision(p, len), p, len);
			off += (size_t)(nl - p) + 1;
		} else {
			long n = resp_len(p, left, 0);
			if (n < 0)
				return -1;
			if (n == 0)
				break;
			const char *why;
			size_t why_len;
			int d = resp_decision(p, (size_t)n, &why, &why_len);
			complete(c, now, d, why, why_len);
			off += (size_t)n;
		}
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	if (c->in_len == c->in_cap)
		return -1; /* a reply longer than the buffer: not ours */
	return 0;
}

/*
 * Reads c's replies and refills it. Plaintext: one read per readable event.
 * TLS: OpenSSL may hold decrypted or read-ahead bytes that no readable event
 * will announce, so it reads on while tls_pending says there are some.
 */
static void conn_read(struct conn *c)
{
	struct run *r = c->run;
	char err[ERR_TEXT_MAX], why[ERR_TEXT_MAX + 16];
	uint64_t now = 0;
	int reply = 0;
	c->read_wants_write = 0;
	do {
		size_t n;
		enum tls_io io = link_read(&c->link, c->in + c->in_len, c->in_cap - c->in_len, &n,
					   err, sizeof(err));
		if (io == TLS_IO_WANT_READ)
			break;
		if (io == TLS_IO_WANT_WRITE) {
			/* TLS must send before it reads on: write_cb reads again */
			c->read_wants_write = 1;
			arm_write(c);
			break;
		}
		if (io != TLS_IO_DONE) {
			if (io == TLS_IO_CLOSED)
				snprintf(why, sizeof(why), "connection closed by server");
			else
				snprintf(why, sizeof(why), "read failed: %s", err);
			conn_fail(c, why);
			run_step(r, now_ns());
			return;
		}
		c->in_len += n;
		now = now_ns();
		if (conn_parse(c, now, &reply) < 0) {
			conn_fail(c, "protocol error in reply");
			break;
		}
	} while (c->link.ssl && tls_pending(c->link.ssl));
	int filled = 0;
	if (now) {
		run_step(r, now);
		filled = conn_fill(c, now, (unsigned)-1) > 0;
	}
	if (filled || reply || c->write_wants_read)
		conn_flush(c);
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_read(arg);
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct conn *c = arg;
	if (c->read_wants_write)
		conn_read(c);
	if (!c->dead)
		conn_flush(c);
}

/* Counts c's requests in flight as errors and closes it. */
static void conn_fail(struct conn *c, const char *why)
{
	struct run *r = c->run;
	if (c->dead)
		return;
	uint64_t now = now_ns();
	if (r->grpc) {
		for (unsigned s = 0; s < (unsigned)r->o->pipeline; s++)
			if (c->sent[s])
				complete_stream(c, s * 2 + 1, now, -1, why);
	}
	while (c->count)
		complete(c, now, -1, why, strlen(why));
	c->dead = 1;
	r->nlive--;
	event_del(c->ev_read);
	event_del(c->ev_write);
	link_close(&c->link);
}

static void start_measure(struct run *r, uint64_t now)
{
	r->phase = PH_MEASURE;
	r->measure_start = now;
	r->last_reply = now;
	if (r->o->duration > 0)
		r->end_at = now + (uint64_t)(r->o->duration * 1e9);
	r->cpu0_redis = proc_cpu_us(r->o->redis_pid);
	r->cpu0_daemon = proc_cpu_us(r->o->daemon_pid);
	r->cpu0_bench = self_cpu_us();
}

/* Phase changes; ends the loop when nothing is owed any more. */
static void run_step(struct run *r, uint64_t now)
{
	if (r->phase == PH_WARMUP && now >= r->t0 + (uint64_t)(r->o->warmup * 1e9))
		start_measure(r, now);
	if (r->phase == PH_MEASURE && r->end_at && now >= r->end_at) {
		r->phase = PH_DRAIN;
		r->drain_start = now;
	}
	if (r->phase == PH_MEASURE && r->o->requests && r->issued_measured >= r->o->requests) {
		r->phase = PH_DRAIN;
		r->drain_start = now;
	}
	if (r->nlive == 0 && r->phase != PH_DONE) {
		r->phase = PH_DONE;
		event_base_loopbreak(r->base);
		return;
	}
	if (r->phase == PH_DRAIN) {
		if (r->inflight == 0) {
			r->phase = PH_DONE;
			event_base_loopbreak(r->base);
		} else if (now - r->drain_start > DRAIN_TIMEOUT_NS) {
			for (int i = 0; i < r->nconns; i++)
				conn_fail(&r->conns[i], "no reply within 10 s");
			r->phase = PH_DONE;
			event_base_loopbreak(r->base);
		}
	}
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct run *r = arg;
	uint64_t now = now_ns();
	run_step(r, now);
	/* Without a rate, connections refill themselves as replies arrive.
	 * With one, the budget goes out one request per connection per pass. */
	if (r->phase >= PH_DRAIN || r->o->rate <= 0)
		return;
	int progress = 1;
	while (progress && may_issue(r, now)) {
		progress = 0;
		for (int k = 0; k < r->nconns && may_issue(r, now); k++) {
			struct conn *c = &r->conns[(r->rr + k) % r->nconns];
			if (conn_fill(c, now, 1))
				progress = 1;
		}
		r->rr = (r->rr + 1) % r->nconns;
	}
	for (int k = 0; k < r->nconns; k++)
		if (r->conns[k].out_off < r->conns[k].out_len)
			conn_flush(&r->conns[k]);
}

static int zipf_init(struct run *r)
{
	const struct bench_opts *o = r->o;
	if (o->dist != BENCH_OPTS_KEYS_ZIPF)
		return 0;
	r->zipf_cdf = malloc(sizeof(double) * (size_t)o->nkeys);
	if (!r->zipf_cdf)
		return -1;
	double sum = 0;
	for (uint64_t i = 0; i < o->nkeys; i++) {
		sum += 1.0 / pow((double)(i + 1), o->zipf_s);
		r->zipf_cdf[i] = sum;
	}
	for (uint64_t i = 0; i < o->nkeys; i++)
		r->zipf_cdf[i] /= sum;
	r->zipf_cdf[o->nkeys - 1] = 1.0;
	return 0;
}

/* Where the two targets are (built in main from the options). */
struct endpoints {
	struct endpoint redis, daemon;
};

/* Direct mode set-up on a connection of its own: optional FLUSHDB, SCRIPT LOAD. */
static int redis_prepare(const struct bench_opts *o, const struct endpoints *eps, int load_script,
			 char *err, size_t errlen)
{
	struct link l;
	char why[ERR_TEXT_MAX];
	if (link_open(&eps->redis, 0, &l, err, errlen) < 0)
		return -1;
	static char cmd[262144 + 256]; /* SCRIPT LOAD of the script (67 KB) */
	char reply[256];
	int rc = -1;
	size_t n;
	if (o->flushdb) {
		n = (size_t)snprintf(cmd, sizeof(cmd), "*1\r\n$7\r\nFLUSHDB\r\n");
		long len = resp_call(&l, cmd, n, reply, sizeof(reply), why, sizeof(why));
		if (len < 0 || reply[0] != '+') {
			snprintf(err, errlen, "redis %s: FLUSHDB failed: %.100s", o->redis_addr,
				 len < 0 ? why : reply);
			goto out;
		}
	}
	if (load_script) {
		if (lua_ratelimit_len + 128 > sizeof(cmd)) {
			snprintf(err, errlen, "script too large");
			goto out;
		}
		n = (size_t)snprintf(cmd, sizeof(cmd), "*3\r\n");
		n += put_bulk_str(cmd + n, "SCRIPT");
		n += put_bulk_str(cmd + n, "LOAD");
		n += put_bulk(cmd + n, lua_ratelimit_src, lua_ratelimit_len);
		long len = resp_call(&l, cmd, n, reply, sizeof(reply), why, sizeof(why));
		if (len < 0 || reply[0] != '$' || !strstr(reply, lua_ratelimit_sha)) {
			snprintf(err, errlen, "redis %s: SCRIPT LOAD failed: %.100s", o->redis_addr,
				 len < 0 ? why : reply);
			goto out;
		}
	}
	rc = 0;
out:
	link_close(&l);
	return rc;
}

/* Daemon mode: one PEEK first (after AUTH, over TLS, as the load will be),
 * so a wrong action, address, certificate or token fails fast. */
static int daemon_check(const struct bench_opts *o, const struct endpoints *eps, char *err,
			size_t errlen)
{
	struct link l;
	char why[ERR_TEXT_MAX];
	/* the PEEK is a line: AUTH in lines too (a connection keeps its first protocol) */
	if (link_open(&eps->daemon, 0, &l, err, errlen) < 0)
		return -1;
	char cmd[256], reply[512];
	size_t n = (size_t)snprintf(cmd, sizeof(cmd), "PEEK u0 %s %lld\n", o->action,
				    (long long)o->cost);
	long len = line_call(&l, cmd, n, reply, sizeof(reply), why, sizeof(why));
	link_close(&l);
	if (len < 0) {
		snprintf(err, errlen, "daemon %s: PEEK: %s", o->daemon_addr, why);
		return -1;
	}
	if (line_decision(reply, (size_t)len) < 0) {
		/* a listener with auth: required, and no token given */
		const char *hint = !eps->daemon.token && strncmp(reply, "ERR noauth", 10) == 0
					   ? " (give --token-file FILE or RATELIMIT_BENCH_TOKEN)"
					   : "";
		snprintf(err, errlen, "daemon %s: PEEK u0 %s answered: %.200s%s", o->daemon_addr,
			 o->action, reply, hint);
		return -1;
	}
	return 0;
}

static double cpu_per_decision(long long before, long long after, uint64_t decisions)
{
	if (before < 0 || after < 0 || !decisions)
		return -1;
	return (double)(after - before) / (double)decisions;
}

static void close_idle(struct link *links, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		link_close(&links[i]);
	free(links);
}

/*
 * Opens o->idle connections to the target that never send anything (but
 * the TLS handshake and AUTH, when the target has them), and measures how
 * much the target's RSS grew per connection (a round trip on a fresh
 * connection afterwards makes sure the target has accepted them all).
 */
static int open_idle(const struct bench_opts *o, const struct endpoints *eps,
		     enum bench_opts_target t, struct link **links, uint64_t *n, double *per_conn)
{
	const struct endpoint *ep = t == BENCH_OPTS_TARGET_DIRECT ? &eps->redis : &eps->daemon;
	int pid = t == BENCH_OPTS_TARGET_DIRECT ? o->redis_pid : o->daemon_pid;
	char err[512];
	long long rss0 = proc_rss_kib(pid);
	*links = malloc(sizeof(**links) * (size_t)o->idle);
	if (!*links) {
		fprintf(stderr, "ratelimit-bench: out of memory\n");
		return -1;
	}
	for (*n = 0; *n < o->idle; (*n)++) {
		if (link_open(ep, o->resp, &(*links)[*n], err, sizeof(err)) < 0) {
			fprintf(stderr, "ratelimit-bench: idle connection %llu: %s\n",
				(unsigned long long)*n + 1, err);
			return -1;
		}
	}
	int rc = t == BENCH_OPTS_TARGET_DIRECT ? redis_prepare(o, eps, 1, err, sizeof(err))
					       : daemon_check(o, eps, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "ratelimit-bench: after opening idle connections: %s\n", err);
		return -1;
	}
	long long rss1 = proc_rss_kib(pid);
	if (rss0 >= 0 && rss1 >= 0)
		*per_conn = (double)(rss1 - rss0) * 1024.0 / (double)o->idle;
	return 0;
}

static int run_target(const struct bench_opts *o, const struct endpoints *eps,
		      enum bench_opts_target t, struct result *res)
{
	char err[512] = "";
	memset(res, 0, sizeof(*res));
	if (t == BENCH_OPTS_TARGET_DIRECT || o->flushdb) {
		if (redis_prepare(o, eps, t == BENCH_OPTS_TARGET_DIRECT, err, sizeof(err)) < 0) {
			fprintf(stderr, "ratelimit-bench: %s\n", err);
			return -1;
		}
	}
	/* a gRPC listener speaks no lines: its calls' answers say what is wrong */
	if (t == BENCH_OPTS_TARGET_DAEMON && !o->grpc_domain &&
	    daemon_check(o, eps, err, sizeof(err)) < 0) {
		fprintf(stderr, "ratelimit-bench: %s\n", err);
		return -1;
	}

	struct link *idle = NULL;
	uint64_t nidle = 0;
	res->idle_rss_bytes = -1;
	if (o->idle && open_idle(o, eps, t, &idle, &nidle, &res->idle_rss_bytes) < 0)
		goto close_idle;

	struct run *r = calloc(1, sizeof(*r));
	if (!r) {
		fprintf(stderr, "ratelimit-bench: out of memory\n");
		goto close_idle;
	}
	int rc = -1;
	r->o = o;
	r->target = t;
	r->prefix = o->prefix;
	r->prefix_len = strlen(o->prefix);
	uint64_t seed = o->seed;
	r->rng = splitmix64(&seed) | 1;
	r->base = event_base_new();
	r->conns = calloc((size_t)o->conns, sizeof(*r->conns));
	if (!r->base || !r->conns || zipf_init(r) < 0) {
		fprintf(stderr, "ratelimit-bench: out of memory\n");
		goto out;
	}
	r->grpc = t == BENCH_OPTS_TARGET_DAEMON && o->grpc_domain;
	if (build_templates(r, err, sizeof(err)) < 0) {
		fprintf(stderr, "ratelimit-bench: %s\n", err);
		goto out;
	}
	const struct endpoint *ep = t == BENCH_OPTS_TARGET_DIRECT ? &eps->redis : &eps->daemon;
	size_t P = (size_t)o->pipeline;
	for (int i = 0; i < o->conns; i++) {
		struct conn *c = &r->conns[i];
		c->run = r;
		c->link.fd = -1;
		c->dead = 1;
		c->in_cap = P * 256 + IN_SLACK;
		c->out_cap = (P + 1) * r->max_req;
		if (r->grpc) {
			/* a whole frame of the largest size, our preface, a few answers */
			c->in_cap += 16384 + BENCH_GRPC_FRAME_HEADER;
			c->out_cap += BENCH_GRPC_PREFACE_MAX + 8 * BENCH_GRPC_CONTROL_MAX;
		}
		c->in = malloc(c->in_cap);
		c->out = malloc(c->out_cap);
		c->sent = calloc(P, sizeof(uint64_t));
		c->answer = calloc(P, 1);
		if (!c->in || !c->out || !c->sent || !c->answer) {
			fprintf(stderr, "ratelimit-bench: out of memory\n");
			goto out;
		}
		/* TLS handshake and AUTH here, before anything is timed */
		if (link_open(ep, o->resp, &c->link, err, sizeof(err)) < 0) {
			fprintf(stderr, "ratelimit-bench: connection %d: %s\n", i + 1, err);
			goto out;
		}
		c->ev_read = event_new(r->base, c->link.fd, EV_READ | EV_PERSIST, read_cb, c);
		c->ev_write = event_new(r->base, c->link.fd, EV_WRITE | EV_PERSIST, write_cb, c);
		if (!c->ev_read || !c->ev_write) {
			fprintf(stderr, "ratelimit-bench: out of memory\n");
			goto out;
		}
		event_add(c->ev_read, NULL);
		if (r->grpc)
			c->out_len = bench_grpc_conn_start(&c->g, c->out);
		c->dead = 0;
		r->nconns++;
		r->nlive++;
	}
	r->tick = event_new(r->base, -1, EV_PERSIST, tick_cb, r);
	struct timeval tv = {0, o->rate > 0 ? RATE_TICK_US : TICK_US};
	event_add(r->tick, &tv);

	uint64_t now = now_ns();
	r->t0 = r->rate_t0 = now;
	r->phase = PH_WARMUP;
	if (o->warmup <= 0)
		start_measure(r, now);
	for (int i = 0; i < r->nconns; i++) {
		/* rate mode: the tick hands out requests */
		if (o->rate <= 0 && conn_fill(&r->conns[i], now, (unsigned)-1))
			conn_flush(&r->conns[i]);
	}
	event_base_dispatch(r->base);

	long long cpu_redis = proc_cpu_us(o->redis_pid);
	long long cpu_daemon = proc_cpu_us(o->daemon_pid);
	long long cpu_bench = self_cpu_us();
	uint64_t decisions = r->allowed + r->denied;
	res->ran = 1;
	res->elapsed_s = (double)(r->last_reply - r->measure_start) / 1e9;
	res->dps = res->elapsed_s > 0 ? (double)decisions / res->elapsed_s : 0;
	res->allowed = r->allowed;
	res->denied = r->denied;
	res->err = r->err;
	res->p50_us = (double)bench_hist_quantile(&r->hist, 0.50) / 1e3;
	res->p99_us = (double)bench_hist_quantile(&r->hist, 0.99) / 1e3;
	res->p999_us = (double)bench_hist_quantile(&r->hist, 0.999) / 1e3;
	res->max_us = (double)r->hist.max / 1e3;
	res->cpu_redis = cpu_per_decision(r->cpu0_redis, cpu_redis, decisions);
	res->cpu_daemon = cpu_per_decision(r->cpu0_daemon, cpu_daemon, decisions);
	res->cpu_bench = cpu_per_decision(r->cpu0_bench, cpu_bench, decisions);
	memcpy(res->first_err, r->first_err, sizeof(res->first_err));
	rc = 0;
out:
	for (int i = 0; i < o->conns && r->conns; i++) {
		struct conn *c = &r->conns[i];
		if (c->ev_read)
			event_free(c->ev_read);
		if (c->ev_write)
			event_free(c->ev_write);
		link_close(&c->link);
		free(c->in);
		free(c->out);
		free(c->sent);
		free(c->answer);
	}
	if (r->tick)
		event_free(r->tick);
	if (r->base)
		event_base_free(r->base);
	free(r->conns);
	free(r->zipf_cdf);
	free(r);
	close_idle(idle, nidle);
	return rc;
close_idle:
	close_idle(idle, nidle);
	return -1;
}

/* ---- output ---- */

static const char *target_name(enum bench_opts_target t)
{
	return t == BENCH_OPTS_TARGET_DIRECT ? "direct" : "daemon";
}

static void print_cpu(double v)
{
	if (v < 0)
		printf(" %8s", "-");
	else
		printf(" %8.2f", v);
}

static void print_report(const struct bench_opts *o, const struct result res[2])
{
	char pol[256] = "";
	if (o->have_policy) {
		pol[0] = ' ';
		pol[1] = '(';
		size_t n = 2 + policy_describe(&o->policy, pol + 2, sizeof(pol) - 4);
		pol[n++] = ')';
		pol[n] = 0;
	}
	printf("ratelimit-bench: %d connection%s x pipeline %d, ", o->conns,
	       o->conns == 1 ? "" : "s", o->pipeline);
	if (o->requests)
		printf("%llu requests", (unsigned long long)o->requests);
	else
		printf("%.1f s", o->duration);
	if (o->warmup > 0)
		printf(" after %.1f s warm-up", o->warmup);
	if (o->rate > 0)
		printf(", paced at %.0f/s", o->rate);
	printf(", keys %s, action %s%s, cost %lld", o->keys_spec, o->action, pol,
	       (long long)o->cost);
	if ((o->targets & BENCH_OPTS_TARGET_DAEMON) && (o->tls || o->token_len))
		printf(", daemon%s%s", o->tls ? " over TLS" : "", o->token_len ? " with AUTH" : "");
	printf("\n");
	printf("%-7s %12s %10s %10s %7s %9s %9s %9s %9s   %-26s\n", "target", "decisions/s",
	       "ALLOWED", "DENIED", "ERR", "p50 us", "p99 us", "p99.9 us", "max us",
	       "CPU us/decision:   redis   daemon    bench");
	for (int i = 0; i < 2; i++) {
		const struct result *r = &res[i];
		if (!r->ran)
			continue;
		printf("%-7s %12.0f %10llu %10llu %7llu %9.1f %9.1f %9.1f %9.1f   %16s",
		       target_name(i ? BENCH_OPTS_TARGET_DAEMON : BENCH_OPTS_TARGET_DIRECT), r->dps,
		       (unsigned long long)r->allowed, (unsigned long long)r->denied,
		       (unsigned long long)r->err, r->p50_us, r->p99_us, r->p999_us, r->max_us, "");
		print_cpu(r->cpu_redis);
		print_cpu(r->cpu_daemon);
		print_cpu(r->cpu_bench);
		printf("\n");
		if (r->first_err[0])
			printf("        first error: %s\n", r->first_err);
		if (o->idle)
			printf("        %llu idle connections held%s", (unsigned long long)o->idle,
			       r->idle_rss_bytes < 0 ? "\n" : "");
		if (o->idle && r->idle_rss_bytes >= 0)
			printf(", RSS grew %.0f bytes per idle connection\n", r->idle_rss_bytes);
	}
	if (res[0].ran && res[1].ran && res[0].dps > 0)
		printf("ratio daemon/direct: %.2fx   (p50 %+.1f us, p99 %+.1f us)\n",
		       res[1].dps / res[0].dps, res[1].p50_us - res[0].p50_us,
		       res[1].p99_us - res[0].p99_us);
}

static const char *const csv_fields[] = {
	"dps",	   "allowed", "denied",	      "err",	       "p50_us",       "p99_us",
	"p999_us", "max_us",  "redis_cpu_us", "daemon_cpu_us", "bench_cpu_us", "idle_rss_bytes",
};

static void print_csv_header(void)
{
	printf("targets,connections,pipeline,requests,duration,warmup,rate,keys,action,cost,idle");
	for (int t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof(csv_fields) / sizeof(csv_fields[0]); i++)
			printf(",%s_%s", t ? "daemon" : "direct", csv_fields[i]);
	printf(",ratio\n");
}

static void csv_cpu(double v)
{
	if (v < 0)
		printf(",");
	else
		printf(",%.3f", v);
}

static void print_csv(const struct bench_opts *o, const struct result res[2])
{
	const char *t = o->targets == (BENCH_OPTS_TARGET_DIRECT | BENCH_OPTS_TARGET_DAEMON) ? "both"
			: o->targets == BENCH_OPTS_TARGET_DIRECT ? "direct"
								 : "daemon";
	printf("%s,%d,%d,%llu,%g,%g,%g,%s,%s,%lld,%llu", t, o->conns, o->pipeline,
	       (unsigned long long)o->requests, o->duration, o->warmup, o->rate, o->keys_spec,
	       o->action, (long long)o->cost, (unsigned long long)o->idle);
	for (int i = 0; i < 2; i++) {
		const struct result *r = &res[i];
		if (!r->ran) {
			printf(",,,,,,,,,,,,");
			continue;
		}
		printf(",%.1f,%llu,%llu,%llu,%.1f,%.1f,%.1f,%.1f", r->dps,
		       (unsigned long long)r->allowed, (unsigned long long)r->denied,
		       (unsigned long long)r->err, r->p50_us, r->p99_us, r->p999_us, r->max_us);
		csv_cpu(r->cpu_redis);
		csv_cpu(r->cpu_daemon);
		csv_cpu(r->cpu_bench);
		if (r->idle_rss_bytes < 0)
			printf(",");
		else
			printf(",%.0f", r->idle_rss_bytes);
	}
	if (res[0].ran && res[1].ran && res[0].dps > 0)
		printf(",%.3f\n", res[1].dps / res[0].dps);
	else
		printf(",\n");
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	int rc = bench_opts_parse(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (o.csv_header) {
		print_csv_header();
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	/* many connections: lift the soft fd limit to the hard one */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	struct endpoints eps = {
		.redis = {.name = "redis", .addr = o.redis_addr},
		.daemon = {.name = "daemon",
			   .addr = o.daemon_addr,
			   .token = o.token_len ? o.token : NULL,
			   .token_len = o.token_len,
			   .token_source = o.token_source},
	};
	if (o.tls) {
		/* one context for every connection: the files are read once */
		char err[512];
		struct tls_client_files f = {.ca_file = o.cacert,
					     .cert_file = o.cert,
					     .key_file = o.key,
					     .server_name = o.sni};
		eps.daemon.tls = tls_client_new(&f, err, sizeof(err));
		if (!eps.daemon.tls) {
			fprintf(stderr, "ratelimit-bench: --tls: %s\n", err);
			return 2;
		}
	}
	struct result res[2];
	memset(res, 0, sizeof(res));
	int failed = 0;
	if (o.targets & BENCH_OPTS_TARGET_DIRECT)
		failed |= run_target(&o, &eps, BENCH_OPTS_TARGET_DIRECT, &res[0]) < 0;
	if (!failed && (o.targets & BENCH_OPTS_TARGET_DAEMON))
		failed |= run_target(&o, &eps, BENCH_OPTS_TARGET_DAEMON, &res[1]) < 0;
	tls_client_unref(eps.daemon.tls);
	if (failed)
		return 1;
	if (o.csv)
		print_csv(&o, res);
	else
		print_report(&o, res);
	return 0;
}
