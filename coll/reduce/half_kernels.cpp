/*
 * Host kernels for bfloat16 and binary16 (half_kernels.h). The arithmetic is defined once, in
 * include/twohop_half_math.h; these loops only arrange it so that the CPU runs it on vectors.
 */
#include "half_kernels.h"

#include <cstdint>

#include "twohop_half_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TWOHOP_HALF_X86 1
#endif

namespace twohop {
namespace {

/*
 * Portable variant. A loop of combinations on uint16_t lanes mixes 16- and 32-bit lanes and
 * selects between loads, which GCC leaves scalar; blocks of kBlock elements go through three
 * loops instead — widen a and b to binary32, combine into 32-bit results, narrow — each on
 * lanes of one width. MAX and MIN select the operand's bits with a mask (no conditional load),
 * so the result is the operand bit for bit. A block is read whole before its results are
 * written, so `out` may alias `a` or `b`.
 */
constexpr std::size_t kBlock = 512; // elements: 3 x 2 KiB of stack, L1-resident

template <bool Bf> inline float widen(uint16_t h) {
    return Bf ? twohop_bf16_to_f32(h) : twohop_f16_to_f32(h);
}
template <bool Bf> inline uint32_t narrow(float f) {
    return Bf ? twohop_f32_to_bf16(f) : twohop_f32_to_f16(f);
}

template <bool Bf, twohop_op Op>
void portable(const void *a_, const void *b_, void *out_, std::size_t n) {
    const uint16_t *a = static_cast<const uint16_t *>(a_);
    const uint16_t *b = static_cast<const uint16_t *>(b_);
    uint16_t *out = static_cast<uint16_t *>(out_);
    alignas(64) float x[kBlock], y[kBlock];
    alignas(64) uint32_t r[kBlock];
    for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
        const std::size_t m = n - i0 < kBlock ? n - i0 : kBlock;
        const uint16_t *pa = a + i0, *pb = b + i0;
        for (std::size_t j = 0; j < m; ++j) {
            x[j] = widen<Bf>(pa[j]);
            y[j] = widen<Bf>(pb[j]);
        }
        if (Op == TWOHOP_OP_SUM) {
            for (std::size_t j = 0; j < m; ++j)
                r[j] = narrow<Bf>(x[j] + y[j]);
        } else if (Op == TWOHOP_OP_PROD) {
            for (std::size_t j = 0; j < m; ++j)
                r[j] = narrow<Bf>(x[j] * y[j]);
        } else {
            for (std::size_t j = 0; j < m; ++j) {
                /* MAX: b when b > a, MIN: b when b < a, else a (twohop_half_math.h) */
                const bool take_b = Op == TWOHOP_OP_MAX ? y[j] > x[j] : y[j] < x[j];
                const uint32_t k = 0u - static_cast<uint32_t>(take_b);
                r[j] = (static_cast<uint32_t>(pb[j]) & k) | (static_cast<uint32_t>(pa[j]) & ~k);
            }
        }
        uint16_t *po = out + i0;
        for (std::size_t j = 0; j < m; ++j)
            po[j] = static_cast<uint16_t>(r[j]);
    }
}

#if TWOHOP_HALF_X86
/*
 * AVX2 + F16C variant: 16 (bfloat16) or 8 (binary16) elements per step, the rest of n by the
 * portable loop.
 *   widen   bfloat16: the 16 bits become the high half of a 32-bit lane (exact); binary16:
 *           VCVTPH2PS (exact)
 *   narrow  bfloat16: the rounding of twohop_f32_to_bf16 on 8 lanes (add 0x7fff plus the lowest
 *           kept bit, shift right 16), NaN lanes -> 0x7fc0; binary16: VCVTPS2PH with round to
 *           nearest even (IEEE, subnormals kept, overflow to Inf), NaN lanes -> 0x7e00
 *   MAX/MIN the comparison of the widened values (ordered: false on NaN, as in C) selects a's
 *           or b's 16 bits unchanged
 * 32-bit lanes go back to 16 bits with PACKUSDW/PACKSSDW, which work within 128-bit halves.
 */
#define TWOHOP_AVX2_FN __attribute__((target("avx2,f16c"))) inline

/* bfloat16 round to nearest even on 32-bit lanes holding binary32 bits: the result in the low
 * 16 bits of each lane (twohop_f32_to_bf16; NaN lanes -> 0x7fc0). */
TWOHOP_AVX2_FN __m256i bf16_round(__m256 z) {
    const __m256i u = _mm256_castps_si256(z);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_srli_epi32(r, 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(z, z, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
}

template <twohop_op Op> TWOHOP_AVX2_FN __m256 combine8(__m256 x, __m256 y) {
    return Op == TWOHOP_OP_SUM ? _mm256_add_ps(x, y) : _mm256_mul_ps(x, y);
}

template <twohop_op Op> TWOHOP_AVX2_FN __m256i take_b8(__m256 x, __m256 y) {
    return _mm256_castps_si256(_mm256_cmp_ps(y, x, Op == TWOHOP_OP_MAX ? _CMP_GT_OQ : _CMP_LT_OQ));
}

/* bfloat16, 16 elements per step: interleaving a vector of 16 bfloat16 with zeros
 * (UNPACKLO/HI) gives their binary32 values directly (elements 0-3 and 8-11 in one register,
 * 4-7 and 12-15 in the other), and PACKUSDW of the two results puts all 16 back in order. */
template <twohop_op Op>
__attribute__((target("avx2,f16c"))) void avx2_bf16(const void *a_, const void *b_, void *out_,
                                                    std::size_t n) {
    const uint16_t *a = static_cast<const uint16_t *>(a_);
    const uint16_t *b = static_cast<const uint16_t *>(b_);
    uint16_t *out = static_cast<uint16_t *>(out_);
    const __m256i zero = _mm256_setzero_si256();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i));
        const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + i));
        const __m256 xl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, va));
        const __m256 xh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, va));
        const __m256 yl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, vb));
        const __m256 yh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, vb));
        __m256i o;
        if (Op == TWOHOP_OP_SUM || Op == TWOHOP_OP_PROD) {
            o = _mm256_packus_epi32(bf16_round(combine8<Op>(xl, yl)),
                                    bf16_round(combine8<Op>(xh, yh)));
        } else {
            o = _mm256_blendv_epi8(va, vb,
                                   _mm256_packs_epi32(take_b8<Op>(xl, yl), take_b8<Op>(xh, yh)));
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i), o);
    }
    if (i < n)
        portable<true, Op>(a + i, b + i, out + i, n - i);
}

