/*
 * Hop2Slot: where hop 2 of one (buffer set, rail) runs -- the communicator's one list of hop-2
 * operations (twohop_comm::hop2, [set * rails + rail]). A slot holds one op of each algorithm,
 * because the algorithm is chosen per segment from agreed values (coll_twohop_hop2_algorithm,
 * the shard's size, the node count; the latency path's coll_twohop_latency_hop2 on rail 0), and
 * each op keeps its buffers between calls (no allocation on the hot path). Whatever runs them
 * sees only StepOp (step_op.h): progress, the in-flight test, cancellation and the quarantine of
 * a failed communicator go through ops(), for every algorithm alike.
 *
 * A slot is reused only after its set's previous use ended on every local rank (the `done`
 * flags), so at most one of its ops is active at a time.
 */
#ifndef TWOHOP_HOP2_SLOT_H
#define TWOHOP_HOP2_SLOT_H

#include <array>

#include "rail_rd.h"
#include "rail_rhd.h"
#include "rail_ring.h"
#include "step_op.h"

namespace twohop {

struct Hop2Slot {
    RingOp ring; // the ring (pipeline shards; the latency path with latency_hop2 = 1)
    RhdOp rhd;   // Rabenseifner (pipeline shards, coll_twohop_hop2_algorithm 1 or 2)
    RdOp rd;     // recursive doubling among the node leaders (latency path, rail 0)

    /* The slot's ops as the one base type (addresses inside this slot: recompute after a copy). */
    std::array<StepOp *, 3> ops() { return {&ring, &rhd, &rd}; }
    /* True while hop 2 is in flight here. */
    bool active() const { return ring.active() || rhd.active() || rd.active(); }
};

} // namespace twohop

#endif
