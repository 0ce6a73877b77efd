/*
 * redis_conn.c - one Redis connection of a pool (an rlink): connect with a
 * timeout, setup and the script's check, reconnect backoff, stall detection.
 */
#include "redis_conn.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "clock.h"
#include "log.h"
#include "rlink.h"
#include "stats.h"
#include "store.h"
#include "store_reply.h"
#include "tls.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 500
#define CONNECT_TIMEOUT_MS 1000
/* Up this long: the next reconnect starts from the shortest backoff. */
#define STABLE_US 1000000u
/* A subscriber that heard nothing for this long PINGs: a subscription
 * gone silently (a peer powered off, a middlebox that dropped it) would
 * otherwise count as followed forever, and RESETs be missed unseen. */
#define SUB_PING_MS 1000

int redis_target_init(struct redis_target *t, const char *address, const char *username,
		      const char *password, struct tls_client *tls, char *err, size_t errlen)
{
	t->tls = tls_client_ref(tls);
	if (strncmp(address, "unix:", 5) == 0) {
		t->unix_path = strdup(address + 5);
		if (!t->unix_path)
			goto oom;
	} else {
		char host[256];
		if (addr_split(address, host, sizeof(host), &t->port) < 0) {
			snprintf(err, errlen, "redis address %s: expected host:port", address);
			return -1;
		}
		t->host = strdup(host);
		if (!t->host)
			goto oom;
	}
	if ((username && !(t->username = strdup(username))) ||
	    (password && !(t->password = strdup(password))))
		goto oom;
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	redis_target_free(t);
	return -1;
}

void redis_target_free(struct redis_target *t)
{
	free(t->host);
	free(t->unix_path);
	free(t->username);
	free(t->password);
	t->host = t->unix_path = t->username = t->password = NULL;
	tls_client_unref(t->tls);
	t->tls = NULL;
}

/* End of a loop turn: the owner sends what it holds, then everything queued is written. */
static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct redis_conn *c = arg;
	c->t->ops->flush(c);
	if (c->link)
		rlink_flush(c->link); /* may lose the link: c->link is then NULL */
}

void redis_conn_kick(struct redis_conn *c)
{
	event_active(c->flush, EV_TIMEOUT, 0);
}

/* ---- connections ---- */

static void schedule_retry(struct redis_conn *c)
{
	if (c->t->closing)
		return;
	/* A connection that stayed up a while earns a quick reconnect; one
	 * dropped at once (Redis failing every command, a proxy closing) does
	 * not, so there is no reconnect storm. */
	if (c->up_since_us && clock_mono_us() - c->up_since_us >= STABLE_US)
		c->backoff_ms = 0;
	c->up_since_us = 0;
	if (c->backoff_ms == 0)
		c->backoff_ms = BACKOFF_MIN_MS;
	else if (c->backoff_ms < BACKOFF_MAX_MS)
		c->backoff_ms =
			c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
	/* jitter in [backoff/2, backoff] so a pool (and a fleet) does not reconnect in step */
	int ms = c->backoff_ms / 2 + rand() % (c->backoff_ms / 2 + 1);
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	evtimer_add(c->retry, &tv);
}

void redis_conn_retry_now(struct redis_conn *c)
{
	if (c->state == REDIS_CONN_DOWN && evtimer_pending(c->retry, NULL)) {
		struct timeval now = {0, 0};
		evtimer_add(c->retry, &now);
	}
}

void redis_conn_verified(struct redis_conn *c)
{
	c->verified = 1;
	c->last_rx_us = clock_mono_us();
	c->t->ops->verified(c);
}

static void sub_ping_arm(struct redis_conn *c)
{
	struct timeval tv = {.tv_sec = SUB_PING_MS / 1000, .tv_usec = (SUB_PING_MS % 1000) * 1000};
	if (c->ping)
		evtimer_add(c->ping, &tv);
}

