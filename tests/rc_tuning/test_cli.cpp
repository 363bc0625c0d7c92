/* The built twohop-rc binary run on the fixture trees in tests/rc_tuning/fixtures. */
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

struct Result {
    int status = -1;
    std::string out; // stdout and stderr together
};

class Cli : public ::testing::Test {
  protected:
    void SetUp() override {
        const char *cli = std::getenv("TWOHOP_RC_CLI");
        const char *fix = std::getenv("TWOHOP_RC_FIXTURES");
        if (cli == nullptr || fix == nullptr) {
            GTEST_SKIP() << "TWOHOP_RC_CLI / TWOHOP_RC_FIXTURES not set (run through meson test)";
        }
        cli_ = cli;
        fix_ = fix;
    }
    Result run(const std::string &args) {
        Result r;
        std::string cmd = cli_ + " " + args + " 2>&1";
        FILE *p = popen(cmd.c_str(), "r");
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
            r.out.append(buf, n);
        int st = pclose(p);
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        return r;
    }
    std::string cli_, fix_;
};

} // namespace

TEST_F(Cli, HelpAndBadInput) {
    Result r = run("--help");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out.rfind("usage: twohop-rc [--sysfs-root DIR] [--devices LIST] COMMAND", 0), 0u);
    EXPECT_EQ(run("").status, 1);
    r = run("frobnicate");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out.rfind("twohop-rc: unknown command 'frobnicate'\n", 0), 0u);
    r = run("plan --rtt-us abc --msg-bytes 1");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "twohop-rc plan: --rtt-us: 'abc' is not a number\n");
    r = run("plan --rtt-us 2");
    EXPECT_EQ(r.out, "twohop-rc plan: --rtt-us and --msg-bytes are required\n");
    r = run("plan --rtt-us 2 --msg-bytes 4096 --link fddi");
    EXPECT_EQ(r.out, "twohop-rc plan: --link 'fddi' must be ib or roce\n");
    r = run("watch --interval 0.01 --sysfs-root " + fix_ + "/job_begin");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "twohop-rc watch: --interval 0.01 is out of range 0.1..3600 seconds\n");
    r = run("--devices mlx5_0:zz snapshot");
    EXPECT_EQ(r.out, "twohop-rc: --devices: device 'mlx5_0:zz': port 'zz' is not a number in "
                     "1..255 (expected device or device:port)\n");
    r = run("baseline compare --baseline /nonexistent/base.json");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "twohop-rc baseline compare: /nonexistent/base.json: cannot open: No such "
                     "file or directory\n");
    r = run("plan --rtt-us 0 --msg-bytes 5");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "twohop-rc plan: --rtt-us: value 0 is out of range (0, 1000000] "
                     "microseconds\n");
    r = run("snapshot --bogus 1");
    EXPECT_EQ(r.out, "twohop-rc snapshot: unknown option --bogus\n");
}

TEST_F(Cli, NoRdmaDevice) {
    Result r = run("--sysfs-root " + fix_ + "/nonexistent snapshot");
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.out, "no RDMA device: " + fix_ + "/nonexistent/class/infiniband does not exist\n");
}

TEST_F(Cli, Snapshot) {
    Result r = run("--sysfs-root " + fix_ + "/job_end --devices mlx5_1 snapshot");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out.rfind("mlx5_1 port 1 (4: ACTIVE, 100 Gb/sec (4X EDR), InfiniBand)\n"
                          "  counters/\n",
                          0),
              0u)
        << r.out;
    EXPECT_NE(r.out.find("    local_link_integrity_errors                        15  link "
                         "integrity           SATURATED at the 4-bit maximum: true value is at "
                         "least this\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("    port_xmit_data                              250002000  traffic"
                         "                  = 1.00 GB (4-byte words)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("  hw_counters/  (missing)\n"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("mlx5_0"), std::string::npos);
}

TEST_F(Cli, WatchOnAStaticTree) {
    Result r = run("--sysfs-root " + fix_ + "/job_begin watch --interval 0.1 --duration 0.2");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "watching 2 port(s) under " + fix_ +
                         "/job_begin/class/infiniband, 2 round(s) of 0.1 s; '!' marks a rising "
                         "error counter, '?' an inconclusive one\n"
                         "[    0.1 s] no counter changed\n"
                         "[    0.2 s] no counter changed\n"
                         "done: error counters rose in 0 of 2 round(s)\n");
}

