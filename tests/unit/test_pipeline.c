/*
 * test_pipeline.c - the connection pipeline in process: the real transport
 * (src/net/conn.c) and in-order session (src/proto/pipeline.c) on one end
 * of a socketpair inside a libevent base, the test the client on the other
 * end. cmd's entry points are stubbed (as fuzz/fuzz_step.c does): each
 * request is answered with an error naming its user, so a reply says which
 * request it answers, and the answers are held until the test completes
 * them, in any order (or, in AUTO mode, given at once). Checked: replies in
 * request order whatever the completion order (line, RESP, HTTP
 * keep-alive); one reply per request, bad and too-long lines included; QUIT
 * answered after the replies before it, then the close; backpressure at the pipeline's MAX_PENDING
 * (resumed at half) and at conn.c's OUT_HIGH (resumed when the client
 * reads), nothing lost or doubled; late answers for a client gone.
 */
#include <check.h>

#include "runner.h"
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cmd.h"
#include "config.h"
#include "conn.h"
#include "proto.h"

/* pipeline.c's MAX_PENDING and conn.c's OUT_HIGH, as this test knows them */
#define MAX_PENDING 1024
#define OUT_HIGH (256 * 1024)

/* ---- cmd, stubbed: answers held for the test to give ---- */

#define MAX_SLOTS 20000

static int auto_answer; /* answer each request at once */
static struct cmd_slot *slots[MAX_SLOTS];
static int nslots; /* requests cmd_execute was given */

void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		 struct cmd_caller *caller, struct cmd_slot *slot)
{
	(void)cfg, (void)env, (void)caller;
	struct cmd_result *res = &slot->res;
	if (req->verb == CMD_QUIT || req->verb == CMD_PING) {
		res->kind = req->verb == CMD_QUIT ? CMD_REPLY_BYE : CMD_REPLY_PONG;
		slot->complete(slot);
		return;
	}
	ck_assert_int_lt(nslots, MAX_SLOTS);
	res->kind = CMD_REPLY_ERROR;
	res->error = CMD_ERR_STORE_UNAVAILABLE;
	size_t n = req->user_len < CMD_MSG_MAX - 1 ? req->user_len : CMD_MSG_MAX - 1;
	memcpy(res->msg, req->user, n);
	res->msg[n] = '\0';
	slots[nslots++] = slot;
	if (auto_answer) {
		slots[nslots - 1] = NULL;
		slot->complete(slot);
	}
}

void cmd_reply_error(struct cmd_slot *slot, enum cmd_error e, const char *msg)
{
	slot->res.kind = CMD_REPLY_ERROR;
	slot->res.error = e;
	snprintf(slot->res.msg, sizeof(slot->res.msg), "%s", msg);
	slot->complete(slot);
}

void cmd_reply_local(struct cmd_slot *slot, int local)
{
	slot->res.kind = CMD_REPLY_LOCAL;
	slot->res.local = local;
	slot->complete(slot);
}

void cmd_result_release(struct cmd_result *res)
{
	free(res->item);
	res->item = NULL;
}

/* The i-th held request's answer is known. */
static void complete(int i)
{
	ck_assert_int_lt(i, nslots);
	ck_assert_msg(slots[i] != NULL, "request %d answered twice", i);
	struct cmd_slot *s = slots[i];
	slots[i] = NULL;
	s->complete(s);
}

/* ---- the daemon's side: one connection and its owner ---- */

static struct event_base *base;
static struct config cfg;
static struct cmd_env env;
static struct conn_ctx ctx;
static struct conn *conn;
static struct event *turn; /* the owner's end-of-turn work */
static int dirty, closed, reaped;
static int cfd = -1; /* the client's end */

static void turn_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	if (dirty && !reaped) {
		dirty = 0;
		conn_flush(conn);
	}
	if (closed && !reaped) {
		reaped = 1;
		conn_reap(conn);
	}
}

static void ctx_closed(struct conn_ctx *x, struct conn *c)
{
	(void)x;
	ck_assert_ptr_eq(c, conn);
	ck_assert_int_eq(closed, 0);
	closed = 1;
	event_active(turn, EV_TIMEOUT, 0);
}

static void ctx_ready(struct conn_ctx *x, struct conn *c)
{
	(void)x;
	ck_assert_ptr_eq(c, conn);
	dirty = 1;
	event_active(turn, EV_TIMEOUT, 0);
}

/* ---- the client's side ---- */

