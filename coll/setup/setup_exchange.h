/*
 * Exchange: the collective steps of communicator set-up (allgather, agreement), built on the
 * adapter's point-to-point services with twohop's private tag (twohop_host.isend/irecv/test),
 * never on the communicator's own collectives. A rank whose coll selection differs therefore
 * cannot cross-match twohop's set-up traffic with a user allreduce.
 *
 * Allgather is Bruck's dissemination algorithm (ceil(log2 p) rounds; in the round of
 * distance d every rank sends the blocks it holds to rank - d and receives as many from
 * rank + d), see J. Bruck et al., "Efficient algorithms for all-to-all communications in
 * multiport message-passing systems", IEEE TPDS 8(11), 1997. Agreements are allgathers of
 * one value reduced locally in rank order, so every rank computes the same answer.
 *
 * Waiting is bounded: while a receive from rank r is outstanding,
 *   - if r is seen running another allreduce on the communicator (host.foreign_pending), the
 *     exchange fails with TWOHOP_ERR_MISMATCH and a message naming r (not inside a fiber:
 *     there r may legitimately run its later collectives already);
 *   - with timeout_s > 0, after timeout_s seconds without completion it fails with
 *     TWOHOP_ERR_TIMEOUT.
 * On failure outstanding requests are cancelled; the caller must turn the failure into an MPI
 * error (the ranks can no longer agree on a fallback).
 * Inside a Fiber (fiber.h) every unsuccessful test yields to the fiber's caller instead of
 * spinning.
 */
#ifndef TWOHOP_SETUP_EXCHANGE_H
#define TWOHOP_SETUP_EXCHANGE_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "twohop_core.h"

namespace twohop {

class Exchange {
  public:
    /* rank/size in the communicator; timeout_s <= 0 waits without a time limit. */
    Exchange(const twohop_host &host, int rank, int size, double timeout_s)
        : h_(host), rank_(rank), size_(size), timeout_s_(timeout_s) {}

    /* all[r * bytes ..) = rank r's `mine` (bytes each), for every rank r. */
    int allgather(const void *mine, void *all, std::size_t bytes, std::string *err);
    /* *agreed = 1 when `failed` is non-zero on some rank. */
    int agree_or(int failed, int *agreed, std::string *err);
    /* *out = the largest `v` over all ranks. */
    int agree_max(uint64_t v, uint64_t *out, std::string *err);

    /* Seconds a wait for one peer lasts before the one-time notice (default kSlowNotice). */
    void set_notice_after(double s) { notice_after_s_ = s; }
    /*
     * After 10 s without a set-up message (or send completion) from a peer, the exchange says
     * once, at the default verbosity, whom it waits for and what to check: a rank whose
     * allreduce component differs and only receives (coll/basic's root) is otherwise a silent
     * hang. Not an error: a slow but correct job goes on.
     */
    static constexpr double kSlowNotice = 10.0;

  private:
    int wait(void *req, int peer, void *other, std::string *err);

    const twohop_host &h_;
    int rank_, size_;
    double timeout_s_;
    double notice_after_s_ = kSlowNotice;
    bool noticed_ = false;
};

} // namespace twohop

#endif
