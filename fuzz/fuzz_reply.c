/*
 * fuzz_reply.c - libFuzzer harness for decoding Redis replies to the decision
 * script (store_reply_decision in src/store/store_reply.c), behind the reply
 * reader the daemon uses (hiredis's parser building its objects in an arena,
 * src/store/reply_arena.c), and that reader against hiredis's own.
 *
 * Input: byte 0 chooses how the rest is fed to the redisReader (whole, or in
 * chunks of 1..255 bytes, as replies arrive from a socket); the rest is what
 * "Redis" sends. Every reply obtained is decoded at first = 0 and 5 (one
 * decision, or the second of a batch of two) and at its own element count
 * (and that minus 5); and, for arrays, every element is decoded too (nested
 * replies). The result must match a reference decoder
 * written from the header's contract: STORE_OK with allowed in {0,1},
 * limit >= 0, retry >= -1, reset >= 0 and the five integers copied, or
 * STORE_FAILED with a detail. Any violation aborts.
 *
 * hiredis 0.14.1 allocates an array's element vector as soon as it reads the
 * header (`*2000000000` asks for 16 GB), which libFuzzer reports as an
 * out-of-memory crash in hiredis rather than in our code. The reader's
 * createArray is therefore wrapped to refuse more than MAX_ELEMENTS elements;
 * the reader then fails with an out-of-memory error, like a real failed
 * allocation would, as the arena reader does past the same count.
 *
 * Both readers are fed the same chunks: each must hand out the same replies
 * (type, integer, string bytes, elements, at every depth) and fail at the
 * same point; a difference aborts.
 */
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply_arena.h"
#include "store.h"
#include "store_reply.h"

#define MAX_ELEMENTS 65536

/* Also decode at offsets where first + 5 wraps around (ULONG_MAX - 2...):
 * the bounds check must not wrap (it once did; fuzz/crashes-found/README.md). */
#ifndef RL_FUZZ_WRAPPING_FIRST
#define RL_FUZZ_WRAPPING_FIRST 1
#endif

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_reply: invariant violated: %s\n", what);
		abort();
	}
}

static void *(*real_create_array)(const redisReadTask *, int);

static void *guarded_create_array(const redisReadTask *task, int elements)
{
	if (elements > MAX_ELEMENTS)
		return NULL;
	return real_create_array(task, elements);
}

/* What store_reply_decision must answer, from store_reply.h. */
static int reference(const redisReply *rep, unsigned long first, long long v[5])
{
	if (!rep || rep->type != REDIS_REPLY_ARRAY)
		return -1;
	if (first > rep->elements || rep->elements - first < 5)
		return -1;
	for (unsigned long i = 0; i < 5; i++) {
		const redisReply *e = rep->element[first + i];
		if (!e || e->type != REDIS_REPLY_INTEGER)
			return -1;
		v[i] = e->integer;
	}
	if (v[0] == -3) { /* a SETTLE's or CANCEL's hold not open: no figures */
		v[0] = v[1] = v[2] = v[3] = v[4] = 0;
		return 0;
	}
	if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[1] > STORE_REPLY_COUNT_MAX ||
	    v[2] < -STORE_REPLY_COUNT_MAX || v[2] > STORE_REPLY_COUNT_MAX || v[3] < -1 ||
	    v[3] > STORE_REPLY_MS_MAX || v[4] < 0 || v[4] > STORE_REPLY_MS_MAX)
		return -1;
	return 0;
}

/* Redis's text of a failed decision (-1) at element first, where the
 * script puts it: alone after the call's decisions (element total), a
 * non-empty string. NULL when there is none. */
static const char *failure_text(const redisReply *rep, unsigned long first, unsigned long total)
{
	if (!rep || rep->type != REDIS_REPLY_ARRAY || first > rep->elements ||
	    rep->elements - first < 5 || total >= rep->elements || rep->elements - total != 1)
		return NULL;
	for (unsigned long i = 0; i < 5; i++)
		if (!rep->element[first + i] ||
		    rep->element[first + i]->type != REDIS_REPLY_INTEGER)
			return NULL;
	const redisReply *t = rep->element[total];
	if (rep->element[first]->integer != -1 || !t || t->type != REDIS_REPLY_STRING ||
	    t->len == 0 || t->str[0] == '\0')
		return NULL;
	return t->str;
}