static char *rx; /* what the client has read */
static size_t rxlen, rxcap;
static int rx_eof;
static char *tx; /* what it still has to send */
static size_t txlen, txoff, txcap;

static void client_read(void)
{
	for (;;) {
		if (rxcap - rxlen < 65536) {
			rxcap = rxcap * 2 + 65536;
			rx = realloc(rx, rxcap + 1);
			ck_assert_ptr_nonnull(rx);
		}
		ssize_t n = recv(cfd, rx + rxlen, rxcap - rxlen, MSG_DONTWAIT);
		if (n > 0) {
			rxlen += (size_t)n;
			continue;
		}
		if (n == 0)
			rx_eof = 1;
		else
			ck_assert_msg(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s",
				      strerror(errno));
		break;
	}
	rx[rxlen] = '\0';
}

static void client_send(const char *p, size_t n)
{
	if (txcap - txlen < n) {
		txcap = txcap * 2 + n + 4096;
		tx = realloc(tx, txcap);
		ck_assert_ptr_nonnull(tx);
	}
	memcpy(tx + txlen, p, n);
	txlen += n;
}

static void client_push(void)
{
	while (txoff < txlen) {
		ssize_t n = send(cfd, tx + txoff, txlen - txoff, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n <= 0)
			break;
		txoff += (size_t)n;
	}
}

/* Loop turns with the client sending what it has and, when reading,
 * reading what comes: enough for everything that can move to move. */
static void pump(int reading)
{
	for (int i = 0; i < 40; i++) {
		client_push();
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (reading)
			client_read();
	}
}

/* Replies read so far (each ends in a newline in both protocols). */
static int nreplies(void)
{
	int n = 0;
	for (size_t i = 0; i < rxlen; i++)
		n += rx[i] == '\n';
	return n;
}

enum wire { LINE, RESP, HTTP };

/* Request i: ALLOW u<i> <action> (the action is not in the reply). */
static void send_action(enum wire w, int i, const char *action)
{
	char b[256];
	char user[32];
	int ulen = snprintf(user, sizeof(user), "u%d", i);
	int n;
	if (w == LINE)
		n = snprintf(b, sizeof(b), "ALLOW %s %s\n", user, action);
	else if (w == RESP)
		n = snprintf(b, sizeof(b), "*3\r\n$5\r\nALLOW\r\n$%d\r\n%s\r\n$%zu\r\n%s\r\n", ulen,
			     user, strlen(action), action);
	else
		n = snprintf(b, sizeof(b),
			     "GET /v1/allow?user=%s&action=%s HTTP/1.1\r\nHost: t\r\n\r\n", user,
			     action);
	client_send(b, (size_t)n);
}

static void send_allow(enum wire w, int i)
{
	send_action(w, i, "act");
}

/* The reply to request i (the stub's: an error naming its user). */
static void expect_answer(char **buf, size_t *len, enum wire w, int i)
{
	char b[128];
	int n = snprintf(b, sizeof(b), "%sERR %s u%d%s", w == LINE ? "" : "-",
			 proto_error_code(CMD_ERR_STORE_UNAVAILABLE), i, w == LINE ? "\n" : "\r\n");
	*buf = realloc(*buf, *len + (size_t)n + 1);
	ck_assert_ptr_nonnull(*buf);
	memcpy(*buf + *len, b, (size_t)n + 1);
	*len += (size_t)n;
}

/* What the client must have read: the answers to requests 0..n-1. */
/* HTTP: n responses, the i-th the answer to request i (the stub's error
 * is a 503 whose JSON message names the user). */
static void check_http_answers(int n)
{
	const char *p = rx;
	for (int i = 0; i < n; i++) {
		char want[64];
		snprintf(want, sizeof(want), "\"message\":\"u%d\"", i);
		ck_assert_msg(strncmp(p, "HTTP/1.1 503 ", 13) == 0, "response %d: a 503", i);
		const char *m = strstr(p, "\"message\":\"");
		ck_assert_msg(m && strncmp(m, want, strlen(want)) == 0,
			      "response %d is not the answer to request %d", i, i);
		const char *next = strstr(m, "HTTP/1.1 ");
		p = next ? next : rx + rxlen;
	}
	ck_assert_msg(p == rx + rxlen, "more than %d responses read", n);
}

