/*
 * poison.h - memory a pool or arena holds for reuse, marked unusable under
 * AddressSanitizer while it is not handed out, so a use after its release
 * (or past the bytes asked for) is caught as it would be for malloc's own;
 * nothing in other builds.
 */
#ifndef RL_POISON_H
#define RL_POISON_H

#if defined(__SANITIZE_ADDRESS__)
#define RL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RL_ASAN 1
#endif
#endif

#ifdef RL_ASAN
#include <sanitizer/asan_interface.h>
#define RL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define RL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define RL_POISON(p, n) ((void)(p), (void)(n))
#define RL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif
