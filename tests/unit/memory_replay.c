/*
 * memory_replay.c - replays scenarios written as tests/vectors.txt is (the
 * expected replies are ignored) through the memory store on the times they
 * give, and prints each reply: "ALLOWED LIMIT REMAINING RETRY RESET" (and
 * "GROUP SHADOW_GROUP" in a multi scenario), one line per decision. The
 * differential test (tests/integration/test_memory.py) feeds the same random
 * scenarios to this and to the Lua script in a real Redis.
 *
 * usage: memory_replay FILE
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "policy.h"
#include "store.h"
#include "store_memory.h"
#include "store_replay.h"

static void print_reply(struct store_replay *r, const struct vector_step *s,
			const struct store_result *res)
{
	(void)r;
	if (res->status != STORE_OK) {
		printf("error %s\n", res->detail ? res->detail : "?");
		return;
	}
	printf("%d %lld %lld %lld %lld", res->allowed, (long long)res->limit,
	       (long long)res->remaining, (long long)res->retry_after_ms, (long long)res->reset_ms);
	if (s->multi) {
		printf(" %d %d", res->pair, res->shadow_pair);
		for (int g = 0; g < res->ngroups; g++)
			printf(" %d %lld %lld", res->groups[g].allowed,
			       (long long)res->groups[g].remaining,
			       (long long)res->groups[g].reset_ms);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: memory_replay FILE\n");
		return 2;
	}
	struct event_base *base = event_base_new();
	struct config_memory cfg = {CONFIG_MEMORY_MAX_KEYS_DEFAULT};
	char err[128];
	struct store_replay r;
	memset(&r, 0, sizeof(r));
	r.reply = print_reply;
	r.s = base ? store_memory_new(base, &cfg, err, sizeof(err)) : NULL;
	if (!r.s) {
		fprintf(stderr, "memory_replay: cannot start the store\n");
		return 1;
	}
	store_memory_set_clock(r.s, store_replay_clock, &r);
	int n = store_replay_file(&r, argv[1]);
	r.s->ops->free(r.s);
	event_base_free(base);
	return n < 0 ? 1 : 0;
}
