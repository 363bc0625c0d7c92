/* Port-counter snapshots, deltas, diagnosis, watch and the per-job report on generated trees. */
#include "counter_delta.h"
#include "counter_watch.h"
#include "port_snapshot.h"
#include "rc_api.h"
#include "sysfs_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <unistd.h>

using namespace twohop::rc;

namespace {

std::string report_text(twohop_rc_report *r, int *rc) {
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    *rc = twohop_rc_report_end(r, f);
    std::fclose(f);
    std::string s(buf, len);
    std::free(buf);
    return s;
}

std::string printed(const SnapshotDelta &d) {
    std::ostringstream os;
    print_delta(os, d, "during the job");
    return os.str();
}

} // namespace

TEST(PortCounters, NormalCountersDeltaAndDiagnosis) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", 3);
    t.set("mlx5_0", 1, "port_xmit_data", 1000);
    t.set("mlx5_0", 1, "local_ack_timeout_err", 0, true);
    Snapshot a = take_snapshot(t.root());
    ASSERT_TRUE(a.has_rdma);
    ASSERT_EQ(a.ports.size(), 1u);
    EXPECT_EQ(a.ports[0].state, "4: ACTIVE");
    EXPECT_TRUE(a.ports[0].has_hw_counters);

    t.set("mlx5_0", 1, "symbol_error", 60);
    t.set("mlx5_0", 1, "port_xmit_data", 251000);
    t.set("mlx5_0", 1, "local_ack_timeout_err", 4, true);
    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    ASSERT_EQ(d.ports.size(), 1u);
    const CounterDelta *sym = d.ports[0].find("symbol_error");
    ASSERT_NE(sym, nullptr);
    EXPECT_EQ(sym->kind, DeltaKind::Exact);
    EXPECT_EQ(sym->delta, 57u);
    EXPECT_EQ(sym->cls, CounterClass::LinkIntegrity);
    EXPECT_EQ(d.ports[0].find("port_xmit_data")->delta, 250000u); // words; bytes = x4
    EXPECT_EQ(verdict(d), Verdict::LinkFault);

    auto lines = diagnose(d.ports[0], "during the job");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], "mlx5_0 port 1: symbol errors rose by 57 during the job → CRC drops → "
                        "Go-Back-N retransmissions; check the cable or transceiver");
    EXPECT_EQ(lines[1].rfind("mlx5_0 port 1: ACK timeouts rose by 4 during the job", 0), 0u);
    std::string out = printed(d);
    EXPECT_NE(out.find("mlx5_0 port 1 (ACTIVE, 200 Gb/sec (4X HDR), InfiniBand): sent 1.00 MB"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("  link integrity          : symbol_error +57\n"), std::string::npos);
    EXPECT_NE(out.find("  congestion              : clean\n"), std::string::npos);
}

TEST(PortCounters, SaturatedNarrowCounterIsAtLeastNeverZero) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", 65000);             // 16-bit
    t.set("mlx5_0", 1, "local_link_integrity_errors", 15); // 4-bit, saturated already
    t.set("mlx5_0", 1, "link_downed", 200);                // 8-bit
    Snapshot a = take_snapshot(t.root());
    t.set("mlx5_0", 1, "symbol_error", 65535);
    t.set("mlx5_0", 1, "link_downed", 255);
    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    const PortDelta &p = d.ports[0];

    EXPECT_EQ(p.find("symbol_error")->kind, DeltaKind::AtLeast);
    EXPECT_EQ(p.find("symbol_error")->delta, 535u);
    EXPECT_TRUE(p.find("symbol_error")->rose());
    EXPECT_EQ(p.find("link_downed")->kind, DeltaKind::AtLeast);
    EXPECT_EQ(p.find("link_downed")->delta, 55u);
    // Saturated before and after: neither a zero delta nor a rise -- inconclusive.
    EXPECT_EQ(p.find("local_link_integrity_errors")->kind, DeltaKind::SaturatedBefore);
    EXPECT_EQ(p.find("local_link_integrity_errors")->outcome(), Outcome::Inconclusive);
    EXPECT_FALSE(p.find("local_link_integrity_errors")->rose());

    auto lines = diagnose(p, "during the job"); // inconclusive first, then catalogue order
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], "mlx5_0 port 1: local link integrity errors inconclusive during the job: "
                        "unknown (already saturated at 15 before; clear with perfquery -R); not "
                        "counted in the verdict");
    lines.erase(lines.begin());
    lines.push_back("");
    EXPECT_NE(lines[0].find("symbol errors rose by at least 535 (the 16-bit counter saturated at "
                            "65535)"),
              std::string::npos);
    EXPECT_EQ(lines[1], "mlx5_0 port 1: link-down events rose by at least 55 (the 8-bit counter "
                        "saturated at 255) during the job → QPs on the link stalled until timeout "
                        "× (retry+1) ran out; check the cable, the switch port and the subnet "
                        "manager log");
}

