/* vectors.h - reads tests/vectors.txt: scenarios of (policy, decisions, expected replies). */
#ifndef RL_TEST_VECTORS_H
#define RL_TEST_VECTORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter.h"
#include "policy.h"

struct vector_step {
	int line;
	int64_t now_us;
	enum limiter_op op;
	int64_t cost;
	struct limiter_result want;
};

/* Calls on_policy for each "policy" line and on_step for each decision line.
 * Returns the number of decision lines, or -1 on a malformed file. */
static inline int vectors_read(const char *path, void (*on_policy)(const struct policy *, void *),
			       void (*on_step)(const struct vector_step *, void *), void *arg)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[512];
	int lineno = 0, steps = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (strncmp(line, "policy ", 7) == 0) {
			struct policy p;
			memset(&p, 0, sizeof(p));
			strcpy(p.name, "v");
			p.name_len = 1;
			p.on_store_error = POLICY_ON_ERROR_INHERIT;
			char *save = NULL;
			char *tok = strtok_r(line + 7, " \n", &save);
			if (!tok || policy_algo_parse(tok, strlen(tok), &p.algo) < 0)
				goto bad;
			int rate = policy_algo_shape(p.algo) == POLICY_SHAPE_RATE;
			long long cap = 0;
			if (rate)
				cap = atoll(strtok_r(NULL, " \n", &save));
			while ((tok = strtok_r(NULL, " \n", &save))) {
				long long count, period, after, within, ban_for;
				if (sscanf(tok, "ban=%lld/%lld/%lld", &after, &within, &ban_for) ==
				    3) {
					p.ban = (struct policy_ban){after, within, ban_for};
					continue;
				}
				if (sscanf(tok, "%lld/%lld", &count, &period) != 2)
					goto bad;
				struct policy_limit *l = &p.limits[p.nlimits++];
				l->count = count;
				l->period_ms = period;
				l->capacity = rate ? cap : count;
			}
			on_policy(&p, arg);
			continue;
		}
		struct vector_step s = {.line = lineno};
		long long now, cost, a, lim, rem, retry, reset;
		char op;
		if (sscanf(line, "%lld %c %lld -> %lld %lld %lld %lld %lld", &now, &op, &cost, &a,
			   &lim, &rem, &retry, &reset) != 8)
			goto bad;
		s.now_us = now;
		s.op = op == 'a' ? LIMITER_ALLOW : op == 'p' ? LIMITER_PEEK : LIMITER_RESET;
		s.cost = cost;
		s.want = (struct limiter_result){(int)a, lim, rem, retry, reset};
		on_step(&s, arg);
		steps++;
	}
	fclose(f);
	return steps;
bad:
	fprintf(stderr, "%s:%d: malformed vector\n", path, lineno);
	fclose(f);
	return -1;
}

#endif
