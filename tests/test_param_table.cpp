// The checking rows of coll/params.def (coll/setup/param_table.h): ranges and the parameters
// every rank must share, with the messages set-up fails with.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "param_table.h"

namespace {

// Every parameter at its params.def default (strings stay null: no row checks them).
twohop_params defaults() {
    twohop_params p;
    std::memset(&p, 0, sizeof(p));
#define TWOHOP_PARAM_STRING(name, def)
#define TWOHOP_PARAM_VALUE(name, def) p.name = def;
#define TWOHOP_PARAM(name, kind, def, level, doc) TWOHOP_PARAM_##kind(name, def)
#define TWOHOP_PARAM_INT TWOHOP_PARAM_VALUE
#define TWOHOP_PARAM_SIZE TWOHOP_PARAM_VALUE
#define TWOHOP_PARAM_BOOL TWOHOP_PARAM_VALUE
#include "params.def"
#undef TWOHOP_PARAM
    return p;
}

} // namespace

TEST(ParamTable, DefaultsAreInRange) {
    EXPECT_EQ(twohop::param_range_error(defaults()), "");
}

TEST(ParamTable, RangesNameTheParameter) {
    twohop_params p = defaults();
    p.pipeline_depth = 9;
    EXPECT_EQ(twohop::param_range_error(p),
              "coll_twohop_pipeline_depth: value 9 is out of range 1..8");
    p.pipeline_depth = 0;
    EXPECT_EQ(twohop::param_range_error(p),
              "coll_twohop_pipeline_depth: value 0 is out of range 1..8");
    p.pipeline_depth = 8; // the bounds themselves are in range
    EXPECT_EQ(twohop::param_range_error(p), "");
    p.latency_hop2 = -1;
    EXPECT_EQ(twohop::param_range_error(p),
              "coll_twohop_latency_hop2: value -1 is out of range 0..1");
    p = defaults();
    p.segment_bytes = 4095; // SIZE rows compare unsigned, below TWOHOP_MIN_SEGMENT_BYTES
    EXPECT_EQ(twohop::param_range_error(p),
              "coll_twohop_segment_bytes: value 4095 is out of range 4096..1073741824");
    p.segment_bytes = (size_t(1) << 30) + 1;
    EXPECT_NE(twohop::param_range_error(p).find("value 1073741825 is out of range"),
              std::string::npos);
    p = defaults();
    p.posted_wake_spin_us = 251;
    EXPECT_NE(twohop::param_range_error(p).find("coll_twohop_posted_wake_spin_us"),
              std::string::npos);
    p = defaults();
    p.hop2_rabenseifner_min_nodes = 1;
    EXPECT_EQ(twohop::param_range_error(p),
              "coll_twohop_hop2_rabenseifner_min_nodes: value 1 is out of range 2..2147483647");
}

TEST(ParamTable, AgreedParametersAreCompared) {
    static_assert(twohop::kAgreedParams >= 13, "the parameters set-up has always compared");
    const twohop_params a = defaults();
    uint64_t wa[twohop::kAgreedParams], wb[twohop::kAgreedParams];
    twohop::agreed_words(a, wa);
    twohop::agreed_words(a, wb);
    EXPECT_EQ(twohop::agreed_mismatch(wa, wb, 0, 3), "");

    twohop_params b = a;
    b.segment_bytes = 524288;
    twohop::agreed_words(b, wb);
    EXPECT_EQ(twohop::agreed_mismatch(wa, wb, 0, 3),
              "coll_twohop_segment_bytes differs between ranks 0 (1048576) and 3 (524288)");

    b = a;
    b.latency_hop2 = -1; // INT rows print signed
    twohop::agreed_words(b, wb);
    EXPECT_EQ(twohop::agreed_mismatch(wa, wb, 0, 1),
              "coll_twohop_latency_hop2 differs between ranks 0 (0) and 1 (-1)");

    b = a;
    b.gpu_hop3_gather = !a.gpu_hop3_gather; // BOOL rows as 0/1
    twohop::agreed_words(b, wb);
    EXPECT_NE(twohop::agreed_mismatch(wa, wb, 0, 2).find("coll_twohop_gpu_hop3_gather differs"),
              std::string::npos);

    // A rank-local parameter is not compared.
    b = a;
    b.verbose = 3;
    b.posted_kernel_blocks = 0;
    twohop::agreed_words(b, wb);
    EXPECT_EQ(twohop::agreed_mismatch(wa, wb, 0, 2), "");
}
