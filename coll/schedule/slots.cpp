/* The node's shared-memory steps (slots.h). */
#include "slots.h"

#include <cstring>

namespace twohop {
namespace {
constexpr uint64_t kReduceBlockBytes = 4096; // partial-result block kept in L1 while reducing
} // namespace

int reduce_slots(twohop_comm *c, int set, uint64_t off_bytes, uint64_t items, char *out,
                 const Reducer &red, const char *own, int first) {
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

int read_in(twohop_comm *c, const twohop_userbuf &b, char *dst, uint64_t off, uint64_t len) {
    if (len == 0) return TWOHOP_OK;
    if (b.direct) return c->mem->to_host(dst, b.direct + off, len);
    return b.read(b.ctx, dst, off, len) == 0 ? TWOHOP_OK : TWOHOP_ERR_HOST;
}

int write_out(twohop_comm *c, const twohop_userbuf &b, uint64_t off, const char *src,
              uint64_t len, bool streaming) {
    if (len == 0) return TWOHOP_OK;
    if (b.direct) return c->mem->from_host(b.direct + off, src, len, streaming);
    return b.write(b.ctx, src, off, len) == 0 ? TWOHOP_OK : TWOHOP_ERR_HOST;
}

void publish_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word) {
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    mine.bytes[set].store(word, std::memory_order_relaxed);
    mine.arrived.store(s, std::memory_order_release);
}

int test_all(twohop_comm *c, FlagPtr which, uint64_t target) {
    for (int i = 0; i < c->topo.local_size(); ++i) {
        if ((c->shm.flags(i).*which).load(std::memory_order_acquire) < target) {
            return TWOHOP_PENDING;
        }
    }
    // Flags that are set do not prove the peer's part is sound: a node peer that failed its
    // part of this call must be noticed before its (possibly stale) inputs are used.
    for (int i = 0; i < c->topo.local_size(); ++i) {
        if (i == c->topo.local_rank) continue;
        if (const int rc = c->peer_failure(i)) return rc;
    }
    return TWOHOP_OK;
}

int test_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word) {
    const int rc = test_all(c, kArrived, s);
    if (rc != TWOHOP_OK) return rc;
    for (int i = 0; i < c->topo.local_size(); ++i) {
        if (c->shm.flags(i).bytes[set].load(std::memory_order_relaxed) != word) {
            return TWOHOP_ERR_MISMATCH;
        }
    }
    return TWOHOP_OK;
}

} // namespace twohop
