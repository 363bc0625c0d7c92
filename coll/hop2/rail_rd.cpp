#include "rail_rd.h"

#include <cstring>

namespace twohop {

int RdOp::start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
                char *data, uint64_t items, const Reducer *red, uint64_t word,
                uint64_t tag_base) {
    w_ = w;
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
    step_ = 0;
    active_ = !steps_.empty();
    return active_ ? post_step() : TWOHOP_OK;
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

bool RdOp::cancel(double max_wait_s) {
    active_ = false;
    return w_ == nullptr || w_->cancel(&recv_, &send_, max_wait_s);
}

int RdOp::advance(bool *finished) {
    *finished = !active_;
    if (!active_) return TWOHOP_OK;
    const RdStep &st = steps_[step_];
    if ((sending_ && !send_.done) || (receiving_ && !recv_.done)) {
        if ((*peers_)[st.partner]->failed.load(std::memory_order_acquire)) {
            return TWOHOP_ERR_TRANSPORT;
        }
        return TWOHOP_OK;
    }
    uint64_t their_word = 0;
    const bool whole = recv_.received == bytes_ + sizeof(word_);
    if (receiving_ && recv_.status == UCS_OK && whole) {
        std::memcpy(&their_word, recv_buf_.data() + bytes_, sizeof(their_word));
    }
    const int out = ucx::step_outcome(sending_, send_, receiving_, recv_,
                                      whole && their_word == word_);
    if (out != TWOHOP_OK) {
        active_ = false;
        return out;
    }
    char *in = recv_buf_.data();
    if (st.kind == RdStep::RecvResult) std::memcpy(data_, in, bytes_);
    if (st.kind == RdStep::RecvCombine || st.kind == RdStep::Exchange) {
        // (lower position's partial) op (higher position's partial), computed into the lower
        // partial's buffer on both sides, so even a user function sees the same arguments.
        const uint64_t items = bytes_ / red_->item_bytes();
        int rc;
        if (pos_ < st.partner) {
            rc = red_->combine(data_, in, data_, items);
        } else {
            rc = red_->combine(in, data_, in, items);
            if (rc == TWOHOP_OK) std::memcpy(data_, in, bytes_);
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
