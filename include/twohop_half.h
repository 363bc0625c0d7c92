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
 * The ops also reduce datatypes built from one of these types (contiguous, vectors with gaps,
 * resized, negative strides) through their host functions; an op of one kind applied to the
 * other kind's datatype itself aborts the job with MPI_ERR_OP instead of computing with the
 * wrong arithmetic. Applied to a datatype built from the other kind (a dup, a contiguous of
 * it), it is not caught: both types are two bytes (contiguous(2, MPI_BYTE)) and MPI cannot
 * tell them apart below the handle, so the op computes its own kind's arithmetic on them --
 * pass the op that matches the datatype. Datatypes that mix in other types are not
 * supported.
 *
 * Handles are created on first use, once per program: every file that includes this header
 * sees the same ones (weak definitions, merged by the linker), creation is serialised (threads
 * may race for the first call). They live until MPI_Finalize (do not free them). Errors:
 * MPI_OP_NULL / MPI_DATATYPE_NULL for an unknown op or type, or when MPI refused to create the
 * handle.
 */
#ifndef TWOHOP_HALF_H
#define TWOHOP_HALF_H

#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

/*
 * The program's handles: weak definitions, which the linker merges into one across every file
 * of the program (or shared object) that includes this header. Creation runs under a spin lock.
 */
__attribute__((weak)) MPI_Datatype twohop_half_types_[3];
__attribute__((weak)) int twohop_half_types_made_[3];
__attribute__((weak)) MPI_Op twohop_half_ops_[3][4];
__attribute__((weak)) int twohop_half_ops_made_[3][4];
__attribute__((weak)) int twohop_half_lock_;

static inline void twohop__half_lock(void) {
    while (__atomic_exchange_n(&twohop_half_lock_, 1, __ATOMIC_ACQUIRE)) {
    }
}
static inline void twohop__half_unlock(void) {
    __atomic_store_n(&twohop_half_lock_, 0, __ATOMIC_RELEASE);
}

/*
 * The ops' host function: inout[i] = in[i] op inout[i] (MPI_User_function order) over *len items
 * of *dt: one of the two types or a datatype built from it -- contiguous directly; with gaps, a
 * lower bound or a negative stride through packed copies (MPI_Pack / MPI_Unpack). An op of one
 * kind applied to the other kind's datatype aborts the job (MPI_ERR_OP).
 */
static inline void twohop__half_apply(int kind, int op, void *in, void *inout, int *len,
                                      MPI_Datatype *dt) {
    const MPI_Datatype t = dt != NULL ? *dt : MPI_DATATYPE_NULL;
    const int other = kind == TWOHOP_HALF_BF16 ? TWOHOP_HALF_F16 : TWOHOP_HALF_BF16;
    if (t != MPI_DATATYPE_NULL &&
        __atomic_load_n(&twohop_half_types_made_[other], __ATOMIC_ACQUIRE) &&
        t == twohop_half_types_[other]) {
        fprintf(stderr, "twohop_half.h: a %s op was applied to the %s datatype\n",
                kind == TWOHOP_HALF_BF16 ? "bfloat16" : "float16",
                kind == TWOHOP_HALF_BF16 ? "float16" : "bfloat16");
        MPI_Abort(MPI_COMM_WORLD, MPI_ERR_OP);
    }
    int size = 2;
    MPI_Aint lb = 0, extent = 2, tlb = 0, text = 2;
    if (t != MPI_DATATYPE_NULL) {
        MPI_Type_size(t, &size);
        MPI_Type_get_extent(t, &lb, &extent);
        MPI_Type_get_true_extent(t, &tlb, &text);
    }
    const long n = (long)*len * (size / 2);
    uint16_t (*combine)(int, uint16_t, uint16_t) =
        kind == TWOHOP_HALF_BF16 ? twohop_bf16_combine : twohop_f16_combine;
    if (lb == 0 && tlb == 0 && extent == size && text == size) { /* contiguous */
        const uint16_t *a = (const uint16_t *)in;
        uint16_t *b = (uint16_t *)inout;
        for (long i = 0; i < n; ++i) b[i] = combine(op, a[i], b[i]);
        return;
    }
    int bytes = 0, pos = 0;
    MPI_Pack_size(*len, t, MPI_COMM_SELF, &bytes);
    uint16_t *pa = (uint16_t *)malloc(bytes > 0 ? (size_t)bytes : 1);
    uint16_t *pb = (uint16_t *)malloc(bytes > 0 ? (size_t)bytes : 1);
    if (pa == NULL || pb == NULL) {
        fprintf(stderr, "twohop_half.h: out of memory packing %d items\n", *len);
        MPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
    }
    MPI_Pack(in, *len, t, pa, bytes, &pos, MPI_COMM_SELF);
    pos = 0;
    MPI_Pack(inout, *len, t, pb, bytes, &pos, MPI_COMM_SELF);
    for (long i = 0; i < n; ++i) pb[i] = combine(op, pa[i], pb[i]);
    pos = 0;
    MPI_Unpack(pb, bytes, &pos, inout, *len, t, MPI_COMM_SELF);
    free(pa);
    free(pb);
}

