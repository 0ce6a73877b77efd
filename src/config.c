/* config.c - YAML file -> validated config snapshot, or every "FILE:LINE:COL: message" error. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "keys.h"
#include "log.h"

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

/* Room kept in parser.out for that last line. */
#define ERRORS_MORE_ROOM 48

struct parser {
	yaml_parser_t yaml;
	yaml_event_t ev; /* the current event; owned while have_ev */
	int have_ev;
	int fatal;	  /* YAML syntax error or out of memory: stop reading */
	int depth;	  /* mappings and sequences open, the current event's included */
	int flow;	  /* how many of them are flow style ({...} or [...]) */
	const char *name; /* file name for messages */
	const char *buf;
	size_t len;
	/* Every error found: nerr of them, the first `shown` in out, one per line. */
	unsigned nerr, shown;
	size_t outlen;
	char out[CONFIG_ERR_MAX];
	/* The previous event when it was a plain scalar spread over several lines
	 * (a line indented too far continues the value above it). */
	struct {
		int valid, flow;
		size_t line, end_line;
	} ml;
	int hinted; /* a "continues the value" message was given for hint_line */
	size_t hint_line;
	/* Dotted path of the enclosing mapping, for messages ("redis.", "policies.x."). */
	char section[POLICY_NAME_MAX + 16];
	struct config *c;
	struct pentry *pol;
	size_t npol, cappol;
};

/*
 * A key table entry, after twemproxy's conf_commands: `set` consumes the
 * value starting at the current event and stores it at base + offset;
 * min/max bound integers and lengths where the setter uses them.
 */
struct conf_key {
	const char *name;
	int (*set)(struct parser *P, const struct conf_key *k, void *dst);
	size_t offset;
	int64_t min, max;
};

/* Policy mapping form, gathered before it can be checked: which keys are
 * allowed depends on `algorithm`, which may come last. */
struct rate {
	int64_t count, period_ms;
};

struct policy_form {
	enum policy_algo algo;
	int nlimits;
	struct policy_limit limits[POLICY_MAX_LIMITS];
	yaml_mark_t limit_marks[POLICY_MAX_LIMITS];
	int64_t capacity;
	struct rate rate;
	enum policy_on_error on_error;
};

