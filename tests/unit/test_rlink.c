/*
 * test_rlink.c - a link's owner hears of its end exactly once, whenever it
 * ends: a link closed by its owner while still connecting (a failover that
 * retires a store whose subscriber is reconnecting) used to end with no
 * callback, leaving the owner's pointer to freed memory (redis_conn's
 * link: a use after free found by scripts/chaos-regions' kill-master).
 */
#include <arpa/inet.h>
#include <check.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rlink.h"
#include "runner.h"

static int connected, failed, disconnected;

static void on_connect(const struct rlink *l, int ok)
{
	(void)l;
	if (ok)
		connected++;
	else
		failed++;
}

static void on_disconnect(const struct rlink *l, int ok)
{
	(void)l;
	(void)ok;
	disconnected++;
}

/* A listening socket on loopback; its port. */
static int listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	socklen_t len = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &len);
	*port = ntohs(a.sin_port);
	return fd;
}

static void run(int disconnect)
{
	struct event_base *base = event_base_new();
	int port, lfd = listener(&port);
	connected = failed = disconnected = 0;
	struct rlink *l = rlink_connect(base, "127.0.0.1", port, NULL, NULL);
	ck_assert_ptr_nonnull(l);
	ck_assert_int_eq(l->err, 0);
	rlink_set_callbacks(l, on_connect, on_disconnect);
	/* still connecting: the loop has not run */
	ck_assert_int_eq(rlink_up(l), 0);
	if (disconnect)
		rlink_disconnect(l);
	else
		rlink_free(l);
	ck_assert_int_eq(failed, 1);
	ck_assert_int_eq(connected + disconnected, 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(failed + connected + disconnected, 1);
	close(lfd);
	event_base_free(base);
}

START_TEST(closed_while_connecting_says_so_once)
{
	run(1);
}
END_TEST

START_TEST(freed_while_connecting_says_so_once)
{
	run(0);
}
END_TEST

/* An up link closed on purpose: on_disconnect once, no on_connect(0). */
START_TEST(closed_once_up_says_disconnected)
{
	struct event_base *base = event_base_new();
	int port, lfd = listener(&port);
	connected = failed = disconnected = 0;
	struct rlink *l = rlink_connect(base, "127.0.0.1", port, NULL, NULL);
	rlink_set_callbacks(l, on_connect, on_disconnect);
	for (int i = 0; i < 100 && !connected; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert_int_eq(connected, 1);
	rlink_free(l);
	ck_assert_int_eq(disconnected, 1);
	ck_assert_int_eq(failed, 0);
	close(lfd);
	event_base_free(base);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rlink");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, closed_while_connecting_says_so_once);
	tcase_add_test(tc, freed_while_connecting_says_so_once);
	tcase_add_test(tc, closed_once_up_says_disconnected);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
