/* hashkey.c - an unguessable SipHash key (hashkey.h). */
#include "hashkey.h"

#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"

void hashkey_new(uint8_t key[16])
{
	if (getrandom(key, 16, GRND_NONBLOCK) == 16)
		return;
	uint64_t x[2] = {clock_mono_us(), (uint64_t)getpid()};
	memcpy(key, x, 16);
}
