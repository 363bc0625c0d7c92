#include "node_shm.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace twohop;

TEST(ShmLayout, FootprintIndependentOfMessageSize) {
    ShmLayout l;
    l.local_size = 16;
    l.depth = 2;
    l.slot_bytes = 262144;
    // 16 flag lines of 128 bytes and 16 descriptor blocks of 256 bytes, rounded up to 4 KiB
    EXPECT_EQ(l.control_bytes(), 8192u);
    EXPECT_EQ(l.desc_offset(3), 16u * 128u + 3u * 256u);
    EXPECT_EQ(l.total_bytes(), 8192u + 2u * 17u * 262144u);
    EXPECT_EQ(l.slot_offset(1, 0), 8192u + 17u * 262144u);
    EXPECT_EQ(l.result_offset(0), 8192u + 16u * 262144u);
    EXPECT_EQ(l.slot_offset(0, 1) % 4096, 0u);
}

TEST(NodeShm, CreatePrivateAttachUnlink) {
    ShmLayout l;
    l.local_size = 3;
    l.depth = 2;
    l.slot_bytes = 4096;
    const std::string name = "/twohop-unittest-" + std::to_string(getpid());
    std::string err;
    NodeShm leader, other;
    ASSERT_TRUE(leader.create(name, l, &err)) << err;
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    NodeShm dup;
    EXPECT_FALSE(dup.create(name, l, &err)); // exclusive create
    EXPECT_NE(err.find("O_EXCL"), std::string::npos);
    ASSERT_TRUE(other.attach(name, l, &err)) << err;
    leader.unlink();
    EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0); // nothing left behind
    leader.flags(2).arrived.store(41);
    leader.slot(1, 2)[17] = 'x';
    EXPECT_EQ(other.flags(2).arrived.load(), 41u);
    EXPECT_EQ(other.slot(1, 2)[17], 'x');
    EXPECT_EQ(other.flags(0).done.load(), 0u);
}

TEST(NodeShm, AttachToMissingSegmentFails) {
    ShmLayout l{1, 1, 4096};
    NodeShm s;
    std::string err;
    EXPECT_FALSE(s.attach("/twohop-does-not-exist", l, &err));
    EXPECT_NE(err.find("shm_open"), std::string::npos);
}

/* Names: unique per nonce; a dead creator's segment is removed, a live one's is kept. */
TEST(NodeShmNames, StaleSegmentsOfDeadProcessesAreRemoved) {
    const uint64_t ns = twohop::pid_namespace();
    EXPECT_NE(twohop::shm_name(ns, 42, twohop::random_nonce()),
              twohop::shm_name(ns, 42, twohop::random_nonce()));
    char tmpl[] = "/tmp/twohop-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    pid_t child = fork();
    if (child == 0) _exit(0);
    ASSERT_GT(child, 0);
    ASSERT_EQ(waitpid(child, nullptr, 0), child); // its pid is now free (not reused this fast)
    const std::string dead = dir + twohop::shm_name(ns, child, 1);
    const std::string live = dir + twohop::shm_name(ns, getpid(), 2);
    const std::string other_ns = dir + twohop::shm_name(ns + 1, child, 3);
    for (const std::string &f : {dead, live, other_ns}) {
        FILE *fp = std::fopen(f.c_str(), "w");
        ASSERT_NE(fp, nullptr) << f;
        std::fputs("0123456789", fp);
        std::fclose(fp);
    }
    uint64_t bytes = 0;
    EXPECT_EQ(twohop::remove_stale_segments(dir, ns, &bytes), 1);
    EXPECT_EQ(bytes, 10u);
    EXPECT_NE(access(dead.c_str(), F_OK), 0);
    EXPECT_EQ(access(live.c_str(), F_OK), 0);
    EXPECT_EQ(access(other_ns.c_str(), F_OK), 0); // another pid namespace: cannot judge
    std::remove(live.c_str());
    std::remove(other_ns.c_str());
    rmdir(dir.c_str());
}
