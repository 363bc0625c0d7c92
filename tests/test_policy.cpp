// The front ends' one policy (coll/front/policy.h): serve or fall back, and as which reduction,
// from the facts the Open MPI adapter and the PMPI library read through their MPI's API.
#include <gtest/gtest.h>

#include <string>

#include "policy.h"
#include "twohop_core.h"

namespace {

// MPI_FLOAT with MPI_SUM, as both front ends read it.
twohop_type_facts float_sum() {
    twohop_type_facts f{};
    f.type_size = 4;
    f.half_dtype = TWOHOP_NO_KERNEL;
    f.op_predefined = true;
    f.op = TWOHOP_OP_SUM;
    f.base = TWOHOP_F32;
    f.base_size = 4;
    f.base_extent = 4;
    return f;
}

std::string why_of(const twohop_type_facts &f) {
    twohop_reduction red;
    uint64_t epi = 0;
    const char *why = twohop_classify(&f, &red, &epi);
    return why ? why : "";
}

} // namespace

TEST(Policy, PredefinedTypeAndOp) {
    twohop_type_facts f = float_sum();
    twohop_reduction red;
    uint64_t epi = 0;
    EXPECT_EQ(twohop_classify(&f, &red, &epi), nullptr);
    EXPECT_EQ(red.dtype, TWOHOP_F32);
    EXPECT_EQ(red.op, TWOHOP_OP_SUM);
    EXPECT_EQ(red.item_bytes, 4u);
    EXPECT_EQ(epi, 1u);
    EXPECT_EQ(red.user_fn, nullptr);
}

TEST(Policy, DerivedTypeOfOneElementCountsItsElements) {
    twohop_type_facts f = float_sum();
    f.type_size = 12; // a contiguous (or vector) of 3 floats
    twohop_reduction red;
    uint64_t epi = 0;
    EXPECT_EQ(twohop_classify(&f, &red, &epi), nullptr);
    EXPECT_EQ(epi, 3u);
    EXPECT_EQ(red.item_bytes, 4u); // one canonical element
}

TEST(Policy, HalfPairWinsOverEverythingElse) {
    twohop_type_facts f = float_sum();
    f.half_dtype = TWOHOP_BF16;
    f.half_op = TWOHOP_OP_MAX;
    f.type_size = 2;
    f.op_predefined = false; // the header's ops are user ops to the MPI
    f.op_commutes = true;
    f.op = TWOHOP_NO_KERNEL;
    f.base = TWOHOP_NO_KERNEL;
    twohop_reduction red;
    uint64_t epi = 0;
    EXPECT_EQ(twohop_classify(&f, &red, &epi), nullptr);
    EXPECT_EQ(red.dtype, TWOHOP_BF16);
    EXPECT_EQ(red.op, TWOHOP_OP_MAX);
    EXPECT_EQ(red.item_bytes, 2u);
}

TEST(Policy, UserOps) {
    twohop_type_facts f = float_sum();
    f.op_predefined = false;
    f.op = TWOHOP_NO_KERNEL;
    f.type_size = 24;
    f.op_commutes = false;
    EXPECT_EQ(why_of(f), "user-defined op is not commutative");
    f.op_commutes = true;
    twohop_reduction red;
    uint64_t epi = 0;
    EXPECT_EQ(twohop_classify(&f, &red, &epi), nullptr);
    EXPECT_EQ(red.op, TWOHOP_OP_USER);
    EXPECT_EQ(red.item_bytes, 24u); // the packed item
    EXPECT_EQ(epi, 1u);
    // The base facts are not read for a user op.
    f.base = TWOHOP_BASE_MIXED;
    EXPECT_EQ(why_of(f), "");
}

