/*
 * `twohop-rc watch`: snapshot every interval, print what changed, highlight rising error
 * counters ("!" marker, red when colour is on). Bounded: at most duration / interval rounds.
 */
#ifndef TWOHOP_RC_COUNTER_WATCH_H
#define TWOHOP_RC_COUNTER_WATCH_H

#include "port_snapshot.h"

#include <functional>
#include <ostream>
#include <string>

namespace twohop::rc {

struct WatchOptions {
    std::string root = "/sys";
    DeviceFilter filter;
    double interval_s = 1;  // 0.1 .. 3600
    double duration_s = 10; // interval .. 86400
    bool color = false;
};

/* Runs the watch; sleep_fn(seconds) waits between rounds (tests inject one that edits the tree).
 * Returns the number of rounds in which an error counter rose. */
int run_watch(const WatchOptions &opt, std::ostream &os,
              const std::function<void(double)> &sleep_fn);

} // namespace twohop::rc

#endif
