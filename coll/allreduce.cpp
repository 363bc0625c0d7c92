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
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm_state.h"
#include "cuda_driver.h"
#include "gpu_node.h"
#include "reducer.h"
#include "segment_plan.h"
#include "memory_kind.h"

using twohop::RankFlags;
using twohop::Range;
using twohop::Reducer;

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
} // namespace

int twohop_comm::poll() {
    int rc = TWOHOP_OK;
    if (worker) {
        worker->progress();
        auto advance_all = [&rc](auto &ops) {
            for (auto &r : ops) {
                bool fin;
                const int e = r.active() ? r.advance(&fin) : TWOHOP_OK;
                if (e != TWOHOP_OK && rc == TWOHOP_OK) rc = e;
            }
        };
        advance_all(rings);
        advance_all(rhds);
        advance_all(rds);
    }
    host.progress();
    if (rc != TWOHOP_OK) return rc;
    // A rank on another node gave up and told its rail neighbours (us).
    // (Only once this rank has reached the failed call: see AbortMessages.)
    if (aborts && aborts->posted && aborts->recv.done.load(std::memory_order_acquire) &&
        aborts->recv.status == UCS_OK && aborts->in[1] <= seq) {
        return TWOHOP_ERR_PEER;
    }
    // A local peer that failed its part of the call told us through the control block (a call
    // this rank has reached: a peer ahead of it may fail a later call first).
    for (int i = 0; i < topo.local_size(); ++i) {
        if (i != topo.local_rank && peer_failed(i)) return TWOHOP_ERR_PEER;
    }
    const auto now = Clock::now();
    if (now >= next_liveness) {
        next_liveness = now + kLivenessPeriod;
        for (size_t i = 0; i < local_pids.size(); ++i) {
            if (local_pids[i] > 0 && kill(static_cast<pid_t>(local_pids[i]), 0) != 0 &&
                errno == ESRCH) {
                return TWOHOP_ERR_PEER;
            }
        }
        for (const auto &rail : rails) {
            if (rail.right->failed.load(std::memory_order_acquire) ||
                rail.left->failed.load(std::memory_order_acquire)) {
                return TWOHOP_ERR_TRANSPORT;
            }
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::wait_for(const std::atomic<uint64_t> &flag, uint64_t target) {
    unsigned spins = 0;
    Clock::time_point start{};
    while (flag.load(std::memory_order_acquire) < target) {
        if (++spins % 16 == 0) {
            int rc = poll();
            if (rc != TWOHOP_OK) return rc;
            if (timeout_s > 0) {
                const auto now = Clock::now();
                if (spins == 16) start = now;
                if (std::chrono::duration<double>(now - start).count() > timeout_s) {
                    return TWOHOP_ERR_TIMEOUT;
                }
            }
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::wait_all(std::atomic<uint64_t> RankFlags::*which, uint64_t target) {
    for (int i = 0; i < topo.local_size(); ++i) {
        int rc = wait_for(shm.flags(i).*which, target);
        if (rc != TWOHOP_OK) return rc;
    }
    // Flags that were already set skip poll(): a node peer that failed its part of this call
    // must still be noticed before its (possibly stale) inputs are used.
    for (int i = 0; i < topo.local_size(); ++i) {
        if (i != topo.local_rank && peer_failed(i)) {
            return TWOHOP_ERR_PEER;
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::poll_until(const std::function<bool()> &done) {
    const auto start = Clock::now();
    unsigned rounds = 0;
    while (!done()) {
        int rc = poll();
        if (rc != TWOHOP_OK) return rc;
        if (timeout_s > 0 && ++rounds % 64 == 0 &&
            std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
            return TWOHOP_ERR_TIMEOUT;
        }
    }
    return TWOHOP_OK;
}

int twohop_comm::post_abort_recv() {
    aborts.reset(new AbortMessages());
    aborts->sends.resize(2 * rails.size());
    aborts->posted = true;
    return worker->recv(aborts->in, sizeof(aborts->in), abort_tag(), &aborts->recv);
}

bool twohop_comm::cancel_transfers() {
    bool ok = true;
    for (auto &r : rings) ok = (!r.active() || r.cancel(1.0)) && ok;
    for (auto &r : rhds) ok = (!r.active() || r.cancel(1.0)) && ok;
    for (auto &r : rds) ok = (!r.active() || r.cancel(1.0)) && ok;
    return ok;
}

namespace {
std::atomic<unsigned long long> g_rabenseifner{0};
} // namespace

extern "C" const unsigned long long *twohop_rabenseifner_counter(void) {
    return reinterpret_cast<const unsigned long long *>(&g_rabenseifner);
}

int twohop_comm::start_hop2(int set, size_t i, char *data, uint64_t items,
                            const twohop::Reducer *red, uint64_t tag, bool last) {
    const twohop_rail &rail = rails[i];
    const size_t k = set * rails.size() + i;
    if (use_rabenseifner(rail.n, items * red->item_bytes())) {
        g_rabenseifner.fetch_add(1, std::memory_order_relaxed);
        return rhds[k].start(worker, &rail.peers, rail.n, rail.pos, data, items, red,
                             ring_scratch(set, i), tag, kTagLastBit, last);
    }
    return rings[k].start(worker, rail.right, rail.left, rail.n, rail.pos, data, items, red,
                          ring_scratch(set, i), tag, kTagLastBit, last);
}

void twohop_comm::fail(int status, const std::string &why) {
    if (!cancel_transfers()) quarantined = true;
    // Tell the rail neighbours on other nodes (best effort, not waited for; the requests are
    // drained when the communicator is freed).
    if (worker && aborts && poisoned == TWOHOP_OK) {
        AbortMessages &a = *aborts;
        a.out[0] = static_cast<uint64_t>(status);
        a.out[1] = call_first_seq;
        for (size_t i = 0; i < rails.size() && 2 * i + 1 < a.sends.size(); ++i) {
            const twohop::ucx::Endpoint *to[2] = {rails[i].right, rails[i].left};
            for (int k = 0; k < 2; ++k) {
                if (!to[k]->failed.load(std::memory_order_acquire)) {
                    (void)worker->send(to[k]->ep, a.out, sizeof(a.out), abort_tag(),
                                       &a.sends[2 * i + k]);
                }
            }
        }
        worker->progress();
    }
    shm.flags(topo.local_rank).failed_seq.store(call_first_seq, std::memory_order_relaxed);
    shm.flags(topo.local_rank).failed.store(static_cast<uint64_t>(status),
                                             std::memory_order_release);
    poisoned = status;
    failure = why;
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
        int rc = c->poll_until([c, set, i] { return !c->hop2_active(set, i); });
        if (rc != TWOHOP_OK) return rc;
    }
    return TWOHOP_OK;
}

/* Canonical bytes [off, off + len) of the user's input into dst (shared memory). */
int read_in(twohop_comm *c, const twohop_userbuf &b, char *dst, uint64_t off, uint64_t len) {
    if (len == 0) return TWOHOP_OK;
    if (b.direct) return c->mem->to_host(dst, b.direct + off, len);
    return b.read(b.ctx, dst, off, len) == 0 ? TWOHOP_OK : TWOHOP_ERR_HOST;
}

/* src (shared or private memory) into canonical bytes [off, off + len) of the user's output. */
int write_out(twohop_comm *c, const twohop_userbuf &b, uint64_t off, const char *src,
              uint64_t len, bool streaming) {
    if (len == 0) return TWOHOP_OK;
    if (b.direct) return c->mem->from_host(b.direct + off, src, len, streaming);
    return b.write(b.ctx, src, off, len) == 0 ? TWOHOP_OK : TWOHOP_ERR_HOST;
}

/*
 * The word local ranks compare before using each other's inputs: message bytes and item size
 * (ranks must agree on both; a user op with another count of the same signature differs in
 * item size). Odd multiplier from the 64-bit golden ratio (Knuth, TAOCP vol. 3, 6.4).
 */
uint64_t call_word(uint64_t msg_bytes, uint64_t item_bytes) {
    return msg_bytes * 0x9E3779B97F4A7C15ULL ^ item_bytes;
}

/* Publishes my input of segment s (set `set`) after recording the call's message size. */
void publish_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word) {
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    mine.bytes[set].store(word, std::memory_order_relaxed);
    mine.arrived.store(s, std::memory_order_release);
}

/* Waits until every local rank's input of s arrived; their call words must equal mine. */
int wait_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word) {
    int rc = c->wait_all(kArrived, s);
    if (rc != TWOHOP_OK) return rc;
    for (int i = 0; i < c->topo.local_size(); ++i) {
        if (c->shm.flags(i).bytes[set].load(std::memory_order_relaxed) != word) {
            return TWOHOP_ERR_MISMATCH;
        }
    }
    return TWOHOP_OK;
}

int latency_path(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                 uint64_t count, const Reducer &red) {
    const uint64_t s = ++c->seq;
    const int set = static_cast<int>(s % c->depth);
    const uint64_t bytes = count * red.item_bytes();
    const int me = c->topo.local_rank;
    RankFlags &mine = c->shm.flags(me);
    int rc = s > uint64_t(c->depth) ? c->wait_all(kDone, s - c->depth) : TWOHOP_OK;
    if (rc == TWOHOP_OK) rc = read_in(c, in, c->shm.slot(set, me), 0, bytes);
    if (rc != TWOHOP_OK) return rc;
    const uint64_t word = call_word(bytes, red.item_bytes());
    publish_arrived(c, set, s, word);

    if (c->topo.n_nodes() == 1) {
        rc = wait_arrived(c, set, s, word);
        if (rc != TWOHOP_OK) return rc;
        if (out.direct) {
            rc = reduce_slots(c, set, 0, count, out.direct, red);
        } else {
            if (c->private_out.size() < bytes) c->private_out.resize(c->slot_bytes);
            rc = reduce_slots(c, set, 0, count, c->private_out.data(), red);
            if (rc == TWOHOP_OK) rc = write_out(c, out, 0, c->private_out.data(), bytes, false);
        }
        if (rc != TWOHOP_OK) return rc;
        mine.done.store(s, std::memory_order_release);
        return TWOHOP_OK;
    }
    if (me == 0) { // node leader: owner of shard 0 on every node, i.e. the rail of shard 0
        rc = wait_arrived(c, set, s, word);
        if (rc == TWOHOP_OK) rc = reduce_slots(c, set, 0, count, c->shm.result(set), red);
        const twohop_rail &rail = c->rails[0];
        if (rc == TWOHOP_OK && c->latency_hop2 == 0) { // recursive doubling among the leaders
            twohop::RdOp &rd = c->rds[set];
            rc = rd.start(c->worker, &c->rd_peers, rail.n, rail.pos, c->shm.result(set), count,
                          &red, word, c->rail_tag(s, 0));
            if (rc == TWOHOP_OK) rc = c->poll_until([&rd] { return !rd.active(); });
        } else if (rc == TWOHOP_OK) {
            twohop::RingOp &ring = c->rings[set * c->rails.size()];
            rc = ring.start(c->worker, rail.right, rail.left, rail.n, rail.pos,
                            c->shm.result(set), count, &red, c->ring_scratch(set, 0),
                            c->rail_tag(s, 0));
            if (rc == TWOHOP_OK) rc = finish_rings(c, set);
        }
        if (rc != TWOHOP_OK) return rc;
        mine.reduced.store(s, std::memory_order_release);
    } else if ((rc = c->wait_for(c->shm.flags(0).reduced, s)) != TWOHOP_OK) {
        return rc;
    } else if (c->shm.flags(0).bytes[set].load(std::memory_order_relaxed) != word) {
        return TWOHOP_ERR_MISMATCH;
    }
    rc = write_out(c, out, 0, c->shm.result(set), bytes, false);
    if (rc != TWOHOP_OK) return rc;
    mine.done.store(s, std::memory_order_release);
    return TWOHOP_OK;
}

constexpr uint64_t kMaxDepth = 8; // upper bound of coll_twohop_pipeline_depth

/* Where the calling thread spends a pipelined call (verbose 3 only): microseconds per phase. */
struct PhaseClock {
    enum Phase { kStart, kHop2, kHop3 };
    explicit PhaseClock(bool enabled) : on(enabled) {}
    bool on;
    double us[3] = {0, 0, 0};
    Clock::time_point t0{};
    void mark() {
        if (on) t0 = Clock::now();
    }
    /* Adds the time since the last mark to `p` and marks again. */
    void add(Phase p) {
        if (!on) return;
        const auto t = Clock::now();
        us[p] += std::chrono::duration<double, std::micro>(t - t0).count();
        t0 = t;
    }
};

struct InFlight {
    uint64_t s;
    Range seg;
    bool last; // the call's last segment (marked in hop-2 tags)
};

int pipeline_start(twohop_comm *c, const twohop_userbuf &in, uint64_t word,
                   const InFlight &f, const Reducer &red) {
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red.item_bytes();
    const int me = c->topo.local_rank;
    int rc = f.s > uint64_t(c->depth) ? c->wait_all(kDone, f.s - c->depth) : TWOHOP_OK;
    if (rc != TWOHOP_OK) return rc;
    // Copy in the shards other ranks reduce; my own shards are read from the input directly
    // when its layout is the canonical one (else they are copied too). With hop 1 on the GPU
    // the owners' kernels read every input where it is: nothing to copy.
    const uint64_t shards = static_cast<uint64_t>(c->topo.n_shards());
    const uint64_t seg_off = f.seg.offset * ib;
    const bool gpu = c->gpu_hop1.active;
    char *my_slot = c->shm.slot(set, me);
    for (uint64_t sh = 0; sh < shards && !gpu; ++sh) {
        if (in.direct && c->topo.shard_owner(c->topo.my_node, static_cast<int>(sh)) == me) {
            continue;
        }
        const Range r = twohop::split_even(f.seg.count, shards, sh);
        rc = read_in(c, in, my_slot + r.offset * ib, seg_off + r.offset * ib, r.count * ib);
        if (rc != TWOHOP_OK) return rc;
    }
    publish_arrived(c, set, f.s, word);
    if ((rc = wait_arrived(c, set, f.s, word)) != TWOHOP_OK) return rc;

    // Hop 1 on the GPU: every owned shard's kernel is enqueued, then the fence is polled while
    // the previous segment's hop-2 transfers keep moving; the rings start once it passed.
    if (gpu) {
        for (const int sh : c->my_shards) {
            const Range r = twohop::split_even(f.seg.count, shards, static_cast<uint64_t>(sh));
            rc = gpu_hop1_post(c, seg_off + r.offset * ib, r.count,
                               c->shm.result(set) + r.offset * ib, red.raw());
            if (rc != TWOHOP_OK) return rc;
        }
        if ((rc = gpu_hop1_wait(c)) != TWOHOP_OK) return rc;
    }
    int posted = 0;
    for (size_t i = 0; i < c->my_shards.size(); ++i) {
        const int sh = c->my_shards[i];
        const Range r = twohop::split_even(f.seg.count, shards, static_cast<uint64_t>(sh));
        char *out = c->shm.result(set) + r.offset * ib;
        const char *own = in.direct ? in.direct + seg_off + r.offset * ib : nullptr;
        if (!gpu) {
            rc = reduce_slots(c, set, r.offset * ib, r.count, out, red, own,
                              c->topo.shard_owner(c->topo.my_node, sh));
            if (rc != TWOHOP_OK) return rc;
        }
        if (c->rails.empty() || r.count == 0) continue;
        rc = c->start_hop2(set, i, out, r.count, &red, c->rail_tag(f.s, sh), f.last);
        if (rc != TWOHOP_OK) return rc;
        // Doorbell batching at the collective level: post_batch transfers back-to-back, then
        // let UCX make progress on them.
        if (++posted % c->post_batch == 0) c->worker->progress();
    }
    return TWOHOP_OK;
}

int pipeline_finish(twohop_comm *c, const twohop_userbuf &out, const InFlight &f,
                    const Reducer &red, bool streaming, PhaseClock *clock) {
    const int set = static_cast<int>(f.s % c->depth);
    const uint64_t ib = red.item_bytes();
    const int node = c->topo.my_node;
    const bool gpu = c->gpu_hop1.active && out.device != nullptr;
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    clock->mark();
    int rc = finish_rings(c, set);
    clock->add(PhaseClock::kHop2);
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
        const uint64_t off = (f.seg.offset + r.offset) * ib;
        const char *src = c->shm.result(set) + r.offset * ib;
        rc = gpu ? gpu_hop3_post(c, out.device + off, src, r.count * ib)
                 : write_out(c, out, off, src, r.count * ib, streaming);
        if (rc != TWOHOP_OK) return rc;
    }
    // The result set is reused by segment s + depth once every local rank is done with it:
    // the GPU's copies out of it must have completed.
    if (gpu && (rc = gpu_hop1_wait(c)) != TWOHOP_OK) return rc;
    clock->add(PhaseClock::kHop3);
    mine.done.store(f.s, std::memory_order_release);
    return TWOHOP_OK;
}

int pipeline_path(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                  uint64_t count, const Reducer &red) {
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes());
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const uint64_t msg_bytes = count * red.item_bytes();
    const uint64_t word = call_word(msg_bytes, red.item_bytes());
    const bool streaming = c->stream_bytes != 0 && msg_bytes >= c->stream_bytes;
    // Segments in flight, oldest first: a fixed ring (depth <= kMaxDepth), no allocation.
    InFlight window[kMaxDepth];
    uint64_t first = 0, next = 0; // window holds segments [first, next)
    PhaseClock clock(c->verbose >= 3);
    int rc = TWOHOP_OK;
    for (uint64_t k = 0; k < nseg && rc == TWOHOP_OK; ++k) {
        if (next - first == static_cast<uint64_t>(c->depth)) {
            rc = pipeline_finish(c, out, window[first++ % kMaxDepth], red, streaming, &clock);
            if (rc != TWOHOP_OK) break;
        }
        InFlight &f = window[next++ % kMaxDepth];
        f = InFlight{++c->seq, twohop::segment_range(count, seg_items, k), k + 1 == nseg};
        clock.mark();
        rc = pipeline_start(c, in, word, f, red);
        clock.add(PhaseClock::kStart);
    }
    while (rc == TWOHOP_OK && first < next) {
        rc = pipeline_finish(c, out, window[first++ % kMaxDepth], red, streaming, &clock);
    }
    if (rc == TWOHOP_OK && clock.on) {
        char msg[320];
        std::snprintf(msg, sizeof(msg),
                      "pipeline: %llu B in %llu segments%s: calling thread in hop 1 (copy in, "
                      "reduce, post hop 2) %.0f us, waiting for hop 2 %.0f us, hop 3 %.0f us",
                      static_cast<unsigned long long>(msg_bytes),
                      static_cast<unsigned long long>(nseg),
                      c->gpu_hop1.active ? " (hop 1 and 3 on the GPU)" : "",
                      clock.us[PhaseClock::kStart], clock.us[PhaseClock::kHop2],
                      clock.us[PhaseClock::kHop3]);
        c->host.log(3, msg);
    }
    return rc;
}

const char *describe(int rc) {
    switch (rc) {
    case TWOHOP_ERR_PEER:
        return "another rank of the communicator failed its part of the call (told through the "
               "node's control block or a hop-2 abort message), or a node peer's process is gone";
    case TWOHOP_ERR_TIMEOUT: return "no progress within coll_twohop_timeout seconds";
    case TWOHOP_ERR_MISMATCH:
        return "ranks passed different message sizes (count x datatype size must be the "
               "same on every rank)";
    case TWOHOP_ERR_TRANSPORT:
        return "hop-2 transfer failed (a rank on another node is gone, or the network failed)";
    case TWOHOP_ERR_REDUCE: return "the user-defined reduction reported an error";
    case TWOHOP_ERR_HOST: return "converting the datatype layout of a user buffer failed";
    case TWOHOP_ERR_NO_MEMORY: return "out of memory";
    default: return "internal error";
    }
}

} // namespace

namespace {

/*
 * One call, after the poisoned check. enqueue: the stream-ordered form (the application's
 * `stream` is not known to be complete yet); *enqueued = 1 when the call stayed on the stream.
 * Every other path first waits for the stream (join), then runs as a blocking call. A
 * communicator runs at most one GPU vote per call, whichever form each rank called: a rank
 * that declined the stream-ordered path goes on with the host path, as the ranks that called
 * the blocking form after their vote. Returns a twohop_status (the caller records failures).
 */
int run_call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
             uint64_t count, const twohop_reduction &red, bool enqueue, void *stream,
             int *enqueued) {
    // A stream-ordered call still running on this rank's GPU writes this rank's flags: the
    // host must not write them before it has (gpu_node_enqueue drains itself if it declines).
    c->call_first_seq = c->seq + 1;
    int rc = enqueue ? TWOHOP_OK : gpu_enqueue_drain(c);
    if (rc != TWOHOP_OK) return rc;
    bool joined = !enqueue;
    auto join = [&joined, stream]() {
        if (joined) return TWOHOP_OK;
        joined = true;
        return twohop_stream_sync(stream) == 0 ? TWOHOP_OK : TWOHOP_ERR_TRANSPORT;
    };
    const Reducer reducer(red);
    // The path must be the same on every rank: scale by the largest node's rank count (the
    // shard count), not by this node's.
    const uint64_t bytes = count * red.item_bytes;
    const bool latency = bytes <= c->slot_bytes &&
                         bytes * static_cast<uint64_t>(c->topo.n_shards()) <= c->small_bytes;
    // GPU rounds: on one node the whole call can run on the GPU; with several nodes hop 1 of
    // the pipeline can (the latency path stays on the host).
    if (c->gpu_round && (c->topo.n_nodes() == 1 || !latency)) {
        bool taken = false;
        if (enqueue && c->topo.n_nodes() == 1) {
            rc = gpu_node_enqueue(c, in, out, count, red, stream, &taken);
            if (rc != TWOHOP_OK) return rc;
            if (taken) {
                *enqueued = 1;
                return TWOHOP_OK;
            }
        } else {
            if ((rc = join()) != TWOHOP_OK) return rc;
            rc = gpu_node_allreduce(c, in, out, count, red, &taken);
            if (rc != TWOHOP_OK || taken) return rc;
        }
    }
    if ((rc = join()) != TWOHOP_OK) return rc;
    if (latency) return latency_path(c, in, out, count, reducer);
    rc = c->gpu_hop1.active && c->gpu_posted ? gpu_posted_pipeline(c, out, count, red)
                                              : pipeline_path(c, in, out, count, reducer);
    if (c->gpu_hop1.active && rc == TWOHOP_OK) gpu_hop1_done();
    if (c->gpu_hop1.active && rc != TWOHOP_OK) c->gpu_hop1.settle();
    c->gpu_hop1.active = false;
    return rc;
}

/* The poisoned check and failure recording around run_call. */
int call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out, uint64_t count,
         const twohop_reduction &red, bool enqueue, void *stream, int *enqueued, char *why,
         size_t whylen) {
    if (c->poisoned != TWOHOP_OK) {
        if (why && whylen) {
            std::snprintf(why, whylen, "an earlier twohop allreduce on this communicator failed "
                          "(%s); the communicator is unusable", c->failure.c_str());
        }
        return TWOHOP_ERR_POISONED;
    }
    if (count == 0) return TWOHOP_OK;
    const int rc = run_call(c, in, out, count, red, enqueue, stream, enqueued);
    if (rc != TWOHOP_OK) {
        c->fail(rc, describe(rc));
        if (why && whylen) std::snprintf(why, whylen, "%s", describe(rc));
    }
    return rc;
}

} // namespace

extern "C" int twohop_comm_allreduce(twohop_comm *c, const twohop_userbuf *in,
                                     const twohop_userbuf *out, uint64_t count,
                                     const twohop_reduction *red, char *why, size_t whylen) {
    int enqueued = 0;
    return call(c, *in, *out, count, *red, false, nullptr, &enqueued, why, whylen);
}

extern "C" int twohop_comm_allreduce_enqueue(twohop_comm *c, const twohop_userbuf *in,
                                             const twohop_userbuf *out, uint64_t count,
                                             const twohop_reduction *red, void *stream,
                                             int *enqueued, char *why, size_t whylen) {
    *enqueued = 0;
    return call(c, *in, *out, count, *red, true, stream, enqueued, why, whylen);
}

extern "C" int twohop_stream_sync(void *stream) {
    const int dev = stream ? twohop::cuda::stream_device(stream) : -1;
    if (stream && dev < 0) return -1;
    if (!stream) return twohop::cuda::sync_current() ? 0 : -1;
    return twohop::cuda::stream_sync(dev, stream) ? 0 : -1;
}

extern "C" void twohop_comm_abort(twohop_comm *c, int status, const char *why) {
    c->call_first_seq = c->seq + 1; // the call this rank cannot take part in
    if (c->poisoned == TWOHOP_OK) c->fail(status, why ? why : describe(status));
}
