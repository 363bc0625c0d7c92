/*
 * The node's GPU path as an engine job (gpu_node_job): the rounds of node_path.cpp as steps
 * that never wait, and on several nodes the GPU-posted job or the CPU-posted GPU pipeline.
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

#include "engine.h"
#include "posted_exec.h"
#include "proxy.h"
#include "rail_backend.h"
#include "slots.h"

using namespace twohop_gpu;

namespace {

/*
 * gpu_node_job's job: gpu_node_allreduce's rounds as steps that never wait (job.h).
 *   start    s = ++seq; describe this rank's buffers; a rank that cannot take the GPU path
 *            publishes its descriptor and its "no" (vote_no) and runs the host path at once
 *            (else the input synchronised: the legacy stream)
 *   free     peers done with call s - depth (they may still read this rank's staging buffer);
 *            then the input staged if needed, the descriptor published
 *   desc     every local rank's descriptor of s published; this rank's vote published
 *   vote     every local rank voted; all yes: the kernel (node_kernel, which waits for this
 *            rank's GPU only) and `reduced`; a no: decline, the host path's job
 *   reduced  every local rank's kernel done; the staged result copied out, `done`
 * Its CUDA calls run on the threads that advance it: device buffers make it a call the proxy
 * thread never advances (engine.cpp, async_safe); with host buffers it never reaches a CUDA
 * call (describe declines before the first).
 */
class GpuNodeJob : public twohop::Job {
  public:
    GpuNodeJob(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
               uint64_t count, const twohop_reduction &red)
        : c_(c), in_(in), out_(out), count_(count), red_(red),
          host_async_(twohop::call_async_safe(c, in, out, red)) {}

    int advance() override {
        const bool proxy = twohop::Proxy::on_proxy_thread();
        if (!proxy) handback_ = false; // a thread inside MPI: every step is allowed
        // The proxy's steps with CUDA calls: none while a kernel that waits for it may exist.
        // Held for the whole pass (the transitions go on in run_states); never taken twice by
        // one thread (t_cuda_step: a job advanced from inside another's step).
        // The proxy never waits for the lock: its holder may be an MPI thread closing a stale
        // mapping, which waits for GPU work that may wait for a gate only the proxy opens.
        if (!proxy || !cuda_state() || t_cuda_step) return run_states(proxy);
        std::unique_lock<std::mutex> cuda_step(g_cuda_step_m, std::try_to_lock);
        if (!cuda_step.owns_lock() || g_waiting_kernels.load(std::memory_order_acquire) > 0) {
            return TWOHOP_PENDING;
        }
        struct Held {
            Held() { t_cuda_step = true; }
            ~Held() { t_cuda_step = false; }
        } held;
        return run_states(proxy);
    }

