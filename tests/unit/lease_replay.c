/*
 * lease_replay.c - replays lease operations on one key's set through
 * src/model/lease.c (the memory store's leases) and prints each result,
 * "OK LIMIT REMAINING MS EXPIRED", one line per operation. The
 * differential test (tests/integration/test_leases.py) sends the same
 * random operations, at the same times, to the script's lease mode in a
 * real Redis and compares the lines.
 *
 * usage: lease_replay FILE, a line per operation:
 *   OP MEMBER COST LIMIT LEASE_MS NOW_US   (OP: a acquire, r release,
 *                                           n renew, p peek, x reset)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: lease_replay FILE\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	struct lease_set s = {0};
	char op, member[LEASE_MEMBER_MAX];
	long long cost, limit, lease_ms, now;
	int line = 0, rc = 0;
	while (fscanf(f, " %c %27s %lld %lld %lld %lld", &op, member, &cost, &limit, &lease_ms,
		      &now) == 6) {
		line++;
		enum lease_op o;
		switch (op) {
		case 'a':
			o = LEASE_ACQUIRE;
			break;
		case 'r':
			o = LEASE_RELEASE;
			break;
		case 'n':
			o = LEASE_RENEW;
			break;
		case 'p':
			o = LEASE_PEEK;
			break;
		case 'x':
			o = LEASE_RESET;
			break;
		default:
			fprintf(stderr, "%s:%d: no such op %c\n", argv[1], line, op);
			rc = 2;
			goto out;
		}
		struct lease_result r;
		if (lease_apply(&s, o, member, cost, limit, lease_ms, now, &r) < 0) {
			fprintf(stderr, "%s:%d: out of memory\n", argv[1], line);
			rc = 1;
			goto out;
		}
		printf("%d %lld %lld %lld %lld\n", r.ok, (long long)r.limit, (long long)r.remaining,
		       (long long)r.ms, (long long)r.expired);
	}
out:
	fclose(f);
	lease_set_free(&s);
	return rc;
}
