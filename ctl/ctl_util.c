/*
 * ctl_util.c - what ratelimitctl.c (the line protocol) and ctl_grpc.c
 * (gRPC) share: errors and JSON strings, the deadline and the waits and
 * connection within it (over TLS with the daemon's own src/lib/tls.c
 * when asked), the token, the config file's listener address. See
 * ctl_util.h.
 */
#include "ctl_util.h"

#include <errno.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "config.h"
#include "config_yaml.h"
#include "tls.h"

/* The longest single poll(): its timeout is an int of milliseconds. */
#define CTL_POLL_MAX_MS 60000

int64_t ctl_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -- output */

void ctl_json_str(const char *s, size_t len)
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

void ctl_json_cstr(const char *s)
{
	ctl_json_str(s, strlen(s));
}

void ctl_error(const struct ctl_ctx *x, const char *code, int grpc_status, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* where the address came from, for the errors it may explain */
	if (x->why[0] && n >= 0 && (size_t)n < sizeof(msg) &&
	    (!strcmp(code, "connect") || !strcmp(code, "timeout") || !strcmp(code, "protocol") ||
	     !strcmp(code, "tls")))
		snprintf(msg + n, sizeof(msg) - (size_t)n, " (%s)", x->why);
	fprintf(stderr, "ratelimitctl: %s\n", msg);
	if (x->json) {
		printf("{\"command\":");
		ctl_json_cstr(x->command ? x->command : "");
		printf(",\"result\":\"error\",\"error\":");
		ctl_json_cstr(code);
		if (grpc_status >= 0)
			printf(",\"grpc_status\":%d", grpc_status);
		printf(",\"message\":");
		ctl_json_cstr(msg);
		printf("}\n");
	}
}

/* -- the config file */

void ctl_config_errors(const struct ctl_ctx *x, const char *path, const char *err)
{
	fprintf(stderr, "%s\n", err);
	if (!x->json)
		return;
	printf("{\"command\":");
	ctl_json_cstr(x->command ? x->command : "");
	printf(",\"result\":\"invalid\",\"file\":");
	ctl_json_cstr(path);
	printf(",\"errors\":[");
	/* one error per line, as ratelimitd -t prints them */
	const char *p = err;
	for (int i = 0; *p; i++) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (i)
			putchar(',');
		ctl_json_str(p, len);
		p += len + (nl ? 1 : 0);
	}
	printf("]}\n");
}

struct config *ctl_load_config(const struct ctl_ctx *x, const char *path)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = config_load(path, err, sizeof(err));
	if (!cfg)
		ctl_config_errors(x, path, err);
	return cfg;
}

int ctl_choose_address(struct ctl_ctx *x, const char *path, enum ctl_listener kind,
		       const char *fallback, const char *option)
{
	static const char *kinds[] = {
		[CTL_LISTENER_LINE] = "line-protocol listener",
		[CTL_LISTENER_ADMIN] = "line-protocol listener with admin: true",
		[CTL_LISTENER_GRPC] = "protocol: grpc listener",
	};
	if (x->address)
		return 0;
	/* the file alone: envoy.config's rules (config_load reads them) do not
	 * say where the daemon listens */
	char err[CONFIG_ERR_MAX];
	char *buf;
	size_t len;
	if (yp_read_file(path, CONFIG_FILE_MAX, &buf, &len, err, sizeof(err)) < 0) {
		x->address = fallback;
		snprintf(x->why, sizeof(x->why), "the default address: %.900s; %s names another",
			 err, option);
		return 0;
	}
	struct config *cfg = config_parse(path, buf, len, err, sizeof(err));
	free(buf);
	if (!cfg) {
		ctl_config_errors(x, path, err);
		fprintf(stderr,
			"ratelimitctl: %s: no %s: the config file is invalid (%s names one)\n",
			x->command, kinds[kind], option);
		return -1;
	}
	for (size_t i = 0; i < cfg->nlisten && !x->address; i++) {
		const struct config_listen *l = &cfg->listen[i];
		int match = kind == CTL_LISTENER_GRPC
				    ? l->protocol == CONFIG_PROTOCOL_GRPC &&
					      strncmp(l->address, "unix:", 5) != 0
				    : l->protocol == CONFIG_PROTOCOL_LINE &&
					      (kind == CTL_LISTENER_LINE || l->admin);
		if (match) {
			snprintf(x->address_buf, sizeof(x->address_buf), "%s", l->address);
			x->address = x->address_buf;
			/* its certificate is verified against --cacert, else the
			 * system's CAs */
			if (l->tls.enabled)
				x->tls = 1;
			snprintf(x->why, sizeof(x->why), "the first %s of %s%s", kinds[kind], path,
				 l->tls.enabled ? ", TLS" : "");
		}
	}
	config_unref(cfg);
	if (!x->address) {
		x->address = fallback;
		snprintf(x->why, sizeof(x->why), "the default address: %s has no %s; %s names one",
			 path, kinds[kind], option);
	}
	return 0;
}

