/* Settings -> UCX pairs, stagger, environment precedence, and a real UCP context read-back. */
#include "ib_time.h"
#include "rc_api.h"
#include "ucx_config.h"

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

using namespace twohop::rc;

namespace {

twohop_rc_settings all_set() {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_path_mtu = 4096;
    s.rc_timeout = 14;
    s.rc_retry_count = 5;
    s.rc_rnr_timer = 14;
    s.rc_rnr_retry = 7;
    s.rc_tx_queue_len = 512;
    s.rc_rx_queue_len = 8191;
    s.rc_tx_cq_moderation = 32;
    s.rc_num_paths = 2;
    s.rc_sl = 3;
    s.rc_traffic_class = 106;
    s.rc_adaptive_routing = 1;
    return s;
}

const std::map<std::string, std::string> kAllSetPairs = {
    {"RC_PATH_MTU", "4096"},     {"RC_TIMEOUT", "67108.864us"},
    {"RC_RETRY_COUNT", "5"},     {"RC_RNR_TIMEOUT", "1280.00us"},
    {"RC_RNR_RETRY_COUNT", "7"}, {"RC_TX_QUEUE_LEN", "512"},
    {"RC_RX_QUEUE_LEN", "8191"}, {"RC_TX_CQ_MODERATION", "32"},
    {"RC_NUM_PATHS", "2"},       {"RC_SL", "3"},
    {"RC_TRAFFIC_CLASS", "106"}, {"RC_AR_ENABLE", "yes"},
};

void collect(const char *name, const char *value, void *arg) {
    (*static_cast<std::map<std::string, std::string> *>(arg))[name] = value;
}

/* UCX's uct_ib_to_qp_fabric_time(): round(log2(t / 4.096 us)), <1 -> 1, >=32 -> 0 (infinite). */
int ucx_qp_fabric_time(double seconds) {
    double to = std::log(seconds / 4.096e-6) / std::log(2.0);
    if (to < 1)
        return 1;
    if ((long)(to + 0.5) >= 32)
        return 0;
    return (int)(long)(to + 0.5);
}

/* UCX's uct_ib_to_rnr_fabric_time(): nearest code on the IB RNR table. */
int ucx_rnr_fabric_time(double seconds) {
    double ms = seconds * 1000;
    for (int idx = 1; idx < 32; ++idx) {
        int next = (idx + 1) % 32;
        if (ms <= rnr_timer_us(next) / 1000.0) {
            double avg = (rnr_timer_us(idx) + rnr_timer_us(next)) / 2000.0;
            return ms < avg ? idx : next;
        }
    }
    return 0;
}

double parse_us(const std::string &v) {
    return std::strtod(v.c_str(), nullptr) * 1e-6;
}

class UcxPairs : public ::testing::Test {
  protected:
    void SetUp() override {
        for (const char *n : {"UCX_RC_TIMEOUT", "UCX_RC_MLX5_TIMEOUT", "UCX_RC_VERBS_TIMEOUT",
                              "UCX_IB_TX_QUEUE_LEN", "UCX_RC_SL", "UCX_IB_SL"}) {
            unsetenv(n);
        }
        reset_conflict_notice_for_tests();
    }
    void TearDown() override { SetUp(); }
};

} // namespace

TEST_F(UcxPairs, AllKnobsMapToUcxNames) {
    twohop_rc_settings s = all_set();
    std::map<std::string, std::string> got;
    char err[512];
    ASSERT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &got, err, sizeof(err)), TWOHOP_RC_OK) << err;
    EXPECT_EQ(got, kAllSetPairs);
}

TEST_F(UcxPairs, UnsetEmitsNothing) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    std::map<std::string, std::string> got;
    char err[64];
    EXPECT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &got, err, sizeof(err)), TWOHOP_RC_OK);
    EXPECT_TRUE(got.empty());
}

TEST_F(UcxPairs, InvalidSettingsEmitNothing) {
    twohop_rc_settings s = all_set();
    s.rc_retry_count = 8;
    std::map<std::string, std::string> got;
    char err[256];
    EXPECT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &got, err, sizeof(err)), TWOHOP_RC_EINVAL);
    EXPECT_TRUE(got.empty());
    EXPECT_NE(std::string(err).find("coll_twohop_rc_retry_count: value 8"), std::string::npos);
    s = all_set();
    EXPECT_EQ(twohop_rc_ucx_pairs(&s, 2, 2, collect, &got, err, sizeof(err)), TWOHOP_RC_EINVAL);
    EXPECT_EQ(std::string(err),
              "twohop_rc_ucx_pairs: rail_index 2 is out of range 0..1 (n_rails 2)");
}

