/*
 * A job: one allreduce in flight on one communicator, as a state machine that is advanced
 * without ever waiting. Whoever has time advances it: the calling thread of a blocking call
 * (drive(), engine.h: until it finishes), MPI progress for non-blocking and persistent calls
 * (the progress callback, any thread, engine.h). A job touches only its communicator's state
 * and only while its caller holds the communicator's engine lock (twohop_comm::busy).
 *
 * advance() returns TWOHOP_PENDING while the job waits for a flag or a transfer,
 * TWOHOP_OK once the result is in the user's output, or an error status (the caller records
 * the failure with twohop_comm::fail). The hop-2 transfers a job posts move only when the
 * caller polls the transport (twohop_comm::poll_transport) between advances.
 */
#ifndef TWOHOP_SCHEDULE_JOB_H
#define TWOHOP_SCHEDULE_JOB_H

#include <cstdint>

struct twohop_comm;

namespace twohop {

/*
 * Publishes this rank's "no" to a node round that call s does not run (the node's GPU vote of
 * a rank whose buffers cannot take the GPU path: gpu_node.h, gpu_decline_first). msg_bytes: the
 * call's size in bytes; item_bytes: its element size (the peers that vote compare both).
 */
using DeclineFn = void (*)(twohop_comm *c, uint64_t s, uint64_t msg_bytes, uint64_t item_bytes);

class Job {
  public:
    virtual ~Job() = default;
    /* Advances as far as possible without waiting; TWOHOP_PENDING, TWOHOP_OK or an error. */
    virtual int advance() = 0;
    /* Steps taken so far: a driver measures coll_twohop_timeout as time without a step. */
    uint64_t steps() const { return steps_; }
    /* True while the job waits for the application rather than for twohop's peers (a
     * stream-ordered call whose stream has not reached it): no timeout runs meanwhile. */
    virtual bool waiting_on_application() const { return false; }
    /* Non-zero for a job whose sequence numbers were reserved when it was queued (a
     * stream-ordered call on the device buffers, gpu_node.h: gpu_stream_posted): its first
     * one. Zero for the others, which take theirs from twohop_comm::seq when they start. */
    virtual uint64_t reserved_first_seq() const { return 0; }
    /* True while the job's next steps are safe on the proxy thread, for a job whose call was
     * not (engine.cpp: async_safe): host memory, UCX and CUDA calls that never wait for the
     * application's streams or for other ranks (the node GPU job's vote, its kernels and the
     * GPU pipeline on the communicator's own stream; the GPU-posted job after its kernel's
     * launch: gpu/node_job.cpp). The engine then lets the proxy advance it; when it turns false
     * again (what is left needs a thread inside MPI: host copies of device memory, a stale
     * CUDA IPC mapping to close) the proxy leaves it to the MPI threads. A job that asks for
     * async_now() stops, when it runs on the proxy thread (Proxy::on_proxy_thread), before a
     * step that is not safe there. */
    virtual bool async_now() const { return false; }
    /* Whether async_now() speaks for this job (false: the engine keeps the starting call's
     * choice, async_safe). */
    virtual bool async_managed() const { return false; }

    /* Makes a host job (LatencyJob, PipelineJob) publish, under its call's first sequence
     * number and before any other word of that call, this rank's "no" to the node round
     * `fn` stands for. The round then costs no job and no sequence number of its own: the
     * same words and numbers as a round run first and declined (gpu/vote.cpp, vote_no). */
    void decline_first(DeclineFn fn) { decline_first_ = fn; }

  protected:
    uint64_t steps_ = 0;
    DeclineFn decline_first_ = nullptr;
};

} // namespace twohop

#endif
