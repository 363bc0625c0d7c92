/*
 * The stream-ordered call (twohop_allreduce_enqueue) on device buffers: on one node, the
 * node's kernel between flag waits on the application's stream (gpu_node_enqueue); on several
 * nodes, the GPU-posted call kernel on that stream with its host side as an engine job
 * (gpu_stream_posted).
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
#include "rail_backend.h"
#include "stream_call.h"

using namespace twohop_gpu;

int gpu_enqueue_drain(twohop_comm *c) {
    GpuHop1 &h = c->gpu_hop1;
    if (!h.enq_pending) return TWOHOP_OK;
    int q = 0;
    int rc = c->poll_until([&h, &q] { return (q = h.enq_fence.query()) != 0; });
    if (rc != TWOHOP_OK) {
        // A peer failed or is gone: its flags will never move; release this rank's stream.
        release_gpu_waits(c);
        while (h.enq_fence.query() == 0) {
        }
        h.enq_pending = false;
        return rc;
    }
    h.enq_pending = false;
    if (q < 0) {
        // The failed call is the enqueued one, not the call draining it: node peers whose
        // streams wait for its flags are in it (their seq is enq_seq) and must see the
        // failure there.
        c->call_first_seq = h.enq_seq;
        return gpu_error(c, "a stream-ordered allreduce failed on local rank",
                         c->topo.local_rank);
    }
    return TWOHOP_OK;
}

int gpu_node_enqueue(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                     uint64_t count, const twohop_reduction &red, void *stream, bool *taken) {
    *taken = false;
    const int L = c->topo.local_size();
    const int me = c->topo.local_rank;
    const uint64_t s = c->seq.take();
    GpuHop1 &h = c->gpu_hop1;

    // Round 1: my descriptor (no wait for my input: the stream orders it).
    GpuDesc d;
    int device = -1;
    bool stage_in = false, stage_out = false;
    const uint64_t bytes = count * red.item_bytes;
    describe(c, in, out, red, bytes, &d, &device, &stage_in, &stage_out, true);
    if (d.can && stream && cuda::stream_device(stream) != device) d.can = 0;
    char *send_stage = static_cast<char *>(c->gpu_staging[d.in_place ? 1 : 0].ptr);
    char *recv_stage = static_cast<char *>(c->gpu_staging[1].ptr);
    publish_desc(c, d, s);
    int rc;
    if (!d.can) { // the host path, blocking: my GPU must not write my flags after the host does
        if ((rc = gpu_enqueue_drain(c)) != TWOHOP_OK) return rc;
        return vote_no(c, s);
    }
    if ((rc = c->wait_all(&RankFlags::desc_seq, s)) != TWOHOP_OK) return rc;
    GpuDesc peer[TWOHOP_GPU_MAX_RANKS];
    bool one_device = true, all = true;
    if ((rc = vote_round(c, d, device, s, peer, &one_device, &all)) != TWOHOP_OK) return rc;
    if (!all) { // the host path, blocking: my GPU must not write my flags after the host does
        if ((rc = gpu_enqueue_drain(c)) != TWOHOP_OK) return rc;
        return decline(c, s);
    }
    twohop_gpu_args a; // every rank its shard (the stream-ordered form has no one-kernel mode)
    rc = shard_args(c, peer, device, one_device, stage_in ? send_stage : in.device,
                    stage_out ? recv_stage : out.device, count, red, false, &a);
    if (rc != TWOHOP_OK) return rc;

    // Everything else on the application's stream.
    void *st = stream ? stream : cuda::legacy_stream();
    bool ok = true;
    for (int l = 0; ok && l < L; ++l) { // the previous call is finished on the whole node
        ok = cuda::wait_flag(device, st, flag_addr(c, l, &RankFlags::done), s - 1);
    }
    if (ok && stage_in) ok = cuda::copy_async(device, send_stage, in.device, bytes, st);
    // Word 0: this form's calls reach `ready` one at a time (the wait for `done` above).
    ok = ok && cuda::write_flag(device, st, ready_addr(c, me, 0), s);
    for (int l = 0; ok && l < L; ++l) {
        if (l != me) ok = cuda::wait_flag(device, st, ready_addr(c, l, 0), s);
    }
    ok = ok && cuda::launch(device, kernel_name(red.dtype, red.op), &a, sizeof(a), a.n, st);
    ok = ok && cuda::write_flag(device, st, flag_addr(c, me, &RankFlags::reduced), s);
    for (int l = 0; ok && l < L; ++l) {
        if (l != me) ok = cuda::wait_flag(device, st, flag_addr(c, l, &RankFlags::reduced), s);
    }
    if (ok && stage_out) ok = cuda::copy_async(device, out.device, recv_stage, bytes, st);
    ok = ok && cuda::write_flag(device, st, flag_addr(c, me, &RankFlags::done), s);
    ok = ok && h.enq_fence.record(device, st);
    h.enq_pending = true; // whatever part was enqueued must drain before the host moves on
    h.enq_device = device;
    h.enq_seq = s;
    if (!ok) return gpu_error(c, "enqueueing a stream-ordered allreduce failed on local rank", me);
    *taken = true;
    twohop::count(TWOHOP_COUNTER_ENQUEUED_CALLS);
    return TWOHOP_OK;
}

namespace {

/*
 * The host side of a stream-ordered GPU-posted call on several nodes (gpu_stream_posted): the
 * PostedJob of its segments, stepped by whoever drives the communicator's queue. Makes no CUDA
 * call: the GPU's progress is read from host words (the local ranks' flags, the call's
 * `released` word). Until every local rank's stream reached the call (ready >= first
 * sequence) it waits for the application, not for twohop (no timeout: hop 2 may wait for
 * another node's application too, which no timeout can tell from a hang). Destroyed
 * before it finished (a failure, a timeout), it releases every wait of the call's stream.
 */
