/* config.c - the schema (key tables, policy grammar) and the refcounted config snapshot. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_yaml.h"
#include "envoy_rules.h"
#include "keys.h"
#include "log.h"
#include "override.h"
#include "yenum.h"

_Static_assert(CONFIG_ERR_MAX == YP_ERR_MAX && CONFIG_ERRORS_SHOWN == YP_ERRORS_SHOWN,
	       "config.h promises what config_yaml.c gives");

/* Every default lives here; config_defaults() is the only place that applies them. */
#define DEFAULT_LISTEN "127.0.0.1:7379"
#define DEFAULT_REDIS_ADDRESS "127.0.0.1:6379"
#define DEFAULT_REDIS_DATABASE 0
#define DEFAULT_REDIS_TIMEOUT_MS 50
#define DEFAULT_REDIS_CONNECTIONS 2
#define DEFAULT_PREFIX "rl:"
#define DEFAULT_ON_STORE_ERROR POLICY_ON_ERROR_ALLOW
#define DEFAULT_MAX_LINE 4096
#define DEFAULT_MAX_CLIENTS 10000
#define DEFAULT_IDLE_TIMEOUT_MS 0
#define DEFAULT_REQUEST_TIMEOUT_MS 10000
#define DEFAULT_LOG_LEVEL LOG_LEVEL_INFO

/* sizeof(sockaddr_un.sun_path) on Linux, terminating NUL included. */
#define UNIX_PATH_MAX 108
/* A config is a few kilobytes; refuse to slurp /dev/zero or a stray log file. */
#define CONFIG_FILE_MAX (16 * 1024 * 1024)

/* One policy while the policies mapping is read; the key mark survives the
 * sort so a duplicate name can be reported where it occurs. */
struct pentry {
	struct policy p;
	yaml_mark_t mark;
};

/* The schema's state while policies are read (the parser's ctx); also
 * where each listen address and metrics.listen were, for check_binds. */
struct policies_read {
	struct pentry *pol;
	size_t npol, cappol;
	yaml_mark_t *listen_marks; /* one per c->listen entry read */
	size_t caplm;
	yaml_mark_t metrics_mark;
};

/* Policy mapping form, gathered before it can be checked: which keys are
 * allowed depends on `algorithm`, which may come last. */
struct rate {
	int64_t count, period_ms;
};

struct override_form;

struct policy_form {
	enum policy_algo algo;
	int nlimits;
	struct policy_limit limits[POLICY_MAX_LIMITS];
	yaml_mark_t limit_marks[POLICY_MAX_LIMITS];
	int64_t capacity;
	struct rate rate;
	enum policy_on_error on_error;
	int shadow;
	struct policy_ban ban;
	/* overrides as read; made into the policy's override set once its
	 * algorithm and limits are known */
	struct override_form *ov;
	size_t nov, capov;
	yaml_mark_t ov_mark;
};

/* One entry under a policy's overrides, as read. */
struct override_form {
	char *pattern; /* without a final '*' */
	size_t len;
	int prefix;
	char shown[72]; /* for messages: printable, cut at 64 bytes, with its '*' */
	enum override_kind kind;
	struct policy_form f; /* OVERRIDE_LIMITS: limits, or capacity and rate */
	unsigned seen;	      /* of them, which were given (1u << PK_...) */
	yaml_mark_t mark;     /* the value */
};


/* Keys are built as <prefix>{action:user}...; a brace would break Redis
 * Cluster hash tags, whitespace and control bytes have no business there. */
static int set_prefix(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a string", &s, &len) < 0)
		return -1;
	if (len > KEYS_PREFIX_MAX)
		return yp_failk(P, P->ev.start_mark, k->name, "longer than %d bytes",
				KEYS_PREFIX_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '{' || ch == '}' || ch <= ' ' || ch == 0x7f)
			return yp_failk(
				P, P->ev.start_mark, k->name,
				"must not contain '{', '}', whitespace or control characters");
	}
	return yp_dup_string(P, (char **)dst, s, len);
}

static int port_valid(const char *s, size_t len)
{
	int64_t port;
	return yp_parse_dec(s, len, 1, 65535, &port) == 0;
}

static int host_char(char ch, int bracketed)
{
	if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	    ch == '.' || ch == '-' || ch == '_')
		return 1;
	/* Inside brackets: IPv6 colons and a %zone suffix. */
	return bracketed && (ch == ':' || ch == '%');
}

/* "host:port", "[v6]:port" or "unix:/absolute/path"; only the syntax is
 * checked here, resolving is the listener's and the store's business. */
static const char *address_error(const char *s, size_t len)
{
	if (len >= 5 && memcmp(s, "unix:", 5) == 0) {
		if (len == 5 || s[5] != '/')
			return "a unix socket path must be absolute: unix:/path";
		if (len - 5 >= UNIX_PATH_MAX)
			return "unix socket path too long (at most 107 bytes)";
		return NULL;
	}
	const char *usage = "expected host:port, [IPv6]:port or unix:/path";
	size_t colon = len;
	while (colon > 0 && s[colon - 1] != ':')
		colon--;
	if (colon == 0)
		return usage;
	colon--;
	if (!port_valid(s + colon + 1, len - colon - 1))
		return "port must be an integer from 1 to 65535";
	const char *host = s;
	size_t hlen = colon;
	int bracketed = hlen > 0 && host[0] == '[';
	if (bracketed) {
		if (hlen < 3 || host[hlen - 1] != ']' || !memchr(host + 1, ':', hlen - 2))
			return "an IPv6 address goes in brackets: [::1]:port";
		host++;
		hlen -= 2;
	}
	if (hlen == 0)
		return usage;
	for (size_t i = 0; i < hlen; i++) {
		if (!host_char(host[i], bracketed))
			return host[i] == ':' ? "an IPv6 address goes in brackets: [::1]:port"
					      : "invalid character in host name";
	}
	return NULL;
}

static int address_scalar(struct yparser *P, const char *key, const char **s, size_t *len)
{
	if (yp_scalar(P, key, "an address (host:port or unix:/path)", s, len) < 0)
		return -1;
	const char *why = address_error(*s, *len);
	if (why)
		return yp_failk(P, P->ev.start_mark, key, "%s", why);
	return 0;
}

static int set_address(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	return yp_dup_string(P, (char **)dst, s, len);
}

/* A share of a limit, 0 < x <= 1, written as a decimal ("0.5", "1"). */
static int set_share(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a number above 0, at most 1", &s, &len) < 0)
		return -1;
	int digits = 0, dots = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] >= '0' && s[i] <= '9')
			digits++;
		else if (s[i] == '.' && dots++ == 0)
			continue;
		else
			digits = -1000;
	}
	/* libyaml NUL-terminates scalars: strtod stops at the end */
	double v = digits > 0 && digits <= 12 ? strtod(s, NULL) : -1;
	if (!(v > 0 && v <= 1))
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be a number above 0 and at most 1, such as 0.5");
	*(double *)dst = v;
	return 0;
}

static const struct yenum store_names[] = {
	{"redis", CONFIG_STORE_REDIS, NULL},
	{"memory", CONFIG_STORE_MEMORY, NULL},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_store) == sizeof(int), "yp_set_enum stores an int");

/* The printers below show a value as a file would write it. */
static void put_share(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%g", *(const double *)((const char *)base + k->offset));
}

/* Quoted: "" is a prefix too. */
static void put_prefix(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "\"%s\"", *(char *const *)((const char *)base + k->offset));
}

enum { MEMK_MAX_KEYS, MEMK_N };

static const struct ykey memory_keys[MEMK_N] = {
	[MEMK_MAX_KEYS] = {"max_keys", yp_set_int, offsetof(struct config_memory, max_keys), 1000,
			   1000000000, YP_RESTART, yp_put_int, NULL},
};

static int set_memory(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[MEMK_N], start;
	return yp_section(P, k, "expected a mapping", memory_keys, MEMK_N, dst, &seen, marks,
			  &start);
}


static void free_listen(struct config *c)
{
	for (size_t i = 0; i < c->nlisten; i++)
		free(c->listen[i].address);
	free(c->listen);
	c->listen = NULL;
	c->nlisten = 0;
}

/* An octal file mode such as 0660 (YAML would read a plain 0660 as octal
 * too, but we take the digits as written). */
static int set_mode(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "an octal file mode such as 0660", &s, &len) < 0)
		return -1;
	int mode = 0;
	if (len < 3 || len > 4)
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be an octal file mode such as 0660");
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '7')
			return yp_failk(P, P->ev.start_mark, k->name,
					"must be an octal file mode such as 0660");
		mode = mode * 8 + (s[i] - '0');
	}
	if (mode > 0777)
		return yp_failk(P, P->ev.start_mark, k->name,
				"only permission bits (at most 0777)");
	*(int *)dst = mode;
	return 0;
}

