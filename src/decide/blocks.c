/*
 * blocks.c - a set-associative table of the blocks this daemon holds, by
 * (action, user): see blocks.h. A bucket holds WAYS pairs; a full bucket
 * replaces its pair with no units and no ask out that was seen last
 * longest ago, or, with none, keeps no block for the newcomer (it is
 * decided by Redis, as without blocks).
 */
#include "blocks.h"

#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "policy.h"
#include "hashkey.h"
#include "siphash.h"

#define WAYS 4
#define KEY_MAX (POLICY_NAME_MAX + 1 + KEYS_USER_MAX)
/* a pair is hot when seen again within this (us): it gets a block */
#define HOT_US 1000000u
/* the limits had no room for a block: no ask for this long (us), the
 * pair's requests go to Redis one by one meanwhile */
#define NO_ROOM_US 100000u
/* an ask whose answer never came (a lost store) lets another go */
#define ASK_STALE_US 2000000u
/* a pair's rate is measured over at least this (us) */
#define RATE_TICK_US 100000u
/* max: auto: a block holds this long's units at the pair's rate (us),
 * or longer where the round trip is: about one ask a second per pair
 * and daemon, whatever the rate */
#define AUTO_HOLD_US 1000000u
/* the next block is asked while what is left lasts the round trip this
 * many times over (at the pair's rate), and a few ms more for jitter */
#define LEAD_RTTS 2u
#define LEAD_EXTRA_US 5000u

/* One block: units left, answered until until_us (monotonic), counted
 * in window (the script's id; 0: not to be given back). */
struct unit_run {
	int64_t units;
	uint64_t until_us;
	int64_t window;
};

struct entry {
	size_t alen, ulen; /* alen 0: empty */
	uint64_t seen_us;  /* the last request */
	uint64_t ask_us;   /* an ask is out since (0: none) */
	void *asker;	   /* whose */
	unsigned followers;
	int64_t want;	       /* the last ask's units */
	int64_t granted;       /* the last block's units */
	int dry;	       /* Redis had no room for more: spend what is left first */
	uint64_t denied_until; /* an ask was denied: none until then (the deny cache's) */
	/* the newer block second: its units are answered after the older's */
	struct unit_run run[2];
	/* the last grant's figures, at at_us; answered from blocks since */
	int64_t limit, remaining, reset_ms, answered;
	uint64_t at_us;
	/* the pair's rate (units a second, smoothed) and the units seen
	 * since rate_at_us */
	double rate;
	uint64_t rate_at_us;
	int64_t rate_units;
	char key[KEY_MAX]; /* action '\0' user */
};

struct blocks {
	struct entry *e;
	size_t nbuckets; /* power of two */
	unsigned long epoch, generation;
	int closed;	  /* blocks_close: no block is answered or taken */
	uint64_t srtt_us; /* the store's round trip, smoothed (0: none measured) */
	struct blocks_counts counts;
	uint8_t hash_key[16];
};

struct blocks *blocks_new(size_t entries)
{
	struct blocks *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	size_t n = 1;
	while (n * WAYS < entries)
		n <<= 1;
	b->nbuckets = n;
	b->e = calloc(n * WAYS, sizeof(struct entry));
	if (!b->e) {
		free(b);
		return NULL;
	}
	/* clients choose users: a key they cannot know keeps them from
	 * crowding one bucket (which would only cost them blocks) */
	hashkey_new(b->hash_key);
	return b;
}

void blocks_free(struct blocks *b)
{
	if (!b)
		return;
	free(b->e);
	free(b);
}

static size_t make_key(char *k, const char *a, size_t alen, const char *u, size_t ulen)
{
	memcpy(k, a, alen);
	k[alen] = '\0';
	memcpy(k + alen + 1, u, ulen);
	return alen + 1 + ulen;
}

