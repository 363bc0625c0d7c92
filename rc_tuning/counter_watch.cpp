/* Periodic counter deltas; see counter_watch.h. */
#include "counter_watch.h"

#include "counter_delta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace twohop::rc {

int run_watch(const WatchOptions &opt, std::ostream &os,
              const std::function<void(double)> &sleep_fn) {
    const char *red = opt.color ? "\033[1;31m" : "";
    const char *off = opt.color ? "\033[0m" : "";
    int rounds = std::max(1, static_cast<int>(std::floor(opt.duration_s / opt.interval_s + 1e-9)));
    int alarming = 0;
    std::set<std::string> saturated_announced; // report a stuck-at-max counter once, not per round
    Snapshot prev = take_snapshot(opt.root, opt.filter);
    char head[64];
    std::snprintf(head, sizeof(head), "%d round(s) of %.1f s", rounds, opt.interval_s);
    os << "watching " << prev.ports.size() << " port(s) under " << opt.root << "/class/infiniband, "
       << head << "; '!' marks a rising error counter, '?' an inconclusive one\n";
    for (int r = 1; r <= rounds; ++r) {
        sleep_fn(opt.interval_s);
        Snapshot cur = take_snapshot(opt.root, opt.filter);
        SnapshotDelta d = diff(prev, cur);
        std::snprintf(head, sizeof(head), "[%7.1f s] ", r * opt.interval_s);
        bool any = false, alarm = false;
        for (const PortDelta &p : d.ports) {
            std::string items;
            if (p.presence != Presence::Both) {
                items = p.presence == Presence::Vanished ? "VANISHED" : "NEW";
                alarm = alarm || p.presence == Presence::Vanished;
            }
            for (const CounterDelta &c : p.deltas) {
                const bool unsure = c.outcome() == Outcome::Inconclusive;
                if (!c.rose() && !unsure) {
                    continue;
                }
                // An inconclusive counter (stuck at its maximum, wrapped, unreadable) is news
                // once, marked '?', and never counts as an alarm.
                if (unsure && !saturated_announced.insert(p.label() + "/" + c.name).second) {
                    continue;
                }
                bool err = is_error_class(c.cls) && c.rose();
                alarm = alarm || err;
                std::string amount =
                    c.info != nullptr && c.info->scale == 4 && c.kind == DeltaKind::Exact
                        ? "+" + format_bytes(4.0 * c.delta)
                        : c.amount();
                items += (items.empty() ? "" : ", ") + std::string(err ? red : "") +
                         (err ? "!" : unsure ? "?" : "") + c.name + " " + amount + (err ? off : "");
            }
            if (!items.empty()) {
                os << head << p.label() << ": " << items << "\n";
                any = true;
            }
        }
        if (!any) {
            os << head << "no counter changed\n";
        }
        alarming += alarm;
        prev = std::move(cur);
    }
    os << "done: error counters rose in " << alarming << " of " << rounds << " round(s)\n";
    return alarming;
}

} // namespace twohop::rc
