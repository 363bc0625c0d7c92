/*
 * The two allreduce paths over one communicator's state.
 *
 * Latency path (message bytes x ranks of the largest node <= small_bytes), one segment `s`,
 * buffer set s % D:
 *   step  who                what
 *   1     all local ranks    wait until set is free (every local rank done with s - D)
 *   2     all local ranks    copy input to own slot, publish arrived = s
 *   3a    one node:  all     wait all arrived; reduce slots 0..L-1 in order into the output
 *   3b    >1 node:   leader  wait all arrived; reduce into result; ring with the other leaders;
 *                            publish reduced = s.  Others wait leader's reduced, copy result out
 *   4     all                publish done = s
 *
 * Pipeline path (larger messages), segments of slot_bytes, up to D segments in flight:
 *   start(k):  wait set free; copy the shards of segment k that other ranks own into
 *              own slot; arrived = s;
 *              wait all arrived; for each owned shard: result = in_o op in_o+1 op ... (hop 1,
 *              reduce-scatter, starting at the owner o; my own input read from sbuf);
 *              with >1 node post the shard's ring (hop 2, non-blocking)
 *   finish(k): complete own rings; reduced = s; copy each shard of segment k out as soon as
 *              its owner published reduced = s, starting with my own shard (hop 3,
 *              allgather); done = s
 *   order:     start(0) .. start(D-1), finish(0), start(D), finish(1), ... so hop 1 of segment
 *              k runs while hop 2 of segment k-1 is on the wire.
 * Every element is reduced once, by its shard owner, in a fixed order, then in ring order:
 * the result is bitwise identical on all ranks and repeatable for the same topology.
 */
#include <cstring>

#include "comm_state.h"
#include "reducer.h"
#include "segment_plan.h"
#include "memory_kind.h"

using twohop::RankFlags;
using twohop::Range;
using twohop::Reducer;

int twohop_comm::poll() {
    int rc = TWOHOP_OK;
    if (worker) {
        worker->progress();
        for (auto &r : rings) {
            bool fin;
            if (r.active()) {
                int e = r.advance(&fin);
                if (e != TWOHOP_OK) rc = e;
            }
        }
        if (rc == TWOHOP_OK && worker->peer_failed()) rc = TWOHOP_ERR_TRANSPORT;
    }
    host.progress();
    return rc;
}

