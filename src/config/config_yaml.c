/* config_yaml.c - the YAML engine under config.c: events, key tables, setters, collected errors. */
#include "config_yaml.h"

#include "edits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decimal.h"
#include "policy.h"
#include "yenum.h"

/* Room kept in parser.out for the "... and N more errors" line. */
#define ERRORS_MORE_ROOM 48

/*
 * Records one error and returns -1. Callers carry on where they can (the
 * next key, the next list entry, the next policy), so one run reports every
 * independent mistake; checks that depend on a value that failed are skipped
 * so that no error is only a consequence of another.
 */
int yp_fail(struct yparser *P, yaml_mark_t m, const char *fmt, ...)
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
	/* a value quoted from the file may hold a tab or a control byte: one
	 * line per error, printable, whatever the file holds */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = '?';
	if (P->shown < YP_ERRORS_SHOWN && P->outlen + 1 + len + ERRORS_MORE_ROOM < sizeof(P->out)) {
		if (P->outlen)
			P->out[P->outlen++] = '\n';
		memcpy(P->out + P->outlen, line, len + 1);
		P->outlen += len;
		P->shown++;
	}
	return -1;
}

/* An error after which nothing more can be read. */
int yp_fail_fatal(struct yparser *P, yaml_mark_t m, const char *what)
{
	P->fatal = 1;
	return yp_fail(P, m, "%s", what);
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
static yaml_mark_t offset_mark(const struct yparser *P, size_t offset)
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
static size_t line_offset(const struct yparser *P, size_t line)
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
static yaml_mark_t continuation_mark(const struct yparser *P, size_t line, size_t end_line)
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
static int fail_continued(struct yparser *P, const char *key, size_t line, size_t end_line,
			  int flow, const char *text)
{
	yaml_mark_t m = continuation_mark(P, line, end_line);
	P->hinted = 1;
	P->hint_line = m.line;
	return yp_fail(P, m, "%s%sthis line continues the value on line %zu%s%s%s; %s", key,
		       key[0] ? ": " : "", line + 1, text ? " (\"" : "", text ? text : "",
		       text ? "\")" : "",
		       flow ? "is a ',' or a closing bracket missing before it?"
			    : "is it indented too far?");
}

/* The byte at mark m (its column counts characters, not bytes), or -1. */
static int char_at(const struct yparser *P, yaml_mark_t m)
{
	size_t i = line_offset(P, m.line);
	for (size_t col = 0; i < P->len; i++) {
		if (((unsigned char)P->buf[i] & 0xc0) == 0x80)
			continue; /* a continuation byte of the character before */
		if (col++ == m.column)
			return (unsigned char)P->buf[i];
	}
	return -1;
}

static int yaml_fail(struct yparser *P)
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
	/* libyaml says "found character that cannot start any token" of a
	 * tab, without naming it: an editor's tab is the usual cause */
	const char *hint = "";
	if (y->error == YAML_SCANNER_ERROR && char_at(P, m) == '\t' && !strstr(problem, "tab"))
		hint = " (a tab: YAML forbids tabs for indentation; indent with spaces)";
	if (y->context)
		return yp_fail(P, m, "YAML syntax error: %s, %s%s", y->context, problem, hint);
	return yp_fail(P, m, "YAML syntax error: %s%s", problem, hint);
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
int yp_next(struct yparser *P)
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
		return yp_fail_fatal(P, P->ev.start_mark, "YAML aliases are not supported");
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
		return yp_fail_fatal(P, P->ev.start_mark, "YAML anchors are not supported");
	return 0;
}

/* After an error in a value: reads past the rest of it, up to the event that
 * closes the collection at `depth` (the one the value belongs to). */
int yp_skip_to(struct yparser *P, int depth)
{
	while (P->depth > depth)
		if (yp_next(P) < 0)
			return -1;
	return 0;
}

/* yp_fail() with the dotted key path in front: "redis.timeout: ...". */
int yp_failk(struct yparser *P, yaml_mark_t m, const char *key, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return yp_fail(P, m, "%s%s: %s", P->section, key, msg);
}

