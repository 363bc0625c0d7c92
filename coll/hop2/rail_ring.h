/*
 * RingOp: hop 2 for one shard of one segment, a ring allreduce among the shard's rail
 * (one rank per node) over UCX tagged messages, advanced as a non-blocking state machine so
 * the caller can run hop 1 of the next segment while it is in flight.
 *
 * Steps (n rail members, member at ring position p, chunk c = split_even(items, n, c)):
 *   step t, 0 <= t < n-1   (reduce-scatter)  send chunk (p-t) mod n to p+1,
 *                          receive chunk (p-t-1) mod n from p-1 into scratch,
 *                          chunk = scratch op chunk
 *   step t, n-1 <= t < 2n-2 (allgather)      send chunk (p+1-u) mod n, receive chunk (p-u)
 *                          mod n in place, u = t-(n-1)
 * After the reduce-scatter, position p holds chunk (p+1) mod n fully reduced; every element
 * is combined in one fixed order along the ring, so all ranks end with the same bits.
 * Tags: tag_base | t (t < 2^14), see twohop_comm::rail_tag. A received chunk of another size
 * than expected (ranks passed different message sizes) fails the ring with
 * TWOHOP_ERR_MISMATCH; a failed neighbour endpoint fails it with TWOHOP_ERR_TRANSPORT.
 */
#ifndef TWOHOP_RAIL_RING_H
#define TWOHOP_RAIL_RING_H

#include <cstdint>

#include "reducer.h"
#include "step_op.h"
#include "worker.h"

namespace twohop {

class RingOp : public StepOp {
  public:
    /*
     * Starts the ring over data[0 .. items*item_bytes) (in place). n >= 2, 0 <= pos < n,
     * scratch holds at least one chunk (ceil(items/n) items). last_mask is the tag bit that
     * marks the call's last segment (set when `last`): receives match without it and fail
     * with TWOHOP_ERR_MISMATCH when the neighbour's differs. Returns a twohop_status.
     */
    int start(ucx::Worker *w, const ucx::Endpoint *right, const ucx::Endpoint *left, int n,
              int pos, char *data, uint64_t items, const Reducer *red, char *scratch,
              uint64_t tag_base, uint64_t last_mask = 0, bool last = false);

  private:
    int post_step() override;
    bool partner_failed() const override;
    bool received_ok() const override;
    int finish_step() override;
    char *chunk_ptr(int c, uint64_t *items) const;

    const ucx::Endpoint *right_ = nullptr, *left_ = nullptr;
    uint64_t expect_bytes_ = 0; // size of the chunk being received
    uint64_t last_mask_ = 0;    // the tag's `last` bit (0: none); tag_base_ has it set when last
    const Reducer *red_ = nullptr;
    char *data_ = nullptr;
    char *scratch_ = nullptr;
    uint64_t items_ = 0, tag_base_ = 0;
    int n_ = 0, pos_ = 0, recv_chunk_ = 0;
};

} // namespace twohop

#endif
