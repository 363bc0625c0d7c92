/*
 * The blocking GPU-posted call on several nodes (gpu_posted_pipeline): the call kernel (or
 * stream operations per segment) on the communicator's stream, hop 2 posted by the proxy
 * thread as the doorbell announces segments, the calling thread asleep until the end is near.
 */
#include "gpu_internal.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

#include "posted_exec.h"
#include "proxy.h"
#include "rail_backend.h"
#include "engine.h"

namespace twohop_gpu {


/* Verbose 2, at the communicator's end: per size class, the blocking GPU-posted calls' wake-ups
 * (GpuHop1::wake_log): how long the woken caller spun, how many woke after the end, and the
 * lead each call would have needed to wake exactly at its end (its lead minus its spin), as
 * quantiles (the q-quantile of n sorted values: element floor(q * (n - 1))). */
void log_wake_ups(twohop_comm *c) {
    for (int k = 0; k < 64; ++k) {
        const std::vector<std::array<float, 2>> &w = c->gpu_hop1.wake_log[k];
        if (w.empty()) continue;
        std::vector<float> spin, need;
        spin.reserve(w.size());
        need.reserve(w.size());
        size_t late = 0;
        for (const auto &e : w) {
            spin.push_back(e[1]);
            need.push_back(e[0] - e[1]);
            if (e[1] < 0) ++late;
        }
        std::sort(spin.begin(), spin.end());
        std::sort(need.begin(), need.end());
        auto q = [](const std::vector<float> &v, double p) {
            const double at = p * static_cast<double>(v.size() - 1);
            return static_cast<double>(v[static_cast<size_t>(at)]);
        };
        char msg[400];
        std::snprintf(msg, sizeof(msg),
                      "GPU-posted wake-ups, calls of %llu B and up to twice that: %zu measured, "
                      "%zu woke after the end (%.1f %%); spin p10 %.1f p50 %.1f p90 %.1f us; lead "
                      "needed to wake at the end p50 %.1f p90 %.1f p95 %.1f p99 %.1f max %.1f us",
                      1ull << k, w.size(), late, 100.0 * static_cast<double>(late) /
                      static_cast<double>(w.size()), q(spin, 0.1), q(spin, 0.5), q(spin, 0.9),
                      q(need, 0.5), q(need, 0.9), q(need, 0.95), q(need, 0.99), q(need, 1.0));
        c->host.log(2, msg);
    }
}


namespace {

/* A blocking GPU-posted call's milestones on the host: written by whichever thread steps its
 * job (the proxy or the caller), read by the caller once the job ended. A default time point:
 * not reached. */
struct PostedTimes {
    Clock::time_point start; // the enqueue began (after the rounds)
    Clock::time_point gate;  // every finish gate open: only hop 3 of the last segments remains
    Clock::time_point near;  // the caller was told the end is near (Proxy::run's `near`)
    Clock::time_point done;  // the job ended
    Clock::time_point woke;  // the caller woke for `near` (set only where it slept for it)
    bool gate_seen = false;
    double first = -1, hop2 = -1; // verbose 3: first descriptor, last hop-2 result (us from start)
};

/*
 * After a call that ended, what the next call of its size class (size_class: floor(log2 bytes))
 * learns: the tail it took from its last finish gate to its end (the next prediction; one
 * outlier delays one call's early wake-up at most), and -- where the caller slept for `near`
 * after a prediction (predicted_tail > 0; not the class's first call, woken at the last gate)
 * -- how long it spun for the end (< 0: how late it woke), from which the class's wake lead
 * adapts (wake_lead.h). Returns the tail in us (< 0: none); *spin and *woke for the log.
 */
double learn_from_call(twohop_comm *c, int size_class, double predicted_tail, double wake_after,
                       const PostedTimes &t, double *spin, bool *woke) {
    GpuHop1 &h = c->gpu_hop1;
    const double tail = t.gate_seen && t.done > t.gate ? us_between(t.gate, t.done) : -1.0;
    if (tail >= 0) h.tail_us[size_class] = static_cast<float>(tail);
    *spin = 0;
    *woke = c->posted_wake_lead_us >= 0 && predicted_tail > 0 && t.gate_seen &&
            t.woke != Clock::time_point{} && t.done != Clock::time_point{};
    if (!*woke) return tail;
    *spin = us_between(t.woke, t.done);
    // The lead it had: the predicted tail less the time from the last gate to when the caller
    // was signalled -- `near` (the lead, or the whole predicted tail when woken at the gate) or
    // the end, when the tail ran shorter than predicted less the lead. Minus the spin, the lead
    // it needed to wake at the end (wake_lead.h).
    const double had = twohop::lead_had_us(
        predicted_tail, t.near != Clock::time_point{} ? us_between(t.gate, t.near) : -1.0,
        us_between(t.gate, t.done));
    if (c->verbose >= 2 && h.wake_log[size_class].size() < GpuHop1::kWakeLogMax) {
        h.wake_log[size_class].push_back({static_cast<float>(had), static_cast<float>(*spin)});
    }
    h.wake[size_class].update(static_cast<float>(*spin), wake_after > 0,
                              static_cast<float>(had));
    return tail;
}

/* Verbose 3: one line per blocking GPU-posted call -- its rounds (from GpuHop1::call_entry),
 * the host's milestones, the calling thread's CPU time (cpu_start: thread_cpu_s() after the
 * rounds), the tail predicted and taken and the wake lead (next_lead: the class's lead after
 * learn_from_call). */
void log_posted_call(twohop_comm *c, uint64_t bytes, uint64_t nseg, uint64_t bells,
                     bool one_kernel, const PostedTimes &t, double cpu_start,
                     double predicted_tail, double tail, double lead, bool woke, double spin,
                     double next_lead) {
    const GpuHop1 &h = c->gpu_hop1;
    const double cpu_end = twohop::thread_cpu_s();
    char spun[96] = "spin not measured";
    if (woke) {
        std::snprintf(spun, sizeof(spun), "spun %.1f us (next lead %.1f us)", spin, next_lead);
    }
    char msg[600];
    std::snprintf(msg, sizeof(msg),
                  "GPU-posted call: %llu B, %llu segments, %llu doorbells seen by the proxy, "
                  "%s; rounds %.1f us (calling thread's CPU %.1f us); from the rounds' end: "
                  "first descriptor %.1f us, hop 2 done %.1f us, end %.1f us (CPU %.1f us); "
                  "tail after the last finish gate predicted %.1f us, taken %.1f us; "
                  "wake lead %.1f us, %s",
                  static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(nseg),
                  static_cast<unsigned long long>(bells),
                  one_kernel ? "one kernel" : "stream operations per segment",
                  us_between(h.call_entry, t.start), 1e6 * (cpu_start - h.call_entry_cpu),
                  t.first, t.hop2, us_between(t.start, Clock::now()),
                  1e6 * (cpu_end - cpu_start), predicted_tail, tail, lead, spun);
    c->host.log(3, msg);
}

} // namespace


} // namespace twohop_gpu

