#include "rail_rhd.h"

#include <cstring>

#include "segment_plan.h"

namespace twohop {

void RhdOp::range(int first, int count, uint64_t *off, uint64_t *len) const {
    const uint64_t ib = red_->item_bytes();
    const uint64_t P = static_cast<uint64_t>(p2_);
    const uint64_t a = split_even(items_, P, static_cast<uint64_t>(first)).offset;
    const uint64_t b = first + count >= p2_ ? items_
                                            : split_even(items_, P, uint64_t(first + count)).offset;
    *off = a * ib;
    *len = (b - a) * ib;
}

int RhdOp::start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
                 char *data, uint64_t items, const Reducer *red, char *scratch,
                 uint64_t tag_base, uint64_t last_mask, bool last) {
    w_ = w;
    peers_ = peers;
    red_ = red;
    data_ = data;
    scratch_ = scratch;
    items_ = items;
    last_mask_ = last_mask;
    tag_base_ = last ? tag_base | last_mask : tag_base;
    pos_ = pos;
    p2_ = rd_pow2_floor(n);
    steps_ = rhd_schedule(n, pos);
    step_ = 0;
    active_ = !steps_.empty();
    return active_ ? post_step() : TWOHOP_OK;
}

int RhdOp::post_step() {
    const RhdStep &st = steps_[step_];
    const uint64_t tag = tag_base_ | static_cast<uint64_t>(st.tag);
    sending_ = st.send_count > 0;
    receiving_ = st.recv_count > 0;
    if (receiving_) {
        uint64_t off, len;
        range(st.recv_first, st.recv_count, &off, &len);
        expect_bytes_ = len;
        // Results land in place; partials to combine go to scratch first.
        const bool combine = st.kind == RhdStep::FoldRecv || st.kind == RhdStep::Halve;
        int rc = w_->recv(combine ? scratch_ : data_ + off, len, tag, &recv_, ~last_mask_);
        if (rc != TWOHOP_OK) return rc;
    }
    if (sending_) {
        uint64_t off, len;
        range(st.send_first, st.send_count, &off, &len);
        return w_->send((*peers_)[st.partner]->ep, data_ + off, len, tag, &send_);
    }
    return TWOHOP_OK;
}

bool RhdOp::cancel(double max_wait_s) {
    active_ = false;
    return w_ == nullptr || w_->cancel(&recv_, &send_, max_wait_s);
}

int RhdOp::advance(bool *finished) {
    *finished = !active_;
    if (!active_) return TWOHOP_OK;
    const RhdStep &st = steps_[step_];
    if ((sending_ && !send_.done) || (receiving_ && !recv_.done)) {
        if ((*peers_)[st.partner]->failed.load(std::memory_order_acquire)) {
            return TWOHOP_ERR_TRANSPORT; // the caller cancels and poisons
        }
        return TWOHOP_OK;
    }
    const int out = ucx::step_outcome(sending_, send_, receiving_, recv_,
                                      recv_.received == expect_bytes_ &&
                                          (recv_.sender_tag & last_mask_) ==
                                              (tag_base_ & last_mask_));
    if (out != TWOHOP_OK) {
        active_ = false;
        return out;
    }
    if (st.kind == RhdStep::FoldRecv || st.kind == RhdStep::Halve) {
        // (lower position's partial) op (higher position's partial), on both sides of a
        // halving step and for the fold (the receiver is the lower position).
        uint64_t off, len;
        range(st.recv_first, st.recv_count, &off, &len);
        const uint64_t items = len / red_->item_bytes();
        int rc;
        if (pos_ < st.partner) {
            rc = red_->combine(data_ + off, scratch_, data_ + off, items);
        } else {
            rc = red_->combine(scratch_, data_ + off, scratch_, items);
            if (rc == TWOHOP_OK) std::memcpy(data_ + off, scratch_, len);
        }
        if (rc != TWOHOP_OK) {
            active_ = false;
            return rc;
        }
    }
    if (++step_ == steps_.size()) {
        active_ = false;
        *finished = true;
        return TWOHOP_OK;
    }
    return post_step();
}

} // namespace twohop
