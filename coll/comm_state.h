/*
 * twohop_comm: everything twohop keeps for one communicator (behind the opaque C handle).
 * Owned by the adapter's module; created by twohop_comm_setup on the first allreduce,
 * destroyed with the module. State owned here:
 *   - topology (who shares a node, shard ownership, rails)
 *   - the node's shared-memory segment and this rank's sequence counter
 *   - hop 2: endpoints to the left/right rail neighbours of each owned shard, ring state
 *     machines and their scratch buffers (allocated once at setup)
 */
#ifndef TWOHOP_COMM_STATE_H
#define TWOHOP_COMM_STATE_H

#include <memory>
#include <vector>

#include "memory_kind.h"
#include "node_shm.h"
#include "rail_ring.h"
#include "topology.h"
#include "twohop_core.h"
#include "worker.h"

/* Hop 2 view of one shard this rank owns. */
struct twohop_rail {
    int shard = 0;
    int n = 1;                    // rail members (= nodes)
    int pos = 0;                  // my position on the ring (= my node index)
    ucp_ep_h right = nullptr;     // endpoint to position pos+1
};

struct twohop_comm {
    twohop_host host;
    twohop::Topology topo;
    twohop::NodeShm shm;
    int depth = 2;
    int post_batch = 4;
    uint64_t slot_bytes = 0;
    uint64_t small_bytes = 0;
    uint64_t stream_bytes = 0;     // 0 = never use streaming stores for hop 3
    uint32_t comm_id = 0;
    uint64_t seq = 0;             // segments processed on this communicator (same on all ranks)
    std::vector<int> my_shards;
    const twohop::MemOps *mem = &twohop::mem_ops(twohop::MemoryKind::Host); // user buffers

    twohop::ucx::Worker *worker = nullptr; // non-null only with more than one node
    std::vector<twohop_rail> rails;        // one per owned shard (empty on one node)
    std::vector<twohop::RingOp> rings;     // [set * rails.size() + i]
    std::vector<char> scratch;             // one slot_bytes block per ring

    /* Tag of hop-2 messages: comm id (16 bits) | segment seq (24) | shard (12) | step (12). */
    uint64_t rail_tag(uint64_t s, int shard) const {
        return (uint64_t(comm_id & 0xFFFF) << 48) | ((s & 0xFFFFFF) << 24) |
               (uint64_t(shard & 0xFFF) << 12);
    }
    char *ring_scratch(int set, size_t i) {
        return scratch.data() + (set * rails.size() + i) * slot_bytes;
    }

    /*
     * One round of progress: advances in-flight rings, UCX and Open MPI. Returns a
     * twohop_status (a ring error or a failed peer).
     */
    int poll();
    /* Spins (polling every 16 checks) until `flag` reaches `target`. */
    int wait_for(const std::atomic<uint64_t> &flag, uint64_t target);
    /* Spins (with poll) until every local rank's counter `which` reaches `target`. */
    int wait_all(std::atomic<uint64_t> twohop::RankFlags::*which, uint64_t target);
};

#endif
