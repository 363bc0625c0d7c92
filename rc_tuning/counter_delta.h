/*
 * Differences between two port-counter snapshots, classified (link integrity / congestion /
 * transport retransmission) and explained in plain language.
 *
 * Every counter delta has one of three outcomes: Rose, Unchanged or Inconclusive. A saturating
 * counter (IBTA PortCounters, width per counter in counter_catalog.h) that reached its maximum
 * during the interval rose by at least max - before. Inconclusive, and never counted as a rise:
 * a counter already saturated before (including a legacy 32-bit data counter stuck at 2^32 - 1),
 * a 32-bit mlx5 hw counter that went down (wrapped, or reset: the two cannot be told apart), a
 * reset saturating counter, an unreadable, vanished or new counter, and a port that vanished or
 * appeared. Verdicts are computed from Rose outcomes only.
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
    Reset,           // after < before on a saturating counter: it was reset; delta >= after
    Wrapped,         // after < before on a wrapping (32-bit hw) counter: wrapped or reset;
                     // delta = after + 2^width - before if it wrapped exactly once
    Unreadable,      // garbage or unreadable in one of the snapshots
    New,             // only in the second snapshot
    Gone,            // only in the first snapshot
};

/* The three honest answers to "did this counter rise during the interval?". */
enum class Outcome { Rose, Unchanged, Inconclusive };

struct CounterDelta {
    std::string name;
    bool hw = false;
    CounterClass cls = CounterClass::Other;
    const CounterInfo *info = nullptr; // nullptr for uncatalogued counters
    DeltaKind kind = DeltaKind::Exact;
    std::uint64_t before = 0, after = 0;
    std::uint64_t delta = 0; // exact or lower bound, in raw counter units
    std::string note;        // reason for Unreadable

    /* Rose: Exact with delta > 0, or AtLeast. Unchanged: Exact with delta 0. Everything else
     * (SaturatedBefore, Reset, Wrapped, Unreadable, New, Gone) is Inconclusive. */
    Outcome outcome() const;
    /* outcome() == Outcome::Rose: the only outcome that may raise a verdict. */
    bool rose() const { return outcome() == Outcome::Rose; }
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

/* Worst class among the counters that rose: LinkFault > Retransmission > Congestion. When none
 * rose: Inconclusive if an error-class counter or a port was inconclusive, else Clean. */
enum class Verdict { Clean, Inconclusive, Congestion, Retransmission, LinkFault };
Verdict verdict(const SnapshotDelta &d);
const char *verdict_name(Verdict v);

/* Human-readable block per port (used by the report, `baseline compare` and tests). */
void print_delta(std::ostream &os, const SnapshotDelta &d, const std::string &during);

/* "1.23 GB" (decimal units). */
std::string format_bytes(double bytes);

} // namespace twohop::rc

#endif
