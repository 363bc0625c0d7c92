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
    // 16 flag lines and 16 descriptor blocks of 256 bytes each, rounded up to 4 KiB
    EXPECT_EQ(l.control_bytes(), 8192u);
    EXPECT_EQ(l.desc_offset(3), 16u * 256u + 3u * 256u);
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

// ---- Reuse of segments between communicators (shm_cache.h).
#include "shm_cache.h"

namespace {
twohop::ShmOffer offer(uint64_t token, uint64_t shape, uint64_t seq) {
    return twohop::ShmOffer{token, shape, seq};
}
} // namespace

TEST(ShmReuse, EveryLocalRankMustOfferTheSegment) {
    twohop::ShmOffer a[2] = {offer(11, 5, 40), offer(12, 5, 9)};
    twohop::ShmOffer b[2] = {offer(12, 5, 9), offer(11, 5, 40)}; // other order: fine
    twohop::ShmOffer c[2] = {offer(12, 5, 9), offer(0, 0, 0)};   // lacks 11
    EXPECT_EQ(twohop::choose_reuse({a, b}, 5), 11u);             // leader's order first
    EXPECT_EQ(twohop::choose_reuse({a, b, c}, 5), 12u);          // 11 not kept by everyone
    twohop::ShmOffer d[2] = {offer(0, 0, 0), offer(0, 0, 0)};
    EXPECT_EQ(twohop::choose_reuse({a, b, c, d}, 5), 0u);
    EXPECT_EQ(twohop::choose_reuse({d}, 5), 0u);
}

TEST(ShmReuse, ShapeMustMatch) {
    twohop::ShmOffer a[2] = {offer(11, 5, 1), offer(0, 0, 0)};
    EXPECT_EQ(twohop::choose_reuse({a, a}, 6), 0u);
    twohop::ShmLayout l1{4, 2, 4096}, l2{4, 3, 4096};
    const std::vector<uint64_t> m = {1, 2, 3, 4}, rev = {4, 3, 2, 1};
    EXPECT_EQ(twohop::shm_shape(l1, m), twohop::shm_shape(l1, m));
    EXPECT_NE(twohop::shm_shape(l1, m), twohop::shm_shape(l2, m));   // layout
    EXPECT_NE(twohop::shm_shape(l1, m), twohop::shm_shape(l1, rev)); // local order
    EXPECT_NE(twohop::shm_token("/twohop-a"), twohop::shm_token("/twohop-b"));
    EXPECT_NE(twohop::shm_token(""), 0u);
}

TEST(ShmReuse, CacheKeepsTheNewestAndTakeEmptiesIt) {
    twohop::ShmCache cache;
    for (uint64_t i = 1; i <= 3; ++i) {
        twohop::RetainedShm r;
        r.offer = offer(i, 7, 10 * i);
        r.shm.reset(new twohop::NodeShm());
        cache.put(std::move(r));
    }
    EXPECT_EQ(cache.size(), size_t(twohop::kShmOffers));
    std::vector<twohop::RetainedShm> got = cache.take();
    ASSERT_EQ(got.size(), size_t(twohop::kShmOffers));
    EXPECT_EQ(got[0].offer.token, 3u); // most recent first; the oldest (1) was evicted
    EXPECT_EQ(got[1].offer.token, 2u);
    EXPECT_EQ(cache.size(), 0u);       // a concurrent set-up cannot offer them too
    EXPECT_TRUE(cache.take().empty());
}

TEST(ShmReuse, MovedSegmentKeepsItsMapping) {
    twohop::ShmLayout l{2, 1, 4096};
    const std::string name = twohop::shm_name(twohop::pid_namespace(), getpid(), twohop::random_nonce());
    twohop::NodeShm a;
    std::string err;
    ASSERT_TRUE(a.create(name, l, &err)) << err;
    a.flags(1).done.store(77);
    twohop::NodeShm b(std::move(a));
    EXPECT_FALSE(a.mapped());
    ASSERT_TRUE(b.mapped());
    EXPECT_EQ(b.flags(1).done.load(), 77u);
    EXPECT_EQ(b.name(), name);
}
