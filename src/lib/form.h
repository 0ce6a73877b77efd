/*
 * form.h - a field of an HTML form as browsers send it
 * (application/x-www-form-urlencoded, or a URL's query): key=value pairs
 * joined by '&', '+' a blank and %XX a byte. Pure: bytes in, bytes out.
 */
#ifndef RL_FORM_H
#define RL_FORM_H

#include <stddef.h>

/* The value of the first field called key in form[0..len), decoded into
 * out (cap bytes; it may hold any byte, NUL too): its length; -1 when no
 * field is called key; -2 when its value has a bad %XX or is longer than
 * cap. */
long form_value(const char *form, size_t len, const char *key, char *out, size_t cap);

#endif
