/*
 * The core's counters (coll/counters.def), added to from any thread: twohop::count(which, n).
 * Relaxed atomics: each is a monotonic count read by MPI_T (twohop_core_counter), ordering
 * nothing.
 */
#pragma once

#include <atomic>

#include "twohop_core.h"

namespace twohop {

extern std::atomic<unsigned long long> g_core_counters[TWOHOP_COUNTERS];

inline void count(twohop_counter which, unsigned long long n = 1) {
    g_core_counters[which].fetch_add(n, std::memory_order_relaxed);
}

} // namespace twohop
