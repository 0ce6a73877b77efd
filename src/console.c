/*
 * console.c - the live console on the metrics endpoint (console.h):
 *   GET /console, /console/console.js, /console/console.css: the page, its
 *     script and style, embedded at build time (src/www); nothing else is
 *     loaded, and the Content-Security-Policy says so to the browser;
 *   GET /console/state: what the page shows, as JSON (read every couple of
 *     seconds): the store's health, every action with its decisions so far,
 *     the heaviest denied users, and, for a request with the token of an
 *     identity with the admin right, the run-time overrides;
 *   POST /console/overrides (action, user, spec, ttl as a form) and DELETE
 *     /console/overrides?action=&user=: OVERRIDE and UNOVERRIDE, parsed by
 *     the protocols' own parser and executed by cmd_execute as from a
 *     listener with admin: true and auth: required, so the token's identity
 *     and rights decide as they do everywhere else.
 * Users go both ways in their shown form (shown.h), as TOP and /top show them.
 */
#include "console.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "clients.h"
#include "clock.h"
#include "cmd.h"
#include "config.h"
#include "console_www.h"
#include "envoy_rules.h"
#include "form.h"
#include "keys.h"
#include "list.h"
#include "local.h"
#include "metrics_conn.h"
#include "override_live.h"
#include "policy.h"
#include "proto.h"
#include "server.h"
#include "shown.h"
#include "stats.h"
#include "store.h"
#include "store_factory.h"
#include "view.h"

/* A form is a few short fields; an override's user is at most 512 bytes
 * (3 times that %-encoded, and again for the shown form's %). */
#define CONSOLE_FORM_MAX 8192
/* The heaviest denied users on the page, across every action. */
#define CONSOLE_TOP_USERS 10

/*
 * An override from its request until its answer is written: the store
 * works on it (in_store), then its answer goes out (writing). Either its
 * connection closes first (closed: evhttp frees the request, req NULL) or
 * the answer is written (written); it ends when neither is left.
 */
struct console_op {
	struct cmd_slot slot; /* first: the slot's completion finds its op */
	struct console *c;    /* NULL once the console is gone */
	struct evhttp_request *req;
	struct evhttp_connection *conn; /* req's, while req is there */
	struct metrics_conns *conns;	/* conn's keeper, for its close callback */
	int in_store, writing;
	struct list_link link; /* c->ops, while c is */
};

struct console {
	struct server *srv;
	struct metrics_conns *conns;
	struct list ops; /* of struct console_op */
	size_t pending;	 /* ops waiting for the store */
	int stopping;	 /* the daemon is shutting down: no new override */
	/* console_drain's: called once no op is pending */
	void (*drained)(void *arg);
	void *drained_arg;
};

struct console *console_new(struct server *srv, struct metrics_conns *conns)
{
	struct console *c = calloc(1, sizeof(*c));
	if (c) {
		c->srv = srv;
		c->conns = conns;
	}
	return c;
}

size_t console_pending(const struct console *c)
{
	return c ? c->pending : 0;
}

void console_drain(struct console *c, void (*done)(void *arg), void *arg)
{
	c->stopping = 1;
	c->drained = done;
	c->drained_arg = arg;
	if (c->pending == 0)
		done(arg);
}

void console_free(struct console *c)
{
	if (!c)
		return;
	/* evhttp_free closes their connections (closed() runs); the store
	 * still calls back those it holds */
	while (!list_empty(&c->ops)) {
		struct console_op *op = list_entry(c->ops.first, struct console_op, link);
		list_unlink(&op->link);
		op->c = NULL;
	}
	free(c);
}

/* What every answer of the console says to the browser: nothing but this
 * origin's own files, never inside another site's frame, no referrer. */
static void secure_headers(struct evhttp_request *req, const char *type)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Content-Security-Policy",
			  "default-src 'none'; script-src 'self'; style-src 'self'; "
			  "connect-src 'self'; img-src 'self'; base-uri 'none'; "
			  "form-action 'none'; frame-ancestors 'none'");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "X-Frame-Options", "DENY");
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
}

