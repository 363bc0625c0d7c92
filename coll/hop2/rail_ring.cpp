#include "rail_ring.h"

#include "segment_plan.h"

namespace twohop {

char *RingOp::chunk_ptr(int c, uint64_t *items) const {
    const Range r = split_even(items_, static_cast<uint64_t>(n_), static_cast<uint64_t>(c));
    *items = r.count;
    return data_ + r.offset * red_->item_bytes();
}

int RingOp::start(ucx::Worker *w, const ucx::Endpoint *right, const ucx::Endpoint *left, int n,
                  int pos, char *data, uint64_t items, const Reducer *red, char *scratch,
                  uint64_t tag_base, uint64_t last_mask, bool last) {
    last_mask_ = last_mask;
    if (last) tag_base |= last_mask;
    right_ = right;
    left_ = left;
    n_ = n;
    pos_ = pos;
    data_ = data;
    items_ = items;
    red_ = red;
    scratch_ = scratch;
    tag_base_ = tag_base;
    return begin(w, 2 * static_cast<size_t>(n - 1));
}

int RingOp::post_step() {
    const int t = static_cast<int>(step_);
    const bool rs = t < n_ - 1;
    const int u = rs ? t : t - (n_ - 1);
    const int send_c = rs ? ((pos_ - t) % n_ + n_) % n_ : ((pos_ + 1 - u) % n_ + n_) % n_;
    recv_chunk_ = rs ? ((pos_ - t - 1) % n_ + 2 * n_) % n_ : ((pos_ - u) % n_ + n_) % n_;
    uint64_t send_items, recv_items;
    char *send_p = chunk_ptr(send_c, &send_items);
    char *recv_p = chunk_ptr(recv_chunk_, &recv_items);
    const uint64_t ib = red_->item_bytes();
    const uint64_t tag = tag_base_ | static_cast<uint64_t>(t);
    expect_bytes_ = recv_items * ib;
    sending_ = receiving_ = true;
    // Matched without the `last` bit; advance() compares it (see twohop_comm's tag layout).
    int rc = w_->recv(rs ? scratch_ : recv_p, recv_items * ib, tag, &recv_, ~last_mask_);
    if (rc != TWOHOP_OK) return rc;
    return w_->send(right_->ep, send_p, send_items * ib, tag, &send_);
}

bool RingOp::partner_failed() const {
    return right_->failed.load(std::memory_order_acquire) ||
           left_->failed.load(std::memory_order_acquire);
}

bool RingOp::received_ok() const {
    return received_as_expected(expect_bytes_, tag_base_, last_mask_);
}

int RingOp::finish_step() {
    if (step_ >= static_cast<size_t>(n_ - 1)) return TWOHOP_OK; // allgather: in place
    // Reduce-scatter: fold the partial result of the ring so far in.
    uint64_t items;
    char *mine = chunk_ptr(recv_chunk_, &items);
    return red_->combine(scratch_, mine, mine, items);
}

} // namespace twohop