#define TWOHOP__HALF_FN(NAME, KIND, OP)                                                        \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) {                      \
        twohop__half_apply(KIND, OP, in, inout, len, dt);                                      \
    }
TWOHOP__HALF_FN(twohop__bf16_sum, TWOHOP_HALF_BF16, TWOHOP_HALF_SUM)
TWOHOP__HALF_FN(twohop__bf16_prod, TWOHOP_HALF_BF16, TWOHOP_HALF_PROD)
TWOHOP__HALF_FN(twohop__bf16_max, TWOHOP_HALF_BF16, TWOHOP_HALF_MAX)
TWOHOP__HALF_FN(twohop__bf16_min, TWOHOP_HALF_BF16, TWOHOP_HALF_MIN)
TWOHOP__HALF_FN(twohop__f16_sum, TWOHOP_HALF_F16, TWOHOP_HALF_SUM)
TWOHOP__HALF_FN(twohop__f16_prod, TWOHOP_HALF_F16, TWOHOP_HALF_PROD)
TWOHOP__HALF_FN(twohop__f16_max, TWOHOP_HALF_F16, TWOHOP_HALF_MAX)
TWOHOP__HALF_FN(twohop__f16_min, TWOHOP_HALF_F16, TWOHOP_HALF_MIN)
#undef TWOHOP__HALF_FN

static inline MPI_Datatype twohop__half_type(int kind) {
    if (__atomic_load_n(&twohop_half_types_made_[kind], __ATOMIC_ACQUIRE)) {
        return twohop_half_types_[kind];
    }
    twohop__half_lock();
    if (!twohop_half_types_made_[kind]) {
        MPI_Datatype t;
        if (MPI_Type_contiguous(2, MPI_BYTE, &t) != MPI_SUCCESS ||
            MPI_Type_commit(&t) != MPI_SUCCESS) {
            twohop__half_unlock();
            return MPI_DATATYPE_NULL;
        }
        MPI_Type_set_name(t, kind == TWOHOP_HALF_BF16 ? "twohop_bfloat16" : "twohop_float16");
        twohop__register_half(t, MPI_OP_NULL, kind, -1);
        twohop_half_types_[kind] = t;
        __atomic_store_n(&twohop_half_types_made_[kind], 1, __ATOMIC_RELEASE);
    }
    twohop__half_unlock();
    return twohop_half_types_[kind];
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
    int kind = 0, h;
    if (type == twohop_type_bfloat16()) kind = TWOHOP_HALF_BF16;
    else if (type == twohop_type_float16()) kind = TWOHOP_HALF_F16;
    if (kind == 0) return MPI_OP_NULL;
    if (base == MPI_SUM) h = TWOHOP_HALF_SUM;
    else if (base == MPI_PROD) h = TWOHOP_HALF_PROD;
    else if (base == MPI_MAX) h = TWOHOP_HALF_MAX;
    else if (base == MPI_MIN) h = TWOHOP_HALF_MIN;
    else return MPI_OP_NULL;
    if (__atomic_load_n(&twohop_half_ops_made_[kind][h], __ATOMIC_ACQUIRE)) {
        return twohop_half_ops_[kind][h];
    }
    twohop__half_lock();
    if (!twohop_half_ops_made_[kind][h]) {
        static MPI_User_function *const fns[3][4] = {
            {0, 0, 0, 0},
            {twohop__bf16_sum, twohop__bf16_prod, twohop__bf16_max, twohop__bf16_min},
            {twohop__f16_sum, twohop__f16_prod, twohop__f16_max, twohop__f16_min}};
        MPI_Op op;
        if (MPI_Op_create(fns[kind][h], 1, &op) != MPI_SUCCESS) {
            twohop__half_unlock();
            return MPI_OP_NULL;
        }
        twohop__register_half(type, op, kind, h);
        twohop_half_ops_[kind][h] = op;
        __atomic_store_n(&twohop_half_ops_made_[kind][h], 1, __ATOMIC_RELEASE);
    }
    twohop__half_unlock();
    return twohop_half_ops_[kind][h];
}

#ifdef __cplusplus
}
#endif

#endif