class StreamPostedJob : public twohop::Job {
  public:
    StreamPostedJob(twohop_comm *c, const twohop_reduction &red, uint64_t count,
                    uint64_t seg_items, uint64_t s0, uint64_t nseg, const GpuStreamSlot &slot,
                    int ready_word)
        : c_(c), s0_(s0), ready_word_(ready_word), slot_(slot),
          backend_(c, red, count, seg_items, s0, nseg, slot.ring,
                   [this]() -> int {
                       const int e = slot_.enqueue_state->load(std::memory_order_acquire);
                       if (e < 0) return TWOHOP_ERR_TRANSPORT;
                       if (e == 0 || !twohop::reached(slot_.released, slot_.token)) return 0;
                       // `released` follows the kernel, also when a wait of it timed out.
                       return __atomic_load_n(&slot_.ring->fault, __ATOMIC_ACQUIRE) != 0
                                  ? int(TWOHOP_ERR_TIMEOUT)
                                  : 1;
                   }),
          job_(slot.ring, &backend_, s0, nseg, 0, TWOHOP_ERR_TIMEOUT),
          bytes_(count * red.item_bytes),
          timed_(c->verbose >= 3) {
        if (timed_) t_queued_ = Clock::now();
        gpu_waiting_kernel_begin(); // the call's kernel, enqueued after this job is queued
    }
    ~StreamPostedJob() override {
        // Ended, or its waits released here (it then ends without other nodes).
        if (!finished_) release_posted(c_, slot_.ring, s0_);
        gpu_waiting_kernel_end();
        slot_.job_live->store(false, std::memory_order_release);
    }
    int advance() override {
        if (slot_.enqueue_state->load(std::memory_order_acquire) < 0) {
            return TWOHOP_ERR_TRANSPORT;
        }
        if (timed_ && !started_) {
            started_ = true;
            t_[0] = Clock::now();
        }
        if (!arrived_) {
            for (int l = 0; l < c_->topo.local_size(); ++l) {
                if (c_->shm.flags(l).ready[ready_word_].load(std::memory_order_acquire) <
                    s0_ + 1) {
                    backend_.gates(); // segments whose sets are free need no wait later
                    return TWOHOP_PENDING;
                }
            }
            arrived_ = true;
            ++steps_;
            if (timed_) t_[1] = Clock::now();
        }
        const uint64_t before = job_.posted() + job_.retired();
        int rc = job_.step(TWOHOP_PENDING);
        steps_ += job_.posted() + job_.retired() - before;
        if (timed_) {
            if (t_[2] == Clock::time_point{} && job_.posted() > 0) t_[2] = Clock::now();
            if (t_[3] == Clock::time_point{} && job_.retired() == nseg()) t_[3] = Clock::now();
            if (t_[4] == Clock::time_point{} && backend_.finish_gates() == nseg()) {
                t_[4] = Clock::now();
            }
        }
        if (rc == TWOHOP_PENDING) return rc;
        if (rc == twohop::kPostedBadDescriptor) rc = TWOHOP_ERR_TRANSPORT;
        if (rc == TWOHOP_OK) {
            finished_ = true;
            twohop::count(TWOHOP_COUNTER_GPU_HOP1_CALLS);
            twohop::count(TWOHOP_COUNTER_DOORBELLS, job_.doorbells());
            if (timed_) log_times();
        }
        return rc;
    }
    bool waiting_on_application() const override { return !arrived_; }
    uint64_t reserved_first_seq() const override { return s0_ + 1; }

