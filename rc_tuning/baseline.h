/*
 * Baselines: port counters plus a short allreduce latency profile saved as JSON
 * (`twohop-rc baseline record`), and a later run compared against it (`baseline compare`).
 *
 * Profile file (from the project's benchmark or by hand): one "bytes avg_latency_us" pair per
 * line, '#' starts a comment, blank lines are ignored. Bandwidth is derived as bytes / latency.
 */
#ifndef TWOHOP_RC_BASELINE_H
#define TWOHOP_RC_BASELINE_H

#include "counter_delta.h"
#include "port_snapshot.h"

#include <ostream>
#include <string>
#include <vector>

namespace twohop::rc {

struct ProfilePoint {
    std::uint64_t bytes = 0;
    double avg_latency_us = 0;
};

struct Baseline {
    std::string host;
    long long recorded_unix = 0;
    Snapshot counters;                 // time_s is not meaningful after loading
    std::vector<ProfilePoint> profile; // sorted by bytes, may be empty
};

/* Parses a profile file's text; false with "line N: ..." in *err on bad input. */
bool parse_profile(const std::string &text, std::vector<ProfilePoint> *out, std::string *err);

std::string baseline_to_json(const Baseline &b);
bool baseline_from_json(const std::string &text, Baseline *out, std::string *err);

enum class CompareVerdict { Pass, Warn, Fail };
const char *compare_verdict_name(CompareVerdict v);

struct CompareOptions {
    double tolerance_pct = 10; // a size slower than baseline by more than this fails
};

/* Prints counter deltas since the baseline and the profile comparison; returns the verdict:
 * FAIL if a link-integrity or transport counter rose or any size is slower than the tolerance,
 * WARN if only congestion counters rose or the profiles share no size, else PASS. */
CompareVerdict compare_baseline(const Baseline &base, const Snapshot &now,
                                const std::vector<ProfilePoint> &profile_now,
                                const CompareOptions &opt, std::ostream &os);

} // namespace twohop::rc

#endif
