// Half-precision arithmetic (include/twohop_half_math.h), the one definition the public MPI ops,
// the host kernels and the device kernels compile: conversions against independent references
// (GCC's _Float16 for binary16; exact nearest-even selection in double for bfloat16), the
// special values, and the host kernel table (coll/reduce) computing the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "half_kernels.h"
#include "reduce_kernels.h"
#include "reduce_types.h"
#include "twohop_half_math.h"

namespace {

uint32_t bits(float f) {
    return twohop_f32_bits(f);
}

// The nearest bfloat16 of f (ties to even), chosen in double from the two candidates around it.
uint16_t bf16_reference(float f) {
    const uint32_t u = bits(f);
    if (std::isnan(f))
        return 0x7fc0; // the canonical quiet NaN
    const uint16_t lo = static_cast<uint16_t>(u >> 16);
    if ((u & 0xffffu) == 0)
        return lo;
    const uint16_t hi = static_cast<uint16_t>(lo + 1); // next magnitude (may become Inf)
    const double x = std::fabs(static_cast<double>(f));
    const double dlo = x - std::fabs(static_cast<double>(twohop_bf16_to_f32(lo)));
    // Above the largest finite value the next step is 2^128 (IEEE rounds to Inf from there).
    const double vhi = (hi & 0x7fffu) == 0x7f80u
                           ? std::ldexp(1.0, 128)
                           : std::fabs(static_cast<double>(twohop_bf16_to_f32(hi)));
    const double dhi = vhi - x;
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1u) ? hi : lo;
}

bool same_nan_class(uint16_t a, uint16_t b, uint16_t exp_mask, uint16_t man_mask) {
    const bool na = (a & exp_mask) == exp_mask && (a & man_mask);
    const bool nb = (b & exp_mask) == exp_mask && (b & man_mask);
    return na && nb;
}

} // namespace

TEST(HalfMath, F16WideningIsExactForEveryPattern) {
    for (uint32_t h = 0; h < 65536; ++h) {
        _Float16 r;
        const uint16_t hb = static_cast<uint16_t>(h);
        std::memcpy(&r, &hb, 2);
        const float want = static_cast<float>(r);
        const float got = twohop_f16_to_f32(hb);
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << h;
        } else {
            ASSERT_EQ(bits(got), bits(want)) << std::hex << h;
        }
    }
}

TEST(HalfMath, F16RoundingMatchesTheCompiler) {
    // Every 97th binary32 pattern (44 million), plus the halfway cases around every binary16.
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 97) {
        const float f = twohop_bits_f32(static_cast<uint32_t>(u));
        const _Float16 r = static_cast<_Float16>(f);
        uint16_t want;
        std::memcpy(&want, &r, 2);
        const uint16_t got = twohop_f32_to_f16(f);
        if (std::isnan(f)) {
            ASSERT_TRUE(same_nan_class(got, want, 0x7c00, 0x03ff)) << std::hex << u;
            ASSERT_EQ(got, 0x7e00) << std::hex << u; // the canonical quiet NaN
        } else {
            ASSERT_EQ(got, want) << std::hex << u;
        }
    }
    for (uint32_t h = 0; h < 0x7c00; ++h) { // midpoints between h and h + 1 (and +-1 ulp)
        const float a = twohop_f16_to_f32(static_cast<uint16_t>(h));
        const float b = twohop_f16_to_f32(static_cast<uint16_t>(h + 1));
        const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
        for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
            const _Float16 r = static_cast<_Float16>(f);
            uint16_t want;
            std::memcpy(&want, &r, 2);
            ASSERT_EQ(twohop_f32_to_f16(f), want) << std::hex << h;
        }
    }
}

TEST(HalfMath, Bf16RoundingIsNearestEven) {
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 89) {
        const float f = twohop_bits_f32(static_cast<uint32_t>(u));
        ASSERT_EQ(twohop_f32_to_bf16(f), bf16_reference(f)) << std::hex << u;
    }
    // Ties: exactly halfway between two bfloat16 values goes to the even one.
    EXPECT_EQ(twohop_f32_to_bf16(twohop_bits_f32(0x3f808000u)), 0x3f80u); // 1 + 2^-8 -> 1
    EXPECT_EQ(twohop_f32_to_bf16(twohop_bits_f32(0x3f818000u)), 0x3f82u); // odd -> up
    EXPECT_EQ(twohop_f32_to_bf16(twohop_bits_f32(0x7f7fffffu)), 0x7f80u); // FLT_MAX -> Inf
}