  private:
    /* The states from the current one on, as far as they go without waiting (`proxy`: on
     * the proxy thread, which stops before the steps it must leave to MPI threads). */
    int run_states(bool proxy) {
        switch (state_) {
        case kStart: {
            ++steps_;
            s_ = c_->seq.take();
            describe(c_, in_, out_, red_, bytes(), &d_, &device_, &stage_in_, &stage_out_);
            // The input: the application's work on the legacy stream, taken when the job
            // starts (in the starting call unless calls are queued before it), not later in
            // MPI progress, where it would also wait for work queued after the start.
            if (d_.can && !cuda::sync_input(device_)) d_.can = 0;
            // The peers' descriptors (4 KB): only a rank that may vote yes reads them, so a
            // call on host buffers never allocates them; without them this rank votes no.
            if (d_.can) peer_.reset(new (std::nothrow) GpuDesc[TWOHOP_GPU_MAX_RANKS]);
            if (!peer_) d_.can = 0;
            if (d_.can && c_->topo.n_nodes() > 1) d_.posted = can_post() ? 1 : 0;
            if (!d_.can) {
                publish_desc(c_, d_, s_);
                (void)vote_no(c_, s_);
                return to_host();
            }
            state_ = kFree;
        }
        // fall through
        case kFree: {
            const uint64_t depth = static_cast<uint64_t>(c_->depth);
            if (s_ > depth) {
                const int rc = twohop::test_all(c_, &RankFlags::done, s_ - depth);
                if (rc != TWOHOP_OK) return rc;
            }
            ++steps_;
            if (stage_in_ && !cuda::copy(send_stage(), in_.device, bytes())) d_.can = 0;
            publish_desc(c_, d_, s_);
            if (!d_.can) {
                (void)vote_no(c_, s_);
                return to_host();
            }
            state_ = kDesc;
        }
        // fall through
        case kDesc: {
            int rc = twohop::test_all(c_, &RankFlags::desc_seq, s_);
            if (rc == TWOHOP_PENDING) {
                // A peer that runs call s on the host path without a descriptor (an
                // erroneous program: another form or call on its side) would never publish
                // one. (`arrived` is written after `desc_seq` by a peer that
                // voted: read first, it orders the read of desc_seq after that write.)
                for (int l = 0; l < c_->topo.local_size(); ++l) {
                    const RankFlags &f = c_->shm.flags(l);
                    if (f.arrived.load(std::memory_order_acquire) >= s_ &&
                        f.desc_seq.load(std::memory_order_acquire) < s_) {
                        return TWOHOP_ERR_MISMATCH;
                    }
                }
            }
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            if ((rc = vote_publish(c_, d_, device_, s_, peer_.get(), &one_device_)) !=
                TWOHOP_OK) {
                if (rc == TWOHOP_PENDING) handback_ = true; // a stale mapping to close first
                return rc;
            }
            state_ = kVote;
        }
        // fall through
        case kVote: {
            int rc = twohop::test_all(c_, &RankFlags::vote, s_ << 1);
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            bool all = true;
            for (int l = 0; l < c_->topo.local_size(); ++l) {
                all = all && (c_->shm.flags(l).vote.load(std::memory_order_acquire) & 1);
            }
            if (!all) {
                (void)decline(c_, s_);
                return to_host();
            }
            if (c_->topo.n_nodes() > 1) {
                bool posted = true; // every local rank can run the GPU-posted job
                for (int l = 0; l < c_->topo.local_size(); ++l) {
                    posted = posted && peer_[l].posted != 0;
                }
                return posted ? to_gpu_posted() : to_gpu_pipeline();
            }
            if ((rc = node_kernel(c_, peer_.get(), device_, one_device_,
                                  stage_in_ ? send_stage() : in_.device,
                                  stage_out_ ? recv_stage() : out_.device, count_, red_, s_,
                                  stage_in_, stage_out_)) != TWOHOP_OK) {
                return rc;
            }
            c_->shm.flags(c_->topo.local_rank).reduced.store(s_, std::memory_order_release);
            state_ = kReduced;
        }
        // fall through
        case kReduced: {
            if (stage_out_ && proxy) return TWOHOP_PENDING; // a synchronous copy: MPI threads
            const int rc = twohop::test_all(c_, &RankFlags::reduced, s_);
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            if (stage_out_ && !cuda::copy(out_.device, recv_stage(), bytes())) {
                return gpu_error(c_, "copying the result out of twohop's device staging on "
                                     "local rank", c_->topo.local_rank);
            }
            c_->shm.flags(c_->topo.local_rank).done.store(s_, std::memory_order_release);
            twohop::count(TWOHOP_COUNTER_GPU_PATH_CALLS);
            state_ = kEnded;
            return TWOHOP_OK;
        }
        case kHost: {
            const int rc = host_->advance();
            steps_ = host_base_ + host_->steps();
            return rc;
        }
        case kPosted: {
            // Host memory and UCX only (RingBackend): the proxy thread may run this step.
            const uint64_t before = posted_->job.posted() + posted_->job.retired();
            int rc = posted_->job.step(TWOHOP_PENDING);
            steps_ += posted_->job.posted() + posted_->job.retired() - before;
            if (rc == TWOHOP_PENDING) return rc;
            if (rc == twohop::kPostedBadDescriptor) rc = TWOHOP_ERR_TRANSPORT;
            end_posted(rc);
            state_ = kEnded;
            return rc;
        }
        case kGpuPipeline: {
            const int rc = host_->advance();
            steps_ = host_base_ + host_->steps();
            if (rc == TWOHOP_PENDING) return rc;
            if (rc == TWOHOP_OK) twohop::count(TWOHOP_COUNTER_GPU_HOP1_CALLS);
            end_gpu_pipeline(rc != TWOHOP_OK);
            state_ = kEnded;
            return rc;
        }
        case kEnded:
            break;
        }
        return TWOHOP_OK;
    }

