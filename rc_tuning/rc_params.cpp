/* RC parameter table and validation; see rc_params.h and docs/rc_tuning.md. */
#include "rc_params.h"

#include "ib_time.h"

#include <cstdio>

namespace twohop::rc {

namespace {

#define TWOHOP_RC_GET(f) [](const twohop_rc_settings &s) { return static_cast<long long>(s.f); }

// 4.096 us * 2^31, the largest finite local ACK timeout, in whole microseconds.
constexpr long long kTimeoutUsMax = 8796093022LL;

const std::vector<KnobInfo> kKnobs = {
    {"rc_path_mtu", "INT", 0, 512, 4096, "bytes",
     "IB path MTU 512, 1024, 2048 or 4096; 0 = port default", TWOHOP_RC_GET(rc_path_mtu)},
    {"rc_timeout", "INT", -1, 0, 31, "exponent t (4.096 us * 2^t, 0 = infinite)",
     "5-bit IB local ACK timeout, ibv_modify_qp(3)", TWOHOP_RC_GET(rc_timeout)},
    {"rc_timeout_us", "SIZE", 0, 1, kTimeoutUsMax, "microseconds",
     "4.096 us * 2^1 .. 4.096 us * 2^31, ibv_modify_qp(3)", TWOHOP_RC_GET(rc_timeout_us)},
    {"rc_retry_count", "INT", -1, 0, 7, "retries (7 = seven, not infinite)",
     "3-bit IB retry_cnt, ibv_modify_qp(3)", TWOHOP_RC_GET(rc_retry_count)},
    {"rc_rnr_timer", "INT", -1, 0, 31, "IB RNR timer code (0 = 655.36 ms, 1 = 0.01 ms)",
     "5-bit IB min_rnr_timer, ibv_modify_qp(3)", TWOHOP_RC_GET(rc_rnr_timer)},
    {"rc_rnr_retry", "INT", -1, 0, 7, "retries (7 = infinite)",
     "3-bit IB rnr_retry, ibv_modify_qp(3)", TWOHOP_RC_GET(rc_rnr_retry)},
    {"rc_tx_queue_len", "INT", 0, 16, 32768, "work requests",
     "twohop floor 16; ConnectX max_qp_wr 32768 (ibv_devinfo -v)", TWOHOP_RC_GET(rc_tx_queue_len)},
    {"rc_rx_queue_len", "INT", 0, 64, 32767, "receive WQEs",
     "twohop floor 64; ConnectX max_srq_wr 32767 (ibv_devinfo -v)", TWOHOP_RC_GET(rc_rx_queue_len)},
    {"rc_tx_cq_moderation", "INT", 0, 1, 1024, "send WQEs per signaled completion",
     "twohop limit; must also be <= rc_tx_queue_len / 4", TWOHOP_RC_GET(rc_tx_cq_moderation)},
    {"rc_num_paths", "INT", 0, 1, 16, "QPs per peer", "twohop limit; more paths add QPs, not links",
     TWOHOP_RC_GET(rc_num_paths)},
    {"rc_sl", "INT", -1, 0, 15, "service level", "4-bit IB SL", TWOHOP_RC_GET(rc_sl)},
    {"rc_traffic_class", "INT", -1, 0, 255, "traffic class byte", "8-bit GRH TClass / RoCE DSCP<<2",
     TWOHOP_RC_GET(rc_traffic_class)},
    {"rc_adaptive_routing", "INT", -1, 0, 2, "0 = off, 1 = on, 2 = try",
     "UCX AR_ENABLE: no, yes, try; -1 = auto", TWOHOP_RC_GET(rc_adaptive_routing)},
    {"rc_stagger", "INT", 0, 1, 4, "timeout exponent steps between rails",
     "twohop limit: the slowest rail waits 2^stagger times longer", TWOHOP_RC_GET(rc_stagger)},
    {"rc_report", "BOOL", 0, 0, 1, "boolean", "0 or 1", TWOHOP_RC_GET(rc_report)},
};

#undef TWOHOP_RC_GET

std::string out_of_range(const KnobInfo &k, long long v) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s: value %lld is out of range %lld..%lld (%s; unset = %lld)",
                  mca_name(k.field).c_str(), v, k.lo, k.hi, k.range_src, k.unset);
    return buf;
}

} // namespace

const std::vector<KnobInfo> &knob_table() {
    return kKnobs;
}

twohop_rc_settings default_settings() {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    return s;
}

std::string mca_name(const char *field) {
    return std::string("coll_twohop_") + field;
}

std::string validate(const twohop_rc_settings &s) {
    char buf[256];
    for (const KnobInfo &k : kKnobs) {
        long long v = k.get(s);
        if (v == k.unset) {
            continue;
        }
        if (v < k.lo || v > k.hi) {
            return out_of_range(k, v);
        }
    }
    if (s.rc_path_mtu != 0 && s.rc_path_mtu != 512 && s.rc_path_mtu != 1024 &&
        s.rc_path_mtu != 2048 && s.rc_path_mtu != 4096) {
        std::snprintf(buf, sizeof(buf),
                      "coll_twohop_rc_path_mtu: value %d is not an IB path MTU "
                      "(allowed: 0 = port default, 512, 1024, 2048, 4096)",
                      s.rc_path_mtu);
        return buf;
    }
    if (s.rc_timeout != -1 && s.rc_timeout_us != 0) {
        std::snprintf(buf, sizeof(buf),
                      "coll_twohop_rc_timeout (%d) and coll_twohop_rc_timeout_us (%zu) are both "
                      "set; set only one (allowed: rc_timeout -1..31 with rc_timeout_us 0, or "
                      "rc_timeout -1 with rc_timeout_us 1..%lld)",
                      s.rc_timeout, s.rc_timeout_us, kTimeoutUsMax);
        return buf;
    }
    if (s.rc_tx_cq_moderation > 0) {
        int txq = s.rc_tx_queue_len > 0 ? s.rc_tx_queue_len : 256; // UCX RC_TX_QUEUE_LEN default
        if (s.rc_tx_cq_moderation > txq / 4) {
            std::snprintf(buf, sizeof(buf),
                          "coll_twohop_rc_tx_cq_moderation: value %d is out of range 1..%d "
                          "(at most a quarter of the send queue, %s%d work requests)",
                          s.rc_tx_cq_moderation, txq / 4,
                          s.rc_tx_queue_len > 0 ? "coll_twohop_rc_tx_queue_len " : "UCX default ",
                          txq);
            return buf;
        }
    }
    if (s.rc_stagger > 0) {
        std::optional<int> t = requested_timeout_exp(s);
        int base = t ? *t : kUcxDefaultTimeoutExp;
        if (base == 0) {
            return "coll_twohop_rc_stagger: value " + std::to_string(s.rc_stagger) +
                   " needs a finite timeout, but coll_twohop_rc_timeout is 0 (infinite)";
        }
        if (base + s.rc_stagger > kTimeoutExpMax) {
            std::snprintf(buf, sizeof(buf),
                          "coll_twohop_rc_stagger: value %d is out of range 0..%d (timeout "
                          "exponent %d + stagger must be <= 31)",
                          s.rc_stagger, kTimeoutExpMax - base, base);
            return buf;
        }
    }
    return "";
}

std::optional<int> requested_timeout_exp(const twohop_rc_settings &s) {
    if (s.rc_timeout != -1) {
        return s.rc_timeout;
    }
    if (s.rc_timeout_us != 0) {
        return timeout_exp_at_least_us(static_cast<double>(s.rc_timeout_us));
    }
    return std::nullopt;
}

} // namespace twohop::rc
