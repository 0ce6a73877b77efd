/*
 * store_redis.c - decisions in one Redis through a pool of connections
 * (redis_conn.c): deadlines, batching into script calls (redis_script.c),
 * admission, and knowing whether Redis decides; the store ops.
 *
 * Every request lives in two places until it is answered:
 *
 *   deadline list (sorted by deadline)     hiredis callback queue of its conn
 *   head -> r1 -> r2 -> ...                 r1, r2, ... (privdata)
 *
 * The timer answers the head of the deadline list when its deadline passes
 * (STORE_TIMEOUT) and unlinks it; the request object itself stays until
 * hiredis runs its callback (with the late reply, or NULL on disconnect),
 * which then frees it silently. So each request is answered exactly once, and
 * a late reply is never delivered twice.
 */
#include "store_redis.h"

#include <stddef.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admission.h"
#include "clock.h"
#include "config.h"
#include "keys.h"
#include "log.h"
#include "lua_scripts.h"
#include "policy.h"
#include "redis_conn.h"
#include "redis_script.h"
#include "rlink.h"
#include "stats.h"
#include "store.h"
#include "store_reply.h"

#define MAX_CONNECTIONS 64
/* A connection owing replies that has received nothing for this long (and
 * at least twice redis.timeout) is presumed dead and replaced. */
#define STALL_MIN_MS 1000
#define FREE_POOL_MAX 1024
/* While Redis refuses decisions, the script's check runs this often, so a
 * fixed ACL is noticed without traffic. */
#define CHECK_INTERVAL_MS 1000
/* How long after a fresh connection failed at its first requests a
 * returning Redis does not cut the pool's backoff (BACKOFF_MAX_MS is 500). */
#define FAILED_FRESH_US 2000000u
/* Errors Redis answers to decisions are logged at most this often. */
#define ERROR_LOG_US 10000000u
#define MAX_BATCH 256
_Static_assert(STORE_PAIRS_MAX + 1 <= MAX_BATCH, "a decision over several pairs fits in a call");

struct store_redis;
struct sbatch;

/* A connection of the pool and what is queued on it. */
struct rconn {
	struct redis_conn c; /* first: the connection's callbacks get &rc->c */
	struct store_redis *s;
	unsigned queued;  /* c.inflight plus those in the open batch */
	unsigned batches; /* script calls sent and not yet called back */
	struct sbatch *open;
	/* Decisions/s Redis delivers on this connection while calls queue
	 * up, and whether its admission bound is in force (admission.h). */
	struct admission adm;
	int decided; /* a decision came back since it connected */
};

struct sreq {
	struct sreq *prev, *next; /* deadline list; unlinked once answered */
	struct store_redis *s;
	struct rconn *rc;
	/* One of the two, NULL once answered: store_submit's, or a cluster
	 * node's (store_redis_submit_node), which also hears of redirects. */
	store_done_fn *done;
	store_node_done_fn *node_done;
	void *arg;
	uint64_t deadline_us;
	enum store_node_send how;
	struct store_saved_request sv; /* keys and arguments are built when the batch goes */
};

struct store_redis {
	struct store base;
	struct redis_target t; /* the Redis, shared by the connections */
	struct rconn conns[MAX_CONNECTIONS];
	int nconns;
	struct rconn subconn; /* SUBSCRIBE <prefix>reset */
	char *reset_channel;  /* NULL until store_watch_resets */
	store_reset_fn *on_reset;
	void *on_reset_arg;
	struct sreq *head, *tail; /* deadline list */
	struct event *timer;
	uint64_t timer_at;
	size_t pending;
	unsigned long long refused; /* answered "overload" at once */
	/* When a connection that never decided anything was lost with
	 * requests on it: Redis (or a proxy) accepts us and fails us. */
	uint64_t failed_fresh_us;
	struct sreq *free_pool;
	size_t nfree;
	int up_logged, down_logged;
	int64_t timeout_ms; /* the longest deadline seen: sizes the stall check */
	char name[300];	    /* "redis 127.0.0.1:6379" or "redis unix:/path", for logs */
	/* Redis is up but answers decisions with errors (an ACL without what
	 * the script needs, maxmemory, LOADING...): reported by health, cleared
	 * by the next decision or check that works. */
	int refusing;
	char refusal[200];
	char down_reason[200];	/* why the last connection failed or was lost */
	char check_logged[200]; /* what the last failed check logged: log changes only */
	struct event *check_timer;
	char prefix[KEYS_PREFIX_MAX +
		    1]; /* the key prefix, for the check: from watch_resets or a request */
	size_t prefix_len;
	uint64_t error_logged_us; /* decision errors: last logged at */
	unsigned long errors_unlogged;
	int max_batch;
	int wait_replicas;  /* redis.wait_replicas: 0, or a WAIT after each call */
	int replicas_short; /* the last WAIT found too few replicas */
	int64_t wait_timeout_ms;
	int cluster; /* a Redis Cluster node: cluster script, batches with undeclared keys */
	/* the store alone at its address (redis.address), no Sentinel or
	 * Cluster to follow a failover for it: a connection answered READONLY
	 * (its Redis became a replica) is dropped, and the reconnect resolves
	 * the address again (a managed service's endpoint moves by DNS) */
	int alone;
	unsigned long generation; /* bumped on every lost connection */
	struct redis_argv call;	  /* the script call of one batch */
	char *cmdbuf;		  /* its RESP bytes */
};

static void rconn_check(struct rconn *rc);
static void redis_learn_prefix(struct store_redis *s, const char *prefix, size_t len);
static void redis_refusing(struct store_redis *s, const char *why, size_t len);
static void redis_deciding(struct store_redis *s);
static void redis_log_error(struct store_redis *s, const char *what, const char *text, size_t len);


/* ---- request objects ---- */

static struct sreq *sreq_get(struct store_redis *s)
{
	struct sreq *r = s->free_pool;
	if (r) {
		s->free_pool = r->next;
		s->nfree--;
	} else {
		r = malloc(sizeof(*r));
		if (!r)
			return NULL;
	}
	memset(r, 0, offsetof(struct sreq, sv));
	r->sv.npairs = 0;
	r->sv.pairs = NULL;
	r->sv.view = NULL;
	r->sv.text = NULL;
	r->s = s;
	return r;
}

static void sreq_put(struct store_redis *s, struct sreq *r)
{
	store_request_release(&r->sv);
	if (s->nfree >= FREE_POOL_MAX) {
		free(r);
		return;
	}
	r->next = s->free_pool;
	s->free_pool = r;
	s->nfree++;
}

/* ---- deadline list and timer ---- */