/* The decision at element first of a call whose decisions take total. */
static void decode(const redisReply *rep, unsigned long first, unsigned long total)
{
	struct store_result res, clean;
	memset(&res, 0xa5, sizeof(res));
	int rc = store_reply_decision(rep, first, total, &res);
	memset(&clean, 0, sizeof(clean));
	check(store_reply_decision(rep, first, total, &clean) == rc &&
		      memcmp(&res, &clean, offsetof(struct store_result, groups)) == 0,
	      "nothing of what the result held before is left (b289e9b's stack garbage)");
	long long v[5];
	int want = reference(rep, first, v);
	check(rc == want, "verdict differs from the reference");
	int no_hold = rc == 0 && rep->element[first]->integer == -3;
	check(rc != 0 || res.no_hold == no_hold, "no_hold exactly when the script said -3");
	if (rc == 0) {
		check(res.status == STORE_OK, "rc 0 means STORE_OK");
		check(res.allowed == 0 || res.allowed == 1, "allowed in {0,1}");
		check(res.limit >= 0, "limit >= 0");
		check(res.retry_after_ms >= -1, "retry_after_ms >= -1");
		check(res.reset_ms >= 0, "reset_ms >= 0");
		check(res.retry_after_ms <= STORE_REPLY_MS_MAX &&
			      res.reset_ms <= STORE_REPLY_MS_MAX,
		      "a wait and a reset the front ends can round up");
		check(res.allowed == v[0] && res.limit == v[1] && res.remaining == v[2] &&
			      res.retry_after_ms == v[3] && res.reset_ms == v[4],
		      "fields are the five integers");
		check(res.block == 0 && res.block_ms == 0, "no block unless one was asked");
		/* read as a decision that asked for a block too (op "k") */
		struct store_result b = res;
		if (store_reply_block(rep, first, &b) == 0) {
			check(b.status == STORE_OK, "a block read: STORE_OK");
			check(b.block >= 0 && b.block_ms >= 0, "a block's figures >= 0");
			check(b.block == 0 || b.allowed, "units only with an allowed answer");
			check((b.block > 0) == (b.block_ms > 0), "units and their time together");
			check(b.block_window >= 0 && (b.block_window == 0 || b.block > 0),
			      "a window only with units");
		} else {
			check(b.status == STORE_FAILED && b.error == STORE_ERROR_REPLY,
			      "a block that cannot be read is a reply error");
			check(b.block == 0 && b.block_ms == 0 && b.block_window == 0,
			      "no block from a bad reply");
		}
		/* read as a STATE (op "t") of as many keys as follow, up to a
		 * policy's limits and its ban */
		struct store_result s = res;
		int nkeys = (int)((rep->elements - first - 5) / 5);
		if (nkeys > POLICY_MAX_LIMITS + 1)
			nkeys = POLICY_MAX_LIMITS + 1;
		if (nkeys < 1)
			nkeys = 1;
		if (store_reply_state(rep, first, nkeys, &s) == 0) {
			check(s.status == STORE_OK && s.nkeys == nkeys, "a STATE read: its keys");
			for (int k = 0; k < nkeys; k++)
				check(s.keys[k].used >= 0 && s.keys[k].remaining >= 0 &&
					      s.keys[k].reset_ms >= 0 &&
					      s.keys[k].reset_ms <= STORE_REPLY_MS_MAX &&
					      s.keys[k].start_ms >= 0 &&
					      s.keys[k].end_ms >= s.keys[k].start_ms,
				      "a key's figures are counts and times");
		} else {
			check(s.status == STORE_FAILED && s.error == STORE_ERROR_REPLY &&
				      s.nkeys == 0,
			      "a STATE that cannot be read is a reply error, with no keys");
		}
	} else {
		check(rc == -1, "store_reply_decision returns 0 or -1");
		check(res.status == STORE_FAILED, "rc -1 means STORE_FAILED");
		check(res.detail != NULL && res.detail[0] != '\0', "a failure says why");
		check(res.error > STORE_ERROR_NONE && res.error < STORE_ERROR_N,
		      "a failure has a kind");
		const char *text = failure_text(rep, first, total);
		check(!text || res.detail == text,
		      "a failure's text is the one after the decisions");
	}
}

