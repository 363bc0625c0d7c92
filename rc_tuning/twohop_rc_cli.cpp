/*
 * twohop-rc: RC tuning and port-counter forensics from the command line.
 *   snapshot | watch | baseline record | baseline compare | plan      (see usage() and
 * docs/rc_tuning.md). Exit status: 0 ok/PASS, 1 bad input, 2 no RDMA device, 3 WARN, 4 FAIL.
 */
#include "baseline.h"
#include "counter_catalog.h"
#include "counter_watch.h"
#include "ib_time.h"
#include "port_snapshot.h"
#include "rc_plan.h"
#include "ucx_config.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace twohop::rc;

namespace {

enum Exit { kOk = 0, kBadInput = 1, kNoDevice = 2, kWarn = 3, kFail = 4 };

const char *const kUsage =
    "usage: twohop-rc [--sysfs-root DIR] [--devices LIST] COMMAND [OPTIONS]\n"
    "\n"
    "RC tuning and InfiniBand port-counter forensics for the twohop allreduce.\n"
    "\n"
    "commands:\n"
    "  snapshot                      print every port counter with its class and meaning\n"
    "  watch [--interval S] [--duration S] [--color]\n"
    "                                print per-interval counter deltas; rising error counters\n"
    "                                are marked '!' (interval 0.1..3600 s, default 1;\n"
    "                                duration up to 86400 s, default 10)\n"
    "  baseline record --output FILE [--profile PROFILE]\n"
    "                                save counters (+ latency profile) as JSON\n"
    "  baseline compare --baseline FILE [--profile PROFILE] [--tolerance PCT]\n"
    "                                counter deltas since the baseline and latency change per\n"
    "                                size; verdict PASS, WARN or FAIL (tolerance default 10%)\n"
    "  plan --rtt-us US --msg-bytes SEGMENT [--shards N] [--nodes N] [--inflight N]\n"
    "       [--wr-bytes N] [--rndv-thresh N] [--margin M]\n"
    "       [--min-exponent T] [--retry N] [--peers N] [--link ib|roce] [--rails N --stagger S]\n"
    "                                recommend RC settings, printed as --mca flags and as UCX\n"
    "                                environment lines\n"
    "\n"
    "global options:\n"
    "  --sysfs-root DIR   directory holding class/infiniband (default /sys; tests use fixtures)\n"
    "  --devices LIST     only these ports, UCX_NET_DEVICES style: mlx5_0:1,mlx5_2\n"
    "  -h, --help         this help; 'twohop-rc COMMAND --help' also works\n"
    "\n"
    "PROFILE: text file, one \"bytes avg_latency_us\" pair per line, '#' comments.\n"
    "exit status: 0 ok / PASS, 1 bad input, 2 no RDMA device, 3 WARN, 4 FAIL\n";

struct Args {
    std::vector<std::string> positional;
    std::map<std::string, std::string> opts; // "--x" -> value ("" for flags)
};

bool is_flag(const std::string &o) {
    return o == "--color" || o == "--help" || o == "-h";
}

bool parse_args(int argc, char **argv, Args *a, std::string *err) {
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        if (s.rfind("-", 0) == 0 && s.size() > 1) {
            if (is_flag(s)) {
                a->opts[s == "-h" ? "--help" : s] = "";
            } else if (i + 1 < argc) {
                a->opts[s] = argv[++i];
            } else {
                *err = "option " + s + " needs a value";
                return false;
            }
        } else {
            a->positional.push_back(s);
        }
    }
    return true;
}

bool get_double(const Args &a, const std::string &k, double *out, std::string *err) {
    auto it = a.opts.find(k);
    if (it == a.opts.end())
        return true;
    char *end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !std::isfinite(v)) {
        *err = k + ": '" + it->second + "' is not a number";
        return false;
    }
    *out = v;
    return true;
}

template <typename T> bool get_int(const Args &a, const std::string &k, T *out, std::string *err) {
    auto it = a.opts.find(k);
    if (it == a.opts.end())
        return true;
    const std::string &s = it->second;
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
        *err = k + ": '" + s + "' is not a non-negative integer";
        return false;
    }
    *out = static_cast<T>(std::stoull(s));
    return true;
}

