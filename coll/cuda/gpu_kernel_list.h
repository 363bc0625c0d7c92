/*
 * The (element type, op) pairs the GPU path computes: MPI's predefined pairs (MPI-4.1 section
 * 6.9.2) except long double ones (no device long double). One X-macro list shared by the
 * device code (gpu_kernels.cu defines one kernel per entry) and the host (gpu/vote.cpp looks
 * kernels up by name), so the two cannot drift apart.
 *
 * X(DTYPE, CTYPE, OP, FUNCTOR): DTYPE a twohop_dtype, CTYPE its element type (reduce_ops.h),
 * OP a twohop_op suffix, FUNCTOR its functor. Kernel name: "th_rb_" #DTYPE "_" #OP.
 */
#ifndef TWOHOP_GPU_KERNEL_LIST_H
#define TWOHOP_GPU_KERNEL_LIST_H

#define TWOHOP_GPU_ARITH(X, D, T)                                                              \
    X(D, T, SUM, OpSum) X(D, T, PROD, OpProd) X(D, T, MAX, OpMax) X(D, T, MIN, OpMin)
#define TWOHOP_GPU_LOGICAL(X, D, T) X(D, T, LAND, OpLand) X(D, T, LOR, OpLor) X(D, T, LXOR, OpLxor)
#define TWOHOP_GPU_BITWISE(X, D, T) X(D, T, BAND, OpBand) X(D, T, BOR, OpBor) X(D, T, BXOR, OpBxor)
#define TWOHOP_GPU_INTEGER(X, D, T)                                                            \
    TWOHOP_GPU_ARITH(X, D, T) TWOHOP_GPU_LOGICAL(X, D, T) TWOHOP_GPU_BITWISE(X, D, T)
#define TWOHOP_GPU_COMPLEX(X, D, T) X(D, T, SUM, OpSum) X(D, T, PROD, OpProd)
#define TWOHOP_GPU_PAIR(X, D, T) X(D, T, MAXLOC, OpMaxloc) X(D, T, MINLOC, OpMinloc)

#define TWOHOP_GPU_KERNELS(X)                                                                  \
    TWOHOP_GPU_INTEGER(X, TWOHOP_I8, int8_t)                                                   \
    TWOHOP_GPU_INTEGER(X, TWOHOP_U8, uint8_t)                                                  \
    TWOHOP_GPU_INTEGER(X, TWOHOP_I16, int16_t)                                                 \
    TWOHOP_GPU_INTEGER(X, TWOHOP_U16, uint16_t)                                                \
    TWOHOP_GPU_INTEGER(X, TWOHOP_I32, int32_t)                                                 \
    TWOHOP_GPU_INTEGER(X, TWOHOP_U32, uint32_t)                                                \
    TWOHOP_GPU_INTEGER(X, TWOHOP_I64, int64_t)                                                 \
    TWOHOP_GPU_INTEGER(X, TWOHOP_U64, uint64_t)                                                \
    TWOHOP_GPU_ARITH(X, TWOHOP_F32, float)                                                     \
    TWOHOP_GPU_ARITH(X, TWOHOP_F64, double)                                                    \
    TWOHOP_GPU_LOGICAL(X, TWOHOP_BOOL, bool)                                                   \
    TWOHOP_GPU_BITWISE(X, TWOHOP_BYTE, uint8_t)                                                \
    TWOHOP_GPU_COMPLEX(X, TWOHOP_C32, Complex<float>)                                          \
    TWOHOP_GPU_COMPLEX(X, TWOHOP_C64, Complex<double>)                                         \
    TWOHOP_GPU_PAIR(X, TWOHOP_FLOAT_INT, ValueIndex<float>)                                                \
    TWOHOP_GPU_PAIR(X, TWOHOP_DOUBLE_INT, ValueIndex<double>)                                              \
    TWOHOP_GPU_PAIR(X, TWOHOP_LONG_INT, ValueIndex<long>)                                                  \
    TWOHOP_GPU_PAIR(X, TWOHOP_2INT, ValueIndex<int>)                                                       \
    TWOHOP_GPU_PAIR(X, TWOHOP_SHORT_INT, ValueIndex<short>)                                \
    TWOHOP_GPU_ARITH(X, TWOHOP_BF16, Bf16)                                                     \
    TWOHOP_GPU_ARITH(X, TWOHOP_F16, Fp16)

/* Local ranks one kernel reads from / writes to (the kernel's argument holds the pointers). */
#define TWOHOP_GPU_MAX_RANKS 16

/* The argument of every kernel: n elements; v = in[0] op in[1] op ... op in[nin-1] (in this
 * order, so every rank gets the same bits); out[r][i] = v for r < nout. */
struct twohop_gpu_args {
    const void *in[TWOHOP_GPU_MAX_RANKS];
    void *out[TWOHOP_GPU_MAX_RANKS];
    unsigned long long n;
    /* 16-byte vector loads and stores: set by the host when every pointer has the same
     * offset modulo 16 (a multiple of the element size); `head` elements come first, one at a
     * time, up to the first 16-byte boundary. */
    unsigned long long head;
    int nin, nout;
    int vec;
};

#endif