static int fail(struct parser *P, yaml_mark_t m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Records one error and returns -1. Callers carry on where they can (the
 * next key, the next list entry, the next policy), so one run reports every
 * independent mistake; checks that depend on a value that failed are skipped
 * so that no error is only a consequence of another.
 */
static int fail(struct parser *P, yaml_mark_t m, const char *fmt, ...)
{
	char line[1024];
	P->nerr++;
	int n = snprintf(line, sizeof(line), "%s:%zu:%zu: ", P->name, m.line + 1, m.column + 1);
	if (n < 0)
		return -1;
	if ((size_t)n < sizeof(line)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
		va_end(ap);
	}
	size_t len = strlen(line);
	if (P->shown < CONFIG_ERRORS_SHOWN &&
	    P->outlen + 1 + len + ERRORS_MORE_ROOM < sizeof(P->out)) {
		if (P->outlen)
			P->out[P->outlen++] = '\n';
		memcpy(P->out + P->outlen, line, len + 1);
		P->outlen += len;
		P->shown++;
	}
	return -1;
}

/* An error after which nothing more can be read. */
static int fail_fatal(struct parser *P, yaml_mark_t m, const char *what)
{
	P->fatal = 1;
	return fail(P, m, "%s", what);
}

/* Makes arbitrary input bytes safe to quote in a message: printable ASCII
 * only, truncated. */
static const char *show(const char *s, size_t len, char *buf, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 4 < cap; i++)
		buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : s[i] == '\n' ? ' ' : '?';
	if (n < len && n + 4 >= cap) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

/* Reader errors (bad UTF-8, control characters) carry a byte offset, not a
 * mark; count lines and characters up to it ourselves. */
static yaml_mark_t offset_mark(const struct parser *P, size_t offset)
{
	yaml_mark_t m = {0, 0, 0};
	size_t end = offset < P->len ? offset : P->len;
	size_t i = 0;
	if (end >= 3 && memcmp(P->buf, "\xef\xbb\xbf", 3) == 0)
		i = 3;
	for (; i < end; i++) {
		unsigned char ch = (unsigned char)P->buf[i];
		if (ch == '\n' || (ch == '\r' && (i + 1 >= P->len || P->buf[i + 1] != '\n'))) {
			m.line++;
			m.column = 0;
		} else if (ch != '\r' && (ch & 0xc0) != 0x80) {
			m.column++;
		}
	}
	m.index = end;
	return m;
}

/* Byte offset of the start of `line` (0-based), counting line breaks as
 * libyaml does: CR LF, CR, LF, NEL, LS and PS. */
static size_t line_offset(const struct parser *P, size_t line)
{
	const unsigned char *b = (const unsigned char *)P->buf;
	size_t i = 0, l = 0, n = P->len;
	if (n >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0)
		i = 3;
	while (l < line && i < n) {
		if (b[i] == '\r')
			i += i + 1 < n && b[i + 1] == '\n' ? 2 : 1;
		else if (b[i] == '\n')
			i++;
		else if (b[i] == 0xc2 && i + 1 < n && b[i + 1] == 0x85)
			i += 2;
		else if (b[i] == 0xe2 && i + 2 < n && b[i + 1] == 0x80 &&
			 (b[i + 2] == 0xa8 || b[i + 2] == 0xa9))
			i += 3;
		else {
			i++;
			continue;
		}
		l++;
	}
	return i;
}

/* Where the second line of a plain scalar from `line` to `end_line` starts:
 * the first non-blank line after `line`, at its first non-blank column. */
static yaml_mark_t continuation_mark(const struct parser *P, size_t line, size_t end_line)
{
	yaml_mark_t m = {0, end_line, 0};
	for (size_t l = line + 1; l <= end_line; l++) {
		size_t i = line_offset(P, l), col = 0;
		while (i + col < P->len && (P->buf[i + col] == ' ' || P->buf[i + col] == '\t'))
			col++;
		if (i + col < P->len && P->buf[i + col] != '\n' && P->buf[i + col] != '\r') {
			m.line = l;
			m.column = col;
			break;
		}
	}
	return m;
}

/*
 * The message for a line that YAML read as the continuation of the value on
 * the line above: in block style it is indented too far, in flow style a
 * comma is missing. `key` may be "" and `text` (the value as YAML read it)
 * NULL: the value may be a password, never quoted.
 */
static int fail_continued(struct parser *P, const char *key, size_t line, size_t end_line, int flow,
			  const char *text)
{
	yaml_mark_t m = continuation_mark(P, line, end_line);
	P->hinted = 1;
	P->hint_line = m.line;
	return fail(P, m, "%s%sthis line continues the value on line %zu%s%s%s; %s", key,
		    key[0] ? ": " : "", line + 1, text ? " (\"" : "", text ? text : "",
		    text ? "\")" : "",
		    flow ? "is a ',' or a closing bracket missing before it?"
			 : "is it indented too far?");
}

static int yaml_fail(struct parser *P)
{
	const yaml_parser_t *y = &P->yaml;
	yaml_mark_t m = y->problem_mark;
	const char *problem = y->problem ? y->problem : "invalid YAML";
	P->fatal = 1;
	if (y->error == YAML_READER_ERROR)
		m = offset_mark(P, y->problem_offset);
	else if (y->error == YAML_MEMORY_ERROR) {
		m = y->mark;
		problem = "out of memory";
	} else if (P->ml.valid && m.line == P->ml.end_line) {
		/* "key: value" on a continuation line of a plain scalar: the real
		 * mistake is the indentation (or comma) of that line. */
		if (P->hinted && P->hint_line == m.line)
			return -1;
		return fail_continued(P, "", P->ml.line, P->ml.end_line, P->ml.flow, NULL);
	}
	if (y->context)
		return fail(P, m, "YAML syntax error: %s, %s", y->context, problem);
	return fail(P, m, "YAML syntax error: %s", problem);
}

/* A plain scalar over several lines: "5/60s\n   burst: 3" reads as "5/60s burst". */
static int is_multiline(const yaml_event_t *ev)
{
	return ev->type == YAML_SCALAR_EVENT && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       ev->end_mark.line > ev->start_mark.line;
}

/*
 * Advances to the next event, freeing the previous one. Anchors and aliases
 * are refused here, once for every node: nothing in a config needs them, and
 * refusing them rules out alias-expansion blowups. Any failure here is fatal.
 */
static int next(struct parser *P)
{
	if (P->fatal)
		return -1;
	P->ml.valid = 0;
	if (P->have_ev) {
		if (is_multiline(&P->ev)) {
			P->ml.valid = 1;
			P->ml.flow = P->flow > 0;
			P->ml.line = P->ev.start_mark.line;
			P->ml.end_line = P->ev.end_mark.line;
		}
		yaml_event_delete(&P->ev);
		P->have_ev = 0;
	}
	if (!yaml_parser_parse(&P->yaml, &P->ev))
		return yaml_fail(P);
	P->have_ev = 1;
	const yaml_char_t *anchor = NULL;
	switch (P->ev.type) {
	case YAML_ALIAS_EVENT:
		return fail_fatal(P, P->ev.start_mark, "YAML aliases are not supported");
	case YAML_SCALAR_EVENT:
		anchor = P->ev.data.scalar.anchor;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = P->ev.data.sequence_start.anchor;
		P->depth++;
		P->flow += P->flow || P->ev.data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = P->ev.data.mapping_start.anchor;
		P->depth++;
		P->flow += P->flow || P->ev.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE;
		break;
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		P->depth--;
		if (P->flow)
			P->flow--;
		break;
	default:
		break;
	}
	if (anchor)
		return fail_fatal(P, P->ev.start_mark, "YAML anchors are not supported");
	return 0;
}

/* After an error in a value: reads past the rest of it, up to the event that
 * closes the collection at `depth` (the one the value belongs to). */
static int skip_to(struct parser *P, int depth)
{
	while (P->depth > depth)
		if (next(P) < 0)
			return -1;
	return 0;
}

static int failk(struct parser *P, yaml_mark_t m, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* fail() with the dotted key path in front: "redis.timeout: ...". */
static int failk(struct parser *P, yaml_mark_t m, const char *key, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return fail(P, m, "%s%s: %s", P->section, key, msg);
}

/* An empty plain scalar, ~ or null: YAML's spellings of "no value". */
static int is_null(const yaml_event_t *ev)
{
	if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	const char *s = (const char *)ev->data.scalar.value;
	size_t n = ev->data.scalar.length;
	return n == 0 || (n == 1 && s[0] == '~') ||
	       (n == 4 &&
		(!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

/* The current event as a non-null scalar without NUL bytes (a double-quoted
 * "\0" would otherwise cut strdup'ed strings short). */
static int scalar_text(struct parser *P, const char *key, const char *what, const char **s,
		       size_t *len)
{
	if (P->ev.type != YAML_SCALAR_EVENT || is_null(&P->ev))
		return failk(P, P->ev.start_mark, key, "expected %s", what);
	*s = (const char *)P->ev.data.scalar.value;
	*len = P->ev.data.scalar.length;
	if (memchr(*s, '\0', *len))
		return failk(P, P->ev.start_mark, key, "must not contain a NUL byte");
	return 0;
}

/* scalar_text() on one line: every value but a free-form string is a single
 * token, so a plain scalar over two lines means the second is misplaced. */
static int scalar(struct parser *P, const char *key, const char *what, const char **s, size_t *len)
{
	if (scalar_text(P, key, what, s, len) < 0)
		return -1;
	if (is_multiline(&P->ev)) {
		char path[POLICY_NAME_MAX + 80], text[48];
		snprintf(path, sizeof(path), "%s%s", P->section, key);
		return fail_continued(P, path, P->ev.start_mark.line, P->ev.end_mark.line,
				      P->flow > 0, show(*s, *len, text, sizeof(text)));
	}
	return 0;
}

/* Canonical decimal only: no sign, no leading zeros (YAML 1.1 reads 010 as
 * octal, so accepting it would be ambiguous), no junk, within [min, max]. */
static int parse_dec(const char *s, size_t len, int64_t min, int64_t max, int64_t *out)
{
	if (len == 0 || (len > 1 && s[0] == '0'))
		return -1;
	int64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		int d = s[i] - '0';
		if (v > (INT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int dup_string(struct parser *P, char **dst, const char *s, size_t len)
{
	char *copy = strndup(s, len);
	if (!copy)
		return fail_fatal(P, P->ev.start_mark, "out of memory");
	free(*dst);
	*dst = copy;
	return 0;
}

static int get_int64(struct parser *P, const struct conf_key *k, int64_t *out)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "an integer", &s, &len) < 0)
		return -1;
	if (parse_dec(s, len, k->min, k->max, out) < 0)
		return failk(P, P->ev.start_mark, k->name, "must be an integer from %lld to %lld",
			     (long long)k->min, (long long)k->max);
	return 0;
}

static int set_int(struct parser *P, const struct conf_key *k, void *dst)
{
	int64_t v;
	if (get_int64(P, k, &v) < 0)
		return -1;
	*(int *)dst = (int)v;
	return 0;
}

static int set_int64(struct parser *P, const struct conf_key *k, void *dst)
{
	return get_int64(P, k, (int64_t *)dst);
}

static int set_size(struct parser *P, const struct conf_key *k, void *dst)
{
	int64_t v;
	if (get_int64(P, k, &v) < 0)
		return -1;
	*(size_t *)dst = (size_t)v;
	return 0;
}

static void fmt_ms(int64_t ms, char *buf, size_t cap)
{
	if (ms % 1000 == 0)
		snprintf(buf, cap, "%llds", (long long)(ms / 1000));
	else
		snprintf(buf, cap, "%lldms", (long long)ms);
}

static int set_duration(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	int64_t ms;
	if (scalar(P, k->name, "a duration such as 50ms", &s, &len) < 0)
		return -1;
	if (policy_parse_duration(s, len, &ms, why, sizeof(why)) < 0)
		return failk(P, P->ev.start_mark, k->name, "%s", why);
	if (ms < k->min || ms > k->max) {
		char lo[32], hi[32];
		fmt_ms(k->min, lo, sizeof(lo));
		fmt_ms(k->max, hi, sizeof(hi));
		return failk(P, P->ev.start_mark, k->name, "must be from %s to %s", lo, hi);
	}
	*(int64_t *)dst = ms;
	return 0;
}

static int set_string(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar_text(P, k->name, "a string", &s, &len) < 0)
		return -1;
	if (len == 0)
		return failk(P, P->ev.start_mark, k->name, "must not be empty");
	return dup_string(P, (char **)dst, s, len);
}

/* Keys are built as <prefix>{action:user}...; a brace would break Redis
 * Cluster hash tags, whitespace and control bytes have no business there. */
static int set_prefix(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "a string", &s, &len) < 0)
		return -1;
	if (len > KEYS_PREFIX_MAX)
		return failk(P, P->ev.start_mark, k->name, "longer than %d bytes", KEYS_PREFIX_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '{' || ch == '}' || ch <= ' ' || ch == 0x7f)
			return failk(P, P->ev.start_mark, k->name,
				     "must not contain '{', '}', whitespace or control characters");
	}
	return dup_string(P, (char **)dst, s, len);
}

static int port_valid(const char *s, size_t len)
{
	int64_t port;
	return parse_dec(s, len, 1, 65535, &port) == 0;
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

static int address_scalar(struct parser *P, const char *key, const char **s, size_t *len)
{
	if (scalar(P, key, "an address (host:port or unix:/path)", s, len) < 0)
		return -1;
	const char *why = address_error(*s, *len);
	if (why)
		return failk(P, P->ev.start_mark, key, "%s", why);
	return 0;
}

static int set_address(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	return dup_string(P, (char **)dst, s, len);
}

static int set_on_error(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "allow, deny or error", &s, &len) < 0)
		return -1;
	if (policy_parse_on_error(s, len, (enum policy_on_error *)dst) < 0)
		return failk(P, P->ev.start_mark, k->name, "must be allow, deny or error");
	return 0;
}

