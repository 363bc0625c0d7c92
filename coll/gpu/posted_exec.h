/*
 * Private to coll/gpu/: the GPU's half of a GPU-posted call (PostedSchedule, posted_exec.cpp)
 * and what it needs -- the descriptor ring, the call kernels' arrival counters, the device
 * addresses of the node's flags, the release of every wait after a failure.
 */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "doorbell_ring.h"
#include "gpu_internal.h"
#include "posted_call.h"
#include "stream_call.h"

namespace twohop_gpu {

/* Arrival-counter regions of GPU-posted call kernels (posted_call.h) per device: one per
 * stream slot (GpuStreamSlot::index) and the last for the blocking form. A region serves one
 * call at a time: a slot's next call starts after the previous one's stream released it, and
 * blocking calls run one at a time. */
constexpr int kCounterRegions = static_cast<int>(twohop::StreamSlots::kMax) + 1;
constexpr int kBlockingCounters = kCounterRegions - 1;
constexpr size_t kCounterWords = twohop::PostedCallArgs::kCounters;

/* Threads per block of the GPU-posted call kernel (its __launch_bounds__, gpu_call.cuh). */
constexpr unsigned kCallThreads = 512;

/* GPU-posted calls: segments enqueued ahead of this rank's hop-2 results (at least the
 * pipeline depth). About 3 + shards + owned shards stream operations per segment (hop 3
 * gathered on the GPU: 5 + 2 x shards + owned shards): 16 segments
 * stay far below the stream queue's depth, and keep hop 1 well ahead of hop 2. */
constexpr uint64_t kPostedWindow = 16;

/* Device address of local rank l's flag `which` in the registered segment. */
void *flag_addr(twohop_comm *c, int l, std::atomic<uint64_t> RankFlags::*which);
/* Device address of local rank l's `ready` word `word` (RankFlags::ready). */
void *ready_addr(twohop_comm *c, int l, int word);

/* Every local rank's GPU-awaited flags set past any sequence number (posted_exec.cpp). */
void release_gpu_waits(twohop_comm *c);

/* The descriptor ring of c on `device`, allocated and registered on first use; false on a
 * driver or allocation error. */
bool ensure_ring(twohop_comm *c, int device);

/* Region `index` of the call kernels' counters on `device` (kCounterRegions of kCounterWords),
 * allocated and zeroed on first use; nullptr on a driver error. */
unsigned long long *call_counters(twohop_comm *c, int device, int index);

/* Thread blocks per half of this call's GPU-posted kernel, or 0: stream operations per
 * segment (posted_exec.cpp has the rule). */
int call_kernel_blocks(twohop_comm *c, const twohop_reduction &red, uint64_t bytes,
                       int device);

/* Every wait of a GPU-posted call's stream released after this rank's failure of the call
 * whose first sequence number is s0 + 1 (posted_exec.cpp). Host writes only. */
void release_posted(twohop_comm *c, twohop::DoorbellRing *ring, uint64_t s0);

/*
 * The GPU's half of a GPU-posted call (the blocking form on the communicator's stream, the
 * stream-ordered form on the application's): the stream operations of segment k, enqueued by
 * the calling thread in the pipeline's order (pipeline_next: start(0) .. start(depth - 1),
 * finish(0), start(depth), finish(1), ...; enqueue() runs it and ends the call), or the whole
 * call as one kernel (call()). `ok` turns false at the first enqueue that fails.
 */
struct PostedSchedule {
    twohop_comm *c;
    void *stream;                   // nullptr: twohop's own
    twohop::DoorbellRing *ring_dev; // the call's ring and gates, where the GPU sees them
    uint64_t s0, count, seg_items, nseg;
    twohop_reduction red;
    char *out;                      // this rank's device receive buffer
    bool ok = true;
    uint64_t ready_seq = 0;         // call(): the kernel's `ready` handshake (posted_call.h)
    int ready_word = 0;             // on RankFlags::ready[ready_word]
    uint64_t *end_word = nullptr;   // call(): the word the kernel's last block writes at its
    uint64_t end_value = 0;         //   end (posted_call.h), device address, and its value
    bool bounded = false;           // call() on `stream`: its waits bounded by the timeout too
    uint64_t started = 0, finished = 0; // enqueue(): segments whose start / finish is enqueued
    bool tail_enqueued = false;         // enqueue(): the wait after the last finish too

    uint64_t depth() const { return static_cast<uint64_t>(c->depth); }
    uint64_t shards() const { return static_cast<uint64_t>(c->topo.n_shards()); }
    /* Descriptors per doorbell: coll_twohop_posted_batch, at most the pipeline depth (segment
     * `depth` waits until segment 0 is done, which needs descriptor 0 announced). */
    uint64_t batch() const {
        const uint64_t b = static_cast<uint64_t>(c->posted_batch);
        return b < depth() ? b : depth();
    }

    /* Segment k: its gate, hop 1 into host memory, its descriptor (th_post). */
    void start(uint64_t k);
    /* Segment k: its gate, hop 3 (gathered on the GPU or from host memory), `done`. */
    void finish(uint64_t k);

    /* The whole call as one kernel instead of start/finish/tail (posted_call.h): `blocks`
     * blocks for hop 1 and as many for hop 3; `counters`: its arrival counters
     * (call_counters). */
    void call(unsigned long long *counters, int blocks);

    /*
     * The call as stream operations: enqueues the next start(k) / finish(k) in the pipeline's
     * order (pipeline_next, segment_plan.h), as far as `start_limit()` lets it -- no segment
     * k >= start_limit() starts, nor the finish the order puts before that start -- and after
     * the last finish, with hop 3 gathered, the wait for the peers that still copy from this
     * rank's receive buffer. Call again while it returns false; true once the whole call is
     * enqueued (or an enqueue failed: `ok` false).
     */
    bool enqueue(const std::function<uint64_t()> &start_limit);
};


} // namespace twohop_gpu
