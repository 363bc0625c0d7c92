// The host side of a stream-ordered call on several nodes (coll/schedule/stream_job.h) without
// a GPU: a host thread stands in for the application's stream (copy in, arrived, wait for the
// gate, copy out, released), a fake host job for the allreduce.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "stream_job.h"
#include "twohop_status.h"

using twohop::StreamJob;
using twohop::StreamWords;

namespace {

// Finishes with `result` after `steps` advances; doubles every element of `buf` when it ends
// with TWOHOP_OK (stands in for the allreduce on the host copy).
class FakeJob : public twohop::Job {
  public:
    FakeJob(int steps, int result, std::vector<float> *buf, int *destroyed)
        : left_(steps), result_(result), buf_(buf), destroyed_(destroyed) {}
    ~FakeJob() override {
        if (destroyed_) ++*destroyed_;
    }
    int advance() override {
        if (left_ > 0) {
            --left_;
            ++steps_;
            return TWOHOP_PENDING;
        }
        if (result_ == TWOHOP_OK && buf_) {
            for (float &x : *buf_) x *= 2;
        }
        return result_;
    }

  private:
    int left_, result_;
    std::vector<float> *buf_;
    int *destroyed_;
};

std::unique_ptr<twohop::Job> fake(int steps, int result, std::vector<float> *buf = nullptr,
                                  int *destroyed = nullptr) {
    return std::unique_ptr<twohop::Job>(new FakeJob(steps, result, buf, destroyed));
}

uint64_t load(const uint64_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }

} // namespace

TEST(StreamJob, WaitsForTheStreamThenOpensTheGate) {
    StreamWords w{};
    int starts = 0;
    StreamJob job(fake(3, TWOHOP_OK), &w, 7, [&] {
        ++starts;
        return TWOHOP_OK;
    });
    for (int i = 0; i < 5; ++i) ASSERT_EQ(job.advance(), TWOHOP_PENDING);
    EXPECT_EQ(starts, 1);       // the vote runs once, before the stream arrived
    EXPECT_FALSE(job.arrived());
    EXPECT_EQ(load(&w.gate), 0u);
    // Waiting for the application is no step (an MPI progress call gives up after a few
    // advances without one), and no timeout runs meanwhile.
    const uint64_t before = job.steps();
    EXPECT_EQ(job.advance(), TWOHOP_PENDING);
    EXPECT_EQ(job.steps(), before);
    EXPECT_TRUE(job.waiting_on_application());
    twohop::open_word(&w.arrived, 6); // an older call's token: not this one
    EXPECT_EQ(job.advance(), TWOHOP_PENDING);
    EXPECT_FALSE(job.arrived());
    twohop::open_word(&w.arrived, 7);
    int rc;
    while ((rc = job.advance()) == TWOHOP_PENDING) {
        EXPECT_EQ(load(&w.gate), 0u);
        EXPECT_FALSE(job.waiting_on_application());
    }
    EXPECT_EQ(rc, TWOHOP_OK);
    EXPECT_EQ(load(&w.gate), 7u);
    EXPECT_EQ(starts, 1);
}

TEST(StreamJob, FailedJobOpensTheGate) {
    StreamWords w{};
    twohop::open_word(&w.arrived, 1);
    StreamJob job(fake(1, TWOHOP_ERR_TRANSPORT), &w, 1, nullptr);
    EXPECT_EQ(job.advance(), TWOHOP_PENDING);
    EXPECT_EQ(job.advance(), TWOHOP_ERR_TRANSPORT);
    EXPECT_EQ(load(&w.gate), 1u);
}

TEST(StreamJob, FailedStartOpensTheGateWithoutTheJob) {
    StreamWords w{};
    int destroyed = 0;
    StreamJob job(fake(0, TWOHOP_OK, nullptr, &destroyed), &w, 3,
                  [] { return TWOHOP_ERR_PEER; });
    EXPECT_EQ(job.advance(), TWOHOP_ERR_PEER);
    EXPECT_EQ(load(&w.gate), 3u);
    EXPECT_EQ(destroyed, 1);
}

