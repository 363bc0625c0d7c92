/*
 * The stream-ordered allreduce on a communicator of several nodes (twohop_allreduce_enqueue;
 * the protocol is in stream_job.h): the host copies it stages through, and the call itself.
 */
#ifndef TWOHOP_SCHEDULE_STREAM_CALL_H
#define TWOHOP_SCHEDULE_STREAM_CALL_H

#include <atomic>
#include <cstdint>
#include <vector>

#include "doorbell_ring.h"
#include "stream_job.h"
#include "twohop_core.h"

struct twohop_comm;

namespace twohop {

/* One host copy of a stream-ordered call and its words: host memory registered with the
 * driver (cuMemHostRegister, portable), so the stream's copies are asynchronous and its memory
 * operations reach the words. */
struct StreamSlot {
    char *host = nullptr;       // the copy, `bytes` long (page aligned)
    char *host_dev = nullptr;   // its device address (th_stage)
    uint64_t bytes = 0;
    StreamWords *words = nullptr;     // host address of the words (own page)
    StreamWords *words_dev = nullptr; // their device address
    int device = -1;            // the device whose context registered them
    uint64_t token = 0;         // the last call that used the slot (0: none yet)
    int index = 0;              // its place in StreamSlots (0 .. kMax - 1)
    // A call on the device buffers (gpu_stream_posted) keeps its doorbell ring and gates in
    // the words' page, after the words; its job lives until it has read them for the last time.
    std::atomic<bool> job_live{false};
    std::atomic<int> enqueue_state{0}; // 0 enqueueing, 1 enqueued, -1 failed (gpu_node.h)
    static constexpr size_t kRingOffset = 256;
    DoorbellRing *ring() const {
        return reinterpret_cast<DoorbellRing *>(reinterpret_cast<char *>(words) + kRingOffset);
    }
    DoorbellRing *ring_dev() const {
        return reinterpret_cast<DoorbellRing *>(reinterpret_cast<char *>(words_dev) +
                                                kRingOffset);
    }
    /* The stream is done with the slot (it copied the last call's result out or wrote its
     * end) and no job reads it any more. */
    bool idle() const {
        return token == 0 ||
               (reached(&words->released, token) && !job_live.load(std::memory_order_acquire));
    }
};

/*
 * A communicator's host copies, at most kMax (calls beyond that many in flight wait in
 * acquire() for the oldest to be released: the proxy thread completes it meanwhile). Grown to
 * the largest message seen (rounded up to a power of two, so a series of sizes re-registers
 * rarely).
 */
class StreamSlots {
  public:
    static constexpr size_t kMax = 4;
    StreamSlots() = default;
    StreamSlots(const StreamSlots &) = delete;
    StreamSlots &operator=(const StreamSlots &) = delete;
    /* Frees the slots the stream is done with; the others are left allocated (the GPU may
     * still copy from them): see release(). */
    ~StreamSlots();
    /*
     * A slot of at least `bytes` registered on `device` for the next call, waiting up to
     * timeout_s (0: no bound) for one to be released when kMax are in use. nullptr on an
     * allocation or registration failure, or on the timeout (*timed_out = true).
     */
    StreamSlot *acquire(int device, uint64_t bytes, double timeout_s, bool *timed_out);
    /* Whether every slot is idle (the communicator may free them). */
    bool idle() const;
    /* Never frees a slot (the communicator is quarantined: UCX may still write into them). */
    void leak() { slots_.clear(); }

  private:
    bool grow(StreamSlot *s, int device, uint64_t bytes);
    std::vector<StreamSlot *> slots_;
};

} // namespace twohop

/*
 * twohop_comm_allreduce_enqueue's path on a communicator of several nodes, tried first:
 * *taken = false (nothing done, no state touched) when the call cannot stay on the stream --
 * a buffer that is not device memory of the canonical layout, a user-defined op, no 64-bit
 * stream memory operations, asynchronous progress off, host copies unavailable -- and the
 * caller then runs the blocking form. Whether a rank takes it changes only when its part runs,
 * never what it does: its host job is the one the blocking call would run on host buffers,
 * with the node's GPU vote answered no. Returns a twohop_status; a failure after the call
 * was queued poisons the communicator (the next call reports it).
 */
int twohop_stream_enqueue_multinode(twohop_comm *c, const twohop_userbuf &in,
                                    const twohop_userbuf &out, uint64_t count,
                                    const twohop_reduction &red, void *stream, bool *taken,
                                    char *why, size_t whylen);

#endif
