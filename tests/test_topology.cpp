#include "topology.h"

#include <gtest/gtest.h>

using namespace twohop;

TEST(Topology, SingleNode) {
    Topology t = build_topology({7, 7, 7, 7}, 2);
    EXPECT_EQ(t.n_nodes(), 1);
    EXPECT_EQ(t.local_rank, 2);
    EXPECT_EQ(t.local_size(), 4);
    EXPECT_EQ(t.n_shards(), 4);
    EXPECT_EQ(t.my_shards(), std::vector<int>({2}));
    EXPECT_EQ(t.rail(2), std::vector<int>({2}));
}

TEST(Topology, InterleavedRanksNeedNotBeConsecutive) {
    // ranks 0,2,4 on host A; 1,3,5 on host B
    Topology t = build_topology({5, 9, 5, 9, 5, 9}, 3);
    EXPECT_EQ(t.n_nodes(), 2);
    EXPECT_EQ(t.my_node, 1);
    EXPECT_EQ(t.local_rank, 1);
    EXPECT_EQ(t.node_ranks[0], std::vector<int>({0, 2, 4}));
    EXPECT_EQ(t.node_ranks[1], std::vector<int>({1, 3, 5}));
    EXPECT_EQ(t.rail(1), std::vector<int>({2, 3}));
}

TEST(Topology, NodesNumberedByLowestRank) {
    Topology t = build_topology({42, 42, 1, 3}, 0);
    EXPECT_EQ(t.node_of, std::vector<int>({0, 0, 1, 2}));
}

TEST(Topology, UnevenNodesEveryShardHasOneOwnerPerNode) {
    // 1 + 4 + 2 ranks: 4 shards; the single-rank node owns all 4, the 2-rank node 2 each.
    std::vector<uint64_t> keys = {0, 1, 1, 1, 1, 2, 2};
    Topology t0 = build_topology(keys, 0);
    EXPECT_EQ(t0.n_shards(), 4);
    EXPECT_EQ(t0.my_shards(), std::vector<int>({0, 1, 2, 3}));
    Topology t6 = build_topology(keys, 6);
    EXPECT_EQ(t6.local_rank, 1);
    EXPECT_EQ(t6.my_shards(), std::vector<int>({1, 3}));
    for (int s = 0; s < 4; ++s) {
        std::vector<int> rail = t0.rail(s);
        ASSERT_EQ(rail.size(), 3u);
        EXPECT_EQ(rail[0], 0);
        EXPECT_EQ(rail[1], 1 + s);
        EXPECT_EQ(rail[2], 5 + s % 2);
    }
    // every shard of every node is owned by exactly one of that node's ranks
    for (int node = 0; node < 3; ++node) {
        std::vector<int> owners(4, 0);
        for (int r : t0.node_ranks[node]) {
            for (int s : build_topology(keys, r).my_shards()) owners[s]++;
        }
        EXPECT_EQ(owners, std::vector<int>({1, 1, 1, 1}));
    }
}

TEST(Topology, OneRankPerNode) {
    Topology t = build_topology({1, 2, 3, 4}, 2);
    EXPECT_EQ(t.n_nodes(), 4);
    EXPECT_EQ(t.n_shards(), 1);
    EXPECT_EQ(t.my_shards(), std::vector<int>({0}));
    EXPECT_EQ(t.rail(0), std::vector<int>({0, 1, 2, 3}));
}