static void timer_arm(struct store_redis *s)
{
	if (!s->head) {
		evtimer_del(s->timer);
		s->timer_at = 0;
		return;
	}
	if (s->timer_at == s->head->deadline_us)
		return;
	uint64_t now = clock_mono_us();
	uint64_t d = s->head->deadline_us > now ? s->head->deadline_us - now : 0;
	struct timeval tv = {.tv_sec = (time_t)(d / 1000000),
			     .tv_usec = (suseconds_t)(d % 1000000)};
	evtimer_add(s->timer, &tv);
	s->timer_at = s->head->deadline_us;
}

static void deadline_insert(struct store_redis *s, struct sreq *r)
{
	/* Deadlines arrive in order unless a reload shortened the timeout. */
	struct sreq *after = s->tail;
	while (after && after->deadline_us > r->deadline_us)
		after = after->prev;
	r->prev = after;
	r->next = after ? after->next : s->head;
	if (r->next)
		r->next->prev = r;
	else
		s->tail = r;
	if (after)
		after->next = r;
	else
		s->head = r;
	s->pending++;
	if (s->head == r)
		timer_arm(s);
}

static void deadline_remove(struct store_redis *s, struct sreq *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		s->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		s->tail = r->prev;
	r->prev = r->next = NULL;
	s->pending--;
}

static int sreq_waiting(const struct sreq *r)
{
	return r->done || r->node_done;
}

/* Answers r (once) and unlinks it from the deadline list. where: a Cluster
 * node's redirect, or NULL. */
static void sreq_answer(struct sreq *r, const struct store_result *res,
			const struct store_node_redirect *where)
{
	struct store_redis *s = r->s;
	store_done_fn *done = r->done;
	store_node_done_fn *node_done = r->node_done;
	if (!done && !node_done)
		return;
	r->done = NULL;
	r->node_done = NULL;
	int was_head = s->head == r;
	deadline_remove(s, r);
	if (was_head)
		timer_arm(s);
	if (node_done)
		node_done(r->arg, res, where);
	else
		done(r->arg, res);
}

static void answer_status(struct sreq *r, enum store_status st, const char *detail)
{
	struct store_result res = {.status = st, .detail = detail};
	sreq_answer(r, &res, NULL);
}

/*
 * Requests just timed out: a connection that owes replies and has heard
 * nothing for long is presumed dead (a peer gone without FIN or RST, a
 * middlebox that dropped it) and replaced. A frozen Redis is treated the
 * same; the new connection simply waits for it.
 */
static void check_stalls(struct store_redis *s, uint64_t now)
{
	for (int i = 0; i < s->nconns; i++)
		redis_conn_check_stall(&s->conns[i].c, now, s->t.stall_ms);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct store_redis *s = arg;
	s->timer_at = 0;
	uint64_t now = clock_mono_us();
	while (s->head && s->head->deadline_us <= now) {
		if (s->head->rc)
			admission_late(&s->head->rc->adm, now);
		answer_status(s->head, STORE_TIMEOUT, "redis did not answer in time");
	}
	timer_arm(s);
	check_stalls(s, now);
}

/* ---- sending: batches ---- */

/*
 * Requests submitted during one turn of the event loop for the same
 * connection go to Redis as one script call that decides them all, each
 * atomic on its own keys. Under light load a batch holds one request and
 * leaves at the end of the same loop turn, so batching adds no wait.
 * The call's room (argv, arena, RESP) is sized for MAX_BATCH decisions of
 * one pair: a decision over k pairs weighs k + 1 of them (it needs less
 * than k: 3 + k(5L + 2) arguments for L keys a pair, against k(5L + 5)).
 */
struct sbatch {
	struct rconn *rc;
	int n;
	int weight; /* sum of sreq_weight over reqs */
	int evaled; /* resent with EVAL after NOSCRIPT */
	uint64_t sent_us;
	/* redis.wait_replicas: a WAIT follows each script call of the batch
	 * on its connection; the batch lives until the last is answered */
	int waits;   /* WAITs sent and not yet called back */
	int called;  /* batch_cb is done with it */
	int nheld;   /* allowed answers held until the WAIT says enough replicas have them */
	int decided; /* Redis decided it: its WAIT's success clears a refusal */
	int eager;   /* holds a remote store's request: leaves at the turn's end */
	struct store_result *held; /* by position in reqs; NULL: none held */
	struct sreq *reqs[MAX_BATCH];
};

static void batch_cb(struct rlink *l, redisReply *rep, void *privdata);
static void wait_cb(struct rlink *l, redisReply *rep, void *privdata);

static struct sbatch *batch_new(struct rconn *rc)
{
	struct sbatch *b = malloc(sizeof(*b));
	if (b) {
		b->rc = rc;
		b->n = 0;
		b->weight = 0;
		b->evaled = 0;
		b->waits = 0;
		b->called = 0;
		b->nheld = 0;
		b->decided = 0;
		b->eager = 0;
		b->held = NULL;
	}
	return b;
}

/* batch_cb is done with b: freed now, or by the last WAIT's callback. */
static void batch_done(struct sbatch *b)
{
	b->called = 1;
	if (b->waits > 0)
		return;
	free(b->held);
	free(b);
}

/* A STATE's keys, whose figures its reply carries too; 0 for any other op. */
static int sreq_state_keys(const struct sreq *r)
{
	return r->sv.op == STORE_STATE ? policy_nkeys(&r->sv.policy) : 0;
}

static int sreq_weight(const struct sreq *r)
{
	return r->sv.npairs > 0 ? r->sv.npairs + 1 : 1;
}

/* Queues EVALSHA (or EVAL) deciding every request of b on its connection. */
static int batch_send(struct store_redis *s, struct sbatch *b, int eval)
{
	struct rconn *rc = b->rc;
	const struct store_saved_request *reqs[MAX_BATCH];
	for (int j = 0; j < b->n; j++)
		reqs[j] = &b->reqs[j]->sv;
	/* A cluster node takes a batch of several slots only with undeclared
	 * keys (numkeys 0, keys after the arguments); one decision declares its
	 * keys so Redis can redirect it (MOVED, ASK). */
	int keys_after = s->cluster && b->n > 1;
	if (eval)
		redis_script_call(&s->call, "EVAL", s->t.script, s->t.script_len, reqs, b->n,
				  keys_after);
	else
		redis_script_call(&s->call, "EVALSHA", s->t.script_sha, 40, reqs, b->n, keys_after);
	size_t len = redis_resp_format(s->cmdbuf, &s->call);
	if (!rc->c.link || rlink_formatted(rc->c.link, batch_cb, b, s->cmdbuf, len) < 0)
		return -1;
	/* Redis runs WAIT after the call on the same connection: its answer
	 * says how many replicas have the call's writes. Not sent: the link is
	 * closing, and batch_cb hears so; an allowed answer then has no WAIT
	 * to wait for and fails as one whose replicas did not answer. */
	if (s->wait_replicas > 0 &&
	    rlink_command(rc->c.link, wait_cb, b, "WAIT %d %lld", s->wait_replicas,
			  (long long)s->wait_timeout_ms) == 0)
		b->waits++;
	b->sent_us = clock_mono_us();
	hist_observe(&stats.batch_size, &stats_batch_bounds, (uint64_t)b->n);
	if (rc->c.inflight == 0)
		rc->c.busy_since_us = b->sent_us;
	rc->c.inflight += (unsigned)b->n;
	rc->batches++;
	return 0;
}