static int set_log_level(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "debug, info, warn or error", &s, &len) < 0)
		return -1;
	/* libyaml NUL-terminates scalars and scalar() refused embedded NULs. */
	int level = log_level_parse(s);
	if (level < 0)
		return failk(P, P->ev.start_mark, k->name, "must be debug, info, warn or error");
	*(int *)dst = level;
	return 0;
}

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 8;
	if (ncap > SIZE_MAX / size)
		return -1;
	void *p = realloc(*arr, ncap * size);
	if (!p)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

static void free_listen(struct config *c)
{
	for (size_t i = 0; i < c->nlisten; i++)
		free(c->listen[i].address);
	free(c->listen);
	c->listen = NULL;
	c->nlisten = 0;
}

static int parse_map(struct parser *P, const struct conf_key *keys, size_t nkeys, void *base,
		     unsigned *seen, yaml_mark_t *marks);

static int set_bool(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "true or false", &s, &len) < 0)
		return -1;
	if (len == 4 && memcmp(s, "true", 4) == 0)
		*(int *)dst = 1;
	else if (len == 5 && memcmp(s, "false", 5) == 0)
		*(int *)dst = 0;
	else
		return failk(P, P->ev.start_mark, k->name, "must be true or false");
	return 0;
}

/* An octal file mode such as 0660 (YAML would read a plain 0660 as octal
 * too, but we take the digits as written). */
