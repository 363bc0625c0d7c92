/* Plan recommendations; formulas in rc_plan.h. */
#include "rc_plan.h"

#include "ib_time.h"
#include "rc_params.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace twohop::rc {

namespace {

std::string line(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char *f, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof(buf), f, ap);
    va_end(ap);
    return buf;
}

} // namespace

bool make_plan(const PlanInput &in, Plan *out, std::string *err) {
    if (!(in.rtt_us > 0) || in.rtt_us > 1e6) {
        *err = line("--rtt-us: value %g is out of range (0, 1000000] microseconds", in.rtt_us);
        return false;
    }
    if (in.msg_bytes == 0 || in.msg_bytes > (1ull << 31)) {
        *err = line("--msg-bytes: value %llu is out of range 1..2147483648 (IB max message 2 GiB)",
                    (unsigned long long)in.msg_bytes);
        return false;
    }
    if (in.inflight < 1 || in.inflight > 1024) {
        *err = line("--inflight: value %d is out of range 1..1024", in.inflight);
        return false;
    }
    if (in.wr_bytes < 64 || in.wr_bytes > (1ull << 31)) {
        *err = line("--wr-bytes: value %llu is out of range 64..2147483648",
                    (unsigned long long)in.wr_bytes);
        return false;
    }
    if (!(in.margin >= 1) || in.margin > 1e6) {
        *err = line("--margin: value %g is out of range 1..1000000", in.margin);
        return false;
    }
    if (in.floor_exp < 1 || in.floor_exp > 31 || in.retry < 0 || in.retry > 7) {
        *err = line("--min-exponent %d / --retry %d: out of range 1..31 / 0..7", in.floor_exp,
                    in.retry);
        return false;
    }
    if (in.shards < 1 || in.shards > 4096 || in.nodes < 2 || in.nodes > 65536) {
        *err = line("--shards %d / --nodes %d: out of range 1..4096 / 2..65536", in.shards,
                    in.nodes);
        return false;
    }
    if (in.peers < 1 || in.peers > 1000000 || in.rails < 1 || in.rails > 64) {
        *err = line("--peers %d / --rails %d: out of range 1..1000000 / 1..64", in.peers, in.rails);
        return false;
    }

    Plan p{};
    twohop_rc_settings &s = p.settings;
    s = TWOHOP_RC_SETTINGS_INIT;

    s.rc_path_mtu = in.roce ? 1024 : 4096;
    p.why.push_back(in.roce ? "path MTU 1024: fits a 1500-byte Ethernet frame (4096 needs jumbo "
                              "frames end to end)"
                            : "path MTU 4096: fewest packets per message on InfiniBand");

    int by_rtt = timeout_exp_for_rtt(in.rtt_us, in.margin).value_or(31);
    int t = std::max(by_rtt, in.floor_exp);
    s.rc_timeout = t;
    s.rc_retry_count = in.retry;
    p.why.push_back(line("timeout exponent %d = %s (%g x rtt needs %d; floor %d = UCX default 1 s; "
                         "NCCL uses 20)",
                         t, format_us(timeout_us(t)).c_str(), in.margin, by_rtt, in.floor_exp));
    if (t < kUcxDefaultTimeoutExp) {
        p.why.push_back(line("note: exponent %d is below UCX's default 18: spurious Go-Back-N "
                             "retransmissions if queueing ever exceeds %s",
                             t, format_us(timeout_us(t)).c_str()));
    }
    p.why.push_back(line("retry %d: a dead link is reported after %s nominal, %s worst case "
                         "(4 x timeout x (retry + 1))",
                         in.retry, format_us(dead_link_nominal_us(t, in.retry)).c_str(),
                         format_us(dead_link_us(t, in.retry)).c_str()));

    const std::uint64_t chunk = hop2_chunk_bytes(in.msg_bytes, in.shards, in.nodes);
    const std::uint64_t per_msg = wrs_per_message(chunk, in.wr_bytes, in.rndv_thresh);
    std::uint64_t wrs = inflight_wrs(per_msg, in.inflight);
    std::uint32_t sq = send_queue_depth(wrs);
    if (sq > 32768) {
        *err = line("send queue depth %u (2 x %llu in-flight work requests) exceeds 32768; "
                    "lower --inflight or raise --wr-bytes",
                    sq, (unsigned long long)wrs);
        return false;
    }
    p.why.push_back(line("hop-2 message %llu bytes = ceil(%llu / %d shards / %d nodes): %s, "
                         "%llu work request(s) each",
                         (unsigned long long)chunk, (unsigned long long)in.msg_bytes, in.shards,
                         in.nodes,
                         chunk >= in.rndv_thresh ? "rendezvous (RTS + RDMA read)"
                                                 : "eager bcopy fragments",
                         (unsigned long long)per_msg));
    if (sq > 256) {
        s.rc_tx_queue_len = static_cast<int>(sq);
        s.rc_tx_cq_moderation = static_cast<int>(std::min<std::uint32_t>(64, sq / 4));
        p.why.push_back(line("send queue %u >= 2 x %llu in-flight work requests (%d x %llu); CQ "
                             "moderation %d = min(64, send queue / 4)",
                             sq, (unsigned long long)wrs, in.inflight,
                             (unsigned long long)per_msg, s.rc_tx_cq_moderation));
    } else {
        p.why.push_back(line("send queue: UCX default 256 covers 2 x %llu in-flight work requests "
                             "(%d x %llu)",
                             (unsigned long long)wrs, in.inflight, (unsigned long long)per_msg));
    }

    std::uint64_t rx_need = wrs * static_cast<std::uint64_t>(in.peers);
    if (rx_need > 4095) {
        if (rx_need > 32767) {
            *err = line("receive queue needs %llu WQEs (%d peers x %llu), more than 32767",
                        (unsigned long long)rx_need, in.peers, (unsigned long long)wrs);
            return false;
        }
        std::uint64_t rx = 4096;
        while (rx - 1 < rx_need)
            rx <<= 1;
        s.rc_rx_queue_len = static_cast<int>(rx - 1);
        p.why.push_back(line("receive queue %d >= %d peers x %llu in-flight work requests",
                             s.rc_rx_queue_len, in.peers, (unsigned long long)wrs));
    } else {
        p.why.push_back(line("receive queue: UCX default 4095 covers %d peers x %llu work requests",
                             in.peers, (unsigned long long)wrs));
    }

    if (in.stagger > 0) {
        s.rc_stagger = in.stagger;
        p.why.push_back(line(
            "stagger %d over %d processes (local ranks): exponents %d..%d, the slowest "
            "reports a dead link after %s worst case",
            in.stagger, in.rails, t, t + std::min(in.stagger, in.rails - 1),
            format_us(dead_link_us(t + std::min(in.stagger, in.rails - 1), in.retry)).c_str()));
    }
    std::string verr = validate(s);
    if (!verr.empty()) {
        *err = verr;
        return false;
    }
    *out = p;
    return true;
}

std::string mca_args(const twohop_rc_settings &s) {
    std::string out;
    for (const KnobInfo &k : knob_table()) {
        long long v = k.get(s);
        if (v != k.unset) {
            out += (out.empty() ? "" : " ") + std::string("--mca ") + mca_name(k.field) + " " +
                   std::to_string(v);
        }
    }
    return out;
}

} // namespace twohop::rc