static void batch_answer(struct store_redis *s, struct sbatch *b, const struct store_result *res)
{
	for (int j = 0; j < b->n; j++) {
		sreq_answer(b->reqs[j], res, NULL);
		sreq_put(s, b->reqs[j]);
	}
	b->n = 0;
	batch_done(b);
}

static void batch_fail(struct store_redis *s, struct sbatch *b, enum store_status st,
		       const char *detail)
{
	struct store_result res = {.status = st, .detail = detail};
	batch_answer(s, b, &res);
}

/* A batch that never reached Redis: take it off the connection's count, answer it. */
static void batch_abort(struct store_redis *s, struct sbatch *b, enum store_status st,
			const char *detail)
{
	b->rc->queued -= (unsigned)b->n;
	batch_fail(s, b, st, detail);
}

/* Drops the requests of b that were answered while it waited (timed out):
 * they must not reach Redis. Returns how many are left. */
static int batch_compact(struct store_redis *s, struct sbatch *b)
{
	int kept = 0;
	b->weight = 0;
	for (int j = 0; j < b->n; j++) {
		if (sreq_waiting(b->reqs[j])) {
			b->weight += sreq_weight(b->reqs[j]);
			b->reqs[kept++] = b->reqs[j];
		} else {
			b->rc->queued--;
			sreq_put(s, b->reqs[j]);
		}
	}
	b->n = kept;
	return kept;
}

static void rconn_send_open(struct rconn *rc)
{
	struct sbatch *b = rc->open;
	rc->open = NULL;
	if (batch_compact(rc->s, b) == 0)
		free(b);
	else if (batch_send(rc->s, b, 0) < 0)
		batch_abort(rc->s, b, STORE_UNAVAILABLE, "redis connection is closing");
}

/*
 * End of a loop turn: send the open batch (the connection then writes
 * everything queued).
 * While an earlier call on this connection is still unanswered, a batch that
 * is not full waits for that reply (batch_cb flushes again): Redis runs the
 * calls of one connection in order, so it could not start on it much sooner,
 * and the wait lets the batch grow. Redis then spends less per decision
 * (fewer script runs, reads, writes and wakeups) exactly when it is busy;
 * with many clients sending one request at a time this is what lets batches
 * form at all. With nothing in flight (light load) a batch leaves at once; a
 * full one always does, and so does one holding a remote store's request
 * (redis.remote): across a WAN the wait would be a second round trip, and
 * Redis there is not what bounds the daemon. A request answered while it waited (timed out) is
 * dropped from the batch, so it never runs in Redis.
 */
static void rconn_flush(struct redis_conn *c)
{
	struct rconn *rc = (struct rconn *)c;
	struct sbatch *b = rc->open;
	if (b && (rc->batches == 0 || b->eager || b->weight >= rc->s->max_batch))
		rconn_send_open(rc);
}

/* Adds r to rc's open batch; sends the batch when full, else at the end of this loop turn. */
static void rconn_enqueue(struct rconn *rc, struct sreq *r)
{
	struct sbatch *b = rc->open;
	int w = sreq_weight(r);
	if (r->how != STORE_NODE_BATCHED) {
		/* Its own command with declared keys; after ASKING, which applies
		 * to the next command only (queued now, written at the end of the
		 * turn). */
		static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
		if (b)
			rconn_send_open(rc);
		b = batch_new(rc);
		if (!b || !rc->c.link ||
		    (r->how == STORE_NODE_ASKING &&
		     rlink_formatted(rc->c.link, NULL, NULL, asking, sizeof(asking) - 1) < 0)) {
			free(b);
			answer_status(r, STORE_UNAVAILABLE, "redis connection is closing");
			sreq_put(rc->s, r);
			return;
		}
		b->n = 1;
		b->weight = w;
		b->reqs[0] = r;
		r->rc = rc;
		rc->queued++;
		if (batch_send(rc->s, b, 0) < 0)
			batch_abort(rc->s, b, STORE_UNAVAILABLE, "redis connection is closing");
		return;
	}
	if (b && b->weight + w > rc->s->max_batch) {
		rconn_send_open(rc); /* no room for r: the batch goes as it is */
		b = NULL;
	}
	if (!b) {
		b = batch_new(rc);
		if (!b) {
			answer_status(r, STORE_OVERLOAD, "out of memory");
			sreq_put(rc->s, r);
			return;
		}
		rc->open = b;
		redis_conn_kick(&rc->c);
	}
	r->rc = rc;
	b->reqs[b->n++] = r;
	b->weight += w;
	b->eager |= r->sv.eager;
	rc->queued++;
	if (b->weight >= rc->s->max_batch)
		rconn_send_open(rc);
}

/*
 * A reply to b arrived (at rc->c.last_rx_us) and b had been sent before the
 * previous reply on rc (at prev_rx): Redis went from that call to this one
 * with b waiting, so the gap is what b's decisions cost in Redis's time,
 * other connections' work included (admission_measure).
 */
static void rconn_measure(struct rconn *rc, const struct sbatch *b, uint64_t prev_rx)
{
	admission_measure(&rc->adm, b->sent_us, prev_rx, rc->c.last_rx_us, (unsigned)b->n);
}

/* Whether an answer waits for the replicas (redis.wait_replicas): those
 * whose writes, lost in a failover, would let more through later. A PEEK
 * and a denial write nothing that matters; a lost refund (SETTLE, CANCEL)
 * or RESET only makes a limit stricter. */
static int must_replicate(enum store_op op, const struct store_result *res)
{
	switch (op) {
	case STORE_ALLOW:
	case STORE_HOLD:
		return res->allowed;
	case STORE_CHARGE:
		return 1;
	case STORE_PEEK:
	case STORE_STATE:
	case STORE_RESET:
	case STORE_SETTLE:
	case STORE_CANCEL:
		return 0;
	}
	return 0;
}

/* Keeps r's allowed answer (reqs[j]) until the batch's WAIT answers. 0: no
 * room to keep it (out of memory): answered now, as without durability. */
static int batch_hold(struct sbatch *b, int j, const struct store_result *res)
{
	/* room for the batch's requests only: a result is 1.6 KB (store.h) */
	if (!b->held && !(b->held = calloc((size_t)b->n, sizeof(*b->held))))
		return 0;
	b->held[j] = *res;
	b->held[j].detail = NULL;
	b->nheld++;
	return 1;
}

