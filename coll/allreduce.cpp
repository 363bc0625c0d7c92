/*
 * The blocking call over one communicator's state: the communicator's progress, waits and
 * failure handling (twohop_comm methods), the choice between the node's GPU path and a host
 * job (coll/schedule/: latency_job.h and pipeline_job.h have the step tables), and the C
 * entry points of the calls themselves.
 */
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm_state.h"
#include "core_counters.h"
#include "cuda_driver.h"
#include "gpu_node.h"
#include "memory_kind.h"
#include "posted/proxy.h"
#include "schedule/engine.h"
#include "schedule/stream_call.h"

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
        return TWOHOP_ERR_PEER;
    }
    // A local peer that failed its part of the call told us through the control block (a call
    // this rank has reached: a peer ahead of it may fail a later call first).
    for (int i = 0; i < topo.local_size(); ++i) {
        if (i != topo.local_rank && peer_failed(i)) return TWOHOP_ERR_PEER;
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
        if (i != topo.local_rank && peer_failed(i)) {
            return TWOHOP_ERR_PEER;
        }
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

namespace {

} // namespace

namespace {

/*
 * One call, after the poisoned check. enqueue: the stream-ordered form (the application's
 * `stream` is not known to be complete yet); *enqueued = 1 when the call stayed on the stream.
 * Every other path first waits for the stream (join), then runs as a blocking call. A
 * communicator runs at most one GPU vote per call, whichever form each rank called: a rank
 * that declined the stream-ordered path goes on with the host path, as the ranks that called
 * the blocking form after their vote. Returns a twohop_status (the caller records failures).
 */
int run_call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
             uint64_t count, const twohop_reduction &red, bool enqueue, void *stream,
             int *enqueued) {
    // A stream-ordered call still running on this rank's GPU writes this rank's flags: the
    // host must not write them before it has (gpu_node_enqueue drains itself if it declines).
    c->call_first_seq = c->seq.last() + 1;
    int rc = enqueue ? TWOHOP_OK : gpu_enqueue_drain(c);
    if (rc != TWOHOP_OK) return rc;
    bool joined = !enqueue;
    auto join = [&joined, stream]() {
        if (joined) return TWOHOP_OK;
        joined = true;
        return twohop_stream_sync(stream) == 0 ? TWOHOP_OK : TWOHOP_ERR_TRANSPORT;
    };
    const bool latency = twohop::latency_path(c, count, red.item_bytes);
    // GPU rounds: on one node the whole call can run on the GPU; with several nodes hop 1 of
    // the pipeline can (the latency path stays on the host).
    if (c->gpu_round && (c->topo.n_nodes() == 1 || !latency)) {
        bool taken = false;
        if (c->verbose >= 3) {
            c->gpu_hop1.call_entry = std::chrono::steady_clock::now();
            c->gpu_hop1.call_entry_cpu = twohop::thread_cpu_s();
        }
        // A GPU-posted call the proxy thread will run: wake it now, so that its wake-up
        // overlaps the node's rounds and the launch (gpu_posted_pipeline).
        if (!enqueue && c->gpu_posted && c->posted_wake_early && c->topo.n_nodes() > 1 &&
            in.device && out.device && count * red.item_bytes >= c->posted_proxy_min_bytes) {
            twohop::Proxy::instance().prewake();
        }
        if (enqueue && c->topo.n_nodes() == 1) {
            rc = gpu_node_enqueue(c, in, out, count, red, stream, &taken);
            if (rc != TWOHOP_OK) return rc;
            if (taken) {
                *enqueued = 1;
                return TWOHOP_OK;
            }
        } else {
            if ((rc = join()) != TWOHOP_OK) return rc;
            rc = gpu_node_allreduce(c, in, out, count, red, &taken);
            if (rc != TWOHOP_OK || taken) return rc;
        }
    }
    if ((rc = join()) != TWOHOP_OK) return rc;
    if (c->gpu_hop1.active && c->gpu_posted) {
        rc = gpu_posted_pipeline(c, out, count, red);
    } else {
        const std::unique_ptr<twohop::Job> job = twohop::make_job(c, in, out, count, red);
        rc = twohop::drive(c, *job);
    }
    if (c->gpu_hop1.active && rc == TWOHOP_OK) twohop::count(TWOHOP_COUNTER_GPU_HOP1_CALLS);
    if (c->gpu_hop1.active && rc != TWOHOP_OK) gpu_settle(c);
    c->gpu_hop1.active = false;
    c->gpu_hop1.gather = false;
    return rc;
}

/* The poisoned check and failure recording around run_call. */
int call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out, uint64_t count,
         const twohop_reduction &red, bool enqueue, void *stream, int *enqueued, char *why,
         size_t whylen) {
    if (c->poisoned != TWOHOP_OK) {
        twohop::poisoned_message(c, why, whylen);
        return TWOHOP_ERR_POISONED;
    }
    if (count == 0) return TWOHOP_OK;
    // A blocking call from inside the progress of a call this thread runs on the same
    // communicator (a nested collective) cannot be ordered: an error, never a self-deadlock.
    if (twohop::held_by_this_thread(c)) {
        if (why && whylen) {
            std::snprintf(why, whylen, "allreduce started on a communicator from inside the "
                          "progress of another allreduce on it (a nested collective)");
        }
        return TWOHOP_ERR_HOST;
    }
    // After the calls queued before this one (non-blocking, persistent), which may fail.
    twohop::lock_engine(c);
    twohop::drain_queue(c);
    const int rc = c->poisoned != TWOHOP_OK
                       ? TWOHOP_ERR_POISONED
                       : run_call(c, in, out, count, red, enqueue, stream, enqueued);
    twohop::unlock_engine(c);
    if (rc == TWOHOP_ERR_POISONED) {
        twohop::poisoned_message(c, why, whylen);
        return rc;
    }
    if (rc != TWOHOP_OK) {
        c->fail(rc, twohop::status_reason(rc));
        if (why && whylen) std::snprintf(why, whylen, "%s", twohop::status_reason(rc));
    }
    return rc;
}

} // namespace

