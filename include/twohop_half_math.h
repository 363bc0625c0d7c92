/*
 * twohop's half-precision arithmetic, plain C (header only, no MPI, no CUDA needed): the one
 * definition the public MPI ops (twohop_half.h), the host kernels and the device kernels
 * (coll/reduce/reduce_ops.h, coll/cuda/gpu_kernels.cu) all compile, so every path computes the
 * same bits.
 *
 * Formats: bfloat16 (1 sign, 8 exponent, 7 fraction bits: the top half of an IEEE-754 binary32)
 * and IEEE-754 binary16 (1, 5, 10; "fp16"). Values are carried as uint16_t bit patterns.
 *
 * Arithmetic of one combination a op b (twohop combines two values at a time, in a fixed order:
 * docs/design.md, "Determinism"):
 *   SUM, PROD  both operands widened exactly to binary32, the operation in binary32 (IEEE, round
 *              to nearest even, subnormals kept), the result rounded once to the format (round to
 *              nearest even; overflow gives +-Inf; subnormals of the format kept)
 *   MAX, MIN   compared as binary32 values; the result is one of the operands, bit for bit
 *              (b when b > a, resp. b < a, else a: a NaN operand a is kept, a NaN b is not taken;
 *              -0 and +0 compare equal, so a is kept)
 * A NaN result of SUM or PROD is the canonical quiet NaN, 0x7fc0 (bfloat16) or 0x7e00 (binary16):
 * which operand's payload an addition propagates depends on the operand order a compiler picks
 * for a commutative operation, and GPUs return a canonical NaN, so payloads are not kept. (MAX
 * and MIN return an operand, NaN or not, unchanged.) Source of the rounding
 * methods: the IEEE-754 round-to-nearest-even rule applied to the bit patterns (bfloat16: add
 * 0x7fff plus the lowest kept bit, truncate; binary16: rebias and round the same way, and for
 * results below 2^-14 an exact binary32 addition of a power-of-two "magic" constant that leaves
 * the rounded subnormal in the low bits).
 */
#ifndef TWOHOP_HALF_MATH_H
#define TWOHOP_HALF_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TWOHOP_HALF_FN static __host__ __device__ __forceinline__
#else
#define TWOHOP_HALF_FN static inline
#endif

TWOHOP_HALF_FN uint32_t twohop_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

TWOHOP_HALF_FN float twohop_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* bfloat16 -> binary32 (exact). */
TWOHOP_HALF_FN float twohop_bf16_to_f32(uint16_t h) { return twohop_bits_f32((uint32_t)h << 16); }

/* binary32 -> bfloat16, round to nearest even; NaN -> the canonical quiet NaN 0x7fc0. */
TWOHOP_HALF_FN uint16_t twohop_f32_to_bf16(float f) {
    const uint32_t u = twohop_f32_bits(f);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
}

/* binary16 -> binary32 (exact). Written with selects, not branches, so that loops over it
 * vectorise. In device code, the GPU's conversion instruction (PTX cvt.f32.f16, exact). */
TWOHOP_HALF_FN float twohop_f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;                   /* exponent and fraction */
    uint32_t u = (em << 13) + 0x38000000u;             /* normal: rebias by 127 - 15 */
    u = em >= 0x7c00u ? u + 0x38000000u : u;           /* Inf, NaN: exponent 255 */
    /* zero or subnormal: em * 2^-24, exact in binary32 */
    const uint32_t sub = twohop_f32_bits((float)(int32_t)em * 5.9604644775390625e-08f);
    u = em < 0x0400u ? sub : u;
    return twohop_bits_f32(u | sign);
#endif
}

/* binary32 -> binary16, round to nearest even; NaN -> the canonical quiet NaN 0x7e00. With
 * selects, not branches (loops over it vectorise). In device code, the GPU's conversion
 * instruction (PTX cvt.rn.f16.f32: IEEE round to nearest even, subnormals kept, overflow to
 * +-Inf), whose canonical NaN (0x7fff) is replaced by 0x7e00. */
TWOHOP_HALF_FN uint16_t twohop_f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return (uint16_t)(f != f ? 0x7e00u : r);
#else
    uint32_t u = twohop_f32_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    /* normal binary16 (2^-14 <= |f| < 65520): rebias the exponent (-112 << 23), round */
    const uint32_t normal = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
    /* below 2^-14, subnormal or zero: |f| + 0.5 (2^-1) in binary32 rounds |f| to a multiple of
     * 2^-24, which lands in the low bits of the sum's fraction */
    const float magic = 0.5f;
    const uint32_t sub = twohop_f32_bits(twohop_bits_f32(u) + magic) - twohop_f32_bits(magic);
    uint32_t o = u < 0x38800000u ? sub : normal;
    o = u >= 0x47800000u ? 0x7c00u : o;                /* >= 2^16 or Inf (65520.. rounds up) */
    o |= sign >> 16;
    return (uint16_t)(u > 0x7f800000u ? 0x7e00u : o);  /* NaN */
#endif
}

/* One combination (see above); op: 0 sum, 1 prod, 2 max, 3 min. */
TWOHOP_HALF_FN uint16_t twohop_bf16_combine(int op, uint16_t a, uint16_t b) {
    const float x = twohop_bf16_to_f32(a), y = twohop_bf16_to_f32(b);
    switch (op) {
    case 0: return twohop_f32_to_bf16(x + y);
    case 1: return twohop_f32_to_bf16(x * y);
    case 2: return y > x ? b : a;
    default: return y < x ? b : a;
    }
}

TWOHOP_HALF_FN uint16_t twohop_f16_combine(int op, uint16_t a, uint16_t b) {
    const float x = twohop_f16_to_f32(a), y = twohop_f16_to_f32(b);
    switch (op) {
    case 0: return twohop_f32_to_f16(x + y);
    case 1: return twohop_f32_to_f16(x * y);
    case 2: return y > x ? b : a;
    default: return y < x ? b : a;
    }
}

#endif
