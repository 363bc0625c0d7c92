/*
 * One kernel per GPU-posted call (coll_twohop_posted_kernel_blocks > 0): the whole GPU side of
 * a multi-node call whose hop 1 and hop 3 run on the GPU, in a single launch instead of a
 * chain of stream operations per segment (the chain grows with the message: about 3 + shards
 * operations per segment, each a few microseconds of the enqueueing thread, and a long call
 * could fill the stream's queue). The kernel (th_call_<type>_<op>, gpu_call.cuh): the first
 * half of its grid runs start(0), start(1), ..., the second half finish(0), finish(1), ...;
 * the gates keep them at most depth segments apart:
 *
 *   start(k)   wait gate_start > k (the proxy opened the segment's buffer set), reduce this
 *              rank's shards of segment k from every local input into the set's result buffer
 *              (host shared memory, written over PCIe), then descriptor k into the ring and,
 *              every posted_batch segments and at the last, the doorbell
 *   finish(k)  wait gate_finish > k (every shard's hop-2 result on the node is published),
 *              copy the segment into the receive buffer (hop 3: the whole segment from host
 *              memory, or gathered: my own shards from host memory, `gathered` = s, then every
 *              other shard from its owner's receive buffer once the owner's `gathered` >= s),
 *              then `done` = s
 *   tail       with gathering: wait until every local rank's done >= the last sequence number
 *              (peers copy from this rank's receive buffer until then)
 *
 * The blocks of a half split each of its reductions and copies; the block that finishes a
 * step last (an arrival counter per step and buffer set in device memory, `counters`) publishes it
 * (descriptor and doorbell, `gathered`, `done`) after a system-scope fence, so the host and
 * the local peers see the data before the word. Waits are spins of one thread per block on
 * host-mapped words; each is bounded by `timeout_ns` (0: none; the blocking form only) and
 * ends, checked first, when the ring's `fault` word is set: the host sets it (2) before it
 * releases a failed call's words, so no wait passes on a released word, and a wait that times
 * out sets it (1) itself. Either way the blocks publish nothing more and leave the kernel; the
 * host job reads `fault` after the call's end word and reports the failure. The end word
 * (end_word) is written by the last block to leave, after every block's writes.
 *
 * Every block must be resident at once (a block waits for words that other blocks of the
 * grid write): the grid is small (2 x coll_twohop_posted_kernel_blocks, at most 128 blocks of
 * 512 threads) next to the GPU's multiprocessors, the assumption NCCL's persistent kernels
 * make too.
 *
 * Plain data shared by the host (gpu/posted_exec.cpp fills it) and the device; passed by value.
 */
#ifndef TWOHOP_POSTED_CALL_H
#define TWOHOP_POSTED_CALL_H

#include <cstdint>

#include "doorbell_ring.h"
#include "segment_plan.h" // TWOHOP_HOST_DEVICE

namespace twohop {

/*
 * The arrival counters (64-bit words in device memory): the high half holds the tag of the
 * call counting (arrival_tag: the low half of its first sequence number), the low half the
 * arrivals. A counter last used by another call (another tag) counts from zero again, so no
 * reset is needed between calls. For one step of one buffer set, the `use`-th time the call
 * uses the set (0, 1, ...), the arrival that makes the count (use + 1) x blocks is the last
 * (the gates keep a set's next use behind every block's arrival for this one).
 */
TWOHOP_HOST_DEVICE inline uint64_t arrival_tag(uint64_t s0) { return (s0 + 1) & 0xffffffffull; }
/* The counter's value after one arrival, from the value `seen` before it. */
TWOHOP_HOST_DEVICE inline uint64_t arrival_next(uint64_t seen, uint64_t tag) {
    return (seen >> 32) == tag ? seen + 1 : (tag << 32) | 1ull;
}
/* Whether the arrival that left the counter at `next` was the last of `blocks` for `use`. */
TWOHOP_HOST_DEVICE inline bool arrival_last(uint64_t next, uint64_t use, uint64_t blocks) {
    return (next & 0xffffffffull) == (use + 1) * blocks;
}

struct PostedCallArgs {
    static constexpr int kMaxRanks = 16; // local ranks (TWOHOP_GPU_MAX_RANKS)
    static constexpr int kMaxSets = 8;   // buffer sets (coll_twohop_pipeline_depth <= 8)
    // Counters: 3 steps x kMaxSets sets (arrive(): event * kMaxSets + set), then the exits.
    static constexpr int kExitCounter = 3 * kMaxSets;
    static constexpr int kCounters = kExitCounter + 1;
    DoorbellRing *ring;                  // the call's ring and gates (device address)
    const char *in[kMaxRanks];           // every local rank's input, mapped here
    char *out[kMaxRanks];                // [me]: my receive buffer; gathering: every rank's
    char *result[kMaxSets];              // each buffer set's result buffer (host, device address)
    uint64_t *gathered[kMaxRanks];       // every local rank's `gathered` and `done` flags
    uint64_t *done[kMaxRanks];           //   (host shared memory, device addresses)
    uint64_t *ready[kMaxRanks];          // every local rank's `ready` flag (ready_seq != 0)
    unsigned long long *counters;        // kCounters arrival counters (device memory)
    uint64_t s0;                         // the call's segments are s0 + 1 .. s0 + nseg
    uint64_t nseg;
    uint64_t count;                      // items in the message
    uint64_t seg_items;                  // items per segment
    uint64_t item_bytes;                 // bytes per item
    uint64_t elems_per_item;             // elements of the reduction's type per item
    uint64_t timeout_ns;                 // bound of every wait (0: none)
    // The stream-ordered form: the kernel writes my `ready` = ready_seq when it starts (the
    // stream reached the call: my input is final) and hop 1 waits for every local rank's;
    // 0 (the blocking form): the host knows the inputs are final, no handshake.
    uint64_t ready_seq;
    // The call's end: the block that leaves the kernel last (every block counts its exit on
    // counter kExitCounter, also after a fault) writes end_value there after a system fence
    // (the blocking form's ring `drained`, the stream-ordered form's `released`): no stream
    // operation after the kernel. Null: none (the host enqueues the write).
    uint64_t *end_word;
    uint64_t end_value;
    int32_t local_size, me, depth, shards;
    int32_t n_mine;                      // shards this rank owns (mine[0 .. n_mine - 1])
    int32_t gather;                      // hop 3 gathered through CUDA IPC
    int32_t vec_ok;                      // every input on this GPU: 16-byte vector loads allowed
    int32_t batch;                       // descriptors per doorbell (coll_twohop_posted_batch)
    int32_t mine[kMaxRanks];             // the shards this rank owns
    int32_t owner[kMaxRanks];            // shard -> its owner's local rank on this node
};

} // namespace twohop

#endif
