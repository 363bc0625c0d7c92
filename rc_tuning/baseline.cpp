/* Baseline record/compare; see baseline.h. */
#include "baseline.h"

#include "json_lite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace twohop::rc {

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
       << "  \"host\": " << json::quote(b.host) << ",\n"
       << "  \"recorded_unix\": " << b.recorded_unix << ",\n  \"ports\": [";
    for (size_t i = 0; i < b.counters.ports.size(); ++i) {
        const PortSnapshot &p = b.counters.ports[i];
        os << (i ? "," : "") << "\n    {\"device\": " << json::quote(p.device)
           << ", \"port\": " << p.port << ", \"state\": " << json::quote(p.state)
           << ", \"rate\": " << json::quote(p.rate)
           << ", \"link_layer\": " << json::quote(p.link_layer)
           << ", \"has_hw_counters\": " << (p.has_hw_counters ? "true" : "false");
        for (int hw = 0; hw < 2; ++hw) {
            os << ",\n     " << (hw ? "\"hw_counters\"" : "\"counters\"") << ": {";
            bool first = true;
            for (const CounterValue &c : p.counters) {
                if (c.hw == (hw == 1) && c.ok) {
                    os << (first ? "" : ", ") << json::quote(c.name) << ": " << c.value;
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
    json::Value v;
    if (!json::parse(text, &v, err)) {
        return false;
    }
    const json::Value *fmt = v.get("format");
    if (fmt == nullptr || fmt->str != "twohop-rc-baseline") {
        *err = "not a twohop-rc baseline (\"format\" is missing or not \"twohop-rc-baseline\")";
        return false;
    }
    *out = Baseline{};
    if (const json::Value *h = v.get("host"))
        out->host = h->str;
    if (const json::Value *t = v.get("recorded_unix"))
        out->recorded_unix = (long long)t->num;
    const json::Value *ports = v.get("ports");
    if (ports == nullptr || ports->type != json::Value::Type::Array) {
        *err = "\"ports\" is missing or not an array";
        return false;
    }
    out->counters.has_rdma = !ports->arr.empty();
    for (const json::Value &p : ports->arr) {
        PortSnapshot ps;
        const json::Value *dev = p.get("device");
        const json::Value *port = p.get("port");
        if (dev == nullptr || port == nullptr || dev->str.empty()) {
            *err = "a \"ports\" entry lacks \"device\" or \"port\"";
            return false;
        }
        ps.device = dev->str;
        ps.port = static_cast<int>(port->num);
        if (const json::Value *s = p.get("state"))
            ps.state = s->str;
        if (const json::Value *s = p.get("rate"))
            ps.rate = s->str;
        if (const json::Value *s = p.get("link_layer"))
            ps.link_layer = s->str;
        if (const json::Value *s = p.get("has_hw_counters"))
            ps.has_hw_counters = s->b;
        for (int hw = 0; hw < 2; ++hw) {
            const json::Value *c = p.get(hw ? "hw_counters" : "counters");
            if (c == nullptr)
                continue;
            ps.has_counters = ps.has_counters || hw == 0;
            for (const auto &kv : c->obj) {
                CounterValue cv;
                cv.name = kv.first;
                cv.hw = hw == 1;
                cv.ok = kv.second.type == json::Value::Type::Number && kv.second.num >= 0;
                cv.value = static_cast<std::uint64_t>(kv.second.num);
                if (!cv.ok)
                    cv.error = "baseline value is not a non-negative number";
                ps.counters.push_back(cv);
            }
        }
        out->counters.ports.push_back(std::move(ps));
    }
    if (const json::Value *prof = v.get("profile")) {
        for (const json::Value &e : prof->arr) {
            const json::Value *b = e.get("bytes");
            const json::Value *l = e.get("avg_latency_us");
            if (b == nullptr || l == nullptr) {
                *err = "a \"profile\" entry lacks \"bytes\" or \"avg_latency_us\"";
                return false;
            }
            out->profile.push_back({static_cast<std::uint64_t>(b->num), l->num});
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
    } else if (counters == Verdict::Congestion) {
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
