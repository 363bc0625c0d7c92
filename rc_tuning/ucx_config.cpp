/* Settings -> UCX configuration pairs, environment precedence; see ucx_config.h. */
#include "ucx_config.h"

#include "ib_time.h"
#include "rc_params.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace twohop::rc {

namespace {

/* Knobs whose UCX field lives in the IB_ sub-table, so UCX_IB_<X> also sets them (UCX 1.13
 * config print: "inherits: UCX_RC_<X>, UCX_IB_<X>"). */
const char *const kIbInherited[] = {"PATH_MTU", "TX_QUEUE_LEN",  "RX_QUEUE_LEN", "NUM_PATHS",
                                    "SL",       "TRAFFIC_CLASS", "AR_ENABLE"};

std::atomic<bool> g_conflict_reported{false};

std::string fmt(const char *f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), f, v);
    return buf;
}

} // namespace

EnvLookup process_env() {
    return [](const char *name) -> const char * { return std::getenv(name); };
}

std::vector<std::string> env_aliases(const std::string &ucx_name) {
    const std::string suffix = ucx_name.substr(ucx_name.find('_') + 1); // drop "RC_"
    std::vector<std::string> names = {"UCX_RC_" + suffix, "UCX_RC_MLX5_" + suffix,
                                      "UCX_RC_VERBS_" + suffix};
    for (const char *ib : kIbInherited) {
        if (suffix == ib) {
            names.push_back("UCX_IB_" + suffix);
        }
    }
    return names;
}

std::optional<int> rail_timeout_exp(const twohop_rc_settings &s, int rail_index) {
    std::optional<int> t = requested_timeout_exp(s);
    if (s.rc_stagger <= 0) {
        return t;
    }
    int base = t ? *t : kUcxDefaultTimeoutExp;
    return base + rail_index % (s.rc_stagger + 1);
}

std::vector<UcxPair> ucx_pairs(const twohop_rc_settings &s, int rail_index) {
    std::vector<UcxPair> out;
    auto add = [&out](const char *name, std::string value, const char *field) {
        out.push_back({name, std::move(value), mca_name(field)});
    };
    if (s.rc_path_mtu != 0) {
        add("RC_PATH_MTU", std::to_string(s.rc_path_mtu), "rc_path_mtu");
    }
    if (std::optional<int> t = rail_timeout_exp(s, rail_index)) {
        // Exact grid value 4.096 us * 2^t: UCX maps it back with round(log2(T / 4.096 us)) = t.
        // t = 0 (infinite): 2^32 * 4.096 us, which UCX maps to its "no timeout" code 0.
        double us = *t == 0 ? timeout_us(31) * 2 : timeout_us(*t);
        const char *field = s.rc_stagger > 0     ? "rc_stagger"
                            : s.rc_timeout != -1 ? "rc_timeout"
                                                 : "rc_timeout_us";
        add("RC_TIMEOUT", fmt("%.3fus", us), field);
    }
    if (s.rc_retry_count != -1) {
        add("RC_RETRY_COUNT", std::to_string(s.rc_retry_count), "rc_retry_count");
    }
    if (s.rc_rnr_timer != -1) {
        // Exact table value: UCX picks the nearest code, which is this one.
        add("RC_RNR_TIMEOUT", fmt("%.2fus", rnr_timer_us(s.rc_rnr_timer)), "rc_rnr_timer");
    }
    if (s.rc_rnr_retry != -1) {
        add("RC_RNR_RETRY_COUNT", std::to_string(s.rc_rnr_retry), "rc_rnr_retry");
    }
    if (s.rc_tx_queue_len != 0) {
        add("RC_TX_QUEUE_LEN", std::to_string(s.rc_tx_queue_len), "rc_tx_queue_len");
    }
    if (s.rc_rx_queue_len != 0) {
        add("RC_RX_QUEUE_LEN", std::to_string(s.rc_rx_queue_len), "rc_rx_queue_len");
    }
    if (s.rc_tx_cq_moderation != 0) {
        add("RC_TX_CQ_MODERATION", std::to_string(s.rc_tx_cq_moderation), "rc_tx_cq_moderation");
    }
    if (s.rc_num_paths != 0) {
        add("RC_NUM_PATHS", std::to_string(s.rc_num_paths), "rc_num_paths");
    }
    if (s.rc_sl != -1) {
        add("RC_SL", std::to_string(s.rc_sl), "rc_sl");
    }
    if (s.rc_traffic_class != -1) {
        add("RC_TRAFFIC_CLASS", std::to_string(s.rc_traffic_class), "rc_traffic_class");
    }
    if (s.rc_adaptive_routing != -1) {
        static const char *const ar[] = {"no", "yes", "try"};
        add("RC_AR_ENABLE", ar[s.rc_adaptive_routing], "rc_adaptive_routing");
    }
    return out;
}

