/* test_list.c - the intrusive list (list.h): order, unlinking from anywhere, elements on two lists. */
#include <check.h>

#include "runner.h"

#include "list.h"

struct item {
	int id;
	struct list_link by_a, by_b;
};

/* The ids of h's elements (linked by by_a), first to last, into out. */
static int ids(struct list *h, int *out)
{
	int n = 0;
	for (struct list_link *l = h->first; l; l = l->next) {
		struct item *it = list_entry(l, struct item, by_a);
		/* each link points back at what points at it */
		ck_assert_ptr_eq(*l->pprev, l);
		out[n++] = it->id;
	}
	return n;
}

START_TEST(test_push_walks_newest_first)
{
	struct list h = {0};
	struct item v[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
	ck_assert(list_empty(&h));
	ck_assert(!list_linked(&v[0].by_a));
	for (int i = 0; i < 4; i++)
		list_push(&h, &v[i].by_a);
	ck_assert(!list_empty(&h));
	int got[4], n = ids(&h, got);
	ck_assert_int_eq(n, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(got[i], 3 - i);
	ck_assert_ptr_eq(list_entry(h.first, struct item, by_a), &v[3]);
	ck_assert_ptr_null(list_entry((struct list_link *)NULL, struct item, by_a));
}
END_TEST

/* Unlinking the first, a middle one, the last, then again (a no-op), then
 * the rest: the others keep their order, and an unlinked link is clear. */
START_TEST(test_unlink_anywhere)
{
	struct list h = {0};
	struct item v[5];
	for (int i = 0; i < 5; i++) {
		v[i] = (struct item){.id = i};
		list_push(&h, &v[i].by_a); /* 4 3 2 1 0 */
	}
	int got[5];
	list_unlink(&v[4].by_a); /* the first */
	ck_assert(!list_linked(&v[4].by_a));
	ck_assert_ptr_null(v[4].by_a.next);
	ck_assert_int_eq(ids(&h, got), 4);
	ck_assert_int_eq(got[0], 3);
	list_unlink(&v[2].by_a); /* a middle one */
	ck_assert_int_eq(ids(&h, got), 3);
	ck_assert_int_eq(got[0], 3);
	ck_assert_int_eq(got[1], 1);
	ck_assert_int_eq(got[2], 0);
	list_unlink(&v[0].by_a); /* the last */
	list_unlink(&v[0].by_a); /* on no list: nothing */
	list_unlink(&v[2].by_a);
	ck_assert_int_eq(ids(&h, got), 2);
	ck_assert_int_eq(got[0], 3);
	ck_assert_int_eq(got[1], 1);
	/* pushed again after leaving */
	list_push(&h, &v[2].by_a);
	ck_assert_int_eq(ids(&h, got), 3);
	ck_assert_int_eq(got[0], 2);
	list_unlink(&v[3].by_a);
	list_unlink(&v[1].by_a);
	list_unlink(&v[2].by_a);
	ck_assert(list_empty(&h));
}
END_TEST

/* One element on two lists by two links: each list is its own. */
START_TEST(test_two_links)
{
	struct list a = {0}, b = {0};
	struct item v[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
	for (int i = 0; i < 3; i++) {
		list_push(&a, &v[i].by_a);
		list_push(&b, &v[2 - i].by_b);
	}
	list_unlink(&v[1].by_b);
	int got[3];
	ck_assert_int_eq(ids(&a, got), 3); /* still on a */
	int n = 0;
	for (struct list_link *l = b.first; l; l = l->next)
		got[n++] = list_entry(l, struct item, by_b)->id;
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(got[0], 0);
	ck_assert_int_eq(got[1], 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("list");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_push_walks_newest_first);
	tcase_add_test(tc, test_unlink_anywhere);
	tcase_add_test(tc, test_two_links);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
