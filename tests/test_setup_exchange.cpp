/*
 * Set-up protocol with threads standing in for ranks: Bruck allgather for every size 1..9,
 * agreement, communicator-id agreement over overlapping groups of "processes" running at once,
 * and the bounded failure modes (a rank that runs another allreduce, a silent rank with a
 * timeout, a message of the wrong size).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm_ids.h"
#include "fiber.h"
#include "setup_exchange.h"

namespace {

/* An in-memory network: FIFO queues per (source, destination) pair. */
struct Net {
    std::mutex m;
    std::map<std::pair<int, int>, std::deque<std::vector<char>>> q;
    std::vector<int> foreign; // [rank] runs another allreduce
    explicit Net(int p) : foreign(p, 0) {}
};

struct Ctx {
    Net *net;
    int me;
};

struct Req {
    bool recv;
    void *buf;
    size_t bytes;
    int peer;
};

int n_isend(void *ctx, const void *buf, size_t bytes, int peer, void **req) {
    auto *c = static_cast<Ctx *>(ctx);
    std::lock_guard<std::mutex> l(c->net->m);
    const char *b = static_cast<const char *>(buf);
    c->net->q[{c->me, peer}].emplace_back(b, b + bytes);
    *req = new Req{false, nullptr, bytes, peer};
    return TWOHOP_OK;
}

int n_irecv(void *, void *buf, size_t bytes, int peer, void **req) {
    *req = new Req{true, buf, bytes, peer};
    return TWOHOP_OK;
}

int n_test(void *ctx, void *req, int *done) {
    auto *c = static_cast<Ctx *>(ctx);
    auto *r = static_cast<Req *>(req);
    *done = 0;
    if (!r->recv) {
        *done = 1;
        delete r;
        return TWOHOP_OK;
    }
    std::lock_guard<std::mutex> l(c->net->m);
    auto &dq = c->net->q[{r->peer, c->me}];
    if (dq.empty()) return TWOHOP_OK;
    std::vector<char> msg = std::move(dq.front());
    dq.pop_front();
    *done = 1;
    const bool ok = msg.size() == r->bytes;
    if (ok && r->bytes) std::memcpy(r->buf, msg.data(), r->bytes);
    delete r;
    return ok ? TWOHOP_OK : TWOHOP_ERR_MISMATCH;
}

void n_cancel(void *, void *req) { delete static_cast<Req *>(req); }

int n_foreign(void *ctx, int peer) {
    auto *c = static_cast<Ctx *>(ctx);
    std::lock_guard<std::mutex> l(c->net->m);
    return c->net->foreign[peer];
}

void n_progress() { std::this_thread::yield(); }
void n_log(int, const char *) {}

twohop_host host_for(Ctx *c) {
    twohop_host h{};
    h.ctx = c;
    h.isend = n_isend;
    h.irecv = n_irecv;
    h.test = n_test;
    h.cancel = n_cancel;
    h.foreign_pending = n_foreign;
    h.progress = n_progress;
    h.log = n_log;
    return h;
}

/* Runs fn(rank, exchange) on p threads over one network. */
template <class F> void run_ranks(Net &net, int p, double timeout, F fn) {
    std::vector<std::thread> t;
    for (int r = 0; r < p; ++r) {
        t.emplace_back([&, r] {
            Ctx ctx{&net, r};
            twohop_host h = host_for(&ctx);
            twohop::Exchange ex(h, r, p, timeout);
            fn(r, ex);
        });
    }
    for (auto &x : t) x.join();
}

TEST(SetupExchange, AllgatherEverySize) {
    for (int p = 1; p <= 9; ++p) {
        Net net(p);
        std::vector<std::vector<uint64_t>> got(p);
        run_ranks(net, p, 0, [&](int r, twohop::Exchange &ex) {
            uint64_t mine[2] = {uint64_t(r) * 1000 + 7, ~uint64_t(r)};
            got[r].resize(2 * p);
            std::string err;
            ASSERT_EQ(ex.allgather(mine, got[r].data(), sizeof(mine), &err), TWOHOP_OK) << err;
        });
        for (int r = 0; r < p; ++r) {
            for (int k = 0; k < p; ++k) {
                EXPECT_EQ(got[r][2 * k], uint64_t(k) * 1000 + 7) << "p=" << p << " r=" << r;
                EXPECT_EQ(got[r][2 * k + 1], ~uint64_t(k));
            }
        }
        for (auto &kv : net.q) EXPECT_TRUE(kv.second.empty()) << "unconsumed message, p=" << p;
    }
}

