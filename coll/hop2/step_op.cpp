#include "step_op.h"

#include "twohop_status.h"

namespace twohop {

int StepOp::begin(ucx::Worker *w, size_t nsteps) {
    w_ = w;
    step_ = 0;
    nsteps_ = nsteps;
    sending_ = receiving_ = false;
    active_ = nsteps > 0;
    return active_ ? post_step() : TWOHOP_OK;
}

bool StepOp::cancel(double max_wait_s) {
    active_ = false;
    return w_ == nullptr || w_->cancel(&recv_, &send_, max_wait_s);
}

int StepOp::advance(bool *finished) {
    *finished = !active_;
    if (!active_) return TWOHOP_OK;
    if ((sending_ && !send_.done) || (receiving_ && !recv_.done)) {
        // The caller cancels and poisons.
        return partner_failed() ? TWOHOP_ERR_TRANSPORT : TWOHOP_OK;
    }
    int rc = ucx::step_outcome(sending_, send_, receiving_, recv_, received_ok());
    if (rc == TWOHOP_OK) rc = finish_step();
    if (rc != TWOHOP_OK) {
        active_ = false;
        return rc;
    }
    if (++step_ == nsteps_) {
        active_ = false;
        *finished = true;
        return TWOHOP_OK;
    }
    return post_step();
}

} // namespace twohop