int yp_fail_section(struct yparser *P, yaml_mark_t m, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t n = strlen(P->section);
	return yp_fail(P, m, "%.*s: %s", (int)(n ? n - 1 : 0), P->section, msg);
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
int yp_scalar_text(struct yparser *P, const char *key, const char *what, const char **s,
		   size_t *len)
{
	if (P->ev.type != YAML_SCALAR_EVENT || is_null(&P->ev))
		return yp_failk(P, P->ev.start_mark, key, "expected %s", what);
	*s = (const char *)P->ev.data.scalar.value;
	*len = P->ev.data.scalar.length;
	if (memchr(*s, '\0', *len))
		return yp_failk(P, P->ev.start_mark, key, "must not contain a NUL byte");
	return 0;
}

/* yp_scalar_text() on one line: every value but a free-form string is a single
 * token, so a plain scalar over two lines means the second is misplaced. */
int yp_scalar(struct yparser *P, const char *key, const char *what, const char **s, size_t *len)
{
	if (yp_scalar_text(P, key, what, s, len) < 0)
		return -1;
	if (is_multiline(&P->ev)) {
		char path[YP_SECTION_MAX + 64], text[48];
		snprintf(path, sizeof(path), "%s%s", P->section, key);
		return fail_continued(P, path, P->ev.start_mark.line, P->ev.end_mark.line,
				      P->flow > 0, show(*s, *len, text, sizeof(text)));
	}
	return 0;
}

/* Canonical decimal only: no sign, no leading zeros (YAML 1.1 reads 010 as
 * octal, so accepting it would be ambiguous), no junk, within [min, max]. */
int yp_parse_dec(const char *s, size_t len, int64_t min, int64_t max, int64_t *out)
{
	int64_t v;
	/* leading zeros are refused in the file (the protocols allow them) */
	if ((len > 1 && s[0] == '0') || decimal_parse(s, len, INT64_MAX, &v) < 0 || v < min ||
	    v > max)
		return -1;
	*out = v;
	return 0;
}

int yp_dup_string(struct yparser *P, char **dst, const char *s, size_t len)
{
	char *copy = strndup(s, len);
	if (!copy)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	free(*dst);
	*dst = copy;
	return 0;
}

static int get_int64(struct yparser *P, const struct ykey *k, int64_t *out)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "an integer", &s, &len) < 0)
		return -1;
	if (yp_parse_dec(s, len, k->min, k->max, out) < 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be an integer from %lld to %lld", (long long)k->min,
				(long long)k->max);
	return 0;
}

int yp_set_int(struct yparser *P, const struct ykey *k, void *dst)
{
	int64_t v;
	if (get_int64(P, k, &v) < 0)
		return -1;
	*(int *)dst = (int)v;
	return 0;
}

int yp_set_int64(struct yparser *P, const struct ykey *k, void *dst)
{
	return get_int64(P, k, (int64_t *)dst);
}

int yp_set_size(struct yparser *P, const struct ykey *k, void *dst)
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

int yp_set_duration(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	char why[POLICY_ERR_MAX];
	size_t len;
	int64_t ms;
	if (yp_scalar(P, k->name, "a duration such as 50ms", &s, &len) < 0)
		return -1;
	if (policy_parse_duration(s, len, &ms, why, sizeof(why)) < 0)
		return yp_failk(P, P->ev.start_mark, k->name, "%s", why);
	if (ms < k->min || ms > k->max) {
		char lo[32], hi[32];
		fmt_ms(k->min, lo, sizeof(lo));
		fmt_ms(k->max, hi, sizeof(hi));
		return yp_failk(P, P->ev.start_mark, k->name, "must be from %s to %s", lo, hi);
	}
	*(int64_t *)dst = ms;
	return 0;
}

int yp_set_string(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar_text(P, k->name, "a string", &s, &len) < 0)
		return -1;
	if (len == 0)
		return yp_failk(P, P->ev.start_mark, k->name, "must not be empty");
	return yp_dup_string(P, (char **)dst, s, len);
}