std::vector<UcxPair> apply_env_precedence(const std::vector<UcxPair> &pairs, const EnvLookup &env,
                                          std::vector<UcxConflict> *conflicts) {
    std::vector<UcxPair> keep;
    for (const UcxPair &p : pairs) {
        bool overridden = false;
        for (const std::string &alias : env_aliases(p.name)) {
            const char *v = env(alias.c_str());
            if (v != nullptr) {
                if (conflicts != nullptr) {
                    conflicts->push_back({alias, v, p});
                }
                overridden = true;
                break;
            }
        }
        if (!overridden) {
            keep.push_back(p);
        }
    }
    return keep;
}

std::string describe(const UcxConflict &c) {
    return c.env_name + "=" + c.env_value + " (environment) wins over " + c.withheld.from + " (" +
           c.withheld.name + "=" + c.withheld.value + ")";
}

void reset_conflict_notice_for_tests() {
    g_conflict_reported = false;
}

} // namespace twohop::rc

/* ---- C interface (rc_api.h); exceptions never cross this boundary ---- */

namespace {

void put_err(char *err, size_t errlen, const std::string &msg) {
    if (err != nullptr && errlen > 0) {
        std::snprintf(err, errlen, "%s", msg.c_str());
    }
}

} // namespace

extern "C" int twohop_rc_validate(const struct twohop_rc_settings *s, char *err, size_t errlen) {
    if (s == nullptr) {
        put_err(err, errlen, "twohop_rc_validate: settings pointer is NULL");
        return TWOHOP_RC_EINVAL;
    }
    try {
        std::string msg = twohop::rc::validate(*s);
        put_err(err, errlen, msg);
        return msg.empty() ? TWOHOP_RC_OK : TWOHOP_RC_EINVAL;
    } catch (const std::exception &e) {
        put_err(err, errlen, std::string("twohop_rc_validate: ") + e.what());
        return TWOHOP_RC_EINVAL;
    }
}

namespace twohop::rc {

int rail_pairs(const twohop_rc_settings *s, int rail_index, int n_rails,
               std::vector<UcxPair> *out, char *err, size_t errlen) {
    int rc = twohop_rc_validate(s, err, errlen);
    if (rc != TWOHOP_RC_OK) {
        return rc;
    }
    if (n_rails < 1 || rail_index < 0 || rail_index >= n_rails) {
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "twohop_rc_ucx_pairs: rail_index %d is out of range 0..%d (n_rails %d)",
                      rail_index, n_rails - 1, n_rails);
        put_err(err, errlen, buf);
        return TWOHOP_RC_EINVAL;
    }
    try {
        std::vector<UcxConflict> conflicts;
        *out = apply_env_precedence(ucx_pairs(*s, rail_index), process_env(), &conflicts);
        if (!conflicts.empty() && !g_conflict_reported.exchange(true)) {
            std::string msg;
            for (const UcxConflict &c : conflicts) {
                msg += (msg.empty() ? "" : "; ") + describe(c);
            }
            put_err(err, errlen, msg);
            return TWOHOP_RC_NOTICE;
        }
        return TWOHOP_RC_OK;
    } catch (const std::exception &e) {
        put_err(err, errlen, std::string("twohop_rc_ucx_pairs: ") + e.what());
        return TWOHOP_RC_EINVAL;
    }
}

void put_error(char *err, size_t errlen, const std::string &msg) {
    put_err(err, errlen, msg);
}

} // namespace twohop::rc

extern "C" int twohop_rc_ucx_pairs(const struct twohop_rc_settings *s, int rail_index, int n_rails,
                                   twohop_rc_kv_fn emit, void *arg, char *err, size_t errlen) {
    if (emit == nullptr) {
        put_err(err, errlen, "twohop_rc_ucx_pairs: emit is NULL");
        return TWOHOP_RC_EINVAL;
    }
    std::vector<twohop::rc::UcxPair> pairs;
    int rc = twohop::rc::rail_pairs(s, rail_index, n_rails, &pairs, err, errlen);
    if (rc >= 0) {
        for (const twohop::rc::UcxPair &p : pairs) {
            emit(p.name.c_str(), p.value.c_str(), arg);
        }
    }
    return rc;
}
