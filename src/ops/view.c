/* view.c - what the operators' HTTP views share (view.h). */
#include "view.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "envoy_rules.h"
#include "policy.h"
#include "shown.h"
#include "stats.h"

const struct policy **view_actions(const struct config *cfg, size_t *n)
{
	const struct envoy_rules *er = cfg->envoy.rules;
	size_t total = cfg->npolicies + (er ? er->nnames : 0);
	const struct policy **all = calloc(total + 1, sizeof(*all));
	*n = 0;
	if (!all)
		return NULL;
	for (size_t i = 0; i < cfg->npolicies; i++)
		all[(*n)++] = &cfg->policies[i];
	for (size_t i = 0; er && i < er->nnames; i++)
		all[(*n)++] = er->by_name[i];
	return all;
}

static int by_denied(const void *a, const void *b)
{
	const struct view_hitter *x = a, *y = b;
	if (x->row.denied != y->row.denied)
		return x->row.denied > y->row.denied ? -1 : 1;
	int c = strcmp(x->p->name, y->p->name);
	if (c)
		return c;
	size_t n = x->row.len < y->row.len ? x->row.len : y->row.len;
	c = memcmp(x->row.name, y->row.name, n);
	return c ? c : (x->row.len > y->row.len) - (x->row.len < y->row.len);
}

struct view_hitter *view_hitters(const struct config *cfg, size_t per, size_t *n)
{
	*n = 0;
	if (per > TOP_ROWS_MAX)
		per = TOP_ROWS_MAX; /* no action has more */
	size_t na;
	const struct policy **acts = per ? view_actions(cfg, &na) : NULL;
	struct view_hitter *h = acts ? calloc(na * per + 1, sizeof(*h)) : NULL;
	if (!h) {
		free(acts);
		return NULL;
	}
	for (size_t i = 0; i < na; i++) {
		struct top_row rows[TOP_ROWS_MAX];
		uint64_t req, den;
		const struct policy *p = acts[i];
		size_t k = stats_top(p->name, p->name_len, TOP_BY_DENIED, per, rows, &req, &den);
		for (size_t j = 0; j < k; j++)
			h[(*n)++] = (struct view_hitter){p, rows[j]};
	}
	free(acts);
	qsort(h, *n, sizeof(*h), by_denied);
	return h;
}

void view_put_user(struct evbuffer *b, const char *user, size_t len, size_t cut)
{
	enum { PART = 64 };
	char shown[SHOWN_USER_MAX(PART)], out[2 * sizeof(shown)];
	for (size_t at = 0; at < len; at += PART) {
		size_t part = len - at < PART ? len - at : PART;
		size_t n = shown_user(shown, user + at, part, 0), k = 0;
		for (size_t i = 0; i < n; i++) {
			if (shown[i] == '\\' || shown[i] == '"')
				out[k++] = '\\';
			out[k++] = shown[i];
		}
		evbuffer_add(b, out, k);
	}
	if (cut > len) /* as shown_user ends a user cut short */
		evbuffer_add_printf(b, "%%...%zu", cut);
}

void view_top_action_json(struct evbuffer *b, const struct policy *p, const struct top_row *rows,
			  size_t k, uint64_t requests, uint64_t denied)
{
	evbuffer_add_printf(b, "{\"action\":\"%s\",\"requests\":%llu,\"denied\":%llu,\"users\":[",
			    p->name, (unsigned long long)requests, (unsigned long long)denied);
	for (size_t i = 0; i < k; i++) {
		evbuffer_add_printf(b, "%s{\"user\":\"", i ? "," : "");
		view_put_user(b, rows[i].name, rows[i].len, rows[i].cut);
		evbuffer_add_printf(b, "\",\"denied\":%llu,\"requests\":%llu,\"over\":%llu}",
				    (unsigned long long)rows[i].denied,
				    (unsigned long long)rows[i].requests,
				    (unsigned long long)rows[i].over);
	}
	evbuffer_add_printf(b, "]}");
}

void view_action_totals(const struct stats_action *a, unsigned long long *allowed,
			unsigned long long *denied)
{
	*allowed = *denied = 0;
	for (int f = 0; a && f < STATS_FROM_N; f++) {
		*allowed += a->decisions[f][1];
		*denied += a->decisions[f][0];
	}
}