TEST(PortCounters, CounterResetIsInconclusive) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "port_rcv_errors", 500);
    Snapshot a = take_snapshot(t.root());
    t.set("mlx5_0", 1, "port_rcv_errors", 7);
    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    const CounterDelta *c = d.ports[0].find("port_rcv_errors");
    EXPECT_EQ(c->kind, DeltaKind::Reset);
    EXPECT_EQ(c->delta, 7u);
    EXPECT_EQ(c->outcome(), Outcome::Inconclusive);
    EXPECT_EQ(c->amount(), "unknown (reset from 500 to 7)");
    EXPECT_EQ(verdict(d), Verdict::Inconclusive);
}

TEST(PortCounters, MissingHwCounters) {
    SysfsTree t;
    t.add_port("mlx5_0", 1, /*hw=*/false);
    t.set("mlx5_0", 1, "port_xmit_wait", 10);
    Snapshot a = take_snapshot(t.root());
    EXPECT_FALSE(a.ports[0].has_hw_counters);
    EXPECT_TRUE(a.ports[0].has_counters);
    t.set("mlx5_0", 1, "port_xmit_wait", 1010);
    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    EXPECT_EQ(verdict(d), Verdict::Congestion);
    std::string out = printed(d);
    EXPECT_NE(out.find("(no hw_counters: transport retransmission counters unavailable)"),
              std::string::npos);
    EXPECT_NE(out.find("congestion              : port_xmit_wait +1000"), std::string::npos);
}

TEST(PortCounters, GarbageValuesAreUnreadableWithReason) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", "N/A\n");
    t.set("mlx5_0", 1, "link_downed", "");
    t.set("mlx5_0", 1, "port_rcv_errors", "12abc\n");
    t.set("mlx5_0", 1, "port_xmit_discards", "-5\n");
    t.set("mlx5_0", 1, "port_xmit_data", "99999999999999999999\n"); // > 2^64
    t.set("mlx5_0", 1, "port_rcv_data", "  42  \n");                // whitespace is fine
    Snapshot a = take_snapshot(t.root());
    const PortSnapshot &p = a.ports[0];
    EXPECT_EQ(p.find("symbol_error")->error, "not a number: 'N/A'");
    EXPECT_EQ(p.find("link_downed")->error, "not a number: ''");
    EXPECT_EQ(p.find("port_rcv_errors")->error, "not a number: '12abc'");
    EXPECT_EQ(p.find("port_xmit_discards")->error, "not a number: '-5'");
    EXPECT_EQ(p.find("port_xmit_data")->error, "does not fit 64 bits: '99999999999999999999'");
    EXPECT_TRUE(p.find("port_rcv_data")->ok);
    EXPECT_EQ(p.find("port_rcv_data")->value, 42u);

    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    const CounterDelta *c = d.ports[0].find("symbol_error");
    EXPECT_EQ(c->kind, DeltaKind::Unreadable);
    EXPECT_FALSE(c->rose());
    EXPECT_NE(printed(d).find("symbol errors inconclusive"),
              std::string::npos);
}