  private:
    using Clock = std::chrono::steady_clock;
    uint64_t nseg() const { return job_.segments(); }
    /* Verbose 3: where the call's host side spent its time (its job, from when it started). */
    void log_times() {
        auto us = [this](Clock::time_point t) {
            return t == Clock::time_point{}
                       ? -1.0
                       : std::chrono::duration<double, std::micro>(t - t_[0]).count();
        };
        char msg[400];
        std::snprintf(msg, sizeof(msg),
                      "stream-ordered call's host side: %llu B, %llu segments; queued %.1f us "
                      "before its job started; from then: every local stream reached it %.1f "
                      "us, first descriptor %.1f us, hop 2 done %.1f us, last finish gate %.1f "
                      "us, stream released %.1f us",
                      static_cast<unsigned long long>(bytes_),
                      static_cast<unsigned long long>(nseg()),
                      std::chrono::duration<double, std::micro>(t_[0] - t_queued_).count(),
                      us(t_[1]), us(t_[2]), us(t_[3]), us(t_[4]), us(Clock::now()));
        c_->host.log(3, msg);
    }
    twohop_comm *c_;
    uint64_t s0_;
    int ready_word_;
    GpuStreamSlot slot_;
    RingBackend backend_;
    twohop::PostedJob job_;
    bool arrived_ = false, finished_ = false;
    uint64_t bytes_;
    bool timed_, started_ = false;
    Clock::time_point t_queued_{}, t_[5]{}; // started, arrived, first, hop 2, last gate
};

} // namespace