/* Answers the held requests of b: as decided when ok, else failed with detail. */
static void batch_release_held(struct store_redis *s, struct sbatch *b, int ok, const char *detail)
{
	struct store_result failed = {
		.status = STORE_FAILED, .error = STORE_ERROR_REPLICAS, .detail = detail};
	for (int j = 0; j < b->n; j++) {
		struct sreq *r = b->reqs[j];
		if (!r)
			continue;
		sreq_answer(r, ok ? &b->held[j] : &failed, NULL);
		sreq_put(s, r);
		b->reqs[j] = NULL;
	}
	b->nheld = 0;
}

/* Redis answered the batch's call with an error: every decision in it
 * fails with it (a redirection says where to ask instead). */
static void batch_failed(struct store_redis *s, struct rconn *rc, struct sbatch *b,
			 const redisReply *rep, enum store_error err)
{
	char detail[128];
	snprintf(detail, sizeof(detail), "redis: %.100s", rep->str);
	log_debug("store: %s", detail);
	switch (err) {
	case STORE_ERROR_MOVED:
	case STORE_ERROR_ASK:
	case STORE_ERROR_TRYAGAIN:
	case STORE_ERROR_CLUSTERDOWN:
	case STORE_ERROR_READONLY:
		if (s->alone && rc->c.link) {
			/* no one else follows this failover: a new connection
			 * may reach the new master (this one answers later
			 * batches READONLY until then: the reconnect's backoff
			 * grows while it does) */
			log_warn("%s answers READONLY (a replica now): reconnecting, the "
				 "address resolved again",
				 s->name);
			redis_conn_restart(&rc->c);
		}
		break;
	case STORE_ERROR_MASTERDOWN:
		break; /* where to ask instead: the cluster and sentinel stores follow it */
	default:
		redis_log_error(s, "answered decisions with an error", rep->str, rep->len);
		redis_refusing(s, rep->str, rep->len);
		break;
	}
	struct store_result res = {.status = STORE_FAILED, .error = err, .detail = detail};
	char to[64];
	const char *at;
	size_t tl;
	struct store_node_redirect where = {.to = to};
	int redirected = store_reply_redirect(rep->str, rep->len, &where.slot, &at, &tl) == 0 &&
			 tl < sizeof(to);
	if (redirected) {
		memcpy(to, at, tl);
		to[tl] = '\0';
	}
	for (int j = 0; j < b->n; j++) {
		sreq_answer(b->reqs[j], &res, redirected ? &where : NULL);
		sreq_put(s, b->reqs[j]);
	}
	b->n = 0;
}

/* The decisions' figures, one after another in the reply's array, each
 * to its request (held for the WAIT with redis.wait_replicas). */
static void batch_answer_each(struct store_redis *s, struct rconn *rc, struct sbatch *b,
			      const redisReply *rep)
{
	/* each decision's figures follow the previous one's */
	unsigned long total = 0, first = 0;
	for (int j = 0; j < b->n; j++)
		total += store_reply_width(b->reqs[j]->sv.npairs, b->reqs[j]->sv.block_want > 0,
					   sreq_state_keys(b->reqs[j]));
	for (int j = 0; j < b->n; j++) {
		struct sreq *r = b->reqs[j];
		int npairs = r->sv.npairs, block = r->sv.block_want > 0;
		int state_keys = sreq_state_keys(r);
		if (sreq_waiting(r)) { /* else answered already (timed out): drop the late reply */
			struct store_result res;
			int bad = npairs > 0 ? store_reply_decision_all(rep, first, total, npairs,
									&res)
					     : store_reply_decision(rep, first, total, &res);
			if (bad >= 0 && block)
				bad = store_reply_block(rep, first, &res);
			if (bad >= 0 && state_keys)
				bad = store_reply_state(rep, first, state_keys, &res);
			/* the call it rode in, for its trace (trace.h) */
			res.batch_sent_us = b->sent_us;
			res.batch_read_us = rc->c.last_rx_us;
			res.batch_size = b->n;
			if (bad < 0 && res.error != STORE_ERROR_WRONG_NODE) {
				redis_log_error(s, "could not decide", res.detail,
						strlen(res.detail));
				/* a key of the wrong type fails one pair; anything else
				 * (maxmemory...) fails every decision */
				if (res.error != STORE_ERROR_KEY)
					redis_refusing(s, res.detail, strlen(res.detail));
			}
			if (bad >= 0 && s->wait_replicas > 0 && must_replicate(r->sv.op, &res) &&
			    batch_hold(b, j, &res))
				r = NULL; /* answered by wait_cb */
			else
				sreq_answer(r, &res, NULL);
		}
		first += store_reply_width(npairs, block, state_keys);
		if (r) {
			sreq_put(s, r);
			b->reqs[j] = NULL;
		}
	}
}

static void batch_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)l;
	struct sbatch *b = privdata;
	struct rconn *rc = b->rc;
	struct store_redis *s = rc->s;
	rc->c.inflight -= (unsigned)b->n;
	rc->queued -= (unsigned)b->n;
	if (--rc->batches == 0 && rc->open)
		redis_conn_kick(&rc->c); /* the held batch may go now */
	if (!rep) {
		if (!rc->decided)
			s->failed_fresh_us = clock_mono_us();
		/* sent: Redis may have run it (and a replica may have it) */
		struct store_result res = {.status = STORE_UNAVAILABLE,
					   .detail = "connection to redis lost",
					   .sent = 1};
		batch_answer(s, b, &res);
		return;
	}
	rc->decided = 1;
	uint64_t prev_rx = rc->c.last_rx_us;
	redis_conn_verified(&rc->c); /* reads the clock: last_rx_us is now */
	hist_observe(&stats.store_rtt_us, &stats_latency_bounds, rc->c.last_rx_us - b->sent_us);
	rconn_measure(rc, b, prev_rx);
	enum store_error err = rep->type == REDIS_REPLY_ERROR
				       ? store_reply_error(rep->str, rep->len)
				       : STORE_ERROR_NONE;
	if (err == STORE_ERROR_NOSCRIPT && !b->evaled && rc->c.link && !s->t.closing) {
		/* SCRIPT FLUSH or a restarted Redis: EVAL sends the body and caches it.
		 * Requests already answered (timed out) are not run again. */
		rc->queued += (unsigned)b->n; /* queued again, less those compacted away */
		int kept = batch_compact(s, b);
		b->evaled = 1;
		if (kept == 0) {
			batch_done(b);
			return;
		}
		if (batch_send(s, b, 1) == 0)
			return;
		rc->queued -= (unsigned)kept;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		batch_failed(s, rc, b, rep, err);
		batch_done(b);
		return;
	}
	/* Redis decides; with redis.wait_replicas, once the WAIT says the
	 * replicas keep up too (wait_cb) */
	if (rep->type == REDIS_REPLY_ARRAY) {
		if (s->wait_replicas > 0)
			b->decided = 1;
		else
			redis_deciding(s);
	}
	batch_answer_each(s, rc, b, rep);
	if (b->nheld > 0 && b->waits == 0)
		batch_release_held(s, b, 0, "redis: the WAIT for replicas could not be sent");
	batch_done(b);
}

