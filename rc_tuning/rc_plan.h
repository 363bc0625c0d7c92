/*
 * `twohop-rc plan`: recommend RC settings from a measured RTT and twohop's hop-2 traffic. Every
 * number is derived by a formula from ib_time.h, from published defaults:
 *   timeout exponent  = max(floor_exp, ceil(log2(margin * rtt / 4.096 us))); floor_exp defaults
 *                       to 18 = UCX's RC_TIMEOUT default 1 s (rounded to 1.07 s); NCCL ships
 *                       NCCL_IB_TIMEOUT = 20 (4.3 s). Below 18 the plan says it undercuts UCX.
 *   dead-link time    = 4 x 4.096 us * 2^t * (retry + 1)     (worst case, ib_time.h)
 *   hop-2 message     = ceil(segment / shards / nodes)       (ring chunk, coll/hop2/rail_ring.h)
 *   WRs per message   = ceil(message / wr_bytes) below the rendezvous threshold (eager bcopy),
 *                       2 at or above it (RTS + one RDMA read)
 *   send queue        = next power of two >= 2 * inflight * WRs per message, set only when above
 *                       UCX's default 256
 *   receive queue     = UCX default 4095 unless peers * in-flight WRs needs more (<= 32767)
 *   CQ moderation     = min(64, send queue / 4), set together with the send queue
 *   path MTU          = 4096 on InfiniBand; 1024 on RoCE (fits a 1500-byte Ethernet frame)
 * Sources and discussion: docs/rc_tuning.md ("twohop-rc plan").
 */
#ifndef TWOHOP_RC_PLAN_H
#define TWOHOP_RC_PLAN_H

#include "rc_api.h"

#include <cstdint>
#include <string>
#include <vector>

namespace twohop::rc {

struct PlanInput {
    double rtt_us = 0;                 // measured idle round trip (ib_write_lat, ucx_perftest)
    std::uint64_t msg_bytes = 0;       // segment bytes (coll_twohop_segment_bytes)
    int shards = 1;                    // local ranks per node (each owns one shard of a segment)
    int nodes = 2;                     // nodes on the rail ring
    int inflight = 2;                  // segments in flight (coll_twohop_pipeline_depth)
    std::uint64_t wr_bytes = 8256;     // UCX RC SEG_SIZE default: one eager bcopy fragment
    std::uint64_t rndv_thresh = 8192;  // UCX RNDV_THRESH (auto by default: check UCX_PROTO_INFO)
    double margin = 8;                 // timeout >= margin * rtt
    int floor_exp = 18;                // UCX's default exponent (1 s -> 1.07 s)
    int retry = 7;                     // UCX RC_RETRY_COUNT default
    int peers = 1;                     // remote ranks sharing this process's receive queue
    bool roce = false;
    int rails = 1;                     // processes per node (for printing the stagger)
    int stagger = 0;
};

struct Plan {
    twohop_rc_settings settings;
    std::vector<std::string> why; // one comment line per decision
};

/* Returns false with *err naming the bad input and its range. */
bool make_plan(const PlanInput &in, Plan *out, std::string *err);

/* "--mca coll_twohop_rc_path_mtu 4096 ..." for every set field, in table order. */
std::string mca_args(const twohop_rc_settings &s);

} // namespace twohop::rc

#endif