static void check_answers(enum wire w, int n)
{
	if (w == HTTP) {
		check_http_answers(n);
		return;
	}
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		char *want = NULL;
		size_t len = 0;
		expect_answer(&want, &len, w, i);
		ck_assert_msg(off + len <= rxlen && memcmp(rx + off, want, len) == 0,
			      "reply %d is not the answer to request %d: replies out of order, "
			      "lost or doubled",
			      i, i);
		off += len;
		free(want);
	}
	ck_assert_msg(off == rxlen, "%zu bytes read beyond the first %d answers (out of order?)",
		      rxlen - off, n);
}

static void setup(void)
{
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	turn = event_new(base, -1, 0, turn_cb, NULL);
	ck_assert_ptr_nonnull(turn);
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_line = 256;
	cfg.request_timeout_ms = 10000;
	cfg.idle_timeout_ms = 0;
	ctx.base = base;
	ctx.cfg = &cfg;
	ctx.env = &env;
	ctx.closed = ctx_closed;
	ctx.ready = ctx_ready;
	auto_answer = 0;
	nslots = 0;
	dirty = closed = reaped = 0;
	rxlen = txlen = txoff = 0;
	rx_eof = 0;
}

/* The connection, on a socketpair, to a listener of w (line: line and
 * RESP); sndbuf: the daemon's send buffer, or 0. */
static void connect_to(enum wire w, int sndbuf)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	if (sndbuf)
		ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)),
				 0);
	cfd = sv[1];
	struct conn_port port = {
		.admin = 0, .protocol = w == HTTP ? CONFIG_PROTOCOL_HTTP : CONFIG_PROTOCOL_LINE};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	conn = conn_new(&ctx, sv[0], (const struct sockaddr *)&sa, &port);
	ck_assert_ptr_nonnull(conn);
}

static void connect_client(int sndbuf)
{
	connect_to(LINE, sndbuf);
}

static void teardown(void)
{
	if (conn && !reaped) {
		if (!closed)
			conn_close(conn);
		reaped = 1;
		conn_reap(conn);
	}
	/* answers still held come after the connection is gone */
	for (int i = 0; i < nslots; i++)
		if (slots[i])
			complete(i);
	conn = NULL;
	if (cfd >= 0)
		close(cfd);
	cfd = -1;
	event_free(turn);
	event_base_free(base);
	conn_pool_free();
	free(rx);
	free(tx);
	rx = tx = NULL;
	rxcap = txcap = 0;
}

/* ---- ordering ---- */

#define NORDER 8

/* Completion orders of NORDER held requests. */
static const int orders[][NORDER] = {
	{0, 1, 2, 3, 4, 5, 6, 7}, /* in order */
	{7, 6, 5, 4, 3, 2, 1, 0}, /* reversed: nothing goes out until the first */
	{1, 0, 3, 2, 5, 4, 7, 6}, /* pairs swapped */
	{4, 2, 6, 0, 7, 1, 5, 3}, /* shuffled */
};
#define NORDERS ((int)(sizeof(orders) / sizeof(orders[0])))

/* Test i: the orders over the line protocol, then RESP, then HTTP
 * keep-alive. */
START_TEST(test_order)
{
	enum wire w = (enum wire)(_i / NORDERS);
	const int *order = orders[_i % NORDERS];
	connect_to(w, 0);
	for (int i = 0; i < NORDER; i++)
		send_allow(w, i);
	pump(1);
	ck_assert_int_eq(nslots, NORDER);
	ck_assert_uint_eq(rxlen, 0);
	int done[NORDER] = {0};
	for (int k = 0; k < NORDER; k++) {
		complete(order[k]);
		done[order[k]] = 1;
		pump(1);
		/* written: exactly the answers whose predecessors are all known */
		int ready = 0;
		while (ready < NORDER && done[ready])
			ready++;
		check_answers(w, ready);
	}
	check_answers(w, NORDER);
	ck_assert_int_eq(rx_eof, 0);
	ck_assert_int_eq(closed, 0);
}
END_TEST

/* ---- one reply per request, errors included; QUIT ---- */

static int starts(const char *line, const char *prefix)
{
	return strncmp(line, prefix, strlen(prefix)) == 0;
}

/* The i-th reply line (NUL-terminated copy in out). */
static void reply_line(int i, char *out, size_t cap)
{
	const char *p = rx;
	for (int k = 0; k < i; k++) {
		p = strchr(p, '\n');
		ck_assert_ptr_nonnull(p);
		p++;
	}
	const char *e = strchr(p, '\n');
	ck_assert_ptr_nonnull(e);
	size_t n = (size_t)(e - p) < cap - 1 ? (size_t)(e - p) : cap - 1;
	memcpy(out, p, n);
	out[n] = '\0';
}