/*
 * redis.wait_replicas: what WAIT answered after the batch's script call.
 * Enough replicas have the writes: the held answers go out as decided.
 * Too few (within wait_timeout), an error, or the connection lost: they
 * fail (STORE_ERROR_REPLICAS), and on_store_error answers them, since a
 * failover now could lose the counts they were allowed against. The
 * counts stay charged on the master: that can only under-admit.
 */
static void wait_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)l;
	struct sbatch *b = privdata;
	struct store_redis *s = b->rc->s;
	b->waits--;
	/* a WAIT after a call Redis refused with NOSCRIPT: the batch went
	 * again, with its own WAIT after it */
	if (!b->called)
		return;
	long long acked = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
	char detail[160];
	if (acked >= s->wait_replicas)
		detail[0] = '\0';
	else if (!rep)
		snprintf(detail, sizeof(detail),
			 "connection to redis lost before replicas acknowledged");
	else if (rep->type == REDIS_REPLY_ERROR)
		snprintf(detail, sizeof(detail), "redis: WAIT: %.100s", rep->str);
	else
		snprintf(detail, sizeof(detail),
			 "redis: %lld of %d replicas acknowledged within %lld ms", acked,
			 s->wait_replicas, (long long)s->wait_timeout_ms);
	/* health says so while it lasts (the next decision clears it), whether
	 * or not this batch held answers */
	if (detail[0] && rep) {
		s->replicas_short = 1;
		redis_refusing(s, detail, strlen(detail));
	} else if (!detail[0] && b->decided) {
		s->replicas_short = 0;
		redis_deciding(s);
	}
	if (b->nheld > 0) {
		if (detail[0])
			redis_log_error(s, "held allowed answers", detail, strlen(detail));
		batch_release_held(s, b, !detail[0], detail);
	}
	batch_done(b);
}

/* ---- what the connections tell ---- */

static void store_note_down(struct store_redis *s, const char *why)
{
	for (int i = 0; i < s->nconns; i++)
		if (s->conns[i].c.state == REDIS_CONN_UP && s->conns[i].c.verified)
			return;
	if (!s->down_logged) {
		log_warn("%s unavailable: %.*s; answering per on_store_error, retrying", s->name,
			 log_reason_len(why, strlen(why)), why);
		s->down_logged = 1;
		s->up_logged = 0;
	}
}

static void rconn_connected(struct redis_conn *c)
{
	struct rconn *rc = (struct rconn *)c;
	/* perhaps another Redis now (a failover): measure it afresh */
	rc->decided = 0;
	admission_reset(&rc->adm);
}

/* Redis is back: the rest of the pool need not wait out its backoff (up
 * to half a second) while one connection carries everything. Unless Redis
 * has lately been failing fresh connections at their first requests (a
 * proxy that closes on each): cutting everyone's backoff on every return
 * would then make a reconnect storm. */
static void rconn_retry_pool(struct store_redis *s)
{
	uint64_t now = clock_mono_us();
	if (s->failed_fresh_us && now - s->failed_fresh_us < FAILED_FRESH_US)
		return;
	redis_conn_retry_now(&s->subconn.c);
	for (int i = 0; i < s->nconns; i++)
		redis_conn_retry_now(&s->conns[i].c);
}

/* Redis answered on a connection: it works. Whichever connection's backoff
 * ends first (the RESET subscriber's too) brings the pool back; "connected"
 * is logged once per outage, when a request connection is back. */
static void rconn_verified(struct redis_conn *c)
{
	struct store_redis *s = ((struct rconn *)c)->s;
	if (c->sub) {
		if (!s->up_logged)
			rconn_retry_pool(s);
		return;
	}
	if (s->up_logged)
		return;
	log_info("%s connected", s->name);
	rconn_retry_pool(s);
	s->up_logged = 1;
	s->down_logged = 0;
	s->t.setup_err_logged = 0;
}

static void rconn_ready(struct redis_conn *c)
{
	rconn_check((struct rconn *)c);
}

static void rconn_lost(struct redis_conn *c, const char *why, int was_up)
{
	struct store_redis *s = ((struct rconn *)c)->s;
	/* State may be lost only with a Redis we were talking to (it may come
	 * back empty); failed attempts to reach one change nothing. */
	if (was_up)
		s->generation++;
	/* the subscriber's loss says less than the pool's own failures */
	if (c->idx >= 0 || !s->down_reason[0])
		snprintf(s->down_reason, sizeof(s->down_reason), "%.*s",
			 log_reason_len(why, strlen(why)), why);
	store_note_down(s, why);
}

static void rconn_notice(struct redis_conn *c, const char *msg, size_t len)
{
	struct store_redis *s = ((struct rconn *)c)->s;
	if (s->on_reset)
		s->on_reset(s->on_reset_arg, msg, len);
}

static void rconn_checked(struct redis_conn *c, const char *refusal);

static const struct redis_conn_ops rconn_ops = {
	.connected = rconn_connected,
	.verified = rconn_verified,
	.ready = rconn_ready,
	.lost = rconn_lost,
	.checked = rconn_checked,
	.flush = rconn_flush,
	.notice = rconn_notice,
};

/* ---- store interface ---- */

/* Whether rc may take one more request that has timeout_ms to be decided
 * (admission_admits: a queue Redis cannot work through in time is refused). */
static int rconn_admits(struct rconn *rc, int64_t timeout_ms)
{
	return admission_admits(&rc->adm, rc->queued, timeout_ms, clock_mono_us());
}

/*
 * Every decision on one (action, user) goes through the same connection, so
 * a client's pipelined requests on a key reach Redis in the order sent (an
 * ALLOW after a RESET sees the reset). Falls over to another live connection
 * only when that one is down, full or behind (rconn_admits).
 */
static struct rconn *pick_conn(struct store_redis *s, const struct store_request *req)
{
	/* a decision over several pairs goes where its first pair's would */
	const struct policy *p = req->npairs > 0 ? req->pairs[0].policy : req->policy;
	const char *user = req->npairs > 0 ? req->pairs[0].user : req->user;
	size_t user_len = req->npairs > 0 ? req->pairs[0].user_len : req->user_len;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < p->name_len; i++)
		h = (h ^ (uint8_t)p->name[i]) * 16777619u;
	for (size_t i = 0; i < user_len; i++)
		h = (h ^ (uint8_t)user[i]) * 16777619u;
	for (int i = 0; i < s->nconns; i++) {
		struct rconn *rc = &s->conns[(h + (uint32_t)i) % (uint32_t)s->nconns];
		if (rc->c.state != REDIS_CONN_DOWN && rc->c.link &&
		    rconn_admits(rc, req->timeout_ms))
			return rc;
	}
	return NULL;
}

