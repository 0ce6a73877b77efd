/* config_listen.c - the schema of listen (sockets, protocols, HTTP options) and metrics. */
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "config.h"
#include "config_area.h"

void config_listen_free(struct config *c)
{
	for (size_t i = 0; i < c->nlisten; i++) {
		struct config_listen_tls *t = &c->listen[i].tls;
		free(c->listen[i].address);
		free(t->cert_file);
		free(t->key_file);
		free(t->ca_file);
		free(t->ca_dir);
	}
	free(c->listen);
	c->listen = NULL;
	c->nlisten = 0;
	free(c->metrics_tls.cert_file);
	free(c->metrics_tls.key_file);
	free(c->metrics_tls.ca_file);
	free(c->metrics_tls.ca_dir);
	memset(&c->metrics_tls, 0, sizeof(c->metrics_tls));
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
	LK_TLS,
	LK_AUTH,
	LK_N
};

#define LK_HTTP_KEYS \
	((1u << LK_USER_HEADER) | (1u << LK_TRUSTED) | (1u << LK_DENY_STATUS) | (1u << LK_LEGACY))

static void put_mode(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%04o", (unsigned)*(const int *)((const char *)base + k->offset));
}

/* Every protocol's word, the only place it is written: listen.protocol's
 * names, and the front ends' labels (stats_front_name, frontend.c). */
static const struct yenum protocol_names[] = {
	{"line", CONFIG_PROTOCOL_LINE, "the line protocol and RESP"},
	{"http", CONFIG_PROTOCOL_HTTP, NULL},
	{"grpc", CONFIG_PROTOCOL_GRPC, "Envoy's rate limit service"},
	{"spoe", CONFIG_PROTOCOL_SPOE, "HAProxy's SPOE agent"},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(protocol_names) / sizeof(protocol_names[0]) == CONFIG_PROTOCOL_N + 1,
	       "every protocol has a word");
_Static_assert(sizeof(enum config_protocol) == sizeof(int), "yp_set_enum stores an int");

const char *config_protocol_name(enum config_protocol p)
{
	const char *name = yenum_name(protocol_names, (int)p);
	return name ? name : "?";
}

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

static int set_tls(struct yparser *P, const struct ykey *k, void *dst);

static const struct yenum auth_names[] = {
	{"off", 0, "anyone who connects may ask anything (the default)"},
	{"required", 1, "a client proves who it is (identities) before anything else"},
	{NULL, 0, NULL},
};

/* The listeners are made once, at start-up: every key is restart-only
 * (but tls's files, read again on every reload). */
static const struct ykey listen_keys[LK_N] = {
	[LK_ADDRESS] = {"address", config_set_address, offsetof(struct config_listen, address), 0,
			0, YP_RESTART, yp_put_string, NULL},
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
	[LK_TLS] = {"tls", set_tls, offsetof(struct config_listen, tls), 0, 0, YP_SECTION, NULL,
		    NULL},
	[LK_AUTH] = {"auth", yp_set_enum, offsetof(struct config_listen, auth), 0, 0, YP_RESTART,
		     yp_put_enum, auth_names},
};

const struct ktable config_listen_table = {"listen[].", listen_keys, LK_N, KT_LISTEN, 0};

static const struct yenum config_client_certs_names[] = {
	{"none", CONFIG_CLIENT_CERTS_NONE, "no certificate asked"},
	{"optional", CONFIG_CLIENT_CERTS_OPTIONAL, "asked; one shown must verify"},
	{"required", CONFIG_CLIENT_CERTS_REQUIRED, "a client without one is refused"},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_client_certs) == sizeof(int), "yp_set_enum stores an int");

enum { LTK_ENABLED, LTK_CERT, LTK_KEY, LTK_CA_FILE, LTK_CA_DIR, LTK_CLIENT_CERTS, LTK_N };

/* The files are read at start-up and again on every reload (new
 * connections use them, open ones keep theirs); the rest is restart-only. */
static const struct ykey tls_keys[LTK_N] = {
	[LTK_ENABLED] = {"enabled", yp_set_bool, offsetof(struct config_listen_tls, enabled), 0, 0,
			 YP_RESTART, yp_put_bool, NULL},
	[LTK_CERT] = {"cert_file", config_set_path, offsetof(struct config_listen_tls, cert_file),
		      0, 0, YP_RELOAD, yp_put_string, NULL},
	[LTK_KEY] = {"key_file", config_set_path, offsetof(struct config_listen_tls, key_file), 0,
		     0, YP_RELOAD, yp_put_string, NULL},
	[LTK_CA_FILE] = {"ca_file", config_set_path, offsetof(struct config_listen_tls, ca_file), 0,
			 0, YP_RELOAD, yp_put_string, NULL},
	[LTK_CA_DIR] = {"ca_dir", config_set_path, offsetof(struct config_listen_tls, ca_dir), 0, 0,
			YP_RELOAD, yp_put_string, NULL},
	[LTK_CLIENT_CERTS] = {"client_certs", yp_set_enum,
			      offsetof(struct config_listen_tls, client_certs), 0, 0, YP_RESTART,
			      yp_put_enum, config_client_certs_names},
};