static void send_json(struct evhttp_request *req, int code, const char *reason,
		      struct evbuffer *body)
{
	secure_headers(req, "application/json");
	evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
	evhttp_send_reply(req, code, reason, body);
}

/* A wrong token costs the connection (guessing takes connections, as on
 * the listeners); the answer still goes out. */
static void close_after(struct evhttp_request *req)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
}

/* A JSON string's characters: " and \ escaped, control bytes and bytes
 * past ASCII as \u00XX, so the answer is ASCII and valid JSON whatever a
 * string held (an error's text, a spec read from Redis). */
static void json_chars(struct evbuffer *b, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\')
			evbuffer_add_printf(b, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			evbuffer_add_printf(b, "\\u%04x", ch);
		else
			evbuffer_add(b, s + i, 1);
	}
}

static void error_json(struct evhttp_request *req, int code, const char *reason, const char *word,
		       const char *msg)
{
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	evbuffer_add_printf(b, "{\"error\":\"%s\",\"message\":\"", word);
	json_chars(b, msg, strlen(msg));
	evbuffer_add_printf(b, "\"}\n");
	if (code == 401) /* RFC 6750: how to authenticate */
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
				  "Bearer realm=\"ratelimitd\"");
	send_json(req, code, reason, b);
	evbuffer_free(b);
}

/* The page and its files, with an ETag so a reload of the page costs a 304. */
static int serve_file(struct evhttp_request *req, const char *path)
{
	for (size_t i = 0; i < console_www_n; i++) {
		const struct www_file *f = &console_www[i];
		if (strcmp(f->path, path) != 0)
			continue;
		struct evkeyvalq *in = evhttp_request_get_input_headers(req);
		const char *inm = evhttp_find_header(in, "If-None-Match");
		secure_headers(req, f->type);
		struct evkeyvalq *h = evhttp_request_get_output_headers(req);
		evhttp_add_header(h, "ETag", f->etag);
		evhttp_add_header(h, "Cache-Control", "no-cache");
		if (inm && strcmp(inm, f->etag) == 0) {
			evhttp_send_reply(req, HTTP_NOTMODIFIED, "Not Modified", NULL);
			return 1;
		}
		struct evbuffer *b = evbuffer_new();
		if (!b) {
			evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
			return 1;
		}
		evbuffer_add_reference(b, f->data, f->len, NULL, NULL);
		evhttp_send_reply(req, HTTP_OK, "OK", b);
		evbuffer_free(b);
		return 1;
	}
	return 0;
}

/* The token of "Authorization: Bearer TOKEN", or NULL. */
static const char *bearer(struct evhttp_request *req, size_t *len)
{
	const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	if (!a || strncasecmp(a, "Bearer ", 7) != 0)
		return NULL;
	a += 7;
	while (*a == ' ')
		a++;
	*len = strlen(a);
	return *len ? a : NULL;
}

/* The identity a request's token proves with the admin right, or NULL
 * with why not (a wrong token counted as the listeners count it). */
static const struct config_identity *admin_of(const struct config *cfg, struct evhttp_request *req,
					      const char **why)
{
	size_t len;
	const char *tok = bearer(req, &len);
	if (!tok) {
		*why = cfg->nidentities ? "no token: an identity with the admin right sees and "
					  "changes the overrides"
					: "no identity is configured (identities): the overrides "
					  "are seen and changed on admin listeners only";
		return NULL;
	}
	const struct config_identity *id = config_identity_by_token(cfg, tok, len);
	if (!id) {
		stats.auth_failures[STATS_AUTH_BAD_TOKEN]++;
		close_after(req);
		*why = "invalid token";
		return NULL;
	}
	if (!config_identity_may(id, CONFIG_RIGHT_ADMIN, NULL, 0)) {
		stats.auth_failures[STATS_AUTH_FORBIDDEN]++;
		*why = "this identity lacks the admin right";
		return NULL;
	}
	return id;
}

