/*
 * override_live.c - run-time overrides (see override_live.h).
 *
 * In the store (store_override.h; Redis: the hash <prefix>overrides, field
 * "<action>\n<user>", value "<until_ms> <spec>", until in Redis's clock, 0
 * for never). Each change is one store operation (the hash, then a notice
 * "!o<field>" on the RESET channel), so every daemon subscribed sees it and
 * reads that field again; a daemon reads the whole hash when its
 * subscription (re)starts or Redis may have restarted (store generation),
 * since notices may have been missed. Expired fields are dropped from the
 * hash by whoever loads it. A store that keeps none (the memory store)
 * answers a read so, and a change with the value to keep.
 *
 * Here: the fields in force, sorted by bytes, found by binary search.
 */
#include "override_live.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calendar.h"
#include "config.h"
#include "keys.h"
#include "list.h"
#include "log.h"
#include "policy.h"
#include "store.h"
#include "store_override.h"

/* How often the mirror checks whether it must read the hash again. */
#define TICK_MS 250
#define TICK_FIRST_MS 10
#define CALL_TIMEOUT_MS 5000
#define SPEC_MAX OVERRIDE_LIVE_SPEC_MAX

struct entry {
	struct override o; /* pattern: the field; policy: OVERRIDE_LIMITS's, owned */
	size_t alen;	   /* the action is pattern[0..alen) */
	int inert;	   /* no such action, or a spec its policy no longer takes */
	int64_t until_ms;  /* Redis's clock; 0: never */
	size_t spec_len;
	char spec[];
};

struct call;

struct override_live {
	struct event_base *base;
	struct store *store;
	struct config *cfg;
	struct entry **v; /* sorted by field */
	size_t n, cap;
	int64_t offset_ms; /* Redis's clock minus ours */
	struct event *tick;
	int loaded, loading, ever_loaded;
	int load_failed;      /* the last read failed: the next waits TICK_MS */
	unsigned epoch;	      /* bumped when the prefix (the hash) changes */
	int load_followed;    /* notices were followed when the hash was last read */
	char load_error[128]; /* why the last read failed, logged once */
	unsigned long loaded_gen;
	size_t hash_len, channel_len;
	char hash[KEYS_PREFIX_MAX + 16];
	char channel[KEYS_RESET_CHANNEL_MAX + 1];
	struct list calls; /* of struct call, in flight: cut loose when l is freed */
};

enum call_kind { CALL_LOAD, CALL_GET, CALL_PUT };

struct call {
	struct override_live *l; /* NULL once l is freed */
	unsigned epoch;		 /* l's when sent: a reply of an older one is about another hash */
	int plain;		 /* CALL_LOAD by a plain read, not a prune */
	struct list_link link;	 /* l->calls, while l is */
	enum call_kind kind;
	override_live_done_fn *done; /* CALL_PUT */
	void *arg;
};

static int64_t real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t redis_now_ms(const struct override_live *l)
{
	return real_ms() + l->offset_ms;
}

static int field_cmp(const struct entry *e, const char *a, size_t alen, const char *u, size_t ulen)
{
	/* the field is action '\n' user; compare without building it */
	size_t el = e->o.len, fl = alen + 1 + ulen;
	const char *p = e->o.pattern;
	size_t k = 0;
	for (; k < el && k < fl; k++) {
		unsigned char x = (unsigned char)p[k];
		unsigned char y = (unsigned char)(k < alen    ? a[k]
						  : k == alen ? '\n'
							      : u[k - alen - 1]);
		if (x != y)
			return x < y ? -1 : 1;
	}
	return el < fl ? -1 : el > fl;
}