TEST(Policy, EveryFallbackHasItsReason) {
    twohop_type_facts f = float_sum();
    f.op = TWOHOP_NO_KERNEL; // MPI_REPLACE, MPI_NO_OP
    EXPECT_EQ(why_of(f), "op is not one of the predefined reduction ops");
    f = float_sum();
    f.base = TWOHOP_BASE_MIXED;
    EXPECT_EQ(why_of(f), "derived datatype mixes several predefined types");
    f.base = TWOHOP_NO_KERNEL;
    EXPECT_EQ(why_of(f), "no twohop kernel for this predefined datatype");
    f = float_sum();
    f.base_extent = 8; // an element with a resized extent
    EXPECT_EQ(why_of(f), "datatype layout differs from twohop's element layout");
    f = float_sum();
    f.type_size = 6; // not a whole number of elements
    EXPECT_EQ(why_of(f), "datatype layout differs from twohop's element layout");
    f = float_sum();
    f.base_size = 0;
    EXPECT_EQ(why_of(f), "datatype layout differs from twohop's element layout");
    f = float_sum();
    f.op = TWOHOP_OP_BXOR; // not defined on floating point by MPI
    EXPECT_EQ(why_of(f), "MPI does not define this op for this datatype");
    f.base = TWOHOP_I32;
    EXPECT_EQ(why_of(f), "");
}

TEST(Policy, RouteSignature) {
    twohop_type_facts f = float_sum();
    twohop_reduction red;
    uint64_t epi = 0;
    const char *why = "x";
    EXPECT_EQ(twohop_route_signature(-1, &f, &red, &epi, &why), CALL_FALLBACK);
    EXPECT_STREQ(why, "negative count");
    EXPECT_EQ(twohop_route_signature(0, &f, &red, &epi, &why), CALL_EMPTY);
    EXPECT_EQ(why, nullptr);
    f.type_size = 0; // an empty signature: empty on every rank, whatever else
    f.base = TWOHOP_BASE_MIXED;
    EXPECT_EQ(twohop_route_signature(5, &f, &red, &epi, &why), CALL_EMPTY);
    f = float_sum();
    EXPECT_EQ(twohop_route_signature(int64_t(1) << 40, &f, &red, &epi, &why), CALL_SERVE);
    EXPECT_EQ(why, nullptr);
    f.base = TWOHOP_BASE_MIXED;
    EXPECT_EQ(twohop_route_signature(5, &f, &red, &epi, &why), CALL_FALLBACK);
    EXPECT_STREQ(why, "derived datatype mixes several predefined types");
}

TEST(Policy, RouteSetup) {
    const char *why = "x";
    EXPECT_EQ(twohop_route_setup(1, nullptr, &why), CALL_SERVE);
    EXPECT_EQ(why, nullptr);
    EXPECT_EQ(twohop_route_setup(1, "too large", &why), CALL_FALLBACK);
    EXPECT_STREQ(why, "too large");
    EXPECT_EQ(twohop_route_setup(-1, nullptr, &why), CALL_FALLBACK);
    EXPECT_STREQ(why, "set-up failed");
    EXPECT_EQ(twohop_route_setup(-2, nullptr, &why), CALL_BROKEN);
    // Not an outcome (0 not started, 2 running): never served, and a reason to print.
    EXPECT_EQ(twohop_route_setup(0, nullptr, &why), CALL_FALLBACK);
    EXPECT_NE(why, nullptr);
    EXPECT_EQ(twohop_route_setup(2, nullptr, &why), CALL_FALLBACK);
    EXPECT_NE(why, nullptr);
}

TEST(Policy, DeferrableUpToTheSmallestSlot) {
    EXPECT_EQ(twohop_deferrable_refusal(8), nullptr);
    EXPECT_EQ(twohop_deferrable_refusal(TWOHOP_MIN_SEGMENT_BYTES), nullptr);
    EXPECT_NE(twohop_deferrable_refusal(TWOHOP_MIN_SEGMENT_BYTES + 1), nullptr);
}

TEST(Policy, StaysOnStreamOnlyServedDeviceCanonical) {
    EXPECT_TRUE(twohop_stays_on_stream(CALL_SERVE, TWOHOP_KIND_CUDA, TWOHOP_KIND_CUDA, true));
    EXPECT_FALSE(twohop_stays_on_stream(CALL_SERVE, TWOHOP_KIND_CUDA, TWOHOP_KIND_CUDA, false));
    EXPECT_FALSE(twohop_stays_on_stream(CALL_SERVE, TWOHOP_KIND_HOST, TWOHOP_KIND_CUDA, true));
    EXPECT_FALSE(twohop_stays_on_stream(CALL_SERVE, TWOHOP_KIND_CUDA, TWOHOP_KIND_HOST, true));
    EXPECT_FALSE(twohop_stays_on_stream(CALL_FALLBACK, TWOHOP_KIND_CUDA, TWOHOP_KIND_CUDA, true));
}
