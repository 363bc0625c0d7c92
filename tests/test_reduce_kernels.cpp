#include "reduce_kernels.h"
#include "reduce_ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <vector>

using namespace twohop;

namespace {
template <typename T> std::vector<T> run(twohop_dtype t, twohop_op op, std::vector<T> a,
                                         std::vector<T> b) {
    KernelFn k = find_kernel(t, op);
    EXPECT_NE(k, nullptr) << twohop_dtype_name(t) << " " << twohop_op_name(op);
    std::vector<T> out(a.size());
    if (k) k(a.data(), b.data(), out.data(), a.size());
    return out;
}
} // namespace

TEST(Kernels, IntegerOps) {
    std::vector<int32_t> a = {1, -5, 6, 0}, b = {2, 7, 3, 0};
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_SUM, a, b), std::vector<int32_t>({3, 2, 9, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_PROD, a, b), std::vector<int32_t>({2, -35, 18, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_MAX, a, b), std::vector<int32_t>({2, 7, 6, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_MIN, a, b), std::vector<int32_t>({1, -5, 3, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_LAND, a, b), std::vector<int32_t>({1, 1, 1, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_LXOR, a, b), std::vector<int32_t>({0, 0, 0, 0}));
    EXPECT_EQ(run(TWOHOP_I32, TWOHOP_OP_BXOR, a, b), std::vector<int32_t>({3, -5 ^ 7, 5, 0}));
    std::vector<uint64_t> ua = {~0ull}, ub = {2};
    EXPECT_EQ(run(TWOHOP_U64, TWOHOP_OP_SUM, ua, ub), std::vector<uint64_t>({1})); // wraps
}

TEST(Kernels, OutputMayAliasInput) {
    std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
    find_kernel(TWOHOP_F32, TWOHOP_OP_SUM)(a.data(), b.data(), a.data(), 3);
    EXPECT_EQ(a, std::vector<float>({11, 22, 33}));
}

TEST(Kernels, LongDoubleAndComplex) {
    std::vector<long double> a = {1.5L}, b = {2.25L};
    EXPECT_EQ(run(TWOHOP_LDBL, TWOHOP_OP_SUM, a, b)[0], 3.75L);
    using C = Complex<double>;
    std::vector<C> ca = {{1, 2}}, cb = {{3, -1}};
    C p = run(TWOHOP_C64, TWOHOP_OP_PROD, ca, cb)[0];
    EXPECT_EQ(p.re, 5.0); // (1+2i)(3-i) = 3 - i + 6i + 2 = 5 + 5i
    EXPECT_EQ(p.im, 5.0);
}

TEST(Kernels, MaxlocTiesKeepLowerIndex) {
    using P = ValueIndex<double>;
    std::vector<P> a = {{1.0, 5}, {2.0, 9}, {3.0, 1}}, b = {{1.0, 3}, {1.0, 0}, {4.0, 7}};
    auto mx = run(TWOHOP_DOUBLE_INT, TWOHOP_OP_MAXLOC, a, b);
    EXPECT_EQ(mx[0].i, 3);
    EXPECT_EQ(mx[1].i, 9);
    EXPECT_EQ(mx[2].i, 7);
    auto mn = run(TWOHOP_DOUBLE_INT, TWOHOP_OP_MINLOC, a, b);
    EXPECT_EQ(mn[0].i, 3);
    EXPECT_EQ(mn[1].i, 0);
    EXPECT_EQ(mn[2].i, 1);
}

TEST(Kernels, BoolLogical) {
    bool a[4] = {false, false, true, true}, b[4] = {false, true, false, true}, out[4];
    const bool lor[4] = {false, true, true, true}, lxor[4] = {false, true, true, false};
    find_kernel(TWOHOP_BOOL, TWOHOP_OP_LOR)(a, b, out, 4);
    EXPECT_EQ(std::memcmp(out, lor, 4), 0);
    find_kernel(TWOHOP_BOOL, TWOHOP_OP_LXOR)(a, b, out, 4);
    EXPECT_EQ(std::memcmp(out, lxor, 4), 0);
}

TEST(Kernels, OnlyCombinationsMpiAllows) {
    EXPECT_EQ(find_kernel(TWOHOP_F32, TWOHOP_OP_BAND), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_F64, TWOHOP_OP_LAND), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_C32, TWOHOP_OP_MAX), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_BOOL, TWOHOP_OP_SUM), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_BYTE, TWOHOP_OP_SUM), nullptr);
    EXPECT_NE(find_kernel(TWOHOP_BYTE, TWOHOP_OP_BXOR), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_I32, TWOHOP_OP_MAXLOC), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_2INT, TWOHOP_OP_SUM), nullptr);
    EXPECT_EQ(find_kernel(TWOHOP_I32, TWOHOP_OP_USER), nullptr);
    int supported = 0;
    for (int t = 0; t < TWOHOP_DTYPE_COUNT; ++t) {
        EXPECT_GT(twohop_dtype_size(static_cast<twohop_dtype>(t)), 0u);
        for (int o = 0; o < TWOHOP_OP_COUNT; ++o) {
            supported += twohop_kernel_supported(static_cast<twohop_dtype>(t),
                                                 static_cast<twohop_op>(o));
        }
    }
    // 8 integer types x 10 ops + 3 floats x 4 + bool x 3 + byte x 3 + 3 complex x 2 + 6 pairs x 2
    // + bfloat16 and float16 x 4
    EXPECT_EQ(supported, 80 + 12 + 3 + 3 + 6 + 12 + 8);
}

TEST(Kernels, PairLayoutsMatchMpi) {
    EXPECT_EQ(twohop_dtype_size(TWOHOP_SHORT_INT), 8u);   // short, pad, int
    EXPECT_EQ(twohop_dtype_size(TWOHOP_DOUBLE_INT), 16u); // MPI_DOUBLE_INT extent
    EXPECT_EQ(twohop_dtype_size(TWOHOP_LONG_DOUBLE_INT), 32u);
}