extern "C" int twohop_comm_allreduce(twohop_comm *c, const twohop_userbuf *in,
                                     const twohop_userbuf *out, uint64_t count,
                                     const twohop_reduction *red, char *why, size_t whylen) {
    int enqueued = 0;
    return call(c, *in, *out, count, *red, false, nullptr, &enqueued, why, whylen);
}

extern "C" int twohop_comm_allreduce_enqueue(twohop_comm *c, const twohop_userbuf *in,
                                             const twohop_userbuf *out, uint64_t count,
                                             const twohop_reduction *red, void *stream,
                                             int *enqueued, char *why, size_t whylen) {
    *enqueued = 0;
    // (A stream being captured into a CUDA graph never gets here: the front ends refuse it
    // before any staging, twohop_comm_refuse_capture.)
    // Several nodes: the call stays on the stream when this rank's buffers allow it
    // (schedule/stream_call.h); a poisoned communicator fails in call() as always.
    if (c->poisoned == TWOHOP_OK) {
        bool taken = false;
        const int rc = twohop_stream_enqueue_multinode(c, *in, *out, count, *red, stream, &taken,
                                                       why, whylen);
        if (taken) {
            *enqueued = rc == TWOHOP_OK ? 1 : 0;
            return rc;
        }
    }
    return call(c, *in, *out, count, *red, true, stream, enqueued, why, whylen);
}

extern "C" int twohop_stream_sync(void *stream) {
    const int dev = stream ? twohop::cuda::stream_device(stream) : -1;
    if (stream && dev < 0) return -1;
    if (!stream) return twohop::cuda::sync_current() ? 0 : -1;
    return twohop::cuda::stream_sync(dev, stream) ? 0 : -1;
}

extern "C" int twohop_stream_capturing(void *stream) {
    return twohop::cuda::stream_capturing(stream ? stream : twohop::cuda::legacy_stream()) != 0;
}

extern "C" int twohop_comm_refuse_capture(twohop_comm *c, char *why, size_t whylen) {
    // The calls queued before this one end first (their failures are theirs) -- unless this
    // thread is inside one of them (a nested call: the lock is not re-entrant).
    if (!twohop::held_by_this_thread(c)) {
        twohop::lock_engine(c);
        twohop::drain_queue(c);
        twohop::unlock_engine(c);
    }
    char msg[256];
    if (c->poisoned != TWOHOP_OK) {
        twohop::poisoned_message(c, msg, sizeof(msg));
        if (why && whylen) std::snprintf(why, whylen, "%s", msg);
        return TWOHOP_ERR_POISONED;
    }
    std::snprintf(msg, sizeof(msg), "twohop_allreduce_enqueue on a stream being captured into a "
                  "CUDA graph is refused (a replay would run the stream's half of the call "
                  "without its host half; or the stream's capture state could not be read)");
    c->call_first_seq = c->seq.last() + 1;
    c->fail(TWOHOP_ERR_HOST, msg);
    if (why && whylen) std::snprintf(why, whylen, "%s", msg);
    return TWOHOP_ERR_HOST;
}

extern "C" void twohop_comm_abort(twohop_comm *c, int status, const char *why) {
    c->call_first_seq = c->seq.last() + 1; // the call this rank cannot take part in
    if (c->poisoned == TWOHOP_OK) c->fail(status, why ? why : twohop::status_reason(status));
}
