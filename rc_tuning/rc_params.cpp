/* RC parameter table and validation; see rc_params.h and docs/rc_tuning.md. */
#include "rc_params.h"

#include "ib_time.h"

#include <cstdio>

namespace twohop::rc {

namespace {

long long knob_hi(const char *field);

// The table is generated from rc_knobs.def, like the MCA parameters and the settings struct.
const std::vector<KnobInfo> kKnobs = {
#define TWOHOP_RC_KNOB(field, kind, unset, lo, hi, level, unit, range_src, doc)                  \
    {#field, #kind, unset, lo, hi, unit, range_src,                                            \
     [](const twohop_rc_settings &s) { return static_cast<long long>(s.field); }},
#include "rc_knobs.def"
#undef TWOHOP_RC_KNOB
};

// 4.096 us * 2^31, the largest finite local ACK timeout, in whole microseconds.
const long long kTimeoutUsMax = knob_hi("rc_timeout_us");

std::string out_of_range(const KnobInfo &k, long long v) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s: value %lld is out of range %lld..%lld (%s; unset = %lld)",
                  mca_name(k.field).c_str(), v, k.lo, k.hi, k.range_src, k.unset);
    return buf;
}

long long knob_hi(const char *field) {
    for (const KnobInfo &k : knob_table()) {
        if (std::string(k.field) == field) {
            return k.hi;
        }
    }
    return 0;
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