TEST_F(Cli, BaselineRecordAndCompare) {
    char tmpl[] = "/tmp/twohop_rc_base.XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    const std::string base = tmpl;
    Result r = run("--sysfs-root " + fix_ + "/job_begin baseline record --output " + base +
                   " --profile " + fix_ + "/profile_base.txt");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "baseline: 2 port(s), 4 profile size(s) written to " + base + "\n");

    // Same tree, same profile: PASS.
    r = run("--sysfs-root " + fix_ + "/job_begin baseline compare --baseline " + base +
            " --profile " + fix_ + "/profile_base.txt");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("verdict: PASS (tolerance 10.0%)\n"), std::string::npos) << r.out;

    // The degraded tree and profile: FAIL with the diagnosis and the slower sizes.
    r = run("--sysfs-root " + fix_ + "/job_end baseline compare --baseline " + base +
            " --profile " + fix_ + "/profile_now.txt");
    EXPECT_EQ(r.status, 4) << r.out;
    EXPECT_NE(r.out.find("  → mlx5_0 port 1: symbol errors rose by 57 since the baseline → CRC "
                         "drops → Go-Back-N retransmissions; check the cable or transceiver\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("  → mlx5_1 port 1: local link integrity errors rose by at least 6 (the "
                         "4-bit counter saturated at 15)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("SLOWER"), std::string::npos);
    EXPECT_NE(r.out.find("verdict: FAIL (tolerance 10.0%)\n"), std::string::npos);
    std::remove(base.c_str());
}

TEST_F(Cli, Plan) {
    Result r = run("plan --rtt-us 2 --msg-bytes 262144 --inflight 2 --rails 2 --stagger 1");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out,
              "# twohop-rc plan: rtt 2 us, 262144-byte segments, 2 in flight, InfiniBand\n"
              "#   path MTU 4096: fewest packets per message on InfiniBand\n"
              "#   timeout exponent 18 = 1.074 s (8 x rtt needs 2; floor 18 = UCX default 1 s; "
              "NCCL uses 20)\n"
              "#   retry 7: a dead link is reported after 8.590 s nominal, 34.360 s worst case "
              "(4 x timeout x (retry + 1))\n"
              "#   hop-2 message 131072 bytes = ceil(262144 / 1 shards / 2 nodes): rendezvous "
              "(RTS + RDMA read), 2 work request(s) each\n"
              "#   send queue: UCX default 256 covers 2 x 4 in-flight work requests (2 x 2)\n"
              "#   receive queue: UCX default 4095 covers 1 peers x 4 work requests\n"
              "#   stagger 1 over 2 processes (local ranks): exponents 18..19, the slowest "
              "reports a dead link after 68.719 s worst case\n"
              "\n"
              "# as MCA parameters (twohop's own UCP context only):\n"
              "--mca coll_twohop_rc_path_mtu 4096 --mca coll_twohop_rc_timeout 18 --mca "
              "coll_twohop_rc_retry_count 7 --mca coll_twohop_rc_stagger 1\n"
              "\n"
              "# as UCX environment (every UCX user in the process; the environment wins over "
              "coll_twohop_rc_*):\n"
              "# process with local rank 0:\n"
              "UCX_RC_PATH_MTU=4096\n"
              "UCX_RC_TIMEOUT=1073741.824us\n"
              "UCX_RC_RETRY_COUNT=7\n"
              "# process with local rank 1:\n"
              "UCX_RC_TIMEOUT=2147483.648us\n");
}
