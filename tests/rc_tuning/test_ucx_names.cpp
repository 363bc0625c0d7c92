/* Knob names checked against UCX's own configuration listing (the loaded UCX and a fixture). */
#include "rc_api.h"
#include "ucx_config.h"
#include "ucx_loaded.h"
#include "ucx_names.h"

#include <gtest/gtest.h>

#include <map>

using namespace twohop::rc;

namespace {

twohop_rc_settings every_knob_set() {
    twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_path_mtu = 4096;
    s.rc_timeout = 18;
    s.rc_retry_count = 7;
    s.rc_rnr_timer = 13;
    s.rc_rnr_retry = 7;
    s.rc_tx_queue_len = 512;
    s.rc_rx_queue_len = 8191;
    s.rc_tx_cq_moderation = 64;
    s.rc_num_paths = 2;
    s.rc_sl = 1;
    s.rc_traffic_class = 106;
    s.rc_adaptive_routing = 2;
    return s;
}

const UcxNameListing &real_listing() {
    static const UcxNameListing l = parse_ucx_listing(loaded_ucx_listing());
    return l;
}

/* A cut of UCX 1.13.1's listing, in its format. */
const char *const kListingFixture = R"(#
# Transport timeout
#
# syntax:    time value: <number>[s|us|ms|ns]
# inherits:  UCX_RC_TIMEOUT
#
UCX_RC_MLX5_TIMEOUT=1000000.00us

# inherits:  UCX_RC_PATH_MTU, UCX_IB_PATH_MTU
UCX_RC_VERBS_PATH_MTU=default
UCX_RC_MLX5_MAX_BCOPY (deprecated)=8k
UCX_RC_MLX5_AR_ENABLE=auto
not a line UCX would print
)";

void collect(const char *name, const char *value, void *arg) {
    (*static_cast<std::map<std::string, std::string> *>(arg))[name] = value;
}

} // namespace

TEST(UcxNames, ParsesFullNamesAndInheritedAliases) {
    UcxNameListing l = parse_ucx_listing(kListingFixture);
    EXPECT_EQ(l.readers.at("RC_TIMEOUT"), (std::set<std::string>{"RC_MLX5_TIMEOUT"}));
    EXPECT_EQ(l.readers.at("IB_PATH_MTU"), (std::set<std::string>{"RC_VERBS_PATH_MTU"}));
    EXPECT_EQ(l.readers.count("RC_MLX5_MAX_BCOPY"), 1u);
    EXPECT_EQ(l.readers.count("RC_AR_ENABLE"), 0u); // no inherits line before it
    EXPECT_EQ(l.readers.size(), 7u);
}

/* Every name twohop emits is one the loaded UCX lists, for both RC transports. */
TEST(UcxNames, LoadedUcxKnowsEveryEmittedName) {
    ASSERT_FALSE(real_listing().empty()) << "UCX printed no configuration listing";
    std::vector<UcxPair> pairs = ucx_pairs(every_knob_set(), 0);
    ASSERT_EQ(pairs.size(), 12u);
    NameCheck c = check_names(pairs, real_listing(), {"rc_mlx5"});
    EXPECT_TRUE(c.unknown.empty()) << describe_unknown(c.unknown);
    EXPECT_EQ(c.apply.size(), 12u);
    // rc_verbs has no AR_ENABLE field: only that pair is left out there.
    c = check_names(pairs, real_listing(), {"rc_verbs"});
    ASSERT_EQ(c.no_transport.size(), 1u);
    EXPECT_EQ(c.no_transport[0].name, "RC_AR_ENABLE");
    // ud_verbs reads none of the RC_ names.
    c = check_names(pairs, real_listing(), {"ud_verbs", "tcp"});
    EXPECT_TRUE(c.apply.empty());
    EXPECT_EQ(c.no_transport.size(), 12u);
}

/* ucp_config_modify() would accept these; the check must not. */
TEST(UcxNames, MisspeltKeyIsRejected) {
    std::vector<UcxPair> pairs = {{"RC_TIMEOUTT", "1s", "coll_twohop_rc_timeout"},
                                  {"RC_BOGUS_TYPO", "42", "test"},
                                  {"RC_RETRY_COUNT", "7", "coll_twohop_rc_retry_count"}};
    NameCheck c = check_names(pairs, real_listing(), {"rc_mlx5", "rc_verbs"});
    ASSERT_EQ(c.unknown.size(), 2u);
    EXPECT_EQ(c.unknown[0].name, "RC_TIMEOUTT");
    EXPECT_EQ(c.apply.size(), 1u);
    EXPECT_EQ(describe_unknown({pairs[0]}),
              "UCX_RC_TIMEOUTT=1s (from coll_twohop_rc_timeout) is not a configuration name of "
              "the loaded UCX");
}

/* On this host (no RDMA device) the checked entry point emits nothing and says why. */
TEST(UcxNames, CheckedPairsOnAHostWithoutRc) {
    bool rc_open = false;
    for (const UcxResource &r : loaded_ucx_resources()) {
        rc_open = rc_open || r.tl.rfind("rc_", 0) == 0;
    }
    if (rc_open) {
        GTEST_SKIP() << "this host has an RC transport";
    }
    unsetenv("UCX_RC_TIMEOUT");
    reset_conflict_notice_for_tests();
    twohop_rc_settings s = every_knob_set();
    std::map<std::string, std::string> got;
    char err[1024];
    EXPECT_EQ(twohop_rc_ucx_pairs_checked(&s, 0, 1, collect, &got, err, sizeof(err)),
              TWOHOP_RC_NOT_APPLIED);
    EXPECT_TRUE(got.empty());
    EXPECT_NE(std::string(err).find("not applied (no open UCX transport on this host reads "
                                    "them): RC_PATH_MTU=4096"),
              std::string::npos)
        << err;
    s = TWOHOP_RC_SETTINGS_INIT; // nothing set: nothing to say
    EXPECT_EQ(twohop_rc_ucx_pairs_checked(&s, 0, 1, collect, &got, err, sizeof(err)),
              TWOHOP_RC_OK);
    s.rc_sl = 16;
    EXPECT_EQ(twohop_rc_ucx_pairs_checked(&s, 0, 1, collect, &got, err, sizeof(err)),
              TWOHOP_RC_EINVAL);
}
