#include "virtual_nodes.h"

#include <gtest/gtest.h>

using namespace twohop;

namespace {
std::vector<long> parse_ok(const std::string &spec, int n) {
    std::vector<long> out;
    std::string err;
    EXPECT_TRUE(parse_virtual_nodes(spec, n, &out, &err)) << err;
    return out;
}
std::string parse_err(const std::string &spec, int n) {
    std::vector<long> out;
    std::string err;
    EXPECT_FALSE(parse_virtual_nodes(spec, n, &out, &err)) << spec;
    return err;
}
} // namespace

TEST(VirtualNodes, Block) {
    EXPECT_EQ(parse_ok("block:2", 4), std::vector<long>({0, 0, 1, 1}));
    EXPECT_EQ(parse_ok("block:2", 5), std::vector<long>({0, 0, 0, 1, 1}));
    EXPECT_EQ(parse_ok("block:3", 3), std::vector<long>({0, 1, 2}));
}

TEST(VirtualNodes, RoundRobin) {
    EXPECT_EQ(parse_ok("rr:2", 5), std::vector<long>({0, 1, 0, 1, 0}));
}

TEST(VirtualNodes, SizesAndList) {
    EXPECT_EQ(parse_ok("sizes:1,4,2", 7), std::vector<long>({0, 1, 1, 1, 1, 2, 2}));
    EXPECT_EQ(parse_ok("list:0,1,0,2,1,0", 6), std::vector<long>({0, 1, 0, 2, 1, 0}));
}

TEST(VirtualNodes, ErrorsNameTheProblem) {
    EXPECT_NE(parse_err("sizes:2,2", 5).find("add up to 4"), std::string::npos);
    EXPECT_NE(parse_err("list:0,1", 3).find("2 entries"), std::string::npos);
    EXPECT_NE(parse_err("block:0", 3).find(">= 1"), std::string::npos);
    EXPECT_NE(parse_err("block:9", 3).find("larger"), std::string::npos);
    EXPECT_NE(parse_err("mesh:2", 3).find("unknown placement"), std::string::npos);
    EXPECT_NE(parse_err("block", 3).find("expected"), std::string::npos);
    EXPECT_NE(parse_err("rr:-1", 3).find("non-negative"), std::string::npos);
    EXPECT_NE(parse_err("rr:2,", 3).find("non-negative"), std::string::npos);
    EXPECT_NE(parse_err("list:99999999999,0", 2).find("non-negative"), std::string::npos);
    EXPECT_NE(parse_err("sizes:1", 3).find("coll_twohop_virtual_nodes 'sizes:1'"),
              std::string::npos);
}
