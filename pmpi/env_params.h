/*
 * Settings of the PMPI library (libtwohop_pmpi.so) from the environment: every row of
 * coll/params.def, the table behind the Open MPI component's MCA parameters coll_twohop_<name>,
 * is read from the environment variable TWOHOP_<NAME> (the name in upper case), with the same
 * type, default and meaning. Pure C, no MPI.
 *
 * Value syntax (the same as Open MPI's MCA parser accepts for these types):
 *   INT     decimal integer within int's range, optional sign ("-1")
 *   SIZE    decimal bytes, optionally followed by k, m or g (KiB, MiB, GiB; either case);
 *           no sign, at most SIZE_MAX
 *   BOOL    1/0, true/false, yes/no, on/off (either case)
 *   STRING  taken as is
 * Leading/trailing blanks are ignored for INT, SIZE and BOOL; anything else is an error.
 */
#ifndef TWOHOP_ENV_PARAMS_H
#define TWOHOP_ENV_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns the value of the variable `name`, or NULL when it is not set (getenv's shape). */
typedef const char *(*twohop_env_get_fn)(void *ctx, const char *name);

/*
 * Sets every field of *p to its params.def default, then to the value of TWOHOP_<NAME> where
 * `get` returns one. STRING fields are heap copies (free them with twohop_env_params_free).
 * Returns 0, or -1 at the first invalid value: *p then holds the defaults and err (errlen bytes)
 * names the variable, its value and the expected syntax.
 */
int twohop_env_params_parse(struct twohop_params *p, twohop_env_get_fn get, void *ctx, char *err,
                            size_t errlen);

/* Frees the STRING fields (heap copies made by twohop_env_params_parse; NULL afterwards). */
void twohop_env_params_free(struct twohop_params *p);

/*
 * 64-bit FNV-1a hash of every field's value (strings by content): equal settings give equal
 * hashes on every rank, so ranks can agree on their settings with one allreduce.
 */
uint64_t twohop_params_hash(const struct twohop_params *p);

/* Writes "TWOHOP_<NAME>" for the params.def row `name` into out (len bytes, truncated). */
void twohop_env_name(const char *name, char *out, size_t len);

/* Parsers of one value (the syntax above). Return 0, or -1 when `s` is not a valid value. */
int twohop_parse_int(const char *s, int *out);
int twohop_parse_size(const char *s, size_t *out);
int twohop_parse_bool(const char *s, bool *out);

#ifdef __cplusplus
}
#endif

#endif