int yp_grow(void **arr, size_t *cap, size_t n, size_t size)
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

int yp_set_bool(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "true or false", &s, &len) < 0)
		return -1;
	if (len == 4 && memcmp(s, "true", 4) == 0)
		*(int *)dst = 1;
	else if (len == 5 && memcmp(s, "false", 5) == 0)
		*(int *)dst = 0;
	else
		return yp_failk(P, P->ev.start_mark, k->name, "must be true or false");
	return 0;
}

/* Room for a table's names in a message, glosses included. */
#define YP_NAMES_MAX 256

int yp_set_enum(struct yparser *P, const struct ykey *k, void *dst)
{
	char names[YP_NAMES_MAX];
	const char *s;
	size_t len;
	int v;
	if (yp_scalar(P, k->name, yenum_list(k->names, 0, names, sizeof(names)), &s, &len) < 0)
		return -1;
	if (yenum_parse(k->names, s, len, &v) < 0)
		return yp_failk(P, P->ev.start_mark, k->name, "must be %s",
				yenum_list(k->names, 1, names, sizeof(names)));
	*(int *)dst = v;
	return 0;
}

/* How far a typo may be from the key it suggests. */
#define YP_SUGGEST_MAX 2

/* The key valid here that s[0..len) is a typo of ("limts": "limits"), or
 * NULL: the nearest within YP_SUGGEST_MAX edits (1 for keys of up to 4
 * bytes, where 2 would reach unrelated ones), the first listed on a tie. */
static const char *suggest(const char *s, size_t len, const struct ykey *keys, size_t nkeys)
{
	const char *best = NULL;
	size_t best_d = YP_SUGGEST_MAX + 1;
	for (size_t i = 0; i < nkeys; i++) {
		size_t d = edits_between(s, len, keys[i].name, YP_SUGGEST_MAX);
		size_t most = strlen(keys[i].name) <= 4 ? 1 : YP_SUGGEST_MAX;
		if (d <= most && d < best_d) {
			best = keys[i].name;
			best_d = d;
		}
	}
	return best;
}

/* The key at the current event: its index in keys, or -1 when it is not a
 * string, unknown or repeated. */
static int map_key(struct yparser *P, const struct ykey *keys, size_t nkeys, unsigned *seen,
		   yaml_mark_t *marks, size_t *index)
{
	yaml_mark_t km = P->ev.start_mark;
	if (P->ev.type != YAML_SCALAR_EVENT)
		return yp_fail(P, km, "a key must be a plain string");
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
		if (keep < len)
			return yp_fail(P, km,
				       "unknown key \"%s%s...\" (a space is needed after ':')",
				       P->section, show(s, keep, shown, sizeof(shown)));
		const char *near = suggest(s, len, keys, nkeys);
		return yp_fail(P, km, "unknown key \"%s%s\"%s%s%s%s", P->section,
			       show(s, keep, shown, sizeof(shown)), near ? " (did you mean \"" : "",
			       near ? P->section : "", near ? near : "", near ? "\"?)" : "");
	}
	if (*seen & (1u << i))
		return yp_fail(P, km, "duplicate key \"%s%s\"", P->section, keys[i].name);
	*seen |= 1u << i;
	marks[i] = km;
	*index = i;
	return 0;
}

/* Appends "name." to the section; the caller of the setter that pushed it
 * (yp_map, yp_seq, yp_dict) restores the section when the setter returns. */
static void push_section(struct yparser *P, const char *name)
{
	size_t n = strlen(P->section);
	snprintf(P->section + n, sizeof(P->section) - n, "%s.", name);
}

