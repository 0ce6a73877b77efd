/* runner.h - runs one Check suite; the exit status says whether any test failed. */
#ifndef RL_TEST_RUNNER_H
#define RL_TEST_RUNNER_H

#include <check.h>
#include <stdlib.h>

static inline int run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