/* Answers a request that never became an sreq. */
static void answer_now(store_done_fn *done, store_node_done_fn *node_done, void *arg,
		       const struct store_result *res)
{
	if (node_done)
		node_done(arg, res, NULL);
	else
		done(arg, res);
}

static void submit(struct store_redis *s, const struct store_request *req, enum store_node_send how,
		   store_done_fn *done, store_node_done_fn *node_done, void *arg)
{
	struct store_result res = {.status = STORE_UNAVAILABLE, .detail = "redis is not connected"};
	if (s->t.closing) {
		res.detail = "shutting down";
		answer_now(done, node_done, arg, &res);
		return;
	}
	if (req->prefix_len != s->prefix_len ||
	    memcmp(req->prefix, s->prefix, req->prefix_len) != 0)
		redis_learn_prefix(s, req->prefix, req->prefix_len);
	struct rconn *rc = pick_conn(s, req);
	if (!rc) {
		int any = 0;
		for (int i = 0; i < s->nconns; i++)
			any |= s->conns[i].c.state != REDIS_CONN_DOWN;
		if (any) {
			res.status = STORE_OVERLOAD;
			res.detail = "too many requests waiting on redis";
			s->refused++;
			if ((s->refused & (s->refused - 1)) ==
			    0) /* 1, 2, 4, ...: not a log flood */
				log_warn("redis: more requests waiting than it decides in time; "
					 "%llu refused so far (store overload)",
					 s->refused);
		}
		answer_now(done, node_done, arg, &res);
		return;
	}
	struct sreq *r = sreq_get(s);
	if (!r) {
		res.status = STORE_OVERLOAD;
		res.detail = "out of memory";
		answer_now(done, node_done, arg, &res);
		return;
	}
	if (store_request_save(&r->sv, req) < 0) {
		sreq_put(s, r);
		res.status = STORE_OVERLOAD;
		res.detail = "out of memory";
		answer_now(done, node_done, arg, &res);
		return;
	}
	r->done = done;
	r->node_done = node_done;
	r->arg = arg;
	r->how = how;
	r->deadline_us = clock_mono_us() + (uint64_t)req->timeout_ms * 1000u;
	/* the longest deadline seen: a gRPC call's shorter one must not make
	 * the stall check (twice this) cut a connection that is only slow */
	if (req->timeout_ms > s->timeout_ms) {
		s->timeout_ms = req->timeout_ms;
		s->t.stall_ms = s->timeout_ms * 2 > STALL_MIN_MS ? s->timeout_ms * 2 : STALL_MIN_MS;
	}
	deadline_insert(s, r);
	rconn_enqueue(rc, r);
}

static void redis_submit(struct store *base, const struct store_request *req, store_done_fn *done,
			 void *arg)
{
	submit((struct store_redis *)base, req, STORE_NODE_BATCHED, done, NULL, arg);
}

void store_redis_submit_node(struct store *node, const struct store_request *req,
			     enum store_node_send how, store_node_done_fn *done, void *arg)
{
	submit((struct store_redis *)node, req, how, NULL, done, arg);
}

static size_t redis_pending(const struct store *base)
{
	return ((const struct store_redis *)base)->pending;
}

static unsigned long redis_generation(const struct store *base)
{
	return ((const struct store_redis *)base)->generation;
}

static int redis_resets_followed(const struct store *base)
{
	const struct store_redis *s = (const struct store_redis *)base;
	return s->reset_channel && s->subconn.c.state == REDIS_CONN_UP && s->subconn.c.verified;
}

static void redis_health(const struct store *base, struct store_health *h)
{
	const struct store_redis *s = (const struct store_redis *)base;
	for (int i = 0; i < s->nconns; i++) {
		h->conns++;
		if (s->conns[i].c.state == REDIS_CONN_UP && s->conns[i].c.verified)
			h->conns_up++;
	}
	h->conns_lost += s->generation;
	if (!h->down_reason && s->down_reason[0])
		h->down_reason = s->down_reason;
	if (s->refusing && h->conns_up) {
		h->refusing++;
		if (!h->refusal)
			h->refusal = s->refusal;
	}
}

static void redis_free(struct store *base)
{
	struct store_redis *s = (struct store_redis *)base;
	s->t.closing = 1;
	for (int i = -1; i < s->nconns; i++) {
		struct rconn *rc = i < 0 ? &s->subconn : &s->conns[i];
		if (rc->open) {
			batch_abort(s, rc->open, STORE_UNAVAILABLE, "shutting down");
			rc->open = NULL;
		}
		redis_conn_free(&rc->c);
	}
	while (s->head)
		answer_status(s->head, STORE_UNAVAILABLE, "shutting down");
	event_free(s->timer);
	event_free(s->check_timer);
	while (s->free_pool) {
		struct sreq *r = s->free_pool;
		s->free_pool = r->next;
		free(r);
	}
	redis_target_free(&s->t);
	free(s->call.argv);
	free(s->call.argl);
	free(s->call.arena);
	free(s->cmdbuf);
	free(s->reset_channel);
	free(s);
}

static void redis_watch_resets(struct store *base, const char *prefix, store_reset_fn *fn,
			       void *arg)
{
	struct store_redis *s = (struct store_redis *)base;
	if (!prefix) {
		/* stop: the subscriber is not reconnected */
		free(s->reset_channel);
		s->reset_channel = NULL;
		s->subconn.c.channel = NULL;
		s->on_reset = NULL;
		if (s->subconn.c.link)
			rlink_disconnect(s->subconn.c.link);
		return;
	}
	size_t plen = strlen(prefix);
	char *channel = malloc(KEYS_RESET_CHANNEL_MAX + 1);
	if (!channel) {
		log_error("out of memory: RESET notices from other daemons are not followed");
		return;
	}
	channel[keys_reset_channel(channel, prefix,
				   plen < KEYS_PREFIX_MAX ? plen : KEYS_PREFIX_MAX)] = '\0';
	redis_learn_prefix(s, prefix, strlen(prefix));
	s->on_reset = fn;
	s->on_reset_arg = arg;
	if (s->reset_channel && strcmp(s->reset_channel, channel) == 0) {
		free(channel);
		return;
	}
	free(s->reset_channel);
	s->reset_channel = channel;
	s->subconn.c.channel = channel;
	/* Resubscribes on reconnect; the lost connection clears the deny
	 * cache (generation), so no notice is missed in between. */
	redis_conn_restart(&s->subconn.c);
}

/* ---- commands that are no decision (store_call) ---- */

/* One command in flight: answered once, by its reply or its deadline; freed
 * by hiredis's callback, which always comes (NULL on disconnect). */
