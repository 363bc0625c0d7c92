/* MPI handles as twohop's element types and ops; the half-precision registry (mpi_handles.h). */
#include "mpi_handles.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define INT_T(ctype) (sizeof(ctype) == 8 ? TWOHOP_I64 : sizeof(ctype) == 4 ? TWOHOP_I32 : \
                      sizeof(ctype) == 2 ? TWOHOP_I16 : TWOHOP_I8)
#define UINT_T(ctype) (sizeof(ctype) == 8 ? TWOHOP_U64 : sizeof(ctype) == 4 ? TWOHOP_U32 : \
                       sizeof(ctype) == 2 ? TWOHOP_U16 : TWOHOP_U8)

/* Filled once, on first use (MPICH's handles are compile-time constants, Open MPI's are
 * addresses of its predefined objects; both are valid before MPI_Init): an open-addressing
 * hash of the handles' values, looked up on every call (a linear search of the ~50 entries
 * cost 160 instructions for MPI_FLOAT, 8% of an 8-byte call: docs/perf.md). A datatype an MPI
 * does not provide is MPI_DATATYPE_NULL and is not entered; a handle listed twice keeps its
 * first type. The answer depends on the handle's value only: a predefined handle's address
 * or constant is never that of another datatype. */
#define TYPE_SLOTS 128 /* a power of two, over twice the entries: short probe runs */
static struct {
    MPI_Datatype dt;
    int t; /* -1: empty slot */
} type_table[TYPE_SLOTS];
static pthread_once_t type_table_once = PTHREAD_ONCE_INIT;

static unsigned type_slot(MPI_Datatype d) {
    /* Fibonacci hashing (Knuth, TAOCP vol. 3, 6.4): the top 7 bits of the product. */
    return (unsigned)(((uint64_t)(uintptr_t)d * 0x9E3779B97F4A7C15ull) >> 57);
}

static void enter_type(MPI_Datatype d, int t) {
    if (d == MPI_DATATYPE_NULL) return;
    for (unsigned i = type_slot(d);; i = (i + 1) % TYPE_SLOTS) {
        if (type_table[i].t < 0) {
            type_table[i].dt = d;
            type_table[i].t = t;
            return;
        }
        if (type_table[i].dt == d) return; /* listed before: the first entry holds */
    }
}

static void build_type_table(void) {
    for (int i = 0; i < TYPE_SLOTS; ++i) type_table[i].t = -1;
#define MAP(mpi, kind) enter_type((mpi), (kind));
    MAP(MPI_CHAR, TWOHOP_I8) MAP(MPI_SIGNED_CHAR, TWOHOP_I8) MAP(MPI_UNSIGNED_CHAR, TWOHOP_U8)
    MAP(MPI_BYTE, TWOHOP_BYTE) MAP(MPI_SHORT, TWOHOP_I16) MAP(MPI_UNSIGNED_SHORT, TWOHOP_U16)
    MAP(MPI_INT, TWOHOP_I32) MAP(MPI_UNSIGNED, TWOHOP_U32) MAP(MPI_LONG, INT_T(long))
    MAP(MPI_UNSIGNED_LONG, UINT_T(unsigned long)) MAP(MPI_LONG_LONG_INT, TWOHOP_I64)
    MAP(MPI_UNSIGNED_LONG_LONG, TWOHOP_U64) MAP(MPI_INT8_T, TWOHOP_I8)
    MAP(MPI_UINT8_T, TWOHOP_U8) MAP(MPI_INT16_T, TWOHOP_I16) MAP(MPI_UINT16_T, TWOHOP_U16)
    MAP(MPI_INT32_T, TWOHOP_I32) MAP(MPI_UINT32_T, TWOHOP_U32) MAP(MPI_INT64_T, TWOHOP_I64)
    MAP(MPI_UINT64_T, TWOHOP_U64) MAP(MPI_AINT, INT_T(MPI_Aint))
    MAP(MPI_OFFSET, INT_T(MPI_Offset)) MAP(MPI_COUNT, INT_T(MPI_Count))
    MAP(MPI_FLOAT, TWOHOP_F32) MAP(MPI_DOUBLE, TWOHOP_F64) MAP(MPI_LONG_DOUBLE, TWOHOP_LDBL)
    MAP(MPI_C_BOOL, TWOHOP_BOOL) MAP(MPI_CXX_BOOL, TWOHOP_BOOL)
    MAP(MPI_C_FLOAT_COMPLEX, TWOHOP_C32) MAP(MPI_C_DOUBLE_COMPLEX, TWOHOP_C64)
    MAP(MPI_C_LONG_DOUBLE_COMPLEX, TWOHOP_CLDBL) MAP(MPI_CXX_FLOAT_COMPLEX, TWOHOP_C32)
    MAP(MPI_CXX_DOUBLE_COMPLEX, TWOHOP_C64) MAP(MPI_CXX_LONG_DOUBLE_COMPLEX, TWOHOP_CLDBL)
    MAP(MPI_FLOAT_INT, TWOHOP_FLOAT_INT) MAP(MPI_DOUBLE_INT, TWOHOP_DOUBLE_INT)
    MAP(MPI_LONG_INT, TWOHOP_LONG_INT) MAP(MPI_2INT, TWOHOP_2INT)
    MAP(MPI_SHORT_INT, TWOHOP_SHORT_INT) MAP(MPI_LONG_DOUBLE_INT, TWOHOP_LONG_DOUBLE_INT)
    MAP(MPI_INTEGER, TWOHOP_I32) MAP(MPI_REAL, TWOHOP_F32)
    MAP(MPI_DOUBLE_PRECISION, TWOHOP_F64) MAP(MPI_COMPLEX, TWOHOP_C32)
    MAP(MPI_DOUBLE_COMPLEX, TWOHOP_C64) MAP(MPI_2INTEGER, TWOHOP_2INT)
#ifdef MPIX_C_FLOAT16 /* MPICH; Open MPI with the shortfloat extension */
    MAP(MPIX_C_FLOAT16, TWOHOP_F16)
#endif
#ifdef MPIX_BFLOAT16 /* MPICH 5.0 */
    MAP(MPIX_BFLOAT16, TWOHOP_BF16)
#endif
#undef MAP
}