TEST(SetupExchange, AgreeOrAndMax) {
    const int p = 5;
    Net net(p);
    std::vector<int> any(p);
    std::vector<uint64_t> mx(p);
    run_ranks(net, p, 0, [&](int r, twohop::Exchange &ex) {
        std::string err;
        ASSERT_EQ(ex.agree_or(r == 3, &any[r], &err), TWOHOP_OK);
        ASSERT_EQ(ex.agree_max(uint64_t(r * 7 % 5), &mx[r], &err), TWOHOP_OK);
    });
    for (int r = 0; r < p; ++r) {
        EXPECT_EQ(any[r], 1);
        EXPECT_EQ(mx[r], 4u);
    }
}

TEST(SetupExchange, RankRunningAnotherAllreduceIsAnErrorNotAHang) {
    const int p = 3;
    Net net(p);
    net.foreign[2] = 1; // rank 2 never takes part: it is in another allreduce
    std::vector<int> rc(p, -1);
    std::vector<std::string> why(p);
    run_ranks(net, p, 0, [&](int r, twohop::Exchange &ex) {
        if (r == 2) return;
        uint64_t v = r, all[3];
        rc[r] = ex.allgather(&v, all, sizeof(v), &why[r]);
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(rc[r], TWOHOP_ERR_MISMATCH);
        EXPECT_NE(why[r].find("selection differs"), std::string::npos) << why[r];
    }
}

TEST(SetupExchange, SilentRankTimesOut) {
    const int p = 2;
    Net net(p);
    int rc = -1;
    std::string why;
    run_ranks(net, p, 0.2, [&](int r, twohop::Exchange &ex) {
        if (r == 1) return; // never sends
        uint64_t v = r, all[2];
        rc = ex.allgather(&v, all, sizeof(v), &why);
    });
    EXPECT_EQ(rc, TWOHOP_ERR_TIMEOUT);
    EXPECT_NE(why.find("coll_twohop_timeout"), std::string::npos) << why;
}

/* Lines logged at level 0 by the exchanges of one test (n_log_capture). */
std::mutex g_log_m;
std::vector<std::string> g_logged;
void n_log_capture(int level, const char *msg) {
    std::lock_guard<std::mutex> l(g_log_m);
    if (level <= 0) g_logged.push_back(msg);
}

/*
 * A peer that never sends (its allreduce is another component that only receives, like
 * coll/basic's root): no error without a timeout, but one notice at the default verbosity
 * naming the peer and what to check, then the wait goes on (here until the timeout).
 */
TEST(SetupExchange, SilentPeerIsNamedOnceAtTheDefaultVerbosity) {
    Net net(2);
    g_logged.clear();
    Ctx ctx{&net, 0};
    twohop_host h = host_for(&ctx);
    h.log = n_log_capture;
    twohop::Exchange ex(h, 0, 2, 0.6);
    ex.set_notice_after(0.2);
    uint64_t v = 0, all[2];
    std::string why;
    EXPECT_EQ(ex.allgather(&v, all, sizeof(v), &why), TWOHOP_ERR_TIMEOUT);
    ASSERT_EQ(g_logged.size(), 1u);
    EXPECT_NE(g_logged[0].find("waited 0.2 s for rank 1"), std::string::npos) << g_logged[0];
    EXPECT_NE(g_logged[0].find("coll_twohop_priority"), std::string::npos) << g_logged[0];
    EXPECT_EQ(twohop::Exchange::kSlowNotice, 10.0);
}

TEST(SetupExchange, WrongSizeIsAMismatch) {
    Net net(2);
    net.q[{1, 0}].emplace_back(3, 'x'); // rank 1 "sent" 3 bytes where 8 are expected
    int rc = -1;
    std::string why;
    Ctx ctx{&net, 0};
    twohop_host h = host_for(&ctx);
    twohop::Exchange ex(h, 0, 2, 0);
    uint64_t v = 0, all[2];
    rc = ex.allgather(&v, all, sizeof(v), &why);
    EXPECT_EQ(rc, TWOHOP_ERR_MISMATCH);
}

/*
 * Four "processes" (one registry each), three communicators over overlapping groups set up
 * at the same time by separate threads: every communicator gets one id, the same on all its
 * members, and no process holds the same id twice.
 */
TEST(CommIds, OverlappingGroupsConcurrently) {
    const int P = 4;
    std::vector<twohop::CommIdRegistry> procs(P);
    // Pre-existing ids make the processes disagree at first.
    procs[0].reserve_exact(0);
    procs[1].reserve_exact(1);
    procs[2].reserve_exact(0);
    procs[2].reserve_exact(2);
    const std::vector<std::vector<int>> groups = {{0, 1, 2}, {1, 2, 3}, {0, 3}};
    std::vector<std::vector<uint32_t>> ids(groups.size());
    std::vector<std::thread> comms;
    for (size_t g = 0; g < groups.size(); ++g) {
        comms.emplace_back([&, g] {
            const int p = static_cast<int>(groups[g].size());
            Net net(p);
            ids[g].resize(p);
            run_ranks(net, p, 0, [&](int r, twohop::Exchange &ex) {
                std::string err;
                twohop::CommIdRegistry &reg = procs[groups[g][r]];
                ASSERT_EQ(twohop::agree_comm_id(ex, reg, &ids[g][r], &err), TWOHOP_OK) << err;
            });
        });
    }
    for (auto &t : comms) t.join();
    std::vector<std::set<uint32_t>> held(P);
    for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t r = 0; r < groups[g].size(); ++r) {
            EXPECT_EQ(ids[g][r], ids[g][0]) << "communicator " << g;
            EXPECT_TRUE(held[groups[g][r]].insert(ids[g][r]).second)
                << "process " << groups[g][r] << " got id " << ids[g][r] << " twice";
        }
    }
    EXPECT_NE(ids[0][0], 0u); // taken on processes 0 and 2
    EXPECT_NE(ids[0][0], 1u);
    EXPECT_NE(ids[0][0], 2u);
    for (int p = 0; p < P; ++p) {
        // pre-reserved + one per communicator the process is in, nothing leaked
        size_t want = (p == 2 ? 2 : p < 2 ? 1 : 0);
        for (auto &g : groups) want += std::count(g.begin(), g.end(), p);
        EXPECT_EQ(procs[p].size(), want) << "process " << p;
    }
}

