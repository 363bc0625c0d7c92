/*
 * Reading InfiniBand port counters from sysfs:
 *   <root>/class/infiniband/<dev>/ports/<port>/{state,rate,link_layer}
 *   <root>/class/infiniband/<dev>/ports/<port>/counters/<name>      (IBTA PortCounters)
 *   <root>/class/infiniband/<dev>/ports/<port>/hw_counters/<name>   (vendor, e.g. mlx5 Q counters)
 * root is "/sys" in production and a fixture directory in tests. Reading never throws and never
 * aborts the snapshot: an unreadable or garbage file becomes a counter with ok = false and a
 * reason.
 */
#ifndef TWOHOP_RC_PORT_SNAPSHOT_H
#define TWOHOP_RC_PORT_SNAPSHOT_H

#include <cstdint>
#include <string>
#include <vector>

namespace twohop::rc {

struct CounterValue {
    std::string name;
    bool hw = false; // from hw_counters/ rather than counters/
    bool ok = false;
    std::uint64_t value = 0;
    std::string error; // why ok is false: "not a number: 'N/A'", "is a directory", ...
};

struct PortSnapshot {
    std::string device; // "mlx5_0"
    int port = 0;
    std::string state;      // "4: ACTIVE" as in sysfs, "" if unreadable
    std::string rate;       // "100 Gb/sec (4X EDR)"
    std::string link_layer; // "InfiniBand" or "Ethernet"
    bool has_counters = false;
    bool has_hw_counters = false;
    std::vector<CounterValue> counters; // sorted by (hw, name)

    std::string label() const { return device + " port " + std::to_string(port); }
    const CounterValue *find(const std::string &name) const;
};

struct Snapshot {
    std::string root;
    bool has_rdma = false;           // <root>/class/infiniband exists
    double time_s = 0;               // CLOCK_MONOTONIC seconds when taken
    std::vector<PortSnapshot> ports; // sorted by (device, port)
    std::vector<std::string> errors; // directory-level problems, one line each

    const PortSnapshot *find(const std::string &device, int port) const;
};

/* Which ports to read, UCX_NET_DEVICES style: "mlx5_0:1,mlx5_2" (device or device:port).
 * Empty = all. Returns false and sets *err for malformed entries ("mlx5_0:x"). */
struct DeviceFilter {
    using value_type = std::pair<std::string, int>;
    std::vector<std::pair<std::string, int>> entries; // port 0 = all ports of the device
    bool matches(const std::string &device, int port) const;
};
bool parse_device_filter(const std::string &spec, DeviceFilter *out, std::string *err);

/* Strict counter file parser: optional surrounding whitespace, decimal digits, fits 64 bits. */
bool parse_counter_value(const std::string &text, std::uint64_t *out, std::string *err);

Snapshot take_snapshot(const std::string &root, const DeviceFilter &filter = {});

} // namespace twohop::rc

#endif
