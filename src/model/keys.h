/* keys.h - Redis key names for one (user, action, limit). */
#ifndef RL_KEYS_H
#define RL_KEYS_H

#include <stddef.h>

struct policy;

/*
 * The limits on what goes into a key, defined here only: the longest user
 * (bytes, as sent; the protocol refuses longer ones) and the longest key
 * prefix (bytes; the configuration refuses longer ones).
 */
#define KEYS_USER_MAX 512
#define KEYS_PREFIX_MAX 128
/* Room for any key: prefix, tag with a fully escaped KEYS_USER_MAX user, suffix. */
#define KEYS_MAX 2048

/*
 * Writes the key of limit `index` of policy p for this user into out (not
 * NUL-terminated) and returns its length. The layout is
 *
 *     <prefix>{<action>:<escaped user>}:<s|w|c><window_ms>    (a window)
 *     <prefix>{<action>:<escaped user>}:f                     (a funnel)
 *     <prefix>{<action>:<escaped user>}:l                     (leases held)
 *     <prefix>{<action>:<escaped user>}:b                     (index nlimits: the ban)
 *
 * All keys of one decision share the {...} hash tag, so a Redis Cluster can
 * run the decision's script on one node. Users are escaped ('%' -> "%25",
 * '}' -> "%7D") so the tag cannot end early and distinct (user, action) pairs
 * never share a key; action names cannot contain ':'.
 */
size_t keys_build(char *out, const char *prefix, size_t prefix_len, const struct policy *p,
		  int index, const char *user, size_t user_len);
/* keys_build's index of a pair's open holds (HOLD, SETTLE, CANCEL), past
 * any limit's and the ban's: <prefix>{<action>:<escaped user>}:h */
#define KEYS_HOLDS_INDEX (POLICY_MAX_LIMITS + 1)

/*
 * The hash tag alone, "<action>:<escaped user>" (no braces): what a RESET
 * notice carries. At most KEYS_MAX bytes; returns its length.
 */
size_t keys_tag(char *out, const struct policy *p, const char *user, size_t user_len);

/* The channel RESET notices of this prefix go to, "<prefix>reset" (at most
 * KEYS_PREFIX_MAX + 5 bytes; not NUL-terminated); returns its length. */
size_t keys_reset_channel(char *out, const char *prefix, size_t prefix_len);
#define KEYS_RESET_CHANNEL_MAX (KEYS_PREFIX_MAX + 5)

/*
 * Splits a hash tag "<action>:<escaped user>" back into the action and the
 * unescaped user (written to user, at least KEYS_USER_MAX bytes). 0, or -1 when the
 * tag is not one keys_build makes.
 */
int keys_parse_tag(const char *tag, size_t len, const char **action, size_t *alen, char *user,
		   size_t *ulen);

/* Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash tag, mod 16384. */
unsigned keys_slot(const char *key, size_t len);

/* The bytes inside the hash tag of a key built above (for cluster slots). */
const char *keys_hash_tag(const char *key, size_t len, size_t *tag_len);

#endif