struct rcall {
	store_call_fn *done;
	void *arg;
	struct event *timer;
	int answered;
	/* sc->durable with redis.wait_replicas: the call's reply, kept until
	 * its WAIT answers (rcall_wait_cb), and the WAIT's own callback owed */
	struct store_redis *s;
	redisReply *kept;
	int waiting;
};

/* A copy of r that outlives its callback (rlink frees r after it). */
static redisReply *reply_copy(const redisReply *r)
{
	redisReply *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->type = r->type;
	c->integer = r->integer;
	if (r->str) {
		c->str = malloc(r->len + 1);
		if (!c->str)
			goto fail;
		memcpy(c->str, r->str, r->len);
		c->str[r->len] = '\0';
		c->len = r->len;
	}
	if (r->elements) {
		c->element = calloc(r->elements, sizeof(*c->element));
		if (!c->element)
			goto fail;
		c->elements = r->elements;
		for (size_t i = 0; i < r->elements; i++)
			if (!(c->element[i] = reply_copy(r->element[i])))
				goto fail;
	}
	return c;
fail:
	freeReplyObject(c);
	return NULL;
}

static void rcall_answer(struct rcall *c, const struct redisReply *reply, const char *why)
{
	if (c->answered)
		return;
	c->answered = 1;
	event_del(c->timer);
	c->done(c->arg, reply, why);
}

static void rcall_free(struct rcall *c)
{
	if (c->kept)
		freeReplyObject(c->kept);
	event_free(c->timer);
	free(c);
}

static void rcall_cb(struct rlink *l, redisReply *reply, void *privdata)
{
	(void)l;
	struct rcall *c = privdata;
	if (c->waiting) {
		/* kept for the WAIT after it; an error reply wrote nothing */
		if (reply && reply->type != REDIS_REPLY_ERROR) {
			c->kept = reply_copy(reply);
			if (!c->kept)
				rcall_answer(c, NULL, "out of memory");
		} else {
			rcall_answer(c, reply, reply ? NULL : "connection to redis lost");
		}
		return;
	}
	rcall_answer(c, reply, reply ? NULL : "connection to redis lost");
	rcall_free(c);
}

static void rcall_wait_cb(struct rlink *l, redisReply *reply, void *privdata)
{
	(void)l;
	struct rcall *c = privdata;
	struct store_redis *s = c->s;
	if (c->kept) {
		if (reply && reply->type == REDIS_REPLY_INTEGER &&
		    reply->integer >= s->wait_replicas) {
			rcall_answer(c, c->kept, NULL);
		} else {
			char why[160];
			if (!reply)
				snprintf(why, sizeof(why),
					 "connection to redis lost before replicas acknowledged");
			else if (reply->type == REDIS_REPLY_ERROR)
				snprintf(why, sizeof(why), "WAIT: %.100s", reply->str);
			else
				snprintf(why, sizeof(why),
					 "%lld of %d replicas acknowledged within %lld ms",
					 reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1LL,
					 s->wait_replicas, (long long)s->wait_timeout_ms);
			rcall_answer(c, c->kept, why); /* decided, not kept safe */
		}
	}
	rcall_free(c);
}

static void rcall_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	rcall_answer(arg, NULL, "redis did not answer in time");
}

static void redis_call(struct store *base, const struct store_call *sc, store_call_fn *done,
		       void *arg)
{
	struct store_redis *s = (struct store_redis *)base;
	struct rconn *rc = NULL;
	for (int i = 0; i < s->nconns && !rc; i++)
		if (s->conns[i].c.state == REDIS_CONN_UP && s->conns[i].c.link)
			rc = &s->conns[i];
	if (!rc || s->t.closing) {
		done(arg, NULL, "redis is not connected");
		return;
	}
	struct rcall *c = calloc(1, sizeof(*c));
	if (c)
		c->timer = evtimer_new(s->t.base, rcall_timeout, c);
	if (!c || !c->timer) {
		free(c);
		done(arg, NULL, "out of memory");
		return;
	}
	c->done = done;
	c->arg = arg;
	c->s = s;
	const char *argv[STORE_CALL_ARGS_MAX + 3];
	size_t argl[STORE_CALL_ARGS_MAX + 3];
	int argc = 0;
	if (sc->script) {
		argv[0] = "EVALSHA";
		argv[1] = s->t.script_sha;
		argv[2] = "1";
		argl[0] = 7;
		argl[1] = 40;
		argl[2] = 1;
		argc = 3;
	}
	for (int i = 0; i < sc->argc && i < STORE_CALL_ARGS_MAX; i++, argc++) {
		argv[argc] = sc->argv[i];
		argl[argc] = sc->argvlen[i];
	}
	c->waiting = sc->durable && s->wait_replicas > 0;
	if (rlink_command_argv(rc->c.link, rcall_cb, c, argc, argv, argl) < 0) {
		event_free(c->timer);
		free(c);
		done(arg, NULL, "redis connection is closing");
		return;
	}
	/* queued right behind the call: both callbacks come, in order, even on
	 * a disconnect; if this one cannot be queued the link is closing and
	 * the call's callback (NULL) answers and frees */
	if (c->waiting && rlink_command(rc->c.link, rcall_wait_cb, c, "WAIT %d %lld",
					s->wait_replicas, (long long)s->wait_timeout_ms) < 0)
		c->waiting = 0;
	struct timeval tv = {.tv_sec = sc->timeout_ms / 1000,
			     .tv_usec = (sc->timeout_ms % 1000) * 1000};
	evtimer_add(c->timer, &tv);
	redis_conn_kick(&rc->c);
}

static const struct store_ops redis_ops = {
	.submit = redis_submit,
	.free = redis_free,
	.pending = redis_pending,
	.generation = redis_generation,
	.watch_resets = redis_watch_resets,
	.resets_followed = redis_resets_followed,
	.health = redis_health,
	.call = redis_call,
	.multi = 1,
};

/* ---- knowing that Redis decides ----
 *
 * A connection can be up while every decision fails: a Redis user whose ACL
 * lacks a command the script runs, maxmemory reached, a dataset loading.
 * That must be loud, not a quiet stream of on_store_error answers: errors
 * are logged (at most every ERROR_LOG_US), the store reports itself refusing
 * (/health), and the script's check runs after each connect and, while
 * refusing, every CHECK_INTERVAL_MS, so a fix is noticed without traffic.
 */

static void redis_refusing(struct store_redis *s, const char *why, size_t len)
{
	/* what the check found names the fix: errors of decisions keep it */
	if (!s->refusing || !s->check_logged[0] || why == s->check_logged)
		snprintf(s->refusal, sizeof(s->refusal), "%.*s", (int)(len < 190 ? len : 190), why);
	if (s->refusing)
		return;
	s->refusing = 1;
	struct timeval tv = {.tv_sec = CHECK_INTERVAL_MS / 1000,
			     .tv_usec = (CHECK_INTERVAL_MS % 1000) * 1000};
	evtimer_add(s->check_timer, &tv);
}

