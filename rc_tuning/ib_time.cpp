/* InfiniBand RC timer encodings; formulas and sources in ib_time.h. */
#include "ib_time.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace twohop::rc {

namespace {

/* RNR NAK timer encoding in microseconds, index = 5-bit code [IBTA table "RNR NAK timer field
 * encoding"; same values in ibv_modify_qp(3)]. */
constexpr std::array<std::uint32_t, 32> kRnrUs = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr std::uint64_t kTimeoutUnitNs = 4096; // 4.096 us

} // namespace

std::uint64_t timeout_ns(int t) {
    return t == 0 ? 0 : kTimeoutUnitNs << t;
}

double timeout_us(int t) {
    return static_cast<double>(timeout_ns(t)) / 1000.0;
}

std::optional<int> timeout_exp_at_least_us(double us) {
    if (!(us > 0)) {
        return std::nullopt;
    }
    for (int t = 1; t <= kTimeoutExpMax; ++t) {
        if (timeout_us(t) >= us) {
            return t;
        }
    }
    return std::nullopt;
}

std::optional<int> timeout_exp_for_rtt(double rtt_us, double margin) {
    if (!(rtt_us > 0) || !(margin > 0)) {
        return std::nullopt;
    }
    return timeout_exp_at_least_us(rtt_us * margin);
}

double dead_link_nominal_us(int t, int retry) {
    if (t == 0) {
        return -1;
    }
    return timeout_us(t) * (retry + 1);
}

double dead_link_us(int t, int retry) {
    if (t == 0) {
        return -1;
    }
    return kAckTimerWorstFactor * dead_link_nominal_us(t, retry);
}

std::uint32_t rnr_timer_us(int code) {
    return kRnrUs.at(static_cast<std::size_t>(code));
}

std::uint64_t hop2_chunk_bytes(std::uint64_t segment_bytes, int shards, int nodes) {
    std::uint64_t parts = static_cast<std::uint64_t>(shards) * static_cast<std::uint64_t>(nodes);
    return parts == 0 ? 0 : (segment_bytes + parts - 1) / parts;
}

std::uint64_t wrs_per_message(std::uint64_t bytes, std::uint64_t wr_bytes,
                              std::uint64_t rndv_thresh) {
    if (bytes >= rndv_thresh) {
        return 2;
    }
    return wr_bytes == 0 ? 0 : std::max<std::uint64_t>(1, (bytes + wr_bytes - 1) / wr_bytes);
}

std::uint64_t inflight_wrs(std::uint64_t wrs_per_msg, int pipeline_depth) {
    return pipeline_depth <= 0 ? 0 : wrs_per_msg * static_cast<std::uint64_t>(pipeline_depth);
}

std::uint32_t send_queue_depth(std::uint64_t inflight) {
    std::uint64_t depth = 16;
    while (depth < 2 * inflight && depth < (1ull << 31)) {
        depth <<= 1;
    }
    return static_cast<std::uint32_t>(depth);
}

std::string format_us(double us) {
    char buf[48];
    if (us < 0) {
        return "infinite";
    } else if (us < 1000.0) {
        std::snprintf(buf, sizeof(buf), "%.3f us", us);
    } else if (us < 1e6) {
        std::snprintf(buf, sizeof(buf), "%.3f ms", us / 1e3);
    } else {
        std::snprintf(buf, sizeof(buf), "%.3f s", us / 1e6);
    }
    return buf;
}

} // namespace twohop::rc
