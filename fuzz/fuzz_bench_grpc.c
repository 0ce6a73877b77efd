/*
 * fuzz_bench_grpc.c - libFuzzer harness for ratelimit-bench's reader of
 * what an HTTP/2 server sends (bench/bench_grpc.c). The input is the byte
 * stream, read frame by frame as the bench reads it from a buffer of
 * exactly its size: a frame is taken whole or not at all, never past the
 * end, and what it makes the client answer fits the room it has.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_grpc.h"
#include "fuzz_log.h"

const char *const fuzz_name = "fuzz_bench_grpc";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	memcpy(buf, data, size);
	struct bench_grpc_conn g;
	char preface[BENCH_GRPC_PREFACE_MAX];
	check(bench_grpc_conn_start(&g, preface) <= sizeof(preface), "preface too long");
	size_t off = 0;
	for (;;) {
		struct bench_grpc_frame f;
		long n = bench_grpc_frame(&g, buf + off, size - off, &f);
		if (n <= 0)
			break;
		check((size_t)n <= size - off && (size_t)n >= BENCH_GRPC_FRAME_HEADER,
		      "a frame past the input, or shorter than its header");
		check(f.reply_len <= sizeof(f.reply), "an answer past its room");
		check(f.event != BENCH_GRPC_ANSWER || (f.code >= 0 && f.code < 128),
		      "an overall_code that is not one varint byte");
		off += (size_t)n;
	}
	free(buf);
	return 0;
}