TEST(HalfMath, SpecialValues) {
    const uint16_t pinf = 0x7c00, ninf = 0xfc00, nzero = 0x8000, one = 0x3c00, sub = 0x0001;
    EXPECT_EQ(twohop_f16_combine(0, pinf, one), pinf);
    EXPECT_EQ(twohop_f16_combine(0, pinf, ninf), 0x7e00);     // Inf - Inf
    EXPECT_EQ(twohop_f16_combine(0, 0xfe01, 0x7d55), 0x7e00); // NaN payloads: canonical
    EXPECT_EQ(twohop_f16_combine(0, 0x7d55, 0xfe01), 0x7e00); // in either order
    EXPECT_EQ(twohop_bf16_combine(1, 0xffc1, 0x7fa5), 0x7fc0);
    EXPECT_EQ(twohop_f16_combine(0, nzero, nzero), nzero);     // -0 + -0 = -0
    EXPECT_EQ(twohop_f16_combine(0, nzero, 0), 0);             // -0 + +0 = +0
    EXPECT_EQ(twohop_f16_combine(0, sub, sub), 0x0002);        // subnormals kept
    EXPECT_EQ(twohop_f16_combine(1, 0x0200, 0x3800), 0x0100);  // 2^-15 * 0.5
    EXPECT_EQ(twohop_f16_combine(0, 0x7bff, 0x7bff), pinf);    // 65504 + 65504
    EXPECT_EQ(twohop_f16_combine(2, nzero, 0), nzero);         // MAX(-0, +0) keeps a
    EXPECT_EQ(twohop_f16_combine(3, 0x7e00, one), 0x7e00);     // MIN(NaN, 1) keeps a
    EXPECT_EQ(twohop_f16_combine(3, one, 0x7e00), one);        // MIN(1, NaN) keeps a
    EXPECT_EQ(twohop_bf16_combine(0, 0x3f80, 0x3f80), 0x4000); // 1 + 1
    EXPECT_EQ(twohop_bf16_combine(0, 0x7f80, 0xff80), 0x7fc0); // Inf - Inf
    EXPECT_EQ(twohop_bf16_combine(0, 0x0001, 0x0001), 0x0002); // subnormals kept
    EXPECT_EQ(twohop_bf16_combine(2, 0xbf80, 0x3f80), 0x3f80); // MAX(-1, 1)
    // Small integers are exact in both formats: sums of up to 256 ones.
    uint16_t acc16 = 0, accb = 0;
    for (int i = 0; i < 256; ++i) {
        acc16 = twohop_f16_combine(0, acc16, one);
        accb = twohop_bf16_combine(0, accb, 0x3f80);
    }
    EXPECT_EQ(twohop_f16_to_f32(acc16), 256.0f);
    EXPECT_EQ(twohop_bf16_to_f32(accb), 256.0f);
}

TEST(HalfMath, HostKernelsComputeTheSameBits) {
    const int n = 4099;
    std::vector<uint16_t> a(n), b(n), out(n);
    uint32_t x = 12345;
    for (int i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        a[i] = static_cast<uint16_t>(x >> 16);
        b[i] = static_cast<uint16_t>(x);
    }
    const twohop_dtype types[2] = {TWOHOP_BF16, TWOHOP_F16};
    const twohop_op ops[4] = {TWOHOP_OP_SUM, TWOHOP_OP_PROD, TWOHOP_OP_MAX, TWOHOP_OP_MIN};
    for (twohop_dtype t : types) {
        EXPECT_EQ(twohop_dtype_size(t), 2u);
        for (int o = 0; o < 4; ++o) {
            /* the kernel in use, and each variant where this CPU runs it (half_kernels.h) */
            const twohop::KernelFn variants[3] = {twohop::find_kernel(t, ops[o]),
                                                  twohop::half_kernel_portable(t, ops[o]),
                                                  twohop::half_kernel_avx2(t, ops[o])};
            ASSERT_NE(variants[0], nullptr);
            ASSERT_NE(variants[1], nullptr);
            for (twohop::KernelFn k : variants) {
                if (!k)
                    continue;
                k(a.data(), b.data(), out.data(), n);
                for (int i = 0; i < n; ++i) {
                    const uint16_t want = t == TWOHOP_BF16 ? twohop_bf16_combine(o, a[i], b[i])
                                                           : twohop_f16_combine(o, a[i], b[i]);
                    ASSERT_EQ(out[i], want) << twohop_dtype_name(t) << " op " << o << " i " << i;
                }
                /* in place: the output aliases either input (blocks are read before written) */
                std::vector<uint16_t> in_a = a, in_b = b;
                k(in_a.data(), b.data(), in_a.data(), n);
                k(a.data(), in_b.data(), in_b.data(), n);
                EXPECT_EQ(in_a, out);
                EXPECT_EQ(in_b, out);
            }
        }
        EXPECT_EQ(twohop::find_kernel(t, TWOHOP_OP_BAND), nullptr);
    }
}
