/*
 * The schedule of Rabenseifner's allreduce (recursive-halving reduce-scatter, then
 * recursive-doubling allgather) among n members, for any n, in pure arithmetic (unit-tested).
 * Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations in MPICH",
 * IJHPCA 19(1), 2005, with the same folding as rd_plan.h: with P the largest power of two <= n,
 *   fold      position p >= P sends its whole vector to p - P and waits for the result;
 *             position p < n - P receives it and combines ((its own) op (received));
 *   halving   for mask = P/2, P/4, .., 1 the positions p < P split their current block of the
 *             P chunks in two; the lower position keeps the lower half, the higher one the upper
 *             half; each sends the half it gives up and combines the half it keeps as
 *             (lower position's partial) op (higher position's partial);
 *             position p ends owning chunk p, reduced over all members;
 *   doubling  for mask = 1, 2, .., P/2 the positions exchange their blocks (the block doubles);
 *   unfold    position p < n - P sends the whole result to p + P.
 * The vector is cut into P chunks by split_even(items, P, c). Steps: 2 log2(P) (+ fold and unfold),
 * each moving at most half the vector; every chunk is combined in one fixed order and copied to
 * everyone, so every member ends with the same bits.
 */
#ifndef TWOHOP_RHD_PLAN_H
#define TWOHOP_RHD_PLAN_H

#include <vector>

#include "rd_plan.h"

namespace twohop {

struct RhdStep {
    enum Kind { FoldSend, FoldRecv, Halve, Double, UnfoldSend, UnfoldRecv };
    Kind kind;
    int partner;
    int tag;             // step number, the same on both sides of a transfer
    // Chunk ranges [first, first + count) of the P chunks: what this member sends and what it
    // receives (Halve: receives the partner's partial of the half it keeps; Double: receives
    // the partner's finished block). Fold and unfold move the whole vector (all P chunks).
    int send_first, send_count;
    int recv_first, recv_count;
};

/* The steps of position pos among n members, in order (empty for n == 1). */
inline std::vector<RhdStep> rhd_schedule(int n, int pos) {
    std::vector<RhdStep> s;
    if (n <= 1) return s;
    const int P = rd_pow2_floor(n);
    int log2p = 0;
    while ((1 << log2p) < P) ++log2p;
    const int unfold_tag = 2 * log2p + 1;
    if (pos >= P) {
        s.push_back({RhdStep::FoldSend, pos - P, 0, 0, P, 0, 0});
        s.push_back({RhdStep::UnfoldRecv, pos - P, unfold_tag, 0, 0, 0, P});
        return s;
    }
    if (pos < n - P) s.push_back({RhdStep::FoldRecv, pos + P, 0, 0, 0, 0, P});
    int first = 0, count = P, tag = 1;
    for (int mask = P / 2; mask >= 1; mask /= 2, ++tag) {
        const int half = count / 2;
        const bool lower = (pos & mask) == 0;
        const int keep_first = lower ? first : first + half;
        const int give_first = lower ? first + half : first;
        s.push_back({RhdStep::Halve, pos ^ mask, tag, give_first, half, keep_first, half});
        first = keep_first;
        count = half;
    }
    for (int mask = 1; mask < P; mask *= 2, ++tag) {
        const bool lower = (pos & mask) == 0;
        const int partner_first = lower ? first + count : first - count;
        s.push_back({RhdStep::Double, pos ^ mask, tag, first, count, partner_first, count});
        first = lower ? first : partner_first;
        count *= 2;
    }
    if (pos < n - P) s.push_back({RhdStep::UnfoldSend, pos + P, unfold_tag, 0, P, 0, 0});
    return s;
}

/* Every partner position pos talks to, without duplicates. */
inline std::vector<int> rhd_partners(int n, int pos) {
    return schedule_partners(rhd_schedule(n, pos));
}

} // namespace twohop

#endif
