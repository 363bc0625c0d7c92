/*
 * Pure 64-bit arithmetic that cuts a message into segments, a segment into shards (one per
 * shard owner on a node) and a shard into ring chunks (one per node on a rail). No MPI, UCX
 * or CUDA here, so it is unit-tested directly (tests/test_segment_plan.cpp).
 *
 * All counts are in items (MPI datatype items), all offsets in items from the start of the
 * enclosing range; callers multiply by the item size to get bytes.
 */
#ifndef TWOHOP_SEGMENT_PLAN_H
#define TWOHOP_SEGMENT_PLAN_H

#include <cstdint>

/* The helpers device code uses too (the GPU-posted call kernel, posted_call.h). */
#ifdef __CUDACC__
#define TWOHOP_HOST_DEVICE __host__ __device__
#else
#define TWOHOP_HOST_DEVICE
#endif

namespace twohop {

/* A half-open range [offset, offset + count) in items. */
struct Range {
    uint64_t offset;
    uint64_t count;
};

/*
 * Balanced split of `total` items into `parts` pieces: the first total % parts pieces get
 * one item more. Piece `i` (0 <= i < parts) is returned. parts must be >= 1.
 */
TWOHOP_HOST_DEVICE inline Range split_even(uint64_t total, uint64_t parts, uint64_t i) {
    const uint64_t base = total / parts;
    const uint64_t rem = total % parts;
    const uint64_t extra = i < rem ? i : rem;
    return Range{i * base + extra, base + (i < rem ? 1 : 0)};
}

/*
 * Items per pipeline segment for a segment budget of `segment_bytes` and items of
 * `item_bytes` (> 0): whole items only, at least one item. (twohop falls back for items larger
 * than one shared-memory slot, so the "at least one" case only matters for callers that size
 * their buffers by max(segment_bytes, item_bytes).)
 */
inline uint64_t segment_items(uint64_t segment_bytes, uint64_t item_bytes) {
    const uint64_t n = segment_bytes / item_bytes;
    return n > 0 ? n : 1;
}

/* Number of segments for `count` items of which each segment holds `seg_items`. */
inline uint64_t segment_count(uint64_t count, uint64_t seg_items) {
    return count == 0 ? 0 : (count - 1) / seg_items + 1;
}

/* Segment `k` of a message of `count` items cut into segments of `seg_items`. */
TWOHOP_HOST_DEVICE inline Range segment_range(uint64_t count, uint64_t seg_items, uint64_t k) {
    const uint64_t off = k * seg_items;
    const uint64_t left = count - off;
    return Range{off, left < seg_items ? left : seg_items};
}

/*
 * The pipeline's order, stated once for every path that runs segments (the CPU-posted
 * PipelineJob, the GPU-posted call's stream operations on either stream): with `started`
 * segments started and `finished` of them finished (the oldest first), start the next one while
 * fewer than `depth` (>= 1) are in flight, else finish the oldest; done when all `nseg` are
 * finished. For depth 2 and 4 segments: start 0, start 1, finish 0, start 2, finish 1, start 3,
 * finish 2, finish 3 -- segment k + depth starts only after segment k finished, so it may reuse
 * k's buffer set (s mod depth).
 */
struct PipelineStep {
    enum Kind { kStart, kFinish, kDone } kind;
    uint64_t k; // the segment to start or finish
};

inline PipelineStep pipeline_next(uint64_t started, uint64_t finished, uint64_t nseg,
                                  uint64_t depth) {
    if (started < nseg && started - finished < depth) return {PipelineStep::kStart, started};
    if (finished < started) return {PipelineStep::kFinish, finished};
    return {PipelineStep::kDone, nseg};
}

/*
 * Runs the order from (*started, *finished) on, calling start(k) and finish(k), while go()
 * holds (it turns false when an enqueue failed) and as far as start_limit() lets it: no
 * segment k >= start_limit() starts, nor the finish the order puts before that start (the
 * finishes after the last start are never held). Returns true once every segment is finished.
 * The GPU-posted call's stream operations use it (a window ahead of the hop-2 results).
 */
template <class Go, class Limit, class Start, class Finish>
bool pipeline_run(uint64_t *started, uint64_t *finished, uint64_t nseg, uint64_t depth, Go go,
                  Limit start_limit, Start start, Finish finish) {
    for (;;) {
        const PipelineStep step = pipeline_next(*started, *finished, nseg, depth);
        if (step.kind == PipelineStep::kDone) return true;
        if (!go()) return false;
        if (*started < nseg && *started >= start_limit()) return false;
        if (step.kind == PipelineStep::kStart) {
            start(step.k);
            ++*started;
        } else {
            finish(step.k);
            ++*finished;
        }
    }
}

} // namespace twohop

#endif
