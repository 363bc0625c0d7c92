/*
 * `twohop-rc plan`: recommend RC settings from a measured RTT, the message (segment) size and the
 * number of segments in flight. Every number is derived by a formula from ib_time.h:
 *   timeout exponent  = max(floor_exp, ceil(log2(margin * rtt / 4.096 us)))
 *   dead-link time    = 4.096 us * 2^t * (retry + 1)
 *   send queue        = next power of two >= 2 * pipeline * (ceil(msg / wr_bytes) + 1), >= 16
 *   receive queue     = UCX default 4095 unless peers * in-flight WRs needs more (<= 32767)
 *   CQ moderation     = min(64, send queue / 4)      (64 = UCX default; /4 = rc_params rule)
 *   path MTU          = 4096 on InfiniBand; 1024 on RoCE (fits a 1500-byte Ethernet frame)
 */
#ifndef TWOHOP_RC_PLAN_H
#define TWOHOP_RC_PLAN_H

#include "rc_api.h"

#include <cstdint>
#include <string>
#include <vector>

namespace twohop::rc {

struct PlanInput {
    double rtt_us = 0;             // measured idle round trip (ib_write_lat, ucx_perftest)
    std::uint64_t msg_bytes = 0;   // bytes per transfer (twohop: coll_twohop_segment_bytes)
    int inflight = 2;              // transfers in flight (twohop: coll_twohop_pipeline_depth)
    std::uint64_t wr_bytes = 8256; // bytes per work request: UCX RC SEG_SIZE (bcopy fragment)
    double margin = 8;             // timeout >= margin * rtt
    int floor_exp = 14;            // never below 4.096 us * 2^14 = 67 ms (incast, ACK delay)
    int retry = 7;
    int peers = 1; // remote ranks sharing this rail's receive queue
    bool roce = false;
    int rails = 1; // local rails (for printing the stagger)
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