START_TEST(test_errors_interleaved)
{
	connect_client(0);
	char longline[400];
	memset(longline, 'x', sizeof(longline) - 1);
	longline[sizeof(longline) - 1] = '\n';
	char code[4][64];
	snprintf(code[0], sizeof(code[0]), "ERR %s ", proto_error_code(CMD_ERR_UNKNOWN_COMMAND));
	snprintf(code[1], sizeof(code[1]), "ERR %s ", proto_error_code(CMD_ERR_SYNTAX));
	snprintf(code[2], sizeof(code[2]), "ERR %s ", proto_error_code(CMD_ERR_LINE_TOO_LONG));
	snprintf(code[3], sizeof(code[3]), "ERR %s ", proto_error_code(CMD_ERR_STORE_UNAVAILABLE));
	/* what is sent, and what its reply starts with (NULL: no reply, the
	 * connection closed before it) */
	static const struct {
		const char *send;
		int reply; /* code[] index */
		const char *user;
	} table[] = {
		{"ALLOW u0 act\n", 3, "u0"},  {"BOGUS x\n", 0, NULL},
		{"ALLOW u1 act\n", 3, "u1"},  {"ALLOW\n", 1, NULL},
		{"ALLOW u2 act\n", 3, "u2"},  {NULL, 2, NULL},
		{"ALLOW u3 act\n", -1, NULL},
	};
	int n = (int)(sizeof(table) / sizeof(table[0]));
	for (int i = 0; i < n; i++) {
		if (table[i].send)
			client_send(table[i].send, strlen(table[i].send));
		else
			client_send(longline, sizeof(longline));
	}
	pump(1);
	/* the bad lines are answered at once, but behind u0 */
	ck_assert_int_eq(nslots, 3);
	ck_assert_uint_eq(rxlen, 0);
	ck_assert_int_eq(rx_eof, 0);
	complete(2);
	complete(1);
	pump(1);
	ck_assert_uint_eq(rxlen, 0);
	complete(0);
	pump(1);
	int replies = 0;
	for (int i = 0; i < n; i++) {
		if (table[i].reply < 0)
			continue;
		char line[512];
		reply_line(replies++, line, sizeof(line));
		ck_assert_msg(starts(line, code[table[i].reply]), "reply %d: '%s', want '%s...'",
			      replies - 1, line, code[table[i].reply]);
		if (table[i].user)
			ck_assert_str_eq(line + strlen(code[3]), table[i].user);
	}
	ck_assert_int_eq(nreplies(), replies);
	ck_assert_int_eq(nslots, 3); /* nothing after the long line was run */
	ck_assert_int_eq(rx_eof, 1);
	ck_assert_int_eq(closed, 1);
}
END_TEST

/* Test 0: the answers before QUIT come last first, 1: first first (the
 * connection must not close with the second still owed). */
START_TEST(test_quit)
{
	connect_client(0);
	send_allow(LINE, 0);
	send_allow(LINE, 1);
	client_send("QUIT\n", 5);
	send_allow(LINE, 2);
	pump(1);
	ck_assert_int_eq(nslots, 2); /* nothing after QUIT is read */
	ck_assert_uint_eq(rxlen, 0);
	ck_assert_int_eq(rx_eof, 0); /* BYE is known, but owed after 0 and 1 */
	complete(_i == 0 ? 1 : 0);
	pump(1);
	check_answers(LINE, _i == 0 ? 0 : 1);
	ck_assert_int_eq(rx_eof, 0);
	ck_assert_int_eq(closed, 0);
	complete(_i == 0 ? 0 : 1);
	pump(1);
	char *want = NULL;
	size_t len = 0;
	expect_answer(&want, &len, LINE, 0);
	expect_answer(&want, &len, LINE, 1);
	ck_assert_uint_eq(rxlen, len + 4);
	ck_assert_int_eq(memcmp(rx, want, len), 0);
	ck_assert_str_eq(rx + len, "BYE\n");
	free(want);
	ck_assert_int_eq(rx_eof, 1);
	ck_assert_int_eq(closed, 1);
}
END_TEST

/* ---- backpressure ---- */

