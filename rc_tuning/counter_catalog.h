/*
 * What each InfiniBand port counter means: class, unit, width. Sources:
 *   [IBTA-PMA] InfiniBand Architecture Spec Vol. 1 ch. 16.1.3.5 PortCounters (field widths; the
 *              classic error counters saturate at all-ones instead of wrapping).
 *   [KERNEL]   Documentation/ABI/stable/sysfs-class-infiniband and drivers/infiniband/core/sysfs.c
 *              (port_xmit_data / port_rcv_data are octets divided by 4; data and packet counters
 *              come from 64-bit PortCountersExtended when the HCA has them).
 *   [MLX5]     NVIDIA "Understanding mlx5 Linux counters" (hw_counters: per-port Q counters) and
 *              the mlx5 PRM query_q_counter layout: every Q counter field is 32 bits wide and
 *              wraps around (it does not saturate); rdma-core/kernel expose it unchanged.
 * Data and packet counters (port_xmit_data, ...) are 64-bit when the kernel reads
 * PortCountersExtended; an HCA/kernel that only has the 32-bit PortCounters shows them stuck at
 * 2^32 - 1 once saturated [IBTA-PMA], which is detected as saturation (legacy32 below).
 */
#ifndef TWOHOP_RC_COUNTER_CATALOG_H
#define TWOHOP_RC_COUNTER_CATALOG_H

#include <cstdint>
#include <string>

namespace twohop::rc {

enum class CounterClass { LinkIntegrity, Congestion, Transport, Traffic, Other };

/* What a counter does when it reaches 2^width - 1. */
enum class Overflow {
    Saturate, // IBTA PortCounters: stays at the maximum until cleared (perfquery -R)
    Wrap,     // mlx5 Q counters: continue from 0
};

struct CounterInfo {
    const char *name; // file name under counters/ or hw_counters/
    CounterClass cls;
    int width_bits;      // 64 = neither saturates nor wraps in practice
    Overflow overflow;   // what happens at 2^width_bits - 1
    bool legacy32;       // 64-bit extended counter that legacy HCAs hold in 32 bits (saturating)
    std::uint64_t scale; // multiply the raw value by this to get `unit` (4 for data words)
    const char *unit;    // "bytes", "packets", "events", "ticks"
    const char *meaning; // one line: what a rise means for RC traffic
};

/* Catalogue entry for a counter name, or nullptr for counters twohop does not interpret. */
const CounterInfo *find_counter(const std::string &name);

/* Width and overflow of a counter as read from its source: the catalogue entry when there is one,
 * else 32-bit wrapping for hw_counters/ (mlx5 Q counters [MLX5]) and 64-bit for counters/. */
struct CounterWidth {
    int bits;
    Overflow overflow;
    bool legacy32;
};
CounterWidth counter_width(const CounterInfo *info, bool hw);

/* 2^32 - 1: where a legacy 32-bit PortCounters data/packet counter stops [IBTA-PMA]. */
inline constexpr std::uint64_t kLegacy32Max = 0xffffffffull;

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
