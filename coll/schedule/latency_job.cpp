/* The latency path as a job (latency_job.h has the step table). */
#include "latency_job.h"

#include "slots.h"

namespace twohop {

int LatencyJob::finish() {
    const int rc = write_out(c_, out_, 0, c_->shm.result(set_), bytes_, false);
    if (rc != TWOHOP_OK) return rc;
    c_->shm.flags(c_->topo.local_rank).done.store(s_, std::memory_order_release);
    st_ = kFinished;
    ++steps_;
    return TWOHOP_OK;
}

int LatencyJob::advance() {
    twohop_comm *c = c_;
    const int me = c->topo.local_rank;
    RankFlags &mine = c->shm.flags(me);
    int rc;
    switch (st_) {
    case kBegin:
        s_ = c->seq.take();
        set_ = static_cast<int>(s_ % c->depth);
        bytes_ = count_ * red_.item_bytes();
        word_ = call_word(bytes_, red_.item_bytes());
        if (decline_first_) decline_first_(c, s_, bytes_, red_.item_bytes());
        st_ = kWaitFree;
        [[fallthrough]];
    case kWaitFree:
        if (s_ > uint64_t(c->depth) && (rc = test_all(c, kDone, s_ - c->depth)) != TWOHOP_OK) {
            return rc;
        }
        if ((rc = read_in(c, in_, c->shm.slot(set_, me), 0, bytes_)) != TWOHOP_OK) return rc;
        publish_arrived(c, set_, s_, word_);
        st_ = c->topo.n_nodes() == 1 || me == 0 ? kArrived : kLeader;
        ++steps_;
        return advance();
    case kArrived:
        if ((rc = test_arrived(c, set_, s_, word_)) != TWOHOP_OK) return rc;
        ++steps_;
        if (c->topo.n_nodes() == 1) {
            if (out_.direct) {
                rc = reduce_slots(c, set_, 0, count_, out_.direct, red_);
            } else {
                if (c->private_out.size() < bytes_) c->private_out.resize(c->slot_bytes);
                rc = reduce_slots(c, set_, 0, count_, c->private_out.data(), red_);
                if (rc == TWOHOP_OK) {
                    rc = write_out(c, out_, 0, c->private_out.data(), bytes_, false);
                }
            }
            if (rc != TWOHOP_OK) return rc;
            mine.done.store(s_, std::memory_order_release);
            st_ = kFinished;
            return TWOHOP_OK;
        }
        // Node leader: owner of shard 0 on every node, i.e. the rail of shard 0.
        rc = reduce_slots(c, set_, 0, count_, c->shm.result(set_), red_);
        if (rc != TWOHOP_OK) return rc;
        {
            const twohop_rail &rail = c->rails[0];
            twohop::Hop2Slot &slot = c->hop2[set_ * c->rails.size()]; // (set, rail 0)
            if (c->latency_hop2 == 0) { // recursive doubling among the leaders
                rc = slot.rd.start(c->worker, &c->rd_peers, rail.n, rail.pos,
                                   c->shm.result(set_), count_, &red_, word_, c->rail_tag(s_, 0));
            } else {
                rc = slot.ring.start(c->worker, rail.right, rail.left, rail.n, rail.pos,
                                     c->shm.result(set_), count_, &red_,
                                     c->ring_scratch(set_, 0), c->rail_tag(s_, 0));
            }
        }
        if (rc != TWOHOP_OK) return rc;
        st_ = kHop2;
        [[fallthrough]];
    case kHop2:
        for (size_t i = 0; i < c->rails.size(); ++i) {
            if (c->hop2_active(set_, i)) return TWOHOP_PENDING;
        }
        mine.reduced.store(s_, std::memory_order_release);
        return finish();
    case kLeader:
        if (c->shm.flags(0).reduced.load(std::memory_order_acquire) < s_) return TWOHOP_PENDING;
        if (c->shm.flags(0).bytes[set_].load(std::memory_order_relaxed) != word_) {
            return TWOHOP_ERR_MISMATCH;
        }
        return finish();
    case kFinished:
        return TWOHOP_OK;
    }
    return TWOHOP_OK;
}

} // namespace twohop
