/*
 * The datatype x op table of allreduce_matrix and its exact reference arithmetic.
 *
 * Inputs are deterministic functions of (communicator rank, element index, op) chosen so every
 * result is exact in its type: small integers in floating types, PROD over {+-1, +-2, 0.5, 0},
 * complex PROD over the units {1, i, -1, -i} (one factor scaled by 2), MINLOC/MAXLOC with ties
 * (the lowest index must win). The reference is this file's own arithmetic, never Open MPI's.
 */
#ifndef MATRIX_TYPES_H
#define MATRIX_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

/* Operations. O_USER_SUM is a commutative user op; O_USER_MAT a non-commutative one. */
enum mt_op {
    O_SUM,
    O_PROD,
    O_MIN,
    O_MAX,
    O_LAND,
    O_LOR,
    O_LXOR,
    O_BAND,
    O_BOR,
    O_BXOR,
    O_MINLOC,
    O_MAXLOC,
    O_USER_SUM,
    O_USER_MAT,
    O_NUM
};

/* C element types the reference arithmetic knows. */
enum mt_ctype {
    CT_I8,
    CT_U8,
    CT_I16,
    CT_U16,
    CT_I32,
    CT_U32,
    CT_I64,
    CT_U64,
    CT_FLOAT,
    CT_DOUBLE,
    CT_LDOUBLE,
    CT_BOOL,
    CT_BYTE,
    CT_CFLOAT,
    CT_CDOUBLE,
    CT_CLDOUBLE,
    CT_FLOAT_INT,
    CT_DOUBLE_INT,
    CT_LONG_INT,
    CT_2INT,
    CT_SHORT_INT,
    CT_LDOUBLE_INT,
    CT_MAT2, /* 2x2 matrix of uint32, for the non-commutative user op */
    CT_BF16, /* bfloat16 bits (twohop_type_bfloat16(), include/twohop_half.h) */
    CT_F16,  /* IEEE binary16 bits (twohop_type_float16()) */
    CT_NUM
};

/* Memory layout of one MPI element. */
enum mt_layout {
    L_PACKED, /* nb base elements back to back */
    L_VECTOR  /* MPI_Type_vector(2, 1, 2, base): base at slots 0 and 2 of 3, slot 1 a gap */
};

/* One datatype of the matrix. */
struct mt_type {
    const char *name;
    MPI_Datatype dt;  /* filled by mt_types_init for derived types */
    enum mt_ctype ct; /* base C type */
    int nb;           /* base elements per MPI element */
    enum mt_layout layout;
    unsigned ops;       /* bitmask (1u << enum mt_op) of ops the matrix runs */
    bool must_fallback; /* twohop must hand every call with this datatype back */
    size_t extent;      /* bytes of one MPI element (checked against MPI_Type_get_extent) */
};

extern struct mt_type mt_types[];
extern const int mt_num_types;

/* Name ("MPI_SUM", "user_sum", ...) and MPI handle of an op (valid after mt_types_init). */
const char *mt_op_name(int op);
MPI_Op mt_op_handle(int op);

/* The handle to call with on mt_types[t]: mt_op_handle(op), or for the half-precision types the
 * matching op of include/twohop_half.h (predefined ops are not defined on them). */
MPI_Op mt_op_for_type(int t, int op);

/* Whether twohop must fall back for this op (non-commutative user op). */
bool mt_op_must_fallback(int op);

/*
 * Creates the derived datatypes and user ops and checks every extent against MPI. Returns 0, or
 * -1 after printing what is wrong (on every rank).
 */
int mt_types_init(void);

/* Frees what mt_types_init created. */
void mt_types_fini(void);

/* Size in bytes of one base element of ct. */
size_t mt_ctype_size(enum mt_ctype ct);

/* Fills n base elements [off, off+n) of rank `rank`'s input (communicator of size p). */
void mt_gen(enum mt_ctype ct, int op, int rank, int p, size_t off, size_t n, void *out);

/* acc[k] = acc[k] op in[k] for n base elements (acc holds the lower ranks). */
void mt_combine(enum mt_ctype ct, int op, void *acc, const void *in, size_t n);

/*
 * Compares n base elements by value (so -0.0 == +0.0). Returns the first mismatching index or
 * (size_t)-1; on a mismatch writes "got X want Y" to msg.
 */
size_t mt_compare(enum mt_ctype ct, const void *got, const void *want, size_t n, char *msg,
                  size_t msg_len);

/*
 * Copies the significant bytes of n base elements (no padding: 10 of the 16 bytes of a long
 * double, the fields of pair structs) to out; returns the bytes written. out must hold
 * n * mt_ctype_size(ct) bytes.
 */
size_t mt_sig_pack(enum mt_ctype ct, const void *in, size_t n, unsigned char *out);

/* 64-bit hash of a byte string (word-wise multiply-xor; not cryptographic). */
uint64_t mt_hash(const void *p, size_t len, uint64_t seed);

#endif