int twohop_mpi_map_type(MPI_Datatype d) {
    if (d == MPI_DATATYPE_NULL) return -1;
    (void)pthread_once(&type_table_once, build_type_table);
    for (unsigned i = type_slot(d); type_table[i].t >= 0; i = (i + 1) % TYPE_SLOTS) {
        if (type_table[i].dt == d) return type_table[i].t;
    }
    return -1;
}

int twohop_mpi_map_op(MPI_Op op) {
    if (op == MPI_SUM) return TWOHOP_OP_SUM;
    if (op == MPI_PROD) return TWOHOP_OP_PROD;
    if (op == MPI_MAX) return TWOHOP_OP_MAX;
    if (op == MPI_MIN) return TWOHOP_OP_MIN;
    if (op == MPI_LAND) return TWOHOP_OP_LAND;
    if (op == MPI_LOR) return TWOHOP_OP_LOR;
    if (op == MPI_LXOR) return TWOHOP_OP_LXOR;
    if (op == MPI_BAND) return TWOHOP_OP_BAND;
    if (op == MPI_BOR) return TWOHOP_OP_BOR;
    if (op == MPI_BXOR) return TWOHOP_OP_BXOR;
    if (op == MPI_MAXLOC) return TWOHOP_OP_MAXLOC;
    if (op == MPI_MINLOC) return TWOHOP_OP_MINLOC;
    return -1;
}

bool twohop_mpi_op_is_predefined(MPI_Op op) {
    return twohop_mpi_map_op(op) >= 0 || op == MPI_REPLACE || op == MPI_NO_OP;
}

/* ---------------------------------------------------------- half precision ---- */

static struct {
    MPI_Datatype type;
    MPI_Op op; /* MPI_OP_NULL: a datatype entry */
    int kind;  /* 1 bfloat16, 2 binary16 */
    int half_op;
} half_table[64];
static int half_table_len; /* entries below it are complete (release / acquire) */
static pthread_mutex_t half_lock = PTHREAD_MUTEX_INITIALIZER;

int twohop_half_register(MPI_Datatype type, MPI_Op op, int kind, int half_op) {
    if ((kind != 1 && kind != 2) || half_op < -1 || half_op > 3 ||
        (op == MPI_OP_NULL) != (half_op == -1)) {
        return MPI_ERR_ARG;
    }
    const int cap = (int)(sizeof(half_table) / sizeof(half_table[0]));
    pthread_mutex_lock(&half_lock);
    const int n = __atomic_load_n(&half_table_len, __ATOMIC_ACQUIRE);
    if (n < cap) {
        half_table[n].type = type;
        half_table[n].op = op;
        half_table[n].kind = kind;
        half_table[n].half_op = half_op;
        __atomic_store_n(&half_table_len, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&half_lock);
    return n < cap ? MPI_SUCCESS : MPI_ERR_NO_MEM;
}

bool twohop_half_lookup(MPI_Datatype dtype, MPI_Op op, twohop_dtype *t, twohop_op *o) {
    static const twohop_op ops[4] = {TWOHOP_OP_SUM, TWOHOP_OP_PROD, TWOHOP_OP_MAX, TWOHOP_OP_MIN};
    const int n = __atomic_load_n(&half_table_len, __ATOMIC_ACQUIRE);
    int kind = 0;
    for (int i = 0; i < n && !kind; ++i) {
        if (half_table[i].op == MPI_OP_NULL && half_table[i].type == dtype) kind = half_table[i].kind;
    }
    for (int i = 0; kind && op != MPI_OP_NULL && i < n; ++i) { /* datatype entries: no op */
        if (half_table[i].op == op && half_table[i].kind == kind && half_table[i].half_op >= 0) {
            *t = kind == 1 ? TWOHOP_BF16 : TWOHOP_F16;
            *o = ops[half_table[i].half_op];
            return true;
        }
    }
    return false;
}