static int set_tls(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config_listen_tls *t = dst;
	unsigned seen;
	yaml_mark_t marks[LTK_N], start;
	t->enabled = 1;
	if (yp_section(P, k, "expected a mapping with cert_file and key_file", tls_keys, LTK_N, dst,
		       &seen, marks, &start) < 0)
		return -1;
	if (!(seen & (1u << LTK_CERT)) || !(seen & (1u << LTK_KEY)))
		return yp_fail_section(P, start, "needs cert_file and key_file");
	int ca = (seen & (1u << LTK_CA_FILE)) || (seen & (1u << LTK_CA_DIR));
	if (t->client_certs != CONFIG_CLIENT_CERTS_NONE && !ca)
		return yp_failk(P, marks[LTK_CLIENT_CERTS], "client_certs",
				"needs ca_file or ca_dir (the CAs that sign client certificates)");
	if (t->client_certs == CONFIG_CLIENT_CERTS_NONE && ca) {
		int at = (seen & (1u << LTK_CA_FILE)) ? LTK_CA_FILE : LTK_CA_DIR;
		return yp_failk(P, marks[at], tls_keys[at].name,
				"only applies with client_certs: optional or required");
	}
	return 0;
}

const struct ktable config_listen_tls_table = {"listen[].tls.", tls_keys, LTK_N, KT_LISTEN,
					       offsetof(struct config_listen, tls)};

/* The defaults of an HTTP listener: loopback proxies are trusted. */
void config_listen_http_defaults(struct config_http *h)
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

void config_listen_put(FILE *f, const struct ykey *k, const void *base)
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
	struct config_read *R = P->ctx;
	if (yp_grow((void **)&R->listen_marks, &R->caplm, c->nlisten, sizeof(yaml_mark_t)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	R->listen_marks[c->nlisten] = P->ev.start_mark; /* the scalar form's address */
	struct config_listen *l = &c->listen[c->nlisten];
	memset(l, 0, sizeof(*l));
	c->nlisten++; /* counted now so config_listen_free releases a half-read entry */
	l->mode = CONFIG_DEFAULT_SOCKET_MODE;
	config_listen_http_defaults(&l->http);
	if (P->ev.type != YAML_MAPPING_START_EVENT) {
		const char *s;
		size_t len;
		if (config_address_scalar(P, k->name, &s, &len) < 0)
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

int config_listen_set(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config *c = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of addresses");
	yaml_mark_t start = P->ev.start_mark;
	struct listen_read L = {c, 0};
	size_t n;
	config_listen_free(c); /* the default */
	if (yp_seq(P, k, "addresses", listen_entry, &L, &n) < 0)
		return -1;
	if (c->nlisten == 0)
		return yp_failk(P, start, k->name, "at least one address is required");
	return 0;
}

enum { MK_LISTEN, MK_TLS, MK_TOP_SERIES, MK_CONSOLE, MK_MAX_CLIENTS, MK_N };

/* HTTP is TCP here: evhttp binds host:port. */
static int set_tcp_address(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (config_address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected host:port, not a unix socket");
	return yp_dup_string(P, (char **)dst, s, len);
}

static const struct ykey metrics_keys[MK_N] = {
	[MK_LISTEN] = {"listen", set_tcp_address, offsetof(struct config, metrics_listen), 0, 0,
		       YP_RESTART, yp_put_string, NULL},
	/* as a listener's: HTTPS for a scraper across a network */
	[MK_TLS] = {"tls", set_tls, offsetof(struct config, metrics_tls), 0, 0, YP_SECTION, NULL,
		    NULL},
	/* the label budget of ratelimitd_top_denied (users are labels there) */
	[MK_TOP_SERIES] = {"top_series", yp_set_int, offsetof(struct config, metrics_top_series), 0,
			   1000, YP_RELOAD, yp_put_int, NULL},
	/* the page of console.c; off: /console answers 404 */
	[MK_CONSOLE] = {"console", yp_set_bool, offsetof(struct config, metrics_console), 0, 0,
			YP_RELOAD, yp_put_bool, NULL},
	/* its connections at once (metrics_conn.c); new ones are counted
	 * against the running value */
	[MK_MAX_CLIENTS] = {"max_clients", yp_set_int, offsetof(struct config, metrics_max_clients),
			    1, 100000, YP_RELOAD, yp_put_int, NULL},
};

const struct ktable config_metrics_table = {"metrics.", metrics_keys, MK_N, KT_AT_BASE, 0};
const struct ktable config_metrics_tls_table = {"metrics.tls.", tls_keys, LTK_N, KT_AT_BASE,
						offsetof(struct config, metrics_tls)};

int config_listen_set_metrics(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[MK_N], start;
	if (yp_section(P, k, "expected a mapping", metrics_keys, MK_N, dst, &seen, marks, &start) <
	    0)
		return -1;
	if (!(seen & (1u << MK_LISTEN)))
		return yp_fail_section(P, start, "needs listen: host:port");
	((struct config_read *)P->ctx)->metrics_mark = marks[MK_LISTEN];
	return 0;
}

/* Addresses no two sockets can bind (addr_overlap): a daemon with them
 * would fail to start, so -t and a reload refuse them, at the later one.
 * listed: the listen key was given (else the default has no position, and
 * metrics.listen takes the blame). */
void config_listen_check_binds(struct yparser *P, const struct config *c, int listed)
{
	const struct config_read *R = P->ctx;
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
