/* sysfs port-counter snapshots; see port_snapshot.h. */
#include "port_snapshot.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace twohop::rc {

namespace {

std::vector<std::string> list_dir(const std::string &path, bool *exists) {
    std::vector<std::string> names;
    DIR *d = opendir(path.c_str());
    *exists = d != nullptr;
    if (d == nullptr) {
        return names;
    }
    while (struct dirent *e = readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
            names.emplace_back(e->d_name);
        }
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

/* Reads a small sysfs file. Returns false with a reason for directories, dangling links,
 * permission problems and read errors. */
bool read_small_file(const std::string &path, std::string *text, std::string *err) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
        *err = std::string("cannot stat: ") + std::strerror(errno);
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        *err = "is a directory, not a counter file";
        return false;
    }
    std::ifstream in(path);
    if (!in) {
        *err = std::string("cannot open: ") + std::strerror(errno);
        return false;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
        *err = "read error";
        return false;
    }
    *text = ss.str();
    return true;
}

std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \t\r\n");
    size_t e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void read_counter_dir(const std::string &dir, bool hw, PortSnapshot *ps, bool *exists) {
    for (const std::string &name : list_dir(dir, exists)) {
        CounterValue cv;
        cv.name = name;
        cv.hw = hw;
        std::string text;
        if (read_small_file(dir + "/" + name, &text, &cv.error)) {
            cv.ok = parse_counter_value(text, &cv.value, &cv.error);
        }
        ps->counters.push_back(std::move(cv));
    }
}

bool parse_int(const std::string &s, int *out) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
        return false;
    }
    *out = std::stoi(s);
    return true;
}

} // namespace

const CounterValue *PortSnapshot::find(const std::string &name) const {
    for (const CounterValue &c : counters) {
        if (c.name == name) {
            return &c;
        }
    }
    return nullptr;
}

const PortSnapshot *Snapshot::find(const std::string &device, int port) const {
    for (const PortSnapshot &p : ports) {
        if (p.device == device && p.port == port) {
            return &p;
        }
    }
    return nullptr;
}

bool DeviceFilter::matches(const std::string &device, int port) const {
    if (entries.empty()) {
        return true;
    }
    for (const auto &e : entries) {
        if (e.first == device && (e.second == 0 || e.second == port)) {
            return true;
        }
    }
    return false;
}

bool parse_device_filter(const std::string &spec, DeviceFilter *out, std::string *err) {
    out->entries.clear();
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
        item = trim(item);
        if (item.empty()) {
            continue;
        }
        size_t colon = item.find(':');
        int port = 0;
        std::string dev = item.substr(0, colon);
        if (colon != std::string::npos &&
            (!parse_int(item.substr(colon + 1), &port) || port < 1 || port > 255)) {
            *err = "device '" + item + "': port '" + item.substr(colon + 1) +
                   "' is not a number in 1..255 (expected device or device:port)";
            return false;
        }
        if (dev.empty()) {
            *err = "device '" + item + "': empty device name";
            return false;
        }
        out->entries.emplace_back(dev, port);
    }
    return true;
}

bool parse_counter_value(const std::string &text, std::uint64_t *out, std::string *err) {
    std::string t = trim(text);
    if (t.empty() || t.size() > 20 || t.find_first_not_of("0123456789") != std::string::npos) {
        *err = "not a number: '" + t.substr(0, 32) + "'";
        return false;
    }
    errno = 0;
    unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
    if (errno == ERANGE) {
        *err = "does not fit 64 bits: '" + t + "'";
        return false;
    }
    *out = v;
    return true;
}

Snapshot take_snapshot(const std::string &root, const DeviceFilter &filter) {
    Snapshot snap;
    snap.root = root;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snap.time_s = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;

    const std::string ib = root + "/class/infiniband";
    for (const std::string &dev : list_dir(ib, &snap.has_rdma)) {
        bool ports_exist = false;
        const std::string ports_dir = ib + "/" + dev + "/ports";
        std::vector<std::string> ports = list_dir(ports_dir, &ports_exist);
        if (!ports_exist) {
            snap.errors.push_back(dev + ": cannot list " + ports_dir + ": " + std::strerror(errno));
            continue;
        }
        for (const std::string &pname : ports) {
            int port = 0;
            if (!parse_int(pname, &port)) {
                snap.errors.push_back(dev + ": ignoring '" + pname + "' in " + ports_dir +
                                      " (not a port number)");
                continue;
            }
            if (!filter.matches(dev, port)) {
                continue;
            }
            PortSnapshot ps;
            ps.device = dev;
            ps.port = port;
            const std::string pdir = ports_dir + "/" + pname;
            std::string text, ignored;
            if (read_small_file(pdir + "/state", &text, &ignored))
                ps.state = trim(text);
            if (read_small_file(pdir + "/rate", &text, &ignored))
                ps.rate = trim(text);
            if (read_small_file(pdir + "/link_layer", &text, &ignored))
                ps.link_layer = trim(text);
            read_counter_dir(pdir + "/counters", false, &ps, &ps.has_counters);
            read_counter_dir(pdir + "/hw_counters", true, &ps, &ps.has_hw_counters);
            snap.ports.push_back(std::move(ps));
        }
    }
    return snap;
}

} // namespace twohop::rc