int yp_map(struct yparser *P, const char *name, const struct ykey *keys, size_t nkeys, void *base,
	   unsigned *seen, yaml_mark_t *marks)
{
	unsigned nerr = P->nerr;
	int depth = P->depth;
	if (name)
		push_section(P, name);
	size_t section = strlen(P->section);
	*seen = 0;
	for (;;) {
		if (yp_next(P) < 0)
			return -1;
		if (P->ev.type == YAML_MAPPING_END_EVENT)
			return P->nerr == nerr ? 0 : -1;
		size_t i = 0;
		if (map_key(P, keys, nkeys, seen, marks, &i) < 0) {
			/* skip the key (if it is a collection) and its value */
			if (yp_skip_to(P, depth) < 0 || yp_next(P) < 0 || yp_skip_to(P, depth) < 0)
				return -1;
			continue;
		}
		if (yp_next(P) < 0)
			return -1;
		int rc = keys[i].set(P, &keys[i], (char *)base + keys[i].offset);
		P->section[section] = '\0'; /* a nested mapping extended it */
		if (rc < 0 && yp_skip_to(P, depth) < 0)
			return -1;
	}
}

int yp_section(struct yparser *P, const struct ykey *k, const char *expected,
	       const struct ykey *keys, size_t nkeys, void *dst, unsigned *seen, yaml_mark_t *marks,
	       yaml_mark_t *start)
{
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "%s", expected);
	*start = P->ev.start_mark;
	return yp_map(P, k->name, keys, nkeys, dst, seen, marks);
}

int yp_seq(struct yparser *P, const struct ykey *k, const char *noun,
	   int (*item)(struct yparser *P, const struct ykey *k, void *dst, size_t i), void *dst,
	   size_t *n)
{
	unsigned nerr = P->nerr;
	int depth = P->depth;
	size_t section = strlen(P->section);
	*n = 0;
	for (;;) {
		if (yp_next(P) < 0)
			return -1;
		if (P->ev.type == YAML_SEQUENCE_END_EVENT)
			return P->nerr == nerr ? 0 : -1;
		if (k->max > 0 && *n == (size_t)k->max) {
			/* once: the rest of the list is skipped */
			yp_failk(P, P->ev.start_mark, k->name, "too many %s (at most %lld)", noun,
				 (long long)k->max);
			yp_skip_to(P, depth - 1);
			return -1;
		}
		int rc = item(P, k, dst, (*n)++);
		P->section[section] = '\0';
		if (rc < 0 && yp_skip_to(P, depth) < 0)
			return -1;
	}
}

int yp_dict(struct yparser *P, const struct ykey *k, const char *noun,
	    int (*entry)(struct yparser *P, const struct ykey *k, void *dst), void *dst, size_t *n)
{
	unsigned nerr = P->nerr;
	int depth = P->depth;
	push_section(P, k->name);
	size_t section = strlen(P->section);
	*n = 0;
	for (;;) {
		if (yp_next(P) < 0)
			return -1;
		if (P->ev.type == YAML_MAPPING_END_EVENT)
			return P->nerr == nerr ? 0 : -1;
		if (k->max > 0 && *n == (size_t)k->max) {
			yp_fail_section(P, P->ev.start_mark, "too many %s (at most %lld)", noun,
					(long long)k->max);
			yp_skip_to(P, depth - 1);
			return -1;
		}
		int rc = entry(P, k, dst);
		if (rc == YP_BAD_KEY) {
			if (yp_skip_to(P, depth) < 0 || yp_next(P) < 0 || yp_skip_to(P, depth) < 0)
				return -1;
			continue;
		}
		(*n)++;
		P->section[section] = '\0';
		if (rc < 0 && yp_skip_to(P, depth) < 0)
			return -1;
	}
}

int yp_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen)
{
	char *b = NULL;
	size_t n = 0, cap = 0;
	/* O_NONBLOCK: opening a FIFO would wait for a writer */
	FILE *f = NULL;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		goto fail_errno;
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a FIFO or a device would block the loop or never end */
		close(fd);
		snprintf(err, errlen, "%s: cannot read: not a regular file", path);
		goto fail;
	}
	f = fdopen(fd, "rb");
	if (!f) {
		close(fd);
		goto fail_errno;
	}
	for (;;) {
		if (n == cap) {
			/* The buffer stops one byte past the limit: filling it means too large. */
			if (cap > max) {
				snprintf(err, errlen, "%s: cannot read: larger than %zu bytes",
					 path, max);
				goto fail;
			}
			size_t ncap = cap ? cap * 2 : 4096;
			if (ncap > max)
				ncap = max + 1;
			char *p = realloc(b, ncap);
			if (!p)
				goto fail_errno;
			b = p;
			cap = ncap;
		}
		size_t got = fread(b + n, 1, cap - n, f);
		n += got;
		if (got == 0) {
			if (ferror(f))
				goto fail_errno;
			break;
		}
	}
	fclose(f);
	*buf = b;
	*len = n;
	return 0;
