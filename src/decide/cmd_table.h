/*
 * cmd_table.h - the verbs, one row each, as Redis's command table has
 * them: the word a client sends, what an identity needs to send it,
 * whether only an admin listener takes it, which text front ends parse
 * it, its arguments and HTTP route when they are of the common shape, and
 * the handler that executes it. cmd_execute checks rights and the admin
 * listener from the row and dispatches through it; the line, RESP and
 * HTTP parsers find a verb and read its arguments here, and their list of
 * known commands is the table's. A new verb is its handler's file and a
 * row.
 */
#ifndef RL_CMD_TABLE_H
#define RL_CMD_TABLE_H

#include <stddef.h>

#include "cmd_run.h" /* cmd_handler */

/* The text front ends that parse a verb (the gRPC front end builds its
 * own requests: ALLOW, MALLOW). */
#define CMD_ON_LINE 1u
#define CMD_ON_RESP 2u

/*
 * The arguments of a verb of the common shape, <user> <action> and what may
 * follow it, which the text protocols parse from these bits alone: the line
 * protocol and RESP (proto_parse_verb), HTTP from its query or JSON body
 * (proto_http.c). 0: a grammar of its own, parsed by the protocols
 * themselves (MALLOW's pairs, an OVERRIDE's spec, a lease's or a hold's id,
 * AUTH's token, TOP's options).
 */
#define CMD_ARGS_PAIR 1u	/* <user> <action> */
#define CMD_ARGS_COST 2u	/* [<cost>] */
#define CMD_ARGS_COST_NEEDED 4u /* <cost>, not optional */
#define CMD_ARGS_WAIT 8u	/* [WAIT <ms>], after the cost */
#define CMD_ARGS_TRACE 16u	/* [TRACE <traceparent>], last */

struct cmd_verb_row {
	const char *name; /* the word on the wire, upper case (any case is read) */
	unsigned right;	  /* CONFIG_RIGHT_* an identity needs; 0: anyone */
	/* refused on a listener without admin: true; the refusal names the
	 * verb, or this word for a family (the overrides) */
	int admin;
	const char *admin_what;
	unsigned fronts; /* CMD_ON_*: the text protocols that parse it */
	int op;		 /* a single pair's store op (enum store_op) for cmd_run_pair */
	cmd_handler *run;
	const char *label; /* lower case: its requests' metrics label */
	unsigned args;	   /* CMD_ARGS_*: the common shape's; 0: its own grammar */
	/* with args: the usage its syntax errors show, and its route in the
	 * HTTP API (POST, and GET too with http_get), NULL for none */
	const char *usage;
	const char *http;
	int http_get;
};

/* Indexed by enum cmd_verb. */
extern const struct cmd_verb_row cmd_verbs[CMD_VERB_N];

/* The verb word[0..len) names (any case) among those front parses, or -1. */
int cmd_verb_named(const char *word, size_t len, unsigned front);
/* "ALLOW PEEK ...": the words of the verbs the line protocol parses, in
 * the table's order (the unknown-command error lists them). */
const char *cmd_known_commands(void);

#endif