/* One store's status, why, connections and pending, after its first member. */
static void store_json(struct evbuffer *b, struct server *srv, const struct config *cfg,
		       struct store *st)
{
	struct store_health h;
	memset(&h, 0, sizeof(h));
	store_health_add(st, &h);
	const char *why, *refusal;
	enum store_verdict v = store_verdict(st, cfg->on_store_error,
					     local_active(server_local(srv)), &why, &refusal);
	evbuffer_add_printf(b, ",\"status\":\"%s\",\"why\":\"",
			    v == STORE_VERDICT_OK	  ? "ok"
			    : v == STORE_VERDICT_DEGRADED ? "degraded"
							  : "down");
	if (v != STORE_VERDICT_OK) {
		json_chars(b, why, strlen(why));
		if (refusal) {
			evbuffer_add_printf(b, ": ");
			json_chars(b, refusal, strlen(refusal));
		}
	}
	evbuffer_add_printf(b, "\",\"connections\":%u,\"connections_up\":%u,\"pending\":%zu}",
			    h.conns, h.conns_up, store_pending(st));
}

/* "store": the default one; "stores": each of stores:, by name. */
static void state_store(struct evbuffer *b, struct server *srv, const struct config *cfg)
{
	evbuffer_add_printf(b, "\"store\":{\"backend\":\"%s\"", store_backend_of(cfg)->name);
	store_json(b, srv, cfg, server_store(srv));
	evbuffer_add_printf(b, ",\"stores\":[");
	const struct cmd_env *env = server_env(srv);
	for (size_t i = 0; i < env->nnamed; i++) {
		evbuffer_add_printf(b, "%s{\"name\":\"%s\"", i ? "," : "", env->named[i].name);
		store_json(b, srv, cfg, env->named[i].store);
	}
	evbuffer_add_printf(b, "],");
}

static void state_actions(struct evbuffer *b, const struct config *cfg)
{
	size_t n;
	const struct policy **all = view_actions(cfg, &n);
	unsigned long long ta = 0, td = 0;
	evbuffer_add_printf(b, "\"actions\":[");
	for (size_t i = 0; all && i < n; i++) {
		const struct policy *p = all[i];
		int envoy = i >= cfg->npolicies;
		const struct stats_action *a =
			envoy ? stats_action_find(p->name, p->name_len) : stats_action_of(cfg, p);
		unsigned long long allowed, denied;
		view_action_totals(a, &allowed, &denied);
		ta += allowed;
		td += denied;
		char d[512];
		policy_describe(p, d, sizeof(d));
		int shadow = p->shadow < 0 ? cfg->shadow : p->shadow;
		evbuffer_add_printf(b, "%s{\"name\":\"%s\",\"kind\":\"%s\",\"limits\":\"",
				    i ? "," : "", p->name, envoy ? "envoy" : "policy");
		json_chars(b, d, strnlen(d, sizeof(d)));
		evbuffer_add_printf(b, "\",\"shadow\":%s,\"allowed\":%llu,\"denied\":%llu}",
				    shadow ? "true" : "false", allowed, denied);
	}
	evbuffer_add_printf(b, "],\"totals\":{\"allowed\":%llu,\"denied\":%llu},", ta, td);
	free(all);
}

static void state_top(struct evbuffer *b, const struct config *cfg)
{
	if (cfg->metrics_top_series == 0) {
		/* metrics.top_series: 0 keeps users off this endpoint */
		evbuffer_add_printf(b, "\"top\":null,");
		return;
	}
	size_t n;
	struct view_hitter *h = view_hitters(cfg, CONSOLE_TOP_USERS, &n);
	evbuffer_add_printf(b, "\"top\":{\"window_s\":%llu,\"users\":[",
			    (unsigned long long)(TOP_WINDOW_US / 1000000));
	for (size_t i = 0; h && i < n && i < CONSOLE_TOP_USERS; i++) {
		evbuffer_add_printf(b, "%s{\"action\":\"%s\",\"user\":\"", i ? "," : "",
				    h[i].p->name);
		view_put_user(b, h[i].row.name, h[i].row.len, h[i].row.cut);
		evbuffer_add_printf(b, "\",\"denied\":%llu,\"requests\":%llu,\"over\":%llu}",
				    (unsigned long long)h[i].row.denied,
				    (unsigned long long)h[i].row.requests,
				    (unsigned long long)h[i].row.over);
	}
	evbuffer_add_printf(b, "]},");
	free(h);
}

