/*
 * StepOp: the one skeleton of a hop-2 operation -- a fixed schedule of steps, each a send
 * and/or a receive over UCX tagged messages, advanced without blocking. The three algorithms
 * (RingOp: ring; RhdOp: Rabenseifner; RdOp: recursive doubling of the latency path) supply
 * their schedule, what they post per step, what a received message must look like, and the
 * local work after a step (combine, copy); this base owns the rest, once: the test of the
 * step's transfers, a failed partner endpoint (TWOHOP_ERR_TRANSPORT), a receive that does not
 * match (TWOHOP_ERR_MISMATCH, ucx::step_outcome), the next step, the end, and cancellation.
 *
 * Threads: one thread advances an op at a time (the holder of the communicator's engine lock,
 * or its proxy thread for GPU-posted calls); UCX's completion callbacks write the requests'
 * `done` words from any thread.
 */
#ifndef TWOHOP_STEP_OP_H
#define TWOHOP_STEP_OP_H

#include <cstddef>
#include <cstdint>

#include "worker.h"

namespace twohop {

class StepOp {
  public:
    virtual ~StepOp() = default;
    /*
     * Advances when the current step's transfers completed: checks what arrived, runs the
     * step's local work, posts the next step. *finished once all steps ran. Returns a
     * twohop_status; after an error the op is inactive (its transfers ended, or the caller
     * cancels them).
     */
    int advance(bool *finished);
    bool active() const { return active_; }
    /*
     * Abandons the op: cancels its transfers and waits (at most max_wait_s) until UCX no
     * longer owns its buffers. Returns false when that did not happen in time.
     */
    bool cancel(double max_wait_s);

  protected:
    /* Starts a schedule of `nsteps` steps on worker w and posts step 0; none: inactive, OK. */
    int begin(ucx::Worker *w, size_t nsteps);
    /* Posts step step_'s transfers into send_ / recv_, setting sending_ / receiving_. */
    virtual int post_step() = 0;
    /* True when the endpoint of the current step's partner (or either ring neighbour) failed. */
    virtual bool partner_failed() const = 0;
    /* Whether the completed receive of this step is the expected message (length, the tag's
     * `last` bit, the call word). */
    virtual bool received_ok() const = 0;
    /* The step's local work after its transfers completed (combine, copy); a twohop_status. */
    virtual int finish_step() = 0;
    /* received_ok of the schedules whose receives match without the tag's `last` bit (ring,
     * Rabenseifner): `expect_bytes` arrived and the sender's `last` bit (last_mask) equals
     * this op's (in tag_base). */
    bool received_as_expected(uint64_t expect_bytes, uint64_t tag_base,
                              uint64_t last_mask) const {
        return recv_.received == expect_bytes &&
               (recv_.sender_tag & last_mask) == (tag_base & last_mask);
    }

    ucx::Worker *w_ = nullptr;
    size_t step_ = 0, nsteps_ = 0;
    bool sending_ = false, receiving_ = false;
    ucx::Request send_, recv_;

  private:
    bool active_ = false;
};

} // namespace twohop

#endif
