/* Validation edges of the RC parameter model, the C API, and the shared knob declaration. */
#include "rc_api.h"
#include "rc_params.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace twohop::rc;

namespace {

std::string check(const twohop_rc_settings &s) {
    char err[256] = "sentinel";
    int rc = twohop_rc_validate(&s, err, sizeof(err));
    EXPECT_EQ(rc == TWOHOP_RC_OK, std::string(err).empty()) << err;
    return err;
}

} // namespace

TEST(RcParams, DefaultsAreValidAndUnset) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    EXPECT_EQ(check(s), "");
    for (const KnobInfo &k : knob_table()) {
        EXPECT_EQ(k.get(s), k.unset) << k.field;
    }
}

TEST(RcParams, EveryRangeEdge) {
    for (const KnobInfo &k : knob_table()) {
        for (long long v : {k.lo, k.hi}) {
            twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
            // set the field through a tiny switch on its name
            std::string f = k.field;
            if (f == "rc_path_mtu")
                s.rc_path_mtu = (int)v;
            else if (f == "rc_timeout")
                s.rc_timeout = (int)v;
            else if (f == "rc_timeout_us")
                s.rc_timeout_us = (size_t)v;
            else if (f == "rc_retry_count")
                s.rc_retry_count = (int)v;
            else if (f == "rc_rnr_timer")
                s.rc_rnr_timer = (int)v;
            else if (f == "rc_rnr_retry")
                s.rc_rnr_retry = (int)v;
            else if (f == "rc_tx_queue_len")
                s.rc_tx_queue_len = (int)v;
            else if (f == "rc_rx_queue_len")
                s.rc_rx_queue_len = (int)v;
            else if (f == "rc_tx_cq_moderation") {
                s.rc_tx_cq_moderation = (int)v;
                s.rc_tx_queue_len = 32768;
            } else if (f == "rc_num_paths")
                s.rc_num_paths = (int)v;
            else if (f == "rc_sl")
                s.rc_sl = (int)v;
            else if (f == "rc_traffic_class")
                s.rc_traffic_class = (int)v;
            else if (f == "rc_adaptive_routing")
                s.rc_adaptive_routing = (int)v;
            else if (f == "rc_stagger")
                s.rc_stagger = (int)v;
            else if (f == "rc_report")
                s.rc_report = v != 0;
            else
                FAIL() << "field " << f << " not handled by the test";
            EXPECT_EQ(check(s), "") << f << "=" << v;
            EXPECT_EQ(k.get(s), v) << f;
        }
    }
}

TEST(RcParams, OutOfRangeNamesParameterValueAndRange) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_retry_count = 8;
    EXPECT_EQ(check(s), "coll_twohop_rc_retry_count: value 8 is out of range 0..7 (3-bit IB "
                        "retry_cnt, ibv_modify_qp(3); unset = -1)");
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout = 32;
    EXPECT_NE(check(s).find("coll_twohop_rc_timeout: value 32 is out of range 0..31"),
              std::string::npos);
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout = -2;
    EXPECT_NE(check(s).find("value -2 is out of range 0..31"), std::string::npos);
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_rnr_retry = 9;
    EXPECT_NE(check(s).find("coll_twohop_rc_rnr_retry: value 9 is out of range 0..7"),
              std::string::npos);
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_sl = 16;
    EXPECT_NE(check(s).find("coll_twohop_rc_sl: value 16 is out of range 0..15"),
              std::string::npos);
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_tx_queue_len = 15;
    EXPECT_NE(check(s).find("coll_twohop_rc_tx_queue_len: value 15 is out of range 16..32768"),
              std::string::npos);
    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout_us = 8796093023ull;
    EXPECT_NE(check(s).find("coll_twohop_rc_timeout_us: value 8796093023 is out of range "
                            "1..8796093022"),
              std::string::npos);
}

