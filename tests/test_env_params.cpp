// The PMPI library's settings: TWOHOP_<NAME> environment variables parsed into
// struct twohop_params (pmpi/env_params.h), with a fake environment.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "env_params.h"

namespace {

using Env = std::map<std::string, std::string>;

const char *lookup(void *ctx, const char *name) {
    const Env &env = *static_cast<Env *>(ctx);
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
}

struct Parsed {
    twohop_params p{};
    int rc = 0;
    std::string err;
    explicit Parsed(Env env) {
        char buf[512];
        rc = twohop_env_params_parse(&p, lookup, &env, buf, sizeof buf);
        err = buf;
    }
    ~Parsed() { twohop_env_params_free(&p); }
};

} // namespace

TEST(EnvParams, NamesAreUpperCaseWithPrefix) {
    char name[64];
    twohop_env_name("segment_bytes", name, sizeof name);
    EXPECT_STREQ(name, "TWOHOP_SEGMENT_BYTES");
    twohop_env_name("rc_path_mtu", name, 10);
    EXPECT_STREQ(name, "TWOHOP_RC");  // truncated, terminated
}

TEST(EnvParams, DefaultsAreTheParameterTable) {
    Parsed d(Env{});
    ASSERT_EQ(d.rc, 0);
    EXPECT_EQ(d.p.priority, 45);
    EXPECT_EQ(d.p.segment_bytes, 1048576u);
    EXPECT_EQ(d.p.pipeline_depth, 2);
    EXPECT_FALSE(d.p.test_poisoned_memory);
    ASSERT_NE(d.p.virtual_nodes, nullptr);
    EXPECT_STREQ(d.p.virtual_nodes, "");
}

TEST(EnvParams, EveryKindIsRead) {
    Parsed d(Env{{"TWOHOP_SEGMENT_BYTES", "256k"},
                 {"TWOHOP_PIPELINE_DEPTH", " 4 "},
                 {"TWOHOP_PRIORITY", "-1"},
                 {"TWOHOP_TEST_POISONED_MEMORY", "Yes"},
                 {"TWOHOP_VIRTUAL_NODES", "block:2"},
                 {"TWOHOP_SMALL_MSG_BYTES", "0"},
                 {"OTHER_SEGMENT_BYTES", "7"}});
    ASSERT_EQ(d.rc, 0) << d.err;
    EXPECT_EQ(d.p.segment_bytes, 262144u);
    EXPECT_EQ(d.p.pipeline_depth, 4);
    EXPECT_EQ(d.p.priority, -1);
    EXPECT_TRUE(d.p.test_poisoned_memory);
    EXPECT_STREQ(d.p.virtual_nodes, "block:2");
    EXPECT_EQ(d.p.small_msg_bytes, 0u);
}

TEST(EnvParams, InvalidValueNamesTheVariableAndKeepsDefaults) {
    for (const auto &[var, val] : std::vector<std::pair<std::string, std::string>>{
             {"TWOHOP_SEGMENT_BYTES", "1 MiB"},
             {"TWOHOP_SEGMENT_BYTES", "-4096"},
             {"TWOHOP_SEGMENT_BYTES", "k"},
             {"TWOHOP_PIPELINE_DEPTH", "2x"},
             {"TWOHOP_PIPELINE_DEPTH", ""},
             {"TWOHOP_PRIORITY", "99999999999"},
             {"TWOHOP_TEST_POISONED_MEMORY", "maybe"}}) {
        Parsed d(Env{{var, val}, {"TWOHOP_VIRTUAL_NODES", "rr:2"}});
        EXPECT_EQ(d.rc, -1) << var << "=" << val;
        EXPECT_NE(d.err.find(var), std::string::npos) << d.err;
        EXPECT_EQ(d.p.segment_bytes, 1048576u);
        EXPECT_EQ(d.p.pipeline_depth, 2);
        EXPECT_STREQ(d.p.virtual_nodes, "");
    }
}

TEST(EnvParams, SizeArithmeticIs64Bit) {
    size_t v = 0;
    EXPECT_EQ(twohop_parse_size("4g", &v), 0);
    EXPECT_EQ(v, size_t{4} << 30);
    EXPECT_EQ(twohop_parse_size("18446744073709551615", &v), 0);
    EXPECT_EQ(v, SIZE_MAX);
    EXPECT_EQ(twohop_parse_size("18446744073709551616", &v), -1);  // 2^64
    EXPECT_EQ(twohop_parse_size("17179869184G", &v), -1);          // 2^64 bytes
    EXPECT_EQ(twohop_parse_size("3 m", &v), -1);
    int i = 0;
    EXPECT_EQ(twohop_parse_int("2147483647", &i), 0);
    EXPECT_EQ(i, INT_MAX);
    EXPECT_EQ(twohop_parse_int("2147483648", &i), -1);
    EXPECT_EQ(twohop_parse_int("-2147483648", &i), 0);
    EXPECT_EQ(i, INT_MIN);
}

TEST(EnvParams, HashSeparatesSettingsAndMatchesEqualOnes) {
    Parsed a(Env{{"TWOHOP_VIRTUAL_NODES", "block:2"}});
    Parsed b(Env{{"TWOHOP_VIRTUAL_NODES", "block:2"}});
    Parsed c(Env{{"TWOHOP_VIRTUAL_NODES", "block:3"}});
    Parsed d(Env{{"TWOHOP_SEGMENT_BYTES", "1048576"}});  // the default, spelled out
    Parsed e(Env{{"TWOHOP_SEGMENT_BYTES", "1m"}});
    Parsed f(Env{{"TWOHOP_SEGMENT_BYTES", "2m"}});
    EXPECT_EQ(twohop_params_hash(&a.p), twohop_params_hash(&b.p));
    EXPECT_NE(twohop_params_hash(&a.p), twohop_params_hash(&c.p));
    EXPECT_EQ(twohop_params_hash(&d.p), twohop_params_hash(&e.p));
    EXPECT_NE(twohop_params_hash(&e.p), twohop_params_hash(&f.p));
}