/* The overrides in force an admin identity may see (those of its
 * policies when it names some). */
static void state_overrides(struct evbuffer *b, struct console *c, const struct config_identity *id,
			    const char *why)
{
	if (!id) {
		evbuffer_add_printf(b, "\"admin\":null,\"admin_why\":\"");
		json_chars(b, why, strlen(why));
		evbuffer_add_printf(b, "\",\"overrides\":null");
		return;
	}
	evbuffer_add_printf(b, "\"admin\":\"%s\",\"overrides\":[", id->name);
	const struct override_live *live = server_env(c->srv)->live;
	struct override_live_item it;
	int first = 1;
	for (size_t i = 0; live && override_live_nth(live, i, &it) == 0; i++) {
		if (!config_identity_may(id, CONFIG_RIGHT_ADMIN, it.action, it.alen))
			continue;
		evbuffer_add_printf(b, "%s{\"action\":\"%.*s\",\"user\":\"", first ? "" : ",",
				    (int)it.alen, it.action);
		view_put_user(b, it.user, it.ulen, 0);
		evbuffer_add_printf(b, "\",\"spec\":\"");
		json_chars(b, it.spec, it.spec_len);
		evbuffer_add_printf(b, "\",\"ttl_ms\":%lld}", (long long)it.ttl_ms);
		first = 0;
	}
	evbuffer_add_printf(b, "]");
}

static void state_reply(struct console *c, struct evhttp_request *req)
{
	const struct config *cfg = server_config(c->srv);
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	struct timeval tv;
	gettimeofday(&tv, NULL);
	double now = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
	evbuffer_add_printf(b,
			    "{\"version\":\"%s\",\"now\":%.3f,\"mono\":%.6f,\"started\":%.3f,"
			    "\"last_reload\":%.3f,\"reloads_failed\":%llu,\"clients\":%zu,"
			    "\"pending_overrides\":%zu,",
			    RATELIMITD_VERSION, now, (double)clock_mono_us() / 1e6,
			    stats.start_time, stats.last_reload_time, stats.reloads_failed,
			    server_nclients(c->srv), c->pending);
	state_store(b, c->srv, cfg);
	state_actions(b, cfg);
	state_top(b, cfg);
	const char *why = NULL;
	const struct config_identity *id = admin_of(cfg, req, &why);
	state_overrides(b, c, id, why);
	evbuffer_add_printf(b, "}\n");
	send_json(req, HTTP_OK, "OK", b);
	evbuffer_free(b);
}

static void op_unlink(struct console_op *op)
{
	struct console *c = op->c;
	if (!c)
		return;
	list_unlink(&op->link);
	op->c = NULL;
	if (--c->pending == 0 && c->drained)
		c->drained(c->drained_arg); /* main.c's: it breaks the loop, frees nothing */
}

/* Neither the store nor a write holds op any more. */
static void op_end(struct console_op *op)
{
	if (op->in_store || op->writing)
		return;
	if (op->conn)
		metrics_conns_closecb(op->conns, op->conn, NULL, NULL);
	op_unlink(op);
	free(op);
}

/* op's connection is going (evhttp frees its request with it). */
static void closed(struct evhttp_connection *conn, void *arg)
{
	(void)conn;
	struct console_op *op = arg;
	op->req = NULL;
	op->conn = NULL;
	op->writing = 0;
	op_end(op);
}

