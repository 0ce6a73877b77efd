/*
 * proto.h - what a wire protocol plugs into a client connection (conn.c):
 * one pure function that frames and parses the next request out of the
 * bytes received, one that formats a result. Both allocate nothing and do
 * no I/O, so each protocol is fuzzed through the same calls conn.c makes.
 * Also the words every protocol shares: verb and error-code names.
 */
#ifndef RL_PROTO_H
#define RL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "cmd_types.h"
#include "config.h"
#include "keys.h"
#include "policy.h"

#define PROTO_DEFAULT_MAX_LINE 4096

/* What the bytes at the start of a connection's input hold. */
enum proto_step {
	PROTO_NEED_MORE, /* no whole request yet: read more */
	PROTO_REQUEST,	 /* a request: execute it, drop `used` bytes */
	PROTO_BAD,	 /* a request that does not parse: answer the error, drop `used` */
	PROTO_LOCAL,	 /* a request the protocol answers itself (`local`), drop `used` */
	PROTO_SKIP,	 /* no request (RESP's empty array): drop `used`, answer nothing */
	PROTO_FATAL,	 /* the framing is lost: answer the error, then close */
};

struct proto_error {
	enum cmd_error code;
	const char *msg; /* static */
};

/* What one step found. */
struct proto_parsed {
	size_t used;		/* bytes the request took */
	struct cmd_request req; /* PROTO_REQUEST; points into the input or pc */
	struct proto_error err; /* PROTO_BAD, PROTO_FATAL */
	int local;		/* PROTO_LOCAL: which of the protocol's own replies */
	int tag;		/* kept with the request for format (cmd_result.tag) */
	int close_after;	/* close once this request's reply is written */
};

struct proto {
	const char *name;
	/* Longest reply format writes. */
	size_t reply_max;
	/* The step sees at least this many bytes, whatever max_line says
	 * (HTTP's headers are longer than a line), 0 for none. */
	size_t window_min;
	/* Its replies name the deciding policy and window (cmd_result.action,
	 * .window_ms), which cmd then fills in (HTTP's RateLimit headers). */
	int names_policy;
	/* The protocol's own reply (PROTO_LOCAL's `local`) said before a
	 * close for idle_timeout, for a peer that must not take the close
	 * for an error (SPOE's AGENT-DISCONNECT); 0: the close is silent. */
	int idle_local;
	/*
	 * Looks at buf[0..len), the start of the unparsed input: at most
	 * proto_window() bytes of it (no request may be longer). state: the
	 * connection's own state for protocols that keep one (frontend.c's
	 * state_size, e.g. HTTP's struct http_conn), else NULL.
	 */
	enum proto_step (*parse)(const char *buf, size_t len, size_t max_line, void *state,
				 struct proto_parsed *out);
	/* Writes res's reply to buf (reply_max bytes of room); returns its
	 * length. state: as parse's, or NULL (a reply outside any
	 * connection's order: proto_refusal). Replies are formatted in the
	 * order they are written, so a protocol may keep there what earlier
	 * replies changed (RESP's version after HELLO 3). */
	size_t (*format)(char *buf, const struct cmd_result *res, void *state);
};

/* What a client refused at max_clients is told in proto: the
 * too-many-clients error, the connection closing. Writes buf (reply_max
 * bytes of room), returns the length. */
size_t proto_refusal(const struct proto *proto, char *buf);
/* What a client that sent plain text to a TLS listener is told in proto:
 * tls-required, the connection closing. As proto_refusal. */
size_t proto_tls_required(const struct proto *proto, char *buf);
/* The most bytes a step of proto sees: max(max_line + 2, window_min). */
size_t proto_window(const struct proto *proto, size_t max_line);
/* 1 if tok is word (upper case), in any case. */
int proto_word_is(const char *tok, size_t len, const char *word);
/* ALLOW's optional [WAIT <ms>] at arg[n-2..n) (arg[0] the verb, n
 * arguments): 1 with req->wait_* set, 0 when there is none, -1 with err
 * (WAIT takes 0 to 60000 milliseconds). */
/* ALLOW's and PEEK's [TRACE <traceparent>], the last two arguments of
 * arg[0..n): 1 with req->traceparent set (a valid W3C traceparent), 0 when
 * absent, -1 with err. */
int proto_parse_trace(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err);
int proto_parse_wait(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		     struct proto_error *err);
/* A cost: decimal digits only, 1 to CMD_COST_MAX (leading zeros allowed). 0 or -1. */
int proto_parse_cost(const char *s, size_t len, int64_t *out);
/* MALLOW and MPEEK's arguments arg[1..n): <user> <action> pairs (1 to
 * CMD_PAIRS_MAX), then a cost when their number is odd; into req (verb set
 * by the caller; cost 1 unless given). 0, or -1 with err filled. */
int proto_parse_pairs(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err);
/* OVERRIDE, UNOVERRIDE, OVERRIDES, TOP from arg[0..n) (arg[0] the verb): 0
 * with req filled, -1 with err, or 1 when arg[0] is none of them. */
int proto_parse_overrides(const char *const *arg, const size_t *alen, int n,
			  struct cmd_request *req, struct proto_error *err);
/* SETTLE <hold-id> <actual>, CANCEL <hold-id> from arg[0..n) (arg[0] the
 * verb): 0 with req filled (a hold id's action in action too), -1 with err,
 * or 1 when arg[0] is none of them. (HOLD is of the common shape: its row.) */
int proto_parse_hold(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		     struct proto_error *err);
/* RELEASE <lease-id>, RENEW <lease-id> from arg[0..n) (arg[0] the verb):
 * 0 with req filled (a lease id's action in action too), -1 with err, or 1
 * when arg[0] is none of them. (ACQUIRE is of the common shape: its row.) */
int proto_parse_lease(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err);
/* Any verb of the table (cmd_table.h) that front (CMD_ON_LINE or
 * CMD_ON_RESP) parses, from arg[0..n) (arg[0] its word): the one grammar
 * of the text protocols. 0 with req filled (verb set; req zeroed, cost 1
 * by the caller), or -1 with err (unknown-command, listing the verbs, when
 * arg[0] is none: a protocol's own commands are read before). */
int proto_parse_verb(const char *const *arg, const size_t *alen, int n, unsigned front,
		     struct cmd_request *req, struct proto_error *err);
/* OVERRIDE's ttl: a duration ("90s", "1h", "7d"), 1 s to 366 days. 0 or -1. */
int proto_parse_ttl(const char *s, size_t len, int64_t *ms);
/* Writes v in decimal, '-' first if negative; returns the bytes written.
 * No sprintf on the hot path. */
size_t proto_put_int(char *p, int64_t v);

/* "allow", "peek", ...: the metric label of a verb. */
const char *proto_verb_name(enum cmd_verb v);
/* "none", "limits", "unlimited", "blocked": a STATE's override, as every
 * protocol names it. */
const char *proto_state_override_name(enum cmd_state_override o);
/* "syntax", "bad-cost", ...: the code an error reply carries. */
const char *proto_error_code(enum cmd_error e);

#endif