/* The pair's entry, or NULL; *bucket_out its bucket. */
static struct entry *find(struct blocks *b, const char *a, size_t alen, const char *u, size_t ulen,
			  struct entry **bucket_out)
{
	char k[KEY_MAX];
	if (alen == 0 || alen > POLICY_NAME_MAX || ulen > KEYS_USER_MAX) {
		*bucket_out = NULL;
		return NULL;
	}
	size_t kl = make_key(k, a, alen, u, ulen);
	uint64_t h = siphash24(b->hash_key, k, kl);
	struct entry *bk = &b->e[(h & (b->nbuckets - 1)) * WAYS];
	*bucket_out = bk;
	for (int i = 0; i < WAYS; i++)
		if (bk[i].alen == alen && bk[i].ulen == ulen && memcmp(bk[i].key, k, kl) == 0)
			return &bk[i];
	return NULL;
}

static int64_t units_of(const struct entry *e)
{
	return e->run[0].units + e->run[1].units;
}

/* Units whose time ran out are lapsed: counted in Redis, never answered. */
static void expire(struct blocks *b, struct entry *e, uint64_t now_us)
{
	for (int i = 0; i < 2; i++)
		if (e->run[i].units > 0 && now_us >= e->run[i].until_us) {
			b->counts.lapsed += (unsigned long long)e->run[i].units;
			e->run[i].units = 0;
		}
	if (e->run[0].units == 0 && e->run[1].units > 0) {
		e->run[0] = e->run[1];
		e->run[1].units = 0;
	}
}

/* cost units answered from e's blocks (it holds them), the older first: it lapses first */
static void spend(struct entry *e, int64_t cost, uint64_t now_us, struct blocks_hit *hit)
{
	int64_t c = cost;
	for (int i = 0; i < 2 && c > 0; i++) {
		int64_t n = e->run[i].units < c ? e->run[i].units : c;
		e->run[i].units -= n;
		c -= n;
	}
	e->answered += cost;
	int64_t elapsed_ms = (int64_t)((now_us - e->at_us) / 1000u);
	hit->limit = e->limit;
	hit->remaining = e->remaining > e->answered ? e->remaining - e->answered : 0;
	hit->reset_ms = e->reset_ms > elapsed_ms ? e->reset_ms - elapsed_ms : 0;
}

static void revoke(struct blocks *b, struct entry *e)
{
	b->counts.revoked += (unsigned long long)units_of(e);
	memset(e, 0, offsetof(struct entry, key));
}

unsigned long blocks_epoch(const struct blocks *b)
{
	return b->epoch;
}

void blocks_rtt_sample(struct blocks *b, uint64_t sent_us, uint64_t now_us)
{
	if (now_us < sent_us)
		return;
	uint64_t rtt = now_us - sent_us;
	/* TCP's smoothing (RFC 6298): an eighth of each new sample */
	b->srtt_us = b->srtt_us ? b->srtt_us - b->srtt_us / 8 + rtt / 8 : rtt;
}

uint64_t blocks_rtt_us(const struct blocks *b)
{
	return b->srtt_us;
}

int64_t blocks_ttl_ms(const struct blocks *b, const struct policy *p)
{
	int64_t ttl = p->blocks.ttl_ms;
	/* a funnel's block answered only until ttl from its ask: with auto,
	 * at least three round trips, or it would lapse on its way */
	if (b && p->blocks.autosize) {
		int64_t rtt3 = (int64_t)(b->srtt_us * 3 / 1000u);
		if (rtt3 > ttl)
			ttl = rtt3;
		if (ttl > POLICY_BLOCKS_TTL_MAX_MS)
			ttl = POLICY_BLOCKS_TTL_MAX_MS;
	}
	return ttl;
}

/* cost units seen at now_us: the pair's rate moves on once a tick has passed */
static void rate_see(struct entry *e, int64_t cost, uint64_t now_us)
{
	e->rate_units += cost;
	uint64_t elapsed = now_us - e->rate_at_us;
	if (elapsed < RATE_TICK_US)
		return;
	double r = (double)e->rate_units * 1e6 / (double)elapsed;
	e->rate = e->rate > 0 ? (e->rate + r) / 2 : r;
	e->rate_units = 0;
	e->rate_at_us = now_us;
}

/* Units the pair is expected to take over us, at its rate (rounded up). */
static int64_t at_rate(const struct entry *e, uint64_t us)
{
	double u = e->rate * (double)us / 1e6;
	return u >= (double)POLICY_BLOCKS_MAX ? POLICY_BLOCKS_MAX : (int64_t)u + 1;
}

