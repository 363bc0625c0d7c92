#include "rail_rd.h"

#include <cstring>

namespace twohop {

int RdOp::start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
                char *data, uint64_t items, const Reducer *red, uint64_t word,
                uint64_t tag_base) {
    peers_ = peers;
    red_ = red;
    data_ = data;
    word_ = word;
    bytes_ = items * red->item_bytes();
    if (send_buf_.size() < bytes_ + sizeof(word_)) {
        send_buf_.resize(bytes_ + sizeof(word_));
        recv_buf_.resize(bytes_ + sizeof(word_));
    }
    tag_base_ = tag_base;
    pos_ = pos;
    steps_ = rd_schedule(n, pos);
    return begin(w, steps_.size());
}

int RdOp::post_step() {
    const RdStep &st = steps_[step_];
    const uint64_t tag = tag_base_ | static_cast<uint64_t>(st.tag);
    const ucx::Endpoint *ep = (*peers_)[st.partner];
    sending_ = st.kind == RdStep::SendOnly || st.kind == RdStep::Exchange ||
               st.kind == RdStep::SendResult;
    receiving_ = st.kind == RdStep::RecvCombine || st.kind == RdStep::Exchange ||
                 st.kind == RdStep::RecvResult;
    const uint64_t len = bytes_ + sizeof(word_);
    if (receiving_) {
        int rc = w_->recv(recv_buf_.data(), len, tag, &recv_);
        if (rc != TWOHOP_OK) return rc;
    }
    if (sending_) {
        std::memcpy(send_buf_.data(), data_, bytes_);
        std::memcpy(send_buf_.data() + bytes_, &word_, sizeof(word_));
        return w_->send(ep->ep, send_buf_.data(), len, tag, &send_);
    }
    return TWOHOP_OK;
}

bool RdOp::partner_failed() const {
    return (*peers_)[steps_[step_].partner]->failed.load(std::memory_order_acquire);
}

bool RdOp::received_ok() const {
    if (!receiving_ || recv_.received != bytes_ + sizeof(word_)) return false;
    uint64_t their_word = 0;
    std::memcpy(&their_word, recv_buf_.data() + bytes_, sizeof(their_word));
    return their_word == word_;
}

int RdOp::finish_step() {
    const RdStep &st = steps_[step_];
    char *in = recv_buf_.data();
    if (st.kind == RdStep::RecvResult) std::memcpy(data_, in, bytes_);
    if (st.kind == RdStep::RecvCombine || st.kind == RdStep::Exchange) {
        // (lower position's partial) op (higher position's partial), computed into the lower
        // partial's buffer on both sides, so even a user function sees the same arguments.
        const uint64_t items = bytes_ / red_->item_bytes();
        if (pos_ < st.partner) return red_->combine(data_, in, data_, items);
        const int rc = red_->combine(in, data_, in, items);
        if (rc == TWOHOP_OK) std::memcpy(data_, in, bytes_);
        return rc;
    }
    return TWOHOP_OK;
}

} // namespace twohop
