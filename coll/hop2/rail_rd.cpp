#include "rail_rd.h"

#include <cstring>

namespace twohop {

int RdOp::start(ucx::Worker *w, const std::vector<const ucx::Endpoint *> *peers, int n, int pos,
                char *data, uint64_t items, const Reducer *red, char *scratch,
                uint64_t tag_base) {
    w_ = w;
    peers_ = peers;
    red_ = red;
    data_ = data;
    scratch_ = scratch;
    bytes_ = items * red->item_bytes();
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
    if (receiving_) {
        char *into = st.kind == RdStep::RecvResult ? data_ : scratch_;
        int rc = w_->recv(into, bytes_, tag, &recv_);
        if (rc != TWOHOP_OK) return rc;
    }
    if (sending_) return w_->send(ep->ep, data_, bytes_, tag, &send_);
    return TWOHOP_OK;
}

bool RdOp::cancel(double max_wait_s) {
    bool ok = true;
    if (w_) {
        ok = w_->cancel(&recv_, max_wait_s) && ok;
        ok = w_->cancel(&send_, max_wait_s) && ok;
    }
    active_ = false;
    return ok;
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
    if (receiving_ && (recv_.status == UCS_ERR_MESSAGE_TRUNCATED ||
                       (recv_.status == UCS_OK && recv_.received != bytes_))) {
        active_ = false;
        return TWOHOP_ERR_MISMATCH;
    }
    if ((sending_ && send_.status != UCS_OK) || (receiving_ && recv_.status != UCS_OK)) {
        active_ = false;
        return TWOHOP_ERR_TRANSPORT;
    }
    if (st.kind == RdStep::RecvCombine || st.kind == RdStep::Exchange) {
        // (lower position's partial) op (higher position's partial), computed into the lower
        // partial's buffer on both sides, so even a user function sees the same arguments.
        const uint64_t items = bytes_ / red_->item_bytes();
        int rc;
        if (pos_ < st.partner) {
            rc = red_->combine(data_, scratch_, data_, items);
        } else {
            rc = red_->combine(scratch_, data_, scratch_, items);
            if (rc == TWOHOP_OK) std::memcpy(data_, scratch_, bytes_);
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