static int set_mode(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "an octal file mode such as 0660", &s, &len) < 0)
		return -1;
	int mode = 0;
	if (len < 3 || len > 4)
		return failk(P, P->ev.start_mark, k->name,
			     "must be an octal file mode such as 0660");
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '7')
			return failk(P, P->ev.start_mark, k->name,
				     "must be an octal file mode such as 0660");
		mode = mode * 8 + (s[i] - '0');
	}
	if (mode > 0777)
		return failk(P, P->ev.start_mark, k->name, "only permission bits (at most 0777)");
	*(int *)dst = mode;
	return 0;
}

enum { LK_ADDRESS, LK_ADMIN, LK_MODE, LK_N };

static const struct conf_key listen_keys[LK_N] = {
	[LK_ADDRESS] = {"address", set_address, offsetof(struct config_listen, address), 0, 0},
	[LK_ADMIN] = {"admin", set_bool, offsetof(struct config_listen, admin), 0, 0},
	[LK_MODE] = {"mode", set_mode, offsetof(struct config_listen, mode), 0, 0},
};

/* One listen entry: "address" or {address, admin, mode}. */
static int listen_entry(struct parser *P, const char *key, struct config_listen *l)
{
	l->mode = CONFIG_DEFAULT_SOCKET_MODE;
	if (P->ev.type != YAML_MAPPING_START_EVENT) {
		const char *s;
		size_t len;
		if (address_scalar(P, key, &s, &len) < 0)
			return -1;
		l->address = strndup(s, len);
		return l->address ? 0 : fail_fatal(P, P->ev.start_mark, "out of memory");
	}
	yaml_mark_t start = P->ev.start_mark;
	unsigned seen;
	yaml_mark_t marks[LK_N];
	snprintf(P->section, sizeof(P->section), "listen.");
	int rc = parse_map(P, listen_keys, LK_N, l, &seen, marks);
	P->section[0] = '\0';
	if (rc < 0)
		return -1;
	if (!(seen & (1u << LK_ADDRESS)))
		return failk(P, start, key, "an entry needs an address");
	if ((seen & (1u << LK_MODE)) && strncmp(l->address, "unix:", 5) != 0)
		return fail(P, marks[LK_MODE], "listen.mode: only applies to unix:/path addresses");
	return 0;
}

