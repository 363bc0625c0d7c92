/* Rose / unchanged / inconclusive on fixture trees: saturated before the job, a 32-bit hw counter
 * that wraps, a legacy 32-bit data counter stuck at 2^32 - 1; verdicts never use inconclusive
 * data. */
#include "counter_delta.h"
#include "rc_api.h"
#include "report_devices.h"
#include "sysfs_tree.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <sstream>
#include <cstdlib>

using namespace twohop::rc;

namespace {

SnapshotDelta job(SysfsTree &t, const std::function<void()> &during) {
    Snapshot a = take_snapshot(t.root());
    during();
    return diff(a, take_snapshot(t.root()));
}

std::string report(SysfsTree &t, const char *devices, const std::function<void()> &during) {
    twohop_rc_report *r = twohop_rc_report_begin(t.root().c_str(), devices);
    during();
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    twohop_rc_report_end(r, f);
    std::fclose(f);
    std::string s(buf, len);
    std::free(buf);
    return s;
}

} // namespace

/* The case: a 4-bit counter saturated months ago must not make every job a link fault. */
TEST(CounterOutcomes, SaturatedBeforeTheJobIsInconclusiveNotALinkFault) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "local_link_integrity_errors", 15); // 4-bit maximum
    t.set("mlx5_0", 1, "symbol_error", 65535);             // 16-bit maximum
    t.set("mlx5_0", 1, "port_xmit_wait", 10);
    SnapshotDelta d = job(t, [] {});
    const PortDelta &p = d.ports[0];
    EXPECT_EQ(p.find("local_link_integrity_errors")->kind, DeltaKind::SaturatedBefore);
    EXPECT_EQ(p.find("symbol_error")->outcome(), Outcome::Inconclusive);
    EXPECT_EQ(p.find("port_xmit_wait")->outcome(), Outcome::Unchanged);
    EXPECT_EQ(verdict(d), Verdict::Inconclusive);

    // A real rise elsewhere decides the verdict; the saturated counters do not escalate it.
    d = job(t, [&t] { t.set("mlx5_0", 1, "port_xmit_wait", 500); });
    EXPECT_EQ(verdict(d), Verdict::Congestion);

    std::string out = report(t, "mlx5_0", [] {});
    EXPECT_NE(out.find("verdict: inconclusive\n"), std::string::npos) << out;
    EXPECT_NE(out.find("  link integrity          : clean\n"), std::string::npos) << out;
    EXPECT_NE(out.find("local link integrity errors inconclusive during the job: unknown (already "
                       "saturated at 15 before; clear with perfquery -R)"),
              std::string::npos)
        << out;
}

/* mlx5 hw_counters are 32-bit Q counters that wrap: a decrease is a wrap or a reset, not a rise
 * and not a 64-bit "reset". */
TEST(CounterOutcomes, HwCounterWrapAt32BitsIsInconclusive) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "local_ack_timeout_err", 4294967290ull, /*hw=*/true);
    t.set("mlx5_0", 1, "out_of_sequence", 100, /*hw=*/true);
    t.set("mlx5_0", 1, "rx_write_requests", 4294967295ull, /*hw=*/true); // uncatalogued hw counter
    SnapshotDelta d = job(t, [&t] {
        t.set("mlx5_0", 1, "local_ack_timeout_err", 5, true);
        t.set("mlx5_0", 1, "out_of_sequence", 100, true);
        t.set("mlx5_0", 1, "rx_write_requests", 3, true);
    });
    const PortDelta &p = d.ports[0];
    const CounterDelta *c = p.find("local_ack_timeout_err");
    EXPECT_EQ(c->kind, DeltaKind::Wrapped);
    EXPECT_EQ(c->delta, 11u); // 5 + 2^32 - 4294967290
    EXPECT_EQ(c->outcome(), Outcome::Inconclusive);
    EXPECT_EQ(c->amount(), "unknown (went from 4294967290 to 5: +11 if the 32-bit counter wrapped "
                           "once, or a reset)");
    EXPECT_EQ(p.find("rx_write_requests")->kind, DeltaKind::Wrapped); // default for hw_counters/
    EXPECT_EQ(p.find("rx_write_requests")->delta, 4u);
    EXPECT_EQ(p.find("out_of_sequence")->outcome(), Outcome::Unchanged);
    EXPECT_EQ(verdict(d), Verdict::Inconclusive); // not "retransmissions"

    // A hw counter at 2^32 - 1 is not saturated: it keeps counting (wraps).
    t.set("mlx5_0", 1, "local_ack_timeout_err", 4294967294ull, true);
    d = job(t, [&t] { t.set("mlx5_0", 1, "local_ack_timeout_err", 4294967295ull, true); });
    EXPECT_EQ(d.ports[0].find("local_ack_timeout_err")->kind, DeltaKind::Exact);
    EXPECT_EQ(verdict(d), Verdict::Retransmission);
}

