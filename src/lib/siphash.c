/* siphash.c - SipHash-2-4 (Aumasson and Bernstein, 2012), byte order fixed
 * (little endian reads), so the same key and bytes hash alike everywhere. */
#include "siphash.h"

static uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static uint64_t read_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

#define SIPROUND                   \
	do {                       \
		v0 += v1;          \
		v1 = rotl(v1, 13); \
		v1 ^= v0;          \
		v0 = rotl(v0, 32); \
		v2 += v3;          \
		v3 = rotl(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = rotl(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = rotl(v1, 17); \
		v1 ^= v2;          \
		v2 = rotl(v2, 32); \
	} while (0)

uint64_t siphash24(const uint8_t key[16], const void *data, size_t len)
{
	const uint8_t *in = data;
	uint64_t k0 = read_le64(key), k1 = read_le64(key + 8);
	uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
	size_t whole = len - len % 8;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = read_le64(in + i);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	uint64_t last = (uint64_t)len << 56;
	for (size_t i = 0; i < len % 8; i++)
		last |= (uint64_t)in[whole + i] << (8 * i);
	v3 ^= last;
	SIPROUND;
	SIPROUND;
	v0 ^= last;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}
