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
/* the longest line: a time, a word, an action, a cost and a shown user */
#define DECLOG_LINE_MAX (20 + 3 + POLICY_NAME_MAX + 21 + SHOWN_USER_MAX(KEYS_USER_MAX) + 4)
_Static_assert(DECLOG_LINE_MAX < BUF_SIZE, "a line fits the buffer");
/* the header's longest: a file no longer than it holds no line yet */
#define HEADER_MAX 128
/* a failed write is logged at most this often */
#define WARN_EVERY_US 10000000ULL

unsigned long long declog_lines, declog_dropped;

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

/* path -> path.1 -> ... -> path.keep (the oldest goes), then a new path. */
static void rotate(void)
{
	close_log();
	size_t n = strlen(L.path) + 16;
	char *from = malloc(n), *to = malloc(n);
	if (from && to) {
		for (int i = L.keep; i >= 1; i--) {
			snprintf(to, n, "%s.%d", L.path, i);
			if (i == 1)
				snprintf(from, n, "%s", L.path);
			else
				snprintf(from, n, "%s.%d", L.path, i - 1);
			rename(from, to);
		}
		if (L.keep == 0)
			unlink(L.path);
	}
	free(from);
	free(to);
	open_log();
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

void declog_flush(void)
{
	if (!L.len)
		return;
	if (L.fd < 0 && L.path)
		open_log(); /* a file that could not be opened may be now */
	if (L.fd < 0) {
		L.len = 0;
		return; /* its lines were counted dropped when they came */
	}
	size_t off = 0;
	while (L.fd >= 0 && off < L.len) {
		size_t n = fitting(off);
		if (n == 0) {
			rotate();
			continue;
		}
		ssize_t w = write(L.fd, L.buf + off, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* the rest is lost: count its lines */
			for (size_t i = off; i < L.len; i++)
				if (L.buf[i] == '\n') {
					declog_dropped++;
					declog_lines--;
				}
			warn("write failed");
			break;
		}
		off += (size_t)w;
		L.size += (size_t)w;
	}
	if (L.fd < 0) /* a rotation could not open the new file: the rest is lost */
		for (size_t i = off; i < L.len; i++)
			if (L.buf[i] == '\n') {
				declog_dropped++;
				declog_lines--;
			}
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
	}
	if (!L.path)
		return;
	L.sample = c->sample;
	L.threshold = c->sample >= 1 ? UINT64_MAX : (uint64_t)(c->sample * 18446744073709551616.0);
	L.max_size = c->max_size;
	L.keep = c->keep;
	L.hashed = c->hashed;
	memcpy(L.key, c->hash_key, sizeof(L.key));
	if (L.fd < 0)
		open_log();
}

int declog_on(void)
{
	return L.path != NULL;
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
	size_t n = decimal_put(p, now_ms);
	p[n++] = ' ';
	p[n++] = allowed ? 'A' : 'D';
	p[n++] = ' ';
	memcpy(p + n, action, alen);
	n += alen;
	p[n++] = ' ';
	n += decimal_put(p + n, (uint64_t)(cost > 0 ? cost : 1));
	p[n++] = ' ';
	if (L.hashed) {
		static const char hex[] = "0123456789abcdef";
		uint64_t h = siphash24(L.key, user, ulen);
		p[n++] = '#';
		for (int i = 15; i >= 0; i--)
			p[n++] = hex[(h >> (4 * i)) & 15];
	} else {
		n += shown_user(p + n, user, ulen < KEYS_USER_MAX ? ulen : KEYS_USER_MAX, 0);
	}
	p[n++] = '\n';
	L.len += n;
	declog_lines++;
}

void declog_close(void)
{
	declog_flush();
	close_log();
	free(L.path);
	L.path = NULL;
}
