/* proto.c - the words every protocol shares: verb names and error codes (proto/protocol.md). */
#include "proto.h"

static const char *const verb_names[CMD_VERB_N] = {
	[CMD_ALLOW] = "allow", [CMD_PEEK] = "peek", [CMD_RESET] = "reset",
	[CMD_PING] = "ping",   [CMD_QUIT] = "quit",
};

static const char *const error_codes[CMD_ERR_N] = {
	[CMD_ERR_SYNTAX] = "syntax",
	[CMD_ERR_UNKNOWN_COMMAND] = "unknown-command",
	[CMD_ERR_UNKNOWN_ACTION] = "unknown-action",
	[CMD_ERR_BAD_COST] = "bad-cost",
	[CMD_ERR_BAD_USER] = "bad-user",
	[CMD_ERR_LINE_TOO_LONG] = "line-too-long",
	[CMD_ERR_FORBIDDEN] = "forbidden",
	[CMD_ERR_TOO_MANY_CLIENTS] = "too-many-clients",
	[CMD_ERR_STORE_UNAVAILABLE] = "store-unavailable",
};

const char *proto_verb_name(enum cmd_verb v)
{
	return (unsigned)v < CMD_VERB_N ? verb_names[v] : "other";
}

const char *proto_error_code(enum cmd_error e)
{
	return (unsigned)e < CMD_ERR_N ? error_codes[e] : "other";
}
