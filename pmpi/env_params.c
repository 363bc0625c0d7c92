/* TWOHOP_<NAME> environment variables -> struct twohop_params (env_params.h). */
#include "env_params.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* [s, e) with blanks stripped from both ends. */
static void trim(const char **s, const char **e) {
    while (*s < *e && isspace((unsigned char)**s)) ++*s;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) --*e;
}

int twohop_parse_int(const char *s, int *out) {
    if (s == NULL) return -1;
    const char *e = s + strlen(s);
    trim(&s, &e);
    if (s == e) return -1;
    char buf[32];
    if ((size_t)(e - s) >= sizeof(buf)) return -1;
    memcpy(buf, s, (size_t)(e - s));
    buf[e - s] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || *end != '\0' || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int twohop_parse_size(const char *s, size_t *out) {
    if (s == NULL) return -1;
    const char *e = s + strlen(s);
    trim(&s, &e);
    if (s == e || !isdigit((unsigned char)*s)) return -1; /* no sign, no blank inside */
    unsigned shift = 0;
    switch (e[-1]) {
    case 'k': case 'K': shift = 10; --e; break;
    case 'm': case 'M': shift = 20; --e; break;
    case 'g': case 'G': shift = 30; --e; break;
    default: break;
    }
    if (s == e) return -1;
    uint64_t v = 0;
    for (const char *c = s; c < e; ++c) {
        if (!isdigit((unsigned char)*c)) return -1;
        const uint64_t d = (uint64_t)(*c - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    v <<= shift;
    if (v > SIZE_MAX) return -1;
    *out = (size_t)v;
    return 0;
}

int twohop_parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    if (s == NULL) return -1;
    const char *e = s + strlen(s);
    trim(&s, &e);
    const size_t n = (size_t)(e - s);
    for (size_t i = 0; i < 4; ++i) {
        if (n == strlen(yes[i]) && strncasecmp(s, yes[i], n) == 0) return *out = true, 0;
        if (n == strlen(no[i]) && strncasecmp(s, no[i], n) == 0) return *out = false, 0;
    }
    return -1;
}

void twohop_env_name(const char *name, char *out, size_t len) {
    if (len == 0) return;
    int n = snprintf(out, len, "TWOHOP_%s", name);
    if (n < 0) {
        out[0] = '\0';
        return;
    }
    for (char *c = out + 7; *c; ++c) *c = (char)toupper((unsigned char)*c);
}

/* One field from its variable; -1 with err set when the value is invalid. */
#define TWOHOP_ENV_READ(kind, parse, syntax)                                                   \
    static int read_##kind(const char *name, const char *v, void *field, char *err,           \
                           size_t errlen) {                                                   \
        if (parse(v, field) == 0) return 0;                                                   \
        char env[96];                                                                          \
        twohop_env_name(name, env, sizeof(env));                                               \
        snprintf(err, errlen, "%s=\"%s\" is not %s", env, v, syntax);                          \
        return -1;                                                                             \
    }
static int parse_int_v(const char *s, void *o) { return twohop_parse_int(s, (int *)o); }
static int parse_size_v(const char *s, void *o) { return twohop_parse_size(s, (size_t *)o); }
static int parse_bool_v(const char *s, void *o) { return twohop_parse_bool(s, (bool *)o); }
TWOHOP_ENV_READ(INT, parse_int_v, "an integer")
TWOHOP_ENV_READ(SIZE, parse_size_v, "a size in bytes (digits, optional k/m/g suffix)")
TWOHOP_ENV_READ(BOOL, parse_bool_v, "a boolean (1/0, true/false, yes/no, on/off)")
#undef TWOHOP_ENV_READ

static int read_STRING(const char *name, const char *v, void *field, char *err, size_t errlen) {
    char *copy = strdup(v);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory reading TWOHOP_%s", name);
        return -1;
    }
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

static void set_defaults(struct twohop_params *p) {
#define TWOHOP_PARAM(name, kind, def, level, doc) p->name = def;
#include "params.def"
#undef TWOHOP_PARAM
}

/* The STRING fields as heap copies (after set_defaults they point at literals); -1 when out of
 * memory (the fields not copied are NULL). */
static int own_strings(struct twohop_params *p) {
    int rc = 0;
#define TWOHOP_OWN_STRING(name)                                                                \
    p->name = p->name ? strdup(p->name) : NULL;                                                \
    if (p->name == NULL) rc = -1;
#define TWOHOP_OWN_INT(name)
#define TWOHOP_OWN_SIZE(name)
#define TWOHOP_OWN_BOOL(name)
#define TWOHOP_PARAM(name, kind, def, level, doc) TWOHOP_OWN_##kind(name)
#include "params.def"
#undef TWOHOP_PARAM
#undef TWOHOP_OWN_STRING
#undef TWOHOP_OWN_INT
#undef TWOHOP_OWN_SIZE
#undef TWOHOP_OWN_BOOL
    return rc;
}

void twohop_env_params_free(struct twohop_params *p) {
#define TWOHOP_FREE_STRING(name)                                                               \
    free(p->name);                                                                             \
    p->name = NULL;
#define TWOHOP_FREE_INT(name)
#define TWOHOP_FREE_SIZE(name)
#define TWOHOP_FREE_BOOL(name)
#define TWOHOP_PARAM(name, kind, def, level, doc) TWOHOP_FREE_##kind(name)
#include "params.def"
#undef TWOHOP_PARAM
#undef TWOHOP_FREE_STRING
#undef TWOHOP_FREE_INT
#undef TWOHOP_FREE_SIZE
#undef TWOHOP_FREE_BOOL
}

int twohop_env_params_parse(struct twohop_params *p, twohop_env_get_fn get, void *ctx, char *err,
                            size_t errlen) {
    set_defaults(p);
    if (errlen) err[0] = '\0';
    int rc = own_strings(p);
    if (rc != 0) snprintf(err, errlen, "out of memory copying the default settings");
#define TWOHOP_PARAM(name, kind, def, level, doc)                                              \
    if (rc == 0) {                                                                             \
        char env[96];                                                                          \
        twohop_env_name(#name, env, sizeof(env));                                              \
        const char *v = get(ctx, env);                                                         \
        if (v != NULL) rc = read_##kind(#name, v, &p->name, err, errlen);                     \
    }
#include "params.def"
#undef TWOHOP_PARAM
    if (rc != 0) {
        twohop_env_params_free(p);
        set_defaults(p);
        (void)own_strings(p);
    }
    return rc;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = (const unsigned char *)data;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL; /* FNV-1a 64 prime */
    return h;
}

uint64_t twohop_params_hash(const struct twohop_params *p) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a 64-bit offset basis */
#define TWOHOP_HASH_INT(name) h = fnv(h, &p->name, sizeof(p->name));
#define TWOHOP_HASH_SIZE(name) TWOHOP_HASH_INT(name)
#define TWOHOP_HASH_BOOL(name) { const unsigned char b = p->name ? 1 : 0; h = fnv(h, &b, 1); }
#define TWOHOP_HASH_STRING(name)                                                               \
    { const char *s = p->name ? p->name : ""; h = fnv(h, s, strlen(s) + 1); }
#define TWOHOP_PARAM(name, kind, def, level, doc) TWOHOP_HASH_##kind(name)
#include "params.def"
#undef TWOHOP_PARAM
#undef TWOHOP_HASH_INT
#undef TWOHOP_HASH_SIZE
#undef TWOHOP_HASH_BOOL
#undef TWOHOP_HASH_STRING
    return h;
}