TEST(PortCounters, UnreadableFilesDirectoryAndDanglingSymlink) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    std::filesystem::create_directory(t.port_dir("mlx5_0", 1) + "/counters/symbol_error");
    std::filesystem::create_symlink("/nonexistent/twohop",
                                    t.port_dir("mlx5_0", 1) + "/hw_counters/out_of_sequence");
    Snapshot a = take_snapshot(t.root());
    const PortSnapshot &p = a.ports[0];
    EXPECT_EQ(p.find("symbol_error")->error, "is a directory, not a counter file");
    EXPECT_EQ(p.find("out_of_sequence")->error, "cannot stat: No such file or directory");
}

TEST(PortCounters, PermissionDeniedFile) {
    if (geteuid() == 0) {
        GTEST_SKIP() << "running as root: chmod 000 does not stop root from reading; the "
                        "directory and dangling-symlink cases cover unreadable files";
    }
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", 1);
    std::string f = t.port_dir("mlx5_0", 1) + "/counters/symbol_error";
    std::filesystem::permissions(f, std::filesystem::perms::none);
    Snapshot a = take_snapshot(t.root());
    EXPECT_EQ(a.ports[0].find("symbol_error")->error, "cannot open: Permission denied");
}

TEST(PortCounters, DeviceDisappearsOrAppearsBetweenSnapshots) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.add_port("mlx5_1", 1);
    t.set("mlx5_0", 1, "symbol_error", 1);
    t.set("mlx5_1", 1, "symbol_error", 1);
    Snapshot a = take_snapshot(t.root());
    t.remove_device("mlx5_1");
    t.add_port("mlx5_2", 1);
    t.set("mlx5_0", 1, "symbol_error", 2);
    Snapshot b = take_snapshot(t.root());
    SnapshotDelta d = diff(a, b);
    ASSERT_EQ(d.ports.size(), 3u);
    EXPECT_EQ(d.ports[0].presence, Presence::Both);
    EXPECT_EQ(d.ports[0].find("symbol_error")->delta, 1u);
    EXPECT_EQ(d.ports[1].presence, Presence::Vanished);
    EXPECT_EQ(d.ports[2].presence, Presence::Appeared);
    EXPECT_EQ(diagnose(d.ports[1], "during the job")[0],
              "mlx5_1 port 1: disappeared during the job (device removed, driver reloaded or "
              "reset): inconclusive, not counted in the verdict");
    EXPECT_EQ(verdict(d), Verdict::LinkFault); // symbol_error rose on mlx5_0
    d.ports.erase(d.ports.begin());
    EXPECT_EQ(verdict(d), Verdict::Inconclusive); // a vanished port alone is no link fault

    // The whole class directory vanishing: every port is reported gone, no crash.
    std::filesystem::remove_all(t.root() + "/class");
    SnapshotDelta gone = diff(b, take_snapshot(t.root()));
    for (const PortDelta &p : gone.ports)
        EXPECT_EQ(p.presence, Presence::Vanished);
}

TEST(PortCounters, CounterVanishesButDeviceStays) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "out_of_sequence", 5, true);
    Snapshot a = take_snapshot(t.root());
    std::filesystem::remove_all(t.port_dir("mlx5_0", 1) + "/hw_counters");
    SnapshotDelta d = diff(a, take_snapshot(t.root()));
    EXPECT_EQ(d.ports[0].find("out_of_sequence")->kind, DeltaKind::Gone);
    EXPECT_FALSE(d.ports[0].has_hw_counters);
}

TEST(PortCounters, DeviceFilter) {
    DeviceFilter f;
    std::string err;
    ASSERT_TRUE(parse_device_filter("mlx5_0:1, mlx5_2", &f, &err));
    EXPECT_TRUE(f.matches("mlx5_0", 1));
    EXPECT_FALSE(f.matches("mlx5_0", 2));
    EXPECT_TRUE(f.matches("mlx5_2", 7));
    EXPECT_FALSE(f.matches("mlx5_1", 1));
    EXPECT_FALSE(parse_device_filter("mlx5_0:x", &f, &err));
    EXPECT_EQ(err, "device 'mlx5_0:x': port 'x' is not a number in 1..255 (expected device or "
                   "device:port)");
    EXPECT_FALSE(parse_device_filter(":1", &f, &err));
}

