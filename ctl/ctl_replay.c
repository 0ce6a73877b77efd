/*
 * ctl_replay.c - `ratelimitctl replay` (ctl_replay.h): each logged ALLOW
 * decided again by the memory store under the candidate configuration, its
 * clock set to the time the line says, then counted against what the log
 * says was answered.
 */
#include "ctl_replay.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "ctl_util.h"
#include "declog.h"
#include "shown.h"
#include "keys.h"
#include "override.h"
#include "policy.h"
#include "store.h"
#include "store_memory.h"

/* The users a report names per action and change. */
#define TOP_USERS 5
#define LINE_CAP 4096

/* user -> count, open addressing (a replay's users changed, not all). */
struct umap {
	char **user;
	size_t *len;
	uint64_t *count;
	size_t cap, n;
};

struct action {
	const struct policy *p;
	uint64_t n, log_allowed, log_denied, allowed, denied, newly_denied, newly_allowed;
	struct umap to_denied, to_allowed;
};

struct replay {
	struct ctl_ctx *x;
	const struct config *cfg;
	struct store *store;
	int64_t now_us;
	struct action *acts;
	size_t nacts, capacts;
	uint64_t decisions, no_policy, concurrency, malformed, backwards;
	long first_malformed; /* its line number (of the file it is in); 0: none */
	const char *malformed_file;
	int64_t first_ms, last_ms;
	char sample[32], users[16];
	struct store_result res;
	int answered;
};

static uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

static int umap_add(struct umap *m, const char *user, size_t len)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		struct umap nm = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(size_t)),
				  calloc(cap, sizeof(uint64_t)), cap, 0};
		if (!nm.user || !nm.len || !nm.count) {
			free(nm.user);
			free(nm.len);
			free(nm.count);
			return -1;
		}
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->user[i])
				continue;
			size_t j = fnv(m->user[i], m->len[i]) & (cap - 1);
			while (nm.user[j])
				j = (j + 1) & (cap - 1);
			nm.user[j] = m->user[i];
			nm.len[j] = m->len[i];
			nm.count[j] = m->count[i];
			nm.n++;
		}
		free(m->user);
		free(m->len);
		free(m->count);
		*m = nm;
	}
	size_t j = fnv(user, len) & (m->cap - 1);
	while (m->user[j] && !(m->len[j] == len && memcmp(m->user[j], user, len) == 0))
		j = (j + 1) & (m->cap - 1);
	if (!m->user[j]) {
		if (!(m->user[j] = malloc(len + 1)))
			return -1;
		memcpy(m->user[j], user, len);
		m->user[j][len] = '\0';
		m->len[j] = len;
		m->n++;
	}
	m->count[j]++;
	return 0;
}

static void umap_free(struct umap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->user[i]);
	free(m->user);
	free(m->len);
	free(m->count);
}

struct ranked {
	const char *user;
	size_t len;
	uint64_t count;
};

static int by_count(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->user, y->user, n);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The map's TOP_USERS largest, most first (ties by name), into r; how many. */
static size_t umap_top(const struct umap *m, struct ranked *r)
{
	size_t k = 0;
	struct ranked *all = m->n ? malloc(m->n * sizeof(*all)) : NULL;
	if (!all)
		return 0;
	for (size_t i = 0; i < m->cap; i++)
		if (m->user[i])
			all[k++] = (struct ranked){m->user[i], m->len[i], m->count[i]};
	qsort(all, k, sizeof(*all), by_count);
	if (k > TOP_USERS)
		k = TOP_USERS;
	memcpy(r, all, k * sizeof(*r));
	free(all);
	return k;
}

static struct action *action_of(struct replay *rp, const struct policy *p)
{
	for (size_t i = 0; i < rp->nacts; i++)
		if (rp->acts[i].p == p)
			return &rp->acts[i];
	if (rp->nacts == rp->capacts) {
		size_t cap = rp->capacts ? 2 * rp->capacts : 16;
		struct action *a = realloc(rp->acts, cap * sizeof(*a));
		if (!a)
			return NULL;
		rp->acts = a;
		rp->capacts = cap;
	}
	struct action *a = &rp->acts[rp->nacts++];
	memset(a, 0, sizeof(*a));
	a->p = p;
	return a;
}

static int64_t replay_clock(void *arg)
{
	return ((struct replay *)arg)->now_us;
}

static void replay_done(void *arg, const struct store_result *res)
{
	struct replay *rp = arg;
	rp->res = *res;
	rp->answered = 1;
}