/* Where (action, user) is or would go. */
static size_t find_at(const struct override_live *l, const char *a, size_t alen, const char *u,
		      size_t ulen, int *found)
{
	size_t lo = 0, hi = l->n;
	*found = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = field_cmp(l->v[mid], a, alen, u, ulen);
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void entry_free(struct entry *e)
{
	if (!e)
		return;
	free(e->o.policy);
	free((char *)e->o.pattern);
	free(e);
}

int override_live_spec(const struct policy *p, const char *spec, size_t len,
		       enum override_kind *kind, struct policy **policy, char *err, size_t errlen)
{
	if (override_spec_parse(p, spec, len, kind, policy, err, errlen) < 0)
		return -1;
	/* a zone of its own (timezone=): one tzdata has, as the file's are */
	if (*policy && strcmp((*policy)->timezone, p->timezone) != 0 &&
	    calendar_tz_check((*policy)->timezone, err, errlen) < 0) {
		free(*policy);
		*policy = NULL;
		return -1;
	}
	return 0;
}

/* Makes e's override for the policy of its action in cfg. */
static void entry_bind(struct entry *e, const struct config *cfg)
{
	free(e->o.policy);
	e->o.policy = NULL;
	e->inert = 1;
	const struct policy *p = cfg ? config_find_policy(cfg, e->o.pattern, e->alen) : NULL;
	if (!p)
		return;
	char err[200];
	if (override_live_spec(p, e->spec, e->spec_len, &e->o.kind, &e->o.policy, err,
			       sizeof(err)) < 0) {
		log_warn("override for %.*s: %s (spec %.*s); not applied", (int)e->alen,
			 e->o.pattern, err, (int)e->spec_len, e->spec);
		return;
	}
	e->inert = 0;
}

static void remove_at(struct override_live *l, size_t i)
{
	entry_free(l->v[i]);
	memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof(*l->v));
	l->n--;
}