/* A decision over npairs pairs at element first: the five integers, then
 * the deciding pair (1..npairs) and the first shadow pair that would have
 * denied (0..npairs), then three per pair (its own figures). */
static void decode_pairs(const redisReply *rep, unsigned long first, int npairs)
{
	struct store_result res, clean;
	memset(&res, 0xa5, sizeof(res));
	unsigned long width = 7 + 3 * (unsigned long)npairs;
	check(store_reply_width(npairs, 0, 0) == width, "width of a decision over pairs");
	int rc = store_reply_decision_all(rep, first, first + width, npairs, &res);
	memset(&clean, 0, sizeof(clean));
	check(store_reply_decision_all(rep, first, first + width, npairs, &clean) == rc &&
		      memcmp(&res, &clean, offsetof(struct store_result, groups)) == 0,
	      "nothing of what the result held before is left (b289e9b's stack garbage)");
	long long v[5];
	int want = reference(rep, first, v);
	if (want == 0) {
		/* (reference: first + 5 <= elements) */
		int fits = rep->elements - first >= width;
		const redisReply *const *el = (const redisReply *const *)rep->element + first;
		const redisReply *p = fits ? el[5] : NULL;
		const redisReply *sh = fits ? el[6] : NULL;
		want = p && sh && p->type == REDIS_REPLY_INTEGER &&
				       sh->type == REDIS_REPLY_INTEGER && p->integer >= 1 &&
				       p->integer <= npairs && sh->integer >= 0 &&
				       sh->integer <= npairs
			       ? 0
			       : -1;
		/* then three per pair: passed (0/1), remaining, reset (>= 0) */
		static const long long most[3] = {1, STORE_REPLY_COUNT_MAX, STORE_REPLY_MS_MAX};
		for (unsigned long i = 7; want == 0 && i < width; i++) {
			const redisReply *e = el[i];
			want = e && e->type == REDIS_REPLY_INTEGER && e->integer >= 0 &&
					       e->integer <= most[(i - 7) % 3]
				       ? 0
				       : -1;
		}
	}
	check(rc == want, "verdict of a decision over pairs differs from the reference");
	if (rc == 0) {
		check(res.status == STORE_OK, "rc 0 means STORE_OK");
		check(res.pair >= 1 && res.pair <= npairs, "the deciding pair is one of them");
		check(res.shadow_pair >= 0 && res.shadow_pair <= npairs, "shadow pair in range");
		check(res.ngroups == npairs, "each pair's own figures");
		for (int g = 0; g < npairs; g++)
			check(res.groups[g].allowed == rep->element[first + 7 + 3 * g]->integer &&
				      res.groups[g].remaining ==
					      rep->element[first + 8 + 3 * g]->integer &&
				      res.groups[g].reset_ms ==
					      rep->element[first + 9 + 3 * g]->integer,
			      "a pair's figures are its three integers");
	} else {
		check(res.status == STORE_FAILED, "rc -1 means STORE_FAILED");
		check(res.detail != NULL && res.detail[0] != '\0', "a failure says why");
		const char *text = failure_text(rep, first, first + width);
		check(!text || res.detail == text,
		      "a failure's text is the one after the decision");
	}
}

/* Error texts are classified once, in store_reply.c: any bytes, any length. */
static void classify(const redisReply *rep)
{
	if (rep->type != REDIS_REPLY_ERROR && rep->type != REDIS_REPLY_STRING &&
	    rep->type != REDIS_REPLY_STATUS)
		return;
	enum store_error e = store_reply_error(rep->str, rep->len);
	check(e > STORE_ERROR_NONE && e < STORE_ERROR_N, "an error text has a kind");
	int slot = -1;
	const char *to = NULL;
	size_t to_len = 0;
	if (store_reply_redirect(rep->str, rep->len, &slot, &to, &to_len) == 0) {
		check(e == STORE_ERROR_MOVED || e == STORE_ERROR_ASK, "a redirect is MOVED or ASK");
		check(slot >= 0 && slot <= 16383, "slot in range");
		check(to > rep->str && to + to_len <= rep->str + rep->len && to_len > 0,
		      "the address lies inside the error text");
	}
}

