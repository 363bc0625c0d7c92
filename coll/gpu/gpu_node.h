/*
 * The node's GPU path for one allreduce on a single-node communicator whose buffers are all
 * CUDA device memory: every local rank reduces its shard of the message straight from the
 * other ranks' device buffers (CUDA IPC) and writes the result into every rank's receive
 * buffer, in one kernel (reads p·n, writes p·n bytes of HBM in all: the copy bound).
 *
 * Whether a call takes it is decided per call by the node's ranks together, never by one rank:
 *   round 1  each rank publishes a descriptor (can I: device buffers in the canonical layout,
 *            a GPU kernel for the (type, op), IPC handles, my GPU's PCI id) and desc_seq = s
 *   round 2  each rank checks it can reach every peer's GPU and publishes its vote
 *   decision GPU path iff every vote is yes; otherwise every rank takes the host path.
 * A rank that cannot publishes its "no" in round 1 and goes on without waiting. A round that
 * does not end in the node's GPU path gives its sequence number back: the host path (or the
 * pipeline, with hop 1 on the GPU) runs the call with the same number.
 * Only communicators whose ranks all agreed at set-up that they have the driver and the
 * kernels, on one node, run the rounds (identical on every rank).
 */
#ifndef TWOHOP_GPU_NODE_H
#define TWOHOP_GPU_NODE_H

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "cuda_driver.h"
#include "doorbell_ring.h"
#include "job.h"
#include "reducer.h"
#include "twohop_core.h"
#include "wake_lead.h"

struct twohop_comm;

/*
 * A device buffer twohop owns for a rank whose own buffer cannot be shared through CUDA IPC
 * (stream-ordered pool or managed memory): the input is copied in before the call and the
 * result out after it, both device-to-device. Grown on demand, freed with the communicator.
 */
struct GpuStaging {
    void *ptr = nullptr;
    uint64_t bytes = 0;
    int device = -1;
    // Outgrown buffers stay allocated until the communicator is freed: peers may still hold
    // them mapped through CUDA IPC, and freeing exported memory before every importer closed
    // it is undefined (CUDA driver API, cuIpcOpenMemHandle).
    std::vector<std::pair<int, void *>> retired;
    ~GpuStaging();
};

/*
 * Where the single-node GPU path's calls spent their time on the calling thread (verbose >= 2
 * only; logged once at the communicator's end, verbose 2, as the median of each phase over the
 * calls taken on the GPU path, the first 65536 of them): [0] waiting for the application's
 * work on the legacy stream (the input), [1] the descriptor round (every local rank's
 * buffers), [2] the vote round, [3] the kernel (arguments, launch and stream
 * synchronisation), [4] the completion round (every local rank's kernel done). Microseconds.
 */
struct GpuPathClock {
    std::vector<std::array<float, 5>> calls;
};

/*
 * The node GPU path as a job (job.h), for non-blocking and persistent calls: the rounds of
 * gpu_node_allreduce as steps that never wait, then -- one node -- the kernel, or -- several
 * nodes -- the pipeline with hop 1 and hop 3 on the GPU (CPU-posted; GPU-posted when every
 * local rank sets coll_twohop_posted_nonblocking and can run the call kernel), or -- when the
 * node declines (a rank's buffers are host memory, not shareable, a user op) -- the host
 * path's job (make_job) for the same call. For communicators that run the GPU vote
 * (twohop_comm::gpu_round) where the blocking call votes: one node at every message size,
 * several nodes on the pipeline path. Every local rank must take part in the vote for the
 * call, whatever its memory kinds (the vote is the node's), so the caller decides from the
 * agreed state, the node count and the message size only (docs/design.md, "The rule"). A rank
 * whose buffers cannot take the GPU path votes no without waiting (vote_no); one that knows it
 * before any CUDA call (gpu_declines_at_once) queues the host path's job alone, which publishes
 * the same no (gpu_decline_first). The job makes
 * CUDA calls only with device buffers; the proxy thread advances it only where
 * Job::async_now says so (the GPU-posted job after its kernel's launch: host memory and UCX).
 */
std::unique_ptr<twohop::Job> gpu_node_job(twohop_comm *c, const twohop_userbuf &in,
                                          const twohop_userbuf &out, uint64_t count,
                                          const twohop_reduction &red);

/*
 * True when this rank's buffers cannot take the node's GPU path whatever its peers pass: a
 * buffer in host memory (no device pointer), a user op, no kernel for (type, op). Such a rank
 * votes no without a CUDA call and without waiting (vote.cpp: describe, vote_no), so its call
 * can be the host path's job alone, with gpu_decline_first as its Job::decline_first.
 */
bool gpu_declines_at_once(const twohop_userbuf &in, const twohop_userbuf &out,
                          const twohop_reduction &red);

