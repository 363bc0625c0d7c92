/* The pipeline path as a job (pipeline_job.h has the step table). */
#include "pipeline_job.h"

#include <cstdio>

#include "gpu_node.h"
#include "slots.h"

namespace twohop {

PipelineJob::PipelineJob(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                         uint64_t count, const twohop_reduction &red)
    : c_(c), in_(in), out_(out), count_(count), red_(red),
      seg_items_(segment_items(c->slot_bytes, red.item_bytes)),
      nseg_(segment_count(count, seg_items_)), msg_bytes_(count * red.item_bytes),
      word_(call_word(msg_bytes_, red.item_bytes)),
      streaming_(c->stream_bytes != 0 && msg_bytes_ >= c->stream_bytes),
      clocked_(c->verbose >= 3) {}

int PipelineJob::start_copy_in(const InFlight &f) {
    twohop_comm *c = c_;
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red_.item_bytes();
    const int me = c->topo.local_rank;
    // Copy in the shards other ranks reduce; my own shards are read from the input directly
    // when its layout is the canonical one (else they are copied too). With hop 1 on the GPU
    // the owners' kernels read every input where it is: nothing to copy.
    const uint64_t shards = static_cast<uint64_t>(c->topo.n_shards());
    const uint64_t seg_off = f.seg.offset * ib;
    char *my_slot = c->shm.slot(set, me);
    for (uint64_t sh = 0; sh < shards && !c->gpu_hop1.active; ++sh) {
        if (in_.direct && c->topo.shard_owner(c->topo.my_node, static_cast<int>(sh)) == me) {
            continue;
        }
        const Range r = split_even(f.seg.count, shards, sh);
        const int rc = read_in(c, in_, my_slot + r.offset * ib, seg_off + r.offset * ib,
                               r.count * ib);
        if (rc != TWOHOP_OK) return rc;
    }
    publish_arrived(c, set, f.s, word_);
    return TWOHOP_OK;
}

int PipelineJob::start_reduce(const InFlight &f) {
    twohop_comm *c = c_;
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red_.item_bytes();
    const uint64_t shards = static_cast<uint64_t>(c->topo.n_shards());
    const uint64_t seg_off = f.seg.offset * ib;
    const bool gpu = c->gpu_hop1.active;
    int rc;
    // Hop 1 on the GPU: every owned shard's kernel is enqueued, then the fence is polled
    // (TWOHOP_PENDING: the driver keeps the previous segment's hop-2 transfers moving).
    if (gpu && !kernels_posted_) {
        for (const int sh : c->my_shards) {
            const Range r = split_even(f.seg.count, shards, static_cast<uint64_t>(sh));
            rc = gpu_hop1_post(c, seg_off + r.offset * ib, r.count,
                               c->shm.result(set) + r.offset * ib, red_.raw());
            if (rc != TWOHOP_OK) return rc;
        }
        kernels_posted_ = true;
    }
    if (gpu && (rc = gpu_hop1_test(c)) != TWOHOP_OK) return rc;
    kernels_posted_ = false;
    int posted = 0;
    for (size_t i = 0; i < c->my_shards.size(); ++i) {
        const int sh = c->my_shards[i];
        const Range r = split_even(f.seg.count, shards, static_cast<uint64_t>(sh));
        char *out = c->shm.result(set) + r.offset * ib;
        const char *own = in_.direct ? in_.direct + seg_off + r.offset * ib : nullptr;
        if (!gpu) {
            rc = reduce_slots(c, set, r.offset * ib, r.count, out, red_, own,
                              c->topo.shard_owner(c->topo.my_node, sh));
            if (rc != TWOHOP_OK) return rc;
        }
        if (c->rails.empty() || r.count == 0) continue;
        rc = c->start_hop2(set, i, out, r.count, &red_, c->rail_tag(f.s, sh), f.last);
        if (rc != TWOHOP_OK) return rc;
        // Doorbell batching at the collective level: post_batch transfers back-to-back, then
        // let UCX make progress on them.
        if (++posted % c->post_batch == 0) c->worker->progress();
    }
    return TWOHOP_OK;
}

/*
 * Hop 3 gathered on the GPU (GpuHop1::gather): PCIe carries each rank's own shards (n/L bytes
 * per rank, n per node) instead of the whole segment per rank; the rest moves device to device
 * (NVLink between GPUs, HBM on one GPU). hop3_k_ counts the stages: 0 = post my own shards'
 * copies, 1 = wait for them, then publish gathered = s; 2 + j = the j-th shard from my own.
 */
int PipelineJob::finish_hop3_gpu(const InFlight &f) {
    twohop_comm *c = c_;
    GpuHop1 &h = c->gpu_hop1;
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red_.item_bytes();
    const int node = c->topo.my_node;
    const int me = c->topo.local_rank;
    const int shards = c->topo.n_shards();
    const int first = c->my_shards.front();
    int rc;
    if (hop3_k_ == 0) {
        for (const int sh : c->my_shards) {
            const Range r = split_even(f.seg.count, static_cast<uint64_t>(shards),
                                       static_cast<uint64_t>(sh));
            rc = gpu_hop3_post(c, h.out[me] + (f.seg.offset + r.offset) * ib,
                               c->shm.result(set) + r.offset * ib, r.count * ib);
            if (rc != TWOHOP_OK) return rc;
        }
        hop3_k_ = 1;
    }
    if (hop3_k_ == 1) {
        if ((rc = gpu_hop1_test(c)) != TWOHOP_OK) return rc;
        c->shm.flags(me).gathered.store(f.s, std::memory_order_release);
        hop3_k_ = 2;
    }
    for (; hop3_k_ - 2 < shards; ++hop3_k_) {
        const int sh = (first + hop3_k_ - 2) % shards;
        const int owner = c->topo.shard_owner(node, sh);
        if (owner == me) continue;
        if (c->shm.flags(owner).gathered.load(std::memory_order_acquire) < f.s) {
            return TWOHOP_PENDING;
        }
        const Range r = split_even(f.seg.count, static_cast<uint64_t>(shards),
                                   static_cast<uint64_t>(sh));
        const uint64_t off = (f.seg.offset + r.offset) * ib;
        if ((rc = gpu_hop3_post(c, h.out[me] + off, h.out[owner] + off, r.count * ib)) !=
            TWOHOP_OK) {
            return rc;
        }
        ++steps_;
    }
    return gpu_hop1_test(c);
}

int PipelineJob::finish_hop3(const InFlight &f) {
    twohop_comm *c = c_;
    if (c->gpu_hop1.active && c->gpu_hop1.gather) return finish_hop3_gpu(f);
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red_.item_bytes();
    const int node = c->topo.my_node;
    const bool gpu = c->gpu_hop1.active && out_.device != nullptr;
    // Every shard as soon as its owner published it, starting with my own shard so that the
    // local ranks read from different owners at any moment.
    const int shards = c->topo.n_shards();
    const int first = c->my_shards.front();
    for (; hop3_k_ < shards; ++hop3_k_) {
        const int sh = (first + hop3_k_) % shards;
        if (c->shm.flags(c->topo.shard_owner(node, sh)).reduced.load(
                std::memory_order_acquire) < f.s) {
            return TWOHOP_PENDING;
        }
        const Range r = split_even(f.seg.count, static_cast<uint64_t>(shards),
                                   static_cast<uint64_t>(sh));
        const uint64_t off = (f.seg.offset + r.offset) * ib;
        const char *src = c->shm.result(set) + r.offset * ib;
        const int rc = gpu ? gpu_hop3_post(c, out_.device + off, src, r.count * ib)
                           : write_out(c, out_, off, src, r.count * ib, streaming_);
        if (rc != TWOHOP_OK) return rc;
        ++steps_;
    }
    // The result set is reused by segment s + depth once every local rank is done with it:
    // the GPU's copies out of it must have completed (TWOHOP_PENDING until then).
    if (gpu) return gpu_hop1_test(c);
    return TWOHOP_OK;
}

int PipelineJob::advance() {
    twohop_comm *c = c_;
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    int rc;
    for (;;) {
        switch (st_) {
        case kPick: {
            const PipelineStep::Kind next =
                pipeline_next(next_, first_, nseg_, static_cast<uint64_t>(c->depth)).kind;
            if (next == PipelineStep::kStart) {
                window_[next_ % kMaxDepth] =
                    InFlight{c->seq.take(), segment_range(count_, seg_items_, next_),
                             next_ + 1 == nseg_};
                ++next_;
                if (next_ == 1 && decline_first_) {
                    decline_first_(c, window_[0].s, msg_bytes_, red_.item_bytes());
                }
                mark();
                st_ = kStartFree;
            } else if (next == PipelineStep::kFinish) { // the oldest segment, first_
                mark();
                st_ = kFinishRings;
            } else {
                st_ = kFinished;
                if (clocked_) log_phases();
                break;
            }
            break;
        }
        case kStartFree: {
            const InFlight &f = window_[(next_ - 1) % kMaxDepth];
            if (f.s > uint64_t(c->depth) &&
                (rc = test_all(c, kDone, f.s - c->depth)) != TWOHOP_OK) {
                return rc;
            }
            if ((rc = start_copy_in(f)) != TWOHOP_OK) return rc;
            ++steps_;
            st_ = kStartArrived;
            break;
        }
        case kStartArrived: {
            const InFlight &f = window_[(next_ - 1) % kMaxDepth];
            const int set = static_cast<int>(f.s % c->depth);
            if ((rc = test_arrived(c, set, f.s, word_)) != TWOHOP_OK) return rc;
            if ((rc = start_reduce(f)) != TWOHOP_OK) return rc;
            add(kStart);
            ++steps_;
            st_ = kPick;
            break;
        }
        case kFinishRings: {
            const InFlight &f = window_[first_ % kMaxDepth];
            const int set = static_cast<int>(f.s % c->depth);
            for (size_t i = 0; i < c->rails.size(); ++i) {
                if (c->hop2_active(set, i)) return TWOHOP_PENDING;
            }
            add(kHop2);
            mine.reduced.store(f.s, std::memory_order_release);
            hop3_k_ = 0;
            ++steps_;
            st_ = kFinishHop3;
            break;
        }
        case kFinishHop3: {
            const InFlight &f = window_[first_ % kMaxDepth];
            if ((rc = finish_hop3(f)) != TWOHOP_OK) return rc;
            add(kHop3);
            mine.done.store(f.s, std::memory_order_release);
            ++first_;
            st_ = kPick;
            break;
        }
        case kFinished:
            // Hop 3 gathered on the GPU: local peers copy from my receive buffer until they
            // are done with the last segment; the call (and my buffer) is mine again then.
            if (c->gpu_hop1.active && c->gpu_hop1.gather && nseg_ > 0) {
                return test_all(c, kDone, window_[(nseg_ - 1) % kMaxDepth].s);
            }
            return TWOHOP_OK;
        }
    }
}

void PipelineJob::log_phases() const {
    char msg[360];
    std::snprintf(msg, sizeof(msg),
                  "pipeline: %llu B in %llu segments%s: calling thread in hop 1 (copy in, "
                  "reduce, post hop 2) %.0f us, waiting for hop 2 %.0f us, hop 3 %.0f us",
                  static_cast<unsigned long long>(msg_bytes_),
                  static_cast<unsigned long long>(nseg_),
                  !c_->gpu_hop1.active ? ""
                  : c_->gpu_hop1.gather ? " (hop 1 and 3 on the GPU, hop 3 gathered on the GPU)"
                                        : " (hop 1 and 3 on the GPU)",
                  us_[kStart],
                  us_[kHop2], us_[kHop3]);
    c_->host.log(3, msg);
}

} // namespace twohop