/* Field and value as Redis has them; value NULL: the field is gone. */
static void apply(struct override_live *l, const char *field, size_t flen, const char *value,
		  size_t vlen)
{
	const char *nl = memchr(field, '\n', flen);
	if (!nl)
		return; /* not a field this file writes */
	size_t alen = (size_t)(nl - field);
	const char *user = nl + 1;
	size_t ulen = flen - alen - 1;
	/* anything in the hash is checked as a request would be: others
	 * than this file may write to Redis, and OVERRIDES shows both */
	if (!policy_name_valid(field, alen) || !override_live_user_valid(user, ulen))
		return;
	int found;
	size_t at = find_at(l, field, alen, user, ulen, &found);
	int64_t until = 0;
	const char *sp = value ? memchr(value, ' ', vlen) : NULL;
	if (sp) {
		for (const char *c = value; c < sp; c++) {
			if (*c < '0' || *c > '9' || until > INT64_MAX / 10 - 10) {
				sp = NULL;
				break;
			}
			until = until * 10 + (*c - '0');
		}
	}
	size_t spec_len = sp ? vlen - (size_t)(sp + 1 - value) : 0;
	if (!sp || spec_len == 0 || spec_len > SPEC_MAX || ulen == 0 || ulen > KEYS_USER_MAX ||
	    (until != 0 && until <= redis_now_ms(l))) {
		if (found)
			remove_at(l, at);
		return;
	}
	if (!found && l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct entry **v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			log_error("out of memory: a run-time override is not applied");
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	struct entry *e = calloc(1, sizeof(*e) + spec_len + 1);
	char *pattern = malloc(flen + 1);
	if (!e || !pattern) {
		free(e);
		free(pattern);
		log_error("out of memory: a run-time override is not applied");
		return;
	}
	memcpy(pattern, field, flen);
	pattern[flen] = '\0';
	e->o.pattern = pattern;
	e->o.len = flen;
	e->alen = alen;
	e->until_ms = until;
	e->spec_len = spec_len;
	memcpy(e->spec, sp + 1, spec_len);
	entry_bind(e, l->cfg);
	if (found) {
		entry_free(l->v[at]);
	} else {
		memmove(l->v + at + 1, l->v + at, (l->n - at) * sizeof(*l->v));
		l->n++;
	}
	l->v[at] = e;
}

/* ---- the store ---- */

static void call_done(void *arg, const struct store_override_result *res);

static struct call *call_new(struct override_live *l, enum call_kind kind)
{
	struct call *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->l = l;
	c->epoch = l->epoch;
	c->kind = kind;
	list_push(&l->calls, &c->link);
	return c;
}

static void run(struct override_live *l, struct call *c, struct store_override_request *req)
{
	req->hash = l->hash;
	req->hash_len = l->hash_len;
	req->timeout_ms = CALL_TIMEOUT_MS;
	store_override(l->store, req, call_done, c);
}

/* The store's clock, when its answer tells it. */
static void learn_clock(struct override_live *l, const struct store_override_result *res)
{
	if (res->now_ms > 0)
		l->offset_ms = res->now_ms - real_ms();
}

static void prune(struct override_live *l);

/* The whole hash, read (plain) or pruned. */
static void loaded(struct override_live *l, const struct store_override_result *res, int plain)
{
	learn_clock(l, res);
	for (size_t i = 0; i < l->n; i++)
		entry_free(l->v[i]);
	l->n = 0;
	for (size_t i = 0; i < res->n; i++)
		apply(l, res->fields[i].field, res->fields[i].field_len, res->fields[i].value,
		      res->fields[i].value_len);
	l->loaded = 1;
	l->ever_loaded = 1;
	log_debug("overrides: %zu run-time overrides read from redis", l->n);
	/* some were expired (or not ours): the script drops the expired ones */
	if (plain && l->n < res->n)
		prune(l);
}

static void load_done(struct override_live *l, const struct store_override_result *res, int plain)
{
	l->loading = 0;
	switch (res->status) {
	case STORE_OVERRIDE_OK:
		loaded(l, res, plain);
		l->load_error[0] = '\0';
		l->load_failed = 0;
		return;
	case STORE_OVERRIDE_KEPT: /* nothing to read: they live here only */
		l->loaded = l->ever_loaded = 1;
		return;
	case STORE_OVERRIDE_ODD:
		log_debug("overrides: unexpected reply reading %s", l->hash);
		break;
	case STORE_OVERRIDE_DOWN:
		/* Redis is down or going (not connected yet, at start): its own
		 * warning says so, and asking again costs it nothing */
		log_debug("overrides: cannot read %s: %s", l->hash, res->why);
		l->loaded = 0;
		return;
	case STORE_OVERRIDE_REFUSED:
		/* an error from Redis (an ACL...): once per cause */
		if (strncmp(l->load_error, res->why, sizeof(l->load_error) - 1) != 0) {
			log_warn("overrides: cannot read %s: %s (retrying)", l->hash, res->why);
			snprintf(l->load_error, sizeof(l->load_error), "%s", res->why);
		}
		break;
	}
	/* Redis answered, but not the hash: read it again (it may have
	 * changed meanwhile), not at once */
	l->loaded = 0;
	l->load_failed = 1;
}

static void call_done(void *arg, const struct store_override_result *res)
{
	struct call *c = arg;
	struct override_live *l = c->l;
	list_unlink(&c->link); /* (on none once l is freed) */
	if (l && c->epoch != l->epoch)
		l = NULL; /* the prefix changed since: not about the hash in use */
	const char *why =
		res->status == STORE_OVERRIDE_REFUSED || res->status == STORE_OVERRIDE_DOWN
			? res->why
			: NULL;
	switch (c->kind) {
	case CALL_LOAD:
		if (l)
			load_done(l, res, c->plain);
		break;
	case CALL_GET:
	case CALL_PUT:
		if (l && res->status == STORE_OVERRIDE_OK) {
			learn_clock(l, res);
			if (res->n == 1)
				apply(l, res->fields[0].field, res->fields[0].field_len,
				      res->fields[0].value, res->fields[0].value_len);
		} else if (l && why && c->kind == CALL_GET) {
			log_warn("overrides: cannot read a changed override: %s", why);
			l->loaded = 0; /* read them all again */
		}
		/* the admin's request is still in flight (its client waits for it) */
		if (c->kind == CALL_PUT && c->done)
			c->done(c->arg, why);
		break;
	}
	free(c);
}

/* A plain read of the hash; expiries compare with the clock learned from
 * the last change, ours until then. */
static void load(struct override_live *l, int followed)
{
	struct call *c = call_new(l, CALL_LOAD);
	if (!c)
		return;
	l->loading = 1;
	l->load_followed = followed;
	l->loaded_gen = store_generation(l->store);
	c->plain = 1;
	struct store_override_request req = {.op = STORE_OVERRIDE_LOAD};
	run(l, c, &req);
}

/* Drops the expired fields from the hash, reading it again on the way. */
static void prune(struct override_live *l)
{
	if (l->loading)
		return;
	struct call *c = call_new(l, CALL_LOAD);
	if (!c)
		return;
	l->loading = 1;
	struct store_override_request req = {.op = STORE_OVERRIDE_PRUNE};
	run(l, c, &req);
}

static void tick_arm(struct override_live *l)
{
	/* often until the hash is read: a daemon starting applies the
	 * overrides as soon as Redis answers; but a read that fails (an ACL,
	 * a key of another type) is not asked again 100 times a second */
	int ms = l->ever_loaded || l->load_failed ? TICK_MS : TICK_FIRST_MS;
	struct timeval tv = {.tv_sec = 0, .tv_usec = ms * 1000};
	evtimer_add(l->tick, &tv);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct override_live *l = arg;
	int followed = store_resets_followed(l->store);
	/* Read the hash at start (as soon as Redis answers), once notices are
	 * followed if they were not when it was read (a change in between
	 * would be missed), and whenever Redis may have restarted. */
	if (!l->loading && (!l->loaded || (followed && !l->load_followed) ||
			    store_generation(l->store) != l->loaded_gen))
		load(l, followed);
	/* expired ones go (Redis drops them at the next load) */
	int64_t now = redis_now_ms(l);
	for (size_t i = l->n; i-- > 0;)
		if (l->v[i]->until_ms && l->v[i]->until_ms <= now)
			remove_at(l, i);
	tick_arm(l);
}

/* ---- interface ---- */

static void set_names(struct override_live *l, const struct config *cfg)
{
	size_t plen = strlen(cfg->prefix);
	if (plen > KEYS_PREFIX_MAX)
		plen = KEYS_PREFIX_MAX;
	memcpy(l->hash, cfg->prefix, plen);
	memcpy(l->hash + plen, "overrides", 9);
	l->hash_len = plen + 9;
	l->channel_len = keys_reset_channel(l->channel, cfg->prefix, plen);
}

struct override_live *override_live_new(struct event_base *base, struct store *store,
					struct config *cfg)
{
	struct override_live *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->base = base;
	l->store = store;
	l->tick = evtimer_new(base, tick_cb, l);
	if (!l->tick) {
		free(l);
		return NULL;
	}
	override_live_set_config(l, cfg);
	/* the first read now, not a tick later: a store that keeps none (the
	 * memory store) answers at once, and the daemon is ready with it */
	tick_cb(-1, 0, l);
	return l;
}

void override_live_free(struct override_live *l)
{
	if (!l)
		return;
	while (!list_empty(&l->calls)) { /* their replies find nothing to update */
		struct call *c = list_entry(l->calls.first, struct call, link);
		list_unlink(&c->link);
		c->l = NULL;
	}
	event_free(l->tick);
	for (size_t i = 0; i < l->n; i++)
		entry_free(l->v[i]);
	free(l->v);
	if (l->cfg)
		config_unref(l->cfg);
	free(l);
}

void override_live_set_config(struct override_live *l, struct config *cfg)
{
	config_ref(cfg);
	int renamed = !l->cfg || strcmp(l->cfg->prefix, cfg->prefix) != 0;
	if (l->cfg)
		config_unref(l->cfg);
	l->cfg = cfg;
	set_names(l, cfg);
	if (renamed) { /* another hash: read it; replies about the old one are dropped */
		for (size_t i = 0; i < l->n; i++)
			entry_free(l->v[i]);
		l->n = 0;
		l->loaded = 0;
		l->loading = 0;
		l->epoch++;
		return;
	}
	for (size_t i = 0; i < l->n; i++)
		entry_bind(l->v[i], cfg);
}

const struct override *override_live_find(const struct override_live *l, const struct policy *p,
					  const char *user, size_t ulen)
{
	if (!l || l->n == 0)
		return NULL;
	int found;
	size_t at = find_at(l, p->name, p->name_len, user, ulen, &found);
	if (!found)
		return NULL;
	const struct entry *e = l->v[at];
	if (e->inert || (e->until_ms && e->until_ms <= redis_now_ms(l)))
		return NULL;
	return &e->o;
}

void override_live_notice(struct override_live *l, const char *msg, size_t len)
{
	size_t nl = sizeof(OVERRIDE_LIVE_NOTICE) - 1;
	if (len <= nl || memcmp(msg, OVERRIDE_LIVE_NOTICE, nl) != 0)
		return;
	struct call *c = call_new(l, CALL_GET);
	if (!c) {
		l->loaded = 0;
		return;
	}
	struct store_override_request req = {
		.op = STORE_OVERRIDE_GET,
		.field = msg + nl,
		.field_len = len - nl,
	};
	run(l, c, &req);
}

void override_live_put(struct override_live *l, const char *action, size_t alen, const char *user,
		       size_t ulen, const char *spec, size_t spec_len, int64_t ttl_ms,
		       override_live_done_fn *done, void *arg)
{
	char field[POLICY_NAME_MAX + 1 + KEYS_USER_MAX];
	if (alen > POLICY_NAME_MAX || ulen > KEYS_USER_MAX || spec_len > SPEC_MAX) {
		done(arg, "too long");
		return;
	}
	memcpy(field, action, alen);
	field[alen] = '\n';
	memcpy(field + alen + 1, user, ulen);
	struct call *c = call_new(l, CALL_PUT);
	if (!c) {
		done(arg, "out of memory");
		return;
	}
	c->done = done;
	c->arg = arg;
	struct store_override_request req = {
		.op = STORE_OVERRIDE_PUT,
		.field = field,
		.field_len = alen + 1 + ulen,
		.spec = spec,
		.spec_len = spec ? spec_len : 0,
		.ttl_ms = ttl_ms,
		.channel = l->channel,
		.channel_len = l->channel_len,
		.notice = OVERRIDE_LIVE_NOTICE,
		.notice_len = sizeof(OVERRIDE_LIVE_NOTICE) - 1,
	};
	run(l, c, &req);
}

size_t override_live_count(const struct override_live *l)
{
	return l ? l->n : 0;
}

int override_live_nth(const struct override_live *l, size_t i, struct override_live_item *it)
{
	if (!l || i >= l->n)
		return -1;
	const struct entry *e = l->v[i];
	it->action = e->o.pattern;
	it->alen = e->alen;
	it->user = e->o.pattern + e->alen + 1;
	it->ulen = e->o.len - e->alen - 1;
	it->spec = e->spec;
	it->spec_len = e->spec_len;
	if (e->until_ms) {
		int64_t left = e->until_ms - redis_now_ms(l);
		it->ttl_ms = left > 0 ? left : 0;
	} else {
		it->ttl_ms = -1;
	}
	return 0;
}

int override_live_user_valid(const char *user, size_t ulen)
{
	if (ulen == 0 || ulen > KEYS_USER_MAX)
		return 0;
	for (size_t i = 0; i < ulen; i++)
		if (user[i] == ' ' || user[i] == '\t' || user[i] == '\r' || user[i] == '\n' ||
		    user[i] == '\0')
			return 0;
	return 1;
}

int override_live_ready(const struct override_live *l, const char **why)
{
	*why = l->load_error;
	return l->ever_loaded;
}