using namespace twohop_gpu;

int gpu_posted_pipeline(twohop_comm *c, const twohop_userbuf &out, uint64_t count,
                        const twohop_reduction &red) {
    GpuHop1 &h = c->gpu_hop1;
    const int dev = h.device;
    const int me = c->topo.local_rank;
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes);
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const uint64_t depth = static_cast<uint64_t>(c->depth);
    if (!out.device) return gpu_error(c, "GPU-posted mode without a device receive buffer", me);
    if (!ensure_ring(c, dev)) {
        return gpu_error(c, "registering the GPU-posted descriptor ring failed on local rank", me);
    }
    twohop::reset(h.ring);
    const uint64_t s0 = c->seq.reserve(nseg);
    // Its kernel (or stream operations) may wait for other nodes until the call ends: see
    // g_waiting_kernels. Ended below once the GPU side is seen to end.
    gpu_waiting_kernel_begin();

    // 1. The call on the communicator's stream (PostedSchedule). Enqueued by this thread while
    // the proxy runs the job (2.), at most kPostedWindow segments ahead of the hop-2 results: the
    // stream's queue stays short, so no enqueue ever blocks inside the driver behind a wait on
    // a gate that only the proxy opens (with the whole call enqueued first, hundreds of
    // segments filled it).
    void *const st = h.own_stream(dev);
    PostedSchedule sched{c, st, h.ring_dev, s0, count, seg_items, nseg, red, out.device};
    // One kernel for the whole call (posted_call.h) when this rank uses it.
    // (Without its counters, stream operations: this rank's choice.)
    int kernel_blocks = call_kernel_blocks(c, red, count * red.item_bytes, dev);
    unsigned long long *counters =
        kernel_blocks > 0 ? call_counters(c, dev, kBlockingCounters) : nullptr;
    if (counters == nullptr) kernel_blocks = 0;
    const uint64_t window = depth > kPostedWindow ? depth : kPostedWindow;
    // The `drained` write after the last operation is enqueued.
    std::atomic<bool> enqueued_all{false};
    std::atomic<bool> enqueue_failed{false};
    auto results = [&]() { // segments whose hop-2 results this rank published (proxy: retire)
        const uint64_t r = c->shm.flags(me).reduced.load(std::memory_order_acquire);
        return r > s0 ? r - s0 : 0;
    };
    bool more = true; // enqueue_more has more to enqueue (this thread only)
    auto enqueue_more = [&]() -> bool {
        if (!more) return false;
        if (kernel_blocks > 0) {
            sched.end_word = &h.ring_dev->drained; // the kernel ends the call: no stream write
            sched.end_value = 1;
            sched.call(counters, kernel_blocks);
            if (sched.ok) enqueued_all.store(true, std::memory_order_release);
            more = false;
        } else if (sched.enqueue([&]() { return results() + window; })) {
            sched.ok = sched.ok && cuda::write_flag(dev, st, &h.ring_dev->drained, 1);
            if (sched.ok) enqueued_all.store(true, std::memory_order_release);
            more = false;
        }
        if (!sched.ok) enqueue_failed.store(true, std::memory_order_release);
        return sched.ok && more;
    };
    h.pending = true;

    // 2. The proxy thread posts hop 2 as the doorbell announces segments; this thread sleeps.
    RingBackend backend(c, red, count, seg_items, s0, nseg, h.ring, [&]() -> int {
        if (enqueue_failed.load(std::memory_order_acquire)) return TWOHOP_ERR_TRANSPORT;
        // `drained` follows the call's last operation: the kernel's last block writes it, or
        // the stream after the last stream operation (no CUDA call here).
        if (!enqueued_all.load(std::memory_order_acquire)) return 0;
        if (__atomic_load_n(&h.ring->drained, __ATOMIC_ACQUIRE) == 0) return 0;
        // `drained` is written also when a wait of the kernel timed out.
        return __atomic_load_n(&h.ring->fault, __ATOMIC_ACQUIRE) != 0 ? int(TWOHOP_ERR_TIMEOUT) : 1;
    });
    backend.gates(); // the segments whose sets are free already need no wait on the GPU
    twohop::PostedJob job(h.ring, &backend, s0, nseg, c->timeout_s, TWOHOP_ERR_TIMEOUT);
    // Verbose 3: when the host saw the first descriptor, the last hop-2 result and the end
    // (microseconds from the start of the enqueue; written by whichever thread steps the job).
    PostedTimes tm;
    tm.start = Clock::now();
    const bool timed = c->verbose >= 3;
    const double cpu_start = timed ? twohop::thread_cpu_s() : 0;
    // Proxy::run's `near`: the call's end is close. From the last finish gate (only hop 3 of
    // the last segments remains) plus the tail the previous call of this size class took,
    // less the class's wake lead (coll_twohop_posted_wake_lead_us to start with, adapted by
    // coll_twohop_posted_wake_quantile or _spin_us: wake_lead.h): the caller's wake-up
    // overlaps the end, and it spins for what remains (the tail is kernel work: tens to
    // hundreds of microseconds).
    std::atomic<bool> near{false};
    const int size_class = 63 - __builtin_clzll((count * red.item_bytes) | 1);
    const double predicted_tail = h.tail_us[size_class];
    twohop::WakeLead &wake = h.wake[size_class];
    const double lead = wake.lead_us();
    const double wake_after = c->posted_wake_lead_us < 0 ? 0.0 : predicted_tail - lead;
    auto step = [&]() {
        if (enqueue_failed.load(std::memory_order_acquire)) return int(TWOHOP_ERR_TRANSPORT);
        const int st = job.step(twohop::Proxy::kPending);
        if (!tm.gate_seen && backend.finish_gates() == nseg) {
            tm.gate_seen = true;
            tm.gate = Clock::now();
        }
        if (tm.gate_seen && !near.load(std::memory_order_relaxed) &&
            (wake_after <= 0 || us_between(tm.gate, Clock::now()) >= wake_after)) {
            tm.near = Clock::now();
            near.store(true, std::memory_order_release);
        }
        if (st != twohop::Proxy::kPending) tm.done = Clock::now();
        if (timed) {
            const double t = us_between(tm.start, Clock::now());
            if (tm.first < 0 && job.posted() > 0) tm.first = t;
            if (tm.hop2 < 0 && job.retired() == nseg) tm.hop2 = t;
        }
        return st;
    };
    // Small calls: the calling thread drives the host side itself (no hand-off to the proxy and
    // back, tens of microseconds each when a thread must wake); large ones sleep meanwhile,
    // until `near` (then the caller spins for the GPU's last hop 3: its wake-up overlaps it).
    // The proxy was woken when the call began (run_call: prewake).
    // Meanwhile the MPI's progress: this rank's other calls in flight (non-blocking calls on
    // device buffers of other communicators, whose steps run on MPI threads; the MPI's own)
    // must move while it waits here, because a peer may wait for them before it joins this
    // call (MPI_Iallreduce(A); MPI_Allreduce(B); MPI_Wait(A) on one rank, MPI_Iallreduce(A);
    // MPI_Wait(A); MPI_Allreduce(B) on another). This communicator is busy: the progress
    // callback skips it. Often while such calls are queued, else every millisecond.
    auto idle = [c]() -> bool {
        c->host.progress();
        return twohop::mpi_thread_work_queued();
    };
    int rc;
    if (count * red.item_bytes >= c->posted_proxy_min_bytes) {
        rc = twohop::Proxy::instance().run(step, enqueue_more,
                                           c->posted_wake_early ? &near : nullptr, &tm.woke,
                                           idle, c->posted_wake_nap_us);
    } else {
        bool busy = twohop::mpi_thread_work_queued();
        bool enqueuing = true;
        for (unsigned spins = 1;; ++spins) {
            if (enqueuing) enqueuing = enqueue_more();
            if ((rc = step()) != twohop::Proxy::kPending) break;
            if (spins % (busy ? 16u : 1024u) == 0) busy = idle();
        }
    }
    // On failure: every wait of this rank's stream released, the stream drained.
    if (!sched.ok) {
        release_posted(c, h.ring, s0);
        gpu_settle(c);
        if (!h.stuck) gpu_waiting_kernel_end();
        return gpu_error(c, "enqueueing the GPU-posted call failed on local rank", me);
    }
    if (rc == twohop::Proxy::kStopped || rc == twohop::kPostedBadDescriptor) {
        rc = TWOHOP_ERR_TRANSPORT;
    }
    const uint64_t bells = job.doorbells();
    twohop::count(TWOHOP_COUNTER_DOORBELLS, bells);
    if (rc != TWOHOP_OK) {
        release_posted(c, h.ring, s0);
        gpu_settle(c);
        if (!h.stuck) gpu_waiting_kernel_end();
        return rc;
    }
    h.pending = false;
    gpu_waiting_kernel_end(); // `drained` was seen: the GPU side ended
    twohop::count(TWOHOP_COUNTER_GPU_POSTED_CALLS);
    double spin = 0;
    bool woke = false;
    const double tail = learn_from_call(c, size_class, predicted_tail, wake_after, tm, &spin,
                                        &woke);
    if (timed) {
        log_posted_call(c, count * red.item_bytes, nseg, bells, kernel_blocks > 0, tm,
                        cpu_start, predicted_tail, tail, lead, woke, spin,
                        static_cast<double>(wake.lead_us()));
    }
    return TWOHOP_OK;
}