fail_errno:
	snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
fail:
	if (f)
		fclose(f);
	free(b);
	return -1;
}

int yp_begin(struct yparser *P, const char *name, const char *buf, size_t len)
{
	memset(P, 0, sizeof(*P));
	P->name = name ? name : "<config>";
	P->buf = buf ? buf : "";
	P->len = buf ? len : 0;
	if (!yaml_parser_initialize(&P->yaml)) {
		yaml_mark_t none = {0, 0, 0};
		return yp_fail_fatal(P, none, "out of memory");
	}
	P->ready = 1;
	yaml_parser_set_input_string(&P->yaml, (const unsigned char *)P->buf, P->len);
	return 0;
}

int yp_end(struct yparser *P, char *err, size_t errlen)
{
	if (P->have_ev)
		yaml_event_delete(&P->ev);
	P->have_ev = 0;
	if (P->ready)
		yaml_parser_delete(&P->yaml);
	P->ready = 0;
	if (!P->nerr)
		return 0;
	if (P->nerr > P->shown)
		snprintf(P->out + P->outlen, sizeof(P->out) - P->outlen,
			 "\n... and %u more error%s", P->nerr - P->shown,
			 P->nerr - P->shown == 1 ? "" : "s");
	if (err && errlen)
		snprintf(err, errlen, "%s", P->out);
	return -1;
}

int yp_open_document(struct yparser *P, yaml_mark_t *root)
{
	if (yp_next(P) < 0) /* STREAM_START */
		return -1;
	if (yp_next(P) < 0)
		return -1;
	if (P->ev.type == YAML_STREAM_END_EVENT)
		return yp_fail(P, P->ev.start_mark, "the configuration is empty");
	if (yp_next(P) < 0) /* past DOCUMENT_START */
		return -1;
	*root = P->ev.start_mark;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_fail(P, *root, "the top level must be a mapping of keys");
	return 0;
}

int yp_close_document(struct yparser *P)
{
	if (yp_next(P) < 0) /* DOCUMENT_END */
		return -1;
	if (yp_next(P) < 0)
		return -1;
	if (P->ev.type != YAML_STREAM_END_EVENT)
		return yp_fail(P, P->ev.start_mark, "only one YAML document is allowed");
	return 0;
}

void yp_put_string(FILE *f, const struct ykey *k, const void *base)
{
	const char *s = *(char *const *)((const char *)base + k->offset);
	fputs(s ? s : "(none)", f);
}

void yp_put_chars(FILE *f, const struct ykey *k, const void *base)
{
	const char *s = (const char *)base + k->offset;
	fputs(s[0] ? s : "(none)", f);
}

void yp_put_int(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%d", *(const int *)((const char *)base + k->offset));
}

void yp_put_int64(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%lld", (long long)*(const int64_t *)((const char *)base + k->offset));
}

void yp_put_size(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%zu", *(const size_t *)((const char *)base + k->offset));
}

void yp_put_bool(FILE *f, const struct ykey *k, const void *base)
{
	fputs(*(const int *)((const char *)base + k->offset) ? "true" : "false", f);
}

void yp_put_enum(FILE *f, const struct ykey *k, const void *base)
{
	const char *name = yenum_name(k->names, *(const int *)((const char *)base + k->offset));
	fputs(name ? name : "?", f);
}

/* As a file would write it (0 is how idle_timeout says "no limit"). */
void yp_put_duration(FILE *f, const struct ykey *k, const void *base)
{
	char buf[32];
	fmt_ms(*(const int64_t *)((const char *)base + k->offset), buf, sizeof(buf));
	fputs(buf, f);
}
