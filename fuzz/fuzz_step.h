/* fuzz_step.h - the protocol fuzzers' shared loop (fuzz_step.c) and what each protocol gives it. */
#ifndef RL_FUZZ_STEP_H
#define RL_FUZZ_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_log.h"
#include "proto.h"

/* Given by each protocol's harness. */
extern const struct proto *const fuzz_proto;
/* Formats res with fuzz_proto into an exact-size buffer and checks it. */
void fuzz_check_reply(const struct cmd_result *res);

/* Optional, set by a harness before fuzz_run (NULL: none): more checks of
 * its own on each step of the one-write feed, given the step's exact-size
 * window w[0..len), its result and outcome, after the shared ones. */
extern void (*fuzz_step_check)(const char *w, size_t len, size_t max_line, enum proto_step st,
			       const struct proto_parsed *got);

/* The most bytes a step sees (proto_window). */
size_t fuzz_window(size_t max_line);
/* Feeds the stream s[0..n) three ways and compares (see fuzz_step.c);
 * state: the connection's state the protocol's step gets (state_size
 * bytes, copied for each feed), or NULL. */
void fuzz_run(size_t max_line, const void *state, size_t state_size, const char *s, size_t n,
	      uint32_t rnd);

#endif
