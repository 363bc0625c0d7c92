/*
 * Element types and operations understood by twohop's own reduction kernels, and the
 * description of one reduction handed from the Open MPI adapter to the core. Plain C.
 *
 * The adapter maps each predefined MPI datatype to a twohop_dtype by its C layout (MPI_LONG
 * and MPI_INT64_T both become TWOHOP_I64 on LP64); a contiguous derived datatype built from
 * one predefined type becomes that type with a count multiplier.
 */
#ifndef TWOHOP_REDUCE_TYPES_H
#define TWOHOP_REDUCE_TYPES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum twohop_dtype {
    TWOHOP_I8, TWOHOP_U8, TWOHOP_I16, TWOHOP_U16, TWOHOP_I32, TWOHOP_U32, TWOHOP_I64, TWOHOP_U64,
    TWOHOP_F32, TWOHOP_F64, TWOHOP_LDBL,           /* float, double, long double */
    TWOHOP_BOOL,                                  /* C _Bool (1 byte) */
    TWOHOP_BYTE,                                  /* MPI_BYTE: bitwise ops only */
    TWOHOP_C32, TWOHOP_C64, TWOHOP_CLDBL,          /* C complex float/double/long double */
    TWOHOP_FLOAT_INT, TWOHOP_DOUBLE_INT, TWOHOP_LONG_INT, TWOHOP_2INT, TWOHOP_SHORT_INT,
    TWOHOP_LONG_DOUBLE_INT,                       /* MINLOC/MAXLOC pair types */
    TWOHOP_BF16, TWOHOP_F16,                      /* bfloat16, IEEE binary16 (include/twohop_half.h):
                                                     SUM, PROD, MAX, MIN */
    TWOHOP_DTYPE_COUNT
} twohop_dtype;

typedef enum twohop_op {
    TWOHOP_OP_SUM, TWOHOP_OP_PROD, TWOHOP_OP_MAX, TWOHOP_OP_MIN,
    TWOHOP_OP_LAND, TWOHOP_OP_LOR, TWOHOP_OP_LXOR,
    TWOHOP_OP_BAND, TWOHOP_OP_BOR, TWOHOP_OP_BXOR,
    TWOHOP_OP_MAXLOC, TWOHOP_OP_MINLOC,
    TWOHOP_OP_USER,                               /* commutative user op, via user_fn */
    TWOHOP_OP_COUNT
} twohop_op;

/*
 * User-defined (or otherwise foreign) reduction: inout[i] = in[i] op inout[i] for `count`
 * items of the MPI datatype (MPI_User_function order). Returns 0 or an MPI error code.
 */
typedef int (*twohop_user_reduce_fn)(void *ctx, const void *in, void *inout, size_t count);

/*
 * One reduction as the core sees it.
 *   item_bytes: bytes of one MPI datatype item (its size == extent; contiguous, lb 0)
 *   For TWOHOP_OP_USER: user_fn/user_ctx combine whole items; dtype is ignored.
 *   Otherwise: each item is elems_per_item consecutive elements of dtype.
 */
typedef struct twohop_reduction {
    twohop_dtype dtype;
    twohop_op op;
    size_t item_bytes;
    size_t elems_per_item;
    twohop_user_reduce_fn user_fn;
    void *user_ctx;
} twohop_reduction;

/* Bytes of one element of `t` (e.g. 16 for TWOHOP_DOUBLE_INT); 0 for an invalid type. */
size_t twohop_dtype_size(twohop_dtype t);

/* 1 when MPI allows `op` on elements of type `t` and twohop has a kernel for it, else 0. */
int twohop_kernel_supported(twohop_dtype t, twohop_op op);

/* Short names for log messages ("float", "sum"). */
const char *twohop_dtype_name(twohop_dtype t);
const char *twohop_op_name(twohop_op op);

#ifdef __cplusplus
}
#endif

#endif
