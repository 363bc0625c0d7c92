/*
 * A communicator's sequence numbers: the one owner of twohop_comm::seq.
 *
 * Every call on a communicator takes sequence numbers: one for a latency-path call or a node
 * vote, one per segment for a pipeline (a block of them, reserved at once, for a GPU-posted or
 * stream-ordered call). They name the node's shared-memory flags (arrived, reduced, done, the
 * vote's words), pick the buffer set (s mod depth) and go into every hop-2 tag (the low 16
 * bits), so **every rank of the communicator must take the same numbers for the same call**:
 * a number may be taken only from what MPI guarantees identical on all ranks (op, count, type
 * signature) or from what the node agreed (its vote), never from a rank's own memory kind,
 * pointers or timing. The one exception is built in: a vote that does not end in the node's GPU
 * path gives its number back (give_back), and every rank of every node does so alike (the vote
 * is the node's, and a multi-node vote never runs the call itself).
 *
 * Numbers start above the set-up's agreed base (start_at) and only grow; 64 bits never wrap in
 * practice (2^64 segments). Threads: one writer at a time -- the holder of the communicator's
 * engine lock, or the calling thread of a stream-ordered call while no call is queued
 * (engine.h) -- and readers on other threads (the proxy's failure checks): relaxed atomic
 * loads and stores, no read-modify-write atomics (there is one writer).
 *
 * Pure (no MPI, no UCX, no CUDA): tests/test_sequence.cpp.
 */
#pragma once

#include <atomic>
#include <cstdint>

namespace twohop {

class Sequence {
  public:
    /* The last number taken (the set-up's base before the first call). */
    uint64_t last() const { return v_.load(std::memory_order_relaxed); }

    /* Set-up: the next number taken is base + 1 (base: agreed by every rank, comm_setup.cpp). */
    void start_at(uint64_t base) { v_.store(base, std::memory_order_relaxed); }

    /* Takes the next number and returns it. */
    uint64_t take() {
        const uint64_t s = last() + 1;
        v_.store(s, std::memory_order_relaxed);
        return s;
    }

    /* Takes n numbers at once (a call of n segments: s0 + 1 .. s0 + n) and returns s0, the
     * last number before the block. n = 0 takes none. */
    uint64_t reserve(uint64_t n) {
        const uint64_t s0 = last();
        v_.store(s0 + n, std::memory_order_relaxed);
        return s0;
    }

    /* Gives back number s, the last one taken (a vote that did not end in the node's GPU path:
     * the host path that follows runs the call under the same s). Returns false, changing
     * nothing, when s is not the last number taken (a caller's error). */
    bool give_back(uint64_t s) {
        if (s == 0 || s != last()) return false;
        v_.store(s - 1, std::memory_order_relaxed);
        return true;
    }

    /* Undoes every number taken from s on, a block reserved after s included: the next number
     * taken is s again. For a call that failed before it ran (the failure is recorded under
     * its first number, where the node peers and rail neighbours look for it), whatever it had
     * taken since s. */
    void rewind(uint64_t s) { v_.store(s - 1, std::memory_order_relaxed); }

  private:
    std::atomic<uint64_t> v_{0};
};

} // namespace twohop