static void conn_lost(struct redis_conn *c, const char *why)
{
	c->ping_sent_us = 0;
	if (c->ping)
		evtimer_del(c->ping);
	/* State may be lost only with a Redis we were talking to (it may come
	 * back empty); failed attempts to reach one change nothing. */
	int was_up = c->state == REDIS_CONN_UP;
	c->link = NULL;
	c->state = REDIS_CONN_DOWN;
	c->verified = 0;
	evtimer_del(c->connect_timeout);
	c->t->ops->lost(c, why, was_up);
	schedule_retry(c);
}

static void on_connect(const struct rlink *l, int ok)
{
	struct redis_conn *c = l->data;
	if (!c)
		return;
	if (!ok) {
		conn_lost(c, l->errstr[0] ? l->errstr : "connect failed");
		return;
	}
	evtimer_del(c->connect_timeout);
	c->state = REDIS_CONN_UP;
	c->up_since_us = clock_mono_us();
	c->last_rx_us = c->up_since_us;
	c->t->ops->connected(c);
}

static void on_disconnect(const struct rlink *l, int ok)
{
	struct redis_conn *c = l->data;
	if (!c)
		return;
	conn_lost(c, ok ? "connection closed" : l->errstr);
}

static void setup_reply_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	struct redis_conn *c = l->data;
	const char *what = privdata;
	if (!rep || !c)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		/* AUTH errors never echo the password; Redis's message doesn't either.
		 * Logged once until Redis works again, not on every reconnect. */
		struct redis_target *t = c->t;
		if (!t->setup_err_logged)
			log_error("redis %s failed: %.200s", what, rep->str);
		t->setup_err_logged = 1;
		/* Dropped now, not after the replies owed: behind a failed AUTH a
		 * Redis whose default user needs no password (a fresh one) still
		 * answers SCRIPT LOAD or SUBSCRIBE, and that connection would
		 * count as working, "connected" be logged and the pool retried at
		 * once, a reconnect storm of thousands a second. */
		if (strcmp(what, "SCRIPT LOAD") != 0 && c->link)
			rlink_free(c->link); /* on_disconnect: conn_lost */
		return;
	}
	if (strcmp(what, "SCRIPT LOAD") == 0) {
		redis_conn_verified(c);
		c->t->ops->ready(c);
	}
}

static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct redis_conn *c = arg;
	if (c->state != REDIS_CONN_CONNECTING || !c->link)
		return;
	struct rlink *l = c->link;
	/* A TLS handshake that stalls (a peer that does not speak TLS) ends
	 * here too, and says so. Pending requests get NULL replies. */
	int handshaking = rlink_handshaking(l);
	if (handshaking)
		stats.redis_tls_failures++;
	l->data = NULL;
	c->link = NULL;
	rlink_free(l);
	conn_lost(c, handshaking ? "TLS handshake: timed out (does the server speak TLS?)"
				 : "connect timed out");
}

/* Every RESET, by any daemon, publishes the pair's hash tag (see the script). */
static void notice_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct redis_conn *c = l->data;
	if (!c || !rep || rep->type != REDIS_REPLY_ARRAY)
		return;
	/* the answer to sub_ping_cb's PING, ["pong", ""] */
	if (rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[0]->len == 4 && memcmp(rep->element[0]->str, "pong", 4) == 0) {
		c->last_rx_us = clock_mono_us();
		c->ping_sent_us = 0;
		return;
	}
	if (rep->elements != 3)
		return;
	const redisReply *kind = rep->element[0], *msg = rep->element[2];
	if (kind->type != REDIS_REPLY_STRING)
		return;
	c->last_rx_us = clock_mono_us();
	if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
		redis_conn_verified(c);
		sub_ping_arm(c);
		return;
	}
	if (kind->len == 7 && memcmp(kind->str, "message", 7) == 0 &&
	    msg->type == REDIS_REPLY_STRING)
		c->t->ops->notice(c, msg->str, msg->len);
}

