/*
 * declog.c - the decision log (declog.h): a user's sampling by a hash of
 * its name, a line per decision into a buffer, the buffer written to an
 * append-only file, and the file rotated by size (path.1 ... path.keep).
 */
#include "declog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "decimal.h"
#include "keys.h"
#include "log.h"
#include "shown.h"
#include "siphash.h"

#define BUF_SIZE 65536
_Static_assert(DECLOG_LINE_MAX < BUF_SIZE, "a line fits the buffer");
/* the header's longest: a file no longer than it holds no line yet */
#define HEADER_MAX 128
/* a failed write is logged at most this often */
#define WARN_EVERY_US 10000000ULL

unsigned long long declog_lines, declog_dropped;
int declog_enabled;

static struct {
	char *path; /* NULL: off */
	double sample;
	uint64_t threshold; /* a user whose sampling hash is below it is logged */
	size_t max_size;
	int keep;
	int hashed;
	uint8_t key[16];
	int fd;
	size_t size; /* the file's bytes */
	char buf[BUF_SIZE];
	size_t len;
	uint64_t warned_us;
} L = {.fd = -1};

/* The sampling hash: a fixed key, so that every daemon and every restart
 * samples the same users. */
static const uint8_t sample_key[16] = "ratelimitd-smpl";

static void warn(const char *what)
{
	uint64_t now = clock_mono_us();
	if (L.warned_us && now - L.warned_us < WARN_EVERY_US)
		return;
	L.warned_us = now;
	log_warn("decision_log %s: %s: %s (its lines are dropped; %llu so far)", L.path, what,
		 strerror(errno), declog_dropped);
}

static void write_header(void)
{
	char h[HEADER_MAX];
	int n = snprintf(h, sizeof(h), "# ratelimitd decision log 1 sample=%g users=%s\n", L.sample,
			 L.hashed ? "hashed" : "clear");
	if (write(L.fd, h, (size_t)n) == n)
		L.size += (size_t)n;
}

