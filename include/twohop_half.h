/*
 * Half-precision allreduce with any MPI: bfloat16 and IEEE binary16 ("fp16") datatypes and their
 * SUM, PROD, MAX and MIN ops (header only; C and C++).
 *
 *   #include <twohop_half.h>
 *   MPI_Datatype bf16 = twohop_type_bfloat16();          // after MPI_Init
 *   MPI_Op sum = twohop_half_op(MPI_SUM, bf16);
 *   MPI_Allreduce(MPI_IN_PLACE, grad, n, bf16, sum, comm); // grad: n bfloat16 values
 *
 * The datatypes are committed 2-byte types (MPI_Type_contiguous(2, MPI_BYTE), named
 * "twohop_bfloat16" / "twohop_float16"); the ops are commutative MPI_Op_create ops whose host
 * function computes exactly twohop's arithmetic (twohop_half_math.h: each combination widened
 * to binary32, rounded once to the format, round to nearest even; MAX/MIN return an operand).
 * Where twohop serves the communicator (Open MPI component or libtwohop_pmpi.so) the handles
 * are registered with it at creation, and it reduces them with its own kernels -- on the host
 * and, for device buffers, on the GPU; anywhere else MPI calls the host function: the same
 * bits for the same combination order. Counts are in elements (2 bytes each); buffers may be
 * host or (with a CUDA-aware path) device memory.
 *
 * The ops also reduce contiguous datatypes built from these types (e.g. MPI_Type_contiguous(4,
 * bf16)), through their host functions; datatypes with gaps are not supported.
 *
 * Handles are created on first use and live until MPI_Finalize (do not free them). The first
 * call of each function must not race with another thread's first call. Errors: MPI_OP_NULL /
 * MPI_DATATYPE_NULL for an unknown op or type, or when MPI refused to create the handle.
 */
#ifndef TWOHOP_HALF_H
#define TWOHOP_HALF_H

#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>

#include "twohop_half_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds and ops as twohop's registration entry point takes them. */
enum { TWOHOP_HALF_BF16 = 1, TWOHOP_HALF_F16 = 2 };
enum { TWOHOP_HALF_SUM = 0, TWOHOP_HALF_PROD = 1, TWOHOP_HALF_MAX = 2, TWOHOP_HALF_MIN = 3 };

/* int register(MPI_Datatype type, MPI_Op op, int kind, int half_op): the component's
 * mca_coll_twohop_register_half or the PMPI library's twohop_pmpi_register_half (op
 * MPI_OP_NULL and half_op -1 register a datatype). */
typedef int (*twohop_register_half_fn)(MPI_Datatype, MPI_Op, int, int);

static inline void twohop__register_half(MPI_Datatype type, MPI_Op op, int kind, int half_op) {
    void *self = dlopen(NULL, RTLD_LAZY);
    void *sym = NULL;
    if (self != NULL) {
        sym = dlsym(self, "mca_coll_twohop_register_half");
        if (sym == NULL) sym = dlsym(self, "twohop_pmpi_register_half");
        dlclose(self);
    }
    if (sym != NULL) {
        twohop_register_half_fn fn;
        memcpy(&fn, &sym, sizeof(fn));
        (void)fn(type, op, kind, half_op);
    }
}

/* inout[i] = in[i] op inout[i] (MPI_User_function order), over *len items of *dt: one of
 * the types below or a contiguous type made of them (its size in 2-byte elements). */
#define TWOHOP__HALF_FN(NAME, COMBINE, OP)                                                     \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) {                      \
        const uint16_t *a = (const uint16_t *)in;                                             \
        uint16_t *b = (uint16_t *)inout;                                                       \
        int item = 2;                                                                          \
        if (dt != NULL && MPI_Type_size(*dt, &item) != MPI_SUCCESS) item = 2;                  \
        const long n = (long)*len * (item / 2);                                                \
        for (long i = 0; i < n; ++i) b[i] = COMBINE(OP, a[i], b[i]);                           \
    }