static int set_listen(struct parser *P, const struct conf_key *k, void *dst)
{
	struct config *c = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return failk(P, P->ev.start_mark, k->name, "expected a list of addresses");
	yaml_mark_t start = P->ev.start_mark;
	size_t cap = 0;
	unsigned nerr = P->nerr;
	int depth = P->depth;
	free_listen(c); /* the default */
	for (;;) {
		if (next(P) < 0)
			return -1;
		if (P->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (grow((void **)&c->listen, &cap, c->nlisten, sizeof(*c->listen)) < 0)
			return fail_fatal(P, P->ev.start_mark, "out of memory");
		struct config_listen *l = &c->listen[c->nlisten];
		memset(l, 0, sizeof(*l));
		c->nlisten++; /* counted now so free_listen releases a half-read entry */
		if (listen_entry(P, k->name, l) < 0 && skip_to(P, depth) < 0)
			return -1;
	}
	if (P->nerr != nerr)
		return -1;
	if (c->nlisten == 0)
		return failk(P, start, k->name, "at least one address is required");
	return 0;
}

/* The key at the current event: its index in keys, or -1 when it is not a
 * string, unknown or repeated. */
static int map_key(struct parser *P, const struct conf_key *keys, size_t nkeys, unsigned *seen,
		   yaml_mark_t *marks, size_t *index)
{
	yaml_mark_t km = P->ev.start_mark;
	if (P->ev.type != YAML_SCALAR_EVENT)
		return fail(P, km, "a key must be a plain string");
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	size_t i;
	for (i = 0; i < nkeys; i++)
		if (strlen(keys[i].name) == len && memcmp(keys[i].name, s, len) == 0)
			break;
	char shown[48];
	if (i == nkeys) {
		/* "password:SECRET" (no space) is one scalar: quote only what comes
		 * before a ':' or '=' so a mistyped secret is never echoed. */
		size_t keep = 0;
		while (keep < len && s[keep] != ':' && s[keep] != '=' && s[keep] != ' ')
			keep++;
		return fail(P, km, "unknown key \"%s%s%s\"%s", P->section,
			    show(s, keep, shown, sizeof(shown)), keep < len ? "..." : "",
			    keep < len ? " (a space is needed after ':')" : "");
	}
	if (*seen & (1u << i))
		return fail(P, km, "duplicate key \"%s%s\"", P->section, keys[i].name);
	*seen |= 1u << i;
	marks[i] = km;
	*index = i;
	return 0;
}

/*
 * Reads a mapping (current event: MAPPING_START) against a key table, up to
 * and including its MAPPING_END. Unknown and repeated keys are errors.
 * seen gets bit i for keys[i]; marks[i] the position of that key.
 * A key or value in error is reported and skipped, and reading goes on with
 * the next key; -1 then tells the caller not to check the mapping as a whole.
 */
static int parse_map(struct parser *P, const struct conf_key *keys, size_t nkeys, void *base,
		     unsigned *seen, yaml_mark_t *marks)
{
	unsigned nerr = P->nerr;
	int depth = P->depth;
	size_t section = strlen(P->section);
	*seen = 0;
	for (;;) {
		if (next(P) < 0)
			return -1;
		if (P->ev.type == YAML_MAPPING_END_EVENT)
			return P->nerr == nerr ? 0 : -1;
		size_t i = 0;
		if (map_key(P, keys, nkeys, seen, marks, &i) < 0) {
			/* skip the key (if it is a collection) and its value */
			if (skip_to(P, depth) < 0 || next(P) < 0 || skip_to(P, depth) < 0)
				return -1;
			continue;
		}
		if (next(P) < 0)
			return -1;
		int rc = keys[i].set(P, &keys[i], (char *)base + keys[i].offset);
		P->section[section] = '\0'; /* nested sections extend this one */
		if (rc < 0 && skip_to(P, depth) < 0)
			return -1;
	}
}

/*
 * A nested mapping (current event: MAPPING_START, else "k: expected") read
 * against its key table; errors inside it name keys as "<section>key".
 * The start mark of the mapping goes to *start.
 */
static int parse_section(struct parser *P, const struct conf_key *k, const char *expected,
			 const char *section, const struct conf_key *keys, size_t nkeys, void *dst,
			 unsigned *seen, yaml_mark_t *marks, yaml_mark_t *start)
{
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return failk(P, P->ev.start_mark, k->name, "%s", expected);
	*start = P->ev.start_mark;
	snprintf(P->section, sizeof(P->section), "%s", section);
	return parse_map(P, keys, nkeys, dst, seen, marks);
}

enum { MK_LISTEN, MK_N };

/* HTTP is TCP here: evhttp binds host:port. */
static int set_tcp_address(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return failk(P, P->ev.start_mark, k->name, "expected host:port, not a unix socket");
	return dup_string(P, (char **)dst, s, len);
}

static const struct conf_key metrics_keys[MK_N] = {
	[MK_LISTEN] = {"listen", set_tcp_address, offsetof(struct config, metrics_listen), 0, 0},
};

static int set_metrics(struct parser *P, const struct conf_key *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[MK_N], start;
	if (parse_section(P, k, "expected a mapping", "metrics.", metrics_keys, MK_N, dst, &seen,
			  marks, &start) < 0)
		return -1;
	P->section[0] = '\0';
	if (!(seen & (1u << MK_LISTEN)))
		return failk(P, start, k->name, "needs listen: host:port");
	return 0;
}

static int set_addr_list(struct parser *P, const struct conf_key *k, void *dst);
static int set_sentinel(struct parser *P, const struct conf_key *k, void *dst);

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

static const struct conf_key redis_keys[RK_N] = {
	[RK_ADDRESS] = {"address", set_address, offsetof(struct config_redis, address), 0, 0},
	[RK_CLUSTER] = {"cluster", set_addr_list, offsetof(struct config_redis, cluster), 0, 0},
	[RK_SENTINEL] = {"sentinel", set_sentinel, 0, 0, 0},
	[RK_USERNAME] = {"username", set_string, offsetof(struct config_redis, username), 0, 0},
	[RK_PASSWORD] = {"password", set_string, offsetof(struct config_redis, password), 0, 0},
	[RK_DATABASE] = {"database", set_int, offsetof(struct config_redis, database), 0,
			 2147483647},
	[RK_TIMEOUT] = {"timeout", set_duration, offsetof(struct config_redis, timeout_ms), 1,
			60000},
	[RK_CONNECTIONS] = {"connections", set_int, offsetof(struct config_redis, connections), 1,
			    64},
};

static int set_redis(struct parser *P, const struct conf_key *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[RK_N], start;
	if (parse_section(P, k, "expected a mapping", "redis.", redis_keys, RK_N, dst, &seen, marks,
			  &start) < 0)
		return -1;
	/* Redis 6 ACL AUTH takes both; a user alone would silently log in as default. */
	if ((seen & (1u << RK_USERNAME)) && !(seen & (1u << RK_PASSWORD)))
		return failk(P, marks[RK_USERNAME], "username", "requires redis.password");
	struct config_redis *r = dst;
	int modes = !!(seen & (1u << RK_ADDRESS)) + !!(seen & (1u << RK_CLUSTER)) +
		    !!(seen & (1u << RK_SENTINEL));
	if (modes > 1) {
		int second = (seen & (1u << RK_SENTINEL)) ? RK_SENTINEL : RK_CLUSTER;
		return fail(P, marks[second],
			    "redis: use only one of address, cluster and sentinel");
	}
	if (seen & (1u << RK_CLUSTER)) {
		r->mode = CONFIG_REDIS_CLUSTER;
		/* Redis Cluster has database 0 only. */
		if ((seen & (1u << RK_DATABASE)) && r->database != 0)
			return failk(P, marks[RK_DATABASE], "database", "must be 0 with cluster");
	} else if (seen & (1u << RK_SENTINEL)) {
		r->mode = CONFIG_REDIS_SENTINEL;
	}
	P->section[0] = '\0';
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

/* A list of host:port (TCP only: cluster nodes and sentinels announce TCP addresses). */
static int set_addr_list(struct parser *P, const struct conf_key *k, void *dst)
{
	struct config_addrs *a = dst;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return failk(P, P->ev.start_mark, k->name, "expected a list of host:port");
	yaml_mark_t start = P->ev.start_mark;
	size_t cap = 0;
	unsigned nerr = P->nerr;
	int depth = P->depth;
	free_addrs(a);
	for (;;) {
		const char *s;
		size_t len;
		if (next(P) < 0)
			return -1;
		if (P->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (address_scalar(P, k->name, &s, &len) < 0) {
			if (skip_to(P, depth) < 0)
				return -1;
			continue;
		}
		if (len >= 5 && memcmp(s, "unix:", 5) == 0) {
			failk(P, P->ev.start_mark, k->name,
			      "expected host:port, not a unix socket");
			continue;
		}
		if (grow((void **)&a->addr, &cap, a->n, sizeof(*a->addr)) < 0)
			return fail_fatal(P, P->ev.start_mark, "out of memory");
		a->addr[a->n] = strndup(s, len);
		if (!a->addr[a->n])
			return fail_fatal(P, P->ev.start_mark, "out of memory");
		a->n++;
	}
	if (P->nerr != nerr)
		return -1;
	if (a->n == 0)
		return failk(P, start, k->name, "at least one address is required");
	return 0;
}

enum { SK_MASTER, SK_ADDRESSES, SK_N };

static const struct conf_key sentinel_keys[SK_N] = {
	[SK_MASTER] = {"master", set_string, offsetof(struct config_redis, sentinel_master), 0, 0},
	[SK_ADDRESSES] = {"addresses", set_addr_list, offsetof(struct config_redis, sentinels), 0,
			  0},
};

static int set_sentinel(struct parser *P, const struct conf_key *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[SK_N], start;
	if (parse_section(P, k, "expected {master: NAME, addresses: [...]}", "redis.sentinel.",
			  sentinel_keys, SK_N, dst, &seen, marks, &start) < 0)
		return -1;
	snprintf(P->section, sizeof(P->section), "redis.");
	if (seen != (1u << SK_N) - 1)
		return failk(P, start, k->name, "needs master and addresses");
	return 0;
}

/* One rate string at the current event, appended to f; a bad one counts
 * too, towards POLICY_MAX_LIMITS (the caller checks there is room). */
static int add_limit(struct parser *P, struct policy_form *f, const char *key)
{
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	int rc = scalar(P, key, "a rate such as 5/60s", &s, &len);
	struct policy_limit *l = &f->limits[f->nlimits];
	if (rc == 0 && policy_parse_rate(s, len, &l->count, &l->period_ms, why, sizeof(why)) < 0)
		rc = failk(P, P->ev.start_mark, key, "%s", why);
	l->capacity = l->count;
	f->limit_marks[f->nlimits++] = P->ev.start_mark;
	return rc;
}

/* A single rate or a list of rates. */
static int parse_limits(struct parser *P, struct policy_form *f, const char *key)
{
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return add_limit(P, f, key);
	yaml_mark_t start = P->ev.start_mark;
	unsigned nerr = P->nerr;
	int depth = P->depth;
	for (;;) {
		if (next(P) < 0)
			return -1;
		if (P->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (f->nlimits == POLICY_MAX_LIMITS) {
			/* once: the rest of the list is skipped */
			failk(P, P->ev.start_mark, key, "too many limits (at most %d)",
			      POLICY_MAX_LIMITS);
			skip_to(P, depth - 1);
			return -1;
		}
		if (add_limit(P, f, key) < 0 && skip_to(P, depth) < 0)
			return -1;
	}
	if (P->nerr != nerr)
		return -1;
	if (f->nlimits == 0)
		return failk(P, start, key, "at least one rate is required");
	return 0;
}

static int set_limits(struct parser *P, const struct conf_key *k, void *dst)
{
	return parse_limits(P, dst, k->name);
}

static int set_rate(struct parser *P, const struct conf_key *k, void *dst)
{
	struct rate *r = dst;
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	if (scalar(P, k->name, "a rate such as 30/60s", &s, &len) < 0)
		return -1;
	if (policy_parse_rate(s, len, &r->count, &r->period_ms, why, sizeof(why)) < 0)
		return failk(P, P->ev.start_mark, k->name, "%s", why);
	return 0;
}

static int set_algorithm(struct parser *P, const struct conf_key *k, void *dst)
{
	const char *s;
	size_t len;
	if (scalar(P, k->name, "sliding_window or funnel", &s, &len) < 0)
		return -1;
	if (len == 14 && memcmp(s, "sliding_window", 14) == 0)
		*(enum policy_algo *)dst = POLICY_SLIDING_WINDOW;
	else if (len == 6 && memcmp(s, "funnel", 6) == 0)
		*(enum policy_algo *)dst = POLICY_FUNNEL;
	else
		return failk(P, P->ev.start_mark, k->name, "must be sliding_window or funnel");
	return 0;
}

enum { PK_ALGORITHM, PK_LIMITS, PK_CAPACITY, PK_RATE, PK_ON_ERROR, PK_N };

static const struct conf_key policy_keys[PK_N] = {
	[PK_ALGORITHM] = {"algorithm", set_algorithm, offsetof(struct policy_form, algo), 0, 0},
	[PK_LIMITS] = {"limits", set_limits, 0, 0, 0},
	[PK_CAPACITY] = {"capacity", set_int64, offsetof(struct policy_form, capacity), 1,
			 POLICY_MAX_COUNT},
	[PK_RATE] = {"rate", set_rate, offsetof(struct policy_form, rate), 0, 0},
	[PK_ON_ERROR] = {"on_store_error", set_on_error, offsetof(struct policy_form, on_error), 0,
			 0},
};

/* Mapping form: decides what the gathered keys mean once algorithm is known. */
static int policy_mapping(struct parser *P, struct policy_form *f, const char *name)
{
	yaml_mark_t start = P->ev.start_mark;
	unsigned seen;
	yaml_mark_t marks[PK_N];
	snprintf(P->section, sizeof(P->section), "policies.%s.", name);
	if (parse_map(P, policy_keys, PK_N, f, &seen, marks) < 0)
		return -1;
	if (f->algo == POLICY_FUNNEL) {
		if (seen & (1u << PK_LIMITS))
			return failk(P, marks[PK_LIMITS], "limits",
				     "a funnel takes capacity and rate, not limits");
		if (!(seen & (1u << PK_CAPACITY)))
			return fail(P, start, "policies.%s: a funnel needs a capacity", name);
		if (!(seen & (1u << PK_RATE)))
			return fail(P, start, "policies.%s: a funnel needs a rate", name);
		f->limits[0].capacity = f->capacity;
		f->limits[0].count = f->rate.count;
		f->limits[0].period_ms = f->rate.period_ms;
		f->limit_marks[0] = marks[PK_RATE];
		f->nlimits = 1;
	} else {
		if (seen & (1u << PK_CAPACITY))
			return failk(P, marks[PK_CAPACITY], "capacity",
				     "only a funnel has a capacity (algorithm: funnel)");
		if (seen & (1u << PK_RATE))
			return failk(P, marks[PK_RATE], "rate",
				     "only a funnel has a rate; a sliding_window takes limits");
		if (!(seen & (1u << PK_LIMITS)))
			return fail(P, start, "policies.%s: a sliding_window needs limits", name);
	}
	return 0;
}

/* The value of one entry under policies: a rate, a list of rates or a mapping. */
static int parse_policy(struct parser *P, struct policy *p, const char *name)
{
	struct policy_form f;
	memset(&f, 0, sizeof(f));
	f.algo = POLICY_SLIDING_WINDOW;
	f.on_error = POLICY_ON_ERROR_INHERIT;
	int rc = P->ev.type == YAML_MAPPING_START_EVENT ? policy_mapping(P, &f, name)
							: parse_limits(P, &f, name);
	snprintf(P->section, sizeof(P->section), "policies.");
	if (rc < 0)
		return -1;
	p->algo = f.algo;
	p->on_store_error = f.on_error;
	memcpy(p->limits, f.limits, sizeof(p->limits));
	/* Validate one limit at a time so a bad or repeated window is reported
	 * at the rate that introduced it. */
	for (int i = 1; i <= f.nlimits; i++) {
		const char *why;
		p->nlimits = i;
		if (policy_validate(p, &why) < 0)
			return fail(P, f.limit_marks[i - 1], "policies.%s: %s", name, why);
	}
	return 0;
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

static int set_policies(struct parser *P, const struct conf_key *k, void *dst)
{
	struct config *c = dst;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return failk(P, P->ev.start_mark, k->name,
			     "expected a mapping of policy names to limits");
	yaml_mark_t start = P->ev.start_mark;
	unsigned nerr = P->nerr;
	int depth = P->depth;
	snprintf(P->section, sizeof(P->section), "policies.");
	for (;;) {
		if (next(P) < 0)
			return -1;
		if (P->ev.type == YAML_MAPPING_END_EVENT)
			break;
		yaml_mark_t km = P->ev.start_mark;
		const char *s = NULL;
		size_t len = 0;
		if (P->ev.type != YAML_SCALAR_EVENT)
			fail(P, km, "a policy name must be a plain string");
		else if (s = (const char *)P->ev.data.scalar.value, len = P->ev.data.scalar.length,
			 !policy_name_valid(s, len))
			fail(P, km, "policy name must be 1 to %d characters of A-Z a-z 0-9 _ . -",
			     POLICY_NAME_MAX);
		if (!s || !policy_name_valid(s, len)) {
			if (skip_to(P, depth) < 0 || next(P) < 0 || skip_to(P, depth) < 0)
				return -1;
			continue;
		}
		if (grow((void **)&P->pol, &P->cappol, P->npol, sizeof(*P->pol)) < 0)
			return fail_fatal(P, km, "out of memory");
		/* Kept even when its value is bad, so that a duplicate name is still found. */
		struct pentry *e = &P->pol[P->npol++];
		memset(e, 0, sizeof(*e));
		memcpy(e->p.name, s, len);
		e->p.name_len = len;
		e->mark = km;
		if (next(P) < 0)
			return -1;
		if (parse_policy(P, &e->p, e->p.name) < 0 && skip_to(P, depth) < 0)
			return -1;
	}
	P->section[0] = '\0';
	if (P->npol == 0 && P->nerr == nerr)
		return failk(P, start, k->name, "at least one policy is required");
	if (P->npol > 1)
		qsort(P->pol, P->npol, sizeof(*P->pol), pentry_cmp);
	for (size_t i = 1; i < P->npol; i++)
		if (name_cmp(&P->pol[i - 1].p, &P->pol[i].p) == 0)
			fail(P, P->pol[i].mark, "duplicate policy \"%s\"", P->pol[i].p.name);
	if (P->nerr != nerr)
		return -1;
	c->policies = calloc(P->npol, sizeof(*c->policies));
	if (!c->policies)
		return fail_fatal(P, start, "out of memory");
	for (size_t i = 0; i < P->npol; i++)
		c->policies[i] = P->pol[i].p;
	c->npolicies = P->npol;
	return 0;
}

enum {
	TK_LISTEN,
	TK_REDIS,
	TK_PREFIX,
	TK_ON_ERROR,
	TK_MAX_LINE,
	TK_MAX_CLIENTS,
	TK_IDLE_TIMEOUT,
	TK_LOG_LEVEL,
	TK_METRICS,
	TK_POLICIES,
	TK_N
};

static const struct conf_key top_keys[TK_N] = {
	[TK_LISTEN] = {"listen", set_listen, 0, 0, 0},
	[TK_REDIS] = {"redis", set_redis, offsetof(struct config, redis), 0, 0},
	[TK_PREFIX] = {"prefix", set_prefix, offsetof(struct config, prefix), 0, 0},
	[TK_ON_ERROR] = {"on_store_error", set_on_error, offsetof(struct config, on_store_error), 0,
			 0},
	[TK_MAX_LINE] = {"max_line", set_size, offsetof(struct config, max_line), 64, 1048576},
	[TK_MAX_CLIENTS] = {"max_clients", set_int, offsetof(struct config, max_clients), 1,
			    1000000},
	[TK_IDLE_TIMEOUT] = {"idle_timeout", set_duration, offsetof(struct config, idle_timeout_ms),
			     1000, POLICY_MAX_PERIOD_MS},
	[TK_LOG_LEVEL] = {"log_level", set_log_level, offsetof(struct config, log_level), 0, 0},
	[TK_METRICS] = {"metrics", set_metrics, 0, 0, 0},
	[TK_POLICIES] = {"policies", set_policies, 0, 0, 0},
};

static int config_defaults(struct config *c)
{
	c->listen = calloc(1, sizeof(*c->listen));
	if (!c->listen)
		return -1;
	c->nlisten = 1;
	c->listen[0].address = strdup(DEFAULT_LISTEN);
	c->listen[0].mode = CONFIG_DEFAULT_SOCKET_MODE;
	c->redis.address = strdup(DEFAULT_REDIS_ADDRESS);
	c->redis.database = DEFAULT_REDIS_DATABASE;
	c->redis.timeout_ms = DEFAULT_REDIS_TIMEOUT_MS;
	c->redis.connections = DEFAULT_REDIS_CONNECTIONS;
	c->prefix = strdup(DEFAULT_PREFIX);
	c->on_store_error = DEFAULT_ON_STORE_ERROR;
	c->max_line = DEFAULT_MAX_LINE;
	c->max_clients = DEFAULT_MAX_CLIENTS;
	c->idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
	c->log_level = DEFAULT_LOG_LEVEL;
	return c->listen[0].address && c->redis.address && c->prefix ? 0 : -1;
}

/* stream-start, exactly one document whose root is a mapping, stream-end. */
static int parse_stream(struct parser *P)
{
	if (next(P) < 0) /* STREAM_START */
		return -1;
	if (next(P) < 0)
		return -1;
	if (P->ev.type == YAML_STREAM_END_EVENT)
		return fail(P, P->ev.start_mark, "the configuration is empty");
	if (next(P) < 0) /* past DOCUMENT_START */
		return -1;
	yaml_mark_t root = P->ev.start_mark;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return fail(P, root, "the top level must be a mapping of keys");
	unsigned seen;
	yaml_mark_t marks[TK_N];
	if (parse_map(P, top_keys, TK_N, P->c, &seen, marks) < 0 && P->fatal)
		return -1;
	if (!(seen & (1u << TK_POLICIES)))
		fail(P, root, "policies: required, with at least one policy");
	if (next(P) < 0) /* DOCUMENT_END */
		return -1;
	if (next(P) < 0)
		return -1;
	if (P->ev.type != YAML_STREAM_END_EVENT)
		fail(P, P->ev.start_mark, "only one YAML document is allowed");
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
	free(c->policies);
	free(c);
}

struct config *config_parse(const char *name, const char *buf, size_t len, char *err, size_t errlen)
{
	struct parser P;
	memset(&P, 0, sizeof(P));
	P.name = name ? name : "<config>";
	P.buf = buf ? buf : "";
	P.len = buf ? len : 0;

	int rc = -1, yaml_ready = 0;
	struct config *c = calloc(1, sizeof(*c));
	P.c = c;
	if (!c || config_defaults(c) < 0 || !(c->path = strdup(P.name)) ||
	    !(yaml_ready = yaml_parser_initialize(&P.yaml))) {
		yaml_mark_t none = {0, 0, 0};
		fail_fatal(&P, none, "out of memory");
		goto out;
	}
	yaml_parser_set_input_string(&P.yaml, (const unsigned char *)P.buf, P.len);
	rc = parse_stream(&P);
out:
	if (P.have_ev)
		yaml_event_delete(&P.ev);
	if (yaml_ready)
		yaml_parser_delete(&P.yaml);
	free(P.pol);
	if (rc < 0 || P.nerr) {
		if (P.nerr > P.shown)
			snprintf(P.out + P.outlen, sizeof(P.out) - P.outlen,
				 "\n... and %u more error%s", P.nerr - P.shown,
				 P.nerr - P.shown == 1 ? "" : "s");
		if (err && errlen)
			snprintf(err, errlen, "%s", P.out);
		if (c)
			config_free(c);
		return NULL;
	}
	c->refs = 1;
	return c;
}

struct config *config_load(const char *path, char *err, size_t errlen)
{
	struct config *c = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		goto fail_errno;
	for (;;) {
		if (len == cap) {
			/* The buffer stops one byte past the limit: filling it means too large. */
			if (cap > CONFIG_FILE_MAX) {
				snprintf(err, errlen, "%s: cannot read: larger than %d bytes", path,
					 CONFIG_FILE_MAX);
				goto out;
			}
			size_t ncap = cap ? cap * 2 : 4096;
			if (ncap > CONFIG_FILE_MAX)
				ncap = CONFIG_FILE_MAX + 1;
			char *p = realloc(buf, ncap);
			if (!p)
				goto fail_errno;
			buf = p;
			cap = ncap;
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0) {
			if (ferror(f))
				goto fail_errno;
			break;
		}
	}
	c = config_parse(path, buf, len, err, errlen);
	goto out;
fail_errno:
	snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
out:
	if (f)
		fclose(f);
	free(buf);
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

enum policy_on_error config_on_error(const struct config *c, const struct policy *p)
{
	if (p && p->on_store_error != POLICY_ON_ERROR_INHERIT)
		return p->on_store_error;
	return c->on_store_error;
}
