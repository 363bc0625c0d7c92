/*
 * RdOp: hop 2 of the latency path by recursive doubling among the node leaders (plan/rd_plan.h
 * gives the schedule), advanced as a non-blocking state machine like RingOp. log2(n) exchange
 * steps (+ fold and unfold for n not a power of two) instead of the ring's 2 (n - 1): the
 * latency algorithm for small messages on many nodes. Every member ends with the same bits.
 * Every message carries the caller's 64-bit call word after the vector (message bytes and
 * item size, schedule/slots.h: call_word): a received message of another length or word — a
 * rank that passed another count or item size, even of the same total bytes — fails with
 * TWOHOP_ERR_MISMATCH; a failed partner endpoint fails with TWOHOP_ERR_TRANSPORT.
 */
#ifndef TWOHOP_RAIL_RD_H
#define TWOHOP_RAIL_RD_H

#include <cstdint>
#include <vector>

#include "rd_plan.h"
#include "reducer.h"
#include "step_op.h"
#include "worker.h"

namespace twohop {

class RdOp : public StepOp {
  public:
    /*
     * Starts the allreduce of data[0 .. items*item_bytes) (in place) among n members, this one
     * at position pos; peers[q] is the endpoint to position q (needed for every rd_partners
     * entry); `word` travels with every message and must match on every member. Returns a
     * twohop_status. The op's own send and receive buffers grow on first use.
     */
    int start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
              char *data, uint64_t items, const Reducer *red, uint64_t word, uint64_t tag_base);

  private:
    int post_step() override;
    bool partner_failed() const override;
    bool received_ok() const override;
    int finish_step() override;

    const std::vector<const ucx::Endpoint *> *peers_ = nullptr;
    const Reducer *red_ = nullptr;
    char *data_ = nullptr;
    std::vector<char> send_buf_, recv_buf_; // vector + call word
    uint64_t bytes_ = 0, tag_base_ = 0, word_ = 0;
    int pos_ = 0;
    std::vector<RdStep> steps_;
};

} // namespace twohop

#endif
