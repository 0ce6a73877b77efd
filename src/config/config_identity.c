/*
 * config_identity.c - the schema of identities (who a client may prove to
 * be: a token from a file or the environment, or a client certificate's
 * name; its rights and policies), listen[].auth's words, the tokens read
 * by config_load, and the lookups a request makes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"

static int set_rights(struct yparser *P, const struct ykey *k, void *dst);
static int set_policies(struct yparser *P, const struct ykey *k, void *dst);

enum { IK_TOKEN_FILE, IK_TOKEN_ENV, IK_CERT_NAME, IK_RIGHTS, IK_POLICIES, IK_N };

/* Reported through the identities key (its printer), every reload. */
static const struct ykey identity_keys[IK_N] = {
	[IK_TOKEN_FILE] = {"token_file", config_set_path,
			   offsetof(struct config_identity, token_file), 0, 0, YP_RELOAD,
			   yp_put_string, NULL},
	[IK_TOKEN_ENV] = {"token_env", yp_set_string, offsetof(struct config_identity, token_env),
			  0, 0, YP_RELOAD, yp_put_string, NULL},
	[IK_CERT_NAME] = {"cert_name", yp_set_string, offsetof(struct config_identity, cert_name),
			  0, 0, YP_RELOAD, yp_put_string, NULL},
	[IK_RIGHTS] = {"rights", set_rights, offsetof(struct config_identity, rights), 0, 0,
		       YP_RELOAD, NULL, NULL},
	[IK_POLICIES] = {"policies", set_policies, 0, 0, CONFIG_POLICIES_MAX, YP_RELOAD, NULL,
			 NULL},
};

const struct ktable config_identity_table = {"identities.NAME.", identity_keys, IK_N, KT_IDENTITY,
					     0};

static const struct yenum right_names[] = {
	{"decide", CONFIG_RIGHT_DECIDE, "ALLOW, PEEK, MALLOW, MPEEK, CL.THROTTLE"},
	{"admin", CONFIG_RIGHT_ADMIN, "RESET and the overrides"},
	{NULL, 0, NULL},
};

static int right_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	(void)i;
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "decide or admin", &s, &len) < 0)
		return -1;
	for (const struct yenum *e = right_names; e->name; e++)
		if (strlen(e->name) == len && memcmp(e->name, s, len) == 0) {
			*(unsigned *)dst |= (unsigned)e->value;
			return 0;
		}
	return yp_failk(P, P->ev.start_mark, k->name, "must be decide or admin");
}

static int set_rights(struct yparser *P, const struct ykey *k, void *dst)
{
	size_t n;
	*(unsigned *)dst = 0;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a list: [decide], [admin] or [decide, admin]");
	return yp_seq(P, k, "rights", right_entry, dst, &n);
}

struct names_read {
	struct config_identity *id;
	size_t cap;
};

