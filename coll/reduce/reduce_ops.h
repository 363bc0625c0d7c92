/*
 * The element-wise reduction operators, as functors usable from host code and (later) from
 * CUDA kernels: Op::apply(a, b) returns a op b. One fixed operand order: `a` always comes from
 * the lower local rank / earlier ring position, which is what makes results bitwise identical
 * on every rank (see docs/design.md, "Determinism").
 *
 * Semantics follow MPI-4.1 section 6.9.2 (predefined reduction operations): logical ops yield
 * 0 or 1, MAXLOC/MINLOC keep the smaller index on ties.
 */
#ifndef TWOHOP_REDUCE_OPS_H
#define TWOHOP_REDUCE_OPS_H

#include "twohop_half_math.h"

#if defined(__CUDACC__)
#define TWOHOP_HD __host__ __device__ __forceinline__
#else
#define TWOHOP_HD inline
#endif

namespace twohop {

template <typename T> struct Complex {
    T re, im;
};

template <typename V> struct ValueIndex {
    V v;
    int i;
};

/*
 * Half-precision elements (bit patterns): every operation goes through twohop_half_math.h, the
 * arithmetic the public ops of twohop_half.h compute too (one combination: widen to binary32,
 * operate, round once to the format; MAX/MIN return an operand bit for bit).
 */
struct Bf16 {
    uint16_t bits;
};
struct Fp16 {
    uint16_t bits;
};
TWOHOP_HD Bf16 operator+(Bf16 a, Bf16 b) { return {twohop_bf16_combine(0, a.bits, b.bits)}; }
TWOHOP_HD Bf16 operator*(Bf16 a, Bf16 b) { return {twohop_bf16_combine(1, a.bits, b.bits)}; }
TWOHOP_HD bool operator>(Bf16 a, Bf16 b) { return twohop_bf16_to_f32(a.bits) > twohop_bf16_to_f32(b.bits); }
TWOHOP_HD bool operator<(Bf16 a, Bf16 b) { return twohop_bf16_to_f32(a.bits) < twohop_bf16_to_f32(b.bits); }
TWOHOP_HD Fp16 operator+(Fp16 a, Fp16 b) { return {twohop_f16_combine(0, a.bits, b.bits)}; }
TWOHOP_HD Fp16 operator*(Fp16 a, Fp16 b) { return {twohop_f16_combine(1, a.bits, b.bits)}; }
TWOHOP_HD bool operator>(Fp16 a, Fp16 b) { return twohop_f16_to_f32(a.bits) > twohop_f16_to_f32(b.bits); }
TWOHOP_HD bool operator<(Fp16 a, Fp16 b) { return twohop_f16_to_f32(a.bits) < twohop_f16_to_f32(b.bits); }

struct OpSum {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return a + b; }
    template <typename T> static TWOHOP_HD Complex<T> apply(Complex<T> a, Complex<T> b) {
        return {a.re + b.re, a.im + b.im};
    }
};
struct OpProd {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return a * b; }
    // Textbook product, no C99 Annex G NaN recovery (the same formula on every rank and device).
    template <typename T> static TWOHOP_HD Complex<T> apply(Complex<T> a, Complex<T> b) {
        return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    }
};
struct OpMax {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return b > a ? b : a; }
};
struct OpMin {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return b < a ? b : a; }
};
struct OpLand {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(a && b); }
};
struct OpLor {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(a || b); }
};
struct OpLxor {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(!a != !b); }
};
struct OpBand {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(a & b); }
};
struct OpBor {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(a | b); }
};
struct OpBxor {
    template <typename T> static TWOHOP_HD T apply(T a, T b) { return static_cast<T>(a ^ b); }
};
struct OpMaxloc {
    template <typename V> static TWOHOP_HD ValueIndex<V> apply(ValueIndex<V> a, ValueIndex<V> b) {
        if (a.v > b.v) return a;
        if (b.v > a.v) return b;
        return {a.v, a.i < b.i ? a.i : b.i};
    }
};
struct OpMinloc {
    template <typename V> static TWOHOP_HD ValueIndex<V> apply(ValueIndex<V> a, ValueIndex<V> b) {
        if (a.v < b.v) return a;
        if (b.v < a.v) return b;
        return {a.v, a.i < b.i ? a.i : b.i};
    }
};

} // namespace twohop

#endif