TEST(CommIds, FreedIdIsNotReusedAtOnce) {
    twohop::CommIdRegistry reg;
    EXPECT_EQ(reg.reserve_from(0), 0u);
    reg.release(0);
    EXPECT_EQ(reg.reserve_from(0), 1u); // not 0: a message for the freed one may be in flight
    reg.reserve_exact(twohop::kMaxCommIds - 1);
    reg.release(1);
    EXPECT_EQ(reg.reserve_from(0), 0u); // top of the space taken: wraps to the smallest free
}

TEST(CommIds, ExhaustedIsNoMemoryEverywhere) {
    twohop::CommIdRegistry full, empty;
    for (uint32_t i = 0; i < 64; ++i) full.reserve_exact(twohop::kMaxCommIds - 1 - i);
    EXPECT_EQ(full.reserve_from(twohop::kMaxCommIds - 64), twohop::kMaxCommIds);
    EXPECT_EQ(empty.reserve_from(5), 5u);
    empty.release(5);
    EXPECT_EQ(empty.size(), 0u);
}

} // namespace

/* ------------------------------------------------------------------ fibers (fiber.h) ---- */

TEST(Fiber, YieldsAndResumesUntilTheBodyReturns) {
    int steps = 0;
    bool inside = false;
    twohop::Fiber f([&] {
        inside = twohop::Fiber::inside();
        for (int i = 0; i < 3; ++i) {
            ++steps;
            twohop::Fiber::yield();
        }
        std::vector<int> big(100000, 7); // heap from the fiber's stack frame, freed on return
        steps += big[99999];
    });
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE(twohop::Fiber::inside());
    twohop::Fiber::yield(); // outside a fiber: returns at once
    EXPECT_EQ(steps, 0);    // nothing runs before the first resume
    EXPECT_FALSE(f.resume());
    EXPECT_TRUE(inside);
    EXPECT_EQ(steps, 1);
    EXPECT_FALSE(f.resume());
    EXPECT_FALSE(f.resume());
    EXPECT_TRUE(f.resume());
    EXPECT_TRUE(f.finished());
    EXPECT_EQ(steps, 10);
}

