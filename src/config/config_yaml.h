/* config_yaml.h - a small YAML reader for key tables: events, setters, FILE:LINE:COL errors. */
#ifndef RL_CONFIG_YAML_H
#define RL_CONFIG_YAML_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <yaml.h>

struct yenum;

/* Error text: up to YP_ERRORS_SHOWN lines, then "... and N more errors". */
#define YP_ERR_MAX 8192
#define YP_ERRORS_SHOWN 20
/* Room for the dotted path of a mapping ("policies.<64-byte name>."). */
#define YP_SECTION_MAX 96

/*
 * One file being read. The schema reads `ev` (the current event), `depth`
 * and `nerr`; everything else belongs to the engine.
 */
struct yparser {
	yaml_parser_t yaml;
	yaml_event_t ev; /* the current event; owned while have_ev */
	int have_ev;
	int ready;	  /* yaml is initialized */
	int fatal;	  /* YAML syntax error or out of memory: stop reading */
	int depth;	  /* mappings and sequences open, the current event's included */
	int flow;	  /* how many of them are flow style ({...} or [...]) */
	const char *name; /* file name for messages */
	const char *buf;
	size_t len;
	/* Every error found: nerr of them, the first `shown` in out, one per line. */
	unsigned nerr, shown;
	size_t outlen;
	char out[YP_ERR_MAX];
	/* The previous event when it was a plain scalar spread over several lines
	 * (a line indented too far continues the value above it). */
	struct {
		int valid, flow;
		size_t line, end_line;
	} ml;
	int hinted; /* a "continues the value" message was given for hint_line */
	size_t hint_line;
	/* Dotted path of the enclosing mapping, for messages ("redis.", "policies.x."). */
	char section[YP_SECTION_MAX];
	void *ctx; /* the schema's own state */
};

/*
 * How a running daemon takes a new value of a key (pgbouncer's CF_NO_RELOAD);
 * a reload reports every key from this (config_diff in config.c).
 */
enum yp_reload {
	YP_RELOAD,	   /* a reload applies it; reported "KEY OLD -> NEW" */
	YP_RESTART,	   /* only a restart does; a reload reports the difference */
	YP_RESTART_SECRET, /* the same, and the value is never shown */
	YP_SECTION,	   /* a mapping: its own keys are reported, each as its entry says */
	/* a list of mappings only a restart applies (listen): an entry added or
	 * removed is reported as the whole list, any other change as the
	 * entries' keys ("listen[1].name") */
	YP_RESTART_LIST,
	/* policies and the keys under them: a reload applies them, and reports
	 * each policy added, changed (with its new description) or removed */
	YP_PER_POLICY,
};

/*
 * A key table entry, after twemproxy's conf_commands: `set` consumes the
 * value starting at the current event and stores it at base + offset;
 * min/max bound integers and lengths where the setter uses them, and the
 * number of entries of a list (yp_seq) or mapping (yp_dict), 0 for no bound.
 * `put` prints the value found from base, so that a reload can log a
 * YP_RELOAD key's old and new values and compare a YP_RESTART key with the
 * running one; NULL for the other kinds, which have no value of their own.
 * `names` is the table of an enum key's names (yp_set_enum, yp_put_enum;
 * nginx's ngx_conf_set_enum_slot), NULL for other keys.
 */
struct ykey {
	const char *name;
	int (*set)(struct yparser *P, const struct ykey *k, void *dst);
	size_t offset;
	int64_t min, max;
	enum yp_reload reload;
	void (*put)(FILE *f, const struct ykey *k, const void *base);
	const struct yenum *names;
};

/* Reads the whole file at path (at most max bytes) into *buf (malloc'd,
 * the caller frees it). 0, or -1 with "PATH: cannot read: why" in err. */
int yp_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen);
/* Starts reading buf (len bytes; `name` stands for the file in messages).
 * -1 when out of memory (recorded as an error). */
int yp_begin(struct yparser *P, const char *name, const char *buf, size_t len);
/* Frees what yp_begin took; when there were errors, copies their text
 * (cut short to fit errlen) to err and returns -1. */
int yp_end(struct yparser *P, char *err, size_t errlen);
/* Reads stream start and document start; the current event is then the root
 * mapping, whose start is *root. -1 when the file is empty or the root is no mapping. */
int yp_open_document(struct yparser *P, yaml_mark_t *root);
/* After the root mapping: document end; a second document is an error. */
int yp_close_document(struct yparser *P);