TWOHOP__HALF_FN(twohop__bf16_sum, twohop_bf16_combine, TWOHOP_HALF_SUM)
TWOHOP__HALF_FN(twohop__bf16_prod, twohop_bf16_combine, TWOHOP_HALF_PROD)
TWOHOP__HALF_FN(twohop__bf16_max, twohop_bf16_combine, TWOHOP_HALF_MAX)
TWOHOP__HALF_FN(twohop__bf16_min, twohop_bf16_combine, TWOHOP_HALF_MIN)
TWOHOP__HALF_FN(twohop__f16_sum, twohop_f16_combine, TWOHOP_HALF_SUM)
TWOHOP__HALF_FN(twohop__f16_prod, twohop_f16_combine, TWOHOP_HALF_PROD)
TWOHOP__HALF_FN(twohop__f16_max, twohop_f16_combine, TWOHOP_HALF_MAX)
TWOHOP__HALF_FN(twohop__f16_min, twohop_f16_combine, TWOHOP_HALF_MIN)
#undef TWOHOP__HALF_FN

static inline MPI_Datatype twohop__half_type(int kind) {
    static MPI_Datatype types[3];
    static int made[3];
    if (!made[kind]) {
        MPI_Datatype t;
        if (MPI_Type_contiguous(2, MPI_BYTE, &t) != MPI_SUCCESS) return MPI_DATATYPE_NULL;
        if (MPI_Type_commit(&t) != MPI_SUCCESS) return MPI_DATATYPE_NULL;
        MPI_Type_set_name(t, kind == TWOHOP_HALF_BF16 ? "twohop_bfloat16" : "twohop_float16");
        twohop__register_half(t, MPI_OP_NULL, kind, -1);
        types[kind] = t;
        made[kind] = 1;
    }
    return types[kind];
}

/* The bfloat16 datatype (2 bytes, committed). */
static inline MPI_Datatype twohop_type_bfloat16(void) { return twohop__half_type(TWOHOP_HALF_BF16); }
/* The IEEE binary16 datatype (2 bytes, committed). */
static inline MPI_Datatype twohop_type_float16(void) { return twohop__half_type(TWOHOP_HALF_F16); }

/*
 * The op computing `base` (MPI_SUM, MPI_PROD, MPI_MAX or MPI_MIN) on `type` (one of the two
 * datatypes above). MPI_OP_NULL for any other op or type.
 */
static inline MPI_Op twohop_half_op(MPI_Op base, MPI_Datatype type) {
    static MPI_Op ops[3][4];
    static int made[3][4];
    int kind = 0, h;
    if (type == twohop_type_bfloat16()) kind = TWOHOP_HALF_BF16;
    else if (type == twohop_type_float16()) kind = TWOHOP_HALF_F16;
    if (kind == 0) return MPI_OP_NULL;
    if (base == MPI_SUM) h = TWOHOP_HALF_SUM;
    else if (base == MPI_PROD) h = TWOHOP_HALF_PROD;
    else if (base == MPI_MAX) h = TWOHOP_HALF_MAX;
    else if (base == MPI_MIN) h = TWOHOP_HALF_MIN;
    else return MPI_OP_NULL;
    if (!made[kind][h]) {
        static MPI_User_function *const fns[3][4] = {
            {0, 0, 0, 0},
            {twohop__bf16_sum, twohop__bf16_prod, twohop__bf16_max, twohop__bf16_min},
            {twohop__f16_sum, twohop__f16_prod, twohop__f16_max, twohop__f16_min}};
        MPI_Op op;
        if (MPI_Op_create(fns[kind][h], 1, &op) != MPI_SUCCESS) return MPI_OP_NULL;
        twohop__register_half(type, op, kind, h);
        ops[kind][h] = op;
        made[kind][h] = 1;
    }
    return ops[kind][h];
}

#ifdef __cplusplus
}
#endif

#endif
