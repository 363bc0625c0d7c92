// A communicator's sequence numbers (coll/schedule/sequence.h): what a call takes, a block for a
// call of many segments, a declined vote's number given back, and readers on another thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "sequence.h"

using twohop::Sequence;

TEST(Sequence, TakesAboveTheAgreedBase) {
    Sequence s;
    EXPECT_EQ(s.last(), 0u);
    s.start_at(1000);
    EXPECT_EQ(s.last(), 1000u);
    EXPECT_EQ(s.take(), 1001u);
    EXPECT_EQ(s.take(), 1002u);
    EXPECT_EQ(s.last(), 1002u);
}

TEST(Sequence, ReservesABlockForOneCall) {
    Sequence s;
    s.start_at(7);
    // A call of 5 segments uses 8..12; the next call starts at 13.
    EXPECT_EQ(s.reserve(5), 7u);
    EXPECT_EQ(s.last(), 12u);
    EXPECT_EQ(s.take(), 13u);
    EXPECT_EQ(s.reserve(0), 13u); // no segments: nothing taken
    EXPECT_EQ(s.last(), 13u);
}

TEST(Sequence, SixtyFourBitBlocks) {
    Sequence s;
    const uint64_t base = (uint64_t(1) << 40) + 3; // past 32 bits: no truncation anywhere
    s.start_at(base);
    const uint64_t n = (uint64_t(1) << 33) + 1; // a block larger than 2^32 segments
    EXPECT_EQ(s.reserve(n), base);
    EXPECT_EQ(s.last(), base + n);
    EXPECT_EQ(s.take(), base + n + 1);
}

TEST(Sequence, GivesBackOnlyTheLastNumber) {
    Sequence s;
    s.start_at(41);
    const uint64_t v = s.take(); // a vote's round
    EXPECT_EQ(v, 42u);
    EXPECT_TRUE(s.give_back(v)); // declined: the host path runs the call under the same number
    EXPECT_EQ(s.last(), 41u);
    EXPECT_EQ(s.take(), 42u);
    // Not the last number taken: refused, nothing changes (numbers are never handed out twice).
    EXPECT_FALSE(s.give_back(41));
    EXPECT_FALSE(s.give_back(43));
    EXPECT_EQ(s.last(), 42u);
    Sequence z;
    EXPECT_FALSE(z.give_back(0)); // nothing taken
    EXPECT_EQ(z.last(), 0u);
}

TEST(Sequence, RewindUndoesAReservedBlock) {
    Sequence s;
    s.start_at(10);
    const uint64_t v = s.take(); // the vote's round: 11
    EXPECT_TRUE(s.give_back(v)); // the node said yes: the call runs from 11
    EXPECT_EQ(s.reserve(4), 10u); // 11..14
    EXPECT_FALSE(s.give_back(v)); // not the last number any more
    s.rewind(v); // the call failed before it ran: its failure is recorded under 11
    EXPECT_EQ(s.last(), 10u);
    EXPECT_EQ(s.take(), 11u);
}

// One writer, one reader on another thread (the proxy's failure checks): the reader sees the
// numbers only grow and never past the writer's last.
TEST(Sequence, ReaderOnAnotherThreadSeesThemGrow) {
    Sequence s;
    s.start_at(5);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> decreases{0}, seen{0};
    std::thread reader([&] {
        uint64_t prev = 0;
        while (!stop.load(std::memory_order_acquire)) {
            const uint64_t v = s.last();
            if (v < prev) decreases.fetch_add(1);
            prev = v;
            seen.fetch_add(1, std::memory_order_relaxed);
        }
    });
    while (seen.load(std::memory_order_relaxed) == 0) std::this_thread::yield(); // reading
    const uint64_t n = 200000;
    for (uint64_t i = 0; i < n; ++i) {
        if (i % 3 == 0) {
            s.reserve(4);
        } else {
            s.take();
        }
    }
    stop.store(true, std::memory_order_release);
    reader.join();
    EXPECT_EQ(decreases.load(), 0u);
    EXPECT_GT(seen.load(), 0u);
    // 66667 blocks of 4 and 133333 single numbers above the base.
    EXPECT_EQ(s.last(), 5u + 66667u * 4u + 133333u);
}
