/*
 * Pipeline path (larger messages): segments of slot_bytes, up to D (pipeline depth) in flight.
 *   start(k)   kStartFree     set of segment s free (every local rank done with s - D); copy
 *                             the shards of segment k that other ranks own into my slot
 *                             (hop 1 on the GPU: nothing to copy); publish arrived = s
 *              kStartArrived  all arrived, call words equal; for each owned shard:
 *                             result = in_o op in_o+1 op ... (reduce-scatter, from the owner o;
 *                             my own input read in place); with >1 node post its hop 2
 *   finish(k)  kFinishRings   my shards' hop 2 complete; publish reduced = s
 *              kFinishHop3    copy every shard out once its owner published reduced = s,
 *                             starting with my own (allgather); publish done = s
 *                             (hop 3 gathered on the GPU, finish_hop3_gpu: my own shards
 *                             from host memory into my device receive buffer; when they
 *                             landed publish gathered = s; every other shard device to
 *                             device from its owner's receive buffer once it published
 *                             gathered = s; the call ends when every local rank is done
 *                             with its last segment: until then peers read my buffer)
 *   order      start(0) .. start(D-1), finish(0), start(D), finish(1), ... so hop 1 of
 *              segment k runs while hop 2 of segment k-1 is on the wire (kPick decides).
 * Every element is reduced once, by its shard owner, in a fixed order, then in hop-2 order:
 * the result is bitwise identical on all ranks and repeatable for the same topology.
 */
#ifndef TWOHOP_SCHEDULE_PIPELINE_JOB_H
#define TWOHOP_SCHEDULE_PIPELINE_JOB_H

#include <chrono>

#include "comm_state.h"
#include "job.h"
#include "reducer.h"
#include "segment_plan.h"

namespace twohop {

class PipelineJob : public Job {
  public:
    /* count items of red.item_bytes from `in` into `out` (see LatencyJob for lifetimes). */
    PipelineJob(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                uint64_t count, const twohop_reduction &red);
    int advance() override;

    static constexpr uint64_t kMaxDepth = 8; // upper bound of coll_twohop_pipeline_depth

  private:
    struct InFlight {
        uint64_t s;
        Range seg;
        bool last; // the call's last segment (marked in hop-2 tags)
    };
    int start_copy_in(const InFlight &f);
    int start_reduce(const InFlight &f);
    int finish_hop3(const InFlight &f);
    int finish_hop3_gpu(const InFlight &f);
    void log_phases() const;

    enum State { kPick, kStartFree, kStartArrived, kFinishRings, kFinishHop3, kFinished };
    enum Phase { kStart, kHop2, kHop3 };
    using Clock = std::chrono::steady_clock;
    void mark() {
        if (clocked_) t0_ = Clock::now();
    }
    void add(Phase p) {
        if (!clocked_) return;
        const auto t = Clock::now();
        us_[p] += std::chrono::duration<double, std::micro>(t - t0_).count();
        t0_ = t;
    }

    twohop_comm *c_;
    twohop_userbuf in_, out_;
    uint64_t count_;
    Reducer red_;
    uint64_t seg_items_, nseg_, msg_bytes_, word_;
    bool streaming_;
    InFlight window_[kMaxDepth];
    uint64_t first_ = 0, next_ = 0; // window holds segments [first_, next_)
    State st_ = kPick;
    int hop3_k_ = 0;                // kFinishHop3: shards copied out so far
    bool kernels_posted_ = false;   // kStartArrived: hop-1 kernels of the segment enqueued
    // Where the calling thread spends a pipelined call (verbose 3 only), microseconds.
    bool clocked_;
    double us_[3] = {0, 0, 0};
    Clock::time_point t0_{};
};

} // namespace twohop

#endif
