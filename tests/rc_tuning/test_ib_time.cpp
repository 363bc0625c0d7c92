/* IB timer encodings and sizing formulas checked against the IB definition. */
#include "ib_time.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace twohop::rc;

TEST(IbTime, TimeoutIsExactly4096nsTimesPowerOfTwo) {
    EXPECT_EQ(timeout_ns(0), 0u); // 0 = infinite
    for (int t = 1; t <= 31; ++t) {
        EXPECT_EQ(timeout_ns(t), 4096ull << t) << "t=" << t;
        EXPECT_DOUBLE_EQ(timeout_us(t), 4.096 * std::ldexp(1.0, t)) << "t=" << t;
    }
    // Anchors from the IB definition 4.096 us * 2^t.
    EXPECT_EQ(timeout_ns(1), 8192u);
    EXPECT_EQ(timeout_ns(14), 67108864u);        // 67.108864 ms
    EXPECT_EQ(timeout_ns(18), 1073741824u);      // 1.073741824 s (UCX default 1 s -> t=18)
    EXPECT_EQ(timeout_ns(31), 8796093022208ull); // 8796.09 s
}

TEST(IbTime, TimeToExponentRoundsUpToTheGrid) {
    EXPECT_EQ(timeout_exp_at_least_us(1.0), 1);
    EXPECT_EQ(timeout_exp_at_least_us(8.192), 1);
    EXPECT_EQ(timeout_exp_at_least_us(8.193), 2);
    EXPECT_EQ(timeout_exp_at_least_us(1e6), 18);
    EXPECT_EQ(timeout_exp_at_least_us(67108.864), 14);
    EXPECT_EQ(timeout_exp_at_least_us(8796093022.208), 31);
    EXPECT_FALSE(timeout_exp_at_least_us(8796093022.209 * 1.0001).has_value());
    EXPECT_FALSE(timeout_exp_at_least_us(0).has_value());
    EXPECT_FALSE(timeout_exp_at_least_us(-5).has_value());
    for (int t = 1; t <= 31; ++t) {
        EXPECT_EQ(timeout_exp_at_least_us(timeout_us(t)), t); // round trip
    }
}

TEST(IbTime, ExponentFromRtt) {
    // 2 us RTT, margin 8 -> 16 us -> ceil(log2(16 / 4.096)) = ceil(1.97) = 2
    EXPECT_EQ(timeout_exp_for_rtt(2.0, 8), 2);
    // 10 ms RTT, margin 8 -> 80 ms -> ceil(log2(19531.25)) = 15
    EXPECT_EQ(timeout_exp_for_rtt(10000.0, 8), 15);
    EXPECT_FALSE(timeout_exp_for_rtt(0, 8).has_value());
    EXPECT_FALSE(timeout_exp_for_rtt(5, 0).has_value());
}

TEST(IbTime, DeadLinkIsTimeoutTimesRetriesPlusOne) {
    EXPECT_DOUBLE_EQ(dead_link_us(18, 7), 8 * 1073741.824);
    EXPECT_DOUBLE_EQ(dead_link_us(14, 0), 67108.864);
    EXPECT_DOUBLE_EQ(dead_link_us(0, 7), -1); // infinite
}

TEST(IbTime, RnrTableMatchesIbSpec) {
    EXPECT_EQ(rnr_timer_us(0), 655360u); // 655.36 ms
    EXPECT_EQ(rnr_timer_us(1), 10u);     // 0.01 ms
    EXPECT_EQ(rnr_timer_us(13), 960u);
    EXPECT_EQ(rnr_timer_us(14), 1280u);
    EXPECT_EQ(rnr_timer_us(31), 491520u);
    // Structure of the IB table: from code 2 on, values alternate x1.5 and x4/3 ... and every
    // second code doubles: code c+2 = 2 * code c for c >= 3.
    for (int c = 3; c + 2 <= 31; ++c) {
        EXPECT_EQ(rnr_timer_us(c + 2), 2 * rnr_timer_us(c)) << "code " << c;
    }
    for (int c = 1; c < 31; ++c) {
        EXPECT_LT(rnr_timer_us(c), rnr_timer_us(c + 1)) << "code " << c;
    }
    EXPECT_THROW(rnr_timer_us(32), std::out_of_range);
}

TEST(IbTime, SendQueueDepthIsTwiceInflightPowerOfTwo) {
    // 256 KiB segments, 2 in flight, 8256-byte WRs: 2 * (32 + 1) = 66 WRs -> 132 -> 256
    EXPECT_EQ(inflight_wrs(262144, 2, 8256), 66u);
    EXPECT_EQ(send_queue_depth(66), 256u);
    EXPECT_EQ(send_queue_depth(64), 128u);
    EXPECT_EQ(send_queue_depth(0), 16u);
    EXPECT_EQ(send_queue_depth(1), 16u);
    EXPECT_EQ(inflight_wrs(1, 1, 8256), 2u);
    EXPECT_EQ(inflight_wrs(100, 0, 8256), 0u);
}

TEST(IbTime, FormatUs) {
    EXPECT_EQ(format_us(8.192), "8.192 us");
    EXPECT_EQ(format_us(67108.864), "67.109 ms");
    EXPECT_EQ(format_us(1073741.824), "1.074 s");
    EXPECT_EQ(format_us(-1), "infinite");
}
