/* StreamJob (stream_job.h): the host side of a stream-ordered call on several nodes. */
#include "stream_job.h"

#include "twohop_status.h"

namespace twohop {

bool reached(const uint64_t *word, uint64_t token) {
    return static_cast<int64_t>(__atomic_load_n(word, __ATOMIC_ACQUIRE) - token) >= 0;
}

void open_word(uint64_t *word, uint64_t token) { __atomic_store_n(word, token, __ATOMIC_RELEASE); }

StreamJob::StreamJob(std::unique_ptr<Job> inner, StreamWords *words, uint64_t token,
                     std::function<int()> start, std::function<void()> gate_opened)
    : inner_(std::move(inner)), words_(words), token_(token), start_(std::move(start)),
      gate_opened_(std::move(gate_opened)) {}

StreamJob::~StreamJob() {
    // The inner job goes first: its transfers are cancelled or finished before the stream
    // may copy out of (and later reuse) the host copy.
    inner_.reset();
    if (!gate_open_) open_gate();
}

void StreamJob::open_gate() {
    gate_open_ = true;
    open_word(&words_->gate, token_);
    if (gate_opened_) gate_opened_();
}

int StreamJob::advance() {
    if (!started_) {
        started_ = true;
        ++steps_;
        const int rc = start_ ? start_() : TWOHOP_OK;
        if (rc != TWOHOP_OK) {
            inner_.reset();
            done_ = true;
            open_gate();
            return rc;
        }
    }
    if (!arrived_) {
        // The application's stream has not reached the call: the wait is the application's
        // (its earlier work may take any time), not a stall of twohop (waiting_on_application:
        // coll_twohop_timeout does not run meanwhile).
        if (!reached(&words_->arrived, token_)) return TWOHOP_PENDING;
        arrived_ = true;
        ++steps_;
    }
    const uint64_t before = inner_->steps();
    const int rc = inner_->advance();
    steps_ += inner_->steps() - before;
    if (rc == TWOHOP_PENDING) return rc;
    inner_.reset();
    done_ = true;
    open_gate();
    return rc;
}

} // namespace twohop
