/*
 * One communicator's state between calls and within them (twohop_comm, comm_state.h): its
 * progress (poll, poll_transport: UCX, the hop-2 ops, the node's failure flags, liveness), its
 * waits, the start of hop 2, failure handling (fail, the abort message) and its end (the
 * destructor: cancel or quarantine, keep a healthy segment for reuse). The calls themselves are
 * allreduce.cpp (blocking) and schedule/ (the engine); set-up is comm_setup.cpp.
 */
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm_ids.h"
#include "comm_state.h"
#include "core_counters.h"
#include "gpu_node.h"
#include "schedule/stream_call.h"
#include "shm_cache.h"

using twohop::RankFlags;

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
} // namespace

int twohop_comm::poll() {
    const int rc = poll_transport();
    host.progress();
    return rc;
}

bool twohop_comm::local_peer_gone() const {
    for (size_t i = 0; i < local_pids.size(); ++i) {
        if (local_pids[i] > 0 && kill(static_cast<pid_t>(local_pids[i]), 0) != 0 &&
            errno == ESRCH) {
            return true;
        }
    }
    return false;
}

int twohop_comm::poll_transport() {
    int rc = TWOHOP_OK;
    if (worker) {
        worker->progress();
        for (twohop::Hop2Slot &slot : hop2) {
            if (!slot.active()) continue;
            for (twohop::StepOp *op : slot.ops()) {
                bool fin;
                const int e = op->active() ? op->advance(&fin) : TWOHOP_OK;
                if (e != TWOHOP_OK && rc == TWOHOP_OK) rc = e;
            }
        }
    }
    if (rc != TWOHOP_OK) return rc;
    // A rank on another node gave up and told its rail neighbours (us).
    // (Only once this rank has reached the failed call: see AbortMessages.)
    if (aborts && aborts->posted && aborts->recv.done.load(std::memory_order_acquire) &&
        aborts->recv.status == UCS_OK && aborts->in[1] <= seq.last()) {
        return told_status(aborts->in[0]);
    }
    // A local peer that failed its part of the call told us through the control block (a call
    // this rank has reached: a peer ahead of it may fail a later call first).
    for (int i = 0; i < topo.local_size(); ++i) {
        if (i == topo.local_rank) continue;
        if (const int rc = peer_failure(i)) return rc;
    }
    const auto now = twohop::CoarseClock::now(); // every pass: no timer read (coarse_clock.h)
    if (now >= next_liveness) {
        next_liveness = now + kLivenessPeriod;
        if (local_peer_gone()) return TWOHOP_ERR_PEER;
        for (const auto &rail : rails) {
            if (rail.right->failed.load(std::memory_order_acquire) ||
                rail.left->failed.load(std::memory_order_acquire)) {
                return TWOHOP_ERR_TRANSPORT;
            }
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::wait_for(const std::atomic<uint64_t> &flag, uint64_t target) {
    unsigned spins = 0;
    Clock::time_point start{};
    while (flag.load(std::memory_order_acquire) < target) {
        if (++spins % 16 == 0) {
            int rc = poll();
            if (rc != TWOHOP_OK) return rc;
            if (timeout_s > 0) {
                const auto now = Clock::now();
                if (spins == 16) start = now;
                if (std::chrono::duration<double>(now - start).count() > timeout_s) {
                    return TWOHOP_ERR_TIMEOUT;
                }
            }
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::wait_all(std::atomic<uint64_t> RankFlags::*which, uint64_t target) {
    for (int i = 0; i < topo.local_size(); ++i) {
        int rc = wait_for(shm.flags(i).*which, target);
        if (rc != TWOHOP_OK) return rc;
    }
    // Flags that were already set skip poll(): a node peer that failed its part of this call
    // must still be noticed before its (possibly stale) inputs are used.
    for (int i = 0; i < topo.local_size(); ++i) {
        if (i == topo.local_rank) continue;
        if (const int rc = peer_failure(i)) return rc;
    }
    return TWOHOP_OK;
}

int twohop_comm::poll_until(const std::function<bool()> &done) {
    const auto start = Clock::now();
    unsigned rounds = 0;
    while (!done()) {
        int rc = poll();
        if (rc != TWOHOP_OK) return rc;
        if (timeout_s > 0 && ++rounds % 64 == 0 &&
            std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
            return TWOHOP_ERR_TIMEOUT;
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::post_abort_recv() {
    aborts.reset(new AbortMessages());
    aborts->sends.resize(2 * rails.size());
    aborts->posted = true;
    return worker->recv(aborts->in, sizeof(aborts->in), abort_tag(), &aborts->recv);
}

bool twohop_comm::cancel_transfers() {
    bool ok = true;
    for (twohop::Hop2Slot &slot : hop2) {
        for (twohop::StepOp *op : slot.ops()) ok = (!op->active() || op->cancel(1.0)) && ok;
    }
    return ok;
}

int twohop_comm::start_hop2(int set, size_t i, char *data, uint64_t items,
                            const twohop::Reducer *red, uint64_t tag, bool last) {
    const twohop_rail &rail = rails[i];
    const size_t k = set * rails.size() + i;
    if (use_rabenseifner(rail.n, items * red->item_bytes())) {
        twohop::count(TWOHOP_COUNTER_RABENSEIFNER_SHARDS);
        return hop2[k].rhd.start(worker, &rail.peers, rail.n, rail.pos, data, items, red,
                             ring_scratch(set, i), tag, kTagLastBit, last);
    }
    return hop2[k].ring.start(worker, rail.right, rail.left, rail.n, rail.pos, data, items, red,
                          ring_scratch(set, i), tag, kTagLastBit, last);
}

void twohop_comm::fail(int status, const std::string &why) {
    if (!cancel_transfers()) quarantined = true;
    // Tell the rail neighbours on other nodes (best effort, not waited for; the requests are
    // drained when the communicator is freed).
    if (worker && aborts && poisoned == TWOHOP_OK) {
        AbortMessages &a = *aborts;
        a.out[0] = static_cast<uint64_t>(status);
        a.out[1] = call_first_seq;
        for (size_t i = 0; i < rails.size() && 2 * i + 1 < a.sends.size(); ++i) {
            const twohop::ucx::Endpoint *to[2] = {rails[i].right, rails[i].left};
            for (int k = 0; k < 2; ++k) {
                if (!to[k]->failed.load(std::memory_order_acquire)) {
                    (void)worker->send(to[k]->ep, a.out, sizeof(a.out), abort_tag(),
                                       &a.sends[2 * i + k]);
                }
            }
        }
        worker->progress();
    }
    shm.flags(topo.local_rank).failed_seq.store(call_first_seq, std::memory_order_relaxed);
    shm.flags(topo.local_rank).failed.store(static_cast<uint64_t>(status),
                                             std::memory_order_release);
    poisoned = status;
    failure = why;
}

twohop_comm::~twohop_comm() {
    gpu_node_log_phases(this);
    // Stream-ordered calls still on the GPU read and write the shared segment: let them end.
    const bool drained = gpu_enqueue_drain(this) == TWOHOP_OK;
    if (!cancel_transfers()) quarantined = true;
    bool aborts_busy = false;
    if (worker && aborts) {
        // The abort receive is pending for the communicator's life; abort sends may be too.
        if (aborts->posted && !worker->cancel(&aborts->recv, 1.0)) aborts_busy = true;
        for (auto &r : aborts->sends) {
            if (!worker->cancel(&r, 1.0)) aborts_busy = true;
        }
    }
    if (aborts_busy) (void)aborts.release(); // UCX still owns them: never freed
    // A healthy communicator's segment is retained for the next communicator of the same
    // processes (shm_cache.h): no call failed here or on a node peer, no transfer or GPU work
    // can still touch it.
    bool healthy = drained && !quarantined && poisoned == TWOHOP_OK && shm.mapped() &&
                   shm_token != 0;
    for (int l = 0; healthy && l < topo.local_size(); ++l) {
        healthy = shm.flags(l).failed.load(std::memory_order_acquire) == 0;
    }
    if (healthy) {
        gpu_hop1.release_segment();
        twohop::RetainedShm r;
        r.offer = twohop::ShmOffer{shm_token, shm_shape, seq.last()};
        r.shm.reset(new twohop::NodeShm(std::move(shm)));
        twohop::ShmCache::process().put(std::move(r));
    }
    if (quarantined) {
        // UCX may still write into these: keep them alive for the rest of the process.
        // Every hop-2 op (ring, Rabenseifner, recursive doubling: hop2_slot.h) and its buffers.
        new std::vector<twohop::Hop2Slot>(std::move(hop2));
        new std::vector<char>(std::move(scratch));
        shm.leak();
        if (stream_slots) stream_slots->leak();
        gpu_hop1.call_counters.clear(); // a call kernel may still count in them (leaked)
        twohop::ucx::Worker::keep_alive();
    } else if (stream_slots) {
        // Stream-ordered calls' host copies: the streams copy their last results out shortly
        // after the gates opened; a copy still in use after 1 s stays allocated.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!stream_slots->idle() && std::chrono::steady_clock::now() < until) {
            std::this_thread::yield();
        }
        // A call kernel still queued on an application's stream counts in its slot's
        // counters: they stay allocated with the slot.
        if (!stream_slots->idle()) gpu_hop1.call_counters.clear();
    }
    stream_slots.reset();
    if (id_reserved) twohop::process_comm_ids().release(comm_id);
    // GPU work of a failed call that never ended (GpuHop1::stuck) may use the device staging
    // buffers: kept (freeing device memory would also wait for that work).
    if (!gpu_hop1.settle()) {
        for (GpuStaging &st : gpu_staging) {
            st.ptr = nullptr;
            st.retired.clear();
        }
    }
}