/* The lead: what the next block's ask takes to come back, with margin
 * (for max: auto; a fixed max's blocks are asked at half anyway). */
static uint64_t lead_us(const struct blocks *b, const struct policy *p)
{
	return b->srtt_us * LEAD_RTTS + (p->blocks.autosize ? LEAD_EXTRA_US : 0);
}

/* Would what is left not outlast the next ask's way back, at the pair's rate? */
static int outlasted(const struct blocks *b, const struct entry *e, const struct policy *p,
		     int64_t left, int64_t cost)
{
	return (double)(left - cost) < e->rate * (double)lead_us(b, p) / 1e6;
}

/* max: auto's next block: what the pair takes at its rate while it is
 * held (AUTO_HOLD_US, or four round trips) and while the next comes; not
 * beyond its window's end where that is known (a fixed window's reset,
 * one limit), since units left then lapse. */
static int64_t auto_want(const struct blocks *b, const struct entry *e, const struct policy *p,
			 uint64_t now_us)
{
	uint64_t hold = b->srtt_us * 4 > AUTO_HOLD_US ? b->srtt_us * 4 : AUTO_HOLD_US;
	int64_t want = at_rate(e, hold + lead_us(b, p));
	if (p->algo == POLICY_FIXED_WINDOW && p->nlimits == 1 && e->at_us && e->reset_ms > 0) {
		uint64_t end = e->at_us + (uint64_t)e->reset_ms * 1000u;
		if (end > now_us) {
			int64_t left = at_rate(e, end - now_us);
			if (left < want)
				want = left;
		}
	}
	return want > 2 ? want : 2;
}

enum blocks_route blocks_take(struct blocks *b, const struct policy *p, const char *user,
			      size_t ulen, int64_t cost, uint64_t now_us, int may_ask, void *me,
			      struct blocks_hit *hit, int64_t *want, unsigned long *epoch,
			      void **asker)
{
	struct entry *bk, *e = find(b, p->name, p->name_len, user, ulen, &bk);
	*want = 0;
	*epoch = b->epoch;
	*asker = NULL;
	if (!bk || b->closed)
		return BLOCKS_REDIS;
	if (!e && !may_ask)
		return BLOCKS_REDIS;
	if (!e) {
		/* a newcomer: an empty way, else the one idle longest */
		for (int i = 0; i < WAYS; i++) {
			struct entry *c = &bk[i];
			if (c->alen && (units_of(c) > 0 || c->ask_us))
				expire(b, c, now_us);
			if (c->alen && (units_of(c) > 0 || c->ask_us))
				continue;
			if (!e || !c->alen || c->seen_us < e->seen_us)
				e = c;
			if (!c->alen)
				break;
		}
		if (!e)
			return BLOCKS_REDIS;
		memset(e, 0, offsetof(struct entry, key));
		e->alen = p->name_len;
		e->ulen = ulen;
		make_key(e->key, p->name, p->name_len, user, ulen);
		e->seen_us = now_us;
		e->rate_at_us = now_us;
		e->rate_units = cost;
		return BLOCKS_REDIS; /* not hot yet */
	}
	int hot = now_us - e->seen_us < HOT_US;
	e->seen_us = now_us;
	rate_see(e, cost, now_us);
	expire(b, e, now_us);
	if (e->ask_us && now_us - e->ask_us > ASK_STALE_US) {
		e->ask_us = 0;
		e->asker = NULL;
	}
	int64_t left = units_of(e);
	if (left == 0)
		e->dry = 0;
	/* running low: the next request asks for the next block, while the
	 * rest go on being answered (unless Redis had no room for it): at
	 * half the last block, or when what is left would not outlast the
	 * ask's round trip (a remote store's) */
	int low =
		may_ask && left > 0 && !e->dry &&
		((left * 2 <= e->granted && !p->blocks.autosize) || outlasted(b, e, p, left, cost));
	if (left >= cost && low && !e->ask_us && p->blocks.autosize) {
		/* a remote store's: answered now, and the next block asked
		 * beside it (blocks_ask_begin), not by this request, which
		 * would wait the round trip for it */
		int64_t w = auto_want(b, e, p, now_us);
		e->want = w < p->blocks.max ? w : p->blocks.max;
		*want = e->want;
	}
	if (left >= cost && (!(low && !e->ask_us) || *want > 0)) {
		spend(e, cost, now_us, hit);
		expire(b, e, now_us); /* moves an emptied older block's place */
		return BLOCKS_ANSWERED;
	}
	if (!may_ask || (left == 0 && now_us < e->denied_until))
		return BLOCKS_REDIS; /* the deny cache answers, as without blocks */
	if (e->ask_us) {
		/* the block ran out with the next one coming: wait for it */
		if (e->asker && e->followers < BLOCKS_FOLLOWERS_MAX) {
			e->followers++;
			*asker = e->asker;
			return BLOCKS_FOLLOW;
		}
		return BLOCKS_REDIS;
	}
	if (!(hot || left > 0))
		return BLOCKS_REDIS;
	int64_t max = p->blocks.max;
	if (p->blocks.autosize)
		e->want = auto_want(b, e, p, now_us);
	else if (e->granted == 0)
		e->want = e->want > 0 ? e->want * 2 : 2;
	else if (low)
		e->want = e->granted * 2;
	else /* its time or window ran out: what was answered from it */
		e->want = e->answered * 2 > 2 ? e->answered * 2 : 2;
	if (e->want > max)
		e->want = max;
	e->ask_us = now_us ? now_us : 1;
	e->asker = me;
	e->followers = 0;
	*want = e->want;
	return BLOCKS_ASK;
}