TEST(RcParams, PathMtuMustBeAnIbMtu) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    for (int mtu : {512, 1024, 2048, 4096}) {
        s.rc_path_mtu = mtu;
        EXPECT_EQ(check(s), "");
    }
    s.rc_path_mtu = 1500;
    EXPECT_EQ(check(s), "coll_twohop_rc_path_mtu: value 1500 is not an IB path MTU (allowed: 0 = "
                        "port default, 512, 1024, 2048, 4096)");
    s.rc_path_mtu = 256;
    EXPECT_NE(check(s).find("value 256 is out of range 512..4096"), std::string::npos);
}

TEST(RcParams, CrossFieldRules) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout = 14;
    s.rc_timeout_us = 1000;
    EXPECT_NE(check(s).find("coll_twohop_rc_timeout (14) and coll_twohop_rc_timeout_us (1000) "
                            "are both set"),
              std::string::npos);

    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_tx_cq_moderation = 65; // UCX default send queue 256 -> at most 64
    EXPECT_EQ(check(s), "coll_twohop_rc_tx_cq_moderation: value 65 is out of range 1..64 (at "
                        "most a quarter of the send queue, UCX default 256 work requests)");
    s.rc_tx_queue_len = 1024;
    EXPECT_EQ(check(s), "");

    s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout = 0;
    s.rc_stagger = 1;
    EXPECT_NE(check(s).find("needs a finite timeout"), std::string::npos);
    s.rc_timeout = 29;
    s.rc_stagger = 3;
    EXPECT_EQ(check(s), "coll_twohop_rc_stagger: value 3 is out of range 0..2 (timeout exponent "
                        "29 + stagger must be <= 31)");
    s.rc_stagger = 2;
    EXPECT_EQ(check(s), "");
}

TEST(RcParams, TimeoutUsRoundsUpToGrid) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout_us = 1000000; // 1 s -> 4.096 us * 2^18 = 1.074 s
    EXPECT_EQ(requested_timeout_exp(s), 18);
    s.rc_timeout_us = 1;
    EXPECT_EQ(requested_timeout_exp(s), 1);
    s = TWOHOP_RC_SETTINGS_INIT;
    EXPECT_FALSE(requested_timeout_exp(s).has_value());
}

TEST(RcParams, CApiNullAndSmallBuffer) {
    char err[16];
    EXPECT_EQ(twohop_rc_validate(nullptr, err, sizeof(err)), TWOHOP_RC_EINVAL);
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_sl = 99;
    EXPECT_EQ(twohop_rc_validate(&s, err, sizeof(err)), TWOHOP_RC_EINVAL);
    EXPECT_EQ(std::string(err), "coll_twohop_rc_"); // truncated, still terminated
    EXPECT_EQ(twohop_rc_validate(&s, nullptr, 0), TWOHOP_RC_EINVAL);
}

/* coll/params.def takes its rc rows from rc_knobs.def (no copy to drift), and the table has one
 * entry per field of the struct generated from the same file. */
TEST(RcParams, OneDeclarationSharedWithCollParamsDef) {
    const char *path = std::getenv("TWOHOP_RC_PARAMS_DEF");
    if (path == nullptr)
        GTEST_SKIP() << "TWOHOP_RC_PARAMS_DEF not set (run through meson test)";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    size_t b = text.find("/* BEGIN rc_tuning rows */");
    size_t e = text.find("/* END rc_tuning rows */");
    ASSERT_NE(b, std::string::npos);
    ASSERT_NE(e, std::string::npos);
    std::string block = text.substr(b, e - b);
    EXPECT_NE(block.find("#include \"../rc_tuning/rc_knobs.def\""), std::string::npos) << block;
    EXPECT_EQ(block.find("TWOHOP_PARAM(rc_"), std::string::npos) << "a hand-written rc row";
    size_t bytes = 0;
    for (const KnobInfo &k : knob_table()) {
        bytes += std::string(k.kind) == "SIZE" ? sizeof(size_t)
                 : std::string(k.kind) == "BOOL" ? sizeof(bool)
                                                  : sizeof(int);
    }
    EXPECT_EQ(knob_table().size(), 15u);
    EXPECT_LE(bytes, sizeof(twohop_rc_settings));
}

extern "C" int twohop_rc_test_from_c(void);

TEST(RcParams, HeaderWorksFromC) {
    EXPECT_EQ(twohop_rc_test_from_c(), 2);
}