static void redis_deciding(struct store_redis *s)
{
	s->check_logged[0] = '\0';
	if (!s->refusing)
		return;
	s->refusing = 0;
	s->refusal[0] = '\0';
	evtimer_del(s->check_timer);
	log_info("%s decides again", s->name);
}

/* An error Redis answered to decisions: logged, but not once per batch. */
static void redis_log_error(struct store_redis *s, const char *what, const char *text, size_t len)
{
	uint64_t now = clock_mono_us();
	if (s->error_logged_us && now - s->error_logged_us < ERROR_LOG_US) {
		s->errors_unlogged++;
		return;
	}
	if (s->errors_unlogged)
		log_warn("%s %s: %.*s (and %lu more errors in the last %u s); answered per "
			 "on_store_error",
			 s->name, what, (int)(len < 200 ? len : 200), text, s->errors_unlogged,
			 ERROR_LOG_US / 1000000u);
	else
		log_warn("%s %s: %.*s; answered per on_store_error", s->name, what,
			 log_reason_len(text, len < 200 ? len : 200), text);
	s->error_logged_us = now;
	s->errors_unlogged = 0;
}

static void rconn_checked(struct redis_conn *c, const char *refusal)
{
	struct store_redis *s = ((struct rconn *)c)->s;
	if (!refusal) {
		/* the check runs no WAIT: a replica shortfall clears only when
		 * one succeeds (wait_cb) */
		if (!s->replicas_short)
			redis_deciding(s);
		return;
	}
	if (strcmp(s->check_logged, refusal) != 0) {
		log_error("%s cannot decide: %.*s; every decision is answered per on_store_error "
			  "until this is fixed (docs/security.md gives the ACL)",
			  s->name, log_reason_len(refusal, strlen(refusal)), refusal);
		snprintf(s->check_logged, sizeof(s->check_logged), "%s", refusal);
	}
	redis_refusing(s, s->check_logged, strlen(s->check_logged));
}

/* Runs the script's check on rc (an up connection whose script is loaded). */
static void rconn_check(struct rconn *rc)
{
	/* no prefix known yet: a request or watch_resets brings it */
	redis_conn_check(&rc->c, rc->s->prefix, rc->s->prefix_len);
}

static void check_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct store_redis *s = arg;
	for (int i = 0; i < s->nconns; i++)
		if (s->conns[i].c.state == REDIS_CONN_UP && s->conns[i].c.verified) {
			rconn_check(&s->conns[i]);
			break;
		}
	struct timeval tv = {.tv_sec = CHECK_INTERVAL_MS / 1000,
			     .tv_usec = (CHECK_INTERVAL_MS % 1000) * 1000};
	if (s->refusing)
		evtimer_add(s->check_timer, &tv);
}

/* The key prefix the check uses: the one requests use. */
static void redis_learn_prefix(struct store_redis *s, const char *prefix, size_t len)
{
	if (len >= sizeof(s->prefix) ||
	    (len == s->prefix_len && memcmp(s->prefix, prefix, len) == 0))
		return;
	int first = s->prefix_len == 0;
	memcpy(s->prefix, prefix, len);
	s->prefix[len] = '\0';
	s->prefix_len = len;
	if (first) /* connections that came up before it was known */
		for (int i = 0; i < s->nconns; i++)
			if (s->conns[i].c.state == REDIS_CONN_UP && s->conns[i].c.verified) {
				rconn_check(&s->conns[i]);
				break;
			}
}

static struct store *redis_new(struct event_base *base, const struct config_redis *cfg,
			       const char *address, int cluster, struct tls_client *tls, char *err,
			       size_t errlen)
{
	struct store_redis *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->base.ops = &redis_ops;
	s->nconns = cfg->connections < 1		 ? 1
		    : cfg->connections > MAX_CONNECTIONS ? MAX_CONNECTIONS
							 : cfg->connections;
	s->cluster = cluster;
	struct redis_target *t = &s->t;
	t->base = base;
	t->ops = &rconn_ops;
	t->stall_ms = STALL_MIN_MS; /* twice the longest deadline once requests come */
	t->database = cfg->database;
	t->script = cluster ? lua_ratelimit_cluster_src : lua_ratelimit_src;
	t->script_len = cluster ? lua_ratelimit_cluster_len : lua_ratelimit_len;
	t->script_sha = cluster ? lua_ratelimit_cluster_sha : lua_ratelimit_sha;
	if (redis_target_init(t, address, cfg->username, cfg->password, tls, err, errlen) < 0) {
		free(s);
		return NULL;
	}
	if (t->host)
		snprintf(s->name, sizeof(s->name), "redis %s:%d%s", t->host, t->port,
			 tls ? " (TLS)" : "");
	else
		snprintf(s->name, sizeof(s->name), "redis unix:%s", t->unix_path);
	s->max_batch = MAX_BATCH;
	s->wait_replicas = cfg->wait_replicas;
	s->wait_timeout_ms = cfg->wait_timeout_ms;
	s->call.argv = malloc(redis_script_argv_max(MAX_BATCH) * sizeof(*s->call.argv));
	s->call.argl = malloc(redis_script_argv_max(MAX_BATCH) * sizeof(*s->call.argl));
	s->call.arena = malloc(redis_script_arena_size(MAX_BATCH));
	s->cmdbuf = malloc(redis_script_resp_max(MAX_BATCH) + lua_ratelimit_cluster_len);
	if (!s->call.argv || !s->call.argl || !s->call.arena || !s->cmdbuf) {
		free(s->call.argv);
		free(s->call.argl);
		free(s->call.arena);
		free(s->cmdbuf);
		snprintf(err, errlen, "out of memory");
		redis_target_free(t);
		free(s);
		return NULL;
	}
	s->timer = evtimer_new(base, timer_cb, s);
	s->check_timer = evtimer_new(base, check_timer_cb, s);
	for (int i = 0; i < s->nconns; i++) {
		struct rconn *rc = &s->conns[i];
		rc->s = s;
		redis_conn_init(&rc->c, t, i, 0);
		redis_conn_connect(&rc->c);
	}
	struct rconn *sc = &s->subconn;
	sc->s = s;
	redis_conn_init(&sc->c, t, -1, 1); /* connects with store_watch_resets */
	return &s->base;
}

struct store *store_redis_new(struct event_base *base, const struct config_redis *cfg,
			      struct tls_client *tls, char *err, size_t errlen)
{
	return redis_new(base, cfg, cfg->address, 0, tls, err, errlen);
}

void store_redis_follow_readonly(struct store *st)
{
	((struct store_redis *)st)->alone = 1;
}

struct store *store_redis_new_node(struct event_base *base, const struct config_redis *cfg,
				   const char *address, struct tls_client *tls, char *err,
				   size_t errlen)
{
	return redis_new(base, cfg, address, 1, tls, err, errlen);
}
