// GPU-posted operations without a GPU: the descriptor ring with a host thread standing in for
// the GPU, and the proxy thread's lifecycle (jobs from several threads, no spin when idle,
// stop with a job in flight), and the arrival counters of the GPU-posted call kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <limits>
#include <map>
#include <pthread.h>
#include <sys/prctl.h>
#include <thread>
#include <vector>

#include "doorbell_ring.h"
#include "posted_call.h"
#include "proxy.h"
#include "wake_lead.h"

using twohop::DoorbellRing;
using twohop::PostDesc;
using twohop::Proxy;
using twohop::WakeLead;

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

// Tools tell the proxy from the application's threads by its name (top -H, gdb,
// /proc/<pid>/task/*/comm; the benchmarks' scheduler account, mpi_tests/thread_sched.h).
TEST(Proxy, ThreadIsNamed) {
    Proxy p;
    ASSERT_EQ(p.run([] { return 3; }), 3);
    char name[32] = {0};
    ASSERT_EQ(pthread_getname_np(p.handle(), name, sizeof(name)), 0);
    EXPECT_STREQ(name, "twohop-proxy");
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

// run(..., near): the caller sleeps until `near`, spins at most Proxy::kNearSpin, then sleeps
// again until the end: a job that stays near for 150 ms costs the caller no more than that.
TEST(Proxy, CallerWokenNearTheEndSpinsBoundedThenSleeps) {
    Proxy p;
    std::atomic<bool> near{false};
    const auto t0 = std::chrono::steady_clock::now();
    const auto near_at = t0 + std::chrono::milliseconds(50);
    const auto end_at = t0 + std::chrono::milliseconds(200);
    timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    int alongside_calls = 0;
    const int st = p.run(
        [&] {
            const auto now = std::chrono::steady_clock::now();
            if (now >= near_at) near.store(true);
            return now >= end_at ? 5 : Proxy::kPending;
        },
        [&] { return ++alongside_calls < 3; }, &near);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    EXPECT_EQ(st, 5);
    EXPECT_EQ(alongside_calls, 3);
    EXPECT_EQ(p.near_wakes(), 1u); // woken once for `near`, then again at the end
    EXPECT_GE(std::chrono::steady_clock::now(), end_at);
    const double caller = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
    EXPECT_LT(caller, 0.02) << "the caller used " << caller << " s of CPU";
}

// run(..., idle): the waiting caller does work the job's end depends on (a blocking call's MPI
// progress, which moves another call a peer waits for before it joins this one): a job that
// ends only after the caller's idle() ran 5 times ends, asleep (near given) or not. With idle()
// saying nothing more waits, the caller wakes about every Proxy::kIdlePeriod: a 200 ms job
// costs it little CPU.
TEST(Proxy, WaitingCallerRunsIdleWork) {
    Proxy p;
    for (const bool with_near : {true, false}) {
        std::atomic<int> idles{0};
        std::atomic<bool> near{false};
        const int st = p.run([&] { return idles.load() >= 5 ? 3 : Proxy::kPending; }, nullptr,
                             with_near ? &near : nullptr, nullptr, [&] {
                                 idles.fetch_add(1);
                                 return true;
                             });
        EXPECT_EQ(st, 3);
        EXPECT_GE(idles.load(), 5);
    }
    std::atomic<int> idles{0};
    std::atomic<bool> near{false};
    const auto end_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    const int st = p.run(
        [&] { return std::chrono::steady_clock::now() >= end_at ? 0 : Proxy::kPending; },
        nullptr, &near, nullptr, [&] {
            idles.fetch_add(1);
            return false;
        });
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    EXPECT_EQ(st, 0);
    EXPECT_GE(idles.load(), 20); // about 200 at one per millisecond; a loaded machine wakes later
    EXPECT_LE(idles.load(), 400);
    const double caller = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
    EXPECT_LT(caller, 0.05) << "the caller used " << caller << " s of CPU";
}

// run(..., near, &woke): `woke` is when the caller left its sleep: after `near` turned true
// (here, well before the end), or after the end when `near` never came.
TEST(Proxy, ReportsWhenTheCallerWoke) {
    Proxy p;
    for (const bool comes : {true, false}) {
        std::atomic<bool> near{false};
        const auto t0 = std::chrono::steady_clock::now();
        const auto near_at = t0 + std::chrono::milliseconds(20);
        const auto end_at = t0 + std::chrono::milliseconds(60);
        std::chrono::steady_clock::time_point woke{}, done{};
        const int st = p.run(
            [&] {
                const auto now = std::chrono::steady_clock::now();
                if (comes && now >= near_at) near.store(true);
                if (now < end_at) return Proxy::kPending;
                done = now;
                return 0;
            },
            nullptr, &near, &woke);
        EXPECT_EQ(st, 0);
        ASSERT_NE(woke, std::chrono::steady_clock::time_point{});
        if (comes) {
            EXPECT_GE(woke, near_at);
            EXPECT_LT(woke, done) << "woken for `near`, before the end";
            EXPECT_LT(woke, near_at + std::chrono::milliseconds(20))
                << "taken when the caller woke, not after its spin";
        } else {
            EXPECT_GE(woke, done) << "no `near`: woken by the end";
        }
    }
}

// run(..., near, woke, idle, near_nap_us): from `near` the caller naps instead of spinning
// (coll_twohop_posted_wake_nap_us). The job ends 5 ms after `near`, beyond Proxy::kNearSpin
// (250 us): a spinning caller burns those 250 us, a napping one a few us per nap. Calls with
// naps of 50 us and spinning calls alternate five times; the napping calls' median CPU time is
// at least 100 us below the spinning calls' (the rest of run() costs both the same, tens of us
// on a loaded machine). The caller's timer slack is back to what it was after each call.
TEST(Proxy, CallerNapsNearTheEndInsteadOfSpinning) {
    Proxy p;
    EXPECT_EQ(p.run([] { return 0; }), 0); // the thread started before the timed calls
    const int slack_before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    std::vector<double> cpu_us[2]; // [0]: napping, [1]: spinning
    for (int call = 0; call < 10; ++call) {
        const int nap_us = call % 2 == 0 ? 50 : 0;
        std::atomic<bool> near{false};
        const auto t0 = std::chrono::steady_clock::now();
        const auto near_at = t0 + std::chrono::milliseconds(10);
        const auto end_at = near_at + std::chrono::milliseconds(5);
        const double cpu0 = thread_cpu_s(pthread_self());
        const int st = p.run(
            [&] {
                const auto now = std::chrono::steady_clock::now();
                if (now >= near_at) near.store(true);
                return now >= end_at ? 7 : Proxy::kPending;
            },
            nullptr, &near, nullptr, {}, nap_us);
        const double cpu1 = thread_cpu_s(pthread_self());
        EXPECT_EQ(st, 7);
        EXPECT_GE(std::chrono::steady_clock::now(), end_at);
        EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), slack_before);
        cpu_us[call % 2].push_back(1e6 * (cpu1 - cpu0));
    }
    for (auto &v : cpu_us) std::sort(v.begin(), v.end());
    const double napping = cpu_us[0][2], spinning = cpu_us[1][2];
    RecordProperty("napping_caller_cpu_us", static_cast<int>(napping));
    RecordProperty("spinning_caller_cpu_us", static_cast<int>(spinning));
    EXPECT_LT(napping + 100.0, spinning)
        << "median CPU of the caller: napping " << napping << " us, spinning " << spinning << " us";
}

