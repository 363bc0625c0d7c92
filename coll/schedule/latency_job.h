/*
 * Latency path (message bytes x ranks of the largest node <= small_bytes): one segment `s`,
 * buffer set s % D (D = pipeline depth):
 *   step  state       who                what
 *   1     kWaitFree   all local ranks    set free: every local rank done with s - D
 *   2                 all local ranks    copy input to own slot, publish arrived = s
 *   3a    kArrived    one node: all      all arrived; reduce slots 0..L-1 in order into output
 *   3b    kArrived    >1 node: leader    all arrived; reduce into the result; hop 2 among
 *         kHop2                          the node leaders (recursive doubling or ring);
 *                                        publish reduced = s
 *         kLeader     >1 node: others    leader's reduced = s; its call word equals mine
 *   4                 all                copy the result out; publish done = s
 */
#ifndef TWOHOP_SCHEDULE_LATENCY_JOB_H
#define TWOHOP_SCHEDULE_LATENCY_JOB_H

#include "comm_state.h"
#include "job.h"
#include "object_cache.h"
#include "reducer.h"

namespace twohop {

class LatencyJob : public Job {
  public:
    TWOHOP_CACHED_OBJECT(LatencyJob) // one per small call: from a per-thread cache
    /* count items of red.item_bytes from `in` into `out` (both stay valid until the job
     * finishes, and so does what their ctx and red's user_ctx point to). */
    LatencyJob(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
               uint64_t count, const twohop_reduction &red)
        : c_(c), in_(in), out_(out), count_(count), red_(red) {}
    int advance() override;

  private:
    int finish();
    enum State { kBegin, kWaitFree, kArrived, kHop2, kLeader, kFinished };
    twohop_comm *c_;
    twohop_userbuf in_, out_;
    uint64_t count_;
    Reducer red_;
    State st_ = kBegin;
    uint64_t s_ = 0, word_ = 0, bytes_ = 0;
    int set_ = 0;
};

} // namespace twohop

#endif