namespace {

/*
 * Round 1 and the node's vote of stream-ordered call s (the number the caller took) on the
 * device buffers. TWOHOP_OK with *yes: the node runs it on the application's stream, hop 1
 * active on *device and s given back (the call reserves its segments' numbers next). TWOHOP_OK
 * with !*yes: a rank voted no, s given back (the caller takes the host copy). Otherwise an
 * error, with c->seq rewound to s (the caller records the failure under c->seq.last() + 1,
 * where the node peers look for it).
 */
int stream_call_rounds(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                       const twohop_reduction &red, uint64_t bytes, void *stream, uint64_t s,
                       int *device, bool *yes) {
    *yes = false;
    // Round 1: my descriptor (no wait for my input: the streams order it).
    GpuDesc d;
    bool stage_in = false, stage_out = false;
    describe(c, in, out, red, bytes, &d, device, &stage_in, &stage_out, true);
    if (stage_in || stage_out) d.can = 0; // staging copies would need the device's order
    if (d.can && stream && cuda::stream_device(stream) != *device) d.can = 0;
    // The call's ring holds the segments posted and not yet consumed: at most depth + 1.
    if (uint64_t(c->depth) + 1 >= twohop::DoorbellRing::kSlots) d.can = 0;
    if (d.can && !cuda::preload(*device, "th_post")) d.can = 0;
    if (d.can && !cuda::preload(*device, kernel_name(red.dtype, red.op))) d.can = 0;
    publish_desc(c, d, s);
    if (!d.can) return vote_no(c, s);
    auto failed = [c, s](int rc) {
        c->seq.rewind(s);
        return rc;
    };
    int rc;
    // No engine lock here: waits that leave the transport to the queued calls' driver.
    if ((rc = wait_all_unlocked(c, &RankFlags::desc_seq, s)) != TWOHOP_OK) return failed(rc);
    GpuDesc peer[TWOHOP_GPU_MAX_RANKS];
    bool one_device = true, all = true;
    if ((rc = vote_round(c, d, *device, s, peer, &one_device, &all, true)) != TWOHOP_OK) {
        return failed(rc);
    }
    if (!all) return decline(c, s);
    // Hop 3 gathered from gather_min_bytes (agreed; the message size is the same on every
    // rank). Below it the node's ranks would wait on each other's copies for little gain.
    const bool gather_pays = bytes >= c->gather_min_bytes;
    if ((rc = activate_hop1(c, peer, *device, one_device, in.device, out.device,
                            gather_pays)) != TWOHOP_OK) {
        return failed(rc);
    }
    c->gpu_hop1.active = false; // this call's pipeline is the stream's, not a host job's
    (void)decline(c, s);
    *yes = true;
    return TWOHOP_OK;
}

/*
 * The stream's half of a call the node runs on the device buffers: the call kernel
 * (kernel_blocks > 0, with its counters: it writes my `ready`, waits for the local ranks',
 * runs the segments and writes the slot's `released`, one launch in all) or, without it,
 * stream operations: the `ready` handshake, every segment at once, the `released` write.
 * Sets sched->ok (false: something was not enqueued).
 */
void enqueue_stream_half(PostedSchedule *sched, int device, const GpuStreamSlot &slot,
                         int ready_word, unsigned long long *counters, int kernel_blocks) {
    twohop_comm *c = sched->c;
    const int me = c->topo.local_rank;
    const uint64_t ready = sched->s0 + 1;
    if (kernel_blocks > 0) {
        sched->ready_seq = ready;
        sched->ready_word = ready_word;
        sched->end_word = slot.released_dev;
        sched->end_value = slot.token;
        sched->call(counters, kernel_blocks);
        return;
    }
    void *st = sched->stream;
    sched->ok = cuda::write_flag(device, st, ready_addr(c, me, ready_word), ready);
    for (int l = 0; sched->ok && l < c->topo.local_size(); ++l) {
        if (l != me) sched->ok = cuda::wait_flag(device, st, ready_addr(c, l, ready_word), ready);
    }
    (void)sched->enqueue([] { return UINT64_MAX; }); // the whole call at once
    sched->ok = sched->ok && cuda::write_flag(device, st, slot.released_dev, slot.token);
}

/* Verbose 3: where a stream-ordered call on the device buffers spent its time on the calling
 * thread (t: the call's entry into this path, the rounds' end, the kernel chosen, the job
 * queued, the stream's half enqueued). */
void log_stream_call(twohop_comm *c, uint64_t bytes, uint64_t nseg, bool one_kernel,
                     bool gathered, Clock::time_point entry, const Clock::time_point (&t)[5]) {
    char msg[400];
    std::snprintf(msg, sizeof(msg),
                  "stream-ordered call on the device buffers: %llu B, %llu segments "
                  "GPU-posted on the application's stream (%s)%s; before the rounds %.1f "
                  "us, rounds %.1f us, enqueue %.1f us (kernel chosen %.1f, job queued "
                  "%.1f, stream work %.1f)",
                  static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(nseg),
                  one_kernel ? "one kernel" : "stream operations per segment",
                  gathered ? ", hop 3 gathered on the GPU" : "", us_between(entry, t[0]),
                  us_between(t[0], t[1]), us_between(t[1], t[4]), us_between(t[1], t[2]),
                  us_between(t[2], t[3]), us_between(t[3], t[4]));
    c->host.log(3, msg);
}

} // namespace