// The wake lead (wake_lead.h): a late caller raises it by its lateness plus the target, a long
// spin lowers it by half the excess, it stays within [0, max], and target 0 keeps it fixed.
TEST(WakeLead, GrowsByTheLatenessShrinksByHalfTheExcessWithinBounds) {
    WakeLead w(50, 10, 200);
    EXPECT_FLOAT_EQ(w.lead_us(), 50);
    EXPECT_FLOAT_EQ(w.update(40), 35);  // spun 30 over the target: -15
    EXPECT_FLOAT_EQ(w.update(10), 35);  // on target: unchanged
    EXPECT_FLOAT_EQ(w.update(5), 35);   // below the target, not late: unchanged
    EXPECT_FLOAT_EQ(w.update(-20), 65); // 20 late: +20 + 10
    EXPECT_FLOAT_EQ(w.update(-500), 200); // clamped to max
    for (int i = 0; i < 64; ++i) w.update(1000);
    EXPECT_FLOAT_EQ(w.lead_us(), 0); // clamped to 0
    WakeLead fixed(50, 0, 200);
    EXPECT_FLOAT_EQ(fixed.update(-100), 50);
    EXPECT_FLOAT_EQ(fixed.update(300), 50);
    WakeLead low_max(80, 10, 20); // max below the start: the start is the max
    EXPECT_FLOAT_EQ(low_max.update(-30), 80);
    // Woken at the last gate already (the lead covered the predicted tail): lateness cannot be
    // helped by a longer lead, which must not wind up; a long spin still lowers it.
    WakeLead at_gate(50, 10, 200);
    for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(at_gate.update(-40, false), 50);
    EXPECT_FLOAT_EQ(at_gate.update(30, false), 40);
}

