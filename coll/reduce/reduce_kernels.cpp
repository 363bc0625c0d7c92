/*
 * The host kernel table: one entry per (element type, op) pair that MPI allows
 * (MPI-4.1 section 6.9.2: C integer, floating point, logical, complex, byte, pair types).
 * The loops are plain and alias-checked by the compiler, so they vectorize at -O2/-O3.
 */
#include "reduce_kernels.h"

#include <cstdint>

#include "half_kernels.h"
#include "reduce_ops.h"

namespace twohop {
namespace {

template <typename T, typename Op>
void kernel(const void *a_, const void *b_, void *out_, std::size_t n) {
    const T *a = static_cast<const T *>(a_);
    const T *b = static_cast<const T *>(b_);
    T *out = static_cast<T *>(out_);
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = Op::apply(a[i], b[i]);
    }
}

/* SUM, PROD, MAX, MIN: C integer and floating-point types. */
template <typename T> KernelFn arithmetic(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_SUM: return kernel<T, OpSum>;
    case TWOHOP_OP_PROD: return kernel<T, OpProd>;
    case TWOHOP_OP_MAX: return kernel<T, OpMax>;
    case TWOHOP_OP_MIN: return kernel<T, OpMin>;
    default: return nullptr;
    }
}

/* LAND, LOR, LXOR: C integer and logical types. */
template <typename T> KernelFn logical(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_LAND: return kernel<T, OpLand>;
    case TWOHOP_OP_LOR: return kernel<T, OpLor>;
    case TWOHOP_OP_LXOR: return kernel<T, OpLxor>;
    default: return nullptr;
    }
}

template <typename T> KernelFn bitwise(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_BAND: return kernel<T, OpBand>;
    case TWOHOP_OP_BOR: return kernel<T, OpBor>;
    case TWOHOP_OP_BXOR: return kernel<T, OpBxor>;
    default: return nullptr;
    }
}

template <typename T> KernelFn integer(twohop_op op) {
    KernelFn k = bitwise<T>(op);
    if (!k) k = logical<T>(op);
    return k ? k : arithmetic<T>(op);
}

template <typename T> KernelFn complex(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_SUM: return kernel<Complex<T>, OpSum>;
    case TWOHOP_OP_PROD: return kernel<Complex<T>, OpProd>;
    default: return nullptr;
    }
}

template <typename V> KernelFn pair(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_MAXLOC: return kernel<ValueIndex<V>, OpMaxloc>;
    case TWOHOP_OP_MINLOC: return kernel<ValueIndex<V>, OpMinloc>;
    default: return nullptr;
    }
}

} // namespace

KernelFn find_kernel(twohop_dtype t, twohop_op op) {
    switch (t) {
    case TWOHOP_I8: return integer<int8_t>(op);
    case TWOHOP_U8: return integer<uint8_t>(op);
    case TWOHOP_I16: return integer<int16_t>(op);
    case TWOHOP_U16: return integer<uint16_t>(op);
    case TWOHOP_I32: return integer<int32_t>(op);
    case TWOHOP_U32: return integer<uint32_t>(op);
    case TWOHOP_I64: return integer<int64_t>(op);
    case TWOHOP_U64: return integer<uint64_t>(op);
    case TWOHOP_F32: return arithmetic<float>(op);
    case TWOHOP_F64: return arithmetic<double>(op);
    case TWOHOP_LDBL: return arithmetic<long double>(op);
    case TWOHOP_BOOL: return logical<bool>(op);
    case TWOHOP_BYTE: return bitwise<uint8_t>(op);
    case TWOHOP_C32: return complex<float>(op);
    case TWOHOP_C64: return complex<double>(op);
    case TWOHOP_CLDBL: return complex<long double>(op);
    case TWOHOP_FLOAT_INT: return pair<float>(op);
    case TWOHOP_DOUBLE_INT: return pair<double>(op);
    case TWOHOP_LONG_INT: return pair<long>(op);
    case TWOHOP_2INT: return pair<int>(op);
    case TWOHOP_SHORT_INT: return pair<short>(op);
    case TWOHOP_LONG_DOUBLE_INT: return pair<long double>(op);
    case TWOHOP_BF16:
    case TWOHOP_F16: {
        /* the CPU's vector extensions where present (same bits: half_kernels.h) */
        KernelFn k = half_kernel_avx2(t, op);
        return k ? k : half_kernel_portable(t, op);
    }
    default: return nullptr;
    }
}

} // namespace twohop

extern "C" {

size_t twohop_dtype_size(twohop_dtype t) {
    using namespace twohop;
    static const size_t sizes[TWOHOP_DTYPE_COUNT] = {
        1, 1, 2, 2, 4, 4, 8, 8, sizeof(float), sizeof(double), sizeof(long double), sizeof(bool),
        1, sizeof(Complex<float>), sizeof(Complex<double>), sizeof(Complex<long double>),
        sizeof(ValueIndex<float>), sizeof(ValueIndex<double>), sizeof(ValueIndex<long>),
        sizeof(ValueIndex<int>), sizeof(ValueIndex<short>), sizeof(ValueIndex<long double>),
        sizeof(Bf16), sizeof(Fp16)};
    return (t >= 0 && t < TWOHOP_DTYPE_COUNT) ? sizes[t] : 0;
}

int twohop_kernel_supported(twohop_dtype t, twohop_op op) {
    return twohop::find_kernel(t, op) != nullptr;
}

const char *twohop_dtype_name(twohop_dtype t) {
    static const char *names[TWOHOP_DTYPE_COUNT] = {
        "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float",
        "double", "long double", "bool", "byte", "complex float", "complex double",
        "complex long double", "float_int", "double_int", "long_int", "2int", "short_int",
        "long_double_int", "bfloat16", "float16"};
    return (t >= 0 && t < TWOHOP_DTYPE_COUNT) ? names[t] : "?";
}

const char *twohop_op_name(twohop_op op) {
    static const char *names[TWOHOP_OP_COUNT] = {"sum", "prod", "max", "min", "land", "lor",
                                                 "lxor", "band", "bor", "bxor", "maxloc",
                                                 "minloc", "user"};
    return (op >= 0 && op < TWOHOP_OP_COUNT) ? names[op] : "?";
}
}