int gpu_stream_posted(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                      uint64_t count, const twohop_reduction &red, void *stream,
                      const GpuStreamSlot &slot,
                      const std::function<int(std::unique_ptr<twohop::Job>)> &submit,
                      bool *on_gpu) {
    *on_gpu = false;
    GpuHop1 &h = c->gpu_hop1;
    const uint64_t bytes = count * red.item_bytes;
    const uint64_t s = c->seq.take();
    Clock::time_point t[5]; // start, rounds done, kernel chosen, job queued, stream half done
    t[0] = Clock::now();

    // 1. The node's rounds.
    int device = -1;
    bool yes = false;
    int rc = stream_call_rounds(c, in, out, red, bytes, stream, s, &device, &yes);
    if (rc != TWOHOP_OK || !yes) return rc;
    t[1] = Clock::now();
    // An error from here leaves the failed call's number as the next one (as in the rounds).
    auto failed = [c, s](int e) {
        c->seq.rewind(s); // also the block reserved below
        return e;
    };
    // One kernel for the call's GPU side (posted_call.h) when this rank uses it.
    // (Without its counters, stream operations: this rank's choice.)
    int kernel_blocks = call_kernel_blocks(c, red, bytes, device);
    unsigned long long *counters =
        kernel_blocks > 0 ? call_counters(c, device, slot.index) : nullptr;
    if (counters == nullptr) kernel_blocks = 0;
    t[2] = Clock::now();

    // 2. The call's sequence numbers, its ring, its job (queued before the stream may wait on
    // it), then the stream's half.
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes);
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const uint64_t s0 = c->seq.reserve(nseg);
    // The call's `ready` word: the node's calls of this form in turn (every local rank counts
    // the calls its node agreed to run here, so the word is the same on all of them).
    const int ready_word =
        static_cast<int>(c->stream_ready_calls++ % twohop::RankFlags::kReadyWords);
    twohop::reset(slot.ring);
    slot.enqueue_state->store(0, std::memory_order_relaxed);
    slot.job_live->store(true, std::memory_order_release);
    std::unique_ptr<twohop::Job> job(
        new StreamPostedJob(c, red, count, seg_items, s0, nseg, slot, ready_word));
    if ((rc = submit(std::move(job))) != TWOHOP_OK) return failed(rc); // dropped: waits released
    // From here the stream waits on the slot's words: it stays in use until `released`.
    *slot.slot_token = slot.token;
    t[3] = Clock::now();

    void *st = stream ? stream : cuda::legacy_stream();
    PostedSchedule sched{c, st, slot.ring_dev, s0, count, seg_items, nseg, red, out.device};
    enqueue_stream_half(&sched, device, slot, ready_word, counters, kernel_blocks);
    const bool gathered = h.gather;
    h.gather = false;
    if (!sched.ok) {
        slot.enqueue_state->store(-1, std::memory_order_release);
        return failed(gpu_error(c, "enqueueing a stream-ordered allreduce failed on local rank",
                                c->topo.local_rank));
    }
    slot.enqueue_state->store(1, std::memory_order_release);
    *on_gpu = true;
    if (c->verbose >= 3) {
        t[4] = Clock::now();
        log_stream_call(c, bytes, nseg, kernel_blocks > 0, gathered, slot.entry, t);
    }
    return TWOHOP_OK;
}
