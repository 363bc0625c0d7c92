/*
 * The stream-ordered allreduce on a communicator of several nodes (twohop_allreduce_enqueue):
 * the application's CUDA stream and a host job meet at three words of host memory, so the
 * calling thread returns at once and never synchronises with the GPU.
 *
 *   on the application's stream (the calling thread enqueues five operations and returns)
 *     1  copy the input, device -> the call's host copy (registered memory)
 *     2  arrived = token                      (cuStreamWriteValue64)
 *     3  wait until gate >= token             (cuStreamWaitValue64)
 *     4  copy the result, host copy -> the device receive buffer
 *     5  released = token                     (the host copy may be reused)
 *   on the host (StreamJob, queued in the communicator's call order, advanced by the proxy
 *   thread or any MPI thread, engine.h)
 *     a  at its start: the node's GPU vote of the call, answered no (start function)
 *     b  wait until arrived >= token
 *     c  the host job (latency path or pipeline) on the host copy, in place
 *     d  gate = token -- also when the job failed, timed out or was dropped (destructor):
 *        the stream never waits forever; a failed call poisons the communicator and the
 *        next call on it reports the failure
 *
 * The number of stream operations per call is five whatever the message size; up to
 * coll_twohop_enqueue_stage_kernel_max_bytes they are one launch of th_stage, which takes the
 * same five steps on the GPU (coll/cuda/stage_args.h). An event the
 * application records after the call completes only once the result is in its buffer.
 * Tokens are per communicator, increasing, compared cyclically (as cuStreamWaitValue64's GEQ).
 */
#ifndef TWOHOP_SCHEDULE_STREAM_JOB_H
#define TWOHOP_SCHEDULE_STREAM_JOB_H

#include <cstdint>
#include <functional>
#include <memory>

#include "job.h"

namespace twohop {

/* The words of one host copy (StreamSlot), each on its own 64-byte line. Host memory
 * registered with the driver: the stream writes and waits on them through their device
 * address, the host reads and writes them with atomic loads and stores. */
struct StreamWords {
    uint64_t arrived;   // written by the stream: the input is in the host copy
    uint64_t pad0[7];
    uint64_t gate;      // written by the host: the result is in the host copy (or the call failed)
    uint64_t pad1[7];
    uint64_t released;  // written by the stream: the result left the host copy
    uint64_t pad2[7];
};
static_assert(sizeof(StreamWords) == 192, "one 64-byte line per word");

/* True when `word` (read with acquire) has reached `token` (cyclic 64-bit comparison). */
bool reached(const uint64_t *word, uint64_t token);
/* Stores `token` into `word` with release (the host side of a gate). */
void open_word(uint64_t *word, uint64_t token);

class StreamJob : public Job {
  public:
    /*
     * inner: the host job on the call's host copy; words: the copy's words (host addresses,
     * valid until the job is destroyed); token: this call's value; start: run once at the first
     * advance (the node's GPU vote), returns a twohop_status (non-OK ends the job);
     * gate_opened: run once when the job opens the gate (the stream's wait for it ends).
     */
    StreamJob(std::unique_ptr<Job> inner, StreamWords *words, uint64_t token,
              std::function<int()> start, std::function<void()> gate_opened = {});
    ~StreamJob() override; // opens the gate if the job has not (failure, timeout, teardown)
    int advance() override;
    /* True once the stream delivered the input (tests). */
    bool arrived() const { return arrived_; }
    bool waiting_on_application() const override { return started_ && !arrived_ && !done_; }

  private:
    std::unique_ptr<Job> inner_;
    StreamWords *words_;
    uint64_t token_;
    std::function<int()> start_;
    std::function<void()> gate_opened_; // run once, when this job opens the gate
    bool started_ = false, arrived_ = false, gate_open_ = false, done_ = false;
    void open_gate();
};

} // namespace twohop

#endif
