/*
 * What each InfiniBand port counter means: class, unit, width. Sources:
 *   [IBTA-PMA] InfiniBand Architecture Spec Vol. 1 ch. 16.1.3.5 PortCounters (field widths; the
 *              classic error counters saturate at all-ones instead of wrapping).
 *   [KERNEL]   Documentation/ABI/stable/sysfs-class-infiniband and drivers/infiniband/core/sysfs.c
 *              (port_xmit_data / port_rcv_data are octets divided by 4; data and packet counters
 *              come from 64-bit PortCountersExtended when the HCA has them).
 *   [MLX5]     NVIDIA "Understanding mlx5 Linux counters" (hw_counters: per-port Q counters).
 */
#ifndef TWOHOP_RC_COUNTER_CATALOG_H
#define TWOHOP_RC_COUNTER_CATALOG_H

#include <cstdint>
#include <string>

namespace twohop::rc {

enum class CounterClass { LinkIntegrity, Congestion, Transport, Traffic, Other };

struct CounterInfo {
    const char *name; // file name under counters/ or hw_counters/
    CounterClass cls;
    int width_bits;      // 64 = does not saturate in practice
    std::uint64_t scale; // multiply the raw value by this to get `unit` (4 for data words)
    const char *unit;    // "bytes", "packets", "events", "ticks"
    const char *meaning; // one line: what a rise means for RC traffic
};

/* Catalogue entry for a counter name, or nullptr for counters twohop does not interpret. */
const CounterInfo *find_counter(const std::string &name);

/* All catalogued counters, for documentation and tests. */
const CounterInfo *counter_catalog(std::size_t *count);

/* "link integrity", "congestion", "transport retransmission", "traffic", "other". */
const char *class_name(CounterClass c);

/* Largest value a counter of this width can hold (the saturation value): 2^width - 1. */
std::uint64_t counter_max(int width_bits);

/* True for classes whose rise is an error signal (link integrity, congestion, transport). */
bool is_error_class(CounterClass c);

} // namespace twohop::rc

#endif
