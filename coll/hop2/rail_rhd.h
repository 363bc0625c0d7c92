/*
 * RhdOp: hop 2 of a pipeline shard by Rabenseifner's algorithm (recursive-halving
 * reduce-scatter, recursive-doubling allgather; plan/rhd_plan.h gives the schedule), advanced
 * as a non-blocking state machine like RingOp. 2 log2(n) steps (+ fold and unfold for n not a
 * power of two) instead of the ring's 2 (n - 1), with the ring's bandwidth term: the algorithm
 * for many nodes (docs/cost_model.md). Every member ends with the same bits.
 * Receives match without the `last` bit and fail with TWOHOP_ERR_MISMATCH when the partner's
 * differs or the length is not the expected one; a failed partner endpoint fails with
 * TWOHOP_ERR_TRANSPORT.
 */
#ifndef TWOHOP_RAIL_RHD_H
#define TWOHOP_RAIL_RHD_H

#include <cstdint>
#include <vector>

#include "reducer.h"
#include "rhd_plan.h"
#include "step_op.h"
#include "worker.h"

namespace twohop {

class RhdOp : public StepOp {
  public:
    /*
     * Starts the allreduce of data[0 .. items*item_bytes) (in place) among n members, this one
     * at position pos; peers[q] is the endpoint to position q (needed for every rhd_partners
     * entry); scratch holds the whole vector. last_mask / last as for RingOp. Returns a
     * twohop_status.
     */
    int start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
              char *data, uint64_t items, const Reducer *red, char *scratch, uint64_t tag_base,
              uint64_t last_mask, bool last);

  private:
    int post_step() override;
    bool partner_failed() const override;
    bool received_ok() const override;
    int finish_step() override;
    /* Bytes offset and length of chunks [first, first + count) of the P chunks. */
    void range(int first, int count, uint64_t *off, uint64_t *len) const;

    const std::vector<const ucx::Endpoint *> *peers_ = nullptr;
    const Reducer *red_ = nullptr;
    char *data_ = nullptr, *scratch_ = nullptr;
    uint64_t items_ = 0, tag_base_ = 0, last_mask_ = 0, expect_bytes_ = 0;
    int pos_ = 0, p2_ = 1;
    std::vector<RhdStep> steps_;
};

} // namespace twohop

#endif
