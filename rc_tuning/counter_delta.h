/*
 * Differences between two port-counter snapshots, classified (link integrity / congestion /
 * transport retransmission) and explained in plain language.
 *
 * Narrow counters saturate (IBTA PortCounters stop at 2^width - 1): a counter that reached its
 * maximum is reported as "at least N", never as a zero delta; one already saturated at the start
 * is reported as unknown. A value that went down (reset by perfquery -R or a driver reload) is
 * reported as "at least <after>". A port that vanished or appeared is reported, not diffed.
 */
#ifndef TWOHOP_RC_COUNTER_DELTA_H
#define TWOHOP_RC_COUNTER_DELTA_H

#include "counter_catalog.h"
#include "port_snapshot.h"

#include <ostream>
#include <string>
#include <vector>

namespace twohop::rc {

enum class DeltaKind {
    Exact,           // delta = after - before
    AtLeast,         // narrow counter hit its maximum: delta >= max - before
    SaturatedBefore, // already at maximum in the first snapshot: delta unknown
    Reset,           // after < before: counter was reset; delta >= after
    Unreadable,      // garbage or unreadable in one of the snapshots
    New,             // only in the second snapshot
    Gone,            // only in the first snapshot
};

struct CounterDelta {
    std::string name;
    bool hw = false;
    CounterClass cls = CounterClass::Other;
    const CounterInfo *info = nullptr; // nullptr for uncatalogued counters
    DeltaKind kind = DeltaKind::Exact;
    std::uint64_t before = 0, after = 0;
    std::uint64_t delta = 0; // exact or lower bound, in raw counter units
    std::string note;        // reason for Unreadable

    /* True when this counter shows (or may show) a rise. */
    bool rose() const;
    /* "+57", ">=65535 (saturated)", "unknown (saturated at start)", ... */
    std::string amount() const;
};

enum class Presence { Both, Vanished, Appeared };

struct PortDelta {
    std::string device;
    int port = 0;
    Presence presence = Presence::Both;
    std::string state, rate, link_layer; // from the second snapshot (first if vanished)
    bool has_hw_counters = false;
    std::vector<CounterDelta> deltas;

    std::string label() const { return device + " port " + std::to_string(port); }
    const CounterDelta *find(const std::string &name) const;
};

struct SnapshotDelta {
    double seconds = 0;
    std::vector<PortDelta> ports;
};

SnapshotDelta diff(const Snapshot &before, const Snapshot &after);

/* One plain-language line per rising error counter, worst class first, e.g.
 * "mlx5_0 port 1: symbol errors rose by 57 during the job → CRC drops → Go-Back-N
 *  retransmissions; check the cable or transceiver". `during` is "during the job",
 * "in this interval" or "since the baseline". */
std::vector<std::string> diagnose(const PortDelta &p, const std::string &during);

enum class Verdict { Clean, Congestion, Retransmission, LinkFault };
Verdict verdict(const SnapshotDelta &d);
const char *verdict_name(Verdict v);

/* Human-readable block per port (used by the report, `baseline compare` and tests). */
void print_delta(std::ostream &os, const SnapshotDelta &d, const std::string &during);

/* "1.23 GB" (decimal units). */
std::string format_bytes(double bytes);

} // namespace twohop::rc

#endif
