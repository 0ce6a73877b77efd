/* cmd_table.c - the verbs' table (cmd_table.h): one row each, in enum cmd_verb's order. */
#include "cmd_table.h"

#include <string.h>

#include "cmd_run.h"
#include "config.h"
#include "decide.h"
#include "store.h"

#define TEXT (CMD_ON_LINE | CMD_ON_RESP)
#define DECIDE CONFIG_RIGHT_DECIDE
#define ADMIN CONFIG_RIGHT_ADMIN

/* PING, QUIT, AUTH: answered here (AUTH by authorize already). */
static void run_ping(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		     struct cmd_slot *slot)
{
	(void)cfg, (void)env, (void)pc;
	decide_reply(slot, CMD_REPLY_PONG);
}

static void run_quit(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		     struct cmd_slot *slot)
{
	(void)cfg, (void)env, (void)pc;
	decide_reply(slot, CMD_REPLY_BYE);
}

static void run_auth(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		     struct cmd_slot *slot)
{
	(void)cfg, (void)env, (void)pc, (void)slot; /* authorize answered it */
}

/* No op: the handler is not cmd_run_pair. */
#define NO_OP (-1)

#define PAIR CMD_ARGS_PAIR
#define COST CMD_ARGS_COST
#define COST_NEEDED CMD_ARGS_COST_NEEDED
#define WAIT CMD_ARGS_WAIT
#define TRACE CMD_ARGS_TRACE
#define GET 1
/* a grammar of its own: no common arguments, usage or route */
#define OWN 0, NULL, NULL, 0

const struct cmd_verb_row cmd_verbs[CMD_VERB_N] = {
	[CMD_ALLOW] = {"ALLOW", DECIDE, 0, NULL, TEXT, STORE_ALLOW, cmd_run_pair, "allow",
		       PAIR | COST | WAIT | TRACE,
		       "ALLOW <user> <action> [<cost>] [WAIT <ms>] [TRACE <traceparent>]",
		       "/v1/allow", GET},
	[CMD_PEEK] = {"PEEK", DECIDE, 0, NULL, TEXT, STORE_PEEK, cmd_run_pair, "peek",
		      PAIR | COST | TRACE, "PEEK <user> <action> [<cost>] [TRACE <traceparent>]",
		      "/v1/peek", GET},
	[CMD_RESET] = {"RESET", ADMIN, 1, NULL, TEXT, STORE_RESET, cmd_run_pair, "reset", PAIR,
		       "RESET <user> <action>", "/v1/reset", 0},
	[CMD_PING] = {"PING", 0, 0, NULL, TEXT, NO_OP, run_ping, "ping", OWN},
	[CMD_QUIT] = {"QUIT", 0, 0, NULL, TEXT, NO_OP, run_quit, "quit", OWN},
	/* RESP only, and only when the configuration enables it */
	[CMD_THROTTLE] = {"CL.THROTTLE", DECIDE, 0, NULL, CMD_ON_RESP, NO_OP, cmd_run_throttle,
			  "throttle", OWN},
	[CMD_MALLOW] = {"MALLOW", DECIDE, 0, NULL, TEXT, NO_OP, multi_execute, "mallow", OWN},
	[CMD_MPEEK] = {"MPEEK", DECIDE, 0, NULL, TEXT, NO_OP, multi_execute, "mpeek", OWN},
	[CMD_OVERRIDE] = {"OVERRIDE", ADMIN, 1, "overrides need", TEXT, NO_OP, cmd_run_live,
			  "override", OWN},
	[CMD_UNOVERRIDE] = {"UNOVERRIDE", ADMIN, 1, "overrides need", TEXT, NO_OP, cmd_run_live,
			    "unoverride", OWN},
	[CMD_OVERRIDES] = {"OVERRIDES", ADMIN, 1, "overrides need", TEXT, NO_OP, cmd_run_live,
			   "overrides", OWN},
	[CMD_AUTH] = {"AUTH", 0, 0, NULL, TEXT, NO_OP, run_auth, "auth", OWN},
	[CMD_ACQUIRE] = {"ACQUIRE", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_lease, "acquire",
			 PAIR | COST, "ACQUIRE <user> <action> [<cost>]", "/v1/acquire", 0},
	[CMD_RELEASE] = {"RELEASE", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_lease, "release", OWN},
	[CMD_RENEW] = {"RENEW", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_lease, "renew", OWN},
	[CMD_CHARGE] = {"CHARGE", DECIDE, 0, NULL, TEXT, STORE_CHARGE, cmd_run_pair, "charge",
			PAIR | COST_NEEDED, "CHARGE <user> <action> <cost>", "/v1/charge", 0},
	[CMD_HOLD] = {"HOLD", DECIDE, 0, NULL, TEXT, STORE_HOLD, cmd_run_pair, "hold",
		      PAIR | COST_NEEDED, "HOLD <user> <action> <estimate>", "/v1/hold", 0},
	[CMD_SETTLE] = {"SETTLE", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_hold, "settle", OWN},
	[CMD_CANCEL] = {"CANCEL", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_hold, "cancel", OWN},
	[CMD_TOP] = {"TOP", ADMIN, 1, NULL, TEXT, NO_OP, cmd_run_top, "top", OWN},
	[CMD_STATE] = {"STATE", DECIDE, 0, NULL, TEXT, NO_OP, cmd_run_state, "state", PAIR,
		       "STATE <user> <action>", "/v1/state", GET},
};

int cmd_verb_named(const char *word, size_t len, unsigned front)
{
	for (int v = 0; v < CMD_VERB_N; v++) {
		const char *name = cmd_verbs[v].name;
		if (!(cmd_verbs[v].fronts & front) || strlen(name) != len)
			continue;
		size_t i = 0;
		while (i < len && (word[i] >= 'a' && word[i] <= 'z' ? word[i] - 'a' + 'A'
								    : word[i]) == name[i])
			i++;
		if (i == len)
			return v;
	}
	return -1;
}

const char *cmd_known_commands(void)
{
	/* made once from the rows: a word and a blank each */
	static char known[CMD_VERB_N * 16];
	if (!known[0]) {
		size_t n = 0;
		for (int v = 0; v < CMD_VERB_N; v++) {
			if (!(cmd_verbs[v].fronts & CMD_ON_LINE))
				continue;
			size_t len = strlen(cmd_verbs[v].name);
			if (n)
				known[n++] = ' ';
			memcpy(known + n, cmd_verbs[v].name, len);
			n += len;
		}
		known[n] = '\0';
	}
	return known;
}
