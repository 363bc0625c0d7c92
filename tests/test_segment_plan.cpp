#include "segment_plan.h"

#include <gtest/gtest.h>

#include <vector>

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

namespace {
// A step of the pipeline's order, as a signed number: k + 1 for start(k), -(k + 1) for finish(k).
std::vector<long long> order_of(uint64_t nseg, uint64_t depth) {
    std::vector<long long> v;
    uint64_t started = 0, finished = 0;
    for (;;) {
        const PipelineStep s = pipeline_next(started, finished, nseg, depth);
        if (s.kind == PipelineStep::kDone) break;
        if (s.kind == PipelineStep::kStart) {
            EXPECT_EQ(s.k, started);
            v.push_back(static_cast<long long>(started++) + 1);
        } else {
            EXPECT_EQ(s.k, finished);
            v.push_back(-(static_cast<long long>(finished++) + 1));
        }
    }
    return v;
}
} // namespace

TEST(Pipeline, OrderAsDocumented) {
    EXPECT_EQ(order_of(4, 2), (std::vector<long long>{1, 2, -1, 3, -2, 4, -3, -4}));
    EXPECT_EQ(order_of(1, 4), (std::vector<long long>{1, -1}));
    EXPECT_EQ(order_of(3, 1), (std::vector<long long>{1, -1, 2, -2, 3, -3}));
    EXPECT_TRUE(order_of(0, 2).empty());
}

// The order the GPU-posted schedule wrote out by hand before (start k after finishing
// k - depth, then the last depth finishes) and the CPU-posted job's window are the same order.
TEST(Pipeline, SameOrderAsTheEarlierLoops) {
    for (uint64_t depth = 1; depth <= 8; ++depth) {
        for (uint64_t nseg = 0; nseg <= 20; ++nseg) {
            std::vector<long long> loop;
            for (uint64_t k = 0; k < nseg; ++k) {
                if (k >= depth) loop.push_back(-static_cast<long long>(k - depth + 1));
                loop.push_back(static_cast<long long>(k + 1));
            }
            for (uint64_t k = nseg > depth ? nseg - depth : 0; k < nseg; ++k) {
                loop.push_back(-static_cast<long long>(k + 1));
            }
            EXPECT_EQ(order_of(nseg, depth), loop) << "nseg " << nseg << " depth " << depth;
        }
    }
}

// pipeline_run held back by a window that moves: the same order in pieces, no start at or past
// the limit (nor the finish before it), the finishes after the last start never held, and an
// enqueue failure stops it.
TEST(Pipeline, RunInPiecesBehindAWindow) {
    for (uint64_t depth = 1; depth <= 4; ++depth) {
        for (uint64_t nseg = 1; nseg <= 12; ++nseg) {
            std::vector<long long> got;
            uint64_t started = 0, finished = 0, limit = 0;
            bool all = false;
            for (int round = 0; round < 100 && !all; ++round) {
                const uint64_t lim = limit;
                all = pipeline_run(
                    &started, &finished, nseg, depth, [] { return true; },
                    [lim] { return lim; },
                    [&](uint64_t k) {
                        EXPECT_LT(k, lim);
                        got.push_back(static_cast<long long>(k) + 1);
                    },
                    [&](uint64_t k) { got.push_back(-static_cast<long long>(k) - 1); });
                if (!all) {
                    EXPECT_GE(started, lim); // held back only at the limit
                    ++limit;                 // one more hop-2 result
                }
            }
            EXPECT_TRUE(all);
            EXPECT_EQ(got, order_of(nseg, depth)) << "nseg " << nseg << " depth " << depth;
        }
    }
    uint64_t started = 0, finished = 0;
    int calls = 0;
    EXPECT_FALSE(pipeline_run(
        &started, &finished, 8, 2, [&] { return calls < 3; }, [] { return UINT64_MAX; },
        [&](uint64_t) { ++calls; }, [&](uint64_t) { ++calls; }));
    EXPECT_EQ(calls, 3);
}