/* An HTTP header name: a token (RFC 9110), at most CONFIG_HEADER_NAME_MAX bytes. */
static int set_header_name(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a header name", &s, &len) < 0)
		return -1;
	if (len == 0 || len > CONFIG_HEADER_NAME_MAX)
		return yp_failk(P, P->ev.start_mark, k->name, "a header name of 1 to %d bytes",
				CONFIG_HEADER_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!strchr("!#$%&'*+-.^_`|~", s[i]) && !(s[i] >= '0' && s[i] <= '9') &&
		    !(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z'))
			return yp_failk(P, P->ev.start_mark, k->name,
					"not a header name (letters, digits, - and the like)");
	memcpy(dst, s, len);
	((char *)dst)[len] = '\0';
	return 0;
}

static int trusted_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct config_http *h = dst;
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a network such as 10.0.0.0/8", &s, &len) < 0)
		return -1;
	if (i >= CONFIG_TRUSTED_MAX)
		return 0; /* yp_seq reported it */
	if (addr_net_parse(s, len, &h->trusted[i]) < 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"not an IP address or network: write 10.0.0.0/8, ::1 ...");
	h->ntrusted = i + 1;
	return 0;
}

static int set_trusted(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config_http *h = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of networks");
	size_t n;
	h->ntrusted = 0;
	return yp_seq(P, k, "networks", trusted_entry, h, &n);
}

static int set_deny_status(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	int64_t v;
	if (yp_scalar(P, k->name, "an HTTP status", &s, &len) < 0)
		return -1;
	if (yp_parse_dec(s, len, 400, 499, &v) < 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"an HTTP status from 400 to 499 (429, or 403 behind nginx)");
	*(int *)dst = (int)v;
	return 0;
}

/* systemd's rule for a FileDescriptorName=: printable ASCII but ':' (it
 * separates the names in $LISTEN_FDNAMES), 1 to 255 bytes */
static int set_fd_name(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a socket name", &s, &len) < 0)
		return -1;
	if (len == 0 || len > CONFIG_FDNAME_MAX)
		return yp_failk(P, P->ev.start_mark, k->name,
				"a socket name of 1 to %d bytes (FileDescriptorName=)",
				CONFIG_FDNAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (s[i] <= ' ' || s[i] > '~' || s[i] == ':')
			return yp_failk(P, P->ev.start_mark, k->name,
					"not a FileDescriptorName= (printable ASCII, no blank or "
					"':')");
	memcpy(dst, s, len);
	((char *)dst)[len] = '\0';
	return 0;
}

enum {
	LK_ADDRESS,
	LK_NAME,
	LK_ADMIN,
	LK_MODE,
	LK_PROTOCOL,
	LK_USER_HEADER,
	LK_TRUSTED,
	LK_DENY_STATUS,
	LK_LEGACY,
	LK_N
};

#define LK_HTTP_KEYS \
	((1u << LK_USER_HEADER) | (1u << LK_TRUSTED) | (1u << LK_DENY_STATUS) | (1u << LK_LEGACY))

static void put_mode(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%04o", (unsigned)*(const int *)((const char *)base + k->offset));
}

static const struct yenum protocol_names[] = {
	{"line", CONFIG_PROTOCOL_LINE, "the line protocol and RESP"},
	{"http", CONFIG_PROTOCOL_HTTP, NULL},
	{"grpc", CONFIG_PROTOCOL_GRPC, "Envoy's rate limit service"},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_protocol) == sizeof(int), "yp_set_enum stores an int");

/* "[10.0.0.0/8 ::1/128]" */
static void put_nets(FILE *f, const struct config_http *h)
{
	fputc('[', f);
	for (size_t i = 0; i < h->ntrusted; i++) {
		char ip[64];
		addr_ip_text(&h->trusted[i].ip, ip, sizeof(ip));
		fprintf(f, "%s%s/%d", i ? " " : "", ip, h->trusted[i].prefix);
	}
	fputc(']', f);
}

static void put_trusted(FILE *f, const struct ykey *k, const void *base)
{
	put_nets(f, (const void *)((const char *)base + k->offset));
}

/* The listeners are made once, at start-up: every key is restart-only. */
static const struct ykey listen_keys[LK_N] = {
	[LK_ADDRESS] = {"address", set_address, offsetof(struct config_listen, address), 0, 0,
			YP_RESTART, yp_put_string, NULL},
	[LK_NAME] = {"name", set_fd_name, offsetof(struct config_listen, name), 0, 0, YP_RESTART,
		     yp_put_chars, NULL},
	[LK_ADMIN] = {"admin", yp_set_bool, offsetof(struct config_listen, admin), 0, 0, YP_RESTART,
		      yp_put_bool, NULL},
	[LK_MODE] = {"mode", set_mode, offsetof(struct config_listen, mode), 0, 0, YP_RESTART,
		     put_mode, NULL},
	[LK_PROTOCOL] = {"protocol", yp_set_enum, offsetof(struct config_listen, protocol), 0, 0,
			 YP_RESTART, yp_put_enum, protocol_names},
	[LK_USER_HEADER] = {"user_header", set_header_name,
			    offsetof(struct config_listen, http.user_header), 0, 0, YP_RESTART,
			    yp_put_chars, NULL},
	[LK_TRUSTED] = {"trusted_proxies", set_trusted, offsetof(struct config_listen, http), 0,
			CONFIG_TRUSTED_MAX, YP_RESTART, put_trusted, NULL},
	[LK_DENY_STATUS] = {"deny_status", set_deny_status,
			    offsetof(struct config_listen, http.deny_status), 0, 0, YP_RESTART,
			    yp_put_int, NULL},
	[LK_LEGACY] = {"legacy_headers", yp_set_bool,
		       offsetof(struct config_listen, http.legacy_headers), 0, 0, YP_RESTART,
		       yp_put_bool, NULL},
};

/* The defaults of an HTTP listener: loopback proxies are trusted. */
static void http_defaults(struct config_http *h)
{
	h->deny_status = 429;
	addr_net_parse("127.0.0.0/8", 11, &h->trusted[0]);
	addr_net_parse("::1", 3, &h->trusted[1]);
	h->ntrusted = 2;
}

/* An HTTP listener's options, all of them: a reload compares this text with
 * the running one, and they apply only when the listener is made. */
static void put_http(FILE *f, const struct config_http *h)
{
	fprintf(f, " (http, user_header %s, trusted_proxies ",
		h->user_header[0] ? h->user_header : "-");
	put_nets(f, h);
	fprintf(f, ", deny_status %d%s)", h->deny_status,
		h->legacy_headers ? ", legacy_headers" : "");
}

static void put_listen(FILE *f, const struct ykey *k, const void *base)
{
	const struct config *c = base;
	(void)k;
	fputc('[', f);
	for (size_t i = 0; i < c->nlisten; i++) {
		const struct config_listen *l = &c->listen[i];
		int is_unix = strncmp(l->address, "unix:", 5) == 0;
		fprintf(f, "%s%s", i ? ", " : "", l->address);
		if (l->name[0])
			fprintf(f, " (name %s)", l->name);
		if (l->admin && is_unix)
			fprintf(f, " (admin, mode %04o)", (unsigned)l->mode);
		else if (l->admin)
			fputs(" (admin)", f);
		else if (is_unix)
			fprintf(f, " (mode %04o)", (unsigned)l->mode);
		if (l->protocol == CONFIG_PROTOCOL_HTTP)
			put_http(f, &l->http);
	}
	fputc(']', f);
}

/* The listen list while it is read. */
struct listen_read {
	struct config *c;
	size_t cap;
};

/* One listen entry: "address" or {address, admin, mode}. */
static int listen_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct listen_read *L = dst;
	struct config *c = L->c;
	(void)i;
	if (yp_grow((void **)&c->listen, &L->cap, c->nlisten, sizeof(*c->listen)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	struct policies_read *R = P->ctx;
	if (yp_grow((void **)&R->listen_marks, &R->caplm, c->nlisten, sizeof(yaml_mark_t)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	R->listen_marks[c->nlisten] = P->ev.start_mark; /* the scalar form's address */
	struct config_listen *l = &c->listen[c->nlisten];
	memset(l, 0, sizeof(*l));
	c->nlisten++; /* counted now so free_listen releases a half-read entry */
	l->mode = CONFIG_DEFAULT_SOCKET_MODE;
	http_defaults(&l->http);
	if (P->ev.type != YAML_MAPPING_START_EVENT) {
		const char *s;
		size_t len;
		if (address_scalar(P, k->name, &s, &len) < 0)
			return -1;
		l->address = strndup(s, len);
		return l->address ? 0 : yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	}
	yaml_mark_t start = P->ev.start_mark;
	unsigned seen;
	yaml_mark_t marks[LK_N];
	if (yp_map(P, k->name, listen_keys, LK_N, l, &seen, marks) < 0)
		return -1;
	if (!(seen & (1u << LK_ADDRESS)))
		return yp_fail_section(P, start, "an entry needs an address");
	R->listen_marks[c->nlisten - 1] = marks[LK_ADDRESS];
	if ((seen & (1u << LK_MODE)) && strncmp(l->address, "unix:", 5) != 0)
		return yp_failk(P, marks[LK_MODE], "mode", "only applies to unix:/path addresses");
	if (l->protocol != CONFIG_PROTOCOL_HTTP && (seen & LK_HTTP_KEYS)) {
		for (int i = 0; i < LK_N; i++)
			if ((LK_HTTP_KEYS & (1u << i)) && (seen & (1u << i)))
				return yp_failk(P, marks[i], listen_keys[i].name,
						"only applies with protocol: http");
	}
	return 0;
}

static int set_listen(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config *c = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of addresses");
	yaml_mark_t start = P->ev.start_mark;
	struct listen_read L = {c, 0};
	size_t n;
	free_listen(c); /* the default */
	if (yp_seq(P, k, "addresses", listen_entry, &L, &n) < 0)
		return -1;
	if (c->nlisten == 0)
		return yp_failk(P, start, k->name, "at least one address is required");
	return 0;
}

enum { EK_CONFIG, EK_ALGORITHM, EK_HEADERS, EK_N };

static const struct yenum envoy_header_names[] = {
	{"none", CONFIG_ENVOY_HEADERS_NONE, NULL},
	{"ratelimit", CONFIG_ENVOY_HEADERS_RATELIMIT, "RateLimit-Limit, ..."},
	{"x-ratelimit", CONFIG_ENVOY_HEADERS_XRATELIMIT, "X-RateLimit-Limit, ..."},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_envoy_headers) == sizeof(int), "yp_set_enum stores an int");

/* The rules are loaded with the file (config_load) and each gRPC call
 * takes the configuration current when it arrives: all apply on reload. */
static const struct ykey envoy_keys[EK_N] = {
	[EK_CONFIG] = {"config", yp_set_string, offsetof(struct config_envoy, config), 0, 0,
		       YP_RELOAD, yp_put_string, NULL},
	[EK_ALGORITHM] = {"algorithm", yp_set_enum, offsetof(struct config_envoy, algorithm), 0, 0,
			  YP_RELOAD, yp_put_enum, policy_algo_names},
	[EK_HEADERS] = {"response_headers", yp_set_enum, offsetof(struct config_envoy, headers), 0,
			0, YP_RELOAD, yp_put_enum, envoy_header_names},
};

static int set_envoy(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[EK_N], start;
	if (yp_section(P, k, "expected a mapping", envoy_keys, EK_N, dst, &seen, marks, &start) < 0)
		return -1;
	if (!(seen & (1u << EK_CONFIG)))
		return yp_fail_section(P, start,
				       "needs config: a file or directory of envoyproxy/ratelimit "
				       "configuration");
	return 0;
}

enum { MK_LISTEN, MK_N };

/* HTTP is TCP here: evhttp binds host:port. */
static int set_tcp_address(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected host:port, not a unix socket");
	return yp_dup_string(P, (char **)dst, s, len);
}

static const struct ykey metrics_keys[MK_N] = {
	[MK_LISTEN] = {"listen", set_tcp_address, offsetof(struct config, metrics_listen), 0, 0,
		       YP_RESTART, yp_put_string, NULL},
};

static int set_metrics(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[MK_N], start;
	if (yp_section(P, k, "expected a mapping", metrics_keys, MK_N, dst, &seen, marks, &start) <
	    0)
		return -1;
	if (!(seen & (1u << MK_LISTEN)))
		return yp_fail_section(P, start, "needs listen: host:port");
	((struct policies_read *)P->ctx)->metrics_mark = marks[MK_LISTEN];
	return 0;
}

/* A name usable as an action in keys and metrics: [A-Za-z0-9_.-]. */
static int set_namespace(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a name", &s, &len) < 0)
		return -1;
	if (len == 0 || len > POLICY_NAME_MAX)
		return yp_failk(P, P->ev.start_mark, k->name, "1 to %d characters",
				POLICY_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!strchr("_.-", s[i]) && !(s[i] >= '0' && s[i] <= '9') &&
		    !(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z'))
			return yp_failk(P, P->ev.start_mark, k->name,
					"letters, digits, '_', '.' and '-' only");
	memcpy(dst, s, len);
	((char *)dst)[len] = '\0';
	return 0;
}

enum { HK_ENABLED, HK_NAMESPACE, HK_MAX_BURST, HK_MAX_PERIOD, HK_N };

/* cmd.c reads them from each request's configuration: all apply on reload. */
static const struct ykey throttle_keys[HK_N] = {
	[HK_ENABLED] = {"enabled", yp_set_bool, offsetof(struct config_throttle, enabled), 0, 0,
			YP_RELOAD, yp_put_bool, NULL},
	[HK_NAMESPACE] = {"namespace", set_namespace, offsetof(struct config_throttle, namespace),
			  0, 0, YP_RELOAD, yp_put_chars, NULL},
	[HK_MAX_BURST] = {"max_burst", yp_set_int64, offsetof(struct config_throttle, max_burst), 0,
			  POLICY_MAX_COUNT - 1, YP_RELOAD, yp_put_int64, NULL},
	[HK_MAX_PERIOD] = {"max_period", yp_set_duration,
			   offsetof(struct config_throttle, max_period_ms), 1000,
			   POLICY_MAX_PERIOD_MS, YP_RELOAD, yp_put_duration, NULL},
};

static int set_throttle(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[HK_N], start;
	return yp_section(P, k, "expected a mapping", throttle_keys, HK_N, dst, &seen, marks,
			  &start);
}

#define UNSET "(none)"

static void put_addrs(FILE *f, const struct config_addrs *a)
{
	fputc('[', f);
	for (size_t i = 0; i < a->n; i++)
		fprintf(f, "%s%s", i ? ", " : "", a->addr[i]);
	fputc(']', f);
}

/* The printers below show "(none)" for the ways to reach Redis not in use. */
static void put_redis_address(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	fputs(r->mode == CONFIG_REDIS_SINGLE ? r->address : UNSET, f);
}

static void put_redis_cluster(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	if (r->mode == CONFIG_REDIS_CLUSTER)
		put_addrs(f, &r->cluster);
	else
		fputs(UNSET, f);
}

static void put_sentinel_master(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	fputs(r->mode == CONFIG_REDIS_SENTINEL ? r->sentinel_master : UNSET, f);
}

static void put_sentinel_addresses(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	if (r->mode == CONFIG_REDIS_SENTINEL)
		put_addrs(f, &r->sentinels);
	else
		fputs(UNSET, f);
}

static int set_addr_list(struct yparser *P, const struct ykey *k, void *dst);
static int set_sentinel(struct yparser *P, const struct ykey *k, void *dst);

enum {
	RK_ADDRESS,
	RK_CLUSTER,
	RK_SENTINEL,
	RK_USERNAME,
	RK_PASSWORD,
	RK_DATABASE,
	RK_TIMEOUT,
	RK_CONNECTIONS,
	RK_N
};

static const struct ykey redis_keys[RK_N] = {
	[RK_ADDRESS] = {"address", set_address, offsetof(struct config_redis, address), 0, 0,
			YP_RESTART, put_redis_address, NULL},
	[RK_CLUSTER] = {"cluster", set_addr_list, offsetof(struct config_redis, cluster), 0,
			CONFIG_CLUSTER_SEEDS_MAX, YP_RESTART, put_redis_cluster, NULL},
	[RK_SENTINEL] = {"sentinel", set_sentinel, 0, 0, 0, YP_SECTION, NULL, NULL},
	[RK_USERNAME] = {"username", yp_set_string, offsetof(struct config_redis, username), 0, 0,
			 YP_RESTART, yp_put_string, NULL},
	[RK_PASSWORD] = {"password", yp_set_string, offsetof(struct config_redis, password), 0, 0,
			 YP_RESTART_SECRET, yp_put_string, NULL},
	[RK_DATABASE] = {"database", yp_set_int, offsetof(struct config_redis, database), 0,
			 2147483647, YP_RESTART, yp_put_int, NULL},
	/* each request takes its deadline from its configuration */
	[RK_TIMEOUT] = {"timeout", yp_set_duration, offsetof(struct config_redis, timeout_ms), 1,
			60000, YP_RELOAD, yp_put_duration, NULL},
	[RK_CONNECTIONS] = {"connections", yp_set_int, offsetof(struct config_redis, connections),
			    1, 64, YP_RESTART, yp_put_int, NULL},
};

static int set_redis(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[RK_N], start;
	if (yp_section(P, k, "expected a mapping", redis_keys, RK_N, dst, &seen, marks, &start) < 0)
		return -1;
	/* Redis 6 ACL AUTH takes both; a user alone would silently log in as default. */
	if ((seen & (1u << RK_USERNAME)) && !(seen & (1u << RK_PASSWORD)))
		return yp_failk(P, marks[RK_USERNAME], "username", "requires redis.password");
	struct config_redis *r = dst;
	int modes = !!(seen & (1u << RK_ADDRESS)) + !!(seen & (1u << RK_CLUSTER)) +
		    !!(seen & (1u << RK_SENTINEL));
	if (modes > 1) {
		int second = (seen & (1u << RK_SENTINEL)) ? RK_SENTINEL : RK_CLUSTER;
		return yp_fail(P, marks[second],
			       "redis: use only one of address, cluster and sentinel");
	}
	if (seen & (1u << RK_CLUSTER)) {
		r->mode = CONFIG_REDIS_CLUSTER;
		/* Redis Cluster has database 0 only. */
		if ((seen & (1u << RK_DATABASE)) && r->database != 0)
			return yp_failk(P, marks[RK_DATABASE], "database",
					"must be 0 with cluster");
	} else if (seen & (1u << RK_SENTINEL)) {
		r->mode = CONFIG_REDIS_SENTINEL;
	}
	return 0;
}

static void free_addrs(struct config_addrs *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->addr[i]);
	free(a->addr);
	a->addr = NULL;
	a->n = 0;
}

/* A list of host:port while it is read. */
struct addrs_read {
	struct config_addrs *a;
	size_t cap;
};

static int addr_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct addrs_read *A = dst;
	struct config_addrs *a = A->a;
	const char *s;
	size_t len;
	(void)i;
	if (address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected host:port, not a unix socket");
	if (yp_grow((void **)&a->addr, &A->cap, a->n, sizeof(*a->addr)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	a->addr[a->n] = strndup(s, len);
	if (!a->addr[a->n])
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	a->n++;
	return 0;
}

/* A list of host:port (TCP only: cluster nodes and sentinels announce TCP addresses). */
static int set_addr_list(struct yparser *P, const struct ykey *k, void *dst)
{
	struct addrs_read A = {dst, 0};
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of host:port");
	yaml_mark_t start = P->ev.start_mark;
	size_t n;
	free_addrs(A.a);
	if (yp_seq(P, k, "addresses", addr_entry, &A, &n) < 0)
		return -1;
	if (A.a->n == 0)
		return yp_failk(P, start, k->name, "at least one address is required");
	return 0;
}

enum { SK_MASTER, SK_ADDRESSES, SK_N };

static const struct ykey sentinel_keys[SK_N] = {
	[SK_MASTER] = {"master", yp_set_string, offsetof(struct config_redis, sentinel_master), 0,
		       0, YP_RESTART, put_sentinel_master, NULL},
	[SK_ADDRESSES] = {"addresses", set_addr_list, offsetof(struct config_redis, sentinels), 0,
			  0, YP_RESTART, put_sentinel_addresses, NULL},
};

static int set_sentinel(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[SK_N], start;
	if (yp_section(P, k, "expected {master: NAME, addresses: [...]}", sentinel_keys, SK_N, dst,
		       &seen, marks, &start) < 0)
		return -1;
	if (seen != (1u << SK_N) - 1)
		return yp_fail_section(P, start, "needs master and addresses");
	return 0;
}

/* One rate string at the current event, appended to f; a bad one counts
 * too, towards POLICY_MAX_LIMITS (yp_seq checks there is room). */
static int add_limit(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct policy_form *f = dst;
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	(void)i;
	int rc = yp_scalar(P, k->name, "a rate such as 5/60s", &s, &len);
	struct policy_limit *l = &f->limits[f->nlimits];
	if (rc == 0 && policy_parse_rate(s, len, &l->count, &l->period_ms, why, sizeof(why)) < 0)
		rc = yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	l->capacity = l->count;
	f->limit_marks[f->nlimits++] = P->ev.start_mark;
	return rc;
}

/* A single rate or a list of rates; k->max is POLICY_MAX_LIMITS. */
static int set_limits(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return add_limit(P, k, f, 0);
	yaml_mark_t start = P->ev.start_mark;
	size_t n;
	if (yp_seq(P, k, "limits", add_limit, f, &n) < 0)
		return -1;
	if (f->nlimits == 0)
		return yp_failk(P, start, k->name, "at least one rate is required");
	return 0;
}

static int set_rate(struct yparser *P, const struct ykey *k, void *dst)
{
	struct rate *r = dst;
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	if (yp_scalar(P, k->name, "a rate such as 30/60s", &s, &len) < 0)
		return -1;
	if (policy_parse_rate(s, len, &r->count, &r->period_ms, why, sizeof(why)) < 0)
		return yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	return 0;
}

enum { BK_AFTER, BK_WITHIN, BK_FOR, BK_N };

static const struct ykey ban_keys[BK_N] = {
	[BK_AFTER] = {"after", yp_set_int64, offsetof(struct policy_ban, after), 1,
		      POLICY_BAN_MAX_AFTER, YP_PER_POLICY, NULL, NULL},
	[BK_WITHIN] = {"within", yp_set_duration, offsetof(struct policy_ban, within_ms), 1,
		       POLICY_BAN_MAX_WITHIN_MS, YP_PER_POLICY, NULL, NULL},
	[BK_FOR] = {"for", yp_set_duration, offsetof(struct policy_ban, for_ms), 1,
		    POLICY_MAX_PERIOD_MS, YP_PER_POLICY, NULL, NULL},
};

/* ban: {after: N, within: DURATION, for: DURATION}, all three required. */
static int set_ban(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[BK_N], start;
	if (yp_section(P, k, "expected a mapping {after, within, for}", ban_keys, BK_N, dst, &seen,
		       marks, &start) < 0)
		return -1;
	for (int i = 0; i < BK_N; i++)
		if (!(seen & (1u << i)))
			return yp_fail_section(P, start, "a ban needs after, within and for");
	return 0;
}

enum {
	PK_ALGORITHM,
	PK_LIMITS,
	PK_CAPACITY,
	PK_RATE,
	PK_ON_ERROR,
	PK_SHADOW,
	PK_BAN,
	PK_OVERRIDES,
	PK_N
};

static int set_overrides(struct yparser *P, const struct ykey *k, void *dst);

static const struct ykey policy_keys[PK_N] = {
	[PK_ALGORITHM] = {"algorithm", yp_set_enum, offsetof(struct policy_form, algo), 0, 0,
			  YP_PER_POLICY, NULL, policy_algo_names},
	[PK_LIMITS] = {"limits", set_limits, 0, 0, POLICY_MAX_LIMITS, YP_PER_POLICY, NULL, NULL},
	[PK_CAPACITY] = {"capacity", yp_set_int64, offsetof(struct policy_form, capacity), 1,
			 POLICY_MAX_COUNT, YP_PER_POLICY, NULL, NULL},
	[PK_RATE] = {"rate", set_rate, offsetof(struct policy_form, rate), 0, 0, YP_PER_POLICY,
		     NULL, NULL},
	[PK_SHADOW] = {"shadow", yp_set_bool, offsetof(struct policy_form, shadow), 0, 0,
		       YP_PER_POLICY, NULL, NULL},
	[PK_BAN] = {"ban", set_ban, offsetof(struct policy_form, ban), 0, 0, YP_PER_POLICY, NULL,
		    NULL},
	[PK_OVERRIDES] = {"overrides", set_overrides, 0, 0, OVERRIDE_MAX, YP_PER_POLICY, NULL,
			  NULL},
	[PK_ON_ERROR] = {"on_store_error", yp_set_enum, offsetof(struct policy_form, on_error), 0,
			 0, YP_PER_POLICY, NULL, policy_on_error_names},
};

/* The keys an override's mapping may have: the policy's, limits only. */
static const struct ykey override_keys[3] = {
	[0] = {"limits", set_limits, 0, 0, POLICY_MAX_LIMITS, YP_PER_POLICY, NULL, NULL},
	[1] = {"capacity", yp_set_int64, offsetof(struct policy_form, capacity), 1,
	       POLICY_MAX_COUNT, YP_PER_POLICY, NULL, NULL},
	[2] = {"rate", set_rate, offsetof(struct policy_form, rate), 0, 0, YP_PER_POLICY, NULL,
	       NULL},
};
static const int override_pk[3] = {PK_LIMITS, PK_CAPACITY, PK_RATE};

/* One override: its user (or prefix*) and what applies to it, read as given. */
static int override_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	if (P->ev.type != YAML_SCALAR_EVENT) {
		yp_fail_section(P, km, "an override's user must be a plain string");
		return YP_BAD_KEY;
	}
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	int prefix = len > 0 && s[len - 1] == '*';
	if (prefix)
		len--;
	if ((len == 0 && !prefix) || len > KEYS_USER_MAX || memchr(s, '\0', len)) {
		yp_fail_section(P, km,
				"an override's user is 1 to %d bytes, or a prefix ending in '*'",
				KEYS_USER_MAX);
		return YP_BAD_KEY;
	}
	if (yp_grow((void **)&f->ov, &f->capov, f->nov, sizeof(*f->ov)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	struct override_form *o = &f->ov[f->nov];
	memset(o, 0, sizeof(*o));
	if (!(o->pattern = malloc(len + 1)))
		return yp_fail_fatal(P, km, "out of memory");
	memcpy(o->pattern, s, len);
	o->pattern[len] = '\0';
	o->len = len;
	o->prefix = prefix;
	size_t w = 0; /* a user may hold any bytes; an error line may not */
	for (size_t i = 0; i < len && w < 64; i++)
		o->shown[w++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (len > 64)
		w += (size_t)snprintf(o->shown + w, sizeof(o->shown) - w, "...");
	if (prefix)
		o->shown[w++] = '*';
	o->shown[w] = '\0';
	f->nov++;
	if (yp_next(P) < 0)
		return -1;
	o->mark = P->ev.start_mark;
	o->kind = OVERRIDE_LIMITS;
	/* errors name the user: policies.<name>.overrides.<user> */
	struct ykey named = override_keys[0];
	named.name = o->shown;
	switch (P->ev.type) {
	case YAML_SCALAR_EVENT: {
		const char *v = (const char *)P->ev.data.scalar.value;
		size_t vl = P->ev.data.scalar.length;
		if (vl == 9 && memcmp(v, "unlimited", 9) == 0) {
			o->kind = OVERRIDE_UNLIMITED;
			return 0;
		}
		if (vl == 7 && memcmp(v, "blocked", 7) == 0) {
			o->kind = OVERRIDE_BLOCKED;
			return 0;
		}
		o->seen = 1u << PK_LIMITS;
		return set_limits(P, &named, &o->f);
	}
	case YAML_SEQUENCE_START_EVENT:
		o->seen = 1u << PK_LIMITS;
		return set_limits(P, &named, &o->f);
	case YAML_MAPPING_START_EVENT: {
		unsigned seen;
		yaml_mark_t marks[3];
		if (yp_map(P, o->shown, override_keys, 3, &o->f, &seen, marks) < 0)
			return -1;
		for (int i = 0; i < 3; i++)
			if (seen & (1u << i))
				o->seen |= 1u << override_pk[i];
		return 0;
	}
	default:
		return yp_failk(P, o->mark, o->shown,
				"expected limits, {limits: ...}, {capacity, rate}, unlimited or "
				"blocked");
	}
}

static int set_overrides(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policy_form *f = dst;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of users to limits, unlimited or blocked");
	f->ov_mark = P->ev.start_mark;
	size_t n;
	return yp_dict(P, k, "overrides", override_entry, f, &n);
}

static void override_forms_free(struct policy_form *f)
{
	for (size_t i = 0; i < f->nov; i++)
		free(f->ov[i].pattern);
	free(f->ov);
	f->ov = NULL;
	f->nov = 0;
}

/* The policy an override's limits make: p with other limits, checked as p's. */
static int override_policy(struct yparser *P, const struct policy *p, const char *name,
			   const struct override_form *o, struct policy **out)
{
	const struct policy_form *of = &o->f;
	const char *algo = policy_algo_name(p->algo);
	char at[POLICY_NAME_MAX + 96]; /* policies.<name>.overrides.<user> */
	snprintf(at, sizeof(at), "policies.%s.overrides.%s", name, o->shown);
	switch (policy_algo_shape(p->algo)) {
	case POLICY_SHAPE_RATE:
		if (o->seen & (1u << PK_LIMITS))
			return yp_fail(P, o->mark,
				       "%s: a funnel's override is {capacity, "
				       "rate}",
				       at);
		if ((o->seen & ((1u << PK_CAPACITY) | (1u << PK_RATE))) !=
		    ((1u << PK_CAPACITY) | (1u << PK_RATE)))
			return yp_fail(P, o->mark,
				       "%s: a funnel's override needs a capacity "
				       "and a rate",
				       at);
		break;
	case POLICY_SHAPE_WINDOWS:
		if (o->seen & ((1u << PK_CAPACITY) | (1u << PK_RATE)))
			return yp_fail(P, o->mark,
				       "%s: a %s's override takes limits, not "
				       "capacity or rate",
				       at, algo);
		if (!(o->seen & (1u << PK_LIMITS)) || of->nlimits == 0)
			return yp_fail(P, o->mark, "%s: limits are required", at);
		break;
	}
	struct policy *d = malloc(sizeof(*d));
	if (!d)
		return yp_fail_fatal(P, o->mark, "out of memory");
	*d = *p;
	d->overrides = NULL;
	if (policy_algo_shape(p->algo) == POLICY_SHAPE_RATE) {
		d->nlimits = 1;
		d->limits[0] =
			(struct policy_limit){of->capacity, of->rate.count, of->rate.period_ms};
	} else {
		d->nlimits = of->nlimits;
		memcpy(d->limits, of->limits, sizeof(d->limits));
	}
	const char *why;
	if (policy_validate(d, &why) < 0) {
		free(d);
		return yp_fail(P, o->mark, "%s: %s", at, why);
	}
	*out = d;
	return 0;
}

/* Makes p's override set from what was read. */
static int make_overrides(struct yparser *P, struct policy *p, const char *name,
			  const struct policy_form *f)
{
	if (f->nov == 0)
		return 0;
	struct override_set *set = calloc(1, sizeof(*set));
	if (!set)
		return yp_fail_fatal(P, f->ov_mark, "out of memory");
	int rc = 0;
	for (size_t i = 0; i < f->nov && rc == 0; i++) {
		const struct override_form *o = &f->ov[i];
		struct policy *d = NULL;
		if (o->kind == OVERRIDE_LIMITS && override_policy(P, p, name, o, &d) < 0) {
			rc = -1;
			break;
		}
		if (override_add(set, o->pattern, o->len, o->prefix, o->kind, d) < 0)
			rc = yp_fail_fatal(P, o->mark, "out of memory");
	}
	const struct override *dup = NULL;
	if (rc == 0) {
		int r = override_finish(set, &dup);
		if (r < 0)
			rc = yp_fail_fatal(P, f->ov_mark, "out of memory");
		else if (r > 0) {
			const char *shown = "?";
			for (size_t i = 0; i < f->nov; i++)
				if (f->ov[i].prefix == dup->prefix && f->ov[i].len == dup->len &&
				    memcmp(f->ov[i].pattern, dup->pattern, dup->len) == 0)
					shown = f->ov[i].shown;
			rc = yp_fail(P, f->ov_mark, "policies.%s.overrides: \"%s\" is given twice",
				     name, shown);
		}
	}
	if (rc < 0) {
		override_set_free(set);
		return -1;
	}
	p->overrides = set;
	return 0;
}

/* Mapping form: decides what the gathered keys mean once algorithm is known. */
static int policy_mapping(struct yparser *P, struct policy_form *f, const char *name)
{
	yaml_mark_t start = P->ev.start_mark;
	unsigned seen;
	yaml_mark_t marks[PK_N];
	if (yp_map(P, name, policy_keys, PK_N, f, &seen, marks) < 0)
		return -1;
	switch (policy_algo_shape(f->algo)) {
	case POLICY_SHAPE_RATE:
		if (seen & (1u << PK_LIMITS))
			return yp_failk(P, marks[PK_LIMITS], "limits",
					"a funnel takes capacity and rate, not limits");
		if (!(seen & (1u << PK_CAPACITY)))
			return yp_fail_section(P, start, "a funnel needs a capacity");
		if (!(seen & (1u << PK_RATE)))
			return yp_fail_section(P, start, "a funnel needs a rate");
		f->limits[0].capacity = f->capacity;
		f->limits[0].count = f->rate.count;
		f->limits[0].period_ms = f->rate.period_ms;
		f->limit_marks[0] = marks[PK_RATE];
		f->nlimits = 1;
		break;
	case POLICY_SHAPE_WINDOWS:
		if (seen & (1u << PK_CAPACITY))
			return yp_failk(P, marks[PK_CAPACITY], "capacity",
					"only a funnel has a capacity (algorithm: funnel)");
		if (seen & (1u << PK_RATE))
			return yp_failk(P, marks[PK_RATE], "rate",
					"only a funnel has a rate; a %s takes limits",
					policy_algo_name(f->algo));
		if (!(seen & (1u << PK_LIMITS)))
			return yp_fail_section(P, start, "a %s needs limits",
					       policy_algo_name(f->algo));
		break;
	}
	return 0;
}

static int policy_from_form(struct yparser *P, struct policy *p, const char *name,
			    const struct policy_form *f);

/* The value of one entry under policies: a rate, a list of rates or a mapping. */
static int parse_policy(struct yparser *P, struct policy *p, const char *name)
{
	struct policy_form f;
	memset(&f, 0, sizeof(f));
	f.algo = POLICY_SLIDING_WINDOW;
	f.on_error = POLICY_ON_ERROR_INHERIT;
	f.shadow = -1;
	/* The short forms are the limits key of the mapping form. */
	struct ykey limits = policy_keys[PK_LIMITS];
	limits.name = name;
	int rc = P->ev.type == YAML_MAPPING_START_EVENT ? policy_mapping(P, &f, name)
							: set_limits(P, &limits, &f);
	if (rc == 0)
		rc = policy_from_form(P, p, name, &f);
	override_forms_free(&f);
	return rc;
}

static int policy_from_form(struct yparser *P, struct policy *p, const char *name,
			    const struct policy_form *f)
{
	p->algo = f->algo;
	p->on_store_error = f->on_error;
	p->shadow = f->shadow;
	p->ban = f->ban;
	memcpy(p->limits, f->limits, sizeof(p->limits));
	/* Validate one limit at a time so a bad or repeated window is reported
	 * at the rate that introduced it. */
	for (int i = 1; i <= f->nlimits; i++) {
		const char *why;
		p->nlimits = i;
		if (policy_validate(p, &why) < 0)
			return yp_fail(P, f->limit_marks[i - 1], "policies.%s: %s", name, why);
	}
	return make_overrides(P, p, name, f);
}

static int name_cmp(const struct policy *x, const struct policy *y)
{
	size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
	int d = memcmp(x->name, y->name, n);
	if (d)
		return d;
	return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int pentry_cmp(const void *a, const void *b)
{
	const struct pentry *x = a, *y = b;
	int d = name_cmp(&x->p, &y->p);
	if (d)
		return d;
	/* Equal names keep file order, so the later one is reported as the duplicate. */
	return x->mark.index < y->mark.index ? -1 : x->mark.index > y->mark.index;
}

/* One entry under policies: its name (current event) and its value. */
static int policy_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct policies_read *R = dst;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	if (P->ev.type != YAML_SCALAR_EVENT) {
		yp_fail(P, km, "a policy name must be a plain string");
		return YP_BAD_KEY;
	}
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	if (!policy_name_valid(s, len)) {
		yp_fail(P, km, "policy name must be 1 to %d characters of A-Z a-z 0-9 _ . -",
			POLICY_NAME_MAX);
		return YP_BAD_KEY;
	}
	if (yp_grow((void **)&R->pol, &R->cappol, R->npol, sizeof(*R->pol)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	/* Kept even when its value is bad, so that a duplicate name is still found. */
	struct pentry *e = &R->pol[R->npol++];
	memset(e, 0, sizeof(*e));
	memcpy(e->p.name, s, len);
	e->p.name_len = len;
	e->mark = km;
	if (yp_next(P) < 0)
		return -1;
	return parse_policy(P, &e->p, e->p.name);
}

static int set_policies(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config *c = dst;
	struct policies_read *R = P->ctx;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of policy names to limits");
	yaml_mark_t start = P->ev.start_mark;
	unsigned nerr = P->nerr;
	size_t n;
	if (yp_dict(P, k, "policies", policy_entry, R, &n) < 0 && P->fatal)
		return -1;
	if (R->npol == 0 && P->nerr == nerr)
		return yp_fail_section(P, start, "at least one policy is required");
	if (R->npol > 1)
		qsort(R->pol, R->npol, sizeof(*R->pol), pentry_cmp);
	for (size_t i = 1; i < R->npol; i++)
		if (name_cmp(&R->pol[i - 1].p, &R->pol[i].p) == 0)
			yp_fail(P, R->pol[i].mark, "duplicate policy \"%s\"", R->pol[i].p.name);
	if (P->nerr != nerr)
		return -1;
	c->policies = calloc(R->npol, sizeof(*c->policies));
	if (!c->policies)
		return yp_fail_fatal(P, start, "out of memory");
	for (size_t i = 0; i < R->npol; i++)
		c->policies[i] = R->pol[i].p;
	c->npolicies = R->npol;
	return 0;
}

enum {
	TK_LISTEN,
	TK_STORE,
	TK_MEMORY,
	TK_REDIS,
	TK_PREFIX,
	TK_ON_ERROR,
	TK_LOCAL_SHARE,
	TK_MAX_LINE,
	TK_MAX_CLIENTS,
	TK_IDLE_TIMEOUT,
	TK_REQUEST_TIMEOUT,
	TK_LOG_LEVEL,
	TK_METRICS,
	TK_THROTTLE,
	TK_SHADOW,
	TK_ENVOY,
	TK_POLICIES,
	TK_N
};

static const struct ykey top_keys[TK_N] = {
	[TK_LISTEN] = {"listen", set_listen, 0, 0, 0, YP_RESTART_LIST, put_listen, NULL},
	[TK_STORE] = {"store", yp_set_enum, offsetof(struct config, store), 0, 0, YP_RESTART,
		      yp_put_enum, store_names},
	[TK_MEMORY] = {"memory", set_memory, offsetof(struct config, memory), 0, 0, YP_SECTION,
		       NULL, NULL},
	[TK_REDIS] = {"redis", set_redis, offsetof(struct config, redis), 0, 0, YP_SECTION, NULL,
		      NULL},
	[TK_PREFIX] = {"prefix", set_prefix, offsetof(struct config, prefix), 0, 0, YP_RELOAD,
		       put_prefix, NULL},
	[TK_ON_ERROR] = {"on_store_error", yp_set_enum, offsetof(struct config, on_store_error), 0,
			 0, YP_RELOAD, yp_put_enum, policy_on_error_names},
	/* read by each decision taken locally */
	[TK_LOCAL_SHARE] = {"local_share", set_share, offsetof(struct config, local_share), 0, 0,
			    YP_RELOAD, put_share, NULL},
	[TK_MAX_LINE] = {"max_line", yp_set_size, offsetof(struct config, max_line), 64, 1048576,
			 YP_RELOAD, yp_put_size, NULL},
	[TK_MAX_CLIENTS] = {"max_clients", yp_set_int, offsetof(struct config, max_clients), 1,
			    1000000, YP_RELOAD, yp_put_int, NULL},
	/* for the clients that connect after the reload */
	[TK_IDLE_TIMEOUT] = {"idle_timeout", yp_set_duration,
			     offsetof(struct config, idle_timeout_ms), 1000, POLICY_MAX_PERIOD_MS,
			     YP_RELOAD, yp_put_duration, NULL},
	[TK_REQUEST_TIMEOUT] = {"request_timeout", yp_set_duration,
				offsetof(struct config, request_timeout_ms), 100, 3600000,
				YP_RELOAD, yp_put_duration, NULL},
	/* main.c's reload sets it */
	[TK_LOG_LEVEL] = {"log_level", yp_set_enum, offsetof(struct config, log_level), 0, 0,
			  YP_RELOAD, yp_put_enum, log_level_names},
	[TK_METRICS] = {"metrics", set_metrics, 0, 0, 0, YP_SECTION, NULL, NULL},
	[TK_SHADOW] = {"shadow", yp_set_bool, offsetof(struct config, shadow), 0, 0, YP_RELOAD,
		       yp_put_bool, NULL},
	[TK_THROTTLE] = {"throttle", set_throttle, offsetof(struct config, throttle), 0, 0,
			 YP_SECTION, NULL, NULL},
	[TK_ENVOY] = {"envoy", set_envoy, offsetof(struct config, envoy), 0, 0, YP_SECTION, NULL,
		      NULL},
	[TK_POLICIES] = {"policies", set_policies, 0, 0, CONFIG_POLICIES_MAX, YP_PER_POLICY, NULL,
			 NULL},
};

static const struct policy *find_own_policy(const struct config *c, const char *name, size_t len);

/* Where the values of a table's keys are in a snapshot, for a reload to compare them. */
enum ktable_values {
	KT_AT_BASE, /* at `base` in struct config */
	KT_LISTEN,  /* in each listen entry, compared entry by entry */
	KT_POLICY,  /* in each policy: the policies key reports them, policy by policy */
};

/* Every table of keys, where it sits in the file and where its values are. */
static const struct ktable {
	const char *at;
	const struct ykey *keys;
	size_t nkeys;
	enum ktable_values values;
	size_t base; /* KT_AT_BASE */
} key_tables[] = {
	{"", top_keys, TK_N, KT_AT_BASE, 0},
	{"listen[].", listen_keys, LK_N, KT_LISTEN, 0},
	{"memory.", memory_keys, MEMK_N, KT_AT_BASE, offsetof(struct config, memory)},
	{"redis.", redis_keys, RK_N, KT_AT_BASE, offsetof(struct config, redis)},
	{"redis.sentinel.", sentinel_keys, SK_N, KT_AT_BASE, offsetof(struct config, redis)},
	{"metrics.", metrics_keys, MK_N, KT_AT_BASE, 0},
	{"throttle.", throttle_keys, HK_N, KT_AT_BASE, offsetof(struct config, throttle)},
	{"envoy.", envoy_keys, EK_N, KT_AT_BASE, offsetof(struct config, envoy)},
	{"policies.NAME.", policy_keys, PK_N, KT_POLICY, 0},
	{"policies.NAME.ban.", ban_keys, BK_N, KT_POLICY, 0},
	{"policies.NAME.overrides.USER.", override_keys, 3, KT_POLICY, 0},
};

static enum config_reload reload_of(enum yp_reload r)
{
	switch (r) {
	case YP_RELOAD:
		return CONFIG_RELOAD_APPLIES;
	case YP_RESTART:
	case YP_RESTART_SECRET:
	case YP_RESTART_LIST:
		return CONFIG_RELOAD_RESTART;
	case YP_SECTION:
		return CONFIG_RELOAD_SECTION;
	case YP_PER_POLICY:
		return CONFIG_RELOAD_PER_POLICY;
	}
	return CONFIG_RELOAD_SECTION; /* not reached: the switch names every kind */
}

const char *config_reload_name(enum config_reload r)
{
	switch (r) {
	case CONFIG_RELOAD_APPLIES:
		return "applies";
	case CONFIG_RELOAD_RESTART:
		return "restart";
	case CONFIG_RELOAD_SECTION:
		return "section";
	case CONFIG_RELOAD_PER_POLICY:
		return "per-policy";
	}
	return "?";
}

void config_key_reloads(void (*fn)(const char *path, enum config_reload how, void *arg), void *arg)
{
	for (size_t t = 0; t < sizeof(key_tables) / sizeof(key_tables[0]); t++)
		for (size_t k = 0; k < key_tables[t].nkeys; k++) {
			char path[128];
			snprintf(path, sizeof(path), "%s%s", key_tables[t].at,
				 key_tables[t].keys[k].name);
			fn(path, reload_of(key_tables[t].keys[k].reload), arg);
		}
}

/* config_key_paths' callback, under config_key_reloads. */
struct key_path_fn {
	void (*fn)(const char *path, void *arg);
	void *arg;
};

static void key_path_only(const char *path, enum config_reload how, void *arg)
{
	const struct key_path_fn *f = arg;
	(void)how;
	f->fn(path, f->arg);
}

void config_key_paths(void (*fn)(const char *path, void *arg), void *arg)
{
	struct key_path_fn f = {fn, arg};
	config_key_reloads(key_path_only, &f);
}

/* k's value in the struct at base, as text; malloc'd, NULL when out of memory. */
static char *key_text(const struct ykey *k, const void *base)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	k->put(f, k, base);
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

/* One reload's comparison. */
struct diff {
	const struct config *running, *old, *file;
	void (*fn)(const struct config_change *ch, void *arg);
	void *arg;
	int pending; /* restart-pending keys reported */
};

/* Reports k (named `name`) when its values at a and b print differently. */
static void diff_key(struct diff *D, enum config_change_kind kind, const char *name,
		     const struct ykey *k, const void *a, const void *b)
{
	char *x = key_text(k, a), *y = key_text(k, b);
	if (!x || !y || strcmp(x, y) != 0) {
		struct config_change ch = {kind, name, k->reload == YP_RESTART_SECRET,
					   x && y ? x : NULL, x && y ? y : NULL};
		D->fn(&ch, D->arg);
		D->pending += kind == CONFIG_CHANGE_RESTART_PENDING;
	}
	free(x);
	free(y);
}

/* A policy as a reload describes it: its limits, and how many overrides. */
static void describe_policy(const struct policy *p, char *buf, size_t cap)
{
	size_t n = policy_describe(p, buf, cap);
	if (p->overrides && n < cap)
		snprintf(buf + n, cap - n, " overrides %zu", p->overrides->n);
}

/* Policies added, changed and removed since the previous file. */
static void diff_policies(struct diff *D)
{
	char was[256], desc[256];
	for (size_t i = 0; i < D->file->npolicies; i++) {
		const struct policy *np = &D->file->policies[i];
		const struct policy *op = find_own_policy(D->old, np->name, np->name_len);
		if (op && policy_equal(op, np) && override_set_equal(op->overrides, np->overrides))
			continue;
		describe_policy(np, desc, sizeof(desc));
		if (op)
			describe_policy(op, was, sizeof(was));
		struct config_change ch = {op ? CONFIG_CHANGE_POLICY_CHANGED
					      : CONFIG_CHANGE_POLICY_ADDED,
					   np->name, 0, op ? was : NULL, desc};
		D->fn(&ch, D->arg);
	}
	for (size_t i = 0; i < D->old->npolicies; i++) {
		const struct policy *op = &D->old->policies[i];
		if (find_own_policy(D->file, op->name, op->name_len))
			continue;
		describe_policy(op, was, sizeof(was));
		struct config_change ch = {CONFIG_CHANGE_POLICY_REMOVED, op->name, 0, was, NULL};
		D->fn(&ch, D->arg);
	}
}

/* One key of a table whose values are at base (KT_AT_BASE). */
static void diff_at_base(struct diff *D, const char *name, const struct ykey *k, size_t base)
{
	const char *run = (const char *)D->running + base, *old = (const char *)D->old + base,
		   *file = (const char *)D->file + base;
	switch (k->reload) {
	case YP_RELOAD:
		diff_key(D, CONFIG_CHANGE_APPLIED, name, k, old, file);
		break;
	case YP_RESTART:
	case YP_RESTART_SECRET:
		diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
		break;
	case YP_RESTART_LIST:
		/* listen, the only one: entries added or removed make the whole
		 * list differ; otherwise its table compares entry by entry */
		if (D->running->nlisten != D->file->nlisten)
			diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
		break;
	case YP_SECTION:
		break; /* its own table follows */
	case YP_PER_POLICY:
		diff_policies(D);
		break;
	}
}

/* Key k of every listen entry, when the file has as many as are running. */
static void diff_listen(struct diff *D, const struct ykey *k)
{
	if (D->running->nlisten != D->file->nlisten)
		return; /* reported as listen */
	for (size_t i = 0; i < D->file->nlisten; i++) {
		char name[64];
		snprintf(name, sizeof(name), "listen[%zu].%s", i, k->name);
		const struct config_listen *run = &D->running->listen[i],
					   *file = &D->file->listen[i];
		switch (k->reload) {
		case YP_RESTART:
		case YP_RESTART_SECRET:
			diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
			break;
		case YP_RELOAD:	      /* the listeners are made once: none of these */
		case YP_RESTART_LIST: /* no list in a listen entry */
		case YP_SECTION:
		case YP_PER_POLICY:
			break;
		}
	}
}

int config_diff(const struct config *running, const struct config *old, const struct config *file,
		void (*fn)(const struct config_change *ch, void *arg), void *arg)
{
	struct diff D = {running, old, file, fn, arg, 0};
	for (size_t t = 0; t < sizeof(key_tables) / sizeof(key_tables[0]); t++) {
		const struct ktable *kt = &key_tables[t];
		for (size_t i = 0; i < kt->nkeys; i++) {
			const struct ykey *k = &kt->keys[i];
			char name[64];
			snprintf(name, sizeof(name), "%s%s", kt->at, k->name);
			switch (kt->values) {
			case KT_AT_BASE:
				diff_at_base(&D, name, k, kt->base);
				break;
			case KT_LISTEN:
				diff_listen(&D, k);
				break;
			case KT_POLICY:
				break; /* the policies key reported them */
			}
		}
	}
	return D.pending;
}

static int config_defaults(struct config *c)
{
	c->listen = calloc(1, sizeof(*c->listen));
	if (!c->listen)
		return -1;
	c->nlisten = 1;
	c->listen[0].address = strdup(DEFAULT_LISTEN);
	c->listen[0].mode = CONFIG_DEFAULT_SOCKET_MODE;
	c->store = CONFIG_STORE_REDIS;
	c->local_share = 1;
	c->memory.max_keys = CONFIG_MEMORY_MAX_KEYS_DEFAULT;
	c->redis.address = strdup(DEFAULT_REDIS_ADDRESS);
	c->redis.database = DEFAULT_REDIS_DATABASE;
	c->redis.timeout_ms = DEFAULT_REDIS_TIMEOUT_MS;
	c->redis.connections = DEFAULT_REDIS_CONNECTIONS;
	c->prefix = strdup(DEFAULT_PREFIX);
	c->on_store_error = DEFAULT_ON_STORE_ERROR;
	c->max_line = DEFAULT_MAX_LINE;
	c->max_clients = DEFAULT_MAX_CLIENTS;
	c->idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
	c->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
	c->log_level = DEFAULT_LOG_LEVEL;
	memcpy(c->throttle.namespace, "cl.throttle", sizeof("cl.throttle"));
	c->throttle.max_burst = 100000;
	c->throttle.max_period_ms = 86400000;
	c->envoy.algorithm = POLICY_FIXED_WINDOW;
	http_defaults(&c->listen[0].http);
	return c->listen[0].address && c->redis.address && c->prefix ? 0 : -1;
}

/* Addresses no two sockets can bind (addr_overlap): a daemon with them
 * would fail to start, so -t and a reload refuse them, at the later one.
 * listed: the listen key was given (else the default has no position, and
 * metrics.listen takes the blame). */
static void check_binds(struct yparser *P, const struct config *c, int listed)
{
	const struct policies_read *R = P->ctx;
	for (size_t j = 1; listed && j < c->nlisten; j++)
		for (size_t i = 0; i < j; i++)
			if (c->listen[i].address && c->listen[j].address &&
			    addr_overlap(c->listen[i].address, c->listen[j].address)) {
				if (strcmp(c->listen[i].address, c->listen[j].address) == 0)
					yp_fail(P, R->listen_marks[j],
						"listen: %s is given twice (line %zu): one socket "
						"per address",
						c->listen[j].address,
						(size_t)R->listen_marks[i].line + 1);
				else
					yp_fail(P, R->listen_marks[j],
						"listen: %s overlaps %s (line %zu): both cannot be "
						"bound",
						c->listen[j].address, c->listen[i].address,
						(size_t)R->listen_marks[i].line + 1);
				break;
			}
	for (size_t i = 0; c->metrics_listen && i < c->nlisten; i++)
		if (c->listen[i].address && addr_overlap(c->metrics_listen, c->listen[i].address)) {
			yp_fail(P, R->metrics_mark,
				"metrics.listen: %s is taken by listen's %s: give the metrics "
				"endpoint a port of its own",
				c->metrics_listen, c->listen[i].address);
			break;
		}
}

/* stream-start, exactly one document whose root is a mapping, stream-end. */
static int parse_stream(struct yparser *P, struct config *c)
{
	yaml_mark_t root;
	if (yp_open_document(P, &root) < 0)
		return -1;
	unsigned seen;
	yaml_mark_t marks[TK_N];
	if (yp_map(P, NULL, top_keys, TK_N, c, &seen, marks) < 0 && P->fatal)
		return -1;
	if (c->store == CONFIG_STORE_MEMORY && (seen & (1u << TK_REDIS)))
		yp_fail(P, marks[TK_REDIS],
			"redis: not used with store: memory (state lives in this daemon); remove "
			"it, or write store: redis");
	else if (c->store == CONFIG_STORE_REDIS && (seen & (1u << TK_MEMORY)) &&
		 !config_uses_local(c))
		yp_fail(P, marks[TK_MEMORY],
			"memory: only used with store: memory or on_store_error: local; remove it");
	for (size_t i = 0; i < c->nlisten && !(seen & (1u << TK_ENVOY)); i++)
		if (c->listen[i].protocol == CONFIG_PROTOCOL_GRPC) {
			/* without rules every call would be answered OK: say so */
			yp_fail(P, marks[TK_LISTEN],
				"listen: protocol: grpc needs envoy: {config: FILE_OR_DIR}, the "
				"rules its calls are decided by");
			break;
		}
	check_binds(P, c, (seen & (1u << TK_LISTEN)) != 0);
	if (!(seen & (1u << TK_POLICIES)) && !(seen & (1u << TK_ENVOY)))
		yp_fail(P, root,
			"policies: required, with at least one policy (or envoy: with rules)");
	else if (c->throttle.enabled &&
		 config_find_policy(c, c->throttle.namespace, strlen(c->throttle.namespace)))
		yp_fail(P, marks[TK_THROTTLE],
			"throttle.namespace: %s is a policy's name too: they would share keys",
			c->throttle.namespace);
	if (yp_close_document(P) < 0 && P->fatal)
		return -1;
	return P->nerr ? -1 : 0;
}

static void config_free(struct config *c)
{
	free(c->path);
	free_listen(c);
	free(c->redis.address);
	free_addrs(&c->redis.cluster);
	free_addrs(&c->redis.sentinels);
	free(c->redis.sentinel_master);
	free(c->redis.username);
	free(c->redis.password);
	free(c->prefix);
	free(c->metrics_listen);
	free(c->envoy.config);
	envoy_rules_free(c->envoy.rules);
	for (size_t i = 0; i < c->npolicies; i++)
		override_set_free(c->policies[i].overrides);
	free(c->policies);
	free(c);
}

/* envoy.config's files, a path relative to the configuration file's directory. */
static int load_envoy(struct config *c, const char *name, char *err, size_t errlen)
{
	const char *path = c->envoy.config;
	char *full = NULL;
	const char *slash = strrchr(name, '/');
	if (path[0] != '/' && slash) {
		if (asprintf(&full, "%.*s/%s", (int)(slash - name), name, path) < 0) {
			snprintf(err, errlen, "%s: out of memory", name);
			return -1;
		}
		path = full;
	}
	c->envoy.rules = envoy_rules_load(path, c->envoy.algorithm, err, errlen);
	free(full);
	return c->envoy.rules ? 0 : -1;
}

struct config *config_parse(const char *name, const char *buf, size_t len, char *err, size_t errlen)
{
	struct yparser P;
	struct policies_read R = {0};
	struct config *c = NULL;
	if (yp_begin(&P, name, buf, len) == 0) {
		P.ctx = &R;
		c = calloc(1, sizeof(*c));
		if (!c || config_defaults(c) < 0 || !(c->path = strdup(P.name))) {
			yaml_mark_t none = {0, 0, 0};
			yp_fail_fatal(&P, none, "out of memory");
		} else {
			parse_stream(&P, c);
		}
	}
	/* Overrides not handed to c->policies (a file in error) are freed here. */
	if (!c || !c->policies)
		for (size_t i = 0; i < R.npol; i++)
			override_set_free(R.pol[i].p.overrides);
	free(R.pol);
	free(R.listen_marks);
	if (yp_end(&P, err, errlen) < 0) {
		if (c)
			config_free(c);
		return NULL;
	}
	c->refs = 1;
	return c;
}

struct config *config_load(const char *path, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	if (yp_read_file(path, CONFIG_FILE_MAX, &buf, &len, err, errlen) < 0)
		return NULL;
	struct config *c = config_parse(path, buf, len, err, errlen);
	free(buf);
	/* the envoy rules' files: here, so that config_parse reads no file */
	if (c && c->envoy.config && load_envoy(c, path, err, errlen) < 0) {
		config_free(c);
		return NULL;
	}
	return c;
}

void config_log_errors(const char *context, const char *err)
{
	const char *p = err;
	do {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);
		log_error("%s%.*s", context, len, p);
		p = nl ? nl + 1 : NULL;
	} while (p);
}

void config_ref(struct config *c)
{
	c->refs++;
}

void config_unref(struct config *c)
{
	if (!c || --c->refs > 0)
		return;
	config_free(c);
}

const struct policy *config_find_policy(const struct config *c, const char *name, size_t len)
{
	const struct policy *p = find_own_policy(c, name, len);
	/* then an envoy rule's (named "<path>-<8 hex digits>"; a policy of
	 * the file with the very same name comes first) */
	if (!p && c && name && len)
		p = envoy_find_policy(c->envoy.rules, name, len);
	return p;
}

static const struct policy *find_own_policy(const struct config *c, const char *name, size_t len)
{
	if (!c || !name || len == 0 || len > POLICY_NAME_MAX)
		return NULL;
	size_t lo = 0, hi = c->npolicies;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct policy *p = &c->policies[mid];
		size_t n = p->name_len < len ? p->name_len : len;
		int d = memcmp(p->name, name, n);
		if (d == 0 && p->name_len != len)
			d = p->name_len < len ? -1 : 1;
		if (d == 0)
			return p;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int config_shadow(const struct config *c, const struct policy *p)
{
	if (p && p->shadow >= 0)
		return p->shadow;
	return c->shadow;
}

int config_uses_local(const struct config *c)
{
	if (c->on_store_error == POLICY_ON_ERROR_LOCAL)
		return 1;
	for (size_t i = 0; i < c->npolicies; i++)
		if (c->policies[i].on_store_error == POLICY_ON_ERROR_LOCAL)
			return 1;
	return 0;
}

enum policy_on_error config_on_error(const struct config *c, const struct policy *p)
{
	if (p && p->on_store_error != POLICY_ON_ERROR_INHERIT)
		return p->on_store_error;
	return c->on_store_error;
}
