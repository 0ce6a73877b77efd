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
	int64_t wait_ms; /* op d: an ALLOW that may wait this long */
	/* ops h (HOLD cost, its nonce and time), s (SETTLE nonce actual), x
	 * (CANCEL nonce): the script's; 0 for the others */
	char hold;
	uint64_t nonce;
	int64_t hold_ms, actual;
	struct limiter_result want;
	/* a decision over several groups (ops A and P, in a "multi" scenario):
	 * the deciding group and the first shadow group that would have denied */
	int multi;
	int want_group, want_shadow_group;
	/* op t (STATE: decided as a PEEK of cost 1, op LIMITER_PEEK): each
	 * key's own figures, the limits' then the ban's (limiter_look) */
	int state, nkeys;
	struct limiter_key want_keys[POLICY_MAX_LIMITS + 1];
};

/* What vectors_read calls back: a "policy" line, a "multi" line, each
 * "group" line of a multi scenario, and each decision line. */
struct vector_calls {
	void (*policy)(const struct policy *p, void *arg);
	void (*multi)(void *arg);
	void (*group)(const struct policy *p, int shadow, void *arg);
	void (*step)(const struct vector_step *s, void *arg);
};

/* A policy written "ALGORITHM [CAPACITY] COUNT/PERIOD_MS ... [ban=A/W/F]",
 * the tokens left in strtok_r's save. 0, or -1 when malformed. */
static inline int vector_policy(char **save, struct policy *p)
{
	memset(p, 0, sizeof(*p));
	strcpy(p->name, "v");
	p->name_len = 1;
	p->on_store_error = POLICY_ON_ERROR_INHERIT;
	char *tok = strtok_r(NULL, " \n", save);
	if (!tok || policy_algo_parse(tok, strlen(tok), &p->algo) < 0)
		return -1;
	int rate = policy_algo_shape(p->algo) == POLICY_SHAPE_RATE;
	long long cap = 0;
	if (rate) {
		if (!(tok = strtok_r(NULL, " \n", save)))
			return -1;
		cap = atoll(tok);
	}
	while ((tok = strtok_r(NULL, " \n", save))) {
		long long count, period, after, within, ban_for;
		if (sscanf(tok, "ban=%lld/%lld/%lld", &after, &within, &ban_for) == 3) {
			p->ban = (struct policy_ban){after, within, ban_for};
			continue;
		}
		if (strncmp(tok, "tz=", 3) == 0) { /* calendar windows' zone */
			snprintf(p->timezone, sizeof(p->timezone), "%s", tok + 3);
			continue;
		}
		if (p->nlimits == POLICY_MAX_LIMITS)
			return -1;
		struct policy_limit *l = &p->limits[p->nlimits++];
		char n;
		if (sscanf(tok, "%lld/%lld%c", &count, &period, &n) == 2) {
			l->count = count;
			l->period_ms = period;
		} else if (policy_parse_limit(tok, strlen(tok), l, NULL, 0) < 0 ||
			   l->calendar == CALENDAR_NONE) {
			return -1; /* "COUNT/PERIOD_MS" or a calendar window, "3/month@15" */
		}
		l->capacity = rate ? cap : l->count;
	}
	return p->nlimits > 0 ? 0 : -1;
}

/* Calls back for each line (see struct vector_calls). Returns the number of
 * decision lines, or -1 on a malformed file. */
