/*
 * shown.h - a user as the daemon shows it to operators (TOP's replies, the
 * metrics' labels, the decision log): bytes up to a blank, '%', DEL and
 * above as %XX, so one line, one label, one word, and two users never
 * alike; a user cut short ends in "%..." and its whole length.
 */
#ifndef RL_SHOWN_H
#define RL_SHOWN_H

#include <stddef.h>

/* The most bytes shown_user writes for a user of len bytes. */
#define SHOWN_USER_MAX(len) (3 * (len) + 4 + 20)

/* Writes the len bytes of user at p as shown; when full_len is larger (the
 * user was cut at len), "%..." and full_len after them. Returns the length. */
size_t shown_user(char *p, const char *user, size_t len, size_t full_len);

/* A shown user (printable ASCII, no blank; %XX for a byte) back to its
 * bytes in out (cap bytes): their number, or -1 for a byte shown_user
 * never writes, a bad %XX or more than cap bytes. Not for a cut user. */
long shown_parse(const char *s, size_t len, char *out, size_t cap);

#endif