/* -- the connection */

int ctl_wait(int fd, short events, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - ctl_now_ms();
		if (left <= 0)
			return 0;
		struct pollfd pfd = {.fd = fd, .events = events};
		int n = poll(&pfd, 1, (int)(left > CTL_POLL_MAX_MS ? CTL_POLL_MAX_MS : left));
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

int ctl_wait_ready(const struct ctl_ctx *x, int fd, short events)
{
	int n = ctl_wait(fd, events, x->deadline_ms);
	if (n == 0)
		return ctl_failed(x, "timeout", "no answer from %s within %lldms", x->address,
				  (long long)x->timeout_ms);
	if (n < 0)
		return ctl_failed(x, "connect", "poll: %s", strerror(errno));
	return 0;
}

/* Waits as a TLS step asks: 0, or -1 printed. */
static int tls_wait(const struct ctl_ctx *x, int fd, enum tls_io r)
{
	return ctl_wait_ready(x, fd, r == TLS_IO_WANT_WRITE ? POLLOUT : POLLIN);
}

static int tls_failed(const struct ctl_ctx *x, enum tls_io r, const char *err)
{
	if (r == TLS_IO_CLOSED)
		return ctl_failed(x, "connect", "%s closed the connection", x->address);
	return ctl_failed(x, "tls", "TLS with %s: %s", x->address, err);
}

int ctl_send_all(const struct ctl_ctx *x, int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		if (x->ssl) {
			char err[256];
			size_t n = 0;
			enum tls_io r = tls_write(x->ssl, p, len, &n, err, sizeof(err));
			if (r == TLS_IO_DONE) {
				p += n;
				len -= n;
			} else if (r == TLS_IO_WANT_READ || r == TLS_IO_WANT_WRITE) {
				if (tls_wait(x, fd, r) < 0)
					return -1;
			} else {
				return tls_failed(x, r, err);
			}
			continue;
		}
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (ctl_wait_ready(x, fd, POLLOUT) < 0)
				return -1;
		} else {
			return ctl_failed(x, "connect", "sending to %s: %s", x->address,
					  strerror(errno));
		}
	}
	return 0;
}

long ctl_recv(const struct ctl_ctx *x, int fd, void *buf, size_t len)
{
	for (;;) {
		if (x->ssl) {
			/* read first: OpenSSL may hold bytes no poll() tells of */
			char err[256];
			size_t n = 0;
			enum tls_io r = tls_read(x->ssl, buf, len, &n, err, sizeof(err));
			if (r == TLS_IO_DONE && n > 0)
				return (long)n;
			if (r == TLS_IO_WANT_READ || r == TLS_IO_WANT_WRITE) {
				if (tls_wait(x, fd, r) < 0)
					return -1;
				continue;
			}
			if (r != TLS_IO_DONE)
				return tls_failed(x, r, err);
			continue;
		}
		ssize_t n = recv(fd, buf, len, 0);
		if (n > 0)
			return (long)n;
		if (n == 0)
			return ctl_failed(x, "connect", "%s closed the connection", x->address);
		if (errno != EAGAIN && errno != EINTR)
			return ctl_failed(x, "connect", "reading from %s: %s", x->address,
					  strerror(errno));
		if (ctl_wait_ready(x, fd, POLLIN) < 0)
			return -1;
	}
}

void ctl_close(struct ctl_ctx *x, int fd)
{
	if (x->ssl)
		tls_session_free(x->ssl);
	x->ssl = NULL;
	if (x->tls_ctx)
		tls_client_unref(x->tls_ctx);
	x->tls_ctx = NULL;
	if (fd >= 0)
		close(fd);
}

int ctl_token(const struct ctl_ctx *x, char *buf, size_t len)
{
	const char *env = getenv("RATELIMITCTL_TOKEN");
	if (x->token_file) {
		FILE *f = fopen(x->token_file, "r");
		if (!f)
			return ctl_failed(x, "usage", "token file %s: %s", x->token_file,
					  strerror(errno));
		size_t n = fread(buf, 1, len - 1, f);
		fclose(f);
		buf[n] = '\0';
		buf[strcspn(buf, "\r\n")] = '\0';
	} else if (env && *env) {
		snprintf(buf, len, "%s", env);
	} else {
		return 0;
	}
	if (!buf[0] || strpbrk(buf, " \t"))
		return ctl_failed(x, "usage", "the token is empty or has a blank");
	return 1;
}

