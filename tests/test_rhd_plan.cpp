// Rabenseifner's schedule (rhd_plan.h), simulated without MPI for n = 1..70: symbolic partial
// sums show every member ends with every element reduced over all members exactly once, in the
// same combination order on every member; transfers match pairwise.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "rhd_plan.h"

using twohop::RhdStep;

namespace {

// A member's vector of P chunks, each an expression string ("(0+1)") of the members combined.
using Vec = std::vector<std::string>;

std::vector<Vec> simulate(int n) {
    const int P = twohop::rd_pow2_floor(n);
    std::vector<Vec> v(n, Vec(P));
    for (int p = 0; p < n; ++p) {
        for (int c = 0; c < P; ++c) v[p][c] = std::to_string(p);
    }
    std::vector<std::vector<RhdStep>> sched(n);
    size_t maxlen = 0;
    for (int p = 0; p < n; ++p) {
        sched[p] = twohop::rhd_schedule(n, p);
        maxlen = std::max(maxlen, sched[p].size());
    }
    // Execute by tag (all steps of one tag happen "at once": sends read before receives write).
    int max_tag = 0;
    for (auto &s : sched) {
        for (auto &st : s) max_tag = std::max(max_tag, st.tag);
    }
    for (int tag = 0; tag <= max_tag; ++tag) {
        std::map<std::pair<int, int>, Vec> msgs; // (from, to) -> chunks sent
        for (int p = 0; p < n; ++p) {
            for (const RhdStep &st : sched[p]) {
                if (st.tag != tag || st.send_count == 0) continue;
                Vec m(v[p].begin() + st.send_first, v[p].begin() + st.send_first + st.send_count);
                EXPECT_TRUE(msgs.emplace(std::make_pair(p, st.partner), m).second);
            }
        }
        for (int p = 0; p < n; ++p) {
            for (const RhdStep &st : sched[p]) {
                if (st.tag != tag || st.recv_count == 0) continue;
                auto it = msgs.find({st.partner, p});
                EXPECT_NE(it, msgs.end()) << "n " << n << " pos " << p << " tag " << tag;
                if (it == msgs.end()) continue;
                const Vec &m = it->second;
                EXPECT_EQ(int(m.size()), st.recv_count);
                for (int j = 0; j < st.recv_count; ++j) {
                    std::string &mine = v[p][st.recv_first + j];
                    switch (st.kind) {
                    case RhdStep::FoldRecv: mine = "(" + mine + "+" + m[j] + ")"; break;
                    case RhdStep::Halve:
                        mine = p < st.partner ? "(" + mine + "+" + m[j] + ")"
                                              : "(" + m[j] + "+" + mine + ")";
                        break;
                    default: mine = m[j]; break; // Double, UnfoldRecv: take the result
                    }
                }
                msgs.erase(it);
            }
        }
        EXPECT_TRUE(msgs.empty()) << "unreceived message at n " << n << " tag " << tag;
    }
    return v;
}

} // namespace

TEST(RhdPlan, EveryMemberEndsWithTheSameFullResult) {
    for (int n = 1; n <= 70; ++n) {
        const std::vector<Vec> v = simulate(n);
        const int P = twohop::rd_pow2_floor(n);
        for (int c = 0; c < P; ++c) {
            // Every member appears exactly once in chunk c of member 0's result.
            const std::string &e = v[0][c];
            for (int m = 0; m < n; ++m) {
                const std::string tok = std::to_string(m);
                int hits = 0;
                for (size_t i = 0; i < e.size();) {
                    if (isdigit(static_cast<unsigned char>(e[i]))) {
                        size_t j = i;
                        while (j < e.size() && isdigit(static_cast<unsigned char>(e[j]))) ++j;
                        if (e.substr(i, j - i) == tok) ++hits;
                        i = j;
                    } else {
                        ++i;
                    }
                }
                EXPECT_EQ(hits, 1) << "n " << n << " chunk " << c << " member " << m << ": " << e;
            }
            for (int p = 1; p < n; ++p) EXPECT_EQ(v[p][c], e) << "n " << n << " member " << p;
        }
    }
}

TEST(RhdPlan, PartnersAndStepCounts) {
    for (int n = 2; n <= 70; ++n) {
        const int P = twohop::rd_pow2_floor(n);
        int log2p = 0;
        while ((1 << log2p) < P) ++log2p;
        for (int pos = 0; pos < n; ++pos) {
            const auto s = twohop::rhd_schedule(n, pos);
            const bool folded = pos >= P, folds = pos < n - P;
            EXPECT_EQ(int(s.size()), folded ? 2 : 2 * log2p + (folds ? 2 : 0)) << n << " " << pos;
            for (int q : twohop::rhd_partners(n, pos)) {
                EXPECT_GE(q, 0);
                EXPECT_LT(q, n);
                EXPECT_NE(q, pos);
            }
        }
    }
    EXPECT_TRUE(twohop::rhd_schedule(1, 0).empty());
}
