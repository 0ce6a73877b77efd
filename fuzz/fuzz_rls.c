/*
 * fuzz_rls.c - libFuzzer harness for Envoy's ShouldRateLimit, pure part
 * (src/grpc/rls.c): the RateLimitRequest read (src/grpc/rls_wire.c), the
 * lookup in envoy rules, the plan, and the answer for results taken from
 * the input.
 *
 * Input: byte 0 flags (bit 0 allowed, bits 1-2 headers, bit 3 per-pair
 * figures known), bytes 1-2 the remaining of every pair, then the message.
 * Invariants: the pairs are distinct, at most CMD_MULTI_MAX, each the pair
 * of a counted descriptor; the answer decodes back with one status per
 * descriptor, and an overall code OVER_LIMIT exactly when it was denied.
 * And the daemon's reader (src/grpc/rls_wire.c) takes the message exactly
 * when protobuf-c's unpack does, with the same fields (strings as C reads
 * protobuf-c's: up to a NUL).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_log.h"
#include "grpc_pb.h"
#include "rls.h"
#include "rls_wire.h"

const char *const fuzz_name = "fuzz_rls";

static const char RULES[] =
	"domain: web\n"
	"descriptors:\n"
	"  - {key: remote_address, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
	"  - {key: user, rate_limit: {unit: hour, requests_per_unit: 5, name: u}}\n"
	"  - {key: path, value: /a*, rate_limit: {unit: second, requests_per_unit: 0}}\n"
	"  - {key: vip, rate_limit: {unlimited: true, replaces: [{name: u}]}}\n"
	"  - key: plan\n"
	"    value: free\n"
	"    shadow_mode: true\n"
	"    descriptors:\n"
	"      - {key: user, rate_limit: {unit: day, requests_per_unit: 4}}\n";

static int same_str(struct rls_wire_str a, const char *b)
{
	return a.len == strlen(b) && memcmp(a.s, b, a.len) == 0;
}

/* rls_wire_request_read against protobuf-c's unpack of the same bytes. */
static void same_request(const uint8_t *msg, size_t len)
{
	static struct rls_wire_request w;
	int ours = rls_wire_request_read(msg, len, &w);
	Envoy__Service__Ratelimit__V3__RateLimitRequest *r =
		envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, len, msg);
	check((ours == 0) == (r != NULL), "the reader takes what protobuf-c takes");
	if (!r)
		return;
	check(same_str(w.domain, r->domain), "domain");
	check(w.hits_addend == r->hits_addend, "hits_addend");
	check(w.n_descriptors == r->n_descriptors, "descriptors");
	for (size_t i = 0; i < r->n_descriptors && i < RLS_WIRE_MAX_DESCRIPTORS; i++) {
		const struct rls_wire_descriptor *d = &w.d[i];
		const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *pd =
			r->descriptors[i];
		check(d->n_entries == pd->n_entries, "entries");
		for (size_t j = 0; j < pd->n_entries && j < RLS_WIRE_MAX_ENTRIES; j++)
			check(same_str(d->entries[j].key, pd->entries[j]->key) &&
				      same_str(d->entries[j].value, pd->entries[j]->value),
			      "an entry");
		check(d->has_limit == (pd->limit != NULL), "a limit");
		if (pd->limit)
			check(d->requests_per_unit == pd->limit->requests_per_unit &&
				      d->unit == (int32_t)pd->limit->unit,
			      "the limit's fields");
		check(d->has_hits_addend == (pd->hits_addend != NULL), "a hits_addend");
		if (pd->hits_addend)
			check(d->hits_addend == pd->hits_addend->value, "its value");
	}
	envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config cfg;
	static struct rls_plan plan;
	static uint8_t buf[RLS_ANSWER_MAX];
	if (!cfg.envoy.rules) {
		char err[512];
		cfg.envoy.rules = envoy_rules_parse("fuzz.yaml", RULES, sizeof(RULES) - 1,
						    POLICY_FIXED_WINDOW, err, sizeof(err));
		check(cfg.envoy.rules != NULL, "rules");
		cfg.envoy.algorithm = POLICY_FIXED_WINDOW;
	}
	if (size < 3)
		return 0;
	int flags = data[0];
	int64_t remaining = data[1] | data[2] << 8;
	data += 3;
	size -= 3;
	same_request(data, size);
	enum grpc_status status;
	const char *why;
	if (rls_plan(&cfg, data, size, &plan, &status, &why) < 0) {
		check(why != NULL && status != GRPC_OK, "an error says why");
		return 0;
	}
	check(plan.n >= 1 && plan.n <= RLS_MAX_DESCRIPTORS, "descriptors");
	check(plan.npairs >= 0 && plan.npairs <= CMD_MULTI_MAX, "pairs");
	for (int p = 0; p < plan.npairs; p++) {
		const struct rls_desc *d = &plan.d[plan.pair_desc[p]];
		check(d->kind == RLS_COUNTED && d->pair == p + 1, "a pair's descriptor");
		check(plan.user_len[p] <= KEYS_USER_MAX, "user length");
		check(policy_name_valid(d->limit->policy.name, d->limit->policy.name_len),
		      "a policy name for keys");
	}
	for (int i = 0; i < plan.n; i++)
		check(plan.d[i].kind != RLS_COUNTED ||
			      (plan.d[i].pair >= 1 && plan.d[i].pair <= plan.npairs),
		      "a counted descriptor has its pair");
	struct cmd_request req;
	struct cmd_pair pairs[RLS_MAX_DESCRIPTORS];
	rls_request(&plan, pairs, &req);
	if (plan.npairs == 1) /* one pair: a plain ALLOW or PEEK on its policy */
		check(req.npairs == 0 && req.policy &&
			      (req.verb == CMD_ALLOW || req.verb == CMD_PEEK),
		      "one pair's request");
	else
		check(req.npairs == plan.npairs && req.many == pairs, "request pairs");
	struct cmd_result res;
	struct cmd_pair_result figures[RLS_MAX_DESCRIPTORS];
	memset(&res, 0, sizeof(res));
	int allowed = flags & 1;
	res.kind = CMD_REPLY_DECISION;
	res.allowed = allowed;
	res.limit = 5;
	res.remaining = remaining;
	res.retry_after_ms = allowed ? 0 : remaining * 7;
	res.reset_ms = remaining * 3;
	res.pair = plan.npairs ? 1 : 0;
	if (flags & 8)
		res.pairs = figures;
	for (int p = 0; p < plan.npairs && (flags & 8); p++)
		res.pairs[p] = (struct cmd_pair_result){1, p % 2 || allowed, remaining + p,
							remaining * 11};
	size_t len = rls_encode(&plan, plan.npairs ? &res : NULL, allowed, (flags >> 1) & 3,
				1700000000, buf);
	check(len > 0 && len <= sizeof(buf), "answer length");
	Envoy__Service__Ratelimit__V3__RateLimitResponse *back =
		envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, len, buf);
	check(back != NULL, "the answer decodes");
	check(back->n_statuses == (size_t)plan.n, "one status per descriptor");
	check((back->overall_code ==
	       ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT) == !allowed,
	      "overall code");
	envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(back, NULL);
	return 0;
}