/* The handshake on connected fd, verifying the listener as host (or
 * --servername): 0, or -1 printed ("tls": the certificate's verify error,
 * or OpenSSL's reason). */
static int tls_start(struct ctl_ctx *x, int fd, const char *host)
{
	char err[512];
	struct tls_client_files f = {.ca_file = x->ca_file,
				     .cert_file = x->cert_file,
				     .key_file = x->key_file,
				     .server_name = x->server_name};
	x->tls_ctx = tls_client_new(&f, err, sizeof(err));
	if (!x->tls_ctx)
		return ctl_failed(x, "tls", "%s", err);
	x->ssl = tls_client_session(x->tls_ctx, fd, host, err, sizeof(err));
	if (!x->ssl)
		return ctl_failed(x, "tls", "%s", err);
	if (x->alpn) {
		unsigned char list[32];
		size_t n = strlen(x->alpn);
		list[0] = (unsigned char)n;
		memcpy(list + 1, x->alpn, n);
		SSL_set_alpn_protos(x->ssl, list, (unsigned)n + 1);
	}
	for (;;) {
		enum tls_io r = tls_handshake(x->ssl, err, sizeof(err));
		if (r == TLS_IO_DONE)
			return 0;
		if (r == TLS_IO_WANT_READ || r == TLS_IO_WANT_WRITE) {
			if (tls_wait(x, fd, r) < 0)
				return -1;
			continue;
		}
		if (r == TLS_IO_CLOSED)
			return ctl_failed(x, "tls",
					  "TLS handshake with %s: closed by the listener (is it "
					  "TLS?)",
					  x->address);
		return ctl_failed(x, "tls", "TLS handshake with %s: %s", x->address, err);
	}
}

/* ctl_connect()'s socket, then TLS when asked; fd or -1 printed. */
static int with_tls(struct ctl_ctx *x, int fd, const char *host)
{
	if (fd < 0 || !x->tls)
		return fd;
	if (tls_start(x, fd, host) < 0) {
		ctl_close(x, fd);
		return -1;
	}
	return fd;
}

/* fd, connect() called: waits for the outcome. 0 connected, else the error
 * (ETIMEDOUT: the deadline passed). */
static int connected(int fd, int64_t deadline_ms)
{
	int n = ctl_wait(fd, POLLOUT, deadline_ms);
	if (n == 0)
		return ETIMEDOUT;
	if (n < 0)
		return errno;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return errno;
	return err;
}

static int connect_unix(struct ctl_ctx *x, const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sun.sun_path))
		return ctl_failed(x, "usage", "unix socket path too long: %s", path);
	strcpy(sun.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return ctl_failed(x, "connect", "socket: %s", strerror(errno));
	int err = 0;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
		err = errno == EINPROGRESS || errno == EAGAIN ? connected(fd, x->deadline_ms)
							      : errno;
	if (err) {
		close(fd);
		if (err == ETIMEDOUT)
			return ctl_failed(x, "timeout", "cannot connect to %s within %lldms",
					  x->address, (long long)x->timeout_ms);
		return ctl_failed(x, "connect", "cannot connect to %s: %s", x->address,
				  strerror(err));
	}
	return fd;
}

int ctl_connect(struct ctl_ctx *x, int unix_ok)
{
	x->deadline_ms = ctl_now_ms() + x->timeout_ms;
	if (unix_ok && strncmp(x->address, "unix:", 5) == 0)
		return with_tls(x, connect_unix(x, x->address + 5), "localhost");
	char host[256], port[16];
	int p;
	if (addr_split(x->address, host, sizeof(host), &p) < 0 || p <= 0 || p > 65535)
		return ctl_failed(x, "usage", "bad address %s: host:port, [v6]:port%s", x->address,
				  unix_ok ? " or unix:PATH" : "");
	/* a listener on every address is reached on loopback */
	if (strcmp(host, "0.0.0.0") == 0 || host[0] == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (strcmp(host, "::") == 0)
		snprintf(host, sizeof(host), "::1");
	snprintf(port, sizeof(port), "%d", p);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0)
		return ctl_failed(x, "connect", "%s: %s", x->address, gai_strerror(rc));
	int fd = -1, err = 0;
	/* each address in turn, until one connects or the deadline passes */
	for (ai = res; ai && fd < 0 && err != ETIMEDOUT; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		err = 0;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
			err = errno == EINPROGRESS ? connected(fd, x->deadline_ms) : errno;
		if (err) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0 && err == ETIMEDOUT)
		return ctl_failed(x, "timeout", "cannot connect to %s within %lldms", x->address,
				  (long long)x->timeout_ms);
	if (fd < 0)
		return ctl_failed(x, "connect", "cannot connect to %s: %s", x->address,
				  strerror(err));
	return with_tls(x, fd, host);
}