/* op's answer is written whole. */
static void written(struct evhttp_request *req, void *arg)
{
	(void)req;
	struct console_op *op = arg;
	op->writing = 0;
	op_end(op);
}

/* HTTP's status for an error of cmd.h. */
static int error_status(enum cmd_error e, const char **reason)
{
	switch (e) {
	case CMD_ERR_NOAUTH:
	case CMD_ERR_AUTH_FAILED:
		*reason = "Unauthorized";
		return 401;
	case CMD_ERR_FORBIDDEN:
		*reason = "Forbidden";
		return 403;
	case CMD_ERR_UNKNOWN_ACTION:
		*reason = "Not Found";
		return HTTP_NOTFOUND;
	case CMD_ERR_STORE_UNAVAILABLE:
	case CMD_ERR_OUT_OF_MEMORY:
	case CMD_ERR_REQUEST_TIMEOUT:
	case CMD_ERR_TOO_MANY_CLIENTS:
		*reason = "Service Unavailable";
		return HTTP_SERVUNAVAIL;
	default:
		*reason = "Bad Request";
		return HTTP_BADREQUEST;
	}
}

static void op_complete(struct cmd_slot *slot)
{
	struct console_op *op = (struct console_op *)slot;
	op->in_store = 0;
	if (!op->req) {
		cmd_result_release(&slot->res);
		op_end(op);
		return;
	}
	struct evhttp_request *req = op->req;
	struct cmd_result res = slot->res; /* op may be gone once the answer is sent */
	slot->res.item = NULL;
	cmd_result_release(&res);
	op->writing = 1;
	evhttp_request_set_on_complete_cb(req, written, op);
	if (res.kind == CMD_REPLY_OK) {
		struct evbuffer *b = evbuffer_new();
		if (b) {
			evbuffer_add_printf(b, "{\"ok\":true}\n");
			send_json(req, HTTP_OK, "OK", b);
			evbuffer_free(b);
		} else {
			evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		}
	} else if (res.kind == CMD_REPLY_ERROR) {
		if (res.error == CMD_ERR_AUTH_FAILED)
			close_after(req);
		const char *reason;
		int code = error_status(res.error, &reason);
		error_json(req, code, reason, proto_error_code(res.error), res.msg);
	} else {
		error_json(req, 500, "Internal Server Error", "other",
			   "an answer of an unexpected kind");
	}
}

