/* keys.h - Redis key names for one (user, action, limit). */
#ifndef RL_KEYS_H
#define RL_KEYS_H

#include <stddef.h>

struct policy;

/* Room for any key: prefix, tag with a fully escaped 512-byte user, suffix. */
#define KEYS_MAX 2048
#define KEYS_PREFIX_MAX 128

/*
 * Writes the key of limit `index` of policy p for this user into out (not
 * NUL-terminated) and returns its length. The layout is
 *
 *     <prefix>{<action>:<escaped user>}:<s<window_ms> | f>
 *
 * All keys of one decision share the {...} hash tag, so a Redis Cluster can
 * run the decision's script on one node. Users are escaped ('%' -> "%25",
 * '}' -> "%7D") so the tag cannot end early and distinct (user, action) pairs
 * never share a key; action names cannot contain ':'.
 */
size_t keys_build(char *out, const char *prefix, size_t prefix_len, const struct policy *p,
		  int index, const char *user, size_t user_len);

/* The bytes inside the hash tag of a key built above (for cluster slots). */
const char *keys_hash_tag(const char *key, size_t len, size_t *tag_len);

#endif
