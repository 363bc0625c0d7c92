/*
 * Table, input patterns and reference arithmetic of allreduce_matrix (see matrix_types.h).
 * Each C type gets generated kernels (one switch on the op, loops inside) so the reference of a
 * multi-segment message costs a few milliseconds even on an oversubscribed node.
 */
#include "matrix_types.h"

#include "twohop_half.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Pair layouts; MPI's pair types are these C structs (extents are checked at init). */
struct float_int {
    float v;
    int i;
};
struct double_int {
    double v;
    int i;
};
struct long_int {
    long v;
    int i;
};
struct two_int {
    int v;
    int i;
};
struct short_int {
    short v;
    int i;
};
struct ldouble_int {
    long double v;
    int i;
};
struct mat2 {
    uint32_t m[4];
};

#define B(op) (1u << (op))
#define INT_OPS                                                                                    \
    (B(O_SUM) | B(O_PROD) | B(O_MIN) | B(O_MAX) | B(O_LAND) | B(O_LOR) | B(O_LXOR) | B(O_BAND) |   \
     B(O_BOR) | B(O_BXOR))
#define FLT_OPS (B(O_SUM) | B(O_PROD) | B(O_MIN) | B(O_MAX))
#define CPLX_OPS (B(O_SUM) | B(O_PROD))
#define LOGIC_OPS (B(O_LAND) | B(O_LOR) | B(O_LXOR))
#define BIT_OPS (B(O_BAND) | B(O_BOR) | B(O_BXOR))
#define PAIR_OPS (B(O_MINLOC) | B(O_MAXLOC))

/* Integer C type -> CT_I<bits> or CT_U<bits>. */
#define ICT(T)                                                                                     \
    ((enum mt_ctype)(((T)-1 < (T)1 ? 0 : 1) + (sizeof(T) == 1   ? CT_I8                            \
                                               : sizeof(T) == 2 ? CT_I16                           \
                                               : sizeof(T) == 4 ? CT_I32                           \
                                                                : CT_I64)))

/* Derived datatypes are built from (base, dcount) at init; dt starts as MPI_DATATYPE_NULL. */
struct derived {
    MPI_Datatype base;
    int dcount;
};
static int first_derived; /* index of the first derived entry of mt_types */

#define P1(name, dt, ct, ops)                                                                      \
    { name, dt, ct, 1, L_PACKED, ops, false, 0 }