// Settles where the caller neither oversleeps nor spins much, for a host whose wake-ups come
// `latency` late: a stand-in for one size class, the end always 100 us after the last gate.
TEST(WakeLead, SettlesNearTheWakeUpLatencyPlusTheTarget) {
    for (const float latency : {5.0f, 30.0f, 80.0f}) {
        WakeLead w(50, 10, 200);
        float late_sum = 0, spin_sum = 0;
        for (int call = 0; call < 200; ++call) {
            const float woke = 100 - w.lead_us() + latency; // after the last gate, us
            const float spin = 100 - woke;
            if (call >= 100) { // settled
                late_sum += spin < 0 ? -spin : 0;
                spin_sum += spin > 0 ? spin : 0;
            }
            w.update(spin);
        }
        EXPECT_NEAR(w.lead_us(), latency + 10, 1.0) << "latency " << latency;
        EXPECT_EQ(late_sum, 0) << "latency " << latency;
        EXPECT_LT(spin_sum / 100, 11) << "latency " << latency;
    }
}

// The quantile controller (coll_twohop_posted_wake_quantile): the lead is the nearest-rank
// percentile of the last kWindow needed leads (had - spin), the start lead until kMinSamples
// calls, clamped to [0, max]; it takes precedence over the spin target.
TEST(WakeLead, QuantileOfTheLastCallsNeededLeads) {
    WakeLead w(50, 10, 200, 95);
    // Needed leads 1..3: still the start lead (fewer than kMinSamples).
    for (int i = 1; i < WakeLead::kMinSamples; ++i) {
        EXPECT_FLOAT_EQ(w.update(50.0f - static_cast<float>(i), true, 50), 50) << i;
    }
    // The 4th: the 95th percentile of {1, 2, 3, 4} by nearest rank (ceil(3.8) = 4th) is 4.
    EXPECT_FLOAT_EQ(w.update(46, true, 50), 4);
    // Fill the window with needed leads 1..64 (had 100, spin 100 - k): p95 = the 61st smallest.
    WakeLead f(50, 0, 200, 95);
    for (int k = 1; k <= WakeLead::kWindow; ++k) f.update(100.0f - k, true, 100);
    EXPECT_FLOAT_EQ(f.lead_us(), 61);
    // Five late callers (negative spin) needed 100 - (-150) = 250 each: the window's 61st
    // smallest is now one of them, clamped to the largest lead, 200.
    for (int i = 0; i < 5; ++i) f.update(-150, true, 100);
    EXPECT_FLOAT_EQ(f.lead_us(), 200);
    // They leave the window after kWindow calls; woken at the last gate counts the same (had =
    // the predicted tail), and needed leads below 0 clamp to 0.
    for (int i = 0; i < WakeLead::kWindow; ++i) f.update(30, false, 20);
    EXPECT_FLOAT_EQ(f.lead_us(), 0);
    // Nearest rank where q n / 100 is whole: 20 samples 1..20, the 19th smallest (not the 20th).
    WakeLead twenty(50, 0, 200, 95);
    for (int k = 1; k <= 20; ++k) twenty.update(0, true, static_cast<float>(k));
    EXPECT_FLOAT_EQ(twenty.lead_us(), 19);
    // Non-finite samples are ignored (not counted: three finite ones keep the start lead);
    // quantiles outside 1..99 clamp.
    WakeLead nan(50, 0, 200, 95);
    for (int k = 1; k <= 3; ++k) nan.update(0, true, static_cast<float>(k));
    nan.update(std::numeric_limits<float>::quiet_NaN(), true, 10);
    nan.update(0, true, std::numeric_limits<float>::infinity());
    EXPECT_FLOAT_EQ(nan.lead_us(), 50);
    EXPECT_FLOAT_EQ(nan.update(0, true, 4), 4);
    WakeLead hi(50, 0, 200, 1000);
    for (int k = 1; k <= 10; ++k) hi.update(0, true, static_cast<float>(k));
    EXPECT_FLOAT_EQ(hi.lead_us(), 10); // q 99 of 1..10: the 10th
}

