/* Baseline record/compare; see baseline.h. */
#include "baseline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>

namespace twohop::rc {

namespace {

using nlohmann::json;

/* Quotes and escapes s as a JSON string (invalid UTF-8 becomes U+FFFD rather than throwing). */
std::string quote(const std::string &s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

/* The member key of v, or nullptr if v is not an object or lacks it. */
const json *get(const json &v, const char *key) {
    if (!v.is_object()) {
        return nullptr;
    }
    auto it = v.find(key);
    return it == v.end() ? nullptr : &*it;
}

/* Lenient accessors: a value of the wrong type reads as "", 0 or false. */
std::string str(const json &v) {
    return v.is_string() ? v.get<std::string>() : std::string();
}
bool boolean(const json &v) {
    return v.is_boolean() && v.get<bool>();
}
double num(const json &v) {
    return v.is_number() ? v.get<double>() : 0.0;
}
long long integer(const json &v) {
    if (v.is_number_integer()) {
        return v.get<long long>();
    }
    double d = num(v);
    return std::isfinite(d) && std::fabs(d) < 9.2e18 ? static_cast<long long>(d) : 0;
}
/* A counter value: a non-negative number (exact when written as an integer), else not ok. */
bool counter(const json &v, std::uint64_t *out) {
    *out = 0;
    if (v.is_number_unsigned()) {
        *out = v.get<std::uint64_t>();
        return true;
    }
    if (v.is_number_integer()) { // parsed as signed only when negative
        long long i = v.get<long long>();
        *out = i < 0 ? 0 : static_cast<std::uint64_t>(i);
        return i >= 0;
    }
    if (!v.is_number_float() || !(v.get<double>() >= 0)) {
        return false;
    }
    double d = v.get<double>();
    *out = d < 1.8e19 ? static_cast<std::uint64_t>(d) : UINT64_MAX;
    return true;
}

/* "line L, column C: what" from a parse error, without the library's "[json.exception...]". */
std::string parse_error_text(const json::exception &e) {
    std::string what = e.what();
    const std::string at = "parse error at ";
    size_t pos = what.find(at);
    if (pos != std::string::npos) {
        return what.substr(pos + at.size());
    }
    pos = what.find("] ");
    return pos == std::string::npos ? what : what.substr(pos + 2);
}

} // namespace

bool parse_profile(const std::string &text, std::vector<ProfilePoint> *out, std::string *err) {
    out->clear();
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        line = line.substr(0, line.find('#'));
        std::istringstream ls(line);
        std::string a, b, extra;
        if (!(ls >> a)) {
            continue;
        }
        ProfilePoint p;
        char *end = nullptr;
        unsigned long long bytes = std::strtoull(a.c_str(), &end, 10);
        bool bytes_ok = *end == '\0' && a.find_first_not_of("0123456789") == std::string::npos;
        double lat = (ls >> b) ? std::strtod(b.c_str(), &end) : -1;
        bool lat_ok = !b.empty() && *end == '\0' && std::isfinite(lat) && lat > 0;
        if (!bytes_ok || bytes == 0 || !lat_ok || (ls >> extra)) {
            *err = "line " + std::to_string(n) +
                   ": expected \"bytes avg_latency_us\" (bytes > 0, "
                   "latency > 0), got '" +
                   line + "'";
            return false;
        }
        p.bytes = bytes;
        p.avg_latency_us = lat;
        out->push_back(p);
    }
    std::sort(out->begin(), out->end(),
              [](const ProfilePoint &x, const ProfilePoint &y) { return x.bytes < y.bytes; });
    for (size_t i = 1; i < out->size(); ++i) {
        if ((*out)[i].bytes == (*out)[i - 1].bytes) {
            *err = "size " + std::to_string((*out)[i].bytes) + " bytes appears twice";
            return false;
        }
    }
    if (out->empty()) {
        *err = "no \"bytes avg_latency_us\" lines";
        return false;
    }
    return true;
}

std::string baseline_to_json(const Baseline &b) {
    std::ostringstream os;
    os << "{\n  \"format\": \"twohop-rc-baseline\",\n  \"version\": 1,\n"
       << "  \"host\": " << quote(b.host) << ",\n"
       << "  \"recorded_unix\": " << b.recorded_unix << ",\n  \"ports\": [";
    for (size_t i = 0; i < b.counters.ports.size(); ++i) {
        const PortSnapshot &p = b.counters.ports[i];
        os << (i ? "," : "") << "\n    {\"device\": " << quote(p.device) << ", \"port\": " << p.port
           << ", \"state\": " << quote(p.state) << ", \"rate\": " << quote(p.rate)
           << ", \"link_layer\": " << quote(p.link_layer)
           << ", \"has_hw_counters\": " << (p.has_hw_counters ? "true" : "false");
        for (int hw = 0; hw < 2; ++hw) {
            os << ",\n     " << (hw ? "\"hw_counters\"" : "\"counters\"") << ": {";
            bool first = true;
            for (const CounterValue &c : p.counters) {
                if (c.hw == (hw == 1) && c.ok) {
                    os << (first ? "" : ", ") << quote(c.name) << ": " << c.value;
                    first = false;
                }
            }
            os << "}";
        }
        os << "}";
    }
    os << "\n  ],\n  \"profile\": [";
    for (size_t i = 0; i < b.profile.size(); ++i) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%s\n    {\"bytes\": %llu, \"avg_latency_us\": %.3f}",
                      i ? "," : "", (unsigned long long)b.profile[i].bytes,
                      b.profile[i].avg_latency_us);
        os << buf;
    }
    os << (b.profile.empty() ? "]\n}\n" : "\n  ]\n}\n");
    return os.str();
}

