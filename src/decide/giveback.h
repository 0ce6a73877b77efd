/*
 * giveback.h - a graceful stop gives the units of the blocks this daemon
 * holds (blocks.h) back to the windows they were counted in, in every
 * store: each table is closed first (its blocks out of it: none is
 * answered from again), then one call per block (store_give.h), and done
 * once every call is answered. A block of a funnel or of several limits
 * is not given back: it lapses. Logs "gave back N units of M blocks".
 */
#ifndef RL_GIVEBACK_H
#define RL_GIVEBACK_H

struct cmd_env;
struct config;
struct giveback;

/* Starts on env's blocks (its default store's and each named store's)
 * under cfg (the blocks' policies by name, the key prefix). done(arg)
 * runs once every block's call is answered, possibly from inside; NULL
 * then (also when out of memory, nothing given back), else the
 * give-back, until done runs. */
struct giveback *giveback_start(const struct cmd_env *env, const struct config *cfg,
				void (*done)(void *arg), void *arg);
/* The drain's time ran out before every call was answered: done is not
 * called, what was answered is logged now; the calls still out are
 * answered as their stores are freed, and the give-back freed with the
 * last (the blocks' tables must outlive the stores). */
void giveback_abandon(struct giveback *g);

#endif