  public:
    ~GpuNodeJob() override {
        // Ended early (a failure elsewhere, the communicator's teardown): the pipeline's GPU
        // work must end before its buffers may be reused; the posted kernel's waits released.
        if (state_ == kGpuPipeline) end_gpu_pipeline(true);
        if (state_ == kPosted) end_posted(TWOHOP_ERR_TRANSPORT);
    }
    /*
     * Which states the proxy thread may advance (job.h): with host buffers those of the host
     * path's job where it may (the starting call's choice, host_async_); with device buffers,
     * given asynchronous progress, the vote (published flags, cached CUDA queries), the
     * node's kernel on the communicator's stream and the waits for it, the GPU pipeline
     * (kernels, copies and events on that stream, hop 2 over UCX) and the GPU-posted job's
     * host side -- not the start (the input's synchronisation with the application's legacy
     * stream), copies through twohop's device staging (synchronous copies, ordered with the
     * legacy stream), the host path's memory-kind copies, nor the closing of a stale CUDA IPC
     * mapping (handback_). So a call moves while the application computes on every local rank.
     */
    bool async_now() const override {
        if (cuda_state() && g_waiting_kernels.load(std::memory_order_acquire) > 0) return false;
        switch (state_) {
        case kStart:
        case kHost: return host_async_;
        case kFree: return c_->async_progress && !stage_in_;
        case kDesc: return c_->async_progress && !handback_;
        case kVote: return c_->async_progress;
        case kReduced: return c_->async_progress && !stage_out_;
        case kGpuPipeline:
        case kPosted: return c_->async_progress;
        case kEnded: break;
        }
        return false;
    }
    /* States whose steps may make CUDA calls (the vote's device queries and mappings, the
     * kernels, the pipeline's launches, copies and events). */
    bool cuda_state() const {
        return state_ == kFree || state_ == kDesc || state_ == kVote || state_ == kReduced ||
               state_ == kGpuPipeline;
    }
    bool async_managed() const override { return true; }