static inline int vectors_read(const char *path, const struct vector_calls *calls, void *arg)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[512];
	int lineno = 0, steps = 0, multi = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		struct policy p;
		char *save = NULL;
		char *word = strtok_r(line, " \n", &save);
		if (!word)
			goto bad;
		if (strcmp(word, "policy") == 0) {
			if (vector_policy(&save, &p) < 0)
				goto bad;
			multi = 0;
			calls->policy(&p, arg);
			continue;
		}
		if (strcmp(word, "multi") == 0) {
			multi = 1;
			calls->multi(arg);
			continue;
		}
		if (strcmp(word, "group") == 0) {
			int shadow = strncmp(save, "shadow ", 7) == 0;
			if (shadow)
				strtok_r(NULL, " \n", &save);
			if (!multi || vector_policy(&save, &p) < 0)
				goto bad;
			calls->group(&p, shadow, arg);
			continue;
		}
		struct vector_step s = {.line = lineno, .multi = multi};
		long long now = atoll(word), cost, a, lim, rem, retry, reset;
		int group = 0, shadow_group = 0;
		char op;
		long long wait = 0, hold_ms = 0, actual = -1;
		unsigned long long nonce = 0;
		int n;
		char hop = 0;
		const char *arrow = strstr(save, "->");
		if (!multi && arrow &&
		    ((sscanf(save, " h %lld %llx %lld ->", &cost, &nonce, &hold_ms) == 3 &&
		      (hop = 'h')) ||
		     (sscanf(save, " s %llx %lld ->", &nonce, &actual) == 2 && (hop = 's')) ||
		     (sscanf(save, " x %llx ->", &nonce) == 1 && (hop = 'x')))) {
			/* holds: "NOW h COST NONCE HOLD_MS", "NOW s NONCE ACTUAL", "NOW x NONCE" */
			n = sscanf(arrow, "-> %lld %lld %lld %lld %lld", &a, &lim, &rem, &retry,
				   &reset) +
			    2;
			op = 'a';
			if (hop != 'h')
				cost = 1;
		} else if (!multi && arrow && strncmp(save, "t 1 ->", 6) == 0) {
			/* "NOW t 1 -> FIVE (USED REMAINING RESET START END)...": STATE */
			int64_t v[5 + 5 * (POLICY_MAX_LIMITS + 1)];
			int nv = 0;
			char *at = (char *)arrow + 2, *end;
			while (nv < (int)(sizeof(v) / sizeof(v[0]))) {
				long long x = strtoll(at, &end, 10);
				if (end == at)
					break;
				v[nv++] = x;
				at = end;
			}
			if (nv < 10 || (nv - 5) % 5 != 0 || strspn(at, " \n") != strlen(at))
				goto bad;
			a = v[0], lim = v[1], rem = v[2], retry = v[3], reset = v[4];
			s.state = 1;
			s.nkeys = (nv - 5) / 5;
			for (int k = 0; k < s.nkeys; k++)
				s.want_keys[k] = (struct limiter_key){v[5 + 5 * k], v[6 + 5 * k],
								      v[7 + 5 * k], v[8 + 5 * k],
								      v[9 + 5 * k]};
			op = 'p';
			cost = 1;
			n = 7;
		} else if (!multi && sscanf(save, " d %lld %lld ->", &cost, &wait) == 2) {
			/* "NOW d COST WAIT_MS -> ...": an ALLOW that may wait */
			n = sscanf(strstr(save, "->"), "-> %lld %lld %lld %lld %lld", &a, &lim,
				   &rem, &retry, &reset) +
			    2;
			op = 'a';
		} else {
			n = sscanf(save, " %c %lld -> %lld %lld %lld %lld %lld %d %d", &op, &cost,
				   &a, &lim, &rem, &retry, &reset, &group, &shadow_group);
		}
		/* a multi scenario decides with A or P and answers 7 numbers; the
		 * letters are in the order of enum limiter_op */
		const char *ops = multi ? "AP" : "aprg";
		if (n != (multi ? 9 : 7) || op == '\0' || !strchr(ops, op))
			goto bad;
		s.now_us = now;
		s.op = (enum limiter_op)(strchr(ops, op) - ops);
		s.cost = cost;
		s.wait_ms = wait;
		s.hold = hop;
		s.nonce = nonce;
		s.hold_ms = hold_ms;
		s.actual = actual;
		s.want = (struct limiter_result){(int)a, lim, rem, retry, reset};
		s.want_group = group;
		s.want_shadow_group = shadow_group;
		calls->step(&s, arg);
		steps++;
	}
	fclose(f);
	return steps;
bad:
	fprintf(stderr, "%s:%d: malformed vector\n", path, lineno);
	fclose(f);
	return -1;
}

/* Every vectors file: tests/vectors.txt, then the delay's (the script's
 * "d"), CHARGE's, calendar windows' in time zones, HOLD's and STATE's
 * (the script's "t"), each with the least
 * number of decisions it holds (a file read short fails). TEST_SRCDIR is
 * the including test's. */
#ifdef TEST_SRCDIR
static const struct {
	const char *file;
	int at_least;
} vector_files[] __attribute__((unused)) = {
	{TEST_SRCDIR "/tests/vectors.txt", 50},
	{TEST_SRCDIR "/tests/vectors_delay.txt", 20},
	{TEST_SRCDIR "/tests/vectors_charge.txt", 20},
	{TEST_SRCDIR "/tests/vectors_calendar.txt", 30},
	{TEST_SRCDIR "/tests/vectors_hold.txt", 25},
	{TEST_SRCDIR "/tests/vectors_state.txt", 15},
};
#endif

#endif
