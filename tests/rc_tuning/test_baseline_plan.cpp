/* Baseline JSON round trip and verdicts; plan recommendations. */
#include "baseline.h"
#include "rc_params.h"
#include "rc_plan.h"
#include "sysfs_tree.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace twohop::rc;

TEST(Profile, ParsesAndRejectsBadLines) {
    std::vector<ProfilePoint> p;
    std::string err;
    ASSERT_TRUE(parse_profile("# comment\n\n1048576 180.5\n8 4.1  # tail\n", &p, &err)) << err;
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].bytes, 8u);
    EXPECT_DOUBLE_EQ(p[1].avg_latency_us, 180.5);
    EXPECT_FALSE(parse_profile("8 4.1\nabc 5\n", &p, &err));
    EXPECT_EQ(err,
              "line 2: expected \"bytes avg_latency_us\" (bytes > 0, latency > 0), got 'abc 5'");
    EXPECT_FALSE(parse_profile("8\n", &p, &err));
    EXPECT_FALSE(parse_profile("8 -1\n", &p, &err));
    EXPECT_FALSE(parse_profile("8 1 2\n", &p, &err));
    EXPECT_FALSE(parse_profile("8 1\n8 2\n", &p, &err));
    EXPECT_EQ(err, "size 8 bytes appears twice");
    EXPECT_FALSE(parse_profile("# only comments\n", &p, &err));
}

TEST(Json, ParsesWhatWeWriteAndReportsErrors) {
    Baseline b;
    std::string err;
    ASSERT_TRUE(baseline_from_json(R"({"format": "twohop-rc-baseline", "host": "x\"y", "ports": [],
                                      "profile": [{"bytes": 8, "avg_latency_us": 2.5}], "d": null})",
                                   &b, &err))
        << err;
    EXPECT_EQ(b.host, "x\"y");
    ASSERT_EQ(b.profile.size(), 1u);
    EXPECT_DOUBLE_EQ(b.profile[0].avg_latency_us, 2.5);
    EXPECT_FALSE(baseline_from_json("{\"a\": 1,\n \"b\" 2}", &b, &err));
    EXPECT_EQ(err, "line 2, column 6: syntax error while parsing object separator - unexpected "
                   "number literal; expected ':'");
    EXPECT_FALSE(baseline_from_json("[1, 2", &b, &err));
    EXPECT_FALSE(baseline_from_json("{} x", &b, &err));
}

TEST(Baseline, RoundTripAndVerdicts) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", 3);
    t.set("mlx5_0", 1, "port_xmit_wait", 10);
    t.set("mlx5_0", 1, "local_ack_timeout_err", 0, true);
    Baseline b;
    b.host = "node01";
    b.recorded_unix = 1700000000;
    b.counters = take_snapshot(t.root());
    b.profile = {{8, 4.0}, {1048576, 180.0}};
    Baseline back;
    std::string err;
    ASSERT_TRUE(baseline_from_json(baseline_to_json(b), &back, &err)) << err;
    EXPECT_EQ(back.host, "node01");
    ASSERT_EQ(back.counters.ports.size(), 1u);
    EXPECT_EQ(back.counters.ports[0].find("symbol_error")->value, 3u);
    EXPECT_TRUE(back.counters.ports[0].find("local_ack_timeout_err")->hw);
    ASSERT_EQ(back.profile.size(), 2u);

    CompareOptions opt;
    std::ostringstream os;
    // Nothing changed, same profile: PASS.
    EXPECT_EQ(compare_baseline(back, take_snapshot(t.root()), b.profile, opt, os),
              CompareVerdict::Pass)
        << os.str();
    // Only congestion rose: WARN.
    t.set("mlx5_0", 1, "port_xmit_wait", 5000);
    EXPECT_EQ(compare_baseline(back, take_snapshot(t.root()), b.profile, opt, os),
              CompareVerdict::Warn);
    // 1 MiB is 50% slower: FAIL, and the line says SLOWER.
    std::ostringstream slow;
    t.set("mlx5_0", 1, "port_xmit_wait", 10);
    EXPECT_EQ(
        compare_baseline(back, take_snapshot(t.root()), {{8, 4.1}, {1048576, 270.0}}, opt, slow),
        CompareVerdict::Fail);
    EXPECT_NE(slow.str().find("            1048576        180.00        270.00   +50.0%     "
                              "3883.6  SLOWER\n"),
              std::string::npos)
        << slow.str();
    EXPECT_NE(slow.str().find("verdict: FAIL (tolerance 10.0%)"), std::string::npos);
    // A retransmission counter rose: FAIL even with a good profile.
    t.set("mlx5_0", 1, "local_ack_timeout_err", 2, true);
    EXPECT_EQ(compare_baseline(back, take_snapshot(t.root()), b.profile, opt, os),
              CompareVerdict::Fail);
}

