/*
 * The descriptor ring of GPU-posted operations: the GPU (or, in tests, a host thread standing
 * in for it) writes one descriptor per pipeline segment whose hop-1 result is complete and
 * rings the doorbell; the proxy thread (proxy.h) reads the doorbell and posts the segment's
 * hop-2 transfers. Lives in host memory registered with the driver (the GPU writes it over
 * PCIe, the host reads it from its own memory).
 *
 * Protocol (single producer, single consumer):
 *   producer  slot[i % kSlots] = descriptor i; after every K-th descriptor and after the last
 *             one of a call: system-scope release fence, then doorbell = i + 1 (one store)
 *   consumer  acquire-load doorbell; descriptors [consumed, doorbell) are complete; consumed
 *             is advanced after they were read
 * Capacity: the producer of the pipeline never runs more than coll_twohop_pipeline_depth (<= 8)
 * segments ahead of the consumer (segment k + depth waits on the GPU for the node's `done`
 * flags of segment k, which need the consumer to have posted k), so kSlots = 64 never wraps onto
 * an unread slot; host producers (tests) check `consumed` before writing.
 *
 * Plain data, usable from device code: no constructors, no std::atomic in the shared layout
 * (the host side reads the words through std::atomic_ref-like accessors below).
 */
#ifndef TWOHOP_DOORBELL_RING_H
#define TWOHOP_DOORBELL_RING_H

#include <cstdint>

namespace twohop {

/* One posted segment: 16 bytes. */
struct PostDesc {
    uint64_t seq;      // the segment's sequence number on its communicator
    uint32_t segment;  // its index in the call
    uint32_t last;     // 1 for the call's last segment
};

struct DoorbellRing {
    static constexpr uint32_t kSlots = 64;
    uint64_t doorbell;   // descriptors published so far (written by the producer only)
    uint64_t pad0[7];    // every counter on its own 64-byte line
    uint64_t consumed;   // descriptors read so far (written by the consumer only)
    uint64_t pad1[7];
    // Gates the consumer opens for the producer's stream (GPU-posted pipeline, gpu_node.h):
    // segments whose buffer set is free to start, and segments whose hop-2 results are all
    // published on the node. The GPU waits on these two words of its own process instead of
    // on every local rank's flags.
    uint64_t gate_start;
    uint64_t pad2[7];
    uint64_t gate_finish;
    uint64_t pad3[7];
    // Written by the producer's stream after the call's last operation: the consumer reads the
    // end of the GPU's work here instead of through a CUDA call (the proxy thread makes none).
    uint64_t drained;
    uint64_t pad4[7];
    // Non-zero: the call failed. Set by the GPU (1: a wait of the call's kernel timed out,
    // posted_call.h) or by the host (2: the call was abandoned, release_posted); the kernel's
    // waits end when they see it.
    uint64_t fault;
    uint64_t pad5[7];
    PostDesc slot[kSlots];
};
static_assert(sizeof(PostDesc) == 16, "descriptor layout shared with device code");
static_assert(sizeof(DoorbellRing) == 384 + 16 * DoorbellRing::kSlots, "ring layout");

/* The argument of the device producer th_post (gpu_kernels.cu): writes descriptor `index`
 * (`desc`) into the ring at `ring` (its device address) and, when ring_bell, publishes every
 * descriptor up to it: __threadfence_system, then one store to the doorbell. */
struct PostArgs {
    DoorbellRing *ring;
    uint64_t index;
    PostDesc desc;
    int32_t ring_bell;
    int32_t pad;
};

#ifndef __CUDACC__
/* Host producer (tests; the device producer is th_post in gpu_kernels.cu). Writes descriptor
 * `index` and, when `ring_bell`, publishes every descriptor up to it. False when the slot is
 * still unread (the consumer is kSlots behind). */
inline bool post_host(DoorbellRing *r, uint64_t index, const PostDesc &d, bool ring_bell) {
    if (index - __atomic_load_n(&r->consumed, __ATOMIC_ACQUIRE) >= DoorbellRing::kSlots) {
        return false;
    }
    r->slot[index % DoorbellRing::kSlots] = d;
    if (ring_bell) __atomic_store_n(&r->doorbell, index + 1, __ATOMIC_RELEASE);
    return true;
}

/*
 * Consumer: copies up to `max` published, unread descriptors into out[] in order and marks
 * them read. Returns how many. *doorbell_reads counts the doorbell loads that found new
 * descriptors (doorbells seen, for the benchmark).
 */
inline uint32_t consume(DoorbellRing *r, PostDesc *out, uint32_t max,
                        uint64_t *doorbell_reads = nullptr) {
    const uint64_t published = __atomic_load_n(&r->doorbell, __ATOMIC_ACQUIRE);
    uint64_t next = r->consumed;
    uint32_t n = 0;
    while (next < published && n < max) out[n++] = r->slot[next++ % DoorbellRing::kSlots];
    if (n) {
        __atomic_store_n(&r->consumed, next, __ATOMIC_RELEASE);
        if (doorbell_reads) ++*doorbell_reads;
    }
    return n;
}

/* Resets a ring no producer or consumer is using. */
inline void reset(DoorbellRing *r) {
    __atomic_store_n(&r->doorbell, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->consumed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->gate_start, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->gate_finish, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->drained, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->fault, 0, __ATOMIC_RELAXED);
}

/* Consumer: opens gate `g` (gate_start or gate_finish) up to `value` (monotonic). */
inline void open_gate(uint64_t *g, uint64_t value) { __atomic_store_n(g, value, __ATOMIC_RELEASE); }
#endif

} // namespace twohop

#endif
