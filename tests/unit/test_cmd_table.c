/* test_cmd_table.c - the verbs' table (cmd_table.c): a row for every verb, found by its word in any case, listed once. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <string.h>

#include "cmd_table.h"
#include "config.h"

START_TEST(test_every_verb_has_a_row)
{
	for (int v = 0; v < CMD_VERB_N; v++) {
		const struct cmd_verb_row *r = &cmd_verbs[v];
		ck_assert_msg(r->name && r->run, "verb %d has no row", v);
		ck_assert_msg(r->fronts != 0, "%s: no front end parses it", r->name);
		/* an admin verb needs the admin right too, and only those */
		ck_assert_int_eq(r->admin, r->right == CONFIG_RIGHT_ADMIN);
		/* found by its word, in any case, where it is parsed */
		char lower[32];
		size_t n = strlen(r->name);
		ck_assert_uint_lt(n, sizeof(lower));
		for (size_t i = 0; i < n; i++)
			lower[i] = (char)(r->name[i] >= 'A' && r->name[i] <= 'Z' ? r->name[i] + 32
										 : r->name[i]);
		for (unsigned front = CMD_ON_LINE; front <= CMD_ON_RESP; front <<= 1) {
			int want = (r->fronts & front) ? v : -1;
			ck_assert_int_eq(cmd_verb_named(r->name, n, front), want);
			ck_assert_int_eq(cmd_verb_named(lower, n, front), want);
		}
	}
	ck_assert_int_eq(cmd_verb_named("ALLO", 4, CMD_ON_LINE), -1);
	ck_assert_int_eq(cmd_verb_named("ALLOWS", 6, CMD_ON_LINE), -1);
	ck_assert_int_eq(cmd_verb_named("CL\x0eTHROTTLE", 11, CMD_ON_RESP), -1);
	ck_assert_int_eq(cmd_verb_named("CL.THROTTLE", 11, CMD_ON_LINE), -1);
}
END_TEST

START_TEST(test_known_commands_are_the_line_rows)
{
	const char *known = cmd_known_commands();
	int listed = 0;
	for (int v = 0; v < CMD_VERB_N; v++) {
		char word[40];
		snprintf(word, sizeof(word), " %s ", cmd_verbs[v].name);
		char padded[512];
		snprintf(padded, sizeof(padded), " %s ", known);
		int in = strstr(padded, word) != NULL;
		ck_assert_int_eq(in, (cmd_verbs[v].fronts & CMD_ON_LINE) != 0);
		listed += in;
	}
	int words = 1;
	for (const char *p = known; *p; p++)
		words += *p == ' ';
	ck_assert_int_eq(words, listed);
	ck_assert_ptr_eq(cmd_known_commands(), known); /* made once */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cmd_table");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_every_verb_has_a_row);
	tcase_add_test(tc, test_known_commands_are_the_line_rows);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
