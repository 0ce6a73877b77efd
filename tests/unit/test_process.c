/* test_process.c - /proc/PID/stat parsing (odd command names, short or bad text) and reading our own. */
#include <check.h>

#include "runner.h"
#include <string.h>
#include <unistd.h>

#include "process.h"

/* fields 3..24 of proc(5): utime 14 = 150, stime 15 = 50, vsize 23, rss 24 */
#define TAIL                                                                              \
	"S 1 1234 1234 0 -1 4194560 1043 0 0 0 150 50 0 0 20 0 3 0 98765 123904000 2345 " \
	"18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0\n"

static int parse(const char *text, struct process_stat *st)
{
	memset(st, 0xaa, sizeof(*st));
	return process_parse_stat(text, strlen(text), st);
}

START_TEST(test_parses_fields)
{
	struct process_stat st;
	ck_assert_int_eq(parse("4242 (ratelimitd) " TAIL, &st), 0);
	ck_assert_uint_eq(st.cpu_ticks, 200);
	ck_assert_uint_eq(st.vsize, 123904000);
	ck_assert_uint_eq(st.rss_pages, 2345);
	/* a command name with spaces and parentheses: fields follow the last ')' */
	ck_assert_int_eq(parse("7 (a) b (c)) " TAIL, &st), 0);
	ck_assert_uint_eq(st.cpu_ticks, 200);
	ck_assert_uint_eq(st.rss_pages, 2345);
	/* ends right after rss: enough */
	ck_assert_int_eq(parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 5 4096 -3", &st), 0);
	ck_assert_uint_eq(st.cpu_ticks, 15);
	ck_assert_uint_eq(st.vsize, 4096);
	ck_assert_uint_eq(st.rss_pages, 0); /* negative: 0 */
}
END_TEST

START_TEST(test_refuses_what_is_not_stat)
{
	struct process_stat st;
	ck_assert_int_eq(parse("", &st), -1);
	ck_assert_int_eq(parse("no parenthesis at all", &st), -1);
	ck_assert_int_eq(parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 5 4096\n", &st), -1);
	ck_assert_int_eq(parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 7x 8 0 0 20 0 1 0 5 4096 1\n", &st),
			 -1);
	ck_assert_int_eq(parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 - 8 0 0 20 0 1 0 5 4096 1\n", &st),
			 -1);
	ck_assert_int_eq(
		parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 99999999999999999999999 8 0 0 20 0 1 0 5 1 1\n",
		      &st),
		-1);
}
END_TEST

START_TEST(test_reads_this_process)
{
	struct process_info pi;
	process_read(&pi);
	ck_assert_int_eq(pi.have_stat, 1);
	ck_assert(pi.resident_bytes > 0);
	ck_assert(pi.virtual_bytes >= pi.resident_bytes);
	ck_assert(pi.cpu_seconds >= 0);
	ck_assert(pi.max_fds > 0);
	ck_assert(pi.open_fds >= 3 && pi.open_fds <= pi.max_fds); /* stdin, stdout, stderr */
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	struct process_info more;
	process_read(&more);
	ck_assert_int_eq(more.open_fds, pi.open_fds + 2);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("process");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_parses_fields);
	tcase_add_test(tc, test_refuses_what_is_not_stat);
	tcase_add_test(tc, test_reads_this_process);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
