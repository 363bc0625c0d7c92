/*
 * The recursive-doubling schedule (plan/rd_plan.h) for every member count 1..33, simulated
 * with message queues: every send meets a receive of the same step at its partner, and every
 * member ends with the sum of all inputs, combined in the same order everywhere.
 */
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "rd_plan.h"

namespace {

using twohop::RdStep;

TEST(RdPlan, EveryMemberEndsWithTheSameFullResult) {
    for (int n = 1; n <= 70; ++n) {
        std::vector<std::vector<RdStep>> sched(n);
        for (int p = 0; p < n; ++p) sched[p] = twohop::rd_schedule(n, p);
        // value: the set of inputs combined so far, as a string "lower op higher" expression
        std::vector<std::string> val(n);
        for (int p = 0; p < n; ++p) val[p] = std::to_string(p);
        std::map<std::tuple<int, int, int>, std::deque<std::string>> wire; // (from, to, tag)
        std::vector<size_t> at(n, 0);
        std::vector<bool> sent(n, false); // current step's send already done
        bool progress = true;
        while (progress) {
            progress = false;
            for (int p = 0; p < n; ++p) {
                if (at[p] == sched[p].size()) continue;
                const RdStep &st = sched[p][at[p]];
                const bool sends = st.kind != RdStep::RecvCombine && st.kind != RdStep::RecvResult;
                const bool recvs = st.kind != RdStep::SendOnly && st.kind != RdStep::SendResult;
                if (sends && !sent[p]) {
                    wire[{p, st.partner, st.tag}].push_back(val[p]);
                    sent[p] = true;
                    progress = true;
                }
                if (recvs) {
                    auto &q = wire[{st.partner, p, st.tag}];
                    if (q.empty()) continue;
                    const std::string in = q.front();
                    q.pop_front();
                    if (st.kind == RdStep::RecvResult) {
                        val[p] = in;
                    } else {
                        val[p] = p < st.partner ? "(" + val[p] + "+" + in + ")"
                                                : "(" + in + "+" + val[p] + ")";
                    }
                }
                ++at[p];
                sent[p] = false;
                progress = true;
            }
        }
        for (int p = 0; p < n; ++p) {
            ASSERT_EQ(at[p], sched[p].size()) << "n=" << n << " member " << p << " stuck";
            EXPECT_EQ(val[p], val[0]) << "n=" << n << " member " << p;
        }
        for (int k = 0; k < n; ++k) {
            EXPECT_NE(val[0].find(std::to_string(k)), std::string::npos) << "n=" << n;
        }
        for (auto &w : wire) EXPECT_TRUE(w.second.empty()) << "n=" << n << ": message left over";
        // log2 steps, not a ring's 2 (n - 1)
        int log2n = 0;
        while ((1 << log2n) < n) ++log2n;
        for (int p = 0; p < n; ++p) EXPECT_LE(sched[p].size(), size_t(log2n + 2)) << "n=" << n;
    }
}

TEST(RdPlan, PartnersAreDistinctAndInRange) {
    for (int n = 2; n <= 70; ++n) {
        for (int p = 0; p < n; ++p) {
            for (int q : twohop::rd_partners(n, p)) {
                EXPECT_GE(q, 0);
                EXPECT_LT(q, n);
                EXPECT_NE(q, p);
            }
        }
    }
}

} // namespace
