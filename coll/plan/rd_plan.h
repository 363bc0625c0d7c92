/*
 * The schedule of recursive doubling among n members (positions 0..n-1), for any n, in pure
 * arithmetic (unit-tested; no MPI, no UCX). Standard folding for n not a power of two (as in
 * R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of collective communication operations in
 * MPICH", IJHPCA 19(1), 2005): with m the largest power of two <= n,
 *   fold      position p >= m sends its vector to p - m and waits for the result;
 *             position p < n - m receives it and combines (its own partial first);
 *   exchange  for k = 0 .. log2(m) - 1 the positions p < m exchange partials with p XOR 2^k and
 *             both compute (lower position's partial) op (higher position's partial);
 *   unfold    position p < n - m sends the result to p + m.
 * Every combination has the same operands in the same order on both sides, so every member
 * ends with the same bits. Steps: 1 fold + log2(m) exchanges + 1 unfold (fold/unfold only when
 * n is not a power of two): ceil(log2 n) + 2 at most, against 2 (n - 1) for a ring.
 */
#ifndef TWOHOP_RD_PLAN_H
#define TWOHOP_RD_PLAN_H

#include <vector>

namespace twohop {

/* One step of one member: the partner, and what this member does. */
struct RdStep {
    enum Kind { SendOnly, RecvCombine, Exchange, RecvResult, SendResult };
    Kind kind;
    int partner;
    int tag; // step number, the same on both sides of a transfer
};

/* Largest power of two <= n (n >= 1). */
inline int rd_pow2_floor(int n) {
    int m = 1;
    while (m * 2 <= n) m *= 2;
    return m;
}

/* The steps of position pos among n members, in order (empty for n == 1). */
inline std::vector<RdStep> rd_schedule(int n, int pos) {
    std::vector<RdStep> s;
    if (n <= 1) return s;
    const int m = rd_pow2_floor(n);
    int log2m = 0;
    while ((1 << log2m) < m) ++log2m;
    const int unfold_tag = log2m + 1;
    if (pos >= m) { // folded away: hand the vector over, get the result back
        s.push_back({RdStep::SendOnly, pos - m, 0});
        s.push_back({RdStep::RecvResult, pos - m, unfold_tag});
        return s;
    }
    if (pos < n - m) s.push_back({RdStep::RecvCombine, pos + m, 0});
    for (int k = 0; k < log2m; ++k) s.push_back({RdStep::Exchange, pos ^ (1 << k), k + 1});
    if (pos < n - m) s.push_back({RdStep::SendResult, pos + m, unfold_tag});
    return s;
}

/* The partners of a schedule's steps (any step type with a `partner`), without duplicates, in
 * order of first use: the endpoints a member must connect. */
template <class Step> std::vector<int> schedule_partners(const std::vector<Step> &steps) {
    std::vector<int> p;
    for (const Step &st : steps) {
        bool seen = false;
        for (int q : p) seen = seen || q == st.partner;
        if (!seen) p.push_back(st.partner);
    }
    return p;
}

/* Every partner position pos talks to (for connecting endpoints), without duplicates. */
inline std::vector<int> rd_partners(int n, int pos) { return schedule_partners(rd_schedule(n, pos)); }

} // namespace twohop

#endif