/* One line of a log; 0, -1 when it is not one, -2 out of memory. */
static int replay_line(struct replay *rp, const char *line, size_t len)
{
	struct declog_line d;
	int r = declog_parse(line, len, &d);
	if (r != 0)
		return r > 0 ? 0 : -1;
	int64_t ms = d.ms;
	int was_allowed = d.allowed;
	rp->decisions++;
	if (!rp->first_ms)
		rp->first_ms = ms;
	/* files out of order (a glob puts the newest first), or several
	 * daemons' logs not merged: the windows would be decided wrong */
	if (ms + 1000 < rp->last_ms && !rp->backwards++)
		fprintf(stderr,
			"ratelimitctl: replay: time goes back %lld ms in the log (give the rotated "
			"files oldest first; merge several daemons' logs with sort -n -m)\n",
			(long long)(rp->last_ms - ms));
	if (ms > rp->last_ms)
		rp->last_ms = ms;
	const struct policy *p = config_find_policy(rp->cfg, d.action, d.action_len);
	if (!p) {
		rp->no_policy++;
		return 0;
	}
	if (p->algo == POLICY_CONCURRENCY) {
		rp->concurrency++;
		return 0;
	}
	struct action *a = action_of(rp, p);
	if (!a)
		return -2;
	int allowed;
	const struct override *o =
		p->overrides && !d.hashed ? override_find(p->overrides, d.user, d.user_len) : NULL;
	if (o && o->kind != OVERRIDE_LIMITS) {
		allowed = o->kind == OVERRIDE_UNLIMITED;
	} else {
		struct store_request req = {
			.op = STORE_ALLOW,
			.policy = o ? o->policy : p,
			.prefix = "rl:",
			.prefix_len = 3,
			.user = d.user,
			.user_len = d.user_len,
			.cost = d.cost,
			.timeout_ms = 1000,
		};
		rp->now_us = ms * 1000;
		rp->answered = 0;
		rp->store->ops->submit(rp->store, &req, replay_done, rp); /* answers at once */
		if (!rp->answered || rp->res.status != STORE_OK)
			return -2;
		allowed = rp->res.allowed;
	}
	a->n++;
	if (was_allowed)
		a->log_allowed++;
	else
		a->log_denied++;
	if (allowed)
		a->allowed++;
	else
		a->denied++;
	if (was_allowed && !allowed) {
		a->newly_denied++;
		if (umap_add(&a->to_denied, d.user, d.user_len) < 0)
			return -2;
	} else if (!was_allowed && allowed) {
		a->newly_allowed++;
		if (umap_add(&a->to_allowed, d.user, d.user_len) < 0)
			return -2;
	}
	return 0;
}

/* The header's sample and users, from the first file that has one. */
static void header(struct replay *rp, const char *line)
{
	const char *s = strstr(line, "sample="), *u = strstr(line, "users=");
	if (s && !rp->sample[0])
		sscanf(s + 7, "%31[0-9.e-]", rp->sample);
	if (u && !rp->users[0])
		sscanf(u + 6, "%15[a-z]", rp->users);
}

static int replay_file(struct replay *rp, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return ctl_failed(rp->x, "file", "%s: %s", path, strerror(errno));
	char line[LINE_CAP];
	long no = 0;
	int rc = 0;
	while (fgets(line, sizeof(line), f)) {
		no++;
		size_t len = strlen(line);
		int whole = len && line[len - 1] == '\n';
		if (whole)
			line[--len] = '\0';
		if (!whole && !feof(f)) { /* longer than any line the daemon writes */
			int c;
			while ((c = fgetc(f)) != EOF && c != '\n')
				;
		}
		if (line[0] == '#') {
			header(rp, line);
			continue;
		}
		int r = whole || feof(f) ? replay_line(rp, line, len) : -1;
		if (r == -2) {
			rc = ctl_failed(rp->x, "replay", "out of memory at %s:%ld", path, no);
			break;
		}
		if (r < 0) {
			if (!rp->malformed++) {
				rp->first_malformed = no;
				rp->malformed_file = path;
			}
		}
	}
	fclose(f);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	const struct action *x = a, *y = b;
	return strcmp(x->p->name, y->p->name);
}

static void when(int64_t ms, char *buf, size_t cap)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void json_top(const struct umap *m)
{
	struct ranked r[TOP_USERS];
	size_t k = umap_top(m, r);
	printf("[");
	for (size_t i = 0; i < k; i++) {
		char shown[SHOWN_USER_MAX(KEYS_USER_MAX + 20)];
		size_t sl = shown_user(shown, r[i].user, r[i].len, 0);
		printf("%s{\"user\":", i ? "," : "");
		ctl_json_str(shown, sl); /* as TOP shows it: printable ASCII */
		printf(",\"count\":%llu}", (unsigned long long)r[i].count);
	}
	printf("]");
}

static void text_top(const char *what, const struct umap *m)
{
	struct ranked r[TOP_USERS];
	size_t k = umap_top(m, r);
	if (!k)
		return;
	printf("  %s:", what);
	for (size_t i = 0; i < k; i++) {
		char shown[SHOWN_USER_MAX(KEYS_USER_MAX + 20)];
		size_t sl = shown_user(shown, r[i].user, r[i].len, 0);
		printf("%s %.*s %llu", i ? "," : "", (int)sl, shown,
		       (unsigned long long)r[i].count);
	}
	printf("\n");
}

