/* test_rls.c - ShouldRateLimit's plan (src/grpc/rls.c) for a descriptor
 * carrying a limit of its own: every unit rls.proto numbers (WEEK, 7, after
 * YEAR's 6) is a window of its length and comes back in the answer; a
 * number that is no unit is INVALID_ARGUMENT. */
#include <check.h>

#include "runner.h"
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "grpc_pb.h"
#include "rls.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest Req;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor Desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry Entry;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride Over;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse Resp;

/* rls.proto's RateLimitResponse.RateLimit.Unit WEEK: envoy.type.v3's
 * RateLimitUnit, which the request's limit is, does not name it (an open
 * enum: the number goes through) */
#define UNIT_WEEK 7

static const char RULES[] =
	"domain: web\n"
	"descriptors:\n"
	"  - {key: api_key, rate_limit: {unit: minute, requests_per_unit: 3}}\n";

static struct config cfg;
static struct rls_plan plan;

static void setup(void)
{
	char err[512];
	cfg.envoy.rules = envoy_rules_parse("test.yaml", RULES, sizeof(RULES) - 1,
					    POLICY_FIXED_WINDOW, err, sizeof(err));
	ck_assert_msg(cfg.envoy.rules != NULL, "%s", err);
	cfg.envoy.algorithm = POLICY_FIXED_WINDOW;
}

static void teardown(void)
{
	envoy_rules_free(cfg.envoy.rules);
	cfg.envoy.rules = NULL;
}

/* rls_plan of a request of one descriptor, api_key=k, with the limit
 * (n per unit) of its own. */
static int plan_own(uint32_t n, int unit, enum grpc_status *status, const char **why)
{
	Entry e = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
	e.key = "api_key";
	e.value = "k";
	Entry *ep = &e;
	Over o =
		ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
	o.requests_per_unit = n;
	o.unit = (Envoy__Type__V3__RateLimitUnit)unit;
	Desc d = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
	d.n_entries = 1;
	d.entries = &ep;
	d.limit = &o;
	Desc *dp = &d;
	Req r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
	r.domain = "web";
	r.n_descriptors = 1;
	r.descriptors = &dp;
	static uint8_t msg[512];
	size_t len = envoy__service__ratelimit__v3__rate_limit_request__pack(&r, msg);
	*why = NULL;
	return rls_plan(&cfg, msg, len, &plan, status, why);
}

START_TEST(test_every_unit)
{
	static const struct {
		int unit;
		int64_t s;
	} units[] = {{ENVOY__TYPE__V3__RATE_LIMIT_UNIT__SECOND, 1},
		     {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__MINUTE, 60},
		     {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR, 3600},
		     {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__DAY, 86400},
		     {UNIT_WEEK, 7 * 86400},
		     {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__MONTH, 30 * 86400},
		     {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__YEAR, 365 * 86400}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		enum grpc_status status;
		const char *why;
		ck_assert_msg(plan_own(5, units[i].unit, &status, &why) == 0, "unit %d: %s",
			      units[i].unit, why ? why : "");
		ck_assert_int_eq(plan.nown, 1);
		ck_assert_int_eq(plan.d[0].kind, RLS_COUNTED);
		ck_assert_int_eq(plan.own[0].unit, units[i].unit);
		ck_assert_int_eq(plan.own[0].policy.limits[0].period_ms, units[i].s * 1000);
		/* the answer names the unit, and a window not begun is a whole one away */
		static uint8_t buf[RLS_ANSWER_MAX];
		size_t n = rls_encode(&plan, NULL, 1, CONFIG_ENVOY_HEADERS_NONE, 0, buf);
		Resp *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, buf);
		ck_assert_ptr_nonnull(r);
		ck_assert_int_eq(r->n_statuses, 1);
		ck_assert_ptr_nonnull(r->statuses[0]->current_limit);
		ck_assert_int_eq(r->statuses[0]->current_limit->unit, units[i].unit);
		ck_assert_int_eq(r->statuses[0]->current_limit->requests_per_unit, 5);
		ck_assert_int_eq(r->statuses[0]->duration_until_reset->seconds, units[i].s);
		envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
	}
}
END_TEST

START_TEST(test_no_unit_is_refused)
{
	static const int bad[] = {ENVOY__TYPE__V3__RATE_LIMIT_UNIT__UNKNOWN, 8, 1000, -1};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum grpc_status status = GRPC_OK;
		const char *why;
		ck_assert_int_eq(plan_own(5, bad[i], &status, &why), -1);
		ck_assert_int_eq(status, GRPC_INVALID_ARGUMENT);
		ck_assert_str_eq(why,
				 "a descriptor's limit needs a unit (SECOND, MINUTE, HOUR, DAY, "
				 "WEEK, MONTH or YEAR)");
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rls");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_every_unit);
	tcase_add_test(tc, test_no_unit_is_refused);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
