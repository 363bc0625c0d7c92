/* Devices of the per-job report; see report_devices.h. */
#include "report_devices.h"

#include <algorithm>

namespace twohop::rc {

JobDevices job_devices(const char *requested, const EnvLookup &env,
                       const std::vector<UcxResource> &resources) {
    if (requested != nullptr) {
        return {requested, *requested != '\0' ? "given by the caller" : "every port (requested)"};
    }
    const char *net = env("UCX_NET_DEVICES");
    if (net != nullptr && *net != '\0' && std::string(net) != "all") {
        return {net, "UCX_NET_DEVICES"};
    }
    std::vector<std::string> devs;
    for (const UcxResource &r : resources) {
        bool inter_node = r.tl.rfind("rc_", 0) == 0 || r.tl.rfind("dc_", 0) == 0;
        if (inter_node && std::find(devs.begin(), devs.end(), r.dev) == devs.end()) {
            devs.push_back(r.dev);
        }
    }
    if (devs.empty()) {
        return {"", "every port (UCX reports no RC/DC device)"};
    }
    std::string list;
    for (const std::string &d : devs) {
        list += (list.empty() ? "" : ",") + d;
    }
    return {list, "RC/DC devices reported by UCX"};
}

} // namespace twohop::rc
