// MpiHandOff (coll/schedule/mpi_handoff.h): when the proxy thread leaves the asynchronous calls
// to threads inside MPI, on a clock the test supplies (ns).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "mpi_handoff.h"

using twohop::MpiHandOff;

namespace {
constexpr int64_t kWindow = 20000; // the engine's 20 us
constexpr int64_t kStart = 1000000000;
} // namespace

TEST(MpiHandOff, ProxyDrivesWhenNoThreadWasInsideMpi) {
    MpiHandOff h;
    EXPECT_FALSE(h.mpi_drives(kStart, kWindow));
}

TEST(MpiHandOff, LeavesTheCallsToMpiWithinTheWindowOfTheLastPass) {
    MpiHandOff h;
    EXPECT_FALSE(h.mpi_drives(kStart, kWindow));
    h.pass();
    EXPECT_TRUE(h.mpi_drives(kStart + 100, kWindow)); // seen moving now
    EXPECT_TRUE(h.mpi_drives(kStart + 100 + kWindow - 1, kWindow));
    EXPECT_FALSE(h.mpi_drives(kStart + 100 + kWindow, kWindow)); // no pass for a window
    h.pass();
    EXPECT_TRUE(h.mpi_drives(kStart + 50000, kWindow));
    // Passes keep coming: the proxy keeps yielding.
    for (int64_t t = kStart + 50000; t < kStart + 500000; t += 5000) {
        h.pass();
        EXPECT_TRUE(h.mpi_drives(t, kWindow)) << t;
    }
}

TEST(MpiHandOff, LeftHandsOverAtOnceAndTheNextPassTakesItBack) {
    MpiHandOff h;
    h.pass();
    EXPECT_TRUE(h.mpi_drives(kStart, kWindow));
    h.left();
    EXPECT_FALSE(h.mpi_drives(kStart + 1, kWindow)); // not a window later
    EXPECT_FALSE(h.mpi_drives(kStart + 2, kWindow));
    h.pass(); // a thread entered MPI again (e.g. MPI_Wait)
    EXPECT_TRUE(h.mpi_drives(kStart + 3, kWindow));
    h.left();
    h.left(); // twice: still one mark
    EXPECT_FALSE(h.mpi_drives(kStart + 4, kWindow));
    h.pass();
    EXPECT_TRUE(h.mpi_drives(kStart + 5, kWindow));
}

TEST(MpiHandOff, AFirstLookAfterAPauseWaitsOneWindowAtMost) {
    MpiHandOff h;
    h.pass(); // long before the proxy's first look
    EXPECT_TRUE(h.mpi_drives(kStart, kWindow));
    EXPECT_FALSE(h.mpi_drives(kStart + kWindow, kWindow));
}

TEST(MpiHandOff, PassesFromSeveralThreadsAreSeenAsMoving) {
    MpiHandOff h;
    std::atomic<bool> stop{false};
    std::atomic<long> done{0}; // passes completed (the test's own count)
    auto passer = [&] {
        while (!stop.load()) {
            h.pass();
            done.fetch_add(1);
        }
    };
    std::thread a(passer), b(passer);
    // Looks a window apart on the test's clock, each after both threads passed a few times:
    // each look sees the count moving (a lost count of racing plain stores may hide one).
    int drives = 0;
    for (int i = 0; i < 50; ++i) {
        const long before = done.load();
        while (done.load() < before + 4) std::this_thread::yield();
        drives += h.mpi_drives(kStart + int64_t(i) * 10 * kWindow, kWindow) ? 1 : 0;
    }
    stop.store(true);
    a.join();
    b.join();
    EXPECT_GE(drives, 45);
    // The passes stopped: the first look may still see the last ones as new, a window later
    // the proxy drives.
    (void)h.mpi_drives(kStart + 1000 * kWindow, kWindow);
    EXPECT_FALSE(h.mpi_drives(kStart + 1001 * kWindow, kWindow));
}