/*
 * This rank's "no" to the node's GPU round of call s, published by the host job that runs
 * call s under the same number (twohop::DeclineFn): the descriptor describe() leaves for a
 * rank that declines at once (msg_bytes and item_bytes, which the voting peers compare with
 * theirs), desc_seq = s and vote = (s, no) -- the words gpu_node_allreduce's round publishes
 * before it gives s back, so peers that vote see the same round either way.
 */
void gpu_decline_first(twohop_comm *c, uint64_t s, uint64_t msg_bytes, uint64_t item_bytes);

/* Logs c->gpu_clock (verbose 2) when calls were clocked. */
void gpu_node_log_phases(twohop_comm *c);

/*
 * Runs the decision rounds and, when every local rank can, the GPU path. *taken tells whether
 * the call was done here (else the caller runs the host path). Returns a twohop_status.
 */
int gpu_node_allreduce(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                       uint64_t count, const twohop_reduction &red, bool *taken);

namespace twohop {
/* The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID; 0 if unavailable). */
inline double thread_cpu_s() {
    timespec t{};
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
} // namespace twohop

/*
 * Multi-node communicators: hop 1 and hop 3 on the GPU. When the node's ranks agreed for a
 * call (the same rounds as the GPU path), each shard owner's kernel reads its shard of every
 * local rank's device input (CUDA IPC) and writes the node's partial result straight into the
 * segment's result buffer in host shared memory (registered with the driver, so the kernel
 * writes it over PCIe); hop 2 then runs on the host as always, and hop 3 copies each shard's
 * result from there into the device receive buffer with asynchronous copies. Kernels and
 * copies go to twohop's own stream; the pipeline polls a fence (a CUDA event) while it keeps
 * the other segment's hop-2 transfers moving, instead of blocking in a stream synchronisation.
 */
struct GpuHop1 {
    bool active = false;            // this call's pipeline runs hop 1 and hop 3 on the GPU
    // Verbose 3: when the current blocking call reached run_call, and the calling thread's CPU
    // time then (seconds, CLOCK_THREAD_CPUTIME_ID): the GPU-posted call logs its rounds' share.
    std::chrono::steady_clock::time_point call_entry{};
    double call_entry_cpu = 0;
    int device = -1;
    bool one_device = false;        // every local input is on this rank's GPU
    char *in[16] = {};              // every local rank's input (canonical start), mapped here
    // Hop 3 on the GPU (coll_twohop_gpu_hop3_gather): each rank copies its own shards from
    // host memory into its receive buffer, then its peers' shards from theirs (out[l], mapped
    // here; out[local rank] is my own receive buffer).
    bool gather = false;
    char *out[16] = {};
    char *shm_host = nullptr;       // the registered segment, and where kernels see it
    char *shm_dev = nullptr;
    int reg_device = -1;
    int reg_failed_device = -1;     // registering for this device failed once: not retried
    uint64_t reg_bytes = 0;
    twohop::cuda::Fence fence;      // end of the work enqueued for the current segment
    bool pending = false;           // work was enqueued since the fence was last passed
    bool fenced = false;            // the fence marks the end of that work (gpu_hop1_test)
    // Stream-ordered calls (twohop_allreduce_enqueue): the end of the last one enqueued on the
    // application's stream. A host-side call on this communicator first waits for it: the GPU
    // writes this rank's flags, the host must not write them before it has.
    twohop::cuda::Fence enq_fence;
    bool enq_pending = false;
    int enq_device = -1;
    uint64_t enq_seq = 0; // its sequence number (a failure found when draining is that call's)
    // GPU-posted mode (coll_twohop_gpu_posted): the descriptor ring the GPU writes and the proxy
    // reads, in host memory registered with the driver (on ring_device).
    twohop::DoorbellRing *ring = nullptr;
    twohop::DoorbellRing *ring_dev = nullptr;
    int ring_device = -1;
    // The arrival counters of GPU-posted call kernels (posted_call.h), per device: one region
    // per stream slot and one for the blocking form, kept until the communicator ends.
    std::map<int, unsigned long long *> call_counters;
    // Blocking GPU-posted calls: per size class (floor(log2(bytes))), microseconds from the
    // last call's last finish gate to its end (0: none yet); coll_twohop_posted_wake_lead_us
    // wakes the next call's calling thread that long before the end this predicts.
    float tail_us[64] = {};
    // The same calls' wake lead per size class (wake_lead.h; coll_twohop_posted_wake_quantile,
    // coll_twohop_posted_wake_spin_us), made from the communicator's parameters at set-up.
    twohop::WakeLead wake[64];
    // Verbose >= 2: the same calls' measured wake-ups per size class, {lead, spin} in
    // microseconds (the lead the call had: its predicted tail less the time from the last
    // gate to when its caller was signalled -- `near` or the end; spin < 0: woke that late),
    // at most kWakeLogMax per class; summarised at the communicator's end
    // (gpu_node_log_phases). One line per class, never per call: logging every call through
    // mpirun's output forwarding delays the calls it measures.
    static constexpr size_t kWakeLogMax = 65536;
    std::vector<std::array<float, 2>> wake_log[64];
    // The communicator's own stream (created on first use, on stream_device) for all of its
    // GPU work outside the application's streams: the pipeline's hop-1 kernels and hop-3
    // copies, the node's kernel, the GPU-posted call kernel (blocking, and as a job). A call
    // kernel waits for this communicator's hop 2; on a stream of its own it never holds up
    // another communicator's GPU work, whatever order the ranks start, wait for and interleave
    // calls on several communicators in (twohop's stream is the process's). nullptr after a
    // driver error: twohop's stream (the cuda:: calls' default) instead.
    void *stream = nullptr;
    int stream_device = -1;
    bool job_pending = false;   // a GPU-posted job's kernel was launched and not seen to end
    bool stuck = false;         // settle() gave up: GPU work may still use the buffers
    double settle_timeout_s = 0; // settle()'s bound (coll_twohop_timeout; 0: none)
    /* The communicator's stream on `device`, created on first use (re-created, after
     * settle(), when the device changed); nullptr on a driver error. */
    void *own_stream(int device);
    /* Waits (spinning) until the work enqueued on the communicator's stream has completed --
     * its kernels' waits released first where they wait for other ranks (release_posted).
     * False when it did not within settle_timeout_s (`stuck`: the buffers and registrations
     * that work may use are then never released). */
    bool settle();
    /* settle(), then drops the segment's registration with the driver (before the segment is
     * handed to another communicator or unmapped). */
    void release_segment();
    ~GpuHop1();
};

/* A kernel or stream operation that waits for other ranks or for the proxy thread (the
 * GPU-posted call kernel, a stream-ordered call's wait on its gate) is about to be enqueued:
 * counted until gpu_waiting_kernel_end, called once when it is seen to end or its wait is
 * released. While any is counted the proxy makes no CUDA call and no vote closes a stale CUDA
 * IPC mapping (gpu/vote.cpp: g_waiting_kernels, g_cuda_step_m). */
void gpu_waiting_kernel_begin();
void gpu_waiting_kernel_end();

/* c's GPU work settled (GpuHop1::settle) after a failed call; logs (always) when it did not end
 * within coll_twohop_timeout. */
void gpu_settle(twohop_comm *c);

/* Enqueues hop 1 of one shard on the GPU: result = in_0 op ... op in_{L-1} over `items` items
 * at byte offset `off` of the message, into `result` (host shared memory). Returns at once;
 * gpu_hop1_test tells when it is done (on the communicator's stream; with `stream`, on that
 * stream, and the caller orders it). */
int gpu_hop1_post(twohop_comm *c, uint64_t off, uint64_t items, char *result,
                  const twohop_reduction &red, void *stream = nullptr);

/* Enqueues hop 3 of one shard: `len` bytes from `src` (host shared memory) to the device
 * address `dst` (the receive buffer). Returns at once. */
int gpu_hop3_post(twohop_comm *c, char *dst, const char *src, uint64_t len);

/* Whether everything enqueued by gpu_hop1_post / gpu_hop3_post has completed, without waiting:
 * TWOHOP_PENDING while that work runs (the first test marks its end with the fence), TWOHOP_OK
 * once it completed, or an error. Jobs use it (schedule/), so that
 * whoever drives them -- the calling thread, MPI progress or the proxy thread -- polls. */
int gpu_hop1_test(twohop_comm *c);

/*
 * GPU-posted pipeline (coll_twohop_gpu_posted = 1) of a multi-node call whose hop 1 the node
 * agreed to run on the GPU (c->gpu_hop1.active). By default the call's GPU side is one kernel
 * on the communicator's stream (coll_twohop_posted_kernel_blocks, posted/posted_call.h), then a
 * `drained` flag write; with coll_twohop_posted_kernel_blocks 0 the calling thread enqueues
 * stream operations per segment instead, at most 16 segments ahead of hop 2, in the CPU-posted
 * pipeline's order (start(0) .. start(depth - 1), finish(0), start(depth), finish(1), ...):
 *   start(k)   wait gate_start > k (buffer set free), hop-1 kernels of my shards into the
 *              set's result, th_post: descriptor k, doorbell every posted_batch segments and
 *              at the last
 *   finish(k)  wait gate_finish > k (every shard's hop-2 result published on the node), copy
 *              every shard into the receive buffer, done = s (stream write)
 * and, from coll_twohop_posted_proxy_min_bytes, sleeps while the proxy thread
 * (posted/proxy.h) runs the host side (smaller calls run it on the calling thread): it polls the
 * doorbell, starts the hop-2 rings of each announced segment, publishes reduced = s when they
 * complete, and opens the two gates (doorbell_ring.h) from the local ranks' done and reduced
 * flags. Returns a twohop_status; on failure the stream's waits are released (gates and local
 * flags set past any sequence) and the stream drained before returning.
 */
int gpu_posted_pipeline(twohop_comm *c, const twohop_userbuf &out, uint64_t count,
                        const twohop_reduction &red);

/*
 * The stream-ordered GPU path (twohop_allreduce_enqueue) of a single-node communicator whose
 * local ranks all pass device buffers of the canonical layout: the same decision rounds as
 * gpu_node_allreduce on the host (IPC handles, votes), then everything else is enqueued on
 * `stream` and the call returns at once:
 *   wait every local rank's done >= s - 1, [stage in], ready = s, wait every ready >= s,
 *   reduction kernel (my shard, all inputs to all outputs), reduced = s,
 *   wait every reduced >= s, [stage out], done = s
 * (flags in the node's registered shared memory, written and waited for by the GPU with
 * stream memory operations). *taken = false when the node voted for the host path or the
 * device lacks 64-bit stream memory operations: the caller then waits for the stream and runs
 * the blocking call. Returns a twohop_status.
 */
int gpu_node_enqueue(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                     uint64_t count, const twohop_reduction &red, void *stream, bool *taken);

/*
 * Waits until the last stream-ordered call of this rank on c has completed on its GPU,
 * polling c (so a node peer's death is noticed). When a peer is gone its flags are set to
 * their final value, so this rank's stream can drain, and TWOHOP_ERR_PEER is returned.
 */
int gpu_enqueue_drain(twohop_comm *c);

/*
 * Stream-ordered calls on several nodes that stay on the device buffers (stream_call.cpp;
 * coll_twohop_enqueue_on_device). The calling thread does every CUDA call of the call; the
 * proxy thread does none (a CUDA call there may block behind an application thread that waits
 * inside the driver for a stream which waits for the proxy: the deadlock NCCL's proxy avoids
 * the same way). At twohop_allreduce_enqueue:
 *   1. the node's decision rounds, on the calling thread (descriptor, vote; the wait is for the
 *      local peers' calling threads or jobs, never for a GPU), with sequence number s;
 *   2. when every local rank voted yes: the call's sequence numbers s .. s + nseg - 1 are
 *      reserved, the host side (StreamPostedJob: hop 2, the gates) is queued for the proxy
 *      thread, then everything else is enqueued on the application's stream:
 *        the GPU-posted call kernel, which writes ready = s when it starts and waits for
 *        every local ready >= s (every input produced) before hop 1 (or, with
 *        coll_twohop_posted_kernel_blocks 0, the stream operations ready = s, wait every local
 *        ready >= s, start(k) / finish(k) of gpu_posted_pipeline), with the call's own
 *        doorbell ring and gates (`ring`, in the call's host slot), hop 3 gathered from
 *        coll_twohop_gpu_hop3_gather_min_bytes [then: wait every local done >= s + nseg - 1],
 *        released = token;
 *   3. otherwise the rounds' sequence number is given back and the caller queues the host
 *      copy (the call's rounds are done: its job does not vote again).
 * It may run only when no call that takes its sequence numbers when it starts is queued on
 * c (twohop_comm::lazy_jobs == 0): then the calling thread owns c->seq (the queued calls are
 * reserved ones, which never touch it). *on_gpu: the node agreed and the call is on the stream
 * (its job submitted through `submit`, which returns a twohop_status). Returns a twohop_status;
 * after an error the caller fails the call on every rank (poisoned communicator).
 */
struct GpuStreamSlot {
    twohop::DoorbellRing *ring;     // the call's ring and gates: host address
    twohop::DoorbellRing *ring_dev; // and where the GPU sees it
    uint64_t *released;             // host address of the word the stream writes at its end
    uint64_t *released_dev;
    uint64_t token;                 // the value it writes there
    uint64_t *slot_token;           // the slot's token: set to `token` once the stream uses it
    std::atomic<bool> *job_live;    // set while the call's job exists (the slot stays in use)
    std::atomic<int> *enqueue_state; // 0 enqueueing, 1 enqueued, -1 enqueueing failed
    int index;                      // the slot's place among the communicator's
                                    // (0 .. StreamSlots::kMax - 1): its call kernel counters
    std::chrono::steady_clock::time_point entry{}; // when the call reached twohop (verbose 3)
};
int gpu_stream_posted(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                      uint64_t count, const twohop_reduction &red, void *stream,
                      const GpuStreamSlot &slot,
                      const std::function<int(std::unique_ptr<twohop::Job>)> &submit,
                      bool *on_gpu);

/* True when this process can take part in the GPU path at all (driver and kernels loaded). */
bool gpu_node_capable();

#endif