TEST_F(UcxPairs, EmittedTimesMapBackToTheSameIbCodesInUcx) {
    for (int t = 0; t <= 31; ++t) {
        twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
        s.rc_timeout = t;
        auto pairs = ucx_pairs(s, 0);
        ASSERT_EQ(pairs.size(), 1u);
        EXPECT_EQ(ucx_qp_fabric_time(parse_us(pairs[0].value)), t) << pairs[0].value;
    }
    for (int c = 0; c <= 31; ++c) {
        twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
        s.rc_rnr_timer = c;
        auto pairs = ucx_pairs(s, 0);
        ASSERT_EQ(pairs.size(), 1u);
        EXPECT_EQ(pairs[0].name, "RC_RNR_TIMEOUT");
        EXPECT_EQ(ucx_rnr_fabric_time(parse_us(pairs[0].value)), c) << pairs[0].value;
    }
    // UCX's own defaults land where the docs say: 1 s -> t = 18, 1 ms -> RNR code 13 (0.96 ms).
    EXPECT_EQ(ucx_qp_fabric_time(1.0), kUcxDefaultTimeoutExp);
    EXPECT_EQ(ucx_rnr_fabric_time(1e-3), 13);
}

TEST_F(UcxPairs, StaggerAlternatesExponentsAcrossRails) {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_timeout = 14;
    s.rc_stagger = 2;
    const char *expect[] = {"67108.864us", "134217.728us", "268435.456us", "67108.864us"};
    for (int r = 0; r < 4; ++r) {
        std::map<std::string, std::string> got;
        char err[64];
        ASSERT_EQ(twohop_rc_ucx_pairs(&s, r, 4, collect, &got, err, sizeof(err)), TWOHOP_RC_OK);
        EXPECT_EQ(got["RC_TIMEOUT"], expect[r]) << "rail " << r;
    }
    // stagger alone staggers UCX's default (t = 18)
    s.rc_timeout = -1;
    s.rc_stagger = 1;
    EXPECT_EQ(rail_timeout_exp(s, 0), 18);
    EXPECT_EQ(rail_timeout_exp(s, 1), 19);
    EXPECT_EQ(rail_timeout_exp(s, 2), 18);
}

TEST_F(UcxPairs, EnvironmentWinsAndConflictIsReportedOnce) {
    setenv("UCX_RC_MLX5_TIMEOUT", "2s", 1);
    setenv("UCX_IB_TX_QUEUE_LEN", "1024", 1);
    twohop_rc_settings s = all_set();
    std::map<std::string, std::string> got;
    char err[512];
    ASSERT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &got, err, sizeof(err)), TWOHOP_RC_NOTICE);
    EXPECT_EQ(std::string(err),
              "UCX_RC_MLX5_TIMEOUT=2s (environment) wins over coll_twohop_rc_timeout "
              "(RC_TIMEOUT=67108.864us); UCX_IB_TX_QUEUE_LEN=1024 (environment) wins over "
              "coll_twohop_rc_tx_queue_len (RC_TX_QUEUE_LEN=512)");
    EXPECT_EQ(got.count("RC_TIMEOUT"), 0u);
    EXPECT_EQ(got.count("RC_TX_QUEUE_LEN"), 0u);
    EXPECT_EQ(got.size(), kAllSetPairs.size() - 2);

    got.clear();
    EXPECT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &got, err, sizeof(err)), TWOHOP_RC_OK);
    EXPECT_STREQ(err, "");
    EXPECT_EQ(got.count("RC_TIMEOUT"), 0u); // still withheld, just not reported again
}

TEST_F(UcxPairs, EnvAliasesFollowUcxInheritance) {
    EXPECT_EQ(env_aliases("RC_TIMEOUT"),
              (std::vector<std::string>{"UCX_RC_TIMEOUT", "UCX_RC_MLX5_TIMEOUT",
                                        "UCX_RC_VERBS_TIMEOUT"}));
    EXPECT_EQ(env_aliases("RC_SL"), (std::vector<std::string>{"UCX_RC_SL", "UCX_RC_MLX5_SL",
                                                              "UCX_RC_VERBS_SL", "UCX_IB_SL"}));
}

/* The pairs applied to a real UCP configuration and read back through ucp_config_print(). */
TEST_F(UcxPairs, AppliedToARealUcpContext) {
    ucp_config_t *config = nullptr;
    ASSERT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    twohop_rc_settings s = all_set();
    std::map<std::string, std::string> pairs;
    char err[256];
    ASSERT_EQ(twohop_rc_ucx_pairs(&s, 0, 1, collect, &pairs, err, sizeof(err)), TWOHOP_RC_OK);
    for (const auto &kv : pairs) {
        EXPECT_EQ(ucp_config_modify(config, kv.first.c_str(), kv.second.c_str()), UCS_OK)
            << kv.first;
    }
    char *buf = nullptr;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    ASSERT_NE(mem, nullptr);
    ucp_config_print(config, mem, "twohop", UCS_CONFIG_PRINT_CONFIG);
    std::fclose(mem);
    std::string printed(buf, len);
    std::free(buf);
    for (const auto &kv : kAllSetPairs) {
        EXPECT_NE(printed.find("\n" + kv.first + "=" + kv.second + "\n"), std::string::npos)
            << kv.first << " not in:\n"
            << printed;
    }

    // The context still initialises (UCX checks RC values only when an IB interface opens).
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx = nullptr;
    EXPECT_EQ(ucp_init(&params, config, &ctx), UCS_OK);
    if (ctx != nullptr)
        ucp_cleanup(ctx);
    ucp_config_release(config);
}