// The lead a call had (lead_had_us): from when its caller was signalled -- `near` a lead
// before the predicted end, `near` at the gate, or the end when the tail ran short.
TEST(WakeLead, LeadHadCountsFromWhenTheCallerWasSignalled) {
    EXPECT_DOUBLE_EQ(twohop::lead_had_us(100, 80, 120), 20);  // near at tail - lead (20)
    EXPECT_DOUBLE_EQ(twohop::lead_had_us(100, 0, 120), 100);  // near at the gate
    EXPECT_DOUBLE_EQ(twohop::lead_had_us(100, -1, 50), 50);   // never near: the end, 50 in
    EXPECT_DOUBLE_EQ(twohop::lead_had_us(100, 70, 60), 40);   // near after the end: the end
    // Minus the spin: calls that ended 40 us after the gate (100 predicted), before `near`,
    // whose callers then woke 5 late, needed 100 - 40 + 5 = 65.
    WakeLead w(50, 0, 200, 95);
    const float had = static_cast<float>(twohop::lead_had_us(100, -1, 40));
    for (int i = 0; i < 4; ++i) w.update(-5, true, had);
    EXPECT_FLOAT_EQ(w.lead_us(), 65);
}

// Against a host whose wake-ups come late by a spread (a stand-in with a fixed pseudo-random
// sequence), the q = 95 controller wakes about 5 % of the calls late and spins less than a
// lead fixed at that spread's top.
TEST(WakeLead, QuantileControllerWakesAboutTheChosenShareLate) {
    WakeLead w(50, 0, 200, 95);
    uint32_t x = 12345;
    auto latency = [&x]() { // 5..45 us, skewed toward the low end
        x = x * 1664525u + 1013904223u;
        const float u = static_cast<float>(x >> 8) / static_cast<float>(1u << 24);
        return 5.0f + 40.0f * u * u;
    };
    int late = 0, calls = 0;
    float spin_sum = 0, fixed_spin_sum = 0;
    for (int call = 0; call < 2000; ++call) {
        const float lead = w.lead_us();
        const float lat = latency();
        const float spin = lead - lat; // woken `lead` before the end, `lat` late
        if (call >= 200) {
            ++calls;
            late += spin < 0;
            spin_sum += spin > 0 ? spin : 0;
            fixed_spin_sum += 45.0f - lat; // a lead fixed at the top: never late
        }
        w.update(spin, true, lead);
    }
    const double share = static_cast<double>(late) / calls;
    EXPECT_GT(share, 0.01);
    EXPECT_LT(share, 0.12);
    EXPECT_LT(spin_sum, 0.95f * fixed_spin_sum);
    // Near the latency's 95th percentile: 5 + 40 * 0.95^2 = 41.1 us.
    EXPECT_NEAR(w.lead_us(), 41.1f, 4.0f);
}