/* A legacy HCA without PortCountersExtended holds port_xmit_data in 32 bits, saturating. */
TEST(CounterOutcomes, LegacyDataCounterStuckAt2To32Minus1IsSaturated) {
    SysfsTree t;
    t.add_port("mlx5_0", 1, /*hw=*/false);
    t.set("mlx5_0", 1, "port_xmit_data", 4294967295ull);
    t.set("mlx5_0", 1, "port_rcv_data", 4294967000ull);
    t.set("mlx5_0", 1, "port_xmit_packets", 4294967296ull); // beyond 32 bits: a 64-bit counter
    SnapshotDelta d = job(t, [&t] {
        t.set("mlx5_0", 1, "port_rcv_data", 4294967295ull);
        t.set("mlx5_0", 1, "port_xmit_packets", 4294967300ull);
    });
    const PortDelta &p = d.ports[0];
    EXPECT_EQ(p.find("port_xmit_data")->kind, DeltaKind::SaturatedBefore);
    EXPECT_EQ(p.find("port_xmit_data")->outcome(), Outcome::Inconclusive);
    EXPECT_EQ(p.find("port_rcv_data")->kind, DeltaKind::AtLeast);
    EXPECT_EQ(p.find("port_rcv_data")->delta, 295u);
    EXPECT_EQ(p.find("port_xmit_packets")->kind, DeltaKind::Exact);
    EXPECT_EQ(p.find("port_xmit_packets")->delta, 4u);
    // Traffic counters are context: they never make a verdict, conclusive or not.
    EXPECT_EQ(verdict(d), Verdict::Clean);
    std::ostringstream os;
    print_delta(os, d, "during the job");
    EXPECT_NE(os.str().find("  port_xmit_data: unknown (already saturated at 4294967295 before"),
              std::string::npos)
        << os.str();
    EXPECT_EQ(os.str().find("sent "), std::string::npos) << os.str(); // no byte count from it
}

/* The per-job report reads only the job's UCX devices and names them. */
TEST(ReportDevices, UcxNetDevicesRestrictsTheReport) {
    SysfsTree t;
    t.add_port("mlx5_0", 1); // the job's HCA
    t.add_port("mlx5_1", 1); // a storage adapter with a failing cable
    setenv("UCX_NET_DEVICES", "mlx5_0:1,eth0", 1);
    std::string out = report(t, nullptr, [&t] {
        t.set("mlx5_1", 1, "symbol_error", 40);
        t.set("mlx5_0", 1, "port_xmit_data", 1000);
    });
    unsetenv("UCX_NET_DEVICES");
    EXPECT_NE(out.find("1 port(s) over "), std::string::npos) << out;
    EXPECT_NE(out.find("verdict: clean\n  devices: mlx5_0:1,eth0 (UCX_NET_DEVICES)\n"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("mlx5_1"), std::string::npos) << out;
    EXPECT_NE(out.find("  eth0: not found under "), std::string::npos) << out;
}

TEST(ReportDevices, SourcesInOrder) {
    auto env = [](const char *v) {
        return EnvLookup([v](const char *) { return v; });
    };
    std::vector<UcxResource> res = {{"rc_mlx5", "mlx5_0:1"}, {"ud_mlx5", "mlx5_4:1"},
                                    {"rc_verbs", "mlx5_0:1"}, {"dc_mlx5", "mlx5_2:1"},
                                    {"tcp", "eth0"}};
    JobDevices d = job_devices("mlx5_3", env("mlx5_0"), res);
    EXPECT_EQ(d.list, "mlx5_3");
    d = job_devices(nullptr, env("mlx5_0:1"), res);
    EXPECT_EQ(d.list, "mlx5_0:1");
    EXPECT_EQ(d.source, "UCX_NET_DEVICES");
    d = job_devices(nullptr, env("all"), res); // UCX's default value means "ask UCX"
    EXPECT_EQ(d.list, "mlx5_0:1,mlx5_2:1");
    EXPECT_EQ(d.source, "RC/DC devices reported by UCX");
    d = job_devices(nullptr, env(nullptr), {{"tcp", "eth0"}});
    EXPECT_EQ(d.list, "");
    EXPECT_EQ(d.source, "every port (UCX reports no RC/DC device)");
}
