#include "setup_exchange.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fiber.h"

namespace twohop {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kForeignCheck = std::chrono::milliseconds(50); // first look after this long
} // namespace

/*
 * Waits for `req` (a receive from `peer`, or a send to it). `other` is the round's second
 * request, cancelled with req on failure.
 */
int Exchange::wait(void *req, int peer, void *other, std::string *err) {
    const auto start = Clock::now();
    auto next_check = start + kForeignCheck;
    for (;;) {
        int done = 0;
        int rc = h_.test(h_.ctx, req, &done);
        if (rc == TWOHOP_ERR_MISMATCH) {
            *err = "set-up message from rank " + std::to_string(peer) +
                   " has an unexpected size (different twohop builds or parameters?)";
        } else if (rc != TWOHOP_OK) {
            *err = "point-to-point with rank " + std::to_string(peer) + " failed in set-up";
        }
        if (rc != TWOHOP_OK) {
            if (other) h_.cancel(h_.ctx, other);
            return rc;
        }
        if (done) return TWOHOP_OK;
        // Inside a fiber (a set-up started by a non-blocking or persistent call): back to the
        // caller, which resumes this wait from MPI progress.
        const bool deferred = Fiber::inside();
        if (deferred) Fiber::yield();
        const auto now = Clock::now();
        if (now < next_check) continue;
        next_check = now + kForeignCheck;
        // The probe for another allreduce component's traffic is left out in a fiber: the
        // peer may by then run its own later collectives on this communicator (it returned
        // from the call that started the set-up), whose messages the probe would mistake.
        if (!deferred && h_.foreign_pending(h_.ctx, peer)) {
            *err = "rank " + std::to_string(peer) +
                   " runs another allreduce on this communicator while this rank sets up "
                   "twohop: coll selection differs between ranks (keep --mca coll and "
                   "coll_twohop_priority identical on every rank)";
            rc = TWOHOP_ERR_MISMATCH;
        } else if (!noticed_ && notice_after_s_ > 0 &&
                   std::chrono::duration<double>(now - start).count() > notice_after_s_) {
            noticed_ = true;
            char waited[32];
            std::snprintf(waited, sizeof(waited), "%g", notice_after_s_);
            const std::string msg =
                "set-up of a communicator on rank " + std::to_string(rank_) + " has waited " +
                waited + " s for rank " + std::to_string(peer) +
                " of that communicator; still waiting. If that rank runs another allreduce "
                "component there (--mca coll or coll_twohop_priority differ between ranks), "
                "this never ends: keep both identical on every rank, or set coll_twohop_timeout "
                "to turn the wait into an error. (Also when ranks pass different datatypes to "
                "a non-blocking or persistent allreduce with a user-defined op, which MPI "
                "forbids: items above 4 KiB on some ranks only are handed back there.)";
            h_.log(0, msg.c_str());
        }
        if (rc == TWOHOP_OK && timeout_s_ > 0 &&
            std::chrono::duration<double>(now - start).count() > timeout_s_) {
            *err = "no set-up message from rank " + std::to_string(peer) + " within " +
                   std::to_string(static_cast<long>(timeout_s_)) +
                   " s (coll_twohop_timeout): is twohop selected on every rank?";
            rc = TWOHOP_ERR_TIMEOUT;
        }
        if (rc != TWOHOP_OK) {
            h_.cancel(h_.ctx, req);
            if (other) h_.cancel(h_.ctx, other);
            return rc;
        }
    }
}

int Exchange::allgather(const void *mine, void *all, std::size_t bytes, std::string *err) {
    // tmp[i] holds the block of rank (rank + i) mod p once received.
    std::vector<char> tmp(static_cast<std::size_t>(size_) * bytes);
    if (bytes) std::memcpy(tmp.data(), mine, bytes);
    for (int dist = 1; dist < size_; dist *= 2) {
        const int n = dist < size_ - dist ? dist : size_ - dist; // blocks moved this round
        const int to = (rank_ - dist + size_) % size_;
        const int from = (rank_ + dist) % size_;
        void *rreq = nullptr, *sreq = nullptr;
        int rc = h_.irecv(h_.ctx, tmp.data() + dist * bytes, n * bytes, from, &rreq);
        if (rc != TWOHOP_OK) {
            *err = "posting a set-up receive failed";
            return rc;
        }
        rc = h_.isend(h_.ctx, tmp.data(), n * bytes, to, &sreq);
        if (rc != TWOHOP_OK) {
            h_.cancel(h_.ctx, rreq);
            *err = "posting a set-up send failed";
            return rc;
        }
        rc = wait(rreq, from, sreq, err);
        if (rc == TWOHOP_OK) rc = wait(sreq, to, nullptr, err);
        if (rc != TWOHOP_OK) return rc;
    }
    char *out = static_cast<char *>(all);
    for (int i = 0; i < size_; ++i) {
        const int r = (rank_ + i) % size_;
        if (bytes) std::memcpy(out + r * bytes, tmp.data() + i * bytes, bytes);
    }
    return TWOHOP_OK;
}

int Exchange::agree_or(int failed, int *agreed, std::string *err) {
    uint64_t v = 0;
    int rc = agree_max(failed ? 1 : 0, &v, err);
    *agreed = v != 0;
    return rc;
}

int Exchange::agree_max(uint64_t v, uint64_t *out, std::string *err) {
    std::vector<uint64_t> all(size_);
    int rc = allgather(&v, all.data(), sizeof(v), err);
    if (rc != TWOHOP_OK) return rc;
    uint64_t m = 0;
    for (uint64_t x : all) m = x > m ? x : m;
    *out = m;
    return TWOHOP_OK;
}

} // namespace twohop
