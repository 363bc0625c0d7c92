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
    return begin(w, steps_.size());
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

bool RhdOp::partner_failed() const {
    return (*peers_)[steps_[step_].partner]->failed.load(std::memory_order_acquire);
}

bool RhdOp::received_ok() const {
    return received_as_expected(expect_bytes_, tag_base_, last_mask_);
}

int RhdOp::finish_step() {
    const RhdStep &st = steps_[step_];
    if (st.kind != RhdStep::FoldRecv && st.kind != RhdStep::Halve) return TWOHOP_OK;
    // (lower position's partial) op (higher position's partial), on both sides of a halving
    // step and for the fold (the receiver is the lower position).
    uint64_t off, len;
    range(st.recv_first, st.recv_count, &off, &len);
    const uint64_t items = len / red_->item_bytes();
    if (pos_ < st.partner) return red_->combine(data_ + off, scratch_, data_ + off, items);
    const int rc = red_->combine(scratch_, data_ + off, scratch_, items);
    if (rc == TWOHOP_OK) std::memcpy(data_ + off, scratch_, len);
    return rc;
}

} // namespace twohop