  private:
    enum State { kStart, kFree, kDesc, kVote, kReduced, kHost, kGpuPipeline, kPosted, kEnded };
    /* The host side of the GPU-posted job: the blocking call's (gpu_posted_pipeline). */
    struct Posted {
        RingBackend backend;
        twohop::PostedJob job;
        Posted(twohop_comm *c, const twohop_reduction &red, uint64_t count, uint64_t seg_items,
               uint64_t s0, uint64_t nseg, twohop::DoorbellRing *ring)
            : backend(c, red, count, seg_items, s0, nseg, ring,
                      [ring]() -> int {
                          // The kernel's last block writes `drained`, also after a wait of
                          // it timed out (then `fault` is set).
                          if (__atomic_load_n(&ring->drained, __ATOMIC_ACQUIRE) == 0) return 0;
                          return __atomic_load_n(&ring->fault, __ATOMIC_ACQUIRE) != 0
                                     ? int(TWOHOP_ERR_TIMEOUT)
                                     : 1;
                      }),
              job(ring, &backend, s0, nseg, c->timeout_s, TWOHOP_ERR_TIMEOUT) {}
    };
    /*
     * Whether this rank can run the call as the GPU-posted job (published as `posted`; the
     * node takes it when every local rank can, else the CPU-posted pipeline): GPU-posted mode
     * (coll_twohop_gpu_posted, agreed) with asynchronous progress on this rank (the kernel
     * waits for the hop-2 results the host side posts: without the proxy thread only the
     * application's MPI calls would move them, and a cudaDeviceSynchronize before MPI_Wait
     * would wait forever), the call kernel (no stream-operation form: it enqueues more as
     * results arrive, work for the calling thread), the ring, its counters and the
     * communicator's job stream on this device. CUDA calls: on the starting thread.
     */
    bool can_post() {
        if (!c_->posted_nonblocking || !c_->gpu_posted || !c_->async_progress) return false;
        GpuHop1 &h = c_->gpu_hop1;
        kernel_blocks_ = call_kernel_blocks(c_, red_, bytes(), device_);
        if (kernel_blocks_ <= 0 || !ensure_ring(c_, device_)) return false;
        if ((counters_ = call_counters(c_, device_, kBlockingCounters)) == nullptr) return false;
        return h.own_stream(device_) != nullptr;
    }
    /*
     * Several nodes, every local rank voted yes and can post: the blocking GPU-posted call's
     * GPU side (PostedSchedule::call: one kernel, hop 1 into host memory, descriptors and
     * doorbells, waits on the gates, hop 3 gathered from coll_twohop_gpu_hop3_gather_min_bytes)
     * launched once on the communicator's job stream, then its host side (PostedJob over
     * RingBackend: hop-2 posts, `reduced`, the gates) as steps that read host memory and drive
     * UCX only -- so the proxy thread advances them too (async_now), and the call moves while
     * the application computes. The round's sequence number is given back; the call's
     * segments take the next ones, as in the blocking call.
     */
    int to_gpu_posted() {
        GpuHop1 &h = c_->gpu_hop1;
        int rc = activate_hop1(c_, peer_.get(), device_, one_device_,
                               stage_in_ ? send_stage() : in_.device, out_.device,
                               bytes() >= c_->gather_min_bytes);
        if (rc != TWOHOP_OK) return rc;
        (void)decline(c_, s_);
        const uint64_t seg_items = twohop::segment_items(c_->slot_bytes, red_.item_bytes);
        const uint64_t nseg = twohop::segment_count(count_, seg_items);
        twohop::reset(h.ring);
        s0_ = c_->seq.reserve(nseg);
        posted_.reset(new (std::nothrow) Posted(c_, red_, count_, seg_items, s0_, nseg, h.ring));
        if (!posted_) {
            release_posted(c_, h.ring, s0_);
            h.active = h.gather = false;
            return TWOHOP_ERR_NO_MEMORY;
        }
        posted_->backend.gates(); // segments whose sets are free need no wait on the GPU
        PostedSchedule sched{c_, h.own_stream(device_), h.ring_dev, s0_, count_, seg_items, nseg, red_,
                             out_.device};
        sched.end_word = &h.ring_dev->drained;
        sched.end_value = 1;
        sched.bounded = true;
        gpu_waiting_kernel_begin(); // ended where job_pending is cleared
        h.job_pending = true;
        sched.call(counters_, kernel_blocks_);
        if (!sched.ok) {
            release_posted(c_, h.ring, s0_);
            gpu_settle(c_);
            h.active = h.gather = false;
            posted_.reset();
            return gpu_error(c_, "launching the GPU-posted call kernel failed on local rank",
                             c_->topo.local_rank);
        }
        host_base_ = steps_;
        state_ = kPosted;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /* The GPU-posted job ended with rc (or is dropped). OK: the kernel wrote `drained`, its
     * last act. Else every wait of the kernel is released (host writes: this may run on the
     * proxy thread, which makes no CUDA call); the kernel's end is awaited where the
     * communicator's GPU work is next settled (GpuHop1::settle: a later CUDA-side step on an
     * MPI thread, or the communicator's end). */
    void end_posted(int rc) {
        GpuHop1 &h = c_->gpu_hop1;
        twohop::count(TWOHOP_COUNTER_DOORBELLS, posted_->job.doorbells());
        if (rc == TWOHOP_OK) {
            h.job_pending = false; // the kernel wrote `drained`, its last act
            gpu_waiting_kernel_end();
            twohop::count(TWOHOP_COUNTER_GPU_HOP1_CALLS);
            twohop::count(TWOHOP_COUNTER_GPU_POSTED_CALLS);
        } else {
            release_posted(c_, h.ring, s0_);
        }
        h.active = h.gather = false;
    }
    uint64_t bytes() const { return count_ * red_.item_bytes; }
    /* twohop's device staging buffers (gpu_node_allreduce's: the send side is the receive
     * buffer's when in place). */
    char *send_stage() const {
        return static_cast<char *>(c_->gpu_staging[d_.in_place ? 1 : 0].ptr);
    }
    char *recv_stage() const { return static_cast<char *>(c_->gpu_staging[1].ptr); }
    /* The node declined (sequence number given back): the host path's job runs the call
     * (on the proxy thread only where its steps are safe there: host_async_). */
    int to_host() {
        host_ = twohop::make_job(c_, in_, out_, count_, red_);
        host_base_ = steps_;
        state_ = kHost;
        if (!host_async_ && twohop::Proxy::on_proxy_thread()) return TWOHOP_PENDING;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /*
     * Several nodes, every local rank voted yes: the pipeline with hop 1 and hop 3 on the GPU
     * (activate_hop1; PipelineJob polls the communicator's stream, never waits for it), CPU-posted as
     * the blocking call with coll_twohop_gpu_posted 0 -- the GPU-posted form's calling thread
     * enqueues more as results arrive, which a job advanced by MPI progress cannot. Hop 3
     * gathers on the GPU wherever the blocking CPU-posted call does (every local rank reads
     * the same descriptors and parameters). The round's sequence number is given back: the
     * pipeline runs the call from it, as on the ranks of nodes that declined. Only the oldest
     * call of the communicator runs (engine.cpp), so the communicator's per-call GPU state
     * (GpuHop1::active, in[], out[]) is this job's until end_gpu_pipeline.
     */
    int to_gpu_pipeline() {
        const int rc = activate_hop1(c_, peer_.get(), device_, one_device_,
                                     stage_in_ ? send_stage() : in_.device, out_.device, true);
        if (rc != TWOHOP_OK) return rc;
        (void)decline(c_, s_);
        host_ = twohop::make_job(c_, in_, out_, count_, red_);
        host_base_ = steps_;
        state_ = kGpuPipeline;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /* The pipeline ended (or the job is dropped): on failure the communicator's stream
     * drained first. */
    void end_gpu_pipeline(bool failed) {
        // Not on the proxy outside a step's lock (the job dropped there by a timeout): the
        // work stays pending for the communicator's next settle.
        if (failed && (!twohop::Proxy::on_proxy_thread() || t_cuda_step)) gpu_settle(c_);
        c_->gpu_hop1.active = false;
        c_->gpu_hop1.gather = false;
    }
    twohop_comm *c_;
    const twohop_userbuf in_, out_;
    const uint64_t count_;
    const twohop_reduction red_;
    State state_ = kStart;
    uint64_t s_ = 0;
    GpuDesc d_{};
    int device_ = -1;
    bool stage_in_ = false, stage_out_ = false, one_device_ = true;
    std::unique_ptr<GpuDesc[]> peer_; // the peers' descriptors, from the vote on
    int kernel_blocks_ = 0;           // can_post: the call kernel's blocks per half
    unsigned long long *counters_ = nullptr; // and its arrival counters
    uint64_t s0_ = 0;                 // GPU-posted: the sequence number before the segments'
    std::unique_ptr<Posted> posted_;
    std::unique_ptr<twohop::Job> host_;
    uint64_t host_base_ = 0;
    const bool host_async_;  // the host path's job on these buffers is safe on the proxy
    bool handback_ = false;  // the proxy stopped before the vote's closes (vote_publish)
};

} // namespace

std::unique_ptr<twohop::Job> gpu_node_job(twohop_comm *c, const twohop_userbuf &in,
                                          const twohop_userbuf &out, uint64_t count,
                                          const twohop_reduction &red) {
    return std::unique_ptr<twohop::Job>(new GpuNodeJob(c, in, out, count, red));
}
