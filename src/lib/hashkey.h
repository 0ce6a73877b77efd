/*
 * hashkey.h - a SipHash key (siphash.h) no client can guess: the tables
 * whose keys clients choose (users) and the nonces of lease and hold ids.
 */
#ifndef RL_HASHKEY_H
#define RL_HASHKEY_H

#include <stdint.h>

/* 16 bytes from the kernel's random pool; without one yet (early boot),
 * the clock and the pid: at least no two daemons alike. */
void hashkey_new(uint8_t key[16]);

#endif