static void report(struct replay *rp, int nfiles, const char *candidate)
{
	qsort(rp->acts, rp->nacts, sizeof(*rp->acts), by_name);
	char from[32] = "-", to[32] = "-";
	if (rp->decisions) {
		when(rp->first_ms, from, sizeof(from));
		when(rp->last_ms, to, sizeof(to));
	}
	const char *sample = rp->sample[0] ? rp->sample : "?";
	const char *users = rp->users[0] ? rp->users : "?";
	if (rp->x->json) {
		printf("{\"command\":\"replay\",\"result\":\"ok\",\"config\":");
		ctl_json_cstr(candidate);
		printf(",\"files\":%d,\"sample\":\"%s\",\"users\":\"%s\",\"from\":\"%s\","
		       "\"to\":\"%s\",\"decisions\":%llu,\"skipped\":{\"no_policy\":%llu,"
		       "\"concurrency\":%llu,\"malformed\":%llu},\"time_backwards\":%llu,"
		       "\"actions\":[",
		       nfiles, sample, users, from, to, (unsigned long long)rp->decisions,
		       (unsigned long long)rp->no_policy, (unsigned long long)rp->concurrency,
		       (unsigned long long)rp->malformed, (unsigned long long)rp->backwards);
		for (size_t i = 0; i < rp->nacts; i++) {
			const struct action *a = &rp->acts[i];
			printf("%s{\"action\":\"%s\",\"decisions\":%llu,\"log_allowed\":%llu,"
			       "\"log_denied\":%llu,\"allowed\":%llu,\"denied\":%llu,"
			       "\"newly_denied\":%llu,\"newly_allowed\":%llu,\"top_newly_denied\":",
			       i ? "," : "", a->p->name, (unsigned long long)a->n,
			       (unsigned long long)a->log_allowed,
			       (unsigned long long)a->log_denied, (unsigned long long)a->allowed,
			       (unsigned long long)a->denied, (unsigned long long)a->newly_denied,
			       (unsigned long long)a->newly_allowed);
			json_top(&a->to_denied);
			printf(",\"top_newly_allowed\":");
			json_top(&a->to_allowed);
			printf("}");
		}
		printf("]}\n");
		return;
	}
	printf("replayed %llu decisions from %d file%s (sample=%s, users %s), %s to %s, "
	       "against %s\n",
	       (unsigned long long)rp->decisions, nfiles, nfiles == 1 ? "" : "s", sample, users,
	       from, to, candidate);
	printf("%-20s %10s %12s %11s %10s %10s %13s %14s\n", "action", "decisions", "log allowed",
	       "log denied", "allowed", "denied", "newly denied", "newly allowed");
	for (size_t i = 0; i < rp->nacts; i++) {
		const struct action *a = &rp->acts[i];
		printf("%-20s %10llu %12llu %11llu %10llu %10llu %13llu %14llu\n", a->p->name,
		       (unsigned long long)a->n, (unsigned long long)a->log_allowed,
		       (unsigned long long)a->log_denied, (unsigned long long)a->allowed,
		       (unsigned long long)a->denied, (unsigned long long)a->newly_denied,
		       (unsigned long long)a->newly_allowed);
		text_top("newly denied", &a->to_denied);
		text_top("newly allowed", &a->to_allowed);
	}
	if (rp->no_policy || rp->concurrency || rp->malformed)
		printf("skipped: %llu with no policy in %s, %llu of concurrency policies, %llu "
		       "malformed lines\n",
		       (unsigned long long)rp->no_policy, candidate,
		       (unsigned long long)rp->concurrency, (unsigned long long)rp->malformed);
}

int ctl_replay(struct ctl_ctx *x, char **args, int nargs)
{
	if (nargs < 2)
		return ctl_fail(x, "usage", "usage: replay LOG [LOG...] CANDIDATE.yaml");
	const char *candidate = args[nargs - 1];
	struct config *cfg = ctl_load_config(x, candidate);
	if (!cfg)
		return CTL_EXIT_ERROR;
	struct replay rp = {.x = x, .cfg = cfg};
	int rc = CTL_EXIT_ERROR;
	char err[256];
	/* every key the log names stays: a replay never evicts */
	struct config_memory mc = {1000000000};
	struct event_base *base = event_base_new();
	rp.store = base ? store_memory_new(base, &mc, err, sizeof(err)) : NULL;
	if (!rp.store) {
		ctl_error(x, "replay", -1, "cannot start the memory store: %s", err);
		goto out;
	}
	store_memory_set_clock(rp.store, replay_clock, &rp);
	for (int i = 0; i < nargs - 1; i++)
		if (replay_file(&rp, args[i]) < 0)
			goto out;
	if (rp.malformed && !x->json)
		fprintf(stderr, "ratelimitctl: %llu malformed lines, the first at %s:%ld\n",
			(unsigned long long)rp.malformed, rp.malformed_file, rp.first_malformed);
	report(&rp, nargs - 1, candidate);
	rc = CTL_EXIT_OK;
out:
	for (size_t i = 0; i < rp.nacts; i++) {
		umap_free(&rp.acts[i].to_denied);
		umap_free(&rp.acts[i].to_allowed);
	}
	free(rp.acts);
	if (rp.store)
		rp.store->ops->free(rp.store);
	if (base)
		event_base_free(base);
	config_unref(cfg);
	return rc;
}