// prewake() wakes an idle proxy for a bounded spin: it then sleeps again, and runs jobs.
TEST(Proxy, PrewakeSpinsBrieflyThenSleeps) {
    Proxy p;
    p.prewake(); // no thread yet: nothing happens
    EXPECT_FALSE(p.running());
    ASSERT_EQ(p.run([] { return 1; }), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // asleep now
    const pthread_t h = p.handle();
    const double c0 = thread_cpu_s(h);
    for (int i = 0; i < 5; ++i) {
        p.prewake();
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
    }
    const double used = thread_cpu_s(h) - c0;
    // Each prewake woke the sleeping proxy for one spin (two may merge on a loaded machine).
    EXPECT_GE(p.prewake_spins(), 3u);
    EXPECT_LE(p.prewake_spins(), 5u);
    EXPECT_LT(used, 0.05) << "5 prewakes cost the proxy " << used << " s of CPU in 0.3 s";
    p.prewake();
    EXPECT_EQ(p.run([] { return 2; }), 2); // a job queued during (or after) the prewoken spin
    EXPECT_EQ(p.jobs_done(), 2u);
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

// ---- PostedJob: the host side of a GPU-posted call, with a fake transport and a host thread
// standing in for the GPU (it posts descriptors as "kernels" finish and drains at the end).
#include "posted_job.h"
#include "twohop_status.h"

namespace {

class FakeBackend : public twohop::PostedBackend {
  public:
    explicit FakeBackend(uint64_t nseg) : posted_at(nseg, 0), retired(nseg, false) {}
    int progress() override { return fail_progress; }
    int post(const PostDesc &d) override {
        posts.push_back(d.segment);
        posted_at[d.segment] = ++clock;
        return 0;
    }
    // A segment's transfer completes 3 progress rounds after it was posted.
    bool done(uint64_t seg) override { return posted_at[seg] && ++ticks[seg] >= 3; }
    void retire(uint64_t seg) override {
        retired[seg] = true;
        order.push_back(seg);
    }
    void gates() override { ++gate_calls; }
    int drained() override { return drained_status ? drained_status : gpu_done.load() ? 1 : 0; }

    std::vector<uint64_t> posted_at, posts, order;
    std::vector<bool> retired;
    std::map<uint64_t, int> ticks;
    uint64_t clock = 0, gate_calls = 0;
    int fail_progress = 0;
    int drained_status = 0; // what drained() returns instead (a failure found at the end)
    std::atomic<bool> gpu_done{false};
};

constexpr int kPending = -1;

} // namespace

TEST(PostedJob, PostsAndRetiresEverySegmentInOrderThenWaitsForTheGpu) {
    const uint64_t nseg = 37, s0 = 500;
    DoorbellRing ring{};
    FakeBackend be(nseg);
    twohop::PostedJob job(&ring, &be, s0, nseg, 0, -99);
    std::thread gpu([&] { // the "GPU": a descriptor per segment, a doorbell every 4 and at the end
        for (uint64_t k = 0; k < nseg; ++k) {
            const bool last = k + 1 == nseg;
            while (!twohop::post_host(&ring, k, PostDesc{s0 + 1 + k, uint32_t(k), last}, (k + 1) % 4 == 0 || last)) {
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        be.gpu_done = true; // hop 3 of the last segment finished
    });
    int st = kPending;
    while ((st = job.step(kPending)) == kPending) {
    }
    gpu.join();
    EXPECT_EQ(st, 0);
    ASSERT_EQ(be.order.size(), nseg);
    for (uint64_t k = 0; k < nseg; ++k) {
        EXPECT_EQ(be.posts[k], k);
        EXPECT_EQ(be.order[k], k);
    }
    EXPECT_EQ(job.retired(), nseg);
    EXPECT_GE(job.doorbells(), 1u);
    EXPECT_LE(job.doorbells(), (nseg + 3) / 4);
    EXPECT_GT(be.gate_calls, 0u);
}

TEST(PostedJob, OutOfOrderDescriptorIsAnError) {
    DoorbellRing ring{};
    FakeBackend be(4);
    twohop::PostedJob job(&ring, &be, 10, 4, 0, -99);
    ASSERT_TRUE(twohop::post_host(&ring, 0, PostDesc{12, 1, 0}, true)); // segment 1 first
    EXPECT_EQ(job.step(kPending), twohop::kPostedBadDescriptor);
}

TEST(PostedJob, TransportFailureEndsTheJob) {
    DoorbellRing ring{};
    FakeBackend be(4);
    twohop::PostedJob job(&ring, &be, 0, 4, 0, -99);
    EXPECT_EQ(job.step(kPending), kPending);
    be.fail_progress = 7;
    EXPECT_EQ(job.step(kPending), 7);
}

/* A kernel whose wait timed out still ends the call (its last block writes `drained`): the
 * backend reports TWOHOP_ERR_TIMEOUT (7, positive) from drained(), which must end the job with
 * that status, never as a success. */
TEST(PostedJob, ErrorFromDrainedIsNotTakenForTheEnd) {
    DoorbellRing ring{};
    FakeBackend be(2);
    twohop::PostedJob job(&ring, &be, 0, 2, 0, -99);
    for (uint64_t k = 0; k < 2; ++k) {
        ASSERT_TRUE(twohop::post_host(&ring, k, PostDesc{k + 1, uint32_t(k), k == 1}, true));
    }
    be.drained_status = TWOHOP_ERR_TIMEOUT;
    int st;
    while ((st = job.step(kPending)) == kPending) {
    }
    EXPECT_EQ(st, TWOHOP_ERR_TIMEOUT);
    be.drained_status = -5; // a negative code likewise
    twohop::PostedJob job2(&ring, &be, 0, 0, 0, -99);
    EXPECT_EQ(job2.step(kPending), -5);
}

TEST(PostedJob, NoDescriptorWithinTheTimeoutIsATimeout) {
    DoorbellRing ring{};
    FakeBackend be(2);
    /* t0 before the job: its clock starts in its constructor, so a t0 taken after could see
     * the timeout fire a few nanoseconds short of 50 ms. */
    const auto t0 = std::chrono::steady_clock::now();
    twohop::PostedJob job(&ring, &be, 0, 2, 0.05, -99);
    int st;
    while ((st = job.step(kPending)) == kPending) {
    }
    EXPECT_EQ(st, -99);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
}

TEST(PostedJob, RunsOnTheProxyThread) {
    const uint64_t nseg = 9;
    DoorbellRing ring{};
    FakeBackend be(nseg);
    twohop::PostedJob job(&ring, &be, 0, nseg, 0, -99);
    for (uint64_t k = 0; k < nseg; ++k) {
        ASSERT_TRUE(twohop::post_host(&ring, k, PostDesc{k + 1, uint32_t(k), k + 1 == nseg}, true));
    }
    be.gpu_done = true;
    Proxy p;
    EXPECT_EQ(p.run([&] { return job.step(Proxy::kPending); }), 0);
    EXPECT_EQ(job.retired(), nseg);
}

// The call kernel's arrival counters (posted_call.h), with threads standing in for the blocks
// of one half of the grid: for every use of a buffer set exactly one block is the last (the
// one whose arrival completes the count), and a counter left by an earlier call (another tag)
// starts again from zero without a reset.
TEST(PostedCallCounters, ExactlyOneLastArrivalPerUseWhateverTheCounterHeldBefore) {
    constexpr int kBlocks = 8, kUses = 50;
    for (uint64_t s0 : {uint64_t(0), uint64_t(41), uint64_t(0xffffffffull), uint64_t(1) << 40}) {
        // Stale values: zeroed memory, a finished earlier call, an abandoned one mid-count.
        for (uint64_t stale : {uint64_t(0), (uint64_t(7) << 32) | 400, (uint64_t(9) << 32) | 3}) {
            std::atomic<uint64_t> ctr{stale};
            const uint64_t tag = twohop::arrival_tag(s0);
            for (int use = 0; use < kUses; ++use) {
                std::atomic<int> lasts{0};
                std::vector<std::thread> blocks;
                for (int b = 0; b < kBlocks; ++b) {
                    blocks.emplace_back([&] {
                        uint64_t seen = ctr.load(), next;
                        do {
                            next = twohop::arrival_next(seen, tag);
                        } while (!ctr.compare_exchange_weak(seen, next));
                        if (twohop::arrival_last(next, use, kBlocks)) lasts.fetch_add(1);
                    });
                }
                for (auto &t : blocks) t.join();
                ASSERT_EQ(lasts.load(), 1) << "s0 " << s0 << " stale " << stale << " use " << use;
                // The last arrival is the one that completed the count: no arrival is left.
                EXPECT_EQ(ctr.load() & 0xffffffffull, uint64_t(use + 1) * kBlocks);
                EXPECT_EQ(ctr.load() >> 32, tag);
            }
        }
    }
}

TEST(DoorbellRing, ResetClearsTheFaultWord) {
    DoorbellRing ring{};
    ring.fault = 1;
    ring.drained = 1;
    ring.gate_start = ring.gate_finish = 5;
    twohop::reset(&ring);
    EXPECT_EQ(ring.fault, 0u);
    EXPECT_EQ(ring.drained, 0u);
    EXPECT_EQ(ring.gate_start + ring.gate_finish, 0u);
}