static void decode_all(const redisReply *rep, int depth)
{
	classify(rep);
	check(store_reply_width(0, 0, 0) == 5 && store_reply_width(0, 1, 0) == 8 &&
		      store_reply_width(0, 0, 3) == 20,
	      "width of a decision (a block's, a STATE's of three keys)");
	decode(rep, 0, 5);
	decode(rep, 5, 10);
	decode_pairs(rep, 0, 1);
	decode_pairs(rep, 0, 3);
	decode_pairs(rep, 5, 2); /* after a decision of one pair, in one call */
	if (RL_FUZZ_WRAPPING_FIRST) {
		decode(rep, ULONG_MAX, ULONG_MAX);
		decode(rep, ULONG_MAX - 2, 3);
		decode_pairs(rep, ULONG_MAX - 3, 1);
	}
	if (rep->type != REDIS_REPLY_ARRAY)
		return;
	decode(rep, rep->elements, rep->elements);
	if (rep->elements >= 5)
		decode(rep, rep->elements - 5, rep->elements);
	if (rep->elements >= 6) /* the last decision, then Redis's text of a failure */
		decode(rep, rep->elements - 6, rep->elements - 1);
	if (rep->elements >= 13) /* a decision over two pairs, then one of one pair */
		decode(rep, 13, rep->elements - 1);
	if (depth < 8)
		for (size_t i = 0; i < rep->elements; i++)
			if (rep->element[i])
				decode_all(rep->element[i], depth + 1);
}

/* Whether two replies are the same tree. */
static int same_reply(const redisReply *a, const redisReply *b, int depth)
{
	if (a->type != b->type || a->integer != b->integer || a->len != b->len ||
	    a->elements != b->elements)
		return 0;
	if ((a->str == NULL) != (b->str == NULL))
		return 0;
	if (a->str && (memcmp(a->str, b->str, a->len) != 0 || a->str[a->len] != '\0'))
		return 0;
	if (depth > 16)
		return 1;
	for (size_t i = 0; i < a->elements; i++) {
		if ((a->element[i] == NULL) != (b->element[i] == NULL))
			return 0;
		if (a->element[i] && !same_reply(a->element[i], b->element[i], depth + 1))
			return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int once;
	if (!once) {
		decode(NULL, 0, 5); /* the NULL reply of a disconnect */
		once = 1;
	}
	if (size < 1)
		return 0;
	size_t chunk = data[0] ? data[0] : SIZE_MAX;
	data++;
	size--;

	redisReader *r = redisReaderCreate();
	check(r != NULL, "out of memory");
	/* The default functions live in hiredis; keep them, bound createArray. */
	static redisReplyObjectFunctions fns;
	fns = *r->fn;
	real_create_array = fns.createArray;
	fns.createArray = guarded_create_array;
	r->fn = &fns;

	redisReader *ar = reply_arena_reader_new();
	check(ar != NULL, "out of memory");

	size_t off = 0;
	int failed = 0;
	while (!failed && off < size) {
		size_t k = size - off < chunk ? size - off : chunk;
		int fed = redisReaderFeed(r, (const char *)data + off, k);
		check(fed == redisReaderFeed(ar, (const char *)data + off, k),
		      "the readers differ on a feed");
		if (fed != REDIS_OK)
			break;
		off += k;
		for (;;) {
			void *reply = NULL, *areply = NULL;
			int got = redisReaderGetReply(r, &reply);
			int agot = redisReaderGetReply(ar, &areply);
			check(got == agot, "the readers differ on failing");
			check((reply == NULL) == (areply == NULL), "the readers differ on a reply");
			if (got != REDIS_OK) {
				failed = 1; /* protocol error: the daemon drops the connection */
				break;
			}
			if (!reply)
				break;
			check(same_reply(reply, areply, 0),
			      "the arena's reply differs from hiredis's");
			decode_all(areply, 0);
			freeReplyObject(reply);
			reply_arena_free(ar, areply);
		}
	}
	reply_arena_reader_free(ar);
	redisReaderFree(r);
	return 0;
}
