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

TEST(IbTime, DeadLinkWorstCaseIsFourNominalTimeouts) {
    EXPECT_DOUBLE_EQ(dead_link_nominal_us(18, 7), 8 * 1073741.824); // 8.59 s
    EXPECT_DOUBLE_EQ(dead_link_us(18, 7), 34359738.368);             // 4 x 8 x 1.074 s = 34.36 s
    EXPECT_DOUBLE_EQ(dead_link_us(14, 0), 268435.456);               // 4 x 67.109 ms
    EXPECT_DOUBLE_EQ(dead_link_us(0, 7), -1);                        // infinite
    EXPECT_DOUBLE_EQ(dead_link_nominal_us(0, 7), -1);
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

TEST(IbTime, Hop2MessagesAndSendQueueDepth) {
    // Ring chunk = segment / shards / nodes (rounded up): 1 MiB over 8 shards and 4 nodes.
    EXPECT_EQ(hop2_chunk_bytes(1048576, 8, 4), 32768u);
    EXPECT_EQ(hop2_chunk_bytes(1048576, 3, 2), 174763u); // ceil(1048576 / 6)
    EXPECT_EQ(hop2_chunk_bytes(65536, 4, 4), 4096u);
    // Eager below the rendezvous threshold: ceil(bytes / 8256) bcopy fragments.
    EXPECT_EQ(wrs_per_message(4096, 8256, 8192), 1u);
    EXPECT_EQ(wrs_per_message(32768, 8256, ~0ull), 4u); // 3 x 8256 = 24768 < 32768
    EXPECT_EQ(wrs_per_message(524288, 8256, ~0ull), 64u);
    // Rendezvous at or above it: RTS + one RDMA read.
    EXPECT_EQ(wrs_per_message(8192, 8256, 8192), 2u);
    EXPECT_EQ(wrs_per_message(32768, 8256, 8192), 2u);
    EXPECT_EQ(inflight_wrs(64, 8), 512u);
    EXPECT_EQ(inflight_wrs(2, 0), 0u);
    EXPECT_EQ(send_queue_depth(512), 1024u);
    EXPECT_EQ(send_queue_depth(66), 256u);
    EXPECT_EQ(send_queue_depth(64), 128u);
    EXPECT_EQ(send_queue_depth(0), 16u);
    EXPECT_EQ(send_queue_depth(1), 16u);
}

TEST(IbTime, FormatUs) {
    EXPECT_EQ(format_us(8.192), "8.192 us");
    EXPECT_EQ(format_us(67108.864), "67.109 ms");
    EXPECT_EQ(format_us(1073741.824), "1.074 s");
    EXPECT_EQ(format_us(-1), "infinite");
}
