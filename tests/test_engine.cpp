// The engine's queue of calls in flight (coll/schedule/engine.h) without mpirun: a communicator
// of one rank (its own shared-memory segment, no transport) and fake jobs that wait on a gate
// the test opens, standing in for the peers' flags. Checks the order in which calls end, that
// each done function runs once, the start's first pass before a call is queued (a call that
// ends there never enters the queue or the registry), failures and timeouts, and a second
// thread advancing the queue while calls start.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "comm_state.h"
#include "engine.h"
#include "node_shm.h"
#include "stream_call.h"
#include "topology.h"
#include "twohop_status.h"

namespace {

// Pending until *gate is set (no step meanwhile, as a job whose peers have not arrived), then
// ends with `result`. advances counts every call of advance().
class GatedJob : public twohop::Job {
  public:
    GatedJob(const std::atomic<bool> *gate, int result, std::atomic<int> *advances = nullptr)
        : gate_(gate), result_(result), advances_(advances) {}
    int advance() override {
        if (advances_) advances_->fetch_add(1);
        if (gate_ && !gate_->load(std::memory_order_acquire)) return TWOHOP_PENDING;
        ++steps_;
        return result_;
    }

  private:
    const std::atomic<bool> *gate_;
    int result_;
    std::atomic<int> *advances_;
};

using End = std::pair<int, int>; // (call id, status)

// The done functions' record: which call ended with which status, in order.
struct Ends {
    std::mutex m;
    std::vector<std::pair<int, int>> v; // (call id, status)
    void add(int id, int status) {
        std::lock_guard<std::mutex> g(m);
        v.push_back({id, status});
    }
    size_t size() {
        std::lock_guard<std::mutex> g(m);
        return v.size();
    }
};
struct Ctx {
    Ends *ends;
    int id;
};
void on_done(void *ctx, int status, const char *) {
    auto *c = static_cast<Ctx *>(ctx);
    c->ends->add(c->id, status);
}

void no_progress() {}
void no_log(int, const char *) {}

// A communicator of one rank on a private segment, as set-up leaves one (no transport).
class Engine : public ::testing::Test {
  protected:
    void SetUp() override {
        c_.reset(new twohop_comm());
        c_->topo = twohop::build_topology({1}, 0);
        twohop::ShmLayout l;
        l.local_size = 1;
        l.depth = 2;
        l.slot_bytes = 4096;
        std::string err;
        const std::string name = "/twohop-engine-test-" + std::to_string(getpid());
        ASSERT_TRUE(c_->shm.create(name, l, &err)) << err;
        c_->shm.unlink();
        c_->host.progress = no_progress;
        c_->host.log = no_log;
        c_->async_progress = false; // no proxy thread: the test's threads drive
    }
    void TearDown() override {
        twohop::forget_comm(c_.get());
        c_.reset();
    }
    // Starts a call as a non-blocking start does (a first pass on the calling thread).
    int start(std::unique_ptr<twohop::Job> job, Ctx *ctx) {
        return twohop::submit_job(c_.get(), std::move(job), on_done, ctx, false);
    }
    static std::unique_ptr<twohop::Job> gated(const std::atomic<bool> *gate, int result = 0,
                                              std::atomic<int> *advances = nullptr) {
        return std::unique_ptr<twohop::Job>(new GatedJob(gate, result, advances));
    }
    // Advances every registered communicator until `n` calls ended (or 5 s passed).
    void progress_until(Ends &ends, size_t n) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (ends.size() < n && std::chrono::steady_clock::now() < until) {
            (void)twohop::progress_all();
        }
    }
    std::unique_ptr<twohop_comm> c_;
};

} // namespace

TEST_F(Engine, CallEndingInItsFirstPassNeverEntersTheQueue) {
    Ends ends;
    Ctx a{&ends, 1};
    ASSERT_EQ(start(gated(nullptr), &a), TWOHOP_OK);
    ASSERT_EQ(ends.size(), 1u); // completed inside the start
    EXPECT_EQ(ends.v[0], End(1, TWOHOP_OK));
    EXPECT_TRUE(c_->queue.empty());
    EXPECT_TRUE(c_->completed.empty());
    EXPECT_FALSE(c_->registered.load());
    EXPECT_EQ(twohop::progress_all(), 0); // nothing queued anywhere
}

TEST_F(Engine, PendingCallIsQueuedAndEndsThroughProgress) {
    Ends ends;
    std::atomic<bool> gate{false};
    std::atomic<int> advances{0};
    Ctx a{&ends, 1};
    ASSERT_EQ(start(gated(&gate, TWOHOP_OK, &advances), &a), TWOHOP_OK);
    EXPECT_EQ(ends.size(), 0u);
    ASSERT_EQ(c_->queue.size(), 1u);
    EXPECT_TRUE(c_->queue.front()->started); // its first pass ran before it was queued
    EXPECT_TRUE(c_->registered.load());
    const int first_pass = advances.load();
    EXPECT_GT(first_pass, 1);  // drove on as MPI progress does
    EXPECT_LT(first_pass, 40); // and gave up (kMpiRetries advances without a step)
    (void)twohop::progress_all();
    EXPECT_EQ(ends.size(), 0u);
    gate = true;
    progress_until(ends, 1);
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends.v[0], End(1, TWOHOP_OK));
    EXPECT_TRUE(c_->queue.empty());
}

