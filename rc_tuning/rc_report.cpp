/*
 * Per-job report (coll_twohop_rc_report=1): counters of the HCAs used, read at component init
 * (twohop_rc_report_begin) and at MPI_Finalize (twohop_rc_report_end), classified and explained.
 * The coll layer calls both on the first rank of each node only.
 */
#include "counter_delta.h"
#include "port_snapshot.h"
#include "rc_api.h"
#include "report_devices.h"

#include <sstream>
#include <unistd.h>

struct twohop_rc_report {
    std::string root;
    std::string devices;
    std::string devices_source;
    twohop::rc::DeviceFilter filter;
    std::string filter_error;
    twohop::rc::Snapshot begin;
};

namespace {

std::string host_name() {
    char buf[256] = "";
    if (gethostname(buf, sizeof(buf) - 1) != 0) {
        return "?";
    }
    return buf;
}

} // namespace

extern "C" struct twohop_rc_report *twohop_rc_report_begin(const char *sysfs_root,
                                                           const char *devices) {
    try {
        auto *r = new twohop_rc_report;
        r->root = sysfs_root != nullptr ? sysfs_root : "/sys";
        twohop::rc::JobDevices jd = twohop::rc::job_devices(
            devices, twohop::rc::process_env(),
            devices != nullptr ? std::vector<twohop::rc::UcxResource>{}
                               : twohop::rc::loaded_ucx_resources());
        r->devices = jd.list;
        r->devices_source = jd.source;
        if (!twohop::rc::parse_device_filter(r->devices, &r->filter, &r->filter_error)) {
            r->filter = {}; // fall back to all ports; end() says why
        }
        r->begin = twohop::rc::take_snapshot(r->root, r->filter);
        return r;
    } catch (...) {
        return nullptr; // end(nullptr) prints one line
    }
}

extern "C" int twohop_rc_report_end(struct twohop_rc_report *r, FILE *out) {
    using namespace twohop::rc;
    const std::string prefix = "twohop rc report (" + host_name() + "): ";
    if (r == nullptr) {
        std::fprintf(out, "%sno report: begin was not called or failed\n", prefix.c_str());
        return TWOHOP_RC_EIO;
    }
    int rc = TWOHOP_RC_OK;
    try {
        std::ostringstream os;
        if (!r->begin.has_rdma || r->begin.ports.empty()) {
            os << prefix << "no RDMA device ("
               << (r->begin.has_rdma ? "no port matched" : r->root + "/class/infiniband missing")
               << ")\n";
            rc = TWOHOP_RC_ENODEV;
        } else {
            Snapshot end = take_snapshot(r->root, r->filter);
            SnapshotDelta d = diff(r->begin, end);
            char head[128];
            std::snprintf(head, sizeof(head), "%zu port(s) over %.1f s, verdict: ", d.ports.size(),
                          d.seconds);
            os << prefix << head << verdict_name(verdict(d)) << "\n";
            os << "  devices: " << (r->devices.empty() ? "all" : r->devices) << " ("
               << r->devices_source << ")\n";
            if (!r->filter_error.empty()) {
                os << "  devices filter ignored: " << r->filter_error << "\n";
            }
            for (const DeviceFilter::value_type &e : r->filter.entries) {
                bool seen = false;
                for (const PortSnapshot &p : r->begin.ports) {
                    seen = seen || (p.device == e.first && (e.second == 0 || p.port == e.second));
                }
                if (!seen) {
                    os << "  " << e.first << (e.second ? ":" + std::to_string(e.second) : "")
                       << ": not found under " << r->root << "/class/infiniband\n";
                }
            }
            print_delta(os, d, "during the job");
        }
        std::fputs(os.str().c_str(), out);
    } catch (const std::exception &e) {
        std::fprintf(out, "%sfailed: %s\n", prefix.c_str(), e.what());
        rc = TWOHOP_RC_EIO;
    }
    delete r;
    return rc;
}