int twohop_comm::wait_for(const std::atomic<uint64_t> &flag, uint64_t target) {
    unsigned spins = 0;
    while (flag.load(std::memory_order_acquire) < target) {
        if (++spins % 16 == 0) {
            int rc = poll();
            if (rc != TWOHOP_OK) return rc;
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::wait_all(std::atomic<uint64_t> RankFlags::*which, uint64_t target) {
    for (int i = 0; i < topo.local_size(); ++i) {
        int rc = wait_for(shm.flags(i).*which, target);
        if (rc != TWOHOP_OK) return rc;
    }
    return TWOHOP_OK;
}

namespace {

using FlagPtr = std::atomic<uint64_t> RankFlags::*;
constexpr FlagPtr kArrived = &RankFlags::arrived;
constexpr FlagPtr kDone = &RankFlags::done;
constexpr uint64_t kReduceBlockBytes = 4096; // partial-result block kept in L1 while reducing

/*
 * out = in_f op in_{f+1} op ... op in_{f+L-1} (indices mod L, f = `first`) over `items` items
 * at byte offset off_bytes of the segment, where in_l is local rank l's slot of set `set`,
 * except that my own contribution is read from `own` when given (the pipeline does not copy a
 * rank's own shards into its slot). The latency path uses first = 0 on every rank; the
 * pipeline starts each shard at its owner, so owners do not all read slot 0 at once.
 */
int reduce_slots(twohop_comm *c, int set, uint64_t off_bytes, uint64_t items, char *out,
                 const Reducer &red, const char *own = nullptr, int first = 0) {
    const int l = c->topo.local_size();
    const int me = c->topo.local_rank;
    auto in = [&](int k) -> const char * {
        const int i = (first + k) % l;
        return (own && i == me) ? own : c->shm.slot(set, i) + off_bytes;
    };
    if (l == 1) {
        if (out != in(0)) std::memcpy(out, in(0), items * red.item_bytes());
        return TWOHOP_OK;
    }
    // Blocked so the partial result stays in L1 while the L input streams are read: every
    // element of the block sees ((in_f op in_f+1) op in_f+2) op ... in that order.
    const uint64_t ib = red.item_bytes();
    const uint64_t blk = kReduceBlockBytes / ib > 0 ? kReduceBlockBytes / ib : 1;
    for (uint64_t b = 0; b < items; b += blk) {
        const uint64_t n = items - b < blk ? items - b : blk;
        const uint64_t off = b * ib;
        int rc = red.combine(in(0) + off, in(1) + off, out + off, n);
        for (int k = 2; rc == TWOHOP_OK && k < l; ++k) {
            rc = red.combine(out + off, in(k) + off, out + off, n);
        }
        if (rc != TWOHOP_OK) return rc;
    }
    return TWOHOP_OK;
}

/* Runs the rings of segment `s` (set `set`) to completion, polling everything meanwhile. */
int finish_rings(twohop_comm *c, int set) {
    for (size_t i = 0; i < c->rails.size(); ++i) {
        twohop::RingOp &r = c->rings[set * c->rails.size() + i];
        while (r.active()) {
            int rc = c->poll();
            if (rc != TWOHOP_OK) return rc;
        }
    }
    return TWOHOP_OK;
}

int latency_path(twohop_comm *c, const char *sbuf, char *rbuf, uint64_t count,
                 const Reducer &red) {
    const uint64_t s = ++c->seq;
    const int set = static_cast<int>(s % c->depth);
    const uint64_t bytes = count * red.item_bytes();
    const int me = c->topo.local_rank;
    RankFlags &mine = c->shm.flags(me);
    int rc = s > uint64_t(c->depth) ? c->wait_all(kDone, s - c->depth) : TWOHOP_OK;
    if (rc != TWOHOP_OK) return rc;
    c->mem->to_shm(c->shm.slot(set, me), sbuf, bytes);
    mine.arrived.store(s, std::memory_order_release);

    if (c->topo.n_nodes() == 1) {
        rc = c->wait_all(kArrived, s);
        if (rc == TWOHOP_OK) rc = reduce_slots(c, set, 0, count, rbuf, red);
        mine.done.store(s, std::memory_order_release);
        return rc;
    }
    if (me == 0) { // node leader: owner of shard 0 on every node, i.e. the rail of shard 0
        rc = c->wait_all(kArrived, s);
        if (rc == TWOHOP_OK) rc = reduce_slots(c, set, 0, count, c->shm.result(set), red);
        if (rc == TWOHOP_OK) {
            twohop::RingOp &ring = c->rings[set * c->rails.size()];
            const twohop_rail &rail = c->rails[0];
            rc = ring.start(c->worker, rail.right, rail.n, rail.pos, c->shm.result(set), count,
                            &red, c->ring_scratch(set, 0), c->rail_tag(s, 0));
        }
        if (rc == TWOHOP_OK) rc = finish_rings(c, set);
        if (rc != TWOHOP_OK) return rc; // the job is broken: peers see the failure too
        mine.reduced.store(s, std::memory_order_release);
    } else if ((rc = c->wait_for(c->shm.flags(0).reduced, s)) != TWOHOP_OK) {
        return rc;
    }
    c->mem->from_shm(rbuf, c->shm.result(set), bytes, false);
    mine.done.store(s, std::memory_order_release);
    return TWOHOP_OK;
}

constexpr uint64_t kMaxDepth = 8; // upper bound of coll_twohop_pipeline_depth

struct InFlight {
    uint64_t s;
    Range seg;
};

int pipeline_start(twohop_comm *c, const char *sbuf, const InFlight &f, const Reducer &red) {
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red.item_bytes();
    const int me = c->topo.local_rank;
    int rc = f.s > uint64_t(c->depth) ? c->wait_all(kDone, f.s - c->depth) : TWOHOP_OK;
    if (rc != TWOHOP_OK) return rc;
    // Copy in only the shards other ranks reduce; my own shards are read from sbuf directly.
    const uint64_t shards = static_cast<uint64_t>(c->topo.n_shards());
    const char *seg_in = sbuf + f.seg.offset * ib;
    for (uint64_t sh = 0; sh < shards; ++sh) {
        if (c->topo.shard_owner(c->topo.my_node, static_cast<int>(sh)) == me) continue;
        const Range r = twohop::split_even(f.seg.count, shards, sh);
        c->mem->to_shm(c->shm.slot(set, me) + r.offset * ib, seg_in + r.offset * ib, r.count * ib);
    }
    c->shm.flags(me).arrived.store(f.s, std::memory_order_release);
    if ((rc = c->wait_all(kArrived, f.s)) != TWOHOP_OK) return rc;

    int posted = 0;
    for (size_t i = 0; i < c->my_shards.size(); ++i) {
        const int sh = c->my_shards[i];
        const Range r = twohop::split_even(f.seg.count, shards, static_cast<uint64_t>(sh));
        char *out = c->shm.result(set) + r.offset * ib;
        rc = reduce_slots(c, set, r.offset * ib, r.count, out, red, seg_in + r.offset * ib,
                          c->topo.shard_owner(c->topo.my_node, sh));
        if (rc != TWOHOP_OK) return rc;
        if (c->rails.empty() || r.count == 0) continue;
        const twohop_rail &rail = c->rails[i];
        rc = c->rings[set * c->rails.size() + i].start(c->worker, rail.right, rail.n, rail.pos,
                                                       out, r.count, &red,
                                                       c->ring_scratch(set, i),
                                                       c->rail_tag(f.s, sh));
        if (rc != TWOHOP_OK) return rc;
        // Doorbell batching at the collective level: post_batch transfers back-to-back, then
        // let UCX make progress on them.
        if (++posted % c->post_batch == 0) c->worker->progress();
    }
    return TWOHOP_OK;
}

int pipeline_finish(twohop_comm *c, char *rbuf, const InFlight &f, const Reducer &red,
                    bool streaming) {
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red.item_bytes();
    const int node = c->topo.my_node;
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    int rc = finish_rings(c, set);
    if (rc != TWOHOP_OK) return rc;
    mine.reduced.store(f.s, std::memory_order_release);
    // Hop 3: copy every shard as soon as its owner published it, starting with my own shard
    // so that the local ranks read from different owners at any moment.
    const int shards = c->topo.n_shards();
    const int first = c->my_shards.front();
    for (int k = 0; k < shards; ++k) {
        const int sh = (first + k) % shards;
        rc = c->wait_for(c->shm.flags(c->topo.shard_owner(node, sh)).reduced, f.s);
        if (rc != TWOHOP_OK) return rc;
        const Range r = twohop::split_even(f.seg.count, static_cast<uint64_t>(shards),
                                           static_cast<uint64_t>(sh));
        char *dst = rbuf + (f.seg.offset + r.offset) * ib;
        const char *src = c->shm.result(set) + r.offset * ib;
        c->mem->from_shm(dst, src, r.count * ib, streaming);
    }
    mine.done.store(f.s, std::memory_order_release);
    return TWOHOP_OK;
}

int pipeline_path(twohop_comm *c, const char *sbuf, char *rbuf, uint64_t count,
                  const Reducer &red) {
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes());
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const bool streaming = c->stream_bytes != 0 && count * red.item_bytes() >= c->stream_bytes;
    // Segments in flight, oldest first: a fixed ring (depth <= kMaxDepth), no allocation.
    InFlight window[kMaxDepth];
    uint64_t first = 0, next = 0; // window holds segments [first, next)
    for (uint64_t k = 0; k < nseg; ++k) {
        if (next - first == static_cast<uint64_t>(c->depth)) {
            int rc = pipeline_finish(c, rbuf, window[first++ % kMaxDepth], red, streaming);
            if (rc != TWOHOP_OK) return rc;
        }
        InFlight &f = window[next++ % kMaxDepth];
        f = InFlight{++c->seq, twohop::segment_range(count, seg_items, k)};
        int rc = pipeline_start(c, sbuf, f, red);
        if (rc != TWOHOP_OK) return rc;
    }
    while (first < next) {
        int rc = pipeline_finish(c, rbuf, window[first++ % kMaxDepth], red, streaming);
        if (rc != TWOHOP_OK) return rc;
    }
    return TWOHOP_OK;
}

} // namespace

extern "C" int twohop_comm_allreduce(twohop_comm *c, const void *sbuf, void *rbuf,
                                     uint64_t count, const twohop_reduction *red) {
    if (count == 0) return TWOHOP_OK;
    const Reducer reducer(*red);
    const auto *in = static_cast<const char *>(sbuf);
    auto *out = static_cast<char *>(rbuf);
    // The path must be the same on every rank: scale by the largest node's rank count (the
    // shard count), not by this node's.
    const uint64_t bytes = count * red->item_bytes;
    if (bytes <= c->slot_bytes &&
        bytes * static_cast<uint64_t>(c->topo.n_shards()) <= c->small_bytes) {
        return latency_path(c, in, out, count, reducer);
    }
    return pipeline_path(c, in, out, count, reducer);
}