TEST_F(Engine, CallsEndInCallOrderWhateverTheirGates) {
    Ends ends;
    std::atomic<bool> gates[4] = {{false}, {true}, {false}, {true}};
    Ctx ctx[4] = {{&ends, 0}, {&ends, 1}, {&ends, 2}, {&ends, 3}};
    for (int i = 0; i < 4; ++i) ASSERT_EQ(start(gated(&gates[i]), &ctx[i]), TWOHOP_OK);
    // Call 1's gate is open, but it is queued behind call 0: nothing ended.
    EXPECT_EQ(ends.size(), 0u);
    EXPECT_EQ(c_->queue.size(), 4u);
    gates[2] = true; // a later call's gate first
    for (int i = 0; i < 100; ++i) (void)twohop::progress_all();
    EXPECT_EQ(ends.size(), 0u);
    gates[0] = true;
    progress_until(ends, 4);
    ASSERT_EQ(ends.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(ends.v[i], End(i, TWOHOP_OK));
    // With the queue empty again, the next call takes the first-pass path.
    Ctx e{&ends, 4};
    ASSERT_EQ(start(gated(nullptr), &e), TWOHOP_OK);
    ASSERT_EQ(ends.size(), 5u);
    EXPECT_EQ(ends.v[4], End(4, TWOHOP_OK));
}

TEST_F(Engine, EmptyCallBehindAPendingOneEndsAfterIt) {
    Ends ends;
    std::atomic<bool> gate{false};
    Ctx a{&ends, 0}, b{&ends, 1};
    ASSERT_EQ(start(gated(&gate), &a), TWOHOP_OK);
    ASSERT_EQ(start(nullptr, &b), TWOHOP_OK); // count 0: no job
    EXPECT_EQ(ends.size(), 0u);
    gate = true;
    progress_until(ends, 2);
    ASSERT_EQ(ends.size(), 2u);
    EXPECT_EQ(ends.v[0].first, 0);
    EXPECT_EQ(ends.v[1].first, 1);
}

TEST_F(Engine, FailedCallPoisonsTheCommunicator) {
    Ends ends;
    Ctx a{&ends, 0}, b{&ends, 1};
    ASSERT_EQ(start(gated(nullptr, TWOHOP_ERR_REDUCE), &a), TWOHOP_OK);
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends.v[0].second, TWOHOP_ERR_REDUCE);
    EXPECT_EQ(c_->poisoned, TWOHOP_ERR_REDUCE);
    // Told to the node's peers through this rank's failure word.
    EXPECT_EQ(c_->shm.flags(0).failed.load(), static_cast<uint64_t>(TWOHOP_ERR_REDUCE));
    std::atomic<int> advances{0};
    ASSERT_EQ(start(gated(nullptr, TWOHOP_OK, &advances), &b), TWOHOP_OK);
    ASSERT_EQ(ends.size(), 2u);
    EXPECT_EQ(ends.v[1].second, TWOHOP_ERR_POISONED);
    EXPECT_EQ(advances.load(), 0); // never ran
}

TEST_F(Engine, QueuedCallTimesOutWithoutSteps) {
    c_->timeout_s = 0.2;
    Ends ends;
    std::atomic<bool> never{false};
    Ctx a{&ends, 0};
    ASSERT_EQ(start(gated(&never), &a), TWOHOP_OK);
    const auto t0 = std::chrono::steady_clock::now();
    progress_until(ends, 1);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends.v[0].second, TWOHOP_ERR_TIMEOUT);
    EXPECT_GE(waited, 0.15);
    EXPECT_EQ(c_->poisoned, TWOHOP_ERR_TIMEOUT);
}

TEST_F(Engine, TimeAwayFromProgressDoesNotCountAsWaiting) {
    c_->timeout_s = 0.3;
    Ends ends;
    std::atomic<bool> gate{false};
    Ctx a{&ends, 0};
    ASSERT_EQ(start(gated(&gate), &a), TWOHOP_OK);
    // The application computes for longer than the timeout without entering MPI...
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (int i = 0; i < 50; ++i) (void)twohop::progress_all();
    EXPECT_EQ(ends.size(), 0u); // ...which is not time spent waiting
    gate = true;
    progress_until(ends, 1);
    ASSERT_EQ(ends.size(), 1u);
    EXPECT_EQ(ends.v[0].second, TWOHOP_OK);
}

TEST_F(Engine, AnotherThreadsProgressWhileCallsStart) {
    // A thread inside MPI_Wait elsewhere (progress_all in a loop) while this thread starts
    // calls, half of which end in their first pass: every call ends once, in call order.
    constexpr int kCalls = 2000;
    Ends ends;
    std::vector<Ctx> ctx(kCalls);
    std::unique_ptr<std::atomic<bool>[]> gates(new std::atomic<bool>[kCalls]);
    std::atomic<bool> stop{false};
    std::thread progress([&] {
        while (!stop.load()) (void)twohop::progress_all();
    });
    for (int i = 0; i < kCalls; ++i) {
        gates[i] = i % 2 == 0;
        ctx[i] = Ctx{&ends, i};
        ASSERT_EQ(start(gated(&gates[i]), &ctx[i]), TWOHOP_OK);
        if (i % 2 == 1) gates[i] = true; // its "peers" arrive after the start
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ends.size() < kCalls && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
    }
    stop = true;
    progress.join();
    progress_until(ends, kCalls);
    ASSERT_EQ(ends.size(), static_cast<size_t>(kCalls));
    for (int i = 0; i < kCalls; ++i) {
        EXPECT_EQ(ends.v[i], End(i, TWOHOP_OK)) << "at " << i;
        if (ends.v[i].first != i) break;
    }
}
