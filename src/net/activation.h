/*
 * activation.h - socket activation: the listening sockets systemd passes
 * ($LISTEN_FDS, ratelimitd.socket), each matched to one listen entry of the
 * configuration, by the entry's name (FileDescriptorName=) or else by the
 * address the socket is bound to.
 */
#ifndef RL_ACTIVATION_H
#define RL_ACTIVATION_H

#include <stddef.h>

struct activation;

/*
 * Takes the sockets passed to this process and unsets $LISTEN_FDS and its
 * kin (children must not take them too). NULL with err "" when none were
 * passed (or no libsystemd); NULL with err set when one cannot be used (not
 * a listening stream socket).
 */
struct activation *activation_take(char *err, size_t errlen);
size_t activation_count(const struct activation *a);

/*
 * The passed socket for a listen entry, or -1 (bind it as usual). A socket
 * whose name is the entry's name wins; else one bound to the entry's
 * address ("host:port", "[v6]:port", "unix:/path"). Each socket is given
 * once; the caller owns it from then on.
 */
int activation_claim(struct activation *a, const char *address, const char *name);

/* 0 when every socket was claimed; else -1 with err naming the first left. */
int activation_check_claimed(const struct activation *a, char *err, size_t errlen);

/* Closes the sockets never claimed. */
void activation_free(struct activation *a);

#endif
