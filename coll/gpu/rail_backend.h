/*
 * Private to coll/gpu/: the host half of a GPU-posted call (RingBackend, a PostedBackend of
 * posted_job.h): hop 2 over the communicator's rails for each segment the doorbell announces.
 */
#pragma once

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "gpu_internal.h"
#include "posted_job.h"
#include "reducer.h"
#include "segment_plan.h"

namespace twohop_gpu {

/*
 * The host half of a GPU-posted call, for PostedJob (posted_job.h): hop-2 rings over UCX for
 * each segment the doorbell announces, `reduced` when they complete, and the two gates of the
 * call's ring opened from the local ranks' flags: start(k) once every local rank is done with
 * the segment that used its buffer set before (s - depth), finish(k) once every shard's owner
 * on this node published its hop-2 result. Host memory and UCX only: whichever thread steps
 * the job (the proxy thread may run under MPI_THREAD_SINGLE) makes no MPI and no CUDA call;
 * `drained` says when the GPU is done with the call.
 */
class RingBackend : public twohop::PostedBackend {
  public:
    RingBackend(twohop_comm *c, const twohop_reduction &red, uint64_t count, uint64_t seg_items,
                uint64_t s0, uint64_t nseg, twohop::DoorbellRing *ring,
                std::function<int()> drained)
        : c_(c), reducer_(red), count_(count), seg_items_(seg_items), s0_(s0), nseg_(nseg),
          ring_(ring), drained_(std::move(drained)) {
        const int node = c->topo.my_node;
        for (int sh = 0; sh < c->topo.n_shards(); ++sh) {
            const int o = c->topo.shard_owner(node, sh);
            if (std::find(owners_.begin(), owners_.end(), o) == owners_.end()) {
                owners_.push_back(o);
            }
        }
    }
    int progress() override {
        if (__atomic_load_n(&ring_->fault, __ATOMIC_ACQUIRE) == 1) { // the call kernel's wait
            c_->host.log(1, "GPU-posted call: a wait of the call's kernel outlasted "
                            "coll_twohop_timeout");
            return TWOHOP_ERR_TIMEOUT;
        }
        return c_->poll_transport();
    }
    int post(const twohop::PostDesc &d) override {
        const uint64_t shards = static_cast<uint64_t>(c_->topo.n_shards());
        const uint64_t ib = reducer_.item_bytes();
        const int set = static_cast<int>(d.seq % static_cast<uint64_t>(c_->depth));
        const twohop::Range seg = twohop::segment_range(count_, seg_items_, d.segment);
        for (size_t i = 0; i < c_->my_shards.size(); ++i) {
            const int sh = c_->my_shards[i];
            const twohop::Range r = twohop::split_even(seg.count, shards,
                                                       static_cast<uint64_t>(sh));
            if (c_->rails.empty() || r.count == 0) continue;
            const int rc = c_->start_hop2(set, i, c_->shm.result(set) + r.offset * ib, r.count,
                                          &reducer_, c_->rail_tag(d.seq, sh), d.last != 0);
            if (rc != TWOHOP_OK) return rc;
        }
        return TWOHOP_OK;
    }
    bool done(uint64_t segment) override {
        const int set = static_cast<int>((s0_ + 1 + segment) % c_->depth);
        for (size_t i = 0; i < c_->rails.size(); ++i) {
            if (c_->hop2_active(set, i)) return false;
        }
        return true;
    }
    void retire(uint64_t segment) override {
        c_->shm.flags(c_->topo.local_rank)
            .reduced.store(s0_ + 1 + segment, std::memory_order_release);
    }
    void gates() override {
        const uint64_t depth = static_cast<uint64_t>(c_->depth);
        const int L = c_->topo.local_size();
        while (gate_start_ < nseg_) {
            const uint64_t s = s0_ + 1 + gate_start_;
            bool free = true;
            for (int l = 0; free && s > depth && l < L; ++l) {
                free = c_->shm.flags(l).done.load(std::memory_order_acquire) >= s - depth;
            }
            if (!free) break;
            twohop::open_gate(&ring_->gate_start, ++gate_start_);
        }
        while (gate_finish_ < nseg_) {
            const uint64_t s = s0_ + 1 + gate_finish_;
            bool all = true;
            for (size_t i = 0; all && i < owners_.size(); ++i) {
                all = c_->shm.flags(owners_[i]).reduced.load(std::memory_order_acquire) >= s;
            }
            if (!all) break;
            twohop::open_gate(&ring_->gate_finish, ++gate_finish_);
        }
    }
    int drained() override { return drained_(); }
    /* How many of the call's finish gates are open (nseg: only hop 3 and the end remain). */
    uint64_t finish_gates() const { return gate_finish_; }

  private:
    twohop_comm *c_;
    const twohop::Reducer reducer_; // the rings use it until they complete
    uint64_t count_, seg_items_, s0_, nseg_;
    twohop::DoorbellRing *ring_;
    std::function<int()> drained_;
    std::vector<int> owners_;
    uint64_t gate_start_ = 0, gate_finish_ = 0;
};

} // namespace twohop_gpu
