#include "segment_plan.h"

#include <gtest/gtest.h>

using namespace twohop;

TEST(SplitEven, PiecesCoverRangeWithoutGaps) {
    for (uint64_t total : {0ull, 1ull, 7ull, 8ull, 9ull, 1031ull}) {
        for (uint64_t parts : {1ull, 2ull, 3ull, 8ull, 16ull}) {
            uint64_t next = 0;
            for (uint64_t i = 0; i < parts; ++i) {
                Range r = split_even(total, parts, i);
                EXPECT_EQ(r.offset, next) << total << "/" << parts << " piece " << i;
                EXPECT_LE(r.count, total / parts + 1);
                EXPECT_GE(r.count, total / parts);
                next += r.count;
            }
            EXPECT_EQ(next, total);
        }
    }
}

TEST(SplitEven, RemainderGoesToFirstPieces) {
    // 10 items over 4: 3,3,2,2
    EXPECT_EQ(split_even(10, 4, 0).count, 3u);
    EXPECT_EQ(split_even(10, 4, 1).count, 3u);
    EXPECT_EQ(split_even(10, 4, 2).count, 2u);
    EXPECT_EQ(split_even(10, 4, 3).offset, 8u);
}

TEST(SplitEven, FewerItemsThanPartsLeavesEmptyPieces) {
    EXPECT_EQ(split_even(2, 5, 0).count, 1u);
    EXPECT_EQ(split_even(2, 5, 1).count, 1u);
    EXPECT_EQ(split_even(2, 5, 4).count, 0u);
    EXPECT_EQ(split_even(2, 5, 4).offset, 2u);
}

TEST(SplitEven, SixtyFourBitSizes) {
    const uint64_t total = (uint64_t(1) << 40) + 12345; // ~1.1e12 items
    Range last = split_even(total, 7, 6);
    EXPECT_EQ(last.offset + last.count, total);
    EXPECT_GT(last.offset, uint64_t(1) << 32);
}

TEST(Segments, CountAndRanges) {
    EXPECT_EQ(segment_items(262144, 4), 65536u);
    EXPECT_EQ(segment_items(262144, 1 << 20), 1u); // item larger than the budget
    EXPECT_EQ(segment_count(0, 100), 0u);
    EXPECT_EQ(segment_count(100, 100), 1u);
    EXPECT_EQ(segment_count(101, 100), 2u);
    Range r = segment_range(101, 100, 1);
    EXPECT_EQ(r.offset, 100u);
    EXPECT_EQ(r.count, 1u);
}

TEST(Segments, MessageOverTwoGiB) {
    // 600 Mi floats = 2.34 GiB, 256 KiB segments.
    const uint64_t count = 600ull << 20, per = segment_items(262144, 4);
    const uint64_t n = segment_count(count, per);
    EXPECT_EQ(n, (count + per - 1) / per);
    Range last = segment_range(count, per, n - 1);
    EXPECT_EQ(last.offset + last.count, count);
    EXPECT_GT(last.offset * 4, uint64_t(1) << 31); // byte offsets beyond 2 GiB stay exact
}