/* The calling thread's id, read anew at every call: pthread_self() is declared const, so two
 * direct calls in one function may be merged by the compiler -- across a yield, too. (The same
 * reason the set-up keeps no thread-local state across a wait: fiber.h.) */
std::thread::id (*volatile thread_id)() = [] { return std::this_thread::get_id(); };

TEST(Fiber, ResumedFromAnotherThread) {
    std::vector<std::thread::id> ran_on;
    twohop::Fiber f([&] {
        ran_on.push_back(thread_id());
        twohop::Fiber::yield();
        ran_on.push_back(thread_id());
    });
    EXPECT_FALSE(f.resume());
    std::thread t([&] { EXPECT_TRUE(f.resume()); });
    t.join();
    ASSERT_EQ(ran_on.size(), 2u);
    EXPECT_EQ(ran_on[0], std::this_thread::get_id());
    EXPECT_NE(ran_on[1], ran_on[0]);
}

/*
 * The point of fibers: p ranks' set-up exchanges (allgather, then agreements) on ONE thread,
 * each rank a fiber resumed in turn, as MPI progress resumes set-ups started by non-blocking
 * calls. Without the yield in Exchange::wait the first rank would spin forever waiting for a
 * message its peers, on the same thread, can never send.
 */
TEST(Fiber, SetUpExchangesOfSeveralRanksInterleaveOnOneThread) {
    for (int p : {2, 3, 5, 8}) {
        Net net(p);
        std::vector<Ctx> ctx(p);
        std::vector<twohop_host> host(p);
        std::vector<std::vector<uint64_t>> got(p, std::vector<uint64_t>(p));
        std::vector<uint64_t> maxes(p);
        std::vector<int> rcs(p, -1);
        std::vector<std::unique_ptr<twohop::Fiber>> fibers;
        for (int r = 0; r < p; ++r) {
            ctx[r] = Ctx{&net, r};
            host[r] = host_for(&ctx[r]);
            // A peer that calls another allreduce must not be probed from a fiber: mark every
            // rank as if it did; the exchanges must still complete.
            net.foreign[r] = 1;
            fibers.emplace_back(new twohop::Fiber([&, r] {
                twohop::Exchange ex(host[r], r, p, 0);
                std::string err;
                uint64_t mine = 100 + r;
                int rc = ex.allgather(&mine, got[r].data(), sizeof(mine), &err);
                if (rc == TWOHOP_OK) rc = ex.agree_max(uint64_t(r) * 3, &maxes[r], &err);
                rcs[r] = rc;
            }));
            ASSERT_TRUE(fibers.back()->ok());
        }
        int live = p, rounds = 0;
        while (live > 0 && rounds < 100000) {
            ++rounds;
            for (int r = 0; r < p; ++r) {
                if (!fibers[r]->finished() && fibers[r]->resume()) --live;
            }
        }
        ASSERT_EQ(live, 0) << "p=" << p;
        for (int r = 0; r < p; ++r) {
            EXPECT_EQ(rcs[r], TWOHOP_OK) << "p=" << p << " r=" << r;
            EXPECT_EQ(maxes[r], uint64_t(p - 1) * 3);
            for (int k = 0; k < p; ++k) EXPECT_EQ(got[r][k], uint64_t(100 + k));
        }
    }
}