/* Records one error at m and returns -1. Callers carry on where they can. */
int yp_fail(struct yparser *P, yaml_mark_t m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* yp_fail with the dotted key path in front: "redis.timeout: ...". */
int yp_failk(struct yparser *P, yaml_mark_t m, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* An error after which nothing more can be read (out of memory). */
int yp_fail_fatal(struct yparser *P, yaml_mark_t m, const char *what);

/* Advances to the next event; -1 (fatal) on a syntax error, alias or anchor. */
int yp_next(struct yparser *P) __attribute__((warn_unused_result));
/* Reads past the rest of a value in error, up to the event that closes the
 * collection at `depth`. */
int yp_skip_to(struct yparser *P, int depth);

/* The current event as a non-null scalar without NUL bytes; errors name `key`
 * and say `what` was expected. */
int yp_scalar_text(struct yparser *P, const char *key, const char *what, const char **s,
		   size_t *len);
/* yp_scalar_text on one line (a plain scalar over two lines means the second is misplaced). */
int yp_scalar(struct yparser *P, const char *key, const char *what, const char **s, size_t *len);
/* Canonical decimal within [min, max]; 0 or -1. */
int yp_parse_dec(const char *s, size_t len, int64_t min, int64_t max, int64_t *out);
/* Replaces *dst with a copy of s; -1 (fatal) when out of memory. */
int yp_dup_string(struct yparser *P, char **dst, const char *s, size_t len);
/* Makes room for element n of *arr (doubling *cap); -1 when out of memory. */
int yp_grow(void **arr, size_t *cap, size_t n, size_t size);

/* Setters for key tables. */
int yp_set_int(struct yparser *P, const struct ykey *k, void *dst);	 /* int in [min, max] */
int yp_set_int64(struct yparser *P, const struct ykey *k, void *dst);	 /* int64_t */
int yp_set_size(struct yparser *P, const struct ykey *k, void *dst);	 /* size_t */
int yp_set_duration(struct yparser *P, const struct ykey *k, void *dst); /* int64_t ms */
int yp_set_string(struct yparser *P, const struct ykey *k, void *dst);	 /* char *, non-empty */
int yp_set_bool(struct yparser *P, const struct ykey *k, void *dst);	 /* int, true/false */
/* An int or enum named in k->names; "must be a, b or c (gloss)" otherwise. */
int yp_set_enum(struct yparser *P, const struct ykey *k, void *dst);

/* Printers for key tables: "(none)" for a NULL string or an empty char []. */
void yp_put_string(FILE *f, const struct ykey *k, const void *base);   /* char * */
void yp_put_chars(FILE *f, const struct ykey *k, const void *base);    /* char [] */
void yp_put_int(FILE *f, const struct ykey *k, const void *base);      /* int */
void yp_put_int64(FILE *f, const struct ykey *k, const void *base);    /* int64_t */
void yp_put_size(FILE *f, const struct ykey *k, const void *base);     /* size_t */
void yp_put_bool(FILE *f, const struct ykey *k, const void *base);     /* int: true/false */
void yp_put_enum(FILE *f, const struct ykey *k, const void *base);     /* its name in k->names */
void yp_put_duration(FILE *f, const struct ykey *k, const void *base); /* int64_t ms: 10s, 50ms */

/*
 * The section, the dotted path of the mapping being read ("redis.sentinel."),
 * is kept here: yp_map, yp_section and yp_dict extend it with the name of
 * the mapping they descend into, and the engine puts it back after each
 * setter, list entry and policy-like entry, so key tables never set it.
 */

/*
 * Reads a mapping (current event: MAPPING_START) against a key table, up to
 * and including its MAPPING_END; `name` (NULL at the top level) extends the
 * section. Unknown and repeated keys are errors. seen gets bit i for
 * keys[i]; marks[i] the position of that key. A key or value in error is
 * reported and skipped, and reading goes on with the next key; -1 then
 * tells the caller not to check the mapping as a whole. The section stays
 * extended until the setter that called yp_map returns.
 */
int yp_map(struct yparser *P, const char *name, const struct ykey *keys, size_t nkeys, void *base,
	   unsigned *seen, yaml_mark_t *marks);
/*
 * yp_map for the value of key k, a nested mapping (current event:
 * MAPPING_START, else "k: expected"); its keys are named "<section>k.key".
 * The start mark of the mapping goes to *start.
 */
int yp_section(struct yparser *P, const struct ykey *k, const char *expected,
	       const struct ykey *keys, size_t nkeys, void *dst, unsigned *seen, yaml_mark_t *marks,
	       yaml_mark_t *start);
/*
 * Reads a sequence (current event: SEQUENCE_START) up to its end, calling
 * item() at each entry (i counts from 0); an entry in error is skipped.
 * k->max > 0 is the most entries allowed: the first one past it is the
 * error "k: too many NOUN (at most MAX)" and the rest is skipped. *n gets
 * the entries read. -1 when any entry was in error.
 */
int yp_seq(struct yparser *P, const struct ykey *k, const char *noun,
	   int (*item)(struct yparser *P, const struct ykey *k, void *dst, size_t i), void *dst,
	   size_t *n);
/* What an entry() of yp_dict returns for a key it refused: its value is skipped. */
#define YP_BAD_KEY (-2)
/*
 * Reads a mapping of names chosen by the user (current event:
 * MAPPING_START), such as policies, up to its end; the section is extended
 * with k->name. entry() is called at each key and reads the key and its value;
 * YP_BAD_KEY skips the value. k->max > 0 bounds the entries as in yp_seq
 * ("k: too many NOUN (at most MAX)"). *n gets the entries whose key was
 * taken. -1 when any entry was in error.
 */
int yp_dict(struct yparser *P, const struct ykey *k, const char *noun,
	    int (*entry)(struct yparser *P, const struct ykey *k, void *dst), void *dst, size_t *n);
/* yp_fail about the section itself: "redis.sentinel: ...". */
int yp_fail_section(struct yparser *P, yaml_mark_t m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
