#include "core_counters.h"

namespace twohop {
std::atomic<unsigned long long> g_core_counters[TWOHOP_COUNTERS];
} // namespace twohop

extern "C" const unsigned long long *twohop_core_counter(int which) {
    static_assert(sizeof(std::atomic<unsigned long long>) == sizeof(unsigned long long) &&
                      std::atomic<unsigned long long>::is_always_lock_free,
                  "MPI_T reads the counters as plain words");
    if (which < 0 || which >= TWOHOP_COUNTERS) return nullptr;
    return reinterpret_cast<const unsigned long long *>(&twohop::g_core_counters[which]);
}