TEST(PortCounters, WatchHighlightsRisingErrorCounters) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "symbol_error", 0);
    t.set("mlx5_0", 1, "port_xmit_data", 0);
    WatchOptions o;
    o.root = t.root();
    o.interval_s = 1;
    o.duration_s = 3;
    int round = 0;
    std::ostringstream os;
    int alarms = run_watch(o, os, [&](double) {
        ++round;
        if (round == 2) {
            t.set("mlx5_0", 1, "symbol_error", 9);
            t.set("mlx5_0", 1, "port_xmit_data", 250000);
        }
    });
    EXPECT_EQ(alarms, 1);
    EXPECT_EQ(os.str(),
              "watching 1 port(s) under " + t.root() +
                  "/class/infiniband, 3 round(s) of 1.0 s; '!' marks a rising error counter, '?' an inconclusive one\n"
                  "[    1.0 s] no counter changed\n"
                  "[    2.0 s] mlx5_0 port 1: port_xmit_data +1.00 MB, !symbol_error +9\n"
                  "[    3.0 s] no counter changed\n"
                  "done: error counters rose in 1 of 3 round(s)\n");
}

TEST(PortCounters, WatchReportsAStuckSaturatedCounterOnce)
{
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.set("mlx5_0", 1, "local_link_integrity_errors", 15); // 4-bit maximum
    WatchOptions o;
    o.root = t.root();
    o.interval_s = 1;
    o.duration_s = 2;
    std::ostringstream os;
    EXPECT_EQ(run_watch(o, os, [](double) {}), 0); // inconclusive: no alarm
    EXPECT_NE(os.str().find("[    1.0 s] mlx5_0 port 1: ?local_link_integrity_errors unknown "
                            "(already saturated at 15 before; clear with perfquery -R)\n"
                            "[    2.0 s] no counter changed\n"),
              std::string::npos)
        << os.str();
}

TEST(RcReport, NoRdmaDevicePrintsOneLine) {
    SysfsTree t; // empty: no class/infiniband
    int rc = 0;
    std::string out = report_text(twohop_rc_report_begin(t.root().c_str(), nullptr), &rc);
    EXPECT_EQ(rc, TWOHOP_RC_ENODEV);
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
    EXPECT_NE(out.find("no RDMA device (" + t.root() + "/class/infiniband missing)"),
              std::string::npos)
        << out;
}

TEST(RcReport, ClassifiedDeltasOfTheJob) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    t.add_port("mlx5_1", 1);
    t.set("mlx5_0", 1, "symbol_error", 0);
    t.set("mlx5_1", 1, "symbol_error", 0);
    twohop_rc_report *r = twohop_rc_report_begin(t.root().c_str(), "mlx5_0,mlx5_9");
    t.set("mlx5_0", 1, "symbol_error", 57);
    t.set("mlx5_1", 1, "symbol_error", 3); // not used by the job: filtered out
    int rc = 0;
    std::string out = report_text(r, &rc);
    EXPECT_EQ(rc, TWOHOP_RC_OK);
    EXPECT_NE(out.find("1 port(s) over "), std::string::npos) << out;
    EXPECT_NE(out.find("verdict: link fault\n"), std::string::npos) << out;
    EXPECT_NE(out.find("  mlx5_9: not found under " + t.root() + "/class/infiniband\n"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("  → mlx5_0 port 1: symbol errors rose by 57 during the job → CRC drops "
                       "→ Go-Back-N retransmissions; check the cable or transceiver\n"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("mlx5_1"), std::string::npos) << out;
}

TEST(RcReport, DeviceDisappearsDuringTheJob) {
    SysfsTree t;
    t.add_port("mlx5_0", 1);
    twohop_rc_report *r = twohop_rc_report_begin(t.root().c_str(), "");
    t.remove_device("mlx5_0");
    int rc = 0;
    std::string out = report_text(r, &rc);
    EXPECT_EQ(rc, TWOHOP_RC_OK);
    EXPECT_NE(out.find("mlx5_0 port 1: VANISHED"), std::string::npos) << out;
}

TEST(RcReport, NullHandle) {
    int rc = 0;
    std::string out = report_text(nullptr, &rc);
    EXPECT_EQ(rc, TWOHOP_RC_EIO);
    EXPECT_NE(out.find("no report: begin was not called or failed"), std::string::npos);
}
