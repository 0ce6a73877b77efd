/* siphash.h - SipHash-2-4, a keyed hash: tables whose keys clients choose
 * (the memory store's) cannot be flooded into one bucket by someone who
 * does not know the key. */
#ifndef RL_SIPHASH_H
#define RL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t siphash24(const uint8_t key[16], const void *data, size_t len);

#endif
