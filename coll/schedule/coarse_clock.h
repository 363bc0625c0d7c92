/*
 * CoarseClock: the monotonic clock at the kernel tick's resolution (Linux
 * CLOCK_MONOTONIC_COARSE: 1-4 ms, read from the vDSO's data without reading a hardware timer),
 * for checks whose periods are far longer than a tick and that run on every pass of a job: the
 * transport's 100 ms liveness check (twohop_comm::poll_transport) and the engine's
 * coll_twohop_timeout bookkeeping of queued calls (whole seconds). Measured on the 2-core
 * machine (docs/perf.md, "The wake lead at the 95th percentile"): with steady_clock there, an
 * MPI_Iallreduce + MPI_Wait of 8 B at 2 ranks took about 0.08 us more. Where the
 * resolution matters (microsecond phases, the proxy's 20 us hand-off), steady_clock stays.
 * Without CLOCK_MONOTONIC_COARSE: CLOCK_MONOTONIC.
 */
#ifndef TWOHOP_SCHEDULE_COARSE_CLOCK_H
#define TWOHOP_SCHEDULE_COARSE_CLOCK_H

#include <chrono>
#include <ctime>

namespace twohop {

struct CoarseClock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<CoarseClock>;
    static constexpr bool is_steady = true;
    /* Now, at most one tick behind the monotonic clock. */
    static time_point now() noexcept {
        timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
        clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
        return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
};

} // namespace twohop

#endif