void blocks_unfollow(struct blocks *b, const struct policy *p, const char *user, size_t ulen)
{
	struct entry *bk, *e = find(b, p->name, p->name_len, user, ulen, &bk);
	if (e && e->followers > 0)
		e->followers--;
}

int blocks_ask_begin(struct blocks *b, const struct policy *p, const char *user, size_t ulen,
		     void *me, uint64_t now_us)
{
	struct entry *bk, *e = find(b, p->name, p->name_len, user, ulen, &bk);
	if (!e || e->ask_us)
		return -1;
	e->ask_us = now_us ? now_us : 1;
	e->asker = me;
	e->followers = 0;
	return 0;
}

/* The pair's entry if me's ask is its own; the ask is over. */
static struct entry *ask_over(struct blocks *b, const struct policy *p, const char *user,
			      size_t ulen, void *me)
{
	struct entry *bk, *e = find(b, p->name, p->name_len, user, ulen, &bk);
	if (!e || e->asker != me)
		return NULL;
	e->ask_us = 0;
	e->asker = NULL;
	e->followers = 0;
	return e;
}

void blocks_put(struct blocks *b, const struct policy *p, const char *user, size_t ulen, void *me,
		uint64_t sent_us, int64_t units, int64_t valid_ms, int64_t window, int64_t limit,
		int64_t remaining, int64_t reset_ms)
{
	/* the pair's RESET, override, or a reload, came in between: the
	 * pair's entry was revoked, so the ask is no longer its own (a
	 * RESET of another pair leaves it be) */
	struct entry *e = ask_over(b, p, user, ulen, me);
	if (!e) {
		b->counts.revoked += (unsigned long long)(units > 0 ? units : 0);
		return;
	}
	if (units <= 0 || valid_ms <= 0) {
		/* the limits left no room: what is held goes first, the next
		 * block starts small again, and none is asked for a while
		 * (the pair's requests go to Redis one by one, as without
		 * blocks, not one ask at a time) */
		e->granted = e->want = 0;
		e->dry = 1;
		e->denied_until = sent_us + NO_ROOM_US;
		return;
	}
	e->dry = 0;
	b->counts.blocks++;
	b->counts.granted += (unsigned long long)units;
	/* Redis decided after we sent: until is no later than Redis's end, by
	 * clocks that advance alike; shortened by 1/1024 (0.1%) so that a
	 * daemon clock up to 1000 ppm slower than Redis's still ends first */
	uint64_t valid_us = (uint64_t)valid_ms * 1000u;
	struct unit_run r = {units, sent_us + valid_us - valid_us / 1024u, window};
	if (e->run[1].units > 0) {
		/* both held (a third block while the two ran low): they merge,
		 * answered until the earlier end, which is safe for both (a
		 * window's blocks end together, with it); given back only if
		 * counted in one window */
		e->run[0].units += e->run[1].units;
		if (e->run[1].until_us < e->run[0].until_us)
			e->run[0].until_us = e->run[1].until_us;
		if (e->run[1].window != e->run[0].window)
			e->run[0].window = 0;
		e->run[1].units = 0;
	}
	if (e->run[0].units == 0) {
		e->run[0] = r;
	} else if (r.until_us >= e->run[0].until_us) {
		e->run[1] = r;
	} else { /* answered first: it ends first */
		e->run[1] = e->run[0];
		e->run[0] = r;
	}
	e->granted = units;
	e->limit = limit;
	e->remaining = remaining;
	e->reset_ms = reset_ms;
	e->at_us = sent_us;
	e->answered = 0;
}