bool read_file(const std::string &path, std::string *text, std::string *err) {
    std::ifstream in(path);
    if (!in) {
        *err = path + ": cannot open: " + std::strerror(errno);
        return false;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    *text = ss.str();
    return true;
}

bool check_known(const Args &a, std::initializer_list<const char *> allowed, std::string *err) {
    for (const auto &kv : a.opts) {
        bool ok = kv.first == "--help" || kv.first == "--sysfs-root" || kv.first == "--devices";
        for (const char *x : allowed)
            ok = ok || kv.first == x;
        if (!ok) {
            *err = "unknown option " + kv.first;
            return false;
        }
    }
    return true;
}

int no_device(const Snapshot &s) {
    std::cout << "no RDMA device: " << s.root << "/class/infiniband "
              << (s.has_rdma ? "has no matching port" : "does not exist") << "\n";
    return kNoDevice;
}

int cmd_snapshot(const Snapshot &s) {
    if (!s.has_rdma || s.ports.empty())
        return no_device(s);
    for (const std::string &e : s.errors)
        std::cout << "warning: " << e << "\n";
    for (const PortSnapshot &p : s.ports) {
        std::cout << p.label() << " (" << (p.state.empty() ? "state unknown" : p.state) << ", "
                  << (p.rate.empty() ? "rate unknown" : p.rate) << ", "
                  << (p.link_layer.empty() ? "link layer unknown" : p.link_layer) << ")\n";
        for (int hw = 0; hw < 2; ++hw) {
            bool present = hw ? p.has_hw_counters : p.has_counters;
            std::cout << "  " << (hw ? "hw_counters/" : "counters/")
                      << (present ? "" : "  (missing)") << "\n";
            for (const CounterValue &c : p.counters) {
                if (c.hw != (hw == 1))
                    continue;
                const CounterInfo *info = find_counter(c.name);
                char buf[200];
                std::string note;
                if (!c.ok) {
                    note = "UNREADABLE: " + c.error;
                } else if (info != nullptr && info->overflow == Overflow::Saturate &&
                           info->width_bits < 64 && c.value >= counter_max(info->width_bits)) {
                    note = "SATURATED at the " + std::to_string(info->width_bits) +
                           "-bit maximum: true value is at least this";
                } else if (info != nullptr && info->legacy32 && c.value == kLegacy32Max) {
                    note = "SATURATED at 2^32-1 (legacy 32-bit PortCounters): true value is at "
                           "least this";
                } else if (info != nullptr && info->scale == 4) {
                    note = "= " + format_bytes(4.0 * c.value) + " (4-byte words)";
                }
                std::snprintf(buf, sizeof(buf), "    %-32s %20s  %-24s %s\n", c.name.c_str(),
                              c.ok ? std::to_string(c.value).c_str() : "?",
                              info != nullptr ? class_name(info->cls) : "other", note.c_str());
                std::string row = buf;
                row.erase(row.find_last_not_of(" \n") + 1);
                std::cout << row << "\n";
            }
        }
    }
    return kOk;
}

int cmd_watch(const Args &a, const std::string &root, const DeviceFilter &filter) {
    std::string err;
    WatchOptions o;
    o.root = root;
    o.filter = filter;
    o.color = a.opts.count("--color") > 0;
    if (!check_known(a, {"--interval", "--duration", "--color"}, &err) ||
        !get_double(a, "--interval", &o.interval_s, &err) ||
        !get_double(a, "--duration", &o.duration_s, &err)) {
        std::cerr << "twohop-rc watch: " << err << "\n";
        return kBadInput;
    }
    if (o.interval_s < 0.1 || o.interval_s > 3600) {
        std::cerr << "twohop-rc watch: --interval " << o.interval_s
                  << " is out of range 0.1..3600 seconds\n";
        return kBadInput;
    }
    if (o.duration_s < o.interval_s || o.duration_s > 86400) {
        std::cerr << "twohop-rc watch: --duration " << o.duration_s << " is out of range "
                  << o.interval_s << "..86400 seconds (at least one interval)\n";
        return kBadInput;
    }
    Snapshot s = take_snapshot(root, filter);
    if (!s.has_rdma || s.ports.empty())
        return no_device(s);
    run_watch(o, std::cout, [](double sec) {
        std::cout.flush();
        std::this_thread::sleep_for(std::chrono::duration<double>(sec));
    });
    return kOk;
}

bool load_profile(const Args &a, std::vector<ProfilePoint> *p, std::string *err) {
    auto it = a.opts.find("--profile");
    if (it == a.opts.end())
        return true;
    std::string text;
    if (!read_file(it->second, &text, err))
        return false;
    if (!parse_profile(text, p, err)) {
        *err = it->second + ": " + *err;
        return false;
    }
    return true;
}

int cmd_baseline(const Args &a, const std::string &root, const DeviceFilter &filter) {
    std::string err, sub = a.positional.size() > 1 ? a.positional[1] : "";
    std::vector<ProfilePoint> profile;
    if (sub == "record") {
        auto out = a.opts.find("--output");
        if (!check_known(a, {"--output", "--profile"}, &err) || out == a.opts.end() ||
            !load_profile(a, &profile, &err)) {
            std::cerr << "twohop-rc baseline record: "
                      << (err.empty() ? "--output FILE is required" : err) << "\n";
            return kBadInput;
        }
        Baseline b;
        b.counters = take_snapshot(root, filter);
        if (!b.counters.has_rdma || b.counters.ports.empty())
            return no_device(b.counters);
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        b.host = host;
        b.recorded_unix = static_cast<long long>(std::time(nullptr));
        b.profile = profile;
        std::ofstream f(out->second);
        f << baseline_to_json(b);
        if (!f.good()) {
            std::cerr << "twohop-rc baseline record: " << out->second << ": cannot write\n";
            return kBadInput;
        }
        std::cout << "baseline: " << b.counters.ports.size() << " port(s), " << profile.size()
                  << " profile size(s) written to " << out->second << "\n";
        return kOk;
    }
    if (sub == "compare") {
        auto in = a.opts.find("--baseline");
        CompareOptions opt;
        std::string text;
        Baseline b;
        if (!check_known(a, {"--baseline", "--profile", "--tolerance"}, &err) ||
            in == a.opts.end() || !load_profile(a, &profile, &err) ||
            !get_double(a, "--tolerance", &opt.tolerance_pct, &err) ||
            !read_file(in->second, &text, &err) || !baseline_from_json(text, &b, &err)) {
            std::cerr << "twohop-rc baseline compare: "
                      << (err.empty() ? "--baseline FILE is required" : err) << "\n";
            return kBadInput;
        }
        if (opt.tolerance_pct < 0 || opt.tolerance_pct > 1000) {
            std::cerr << "twohop-rc baseline compare: --tolerance " << opt.tolerance_pct
                      << " is out of range 0..1000 percent\n";
            return kBadInput;
        }
        Snapshot now = take_snapshot(root, filter);
        if (!now.has_rdma)
            return no_device(now);
        CompareVerdict v = compare_baseline(b, now, profile, opt, std::cout);
        return v == CompareVerdict::Pass ? kOk : v == CompareVerdict::Warn ? kWarn : kFail;
    }
    std::cerr << "twohop-rc baseline: expected 'record' or 'compare', got '" << sub
              << "' (see twohop-rc --help)\n";
    return kBadInput;
}

int cmd_plan(const Args &a) {
    std::string err;
    PlanInput in;
    std::string link = a.opts.count("--link") ? a.opts.at("--link") : "ib";
    if (!check_known(a,
                     {"--rtt-us", "--msg-bytes", "--shards", "--nodes", "--rndv-thresh",
                      "--inflight", "--wr-bytes", "--margin",
                      "--min-exponent", "--retry", "--peers", "--link", "--rails", "--stagger"},
                     &err) ||
        !get_double(a, "--rtt-us", &in.rtt_us, &err) ||
        !get_int(a, "--msg-bytes", &in.msg_bytes, &err) ||
        !get_int(a, "--inflight", &in.inflight, &err) ||
        !get_int(a, "--shards", &in.shards, &err) || !get_int(a, "--nodes", &in.nodes, &err) ||
        !get_int(a, "--rndv-thresh", &in.rndv_thresh, &err) ||
        !get_int(a, "--wr-bytes", &in.wr_bytes, &err) ||
        !get_double(a, "--margin", &in.margin, &err) ||
        !get_int(a, "--min-exponent", &in.floor_exp, &err) ||
        !get_int(a, "--retry", &in.retry, &err) || !get_int(a, "--peers", &in.peers, &err) ||
        !get_int(a, "--rails", &in.rails, &err) || !get_int(a, "--stagger", &in.stagger, &err)) {
        std::cerr << "twohop-rc plan: " << err << "\n";
        return kBadInput;
    }
    if (!a.opts.count("--rtt-us") || !a.opts.count("--msg-bytes")) {
        std::cerr << "twohop-rc plan: --rtt-us and --msg-bytes are required\n";
        return kBadInput;
    }
    if (link != "ib" && link != "roce") {
        std::cerr << "twohop-rc plan: --link '" << link << "' must be ib or roce\n";
        return kBadInput;
    }
    in.roce = link == "roce";
    Plan p;
    if (!make_plan(in, &p, &err)) {
        std::cerr << "twohop-rc plan: " << err << "\n";
        return kBadInput;
    }
    std::printf("# twohop-rc plan: rtt %g us, %llu-byte segments, %d in flight, %s\n", in.rtt_us,
                (unsigned long long)in.msg_bytes, in.inflight, in.roce ? "RoCE" : "InfiniBand");
    for (const std::string &w : p.why)
        std::printf("#   %s\n", w.c_str());
    std::printf("\n# as MCA parameters (twohop's own UCP context only):\n%s\n",
                mca_args(p.settings).c_str());
    std::printf("\n# as UCX environment (every UCX user in the process; the environment wins over "
                "coll_twohop_rc_*):\n");
    for (int r = 0; r < (in.stagger > 0 ? in.rails : 1); ++r) {
        if (in.stagger > 0)
            std::printf("# process with local rank %d:\n", r);
        for (const UcxPair &u : ucx_pairs(p.settings, r)) {
            if (r == 0 || u.name == "RC_TIMEOUT") {
                std::printf("UCX_%s=%s\n", u.name.c_str(), u.value.c_str());
            }
        }
    }
    return kOk;
}

} // namespace