TEST(StreamJob, DroppedJobOpensTheGateAfterItsInnerJobIsGone) {
    // A timeout or a freed communicator deletes the job before it ends: the stream must not
    // wait forever, and the inner job (its transfers) goes before the gate opens.
    StreamWords w{};
    int destroyed = 0;
    {
        StreamJob job(fake(100, TWOHOP_OK, nullptr, &destroyed), &w, 9, nullptr);
        twohop::open_word(&w.arrived, 9);
        EXPECT_EQ(job.advance(), TWOHOP_PENDING);
        EXPECT_EQ(load(&w.gate), 0u);
    }
    EXPECT_EQ(destroyed, 1);
    EXPECT_EQ(load(&w.gate), 9u);
}

TEST(StreamJob, TokensCompareCyclically) {
    // Tokens compare as cuStreamWaitValue64's GEQ does on the GPU side: (int64_t)(w - t) >= 0.
    uint64_t w = ~uint64_t(0) - 1;
    EXPECT_TRUE(twohop::reached(&w, ~uint64_t(0) - 1));
    EXPECT_FALSE(twohop::reached(&w, ~uint64_t(0)));
    w = 2; // wrapped past zero
    EXPECT_TRUE(twohop::reached(&w, ~uint64_t(0)));
    EXPECT_FALSE(twohop::reached(&w, 3));
}

// A host thread stands in for the stream: for each call it "copies in" (writes its input into
// the host copy), writes arrived, waits for the gate, "copies out" and writes released. The
// calls share two host copies, as the slots of a communicator do; the host side (StreamJob) of
// call k+2 may only start once the stream released call k's copy.
TEST(StreamJob, StreamThreadAndHostSideInOrder) {
    constexpr int kCalls = 200, kN = 64;
    StreamWords words[2] = {};
    std::vector<float> copy[2] = {std::vector<float>(kN), std::vector<float>(kN)};
    std::vector<std::vector<float>> results(kCalls, std::vector<float>(kN, -1));
    std::atomic<int> enqueued{0};
    std::thread stream([&] {
        for (int k = 0; k < kCalls; ++k) {
            while (enqueued.load(std::memory_order_acquire) <= k) std::this_thread::yield();
            const int s = k % 2;
            const uint64_t token = static_cast<uint64_t>(k) + 1;
            for (int i = 0; i < kN; ++i) copy[s][i] = static_cast<float>(k + i);
            twohop::open_word(&words[s].arrived, token);
            while (!twohop::reached(&words[s].gate, token)) std::this_thread::yield();
            results[k] = copy[s];
            twohop::open_word(&words[s].released, token);
        }
    });
    // The host: enqueue a call when its copy is idle (released the previous user's token),
    // then drive the jobs in call order, as the engine's queue does.
    std::vector<std::unique_ptr<StreamJob>> jobs;
    int next = 0;
    for (int k = 0; k < kCalls; ++k) {
        const int s = k % 2;
        const uint64_t token = static_cast<uint64_t>(k) + 1;
        if (k >= 2) {
            while (!twohop::reached(&words[s].released, token - 2)) {
                while (next < k && jobs[next]->advance() != TWOHOP_PENDING) ++next;
                std::this_thread::yield();
            }
        }
        jobs.emplace_back(new StreamJob(fake(k % 3, TWOHOP_OK, &copy[s]), &words[s], token,
                                        nullptr));
        enqueued.store(k + 1, std::memory_order_release);
    }
    while (next < kCalls) {
        if (jobs[next]->advance() != TWOHOP_PENDING) ++next;
    }
    stream.join();
    for (int k = 0; k < kCalls; ++k) {
        for (int i = 0; i < kN; ++i) {
            ASSERT_EQ(results[k][i], 2.0f * static_cast<float>(k + i)) << "call " << k;
        }
    }
}
