/*
 * The host side of one GPU-posted call, independent of the transport: the proxy thread runs
 * PostedJob::step until it returns a final status. The transport sits behind PostedBackend, the
 * narrow interface a device-initiated backend (UCX's device API, GPUDirect Async) would
 * replace: post the transfers a descriptor announces, say when a segment's transfers are done.
 *
 * One step: drive the backend (progress, failure checks); read the descriptors the doorbell
 * published (doorbell_ring.h) and post each, checking they come in order (segment 0, 1, ...);
 * retire completed segments in order (backend.retire publishes their results); when every
 * segment is retired and the backend's GPU work has drained, the job ends with TWOHOP_OK.
 */
#ifndef TWOHOP_POSTED_JOB_H
#define TWOHOP_POSTED_JOB_H

#include <chrono>
#include <cstdint>

#include "doorbell_ring.h"

namespace twohop {

class PostedBackend {
  public:
    virtual ~PostedBackend() = default;
    /* Drives the transport and checks for failures; a twohop_status. */
    virtual int progress() = 0;
    /* Starts the transfers of the segment `d` announces (its data is complete); a status. */
    virtual int post(const PostDesc &d) = 0;
    /* True when the transfers of posted segment `segment` (index in the call) completed. */
    virtual bool done(uint64_t segment) = 0;
    /* Publishes the result of completed segment `segment` (called once, in order). */
    virtual void retire(uint64_t segment) = 0;
    /* Called every step: lets the backend open gates the GPU waits on. */
    virtual void gates() {}
    /* 1 when the GPU finished everything enqueued for the call, 0 while not, otherwise the
     * call's error status (a twohop_status such as TWOHOP_ERR_TIMEOUT, or a negative code). */
    virtual int drained() = 0;
};

/* Status of a job whose descriptors came out of order (a corrupted ring). */
constexpr int kPostedBadDescriptor = -2000;

class PostedJob {
  public:
    /* nseg segments with sequence numbers s0 + 1 .. s0 + nseg; timeout_s > 0: a step with no
     * progress for that long ends the job with `timeout_status`. */
    PostedJob(DoorbellRing *ring, PostedBackend *backend, uint64_t s0, uint64_t nseg,
              double timeout_s, int timeout_status)
        : ring_(ring), backend_(backend), s0_(s0), nseg_(nseg), timeout_s_(timeout_s),
          timeout_status_(timeout_status), last_progress_(std::chrono::steady_clock::now()) {}

    /* One round; returns `pending` while the call is not finished, else its final status. */
    int step(int pending) {
        int rc = backend_->progress();
        if (rc != 0) return rc;
        const auto now = std::chrono::steady_clock::now();
        PostDesc d[16];
        const uint32_t m = consume(ring_, d, 16, &doorbells_);
        for (uint32_t j = 0; j < m; ++j, ++posted_) {
            if (d[j].seq != s0_ + 1 + posted_ || d[j].segment != posted_ || posted_ >= nseg_) {
                return kPostedBadDescriptor;
            }
            if ((rc = backend_->post(d[j])) != 0) return rc;
            last_progress_ = now;
        }
        while (retired_ < posted_ && backend_->done(retired_)) {
            backend_->retire(retired_++);
            last_progress_ = now;
        }
        backend_->gates();
        if (retired_ == nseg_) {
            const int q = backend_->drained();
            if (q == 1) return 0;
            if (q != 0) return q; // an error: never taken for the end (TWOHOP_ERR_TIMEOUT is 7)
        }
        if (timeout_s_ > 0 &&
            std::chrono::duration<double>(now - last_progress_).count() > timeout_s_) {
            return timeout_status_;
        }
        return pending;
    }

    uint64_t doorbells() const { return doorbells_; } // doorbell reads that found descriptors
    uint64_t posted() const { return posted_; }
    uint64_t retired() const { return retired_; }
    uint64_t segments() const { return nseg_; }

  private:
    DoorbellRing *ring_;
    PostedBackend *backend_;
    uint64_t s0_, nseg_;
    double timeout_s_;
    int timeout_status_;
    std::chrono::steady_clock::time_point last_progress_;
    uint64_t posted_ = 0, retired_ = 0, doorbells_ = 0;
};

} // namespace twohop

#endif