/* binary16, 8 elements per step through VCVTPH2PS / VCVTPS2PH. */
template <twohop_op Op>
__attribute__((target("avx2,f16c"))) void avx2_f16(const void *a_, const void *b_, void *out_,
                                                   std::size_t n) {
    const uint16_t *a = static_cast<const uint16_t *>(a_);
    const uint16_t *b = static_cast<const uint16_t *>(b_);
    uint16_t *out = static_cast<uint16_t *>(out_);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i *>(a + i));
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + i));
        const __m256 x = _mm256_cvtph_ps(va), y = _mm256_cvtph_ps(vb);
        __m128i o;
        if (Op == TWOHOP_OP_SUM || Op == TWOHOP_OP_PROD) {
            const __m128i h =
                _mm256_cvtps_ph(combine8<Op>(x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m128i nan =
                _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
            o = _mm_blendv_epi8(h, _mm_set1_epi16(0x7e00), nan);
        } else {
            const __m256i t = take_b8<Op>(x, y);
            const __m128i t16 =
                _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packs_epi32(t, t), 0x08));
            o = _mm_blendv_epi8(va, vb, t16);
        }
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i), o);
    }
    if (i < n)
        portable<false, Op>(a + i, b + i, out + i, n - i);
}

bool cpu_has_avx2_f16c() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return yes;
}
#endif

template <bool Bf, template <bool, twohop_op> class Pick> KernelFn pick(twohop_op op) {
    switch (op) {
    case TWOHOP_OP_SUM:
        return Pick<Bf, TWOHOP_OP_SUM>::fn;
    case TWOHOP_OP_PROD:
        return Pick<Bf, TWOHOP_OP_PROD>::fn;
    case TWOHOP_OP_MAX:
        return Pick<Bf, TWOHOP_OP_MAX>::fn;
    case TWOHOP_OP_MIN:
        return Pick<Bf, TWOHOP_OP_MIN>::fn;
    default:
        return nullptr;
    }
}

template <bool Bf, twohop_op Op> struct Portable {
    static constexpr KernelFn fn = portable<Bf, Op>;
};
#if TWOHOP_HALF_X86
template <bool Bf, twohop_op Op> struct Avx2 {
    static constexpr KernelFn fn = Bf ? avx2_bf16<Op> : avx2_f16<Op>;
};
#endif

} // namespace

KernelFn half_kernel_portable(twohop_dtype t, twohop_op op) {
    if (t == TWOHOP_BF16)
        return pick<true, Portable>(op);
    if (t == TWOHOP_F16)
        return pick<false, Portable>(op);
    return nullptr;
}

KernelFn half_kernel_avx2(twohop_dtype t, twohop_op op) {
#if TWOHOP_HALF_X86
    if (!cpu_has_avx2_f16c())
        return nullptr;
    if (t == TWOHOP_BF16)
        return pick<true, Avx2>(op);
    if (t == TWOHOP_F16)
        return pick<false, Avx2>(op);
#else
    (void)t;
    (void)op;
#endif
    return nullptr;
}

} // namespace twohop