TEST(Baseline, RejectsForeignJson) {
    Baseline b;
    std::string err;
    EXPECT_FALSE(baseline_from_json("{\"format\": \"other\"}", &b, &err));
    EXPECT_EQ(err,
              "not a twohop-rc baseline (\"format\" is missing or not \"twohop-rc-baseline\")");
    EXPECT_FALSE(baseline_from_json("{\"format\": \"twohop-rc-baseline\"}", &b, &err));
    EXPECT_EQ(err, "\"ports\" is missing or not an array");
    EXPECT_FALSE(baseline_from_json("not json", &b, &err));
}

TEST(Plan, InfiniBandDefaults) {
    PlanInput in;
    in.rtt_us = 2;
    in.msg_bytes = 262144; // 2 nodes, 1 shard: 131072-byte chunks -> rendezvous, 2 WRs each
    Plan p;
    std::string err;
    ASSERT_TRUE(make_plan(in, &p, &err)) << err;
    EXPECT_EQ(validate(p.settings), "");
    EXPECT_EQ(p.settings.rc_path_mtu, 4096);
    EXPECT_EQ(p.settings.rc_timeout, 18); // UCX's default floor dominates 8 x 2 us (t = 2)
    EXPECT_EQ(p.settings.rc_retry_count, 7);
    EXPECT_EQ(p.settings.rc_tx_queue_len, 0); // 2 x (2 x 2) = 8 <= UCX default 256: unset
    EXPECT_EQ(p.settings.rc_rx_queue_len, 0);
    EXPECT_EQ(p.settings.rc_tx_cq_moderation, 0);
    EXPECT_EQ(mca_args(p.settings), "--mca coll_twohop_rc_path_mtu 4096 --mca "
                                    "coll_twohop_rc_timeout 18 --mca coll_twohop_rc_retry_count 7");
}

TEST(Plan, LongRttRoceManyPeersEagerOnlyAndStagger) {
    PlanInput in;
    in.rtt_us = 10000; // 10 ms: 8 x rtt needs t = 15, floor 18
    in.msg_bytes = 1 << 20;
    in.inflight = 4;
    in.peers = 60;
    in.roce = true;
    in.rails = 4;
    in.stagger = 1;
    Plan p;
    std::string err;
    ASSERT_TRUE(make_plan(in, &p, &err)) << err;
    EXPECT_EQ(p.settings.rc_path_mtu, 1024);
    EXPECT_EQ(p.settings.rc_timeout, 18);
    EXPECT_EQ(p.settings.rc_tx_queue_len, 0); // 524288-byte chunks go rendezvous: 4 x 2 WRs
    EXPECT_EQ(p.settings.rc_stagger, 1);
    // With rendezvous off (UCX_RNDV_THRESH=inf) each chunk is ceil(524288 / 8256) = 64 bcopy
    // fragments: 4 x 64 = 256 WRs -> 512 -> send queue 512; 60 peers x 256 = 15360 -> 16383.
    in.rndv_thresh = ~0ull;
    ASSERT_TRUE(make_plan(in, &p, &err)) << err;
    EXPECT_EQ(p.settings.rc_tx_queue_len, 512);
    EXPECT_EQ(p.settings.rc_tx_cq_moderation, 64);
    EXPECT_EQ(p.settings.rc_rx_queue_len, 16383);
    // A lower floor is honoured, and the plan says it undercuts UCX.
    in.floor_exp = 14;
    ASSERT_TRUE(make_plan(in, &p, &err)) << err;
    EXPECT_EQ(p.settings.rc_timeout, 15);
    bool noted = false;
    for (const std::string &w : p.why)
        noted = noted || w.rfind("note: exponent 15 is below UCX's default 18", 0) == 0;
    EXPECT_TRUE(noted);
}

TEST(Plan, RejectsBadInputNamingIt) {
    PlanInput in;
    Plan p;
    std::string err;
    in.rtt_us = 0;
    in.msg_bytes = 1;
    EXPECT_FALSE(make_plan(in, &p, &err));
    EXPECT_EQ(err, "--rtt-us: value 0 is out of range (0, 1000000] microseconds");
    in.rtt_us = 2;
    in.msg_bytes = 0;
    EXPECT_FALSE(make_plan(in, &p, &err));
    EXPECT_EQ(err, "--msg-bytes: value 0 is out of range 1..2147483648 (IB max message 2 GiB)");
    in.msg_bytes = 1 << 30;
    in.inflight = 64;
    in.rndv_thresh = ~0ull;
    EXPECT_FALSE(make_plan(in, &p, &err));
    EXPECT_NE(err.find("exceeds 32768; lower --inflight or raise --wr-bytes"), std::string::npos)
        << err;
}
