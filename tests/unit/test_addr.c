/* test_addr.c - "host:port" splitting, IP networks (trusted_proxies) and a
 * socket's address as a listen entry names it. */
#include <check.h>

#include "runner.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/un.h>

#include "addr.h"

START_TEST(test_split)
{
	char host[64];
	int port = 0;
	ck_assert_int_eq(addr_split("127.0.0.1:7379", host, sizeof(host), &port), 0);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 7379);
	ck_assert_int_eq(addr_split("[::1]:9090", host, sizeof(host), &port), 0);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(port, 9090);
	ck_assert_int_eq(addr_split("localhost", host, sizeof(host), &port), -1);
	char tiny[4];
	ck_assert_int_eq(addr_split("127.0.0.1:1", tiny, sizeof(tiny), &port), -1);
}
END_TEST

START_TEST(test_networks)
{
	struct addr_net net;
	struct addr_ip ip;
	ck_assert_int_eq(addr_net_parse("10.0.0.0/8", 10, &net), 0);
	ck_assert_int_eq(addr_ip_parse("10.200.1.2", 10, &ip), 0);
	ck_assert(addr_net_match(&net, &ip));
	ck_assert_int_eq(addr_ip_parse("11.0.0.1", 8, &ip), 0);
	ck_assert(!addr_net_match(&net, &ip));
	ck_assert_int_eq(addr_net_parse("::1", 3, &net), 0);
	ck_assert_int_eq(addr_ip_parse("::1", 3, &ip), 0);
	ck_assert(addr_net_match(&net, &ip));
	ck_assert_int_eq(addr_net_parse("10.0.0.0/33", 11, &net), -1);
	ck_assert_int_eq(addr_ip_parse("10.0.0", 6, &ip), -1);
}
END_TEST

START_TEST(test_sockaddr_text)
{
	char buf[128];
	struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(7379)};
	inet_pton(AF_INET, "127.0.0.2", &in4.sin_addr);
	addr_sockaddr_text(&in4, sizeof(in4), buf, sizeof(buf));
	ck_assert_str_eq(buf, "127.0.0.2:7379");

	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(9090)};
	inet_pton(AF_INET6, "::1", &in6.sin6_addr);
	addr_sockaddr_text(&in6, sizeof(in6), buf, sizeof(buf));
	ck_assert_str_eq(buf, "[::1]:9090");
	/* an IPv4-mapped address stays IPv6: the form a listen entry needs */
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &in6.sin6_addr);
	addr_sockaddr_text(&in6, sizeof(in6), buf, sizeof(buf));
	ck_assert_str_eq(buf, "[::ffff:10.1.2.3]:9090");

	struct sockaddr_un un = {.sun_family = AF_UNIX};
	strcpy(un.sun_path, "/run/ratelimitd/rl.sock");
	addr_sockaddr_text(&un, sizeof(un), buf, sizeof(buf));
	ck_assert_str_eq(buf, "unix:/run/ratelimitd/rl.sock");
	/* a path that fills its length without a NUL stops at that length */
	size_t at = offsetof(struct sockaddr_un, sun_path);
	addr_sockaddr_text(&un, at + 4, buf, sizeof(buf));
	ck_assert_str_eq(buf, "unix:/run");

	/* too short for its family, or another family: "?" */
	addr_sockaddr_text(&in6, sizeof(in4), buf, sizeof(buf));
	ck_assert_str_eq(buf, "?");
	addr_sockaddr_text(&in4, 1, buf, sizeof(buf));
	ck_assert_str_eq(buf, "?");
	struct sockaddr other = {.sa_family = AF_UNSPEC};
	addr_sockaddr_text(&other, sizeof(other), buf, sizeof(buf));
	ck_assert_str_eq(buf, "?");
	/* a small buffer holds a NUL-terminated prefix */
	char small[6];
	addr_sockaddr_text(&in4, sizeof(in4), small, sizeof(small));
	ck_assert_str_eq(small, "127.0");
}
END_TEST

/* What config.c refuses: two sockets that cannot both be bound. */
START_TEST(test_overlap)
{
	ck_assert(addr_overlap("127.0.0.1:7379", "127.0.0.1:7379"));
	ck_assert(addr_overlap("127.0.0.1:7379", "127.0.0.1:07379"));
	ck_assert(addr_overlap("127.0.0.1:7379", "[::ffff:127.0.0.1]:7379"));
	ck_assert(addr_overlap("[::1]:80", "[0:0:0:0:0:0:0:1]:80"));
	ck_assert(addr_overlap("0.0.0.0:80", "10.1.2.3:80"));
	ck_assert(addr_overlap("10.1.2.3:80", "0.0.0.0:80"));
	ck_assert(addr_overlap("[::]:80", "[::1]:80"));
	ck_assert(addr_overlap("LocalHost:80", "localhost:80"));
	/* :: is dual-stack (IPV6_V6ONLY off): it takes IPv4's port too */
	ck_assert(addr_overlap("[::]:80", "127.0.0.1:80"));
	ck_assert(addr_overlap("0.0.0.0:80", "[::]:80"));
	ck_assert(addr_overlap("unix:/run/a.sock", "unix:/run/a.sock"));
	ck_assert(!addr_overlap("127.0.0.1:80", "127.0.0.1:81"));
	ck_assert(!addr_overlap("127.0.0.1:80", "127.0.0.2:80"));
	ck_assert(!addr_overlap("0.0.0.0:80", "[::1]:80"));
	ck_assert(!addr_overlap("localhost:80", "127.0.0.1:80")); /* not resolved */
	ck_assert(!addr_overlap("unix:/run/a.sock", "unix:/run/b.sock"));
	ck_assert(!addr_overlap("unix:/run/a.sock", "127.0.0.1:80"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("addr");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_networks);
	tcase_add_test(tc, test_sockaddr_text);
	tcase_add_test(tc, test_overlap);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