static int policy_name_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	(void)i;
	struct names_read *N = dst;
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a policy name", &s, &len) < 0)
		return -1;
	if (!policy_name_valid(s, len))
		return yp_failk(P, P->ev.start_mark, k->name,
				"a policy name is 1 to %d characters of A-Z a-z 0-9 _ . -",
				POLICY_NAME_MAX);
	if (yp_grow((void **)&N->id->policies, &N->cap, N->id->npolicies, sizeof(char *)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	N->id->policies[N->id->npolicies] = NULL; /* yp_dup_string frees what was there */
	if (yp_dup_string(P, &N->id->policies[N->id->npolicies], s, len) < 0)
		return -1;
	N->id->npolicies++;
	return 0;
}

static int set_policies(struct yparser *P, const struct ykey *k, void *dst)
{
	struct names_read N = {dst, 0};
	size_t n;
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of policy names");
	yaml_mark_t at = P->ev.start_mark;
	if (yp_seq(P, k, "policies", policy_name_entry, &N, &n) < 0)
		return -1;
	/* (no list means every policy: an empty one would read as that too) */
	if (n == 0)
		return yp_failk(P, at, k->name,
				"an empty list would allow no policy: name at least one, or leave "
				"policies out to allow every policy");
	return 0;
}

/* The identities while they are read. */
struct ids_read {
	struct config *c;
	size_t cap;
};

static void identity_free(struct config_identity *id)
{
	free(id->token_file);
	free(id->token_env);
	free(id->cert_name);
	for (size_t i = 0; i < id->npolicies; i++)
		free(id->policies[i]);
	free(id->policies);
	if (id->token)
		memset(id->token, 0, id->token_len);
	free(id->token);
}

void config_identity_free(struct config *c)
{
	for (size_t i = 0; i < c->nidentities; i++)
		identity_free(&c->identities[i]);
	free(c->identities);
	c->identities = NULL;
	c->nidentities = 0;
}

static int identity_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct ids_read *R = dst;
	struct config *c = R->c;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	if (P->ev.type != YAML_SCALAR_EVENT || !policy_name_valid(s, len) ||
	    len > CONFIG_IDENTITY_NAME_MAX) {
		yp_fail(P, km, "an identity name is 1 to %d characters of A-Z a-z 0-9 _ . -",
			CONFIG_IDENTITY_NAME_MAX);
		return YP_BAD_KEY;
	}
	for (size_t i = 0; i < c->nidentities; i++)
		if (strlen(c->identities[i].name) == len &&
		    memcmp(c->identities[i].name, s, len) == 0) {
			yp_fail(P, km, "duplicate identity \"%.*s\"", (int)len, s);
			return YP_BAD_KEY;
		}
	if (yp_grow((void **)&c->identities, &R->cap, c->nidentities, sizeof(*c->identities)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	struct config_identity *id = &c->identities[c->nidentities++];
	memset(id, 0, sizeof(*id));
	memcpy(id->name, s, len);
	if (yp_next(P) < 0)
		return -1;
	unsigned seen;
	yaml_mark_t marks[IK_N];
	yaml_mark_t start = P->ev.start_mark;
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_fail(P, start,
			       "identities.%s: expected {token_file: PATH, rights: [decide]} (or "
			       "token_env, cert_name)",
			       id->name);
	if (yp_map(P, id->name, identity_keys, IK_N, id, &seen, marks) < 0)
		return -1;
	unsigned how = seen & ((1u << IK_TOKEN_FILE) | (1u << IK_TOKEN_ENV));
	if (how == ((1u << IK_TOKEN_FILE) | (1u << IK_TOKEN_ENV)))
		return yp_fail(P, marks[IK_TOKEN_ENV],
			       "identities.%s: use one of token_file and token_env", id->name);
	if (!how && !(seen & (1u << IK_CERT_NAME)))
		return yp_fail(P, start,
			       "identities.%s: needs token_file, token_env or cert_name (how a "
			       "client proves it)",
			       id->name);
	if (!(seen & (1u << IK_RIGHTS)) || id->rights == 0)
		return yp_fail(P, start, "identities.%s: needs rights: [decide], [admin] or both",
			       id->name);
	return 0;
}

int config_identity_set(struct yparser *P, const struct ykey *k, void *dst)
{
	struct ids_read R = {dst, 0};
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of identity names to how they prove it");
	config_identity_free(R.c);
	size_t n;
	return yp_dict(P, k, "identities", identity_entry, &R, &n);
}

/* "[app ops]": names, how each proves it (paths and variable names, never
 * a token) and what it may do; a reload logs it when it changes. */
void config_identity_put(FILE *f, const struct ykey *k, const void *base)
{
	const struct config *c = base;
	(void)k;
	fputc('[', f);
	for (size_t i = 0; i < c->nidentities; i++) {
		const struct config_identity *id = &c->identities[i];
		fprintf(f, "%s%s{", i ? " " : "", id->name);
		if (id->token_file)
			fprintf(f, "token_file %s ", id->token_file);
		if (id->token_env)
			fprintf(f, "token_env %s ", id->token_env);
		if (id->cert_name)
			fprintf(f, "cert_name %s ", id->cert_name);
		fprintf(f, "%s%s", (id->rights & CONFIG_RIGHT_DECIDE) ? "decide" : "",
			(id->rights & CONFIG_RIGHT_ADMIN)
				? ((id->rights & CONFIG_RIGHT_DECIDE) ? ",admin" : "admin")
				: "");
		for (size_t j = 0; j < id->npolicies; j++)
			fprintf(f, "%s%s", j ? "," : " policies ", id->policies[j]);
		fputc('}', f);
	}
	fputc(']', f);
}

/* A token's bytes: a file's first line (without its line end), or a variable's value. */
static int token_check(struct config_identity *id, const char *from, char *err, size_t errlen)
{
	if (id->token_len < CONFIG_TOKEN_MIN || id->token_len > CONFIG_TOKEN_MAX) {
		snprintf(err, errlen, "identities.%s: the token in %s must be %d to %d bytes",
			 id->name, from, CONFIG_TOKEN_MIN, CONFIG_TOKEN_MAX);
		return -1;
	}
	for (size_t i = 0; i < id->token_len; i++)
		if ((unsigned char)id->token[i] <= ' ' || id->token[i] == 0x7f) {
			snprintf(err, errlen,
				 "identities.%s: the token in %s holds a blank or control byte",
				 id->name, from);
			return -1;
		}
	return 0;
}

int config_identity_load(struct config *c, const char *name, char *err, size_t errlen)
{
	for (size_t i = 0; i < c->nidentities; i++) {
		struct config_identity *id = &c->identities[i];
		if (id->token_file) {
			FILE *f = fopen(id->token_file, "r");
			if (!f) {
				snprintf(err, errlen, "%s: identities.%s.token_file %s: %s", name,
					 id->name, id->token_file, strerror(errno));
				return -1;
			}
			char buf[CONFIG_TOKEN_MAX + 2];
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = '\0';
			n = strcspn(buf, "\r\n");
			id->token = malloc(n + 1);
			if (!id->token) {
				snprintf(err, errlen, "%s: out of memory", name);
				return -1;
			}
			memcpy(id->token, buf, n);
			id->token[n] = '\0';
			id->token_len = n;
			memset(buf, 0, sizeof(buf));
		} else if (id->token_env) {
			const char *v = getenv(id->token_env);
			if (!v) {
				snprintf(err, errlen, "%s: identities.%s.token_env: %s is not set",
					 name, id->name, id->token_env);
				return -1;
			}
			id->token_len = strlen(v);
			id->token = strdup(v);
			if (!id->token) {
				snprintf(err, errlen, "%s: out of memory", name);
				return -1;
			}
		} else {
			continue;
		}
		char why[300];
		if (token_check(id, id->token_file ? id->token_file : id->token_env, why,
				sizeof(why)) < 0) {
			snprintf(err, errlen, "%s: %s", name, why);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (c->identities[j].token && c->identities[j].token_len == id->token_len &&
			    memcmp(c->identities[j].token, id->token, id->token_len) == 0) {
				snprintf(err, errlen,
					 "%s: identities %s and %s have the same token", name,
					 c->identities[j].name, id->name);
				return -1;
			}
	}
	/* a policy named must be one (an envoy rule's too: its rules are loaded) */
	for (size_t i = 0; i < c->nidentities; i++)
		for (size_t j = 0; j < c->identities[i].npolicies; j++) {
			const char *p = c->identities[i].policies[j];
			if (!config_find_policy(c, p, strlen(p))) {
				snprintf(err, errlen,
					 "%s: identities.%s.policies: no policy \"%s\"", name,
					 c->identities[i].name, p);
				return -1;
			}
		}
	return 0;
}

const struct config_identity *config_identity_by_token(const struct config *c, const char *tok,
						       size_t len)
{
	const struct config_identity *found = NULL;
	/* every identity is compared, each in time independent of where the
	 * bytes differ: the reply's timing tells nothing of a token */
	for (size_t i = 0; i < c->nidentities; i++) {
		const struct config_identity *id = &c->identities[i];
		if (!id->token)
			continue;
		unsigned char diff = (unsigned char)(id->token_len != len);
		for (size_t j = 0; j < id->token_len; j++)
			diff |= (unsigned char)(id->token[j] ^ (j < len ? tok[j] : 0));
		if (!diff && !found)
			found = id;
	}
	return found;
}

const struct config_identity *config_identity_by_cert(const struct config *c, const char *cn)
{
	for (size_t i = 0; i < c->nidentities; i++)
		if (c->identities[i].cert_name && strcmp(c->identities[i].cert_name, cn) == 0)
			return &c->identities[i];
	return NULL;
}

const struct config_identity *config_identity_by_name(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->nidentities; i++)
		if (strcmp(c->identities[i].name, name) == 0)
			return &c->identities[i];
	return NULL;
}

int config_identity_may(const struct config_identity *id, enum config_right right,
			const char *action, size_t action_len)
{
	if (!(id->rights & (unsigned)right))
		return 0;
	if (!id->policies || !action)
		return 1;
	for (size_t i = 0; i < id->npolicies; i++)
		if (strlen(id->policies[i]) == action_len &&
		    memcmp(id->policies[i], action, action_len) == 0)
			return 1;
	return 0;
}
