// GPU-posted operations without a GPU: the descriptor ring with a host thread standing in for
// the GPU, and the proxy thread's lifecycle (jobs from several threads, no spin when idle,
// stop with a job in flight).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <pthread.h>
#include <thread>
#include <vector>

#include "doorbell_ring.h"
#include "proxy.h"

using twohop::DoorbellRing;
using twohop::PostDesc;
using twohop::Proxy;

namespace {

// Producer thread posts n descriptors, ringing the bell every k and at the last one; the
// consumer must see every descriptor exactly once, in order, and no more doorbells than rung.
void ring_roundtrip(uint64_t n, uint64_t k) {
    DoorbellRing ring{};
    std::thread producer([&] {
        for (uint64_t i = 0; i < n; ++i) {
            const bool bell = (i + 1) % k == 0 || i + 1 == n;
            const PostDesc d{1000 + i, static_cast<uint32_t>(i), i + 1 == n ? 1u : 0u};
            while (!twohop::post_host(&ring, i, d, bell)) std::this_thread::yield();
        }
    });
    uint64_t seen = 0, bells = 0;
    PostDesc got[16];
    while (seen < n) {
        const uint32_t m = twohop::consume(&ring, got, 16, &bells);
        for (uint32_t j = 0; j < m; ++j, ++seen) {
            ASSERT_EQ(got[j].seq, 1000 + seen);
            ASSERT_EQ(got[j].segment, static_cast<uint32_t>(seen));
            ASSERT_EQ(got[j].last, seen + 1 == n ? 1u : 0u);
        }
    }
    producer.join();
    EXPECT_EQ(seen, n);
    EXPECT_LE(bells, (n + k - 1) / k);
    EXPECT_GE(bells, 1u);
    PostDesc extra;
    EXPECT_EQ(twohop::consume(&ring, &extra, 1), 0u);
}

double thread_cpu_s(pthread_t t) {
    clockid_t id;
    if (pthread_getcpuclockid(t, &id) != 0) return -1;
    timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

} // namespace

TEST(DoorbellRing, EveryDescriptorOnceInOrder) { ring_roundtrip(10000, 1); }
TEST(DoorbellRing, BatchedDoorbells) { ring_roundtrip(10001, 4); }
TEST(DoorbellRing, WrapsManyTimesWithBackPressure) { ring_roundtrip(100000, 7); }

TEST(DoorbellRing, FullRingRefusesTheProducer) {
    DoorbellRing ring{};
    for (uint64_t i = 0; i < DoorbellRing::kSlots; ++i) {
        ASSERT_TRUE(twohop::post_host(&ring, i, PostDesc{i, 0, 0}, true));
    }
    EXPECT_FALSE(twohop::post_host(&ring, DoorbellRing::kSlots, PostDesc{}, true));
    PostDesc d;
    ASSERT_EQ(twohop::consume(&ring, &d, 1), 1u);
    EXPECT_TRUE(twohop::post_host(&ring, DoorbellRing::kSlots, PostDesc{}, true));
}

TEST(Proxy, RunsJobsFromSeveralThreads) {
    Proxy p;
    EXPECT_FALSE(p.running()); // started on first use only
    std::vector<std::thread> callers;
    std::atomic<int> ok{0};
    for (int t = 0; t < 4; ++t) {
        callers.emplace_back([&, t] {
            for (int job = 0; job < 25; ++job) {
                int steps = 0;
                const int want = 3 + (t + job) % 5;
                const int st = p.run([&] { return ++steps == want ? t * 100 + job : Proxy::kPending; });
                if (st == t * 100 + job && steps == want) ++ok;
            }
        });
    }
    for (auto &c : callers) c.join();
    EXPECT_EQ(ok.load(), 100);
    EXPECT_EQ(p.jobs_done(), 100u);
    EXPECT_TRUE(p.running());
}

TEST(Proxy, SleepsWhenIdle) {
    Proxy p;
    ASSERT_EQ(p.run([] { return 7; }), 7);
    const pthread_t h = p.handle();
    const double c0 = thread_cpu_s(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double used = thread_cpu_s(h) - c0;
    EXPECT_GE(c0, 0);
    EXPECT_LT(used, 0.02) << "the idle proxy used " << used << " s of CPU in 0.3 s";
}

TEST(Proxy, CallerSleepsWhileTheJobRuns) {
    Proxy p;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    const int st = p.run([&] {
        return std::chrono::steady_clock::now() >= until ? 0 : Proxy::kPending;
    });
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    EXPECT_EQ(st, 0);
    const double caller = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
    EXPECT_LT(caller, 0.02) << "the waiting caller used " << caller << " s of CPU";
}

TEST(Proxy, StopWithAJobInFlightEndsItWithAnError) {
    Proxy p;
    std::atomic<bool> started{false};
    int status = 0;
    std::thread caller([&] {
        status = p.run([&] {
            started = true;
            return Proxy::kPending; // never finishes on its own
        });
    });
    while (!started) std::this_thread::yield();
    p.stop();
    caller.join();
    EXPECT_EQ(status, Proxy::kStopped);
    EXPECT_FALSE(p.running());
    EXPECT_EQ(p.run([] { return 0; }), Proxy::kStopped); // refused after stop, no hang
    p.stop(); // idempotent
}