int main(int argc, char **argv) {
    Args a;
    std::string err;
    if (!parse_args(argc, argv, &a, &err)) {
        std::cerr << "twohop-rc: " << err << "\n" << kUsage;
        return kBadInput;
    }
    if (a.opts.count("--help") || a.positional.empty()) {
        (a.positional.empty() && !a.opts.count("--help") ? std::cerr : std::cout) << kUsage;
        return a.opts.count("--help") ? kOk : kBadInput;
    }
    const std::string root = a.opts.count("--sysfs-root") ? a.opts.at("--sysfs-root") : "/sys";
    DeviceFilter filter;
    if (a.opts.count("--devices") && !parse_device_filter(a.opts.at("--devices"), &filter, &err)) {
        std::cerr << "twohop-rc: --devices: " << err << "\n";
        return kBadInput;
    }
    const std::string &cmd = a.positional[0];
    try {
        if (cmd == "snapshot") {
            if (!check_known(a, {}, &err)) {
                std::cerr << "twohop-rc snapshot: " << err << "\n";
                return kBadInput;
            }
            return cmd_snapshot(take_snapshot(root, filter));
        }
        if (cmd == "watch")
            return cmd_watch(a, root, filter);
        if (cmd == "baseline")
            return cmd_baseline(a, root, filter);
        if (cmd == "plan")
            return cmd_plan(a);
    } catch (const std::exception &e) {
        std::cerr << "twohop-rc " << cmd << ": " << e.what() << "\n";
        return kBadInput;
    }
    std::cerr << "twohop-rc: unknown command '" << cmd << "'\n" << kUsage;
    return kBadInput;
}