/*
 * A subscriber's proof of life, every SUB_PING_MS: a PING when it heard
 * nothing for that long; replaced when a PING goes unanswered for the
 * target's stall_ms, as a request connection is (its owner then sees the
 * subscription lost, and drops what it knew only while following it).
 */
static void sub_ping_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct redis_conn *c = arg;
	if (!c->link || c->state != REDIS_CONN_UP || !c->verified)
		return; /* armed again when the next SUBSCRIBE is confirmed */
	uint64_t now = clock_mono_us();
	if (c->ping_sent_us) {
		if (now - c->ping_sent_us >= (uint64_t)c->t->stall_ms * 1000u) {
			log_warn("redis subscription: no answer to PING for %lld ms; reconnecting "
				 "(what it knew from RESET notices is dropped)",
				 (long long)((now - c->ping_sent_us) / 1000));
			rlink_free(c->link); /* on_disconnect: conn_lost */
			return;
		}
	} else if (now - c->last_rx_us >= SUB_PING_MS * 1000u) {
		if (rlink_subscribed_ping(c->link) == 0)
			c->ping_sent_us = now;
	}
	sub_ping_arm(c);
}

void redis_conn_connect(struct redis_conn *c)
{
	struct redis_target *t = c->t;
	struct rlink *l = rlink_connect(t->base, t->host, t->port, t->unix_path, t->tls);
	if (!l) {
		conn_lost(c, "out of memory");
		return;
	}
	if (l->err) {
		char why[sizeof(l->errstr)];
		snprintf(why, sizeof(why), "%s", l->errstr);
		rlink_free(l);
		conn_lost(c, why);
		return;
	}
	l->data = c;
	/*
	 * RESET notices first: when a loop turn has both the notice and a
	 * client's request for that pair, the request must see the reset. Only
	 * them: libevent runs a lower priority only in a turn with nothing
	 * active above it, so replies at priority 0 would starve the clients,
	 * the writes to Redis and the deadlines while replies keep coming.
	 */
	if (c->sub)
		rlink_set_priority(l, 0);
	rlink_set_callbacks(l, on_connect, on_disconnect);
	c->link = l;
	c->state = REDIS_CONN_CONNECTING;
	/* Queued before any request so they reach Redis first. */
	if (t->password) {
		if (t->username)
			rlink_command(l, setup_reply_cb, "AUTH", "AUTH %s %s", t->username,
				      t->password);
		else
			rlink_command(l, setup_reply_cb, "AUTH", "AUTH %s", t->password);
	}
	if (c->sub) {
		rlink_subscribe(l, notice_cb, NULL, c->channel);
		goto timeout;
	}
	if (t->database)
		rlink_command(l, setup_reply_cb, "SELECT", "SELECT %d", t->database);
	const char *argv[3] = {"SCRIPT", "LOAD", t->script};
	size_t argl[3] = {6, 4, t->script_len};
	rlink_command_argv(l, setup_reply_cb, "SCRIPT LOAD", 3, argv, argl);
timeout:;
	struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_MS / 1000,
			     .tv_usec = (CONNECT_TIMEOUT_MS % 1000) * 1000};
	evtimer_add(c->connect_timeout, &tv);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct redis_conn *c = arg;
	if (c->sub && !c->channel)
		return; /* no longer watching */
	if (c->state == REDIS_CONN_DOWN && !c->t->closing)
		redis_conn_connect(c);
}

void redis_conn_restart(struct redis_conn *c)
{
	if (c->link)
		rlink_disconnect(c->link);
	else if (c->state == REDIS_CONN_DOWN && !evtimer_pending(c->retry, NULL))
		redis_conn_connect(c);
}