/* Answers held: reading stops at MAX_PENDING owed, resumes below half. */
START_TEST(test_backpressure_pending)
{
	const int total = MAX_PENDING + MAX_PENDING / 2;
	connect_client(0);
	for (int i = 0; i < total; i++)
		send_allow(LINE, i);
	pump(1);
	ck_assert_int_eq(nslots, MAX_PENDING);
	pump(1);
	ck_assert_int_eq(nslots, MAX_PENDING); /* paused, not just slow */
	ck_assert_uint_eq(rxlen, 0);
	/* written, but still half or more owed: still paused */
	int first = MAX_PENDING / 2;
	for (int i = 0; i < first; i++)
		complete(i);
	pump(1);
	check_answers(LINE, first);
	ck_assert_int_eq(nslots, MAX_PENDING);
	/* one more below half: reading resumes and takes the rest */
	complete(first);
	pump(1);
	check_answers(LINE, first + 1);
	ck_assert_int_eq(nslots, total);
	for (int i = total - 1; i > first; i--)
		complete(i);
	pump(1);
	check_answers(LINE, total);
	ck_assert_int_eq(closed, 0);
}
END_TEST

/*
 * Answers at once, the client not reading: reading stops once OUT_HIGH is
 * queued beyond the socket, resumes when the client reads. The requests
 * are long (a long action) so that one read (conn.c's READ_CHUNK, 16 KiB)
 * holds well under MAX_PENDING of them: the pending bound never pauses,
 * the output bound alone does.
 */
START_TEST(test_backpressure_output)
{
	const int total = 20000;
	auto_answer = 1;
	connect_client(4096);
	for (int i = 0; i < total; i++)
		send_action(LINE, i, "action-padded-to-a-long-request-line");
	pump(0);
	int taken = nslots;
	ck_assert_int_gt(taken, 0);
	ck_assert_int_lt(taken, total);
	/* at least OUT_HIGH of replies came (queued or in the socket), and
	 * not much more: the pause came with the bound */
	char *one = NULL;
	size_t rlen = 0;
	expect_answer(&one, &rlen, LINE, 10000);
	free(one);
	ck_assert_uint_ge((size_t)taken * rlen, OUT_HIGH);
	ck_assert_uint_le((size_t)taken * rlen, OUT_HIGH + 128 * 1024);
	pump(0);
	ck_assert_int_eq(nslots, taken); /* paused, not just slow */
	/* the client reads: everything is taken and answered, once, in order */
	for (int k = 0; k < 20 && (nslots < total || nreplies() < total); k++)
		pump(1);
	ck_assert_int_eq(nslots, total);
	check_answers(LINE, total);
	ck_assert_int_eq(closed, 0);
}
END_TEST

/* ---- a client gone with requests in flight ---- */

/* 0: the client closes, 1: the daemon drops it (conn_close); then the
 * held answers arrive, the first one first (0) or last (1). */
START_TEST(test_gone_inflight)
{
	int daemon_drops = _i & 1, head_last = _i >> 1;
	connect_client(0);
	for (int i = 0; i < 5; i++)
		send_allow(LINE, i);
	pump(1);
	ck_assert_int_eq(nslots, 5);
	if (daemon_drops) {
		conn_close(conn);
	} else {
		close(cfd);
		cfd = -1;
	}
	pump(0);
	if (head_last) {
		for (int i = 4; i >= 0; i--) {
			complete(i);
			pump(0);
		}
	} else {
		for (int i = 0; i < 5; i++) {
			complete(i);
			pump(0);
		}
	}
	ck_assert_int_eq(closed, 1);
	ck_assert_int_eq(reaped, 1);
	if (cfd >= 0) {
		client_read();
		ck_assert_uint_eq(rxlen, 0); /* dropped: nothing written */
	}
}
END_TEST

static void add(Suite *s, const char *name, const TTest *t, int n)
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 10);
	if (n)
		tcase_add_loop_test(tc, t, 0, n);
	else
		tcase_add_test(tc, t);
	suite_add_tcase(s, tc);
}

int main(void)
{
	Suite *s = suite_create("pipeline");
	add(s, "order", test_order, 3 * NORDERS);
	add(s, "errors", test_errors_interleaved, 0);
	add(s, "quit", test_quit, 2);
	add(s, "backpressure_pending", test_backpressure_pending, 0);
	add(s, "backpressure_output", test_backpressure_output, 0);
	add(s, "gone", test_gone_inflight, 4);
	return run_suite(s);
}
