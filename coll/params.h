/*
 * struct twohop_params: the values of every twohop tunable, one field per row of params.def.
 * Plain C so that the Open MPI adapter (C) and the core (C++) share it. The adapter owns the
 * single instance and registers each field as the MCA parameter coll_twohop_<name>.
 */
#ifndef TWOHOP_PARAMS_H
#define TWOHOP_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#define TWOHOP_CTYPE_INT int
#define TWOHOP_CTYPE_SIZE size_t
#define TWOHOP_CTYPE_BOOL bool
#define TWOHOP_CTYPE_STRING char *

struct twohop_params {
#define TWOHOP_PARAM(name, kind, def, level, doc) TWOHOP_CTYPE_##kind name;
#include "params.def"
#undef TWOHOP_PARAM
};

#endif