void redis_conn_check_stall(struct redis_conn *c, uint64_t now, int64_t stall_ms)
{
	if (!c->link || c->state != REDIS_CONN_UP || c->inflight == 0)
		return;
	uint64_t since = c->last_rx_us > c->busy_since_us ? c->last_rx_us : c->busy_since_us;
	if (now - since < (uint64_t)stall_ms * 1000u)
		return;
	log_warn("redis connection %d: no reply for %lld ms with %u requests owed; reconnecting",
		 c->idx, (long long)((now - since) / 1000), c->inflight);
	/* Owed requests are called back with NULL, on_disconnect schedules the
	 * reconnect. (rlink_disconnect would wait for the replies that never come.) */
	rlink_free(c->link);
}

static void check_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct redis_conn *c = l->data;
	if (!rep || !c)
		return; /* connection lost: the next connect checks again */
	char what[200];
	if (rep->type == REDIS_REPLY_ERROR) {
		if (store_reply_error(rep->str, rep->len) == STORE_ERROR_NOSCRIPT)
			return; /* flushed meanwhile: the next decision loads it again */
		snprintf(what, sizeof(what), "%.*s", (int)(rep->len < 190 ? rep->len : 190),
			 rep->str);
	} else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 0) {
		c->t->ops->checked(c, NULL);
		return;
	} else if (rep->type == REDIS_REPLY_ARRAY) {
		/* What the ACL lacks, as the rules that would grant it ("+zadd",
		 * "~rl:*", "&rl:reset"); or Redis's own text of another refusal
		 * (a replica's READONLY), which no ACL rule would cure. */
		size_t n = 0;
		for (int acl = 1; acl >= 0; acl--) {
			int first = 1;
			for (size_t i = 0; i < rep->elements && n < sizeof(what); i++) {
				const redisReply *e = rep->element[i];
				if ((e->type != REDIS_REPLY_STRING &&
				     e->type != REDIS_REPLY_STATUS) ||
				    e->len == 0)
					continue;
				int rule = e->str[0] == '+' || e->str[0] == '~' || e->str[0] == '&';
				if (rule != acl)
					continue;
				if (first)
					n += (size_t)snprintf(
						what + n, sizeof(what) - n, "%s%s", n ? "; " : "",
						acl ? "the redis user lacks" : "redis refuses:");
				first = 0;
				if (n < sizeof(what))
					n += (size_t)snprintf(what + n, sizeof(what) - n, " %.*s",
							      (int)(e->len < 100 ? e->len : 100),
							      e->str);
			}
		}
		if (n == 0)
			snprintf(what, sizeof(what), "redis refuses the check");
	} else {
		return; /* not our script's answer: nothing to say about Redis */
	}
	c->t->ops->checked(c, what);
}

void redis_conn_check(struct redis_conn *c, const char *prefix, size_t prefix_len)
{
	if (!c->link || !prefix_len)
		return; /* no prefix known yet */
	const char *argv[] = {"EVALSHA", c->t->script_sha, "0", "0", "check", prefix};
	size_t argl[] = {7, 40, 1, 1, 5, prefix_len};
	rlink_command_argv(c->link, check_cb, NULL, 6, argv, argl);
}

void redis_conn_init(struct redis_conn *c, struct redis_target *t, int idx, int sub)
{
	c->t = t;
	c->idx = idx;
	c->sub = sub;
	c->state = REDIS_CONN_DOWN;
	c->retry = evtimer_new(t->base, retry_cb, c);
	c->connect_timeout = evtimer_new(t->base, connect_timeout_cb, c);
	c->flush = event_new(t->base, -1, 0, flush_cb, c);
	if (sub)
		c->ping = evtimer_new(t->base, sub_ping_cb, c);
}

void redis_conn_free(struct redis_conn *c)
{
	if (c->link) {
		struct rlink *l = c->link;
		l->data = NULL;
		c->link = NULL;
		rlink_free(l); /* runs pending callbacks with NULL */
	}
	if (c->retry)
		event_free(c->retry);
	if (c->connect_timeout)
		event_free(c->connect_timeout);
	if (c->flush)
		event_free(c->flush);
	if (c->ping)
		event_free(c->ping);
}