static void open_log(void)
{
	L.fd = open(L.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (L.fd < 0) {
		warn("cannot open");
		return;
	}
	struct stat st;
	L.size = fstat(L.fd, &st) == 0 ? (size_t)st.st_size : 0;
	if (L.size == 0)
		write_header();
}

static void close_log(void)
{
	if (L.fd >= 0)
		close(L.fd);
	L.fd = -1;
}

/* path -> path.1 -> ... -> path.keep (the oldest goes), then a new path.
 * -1 when path could not be moved away (its directory not writable...):
 * the file stays open as it was. */
static int rotate(void)
{
	size_t n = strlen(L.path) + 16;
	char *from = malloc(n), *to = malloc(n);
	int rc = from && to ? 0 : -1;
	for (int i = L.keep; rc == 0 && i >= 2; i--) {
		snprintf(to, n, "%s.%d", L.path, i);
		snprintf(from, n, "%s.%d", L.path, i - 1);
		rename(from, to); /* a missing older file is no matter */
	}
	if (rc == 0 && L.keep >= 1) {
		snprintf(to, n, "%s.1", L.path);
		rc = rename(L.path, to);
	} else if (rc == 0) {
		rc = unlink(L.path);
	}
	free(from);
	free(to);
	if (rc < 0) {
		warn("cannot rotate");
		return -1;
	}
	close_log();
	open_log();
	return 0;
}

/* The bytes of buf[off..len) to write before the file must rotate: whole
 * lines that fit in what max_size leaves (at least one line, into an
 * empty file). */
static size_t fitting(size_t off)
{
	size_t room = L.size < L.max_size ? L.max_size - L.size : 0, end = off, i;
	for (i = off; i < L.len && i - off < room; i++)
		if (L.buf[i] == '\n')
			end = i + 1;
	if (end == off && L.size <= HEADER_MAX) { /* one line longer than the room */
		const char *nl = memchr(L.buf + off, '\n', L.len - off);
		end = nl ? (size_t)(nl - L.buf) + 1 : L.len;
	}
	return end - off;
}

/* The buffer's lines from off on, lost: counted dropped. */
static void lose(size_t off)
{
	for (size_t i = off; i < L.len; i++)
		if (L.buf[i] == '\n') {
			declog_dropped++;
			declog_lines--;
		}
}

void declog_flush(void)
{
	if (L.fd < 0 && L.path)
		open_log(); /* a file that could not be opened may be now (every second) */
	if (!L.len)
		return;
	if (L.fd < 0) {
		L.len = 0;
		return; /* its lines were counted dropped when they came */
	}
	size_t off = 0;
	while (L.fd >= 0 && off < L.len) {
		size_t n = fitting(off);
		if (n == 0) {
			/* a rotation gives an empty file, which takes a line at
			 * least; a file that cannot be moved away loses the rest
			 * (never a loop) */
			if (rotate() < 0 || L.fd < 0 || fitting(off) == 0) {
				lose(off);
				break;
			}
			continue;
		}
		ssize_t w = write(L.fd, L.buf + off, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			lose(off);
			warn("write failed");
			break;
		}
		off += (size_t)w;
		L.size += (size_t)w;
	}
	if (L.fd < 0) /* a rotation could not open the new file: the rest is lost */
		lose(off);
	L.len = 0;
}

void declog_configure(const struct config_declog *c)
{
	const char *path = c ? c->path : NULL;
	int same = path && L.path && strcmp(path, L.path) == 0;
	declog_flush();
	if (!same) {
		close_log();
		free(L.path);
		L.path = path ? strdup(path) : NULL;
		declog_enabled = L.path != NULL;
	}
	if (!L.path)
		return;
	/* a file's lines are of one sample and one way of naming users (its
	 * header says which): a change starts a new file */
	int other = same && L.fd >= 0 &&
		    (L.sample != c->sample || L.hashed != c->hashed ||
		     (c->hashed && memcmp(L.key, c->hash_key, sizeof(L.key)) != 0));
	L.sample = c->sample;
	L.threshold = c->sample >= 1 ? UINT64_MAX : (uint64_t)(c->sample * 18446744073709551616.0);
	L.max_size = c->max_size;
	L.keep = c->keep;
	L.hashed = c->hashed;
	memcpy(L.key, c->hash_key, sizeof(L.key));
	if (other && L.size > HEADER_MAX) {
		rotate();
	} else if (other) { /* nothing but the header yet: a new one */
		close_log();
		unlink(L.path);
	}
	if (L.fd < 0)
		open_log();
}

/* A line: the user written as it is (a hash) or shown (a name). */
static size_t format_line(char *p, uint64_t ms, int allowed, const char *action, size_t alen,
			  int64_t cost, const char *user, size_t ulen, int raw)
{
	size_t n = decimal_put(p, ms);
	p[n++] = ' ';
	p[n++] = allowed ? 'A' : 'D';
	p[n++] = ' ';
	memcpy(p + n, action, alen);
	n += alen;
	p[n++] = ' ';
	n += decimal_put(p + n, (uint64_t)(cost > 0 ? cost : 1));
	p[n++] = ' ';
	if (raw) {
		memcpy(p + n, user, ulen);
		n += ulen;
	} else if (ulen && user[0] == '#') {
		/* "#" starts a hash: a name that does is written %23... */
		memcpy(p + n, "%23", 3);
		n += 3 + shown_user(p + n + 3, user + 1, ulen - 1, 0);
	} else {
		n += shown_user(p + n, user, ulen, 0);
	}
	p[n++] = '\n';
	return n;
}

size_t declog_format(char *p, uint64_t ms, int allowed, const char *action, size_t alen,
		     int64_t cost, const char *user, size_t ulen)
{
	return format_line(p, ms, allowed, action, alen, cost, user,
			   ulen < KEYS_USER_MAX ? ulen : KEYS_USER_MAX, 0);
}

int declog_parse(const char *line, size_t len, struct declog_line *out)
{
	if (len && line[0] == '#')
		return 1;
	const char *f[5];
	size_t fl[5], n = 0, start = 0;
	for (size_t i = 0; i <= len && n < 5; i++)
		if (i == len || (line[i] == ' ' && n < 4)) {
			f[n] = line + start;
			fl[n++] = i - start;
			start = i + 1;
		}
	if (n != 5 || fl[1] != 1 || (f[1][0] != 'A' && f[1][0] != 'D') ||
	    !policy_name_valid(f[2], fl[2]) || fl[4] == 0 ||
	    decimal_parse(f[0], fl[0], INT64_MAX / 1000, &out->ms) < 0 ||
	    decimal_parse(f[3], fl[3], 2147483647, &out->cost) < 0 || out->cost < 1)
		return -1;
	out->allowed = f[1][0] == 'A';
	out->action = f[2];
	out->action_len = fl[2];
	out->hashed = f[4][0] == '#';
	if (out->hashed) {
		if (fl[4] != 17)
			return -1;
		for (size_t i = 1; i < 17; i++)
			if (decimal_hex_digit(f[4][i]) < 0)
				return -1;
		memcpy(out->user, f[4], 17);
		out->user_len = 17;
		return 0;
	}
	/* a shown user back to its bytes */
	long o = shown_parse(f[4], fl[4], out->user, KEYS_USER_MAX);
	if (o < 0)
		return -1;
	out->user_len = (size_t)o;
	return 0;
}

void declog_decision(uint64_t now_ms, const char *action, size_t alen, const char *user,
		     size_t ulen, int64_t cost, int allowed)
{
	if (!L.path)
		return;
	if (L.threshold != UINT64_MAX && siphash24(sample_key, user, ulen) >= L.threshold)
		return;
	if (L.fd < 0) {
		declog_dropped++;
		return;
	}
	if (L.len + DECLOG_LINE_MAX > BUF_SIZE)
		declog_flush();
	char *p = L.buf + L.len;
	size_t n;
	if (L.hashed) {
		static const char hex[] = "0123456789abcdef";
		char h[17];
		uint64_t v = siphash24(L.key, user, ulen);
		h[0] = '#';
		for (int i = 15; i >= 0; i--)
			h[16 - i] = hex[(v >> (4 * i)) & 15];
		n = format_line(p, now_ms, allowed, action, alen, cost, h, 17, 1);
	} else {
		n = format_line(p, now_ms, allowed, action, alen, cost, user,
				ulen < KEYS_USER_MAX ? ulen : KEYS_USER_MAX, 0);
	}
	L.len += n;
	declog_lines++;
}

void declog_close(void)
{
	declog_flush();
	close_log();
	free(L.path);
	L.path = NULL;
	declog_enabled = 0;
}