void blocks_unask(struct blocks *b, const struct policy *p, const char *user, size_t ulen, void *me,
		  uint64_t sent_us, int64_t retry_after_ms)
{
	struct entry *e = ask_over(b, p, user, ulen, me);
	if (!e)
		return;
	e->dry = 1;
	/* (retry_after is whole ms, rounded up: as the deny cache has it) */
	if (retry_after_ms > 1)
		e->denied_until = sent_us + (uint64_t)(retry_after_ms - 1) * 1000u;
}

int blocks_spend(struct blocks *b, const struct policy *p, const char *user, size_t ulen,
		 int64_t cost, uint64_t now_us, struct blocks_hit *hit)
{
	struct entry *bk, *e = find(b, p->name, p->name_len, user, ulen, &bk);
	if (!e)
		return 0;
	expire(b, e, now_us);
	if (units_of(e) < cost)
		return 0;
	spend(e, cost, now_us, hit);
	expire(b, e, now_us);
	return 1;
}

void blocks_reset_pair(struct blocks *b, const char *action, size_t alen, const char *user,
		       size_t ulen)
{
	struct entry *bk, *e = find(b, action, alen, user, ulen, &bk);
	b->epoch++;
	if (e)
		revoke(b, e);
}

void blocks_clear(struct blocks *b)
{
	b->epoch++;
	for (size_t i = 0; i < b->nbuckets * WAYS; i++)
		if (b->e[i].alen)
			revoke(b, &b->e[i]);
}

void blocks_sync(struct blocks *b, unsigned long store_generation)
{
	if (b->generation != store_generation) {
		blocks_clear(b);
		b->generation = store_generation;
	}
}

size_t blocks_close(struct blocks *b, uint64_t now_us, blocks_close_fn *fn, void *arg)
{
	size_t n = 0;
	b->closed = 1;
	b->epoch++;
	for (size_t i = 0; i < b->nbuckets * WAYS; i++) {
		struct entry *e = &b->e[i];
		if (!e->alen)
			continue;
		expire(b, e, now_us);
		/* out of the table before it is handed on: never answered
		 * from units being given back */
		struct entry c = *e;
		memset(e, 0, offsetof(struct entry, key));
		for (int r = 0; r < 2; r++) {
			if (c.run[r].units <= 0)
				continue;
			if (c.run[r].window == 0) {
				b->counts.lapsed += (unsigned long long)c.run[r].units;
				continue;
			}
			fn(arg, c.key, c.alen, c.key + c.alen + 1, c.ulen, c.run[r].units,
			   c.run[r].window);
			n++;
		}
	}
	return n;
}

void blocks_returned(struct blocks *b, int64_t units, int64_t returned)
{
	if (returned < 0)
		returned = 0;
	if (returned > units)
		returned = units;
	b->counts.returned += (unsigned long long)returned;
	b->counts.lapsed += (unsigned long long)(units - returned);
}

const struct blocks_counts *blocks_counts(const struct blocks *b)
{
	return &b->counts;
}

long long blocks_units(const struct blocks *b)
{
	long long n = 0;
	for (size_t i = 0; i < b->nbuckets * WAYS; i++)
		n += units_of(&b->e[i]);
	return n;
}
