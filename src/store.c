/* store.c - dispatch to the configured store backend. */
#include "store.h"

void store_submit(struct store *s, const struct store_request *req, store_done_fn *done, void *arg)
{
	s->ops->submit(s, req, done, arg);
}

size_t store_pending(const struct store *s)
{
	return s->ops->pending(s);
}

unsigned long store_generation(const struct store *s)
{
	return s->ops->generation(s);
}

void store_watch_resets(struct store *s, const char *prefix, store_reset_fn *fn, void *arg)
{
	s->ops->watch_resets(s, prefix, fn, arg);
}

int store_resets_followed(const struct store *s)
{
	return s->ops->resets_followed(s);
}

void store_free(struct store *s)
{
	if (s)
		s->ops->free(s);
}

const char *store_status_name(enum store_status st)
{
	switch (st) {
	case STORE_OK:
		return "ok";
	case STORE_TIMEOUT:
		return "timeout";
	case STORE_UNAVAILABLE:
		return "unavailable";
	case STORE_OVERLOAD:
		return "overload";
	case STORE_FAILED:
		return "failed";
	}
	return "?";
}