struct mt_type mt_types[] = {
    P1("MPI_CHAR", MPI_CHAR, ICT(char), INT_OPS),
    P1("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, CT_I8, INT_OPS),
    P1("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, CT_U8, INT_OPS),
    P1("MPI_SHORT", MPI_SHORT, ICT(short), INT_OPS),
    P1("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, ICT(unsigned short), INT_OPS),
    P1("MPI_INT", MPI_INT, ICT(int), INT_OPS | B(O_USER_SUM)),
    P1("MPI_UNSIGNED", MPI_UNSIGNED, ICT(unsigned), INT_OPS),
    P1("MPI_LONG", MPI_LONG, ICT(long), INT_OPS),
    P1("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, ICT(unsigned long), INT_OPS),
    P1("MPI_LONG_LONG", MPI_LONG_LONG, ICT(long long), INT_OPS),
    P1("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, ICT(unsigned long long), INT_OPS),
    P1("MPI_INT8_T", MPI_INT8_T, CT_I8, INT_OPS),
    P1("MPI_UINT8_T", MPI_UINT8_T, CT_U8, INT_OPS),
    P1("MPI_INT16_T", MPI_INT16_T, CT_I16, INT_OPS),
    P1("MPI_UINT16_T", MPI_UINT16_T, CT_U16, INT_OPS),
    P1("MPI_INT32_T", MPI_INT32_T, CT_I32, INT_OPS),
    P1("MPI_UINT32_T", MPI_UINT32_T, CT_U32, INT_OPS),
    P1("MPI_INT64_T", MPI_INT64_T, CT_I64, INT_OPS),
    P1("MPI_UINT64_T", MPI_UINT64_T, CT_U64, INT_OPS),
    P1("MPI_AINT", MPI_AINT, ICT(MPI_Aint), INT_OPS),
    P1("MPI_OFFSET", MPI_OFFSET, ICT(MPI_Offset), INT_OPS),
    P1("MPI_COUNT", MPI_COUNT, ICT(MPI_Count), INT_OPS),
    P1("MPI_FLOAT", MPI_FLOAT, CT_FLOAT, FLT_OPS),
    P1("MPI_DOUBLE", MPI_DOUBLE, CT_DOUBLE, FLT_OPS | B(O_USER_SUM)),
    P1("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, CT_LDOUBLE, FLT_OPS),
    P1("MPI_C_BOOL", MPI_C_BOOL, CT_BOOL, LOGIC_OPS),
    P1("MPI_BYTE", MPI_BYTE, CT_BYTE, BIT_OPS),
    P1("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, CT_CFLOAT, CPLX_OPS),
    P1("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, CT_CDOUBLE, CPLX_OPS),
    P1("MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, CT_CLDOUBLE, CPLX_OPS),
    P1("MPI_FLOAT_INT", MPI_FLOAT_INT, CT_FLOAT_INT, PAIR_OPS),
    P1("MPI_DOUBLE_INT", MPI_DOUBLE_INT, CT_DOUBLE_INT, PAIR_OPS),
    P1("MPI_LONG_INT", MPI_LONG_INT, CT_LONG_INT, PAIR_OPS),
    P1("MPI_2INT", MPI_2INT, CT_2INT, PAIR_OPS),
    P1("MPI_SHORT_INT", MPI_SHORT_INT, CT_SHORT_INT, PAIR_OPS),
    P1("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, CT_LDOUBLE_INT, PAIR_OPS),
    /* twohop's half-precision types (include/twohop_half.h), created in mt_types_init; their
     * ops are twohop_half_op's (mt_op_for_type). */
    {"twohop_bfloat16", MPI_DATATYPE_NULL, CT_BF16, 1, L_PACKED, FLT_OPS, false, 0},
    {"twohop_float16", MPI_DATATYPE_NULL, CT_F16, 1, L_PACKED, FLT_OPS, false, 0},
    /*
     * Derived datatypes (built in mt_types_init from `derived_bases`, same order). MPI allows
     * predefined ops only on predefined datatypes (MPI-3.1 5.9.2; Open MPI answers MPI_ERR_OP),
     * so derived datatypes are reduced with user ops.
     */
    {"contig3(MPI_INT)", MPI_DATATYPE_NULL, ICT(int), 3, L_PACKED, B(O_USER_SUM), false, 0},
    {"contig2(MPI_DOUBLE)", MPI_DATATYPE_NULL, CT_DOUBLE, 2, L_PACKED, B(O_USER_SUM), false, 0},
    {"vector(2,1,2,MPI_INT)", MPI_DATATYPE_NULL, ICT(int), 2, L_VECTOR, B(O_USER_SUM), false, 0},
    {"contig4(MPI_UNSIGNED)=mat2x2", MPI_DATATYPE_NULL, CT_MAT2, 1, L_PACKED, B(O_USER_MAT), false,
     0},
};
const int mt_num_types = (int)(sizeof mt_types / sizeof mt_types[0]);

static const char *const op_names[O_NUM] = {"MPI_SUM",
                                            "MPI_PROD",
                                            "MPI_MIN",
                                            "MPI_MAX",
                                            "MPI_LAND",
                                            "MPI_LOR",
                                            "MPI_LXOR",
                                            "MPI_BAND",
                                            "MPI_BOR",
                                            "MPI_BXOR",
                                            "MPI_MINLOC",
                                            "MPI_MAXLOC",
                                            "user_sum(commutative)",
                                            "user_matmul(non-commutative)"};
static MPI_Op op_handles[O_NUM];

const char *mt_op_name(int op) {
    return op_names[op];
}
MPI_Op mt_op_handle(int op) {
    return op_handles[op];
}
MPI_Op mt_op_for_type(int t, int op) {
    const struct mt_type *ty = &mt_types[t];
    if (ty->ct == CT_BF16 || ty->ct == CT_F16) {
        return twohop_half_op(op_handles[op], ty->dt);
    }
    return op_handles[op];
}
bool mt_op_must_fallback(int op) {
    return op == O_USER_MAT;
}

size_t mt_ctype_size(enum mt_ctype ct) {
    static const size_t sizes[CT_NUM] = {1,
                                         1,
                                         2,
                                         2,
                                         4,
                                         4,
                                         8,
                                         8,
                                         sizeof(float),
                                         sizeof(double),
                                         sizeof(long double),
                                         sizeof(_Bool),
                                         1,
                                         sizeof(float complex),
                                         sizeof(double complex),
                                         sizeof(long double complex),
                                         sizeof(struct float_int),
                                         sizeof(struct double_int),
                                         sizeof(struct long_int),
                                         sizeof(struct two_int),
                                         sizeof(struct short_int),
                                         sizeof(struct ldouble_int),
                                         sizeof(struct mat2),
                                         2,
                                         2};
    return sizes[ct];
}

/* ---------------------------------------------------------------- user ops */

/*
 * Commutative user op "user_sum": sum of MPI_INT (wrapping) or MPI_DOUBLE elements, for the
 * predefined type itself, MPI_Type_contiguous(n, base) and MPI_Type_vector(c, b, s, base). The
 * layout is read back with MPI_Type_get_envelope/contents so holes of a vector stay untouched.
 */
static void user_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int ni, na, nd, comb;
    MPI_Type_get_envelope(*dt, &ni, &na, &nd, &comb);
    MPI_Datatype base = *dt;
    long blocks = 1, blocklen = 1, stride = 1, span = 1; /* in base elements */
    if (comb != MPI_COMBINER_NAMED) {
        int ints[3];
        MPI_Aint addrs[1];
        MPI_Type_get_contents(*dt, 3, 1, 1, ints, addrs, &base);
        if (comb == MPI_COMBINER_CONTIGUOUS) {
            span = blocks = ints[0];
        } else { /* MPI_COMBINER_VECTOR */
            blocks = ints[0];
            blocklen = ints[1];
            stride = ints[2];
            span = (blocks - 1) * stride + blocklen;
        }
    }
    for (long e = 0; e < *len; e++) {
        for (long b = 0; b < blocks; b++) {
            for (long j = 0; j < blocklen; j++) {
                long k = e * span + b * stride + j;
                if (base == MPI_DOUBLE) {
                    ((double *)inout)[k] += ((const double *)in)[k];
                } else {
                    ((int *)inout)[k] =
                        (int)((unsigned)((const int *)in)[k] + (unsigned)((int *)inout)[k]);
                }
            }
        }
    }
}

/* 2x2 matrix product modulo 2^32: c = a x b. */
static struct mat2 mat_mul(struct mat2 a, struct mat2 b) {
    struct mat2 c;
    c.m[0] = a.m[0] * b.m[0] + a.m[1] * b.m[2];
    c.m[1] = a.m[0] * b.m[1] + a.m[1] * b.m[3];
    c.m[2] = a.m[2] * b.m[0] + a.m[3] * b.m[2];
    c.m[3] = a.m[2] * b.m[1] + a.m[3] * b.m[3];
    return c;
}

/* Non-commutative user op: inout = in x inout (in holds the lower ranks, as MPI specifies). */
static void user_mat_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const struct mat2 *a = in;
    struct mat2 *b = inout;
    for (int k = 0; k < *len; k++) {
        b[k] = mat_mul(a[k], b[k]);
    }
}

int mt_types_init(void) {
    const MPI_Op builtin[] = {MPI_SUM,  MPI_PROD, MPI_MIN, MPI_MAX,  MPI_LAND,   MPI_LOR,
                              MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
    for (int op = 0; op < O_USER_SUM; op++) {
        op_handles[op] = builtin[op];
    }
    MPI_Op_create(user_sum_fn, 1, &op_handles[O_USER_SUM]);
    MPI_Op_create(user_mat_fn, 0, &op_handles[O_USER_MAT]);

    /* Bases of the derived entries, in table order. */
    const struct derived d[] = {{MPI_INT, 3}, {MPI_DOUBLE, 2}, {MPI_INT, 0}, {MPI_UNSIGNED, 4}};
    int nd = (int)(sizeof d / sizeof d[0]);
    int first = first_derived = mt_num_types - nd;
    int bad = 0;
    for (int t = 0; t < mt_num_types; t++) {
        struct mt_type *ty = &mt_types[t];
        if (ty->ct == CT_BF16)
            ty->dt = twohop_type_bfloat16();
        if (ty->ct == CT_F16)
            ty->dt = twohop_type_float16();
        if (t >= first) {
            if (ty->layout == L_VECTOR) {
                MPI_Type_vector(2, 1, 2, d[t - first].base, &ty->dt);
            } else {
                MPI_Type_contiguous(d[t - first].dcount, d[t - first].base, &ty->dt);
            }
            MPI_Type_commit(&ty->dt);
        }
        size_t bsz = mt_ctype_size(ty->ct);
        ty->extent = ty->layout == L_VECTOR ? 3 * bsz : (size_t)ty->nb * bsz;
        MPI_Aint lb, extent;
        MPI_Type_get_extent(ty->dt, &lb, &extent);
        if (lb != 0 || (size_t)extent != ty->extent) {
            fprintf(stderr, "allreduce_matrix: %s: MPI extent %ld, lb %ld, test expects %zu\n",
                    ty->name, (long)extent, (long)lb, ty->extent);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

void mt_types_fini(void) {
    for (int t = first_derived; t < mt_num_types; t++) {
        MPI_Type_free(&mt_types[t].dt);
    }
    MPI_Op_free(&op_handles[O_USER_SUM]);
    MPI_Op_free(&op_handles[O_USER_MAT]);
}

/* ---------------------------------------------------------------- input patterns */

/* splitmix64 finalizer. */
static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Pseudo-random bits of (rank, index, salt). */
static inline uint64_t hbits(int rank, size_t i, unsigned salt) {
    return mix(((uint64_t)(unsigned)rank << 40) ^ (uint64_t)i ^ ((uint64_t)salt << 58) ^
               0x9e3779b97f4a7c15ull);
}

/*
 * Integer input: returns the value as uint64 (two's complement for signed types; the caller
 * converts to the C type). Values keep SUM and PROD of signed types inside the range for
 * communicators of up to 127 ranks; unsigned types may wrap, which the reference reproduces.
 */
static inline uint64_t ipat(int op, bool sgn, int bits, int rank, int p, size_t i) {
    uint64_t h = hbits(rank, i, (unsigned)op);
    switch (op) {
    case O_SUM:
    case O_USER_SUM: {
        int64_t small = (int64_t)(((size_t)rank * 7 + i * 3) % 11);
        if (sgn) {
            int64_t s = p <= 16 ? small - 5 : small % 3 - 1;
            int64_t v = bits > 8 ? s * ((int64_t)1 << (bits - 8)) + (int64_t)((rank + i) % 3) : s;
            return (uint64_t)v;
        }
        return (uint64_t)small + (i % 4 == 0 ? (uint64_t)(rank + 1) << (bits - 3) : 0);
    }
    case O_PROD: {
        if (i % 17 == 5 && rank == p - 1) {
            return 0;
        }
        bool big = (size_t)rank == i % (size_t)p;
        if (sgn) {
            int64_t v = big ? 2 : 1;
            return (uint64_t)((rank + i) % 3 == 0 ? -v : v);
        }
        return big ? 3 : 1;
    }
    case O_MIN:
    case O_MAX:
        if (i % 4 == 0) {
            int64_t v = (int64_t)(((size_t)rank * 5 + i * 3) % 9);
            return (uint64_t)(sgn ? v - 4 : v);
        }
        return h;
    case O_LAND:
    case O_LOR:
    case O_LXOR: {
        if (h % (2 + i % 7) == 0) {
            return 0;
        }
        int64_t v = 1 + (int64_t)((h >> 16) % 100);
        return (uint64_t)(sgn && (h >> 40) & 1 ? -v : v);
    }
    case O_BAND:
        return h | hbits(rank, i, 31);
    case O_BOR:
        return h & hbits(rank, i, 30) & hbits(rank, i, 29);
    default: /* O_BXOR */
        return h;
    }
}

/* Floating-point input (exact in float): see the header comment for the patterns. */
static inline double fpat(int op, int rank, int p, size_t i) {
    uint64_t h = hbits(rank, i, (unsigned)op + 7);
    switch (op) {
    case O_SUM:
    case O_USER_SUM: {
        double v = (double)(((size_t)rank * 7 + i * 3) % 11) - 5 + 0.5 * (double)((rank + i) % 2);
        static const double scale[5] = {0.25, 0.5, 1, 2, 4};
        return v * scale[i % 5];
    }
    case O_PROD: {
        if (i % 17 == 5 && rank == p - 1) {
            return 0;
        }
        static const double mag[3] = {0.5, 1, 2};
        double v = mag[((size_t)rank + 2 * i) % 3];
        return (h & 1) ? -v : v;
    }
    default: /* MIN, MAX, MINLOC, MAXLOC */
        if (i % 4 == 0) {
            return (double)(((size_t)rank * 5 + i * 3) % 9) - 4;
        }
        return (double)(int32_t)h * 0x1p-10;
    }
}

/* ---------------------------------------------------------------- kernels per C type */

#define DEF_INT(CT, T, SGN)                                                                        \
    static void gen_##CT(int op, int rank, int p, size_t off, size_t n, void *out) {               \
        T *o = out;                                                                                \
        for (size_t k = 0; k < n; k++) {                                                           \
            o[k] = (T)ipat(op, SGN, (int)(8 * sizeof(T)), rank, p, off + k);                       \
        }                                                                                          \
    }                                                                                              \
    static void comb_##CT(int op, void *accv, const void *inv, size_t n) {                         \
        T *a = accv;                                                                               \
        const T *b = inv;                                                                          \
        for (size_t k = 0; k < n; k++) {                                                           \
            switch (op) {                                                                          \
            case O_SUM:                                                                            \
            case O_USER_SUM:                                                                       \
                a[k] = (T)(a[k] + b[k]);                                                           \
                break;                                                                             \
            case O_PROD:                                                                           \
                a[k] = (T)(a[k] * b[k]);                                                           \
                break;                                                                             \
            case O_MIN:                                                                            \
                a[k] = b[k] < a[k] ? b[k] : a[k];                                                  \
                break;                                                                             \
            case O_MAX:                                                                            \
                a[k] = b[k] > a[k] ? b[k] : a[k];                                                  \
                break;                                                                             \
            case O_LAND:                                                                           \
                a[k] = (T)(a[k] && b[k]);                                                          \
                break;                                                                             \
            case O_LOR:                                                                            \
                a[k] = (T)(a[k] || b[k]);                                                          \
                break;                                                                             \
            case O_LXOR:                                                                           \
                a[k] = (T)(!a[k] != !b[k]);                                                        \
                break;                                                                             \
            case O_BAND:                                                                           \
                a[k] = (T)(a[k] & b[k]);                                                           \
                break;                                                                             \
            case O_BOR:                                                                            \
                a[k] = (T)(a[k] | b[k]);                                                           \
                break;                                                                             \
            default:                                                                               \
                a[k] = (T)(a[k] ^ b[k]);                                                           \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static size_t cmp_##CT(const void *gv, const void *wv, size_t n, char *msg, size_t len) {      \
        const T *g = gv, *w = wv;                                                                  \
        for (size_t k = 0; k < n; k++) {                                                           \
            if (g[k] != w[k]) {                                                                    \
                if (SGN) {                                                                         \
                    snprintf(msg, len, "got %lld want %lld", (long long)g[k], (long long)w[k]);    \
                } else {                                                                           \
                    snprintf(msg, len, "got %llu want %llu", (unsigned long long)g[k],             \
                             (unsigned long long)w[k]);                                            \
                }                                                                                  \
                return k;                                                                          \
            }                                                                                      \
        }                                                                                          \
        return (size_t)-1;                                                                         \
    }

DEF_INT(I8, int8_t, true)
DEF_INT(U8, uint8_t, false)
DEF_INT(I16, int16_t, true)
DEF_INT(U16, uint16_t, false)
DEF_INT(I32, int32_t, true)
DEF_INT(U32, uint32_t, false)
DEF_INT(I64, int64_t, true)
DEF_INT(U64, uint64_t, false)
DEF_INT(BYTE, unsigned char, false)

#define DEF_FLT(CT, T)                                                                             \
    static void gen_##CT(int op, int rank, int p, size_t off, size_t n, void *out) {               \
        T *o = out;                                                                                \
        for (size_t k = 0; k < n; k++) {                                                           \
            o[k] = (T)fpat(op, rank, p, off + k);                                                  \
        }                                                                                          \
    }                                                                                              \
    static void comb_##CT(int op, void *accv, const void *inv, size_t n) {                         \
        T *a = accv;                                                                               \
        const T *b = inv;                                                                          \
        for (size_t k = 0; k < n; k++) {                                                           \
            switch (op) {                                                                          \
            case O_SUM:                                                                            \
            case O_USER_SUM:                                                                       \
                a[k] = a[k] + b[k];                                                                \
                break;                                                                             \
            case O_PROD:                                                                           \
                a[k] = a[k] * b[k];                                                                \
                break;                                                                             \
            case O_MIN:                                                                            \
                a[k] = b[k] < a[k] ? b[k] : a[k];                                                  \
                break;                                                                             \
            default:                                                                               \
                a[k] = b[k] > a[k] ? b[k] : a[k];                                                  \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static size_t cmp_##CT(const void *gv, const void *wv, size_t n, char *msg, size_t len) {      \
        const T *g = gv, *w = wv;                                                                  \
        for (size_t k = 0; k < n; k++) {                                                           \
            if (g[k] != w[k]) {                                                                    \
                snprintf(msg, len, "got %.21Lg want %.21Lg", (long double)g[k],                    \
                         (long double)w[k]);                                                       \
                return k;                                                                          \
            }                                                                                      \
        }                                                                                          \
        return (size_t)-1;                                                                         \
    }

DEF_FLT(FLOAT, float)
DEF_FLT(DOUBLE, double)
DEF_FLT(LDOUBLE, long double)

#define DEF_CPLX(CT, T, R)                                                                         \
    static void gen_##CT(int op, int rank, int p, size_t off, size_t n, void *out) {               \
        T *o = out;                                                                                \
        for (size_t k = 0; k < n; k++) {                                                           \
            size_t i = off + k;                                                                    \
            R re, im;                                                                              \
            if (op == O_SUM) {                                                                     \
                re = (R)fpat(O_SUM, rank, p, i);                                                   \
                im = (R)fpat(O_SUM, rank + 3, p, i + 1);                                           \
            } else { /* PROD: a unit 1, i, -1, -i; one rank per index scaled by 2 */               \
                static const R ur[4] = {1, 0, -1, 0}, ui[4] = {0, 1, 0, -1};                       \
                R s = (size_t)rank == i % (size_t)p ? 2 : 1;                                       \
                re = s * ur[((size_t)rank * 3 + i) % 4];                                           \
                im = s * ui[((size_t)rank * 3 + i) % 4];                                           \
            }                                                                                      \
            R *parts = (R *)&o[k];                                                                 \
            parts[0] = re;                                                                         \
            parts[1] = im;                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void comb_##CT(int op, void *accv, const void *inv, size_t n) {                         \
        T *a = accv;                                                                               \
        const T *b = inv;                                                                          \
        for (size_t k = 0; k < n; k++) {                                                           \
            a[k] = op == O_SUM ? a[k] + b[k] : a[k] * b[k];                                        \
        }                                                                                          \
    }                                                                                              \
    static size_t cmp_##CT(const void *gv, const void *wv, size_t n, char *msg, size_t len) {      \
        const R *g = gv, *w = wv;                                                                  \
        for (size_t k = 0; k < 2 * n; k += 2) {                                                    \
            if (g[k] != w[k] || g[k + 1] != w[k + 1]) {                                            \
                snprintf(msg, len, "got (%Lg,%Lg) want (%Lg,%Lg)", (long double)g[k],              \
                         (long double)g[k + 1], (long double)w[k], (long double)w[k + 1]);         \
                return k / 2;                                                                      \
            }                                                                                      \
        }                                                                                          \
        return (size_t)-1;                                                                         \
    }

DEF_CPLX(CFLOAT, float complex, float)
DEF_CPLX(CDOUBLE, double complex, double)
DEF_CPLX(CLDOUBLE, long double complex, long double)

#define DEF_PAIR(CT, S, VT)                                                                        \
    static void gen_##CT(int op, int rank, int p, size_t off, size_t n, void *out) {               \
        S *o = out;                                                                                \
        for (size_t k = 0; k < n; k++) {                                                           \
            size_t i = off + k;                                                                    \
            double v = i % 4 == 3 ? (double)(int16_t)hbits(rank, i, 40)                            \
                                  : (double)(((size_t)rank * 3 + i) % 4) - 1;                      \
            (void)op;                                                                              \
            o[k].v = (VT)v;                                                                        \
            o[k].i = (p - 1 - rank) * 2 + (int)(i & 1); /* ties: highest rank has lowest */        \
        }                                                                                          \
    }                                                                                              \
    static void comb_##CT(int op, void *accv, const void *inv, size_t n) {                         \
        S *a = accv;                                                                               \
        const S *b = inv;                                                                          \
        for (size_t k = 0; k < n; k++) {                                                           \
            bool better = op == O_MINLOC ? b[k].v < a[k].v : b[k].v > a[k].v;                      \
            if (better) {                                                                          \
                a[k] = b[k];                                                                       \
            } else if (b[k].v == a[k].v && b[k].i < a[k].i) {                                      \
                a[k].i = b[k].i;                                                                   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static size_t cmp_##CT(const void *gv, const void *wv, size_t n, char *msg, size_t len) {      \
        const S *g = gv, *w = wv;                                                                  \
        for (size_t k = 0; k < n; k++) {                                                           \
            if (g[k].v != w[k].v || g[k].i != w[k].i) {                                            \
                snprintf(msg, len, "got (%Lg,%d) want (%Lg,%d)", (long double)g[k].v, g[k].i,      \
                         (long double)w[k].v, w[k].i);                                             \
                return k;                                                                          \
            }                                                                                      \
        }                                                                                          \
        return (size_t)-1;                                                                         \
    }

DEF_PAIR(FLOAT_INT, struct float_int, float)
DEF_PAIR(DOUBLE_INT, struct double_int, double)
DEF_PAIR(LONG_INT, struct long_int, long)
DEF_PAIR(2INT, struct two_int, int)
DEF_PAIR(SHORT_INT, struct short_int, short)
DEF_PAIR(LDOUBLE_INT, struct ldouble_int, long double)

/* _Bool: logical ops only. */
static void gen_BOOL(int op, int rank, int p, size_t off, size_t n, void *out) {
    _Bool *o = out;
    for (size_t k = 0; k < n; k++) {
        o[k] = ipat(op, false, 8, rank, p, off + k) != 0;
    }
}

static void comb_BOOL(int op, void *accv, const void *inv, size_t n) {
    _Bool *a = accv;
    const _Bool *b = inv;
    for (size_t k = 0; k < n; k++) {
        a[k] = op == O_LAND ? a[k] && b[k] : op == O_LOR ? a[k] || b[k] : a[k] != b[k];
    }
}

static size_t cmp_BOOL(const void *gv, const void *wv, size_t n, char *msg, size_t len) {
    const unsigned char *g = gv, *w = wv; /* compare the bytes: a _Bool must be 0 or 1 */
    for (size_t k = 0; k < n; k++) {
        if (g[k] != w[k]) {
            snprintf(msg, len, "got %u want %u", g[k], w[k]);
            return k;
        }
    }
    return (size_t)-1;
}

/* 2x2 matrices for the non-commutative user op. */
static void gen_MAT2(int op, int rank, int p, size_t off, size_t n, void *out) {
    (void)op;
    (void)p;
    struct mat2 *o = out;
    for (size_t k = 0; k < n; k++) {
        uint64_t h = hbits(rank, off + k, 50);
        o[k].m[0] = 1 + (uint32_t)(h % 3);
        o[k].m[1] = (uint32_t)((h >> 8) % 4);
        o[k].m[2] = (uint32_t)((h >> 16) % 4);
        o[k].m[3] = 1 + (uint32_t)((h >> 24) % 3);
    }
}

static void comb_MAT2(int op, void *accv, const void *inv, size_t n) {
    (void)op;
    struct mat2 *a = accv;
    const struct mat2 *b = inv;
    for (size_t k = 0; k < n; k++) {
        a[k] = mat_mul(a[k], b[k]); /* acc holds ranks 0..r-1: left factor */
    }
}

static size_t cmp_MAT2(const void *gv, const void *wv, size_t n, char *msg, size_t len) {
    const struct mat2 *g = gv, *w = wv;
    for (size_t k = 0; k < n; k++) {
        if (memcmp(&g[k], &w[k], sizeof g[k]) != 0) {
            snprintf(msg, len, "got [%u %u; %u %u] want [%u %u; %u %u]", g[k].m[0], g[k].m[1],
                     g[k].m[2], g[k].m[3], w[k].m[0], w[k].m[1], w[k].m[2], w[k].m[3]);
            return k;
        }
    }
    return (size_t)-1;
}

/*
 * bfloat16 and binary16 (bit patterns; arithmetic of include/twohop_half_math.h, which twohop's
 * kernels and the ops' host functions compute too). The inputs keep every partial result
 * exact in the type whatever the order of combination: SUM adds integers in [-4, 4] times one
 * power of two per index (partial sums stay below 2^8 for up to 32 ranks: exact in bfloat16's
 * 8 significant bits), PROD multiplies +-1 with one factor of +-2 or +-0.5 per index and
 * zeros, MIN and MAX pick among values with no -0. So the reference's rank order gives the
 * result twohop must return, bit for bit.
 */
static uint16_t half_from_double(bool bf, double v) {
    return bf ? twohop_f32_to_bf16((float)v) : twohop_f32_to_f16((float)v);
}

static double hpat(int op, int rank, int p, size_t i) {
    uint64_t h = hbits(rank, i, (unsigned)op + 11);
    switch (op) {
    case O_SUM: {
        static const double scale[4] = {0.25, 1, 4, 64};
        return ((double)(((size_t)rank * 7 + i * 3) % 9) - 4) * scale[i % 4];
    }
    case O_PROD: {
        if (i % 17 == 5 && rank == p - 1) {
            return 0;
        }
        double v = (size_t)rank == i % (size_t)p ? ((i / (size_t)p) % 2 ? 2 : 0.5) : 1;
        return (h & 1) ? -v : v;
    }
    default: /* MIN, MAX */
        if (i % 4 == 0) {
            return (double)(((size_t)rank * 5 + i * 3) % 9) - 4;
        }
        return (double)(int16_t)h * 0x1p-6;
    }
}

#define DEF_HALF(CT, BF)                                                                           \
    static void gen_##CT(int op, int rank, int p, size_t off, size_t n, void *out) {               \
        uint16_t *o = out;                                                                         \
        for (size_t k = 0; k < n; k++) {                                                           \
            o[k] = half_from_double(BF, hpat(op, rank, p, off + k));                               \
        }                                                                                          \
    }                                                                                              \
    static void comb_##CT(int op, void *accv, const void *inv, size_t n) {                         \
        uint16_t *a = accv;                                                                        \
        const uint16_t *b = inv;                                                                   \
        const int hop = op == O_SUM ? 0 : op == O_PROD ? 1 : op == O_MAX ? 2 : 3;                  \
        for (size_t k = 0; k < n; k++) {                                                           \
            a[k] =                                                                                 \
                BF ? twohop_bf16_combine(hop, a[k], b[k]) : twohop_f16_combine(hop, a[k], b[k]);   \
        }                                                                                          \
    }                                                                                              \
    static size_t cmp_##CT(const void *gv, const void *wv, size_t n, char *msg, size_t len) {      \
        const uint16_t *g = gv, *w = wv;                                                           \
        for (size_t k = 0; k < n; k++) {                                                           \
            const float gf = BF ? twohop_bf16_to_f32(g[k]) : twohop_f16_to_f32(g[k]);              \
            const float wf = BF ? twohop_bf16_to_f32(w[k]) : twohop_f16_to_f32(w[k]);              \
            if (!(gf == wf)) {                                                                     \
                snprintf(msg, len, "got %g (0x%04x) want %g (0x%04x)", (double)gf, g[k],           \
                         (double)wf, w[k]);                                                        \
                return k;                                                                          \
            }                                                                                      \
        }                                                                                          \
        return (size_t)-1;                                                                         \
    }

DEF_HALF(BF16, true)
DEF_HALF(F16, false)

/* ---------------------------------------------------------------- dispatch */

typedef void (*gen_fn)(int, int, int, size_t, size_t, void *);
typedef void (*comb_fn)(int, void *, const void *, size_t);
typedef size_t (*cmp_fn)(const void *, const void *, size_t, char *, size_t);

#define ROW(CT)                                                                                    \
    { gen_##CT, comb_##CT, cmp_##CT }
static const struct {
    gen_fn gen;
    comb_fn comb;
    cmp_fn cmp;
} kernels[CT_NUM] = {ROW(I8),        ROW(U8),          ROW(I16),        ROW(U16),      ROW(I32),
                     ROW(U32),       ROW(I64),         ROW(U64),        ROW(FLOAT),    ROW(DOUBLE),
                     ROW(LDOUBLE),   ROW(BOOL),        ROW(BYTE),       ROW(CFLOAT),   ROW(CDOUBLE),
                     ROW(CLDOUBLE),  ROW(FLOAT_INT),   ROW(DOUBLE_INT), ROW(LONG_INT), ROW(2INT),
                     ROW(SHORT_INT), ROW(LDOUBLE_INT), ROW(MAT2),       ROW(BF16),     ROW(F16)};

void mt_gen(enum mt_ctype ct, int op, int rank, int p, size_t off, size_t n, void *out) {
    kernels[ct].gen(op, rank, p, off, n, out);
}

void mt_combine(enum mt_ctype ct, int op, void *acc, const void *in, size_t n) {
    kernels[ct].comb(op, acc, in, n);
}

size_t mt_compare(enum mt_ctype ct, const void *got, const void *want, size_t n, char *msg,
                  size_t msg_len) {
    return kernels[ct].cmp(got, want, n, msg, msg_len);
}

/* A run of significant bytes inside one element. */
struct sig_range {
    unsigned char off, len;
};

/* Significant byte ranges of one element of ct; *nr = 0 means every byte is significant. */
static const struct sig_range *sig_ranges(enum mt_ctype ct, size_t *nr) {
    static const struct sig_range ld[] = {{0, 10}}, cld[] = {{0, 10}, {sizeof(long double), 10}},
                                  di[] = {{0, 8}, {offsetof(struct double_int, i), 4}},
                                  li[] = {{0, sizeof(long)}, {offsetof(struct long_int, i), 4}},
                                  si[] = {{0, 2}, {offsetof(struct short_int, i), 4}},
                                  ldi[] = {{0, 10}, {offsetof(struct ldouble_int, i), 4}};
    *nr = 2;
    switch (ct) {
    case CT_LDOUBLE:
        *nr = 1;
        return ld;
    case CT_CLDOUBLE:
        return cld;
    case CT_DOUBLE_INT:
        return di;
    case CT_LONG_INT:
        return li;
    case CT_SHORT_INT:
        return si;
    case CT_LDOUBLE_INT:
        return ldi;
    default:
        *nr = 0;
        return NULL;
    }
}

size_t mt_sig_pack(enum mt_ctype ct, const void *in, size_t n, unsigned char *out) {
    size_t nr, esz = mt_ctype_size(ct);
    const struct sig_range *r = sig_ranges(ct, &nr);
    if (nr == 0) {
        memcpy(out, in, n * esz);
        return n * esz;
    }
    const unsigned char *src = in;
    size_t w = 0;
    for (size_t k = 0; k < n; k++) {
        for (size_t j = 0; j < nr; j++) {
            memcpy(out + w, src + k * esz + r[j].off, r[j].len);
            w += r[j].len;
        }
    }
    return w;
}

uint64_t mt_hash(const void *p, size_t len, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = mix(seed ^ len);
    size_t k = 0;
    for (; k + 8 <= len; k += 8) {
        uint64_t w;
        memcpy(&w, b + k, 8);
        h = (h ^ mix(w + k)) * 0x100000001b3ull;
    }
    uint64_t tail = 0;
    memcpy(&tail, b + k, len - k);
    return mix(h ^ tail ^ (len - k) << 56);
}
