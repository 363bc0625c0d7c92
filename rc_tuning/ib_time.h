/*
 * InfiniBand RC timer encodings and the sizing formulas built on them. Pure math: no UCX, no sysfs.
 *
 * Sources:
 *   [IBTA]   InfiniBand Architecture Specification Vol. 1, ch. 9.7 (reliable transport: local ACK
 *            timeout, retry counter, RNR NAK timer) and the RNR NAK timer encoding table.
 *   [VERBS]  ibv_modify_qp(3) (rdma-core): "timeout: 4.096 usec * 2^timeout, 0 = infinite",
 *            "retry_cnt: 3 bits", "rnr_retry: 3 bits, 7 = infinite", min_rnr_timer code table.
 *   [UCX]    src/uct/ib/base/ib_iface.h uct_ib_to_qp_fabric_time() / uct_ib_to_rnr_fabric_time():
 *            how UCX turns its RC_TIMEOUT / RC_RNR_TIMEOUT times back into these codes.
 */
#ifndef TWOHOP_RC_IB_TIME_H
#define TWOHOP_RC_IB_TIME_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace twohop::rc {

inline constexpr int kTimeoutExpMax = 31; // 5-bit field [VERBS]
inline constexpr int kRetryMax = 7;       // 3-bit retry_cnt / rnr_retry [VERBS]
inline constexpr int kRnrCodeMax = 31;    // 5-bit min_rnr_timer [VERBS]
inline constexpr int kUcxDefaultTimeoutExp =
    18; // UCX RC_TIMEOUT default 1.0 s -> round(17.9) [UCX]

/* Local ACK timeout for exponent t in nanoseconds: 4096 ns * 2^t, exact in integers [IBTA][VERBS].
 * t = 0 means "infinite" and returns 0. Precondition 0 <= t <= 31. */
std::uint64_t timeout_ns(int t);

/* Same in microseconds (double): 4.096 us * 2^t; 0 for t = 0 (infinite). */
double timeout_us(int t);

/* Smallest exponent t >= 1 whose timeout is at least us microseconds (round up to the IB grid).
 * Returns nullopt when us exceeds the largest finite timeout (t = 31, 8796.09 s) or us <= 0. */
std::optional<int> timeout_exp_at_least_us(double us);

/* Timeout exponent from a measured round-trip time: smallest t with 4.096 us * 2^t >= margin * rtt,
 * i.e. t = ceil(log2(margin * rtt_us / 4.096)), at least 1 [IBTA: the timer must outlast one RTT
 * plus the responder's ACK delay; margin covers queueing and incast]. nullopt if out of range. */
std::optional<int> timeout_exp_for_rtt(double rtt_us, double margin);

/* The local ACK timer may expire anywhere between timeout(t) and 4 x timeout(t): the IBTA allows
 * an implementation this range [IBTA ch. 9.7.6.1.3, transport timer]. */
inline constexpr int kAckTimerWorstFactor = 4;

/* Nominal time until a dead link is reported, in microseconds: timeout(t) * (retry + 1) -- the
 * first transmission plus `retry` retransmissions, each waiting one local ACK timeout
 * [IBTA ch. 9.7]. Infinite (t = 0) returns -1. */
double dead_link_nominal_us(int t, int retry);

/* Worst-case time until a dead link is reported, in microseconds:
 * kAckTimerWorstFactor * timeout(t) * (retry + 1), since each of the retry + 1 waits may last up
 * to four nominal timeouts [IBTA ch. 9.7.6.1.3]. UCX defaults (t = 18, retry 7): 34.36 s.
 * Infinite (t = 0) returns -1. */
double dead_link_us(int t, int retry);

/* RNR NAK timer code -> microseconds, from the IBTA table (code 0 = 655.36 ms, 1 = 0.01 ms,
 * ..., 31 = 491.52 ms) [IBTA][VERBS]. Precondition 0 <= code <= 31. */
std::uint32_t rnr_timer_us(int code);

/* Hop-2 message size: twohop's ring splits each rank's shard of a segment into one chunk per
 * node, so a message is ceil(segment_bytes / shards / nodes) bytes (coll/hop2/rail_ring.h;
 * shards = local ranks per node). Precondition shards, nodes >= 1. */
std::uint64_t hop2_chunk_bytes(std::uint64_t segment_bytes, int shards, int nodes);

/* Work requests one hop-2 message puts on the sender's QP: below the rendezvous threshold UCX
 * sends it eagerly in ceil(bytes / wr_bytes) bcopy fragments (wr_bytes = RC SEG_SIZE, 8256 by
 * default); at or above it UCX uses rendezvous, where the sender posts one RTS and the data moves
 * by one RDMA read of up to 1 GiB (UCX RNDV_SCHEME auto = get_zcopy on RC), counted as 2. */
std::uint64_t wrs_per_message(std::uint64_t bytes, std::uint64_t wr_bytes,
                              std::uint64_t rndv_thresh);

/* Work requests in flight on one QP: pipeline_depth messages (one ring step per segment in
 * flight), each wrs_per_message. */
std::uint64_t inflight_wrs(std::uint64_t wrs_per_msg, int pipeline_depth);

/* Send-queue depth: the next power of two >= 2 * in-flight work requests, at least 16. Twice the
 * in-flight count because completions are reported once per CQ-moderation batch, so up to a
 * batch of finished WQEs still occupies the queue while the next window is posted (project rule
 * from the rc_tuning design: "at least twice the expected in-flight work requests"). */
std::uint32_t send_queue_depth(std::uint64_t inflight_wrs);

/* Human-readable duration for docs and CLI output: "8.192 us", "67.109 ms", "1.074 s". */
std::string format_us(double us);

} // namespace twohop::rc

#endif
