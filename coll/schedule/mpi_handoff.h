/*
 * MpiHandOff: who advances the queued asynchronous calls right now -- a thread inside an MPI
 * call (its MPI progress passes) or the proxy thread (engine.cpp: async_step).
 *
 * The two would otherwise take the communicators' engine locks from each other. Threads inside
 * MPI count their progress passes (pass(): a load and a plain store, no timer read on the
 * application's threads, no read-modify-write); the proxy thread reads the count with its own
 * clock and leaves the calls to those threads while the count moved within the last
 * `window_ns` (mpi_drives). A starting thread that returns to the application with its call
 * pending marks the count (left()): the proxy takes over at once instead of a window after that
 * thread's last pass. Racing passes may lose a count (a plain store), which only delays a
 * hand-off; a pass clears the mark.
 *
 * mpi_drives() keeps the proxy's last look (non-atomic state): the proxy thread only. The
 * first look after a long pause sees any change since the previous look as new: the proxy then
 * waits at most one window (measured: docs/perf.md, "Small non-blocking calls").
 *
 * Pure (no MPI, no clock of its own): tests/test_mpi_handoff.cpp.
 */
#pragma once

#include <atomic>
#include <cstdint>

namespace twohop {

class MpiHandOff {
  public:
    static constexpr uint64_t kLeft = uint64_t(1) << 63;

    /* A thread inside MPI ran a progress pass over the queued calls. */
    void pass() {
        v_.store((v_.load(std::memory_order_relaxed) & ~kLeft) + 1, std::memory_order_relaxed);
    }
    /* The starting thread of a pending call returned to the application. */
    void left() { v_.store(v_.load(std::memory_order_relaxed) | kLeft, std::memory_order_relaxed); }

    /* Proxy thread only: true while threads inside MPI drive the calls, i.e. the count moved
     * within the last window_ns before now_ns (both on the proxy's clock, ns) and was not
     * marked since. */
    bool mpi_drives(int64_t now_ns, int64_t window_ns) {
        const uint64_t p = v_.load(std::memory_order_relaxed);
        if (p & kLeft) return false;
        if (p != seen_) {
            seen_ = p;
            seen_at_ = now_ns;
        }
        return now_ns - seen_at_ < window_ns;
    }

  private:
    std::atomic<uint64_t> v_{0};
    uint64_t seen_ = 0;   // the count at the proxy's last look
    int64_t seen_at_ = 0; // when the proxy saw it change (its clock, ns); 0: never
};

} // namespace twohop