bool baseline_from_json(const std::string &text, Baseline *out, std::string *err) {
    json v;
    try {
        v = json::parse(text);
    } catch (const json::exception &e) {
        *err = parse_error_text(e);
        return false;
    }
    const json *fmt = get(v, "format");
    if (fmt == nullptr || str(*fmt) != "twohop-rc-baseline") {
        *err = "not a twohop-rc baseline (\"format\" is missing or not \"twohop-rc-baseline\")";
        return false;
    }
    *out = Baseline{};
    if (const json *h = get(v, "host"))
        out->host = str(*h);
    if (const json *t = get(v, "recorded_unix"))
        out->recorded_unix = integer(*t);
    const json *ports = get(v, "ports");
    if (ports == nullptr || !ports->is_array()) {
        *err = "\"ports\" is missing or not an array";
        return false;
    }
    out->counters.has_rdma = !ports->empty();
    for (const json &p : *ports) {
        PortSnapshot ps;
        const json *dev = get(p, "device");
        const json *port = get(p, "port");
        if (dev == nullptr || port == nullptr || str(*dev).empty()) {
            *err = "a \"ports\" entry lacks \"device\" or \"port\"";
            return false;
        }
        ps.device = str(*dev);
        ps.port = static_cast<int>(integer(*port));
        if (const json *s = get(p, "state"))
            ps.state = str(*s);
        if (const json *s = get(p, "rate"))
            ps.rate = str(*s);
        if (const json *s = get(p, "link_layer"))
            ps.link_layer = str(*s);
        if (const json *s = get(p, "has_hw_counters"))
            ps.has_hw_counters = boolean(*s);
        for (int hw = 0; hw < 2; ++hw) {
            const json *c = get(p, hw ? "hw_counters" : "counters");
            if (c == nullptr)
                continue;
            ps.has_counters = ps.has_counters || hw == 0;
            if (!c->is_object())
                continue;
            for (const auto &kv : c->items()) { // sorted by name
                CounterValue cv;
                cv.name = kv.key();
                cv.hw = hw == 1;
                cv.ok = counter(kv.value(), &cv.value);
                if (!cv.ok)
                    cv.error = "baseline value is not a non-negative number";
                ps.counters.push_back(cv);
            }
        }
        out->counters.ports.push_back(std::move(ps));
    }
    const json *prof = get(v, "profile");
    if (prof != nullptr && prof->is_array()) {
        for (const json &e : *prof) {
            const json *b = get(e, "bytes");
            const json *l = get(e, "avg_latency_us");
            if (b == nullptr || l == nullptr) {
                *err = "a \"profile\" entry lacks \"bytes\" or \"avg_latency_us\"";
                return false;
            }
            std::uint64_t bytes = 0;
            counter(*b, &bytes);
            out->profile.push_back({bytes, num(*l)});
        }
    }
    return true;
}

const char *compare_verdict_name(CompareVerdict v) {
    return v == CompareVerdict::Pass ? "PASS" : v == CompareVerdict::Warn ? "WARN" : "FAIL";
}

CompareVerdict compare_baseline(const Baseline &base, const Snapshot &now,
                                const std::vector<ProfilePoint> &profile_now,
                                const CompareOptions &opt, std::ostream &os) {
    CompareVerdict result = CompareVerdict::Pass;
    auto worsen = [&result](CompareVerdict v) { result = std::max(result, v); };

    SnapshotDelta d = diff(base.counters, now);
    d.seconds = 0;
    Verdict counters = verdict(d);
    os << "counters since the baseline (host " << base.host << "): " << verdict_name(counters)
       << "\n";
    print_delta(os, d, "since the baseline");
    if (counters == Verdict::LinkFault || counters == Verdict::Retransmission) {
        worsen(CompareVerdict::Fail);
    } else if (counters == Verdict::Congestion || counters == Verdict::Inconclusive) {
        worsen(CompareVerdict::Warn);
    }

    if (base.profile.empty() || profile_now.empty()) {
        os << "profile: " << (base.profile.empty() ? "none in the baseline" : "none given now")
           << " (counters only)\n";
    } else {
        char head[128];
        std::snprintf(head, sizeof(head), "profile:\n  %17s  %12s  %12s  %7s  %9s\n", "bytes",
                      "baseline us", "current us", "change", "MB/s now");
        os << head;
        int shared = 0;
        for (const ProfilePoint &b : base.profile) {
            auto it = std::find_if(profile_now.begin(), profile_now.end(),
                                   [&b](const ProfilePoint &p) { return p.bytes == b.bytes; });
            if (it == profile_now.end()) {
                continue;
            }
            ++shared;
            double change = (it->avg_latency_us / b.avg_latency_us - 1.0) * 100.0;
            bool slower = change > opt.tolerance_pct;
            char buf[160];
            std::snprintf(buf, sizeof(buf), "  %17llu  %12.2f  %12.2f  %+6.1f%%  %9.1f%s\n",
                          (unsigned long long)b.bytes, b.avg_latency_us, it->avg_latency_us, change,
                          it->bytes / it->avg_latency_us, slower ? "  SLOWER" : "");
            os << buf;
            if (slower) {
                worsen(CompareVerdict::Fail);
            }
        }
        if (shared == 0) {
            os << "  no message size appears in both profiles\n";
            worsen(CompareVerdict::Warn);
        }
    }
    char tol[64];
    std::snprintf(tol, sizeof(tol), "%.1f%%", opt.tolerance_pct);
    os << "verdict: " << compare_verdict_name(result) << " (tolerance " << tol << ")\n";
    return result;
}

} // namespace twohop::rc