/* POST (set) or DELETE (clear) /console/overrides. */
static void override_request(struct console *c, struct evhttp_request *req, int set)
{
	size_t tlen = 0;
	const char *token = bearer(req, &tlen);
	if (!token) {
		stats.auth_failures[STATS_AUTH_NOAUTH]++;
		error_json(req, 401, "Unauthorized", "noauth",
			   "authentication required: the token of an identity with the admin "
			   "right (Authorization: Bearer)");
		return;
	}
	if (c->stopping) {
		error_json(req, HTTP_SERVUNAVAIL, "Service Unavailable", "store-unavailable",
			   "the daemon is stopping");
		return;
	}
	static char form[CONSOLE_FORM_MAX + 1];
	size_t flen = 0;
	if (set) {
		struct evbuffer *in = evhttp_request_get_input_buffer(req);
		flen = evbuffer_get_length(in);
		if (flen > CONSOLE_FORM_MAX) {
			error_json(req, 413, "Payload Too Large", "syntax", "the form is too long");
			return;
		}
		evbuffer_copyout(in, form, flen);
	} else {
		const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
		flen = q ? strlen(q) : 0;
		if (flen > CONSOLE_FORM_MAX) {
			error_json(req, 414, "URI Too Long", "syntax", "the query is too long");
			return;
		}
		memcpy(form, q ? q : "", flen);
	}
	/* a user as shown: up to 3 bytes a byte */
	static char shown[3 * KEYS_USER_MAX + 1], user[KEYS_USER_MAX];
	char action[POLICY_NAME_MAX + 1], spec[OVERRIDE_LIVE_SPEC_MAX + 1], ttl[32];
	long al = form_value(form, flen, "action", action, sizeof(action));
	long sl = form_value(form, flen, "user", shown, sizeof(shown));
	long pl = set ? form_value(form, flen, "spec", spec, sizeof(spec)) : 0;
	long tl = set ? form_value(form, flen, "ttl", ttl, sizeof(ttl)) : -1;
	long ul = sl > 0 ? shown_parse(shown, (size_t)sl, user, sizeof(user)) : -1;
	if (al == -2 || sl == -2 || pl == -2 || tl == -2) {
		error_json(req, HTTP_BADREQUEST, "Bad Request", "syntax",
			   "a malformed form: a bad %XX, or a field too long");
		return;
	}
	if (al < 1 || pl < (set ? 1 : 0)) {
		error_json(req, HTTP_BADREQUEST, "Bad Request", "syntax",
			   set ? "a form of action, user, spec (unlimited, blocked or limits) "
				 "and ttl (empty or a duration)"
			       : "a query of action and user");
		return;
	}
	if (ul < 1) {
		error_json(req, HTTP_BADREQUEST, "Bad Request", "bad-user",
			   "user is as /top shows it: printable ASCII, %XX for a byte");
		return;
	}
	const char *arg[5] = {set ? "OVERRIDE" : "UNOVERRIDE", user, action, spec, ttl};
	size_t alen[5] = {set ? 8 : 10, (size_t)ul, (size_t)al, (size_t)(pl > 0 ? pl : 0),
			  (size_t)(tl > 0 ? tl : 0)};
	int n = set ? (tl > 0 ? 5 : 4) : 3;
	struct cmd_request creq;
	memset(&creq, 0, sizeof(creq));
	struct proto_error perr;
	if (proto_parse_overrides(arg, alen, n, &creq, &perr) != 0) {
		const char *reason;
		int code = error_status(perr.code, &reason);
		error_json(req, code, reason, proto_error_code(perr.code), perr.msg);
		return;
	}
	creq.token = token;
	creq.token_len = tlen;
	struct console_op *op = calloc(1, sizeof(*op));
	if (!op) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	op->c = c;
	op->req = req;
	op->conn = evhttp_request_get_connection(req);
	op->in_store = 1;
	op->conns = c->conns;
	if (op->conn) /* one request at a time on a connection: its callback is ours */
		metrics_conns_closecb(op->conns, op->conn, closed, op);
	list_push(&c->ops, &op->link);
	c->pending++;
	cmd_slot_init(&op->slot, STATS_FRONT_HTTP, 0, op_complete);
	/* as a listener with admin: true and auth: required */
	struct cmd_caller caller = {.admin = 1, .auth = 1};
	cmd_execute(server_config(c->srv), server_env(c->srv), &creq, &caller, &op->slot);
}

int console_request(struct console *c, struct evhttp_request *req, const char *path)
{
	if (!c || !path || strncmp(path, "/console", 8) != 0 || (path[8] && path[8] != '/'))
		return 0;
	const struct config *cfg = server_config(c->srv);
	if (!cfg->metrics_console) {
		/* whatever the method: the console is not there */
		error_json(req, HTTP_NOTFOUND, "Not Found", "not-found",
			   "the console is off (metrics.console: false)");
		return 1;
	}
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	int get = m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;
	const char *allow = "GET, HEAD";
	if (strcmp(path, "/console/overrides") == 0) {
		allow = "POST, DELETE";
		if (m == EVHTTP_REQ_POST || m == EVHTTP_REQ_DELETE) {
			override_request(c, req, m == EVHTTP_REQ_POST);
			return 1;
		}
	} else if (strcmp(path, "/console/state") == 0) {
		if (get) {
			state_reply(c, req);
			return 1;
		}
	} else if (get) {
		if (!serve_file(req, path))
			error_json(req, HTTP_NOTFOUND, "Not Found", "not-found",
				   "no such file of the console");
		return 1;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	error_json(req, 405, "Method Not Allowed", "method", "this method is not allowed here");
	return 1;
}
