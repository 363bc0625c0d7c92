/*
 * Which ports the per-job report reads: the devices the job's UCX uses, not every HCA of the
 * host (storage or management adapters must not feed the job's verdict).
 */
#ifndef TWOHOP_RC_REPORT_DEVICES_H
#define TWOHOP_RC_REPORT_DEVICES_H

#include "ucx_config.h"
#include "ucx_loaded.h"

#include <string>
#include <vector>

namespace twohop::rc {

struct JobDevices {
    std::string list;   // UCX_NET_DEVICES-style "mlx5_0:1,mlx5_2:1"; "" = every port
    std::string source; // where it came from, printed in the report
};

/* In order: `requested` when non-null ("" = every port, said so); UCX_NET_DEVICES from `env` when
 * set and not "all" (UCX reads the same variable, ucp_context.c NET_DEVICES); else the devices of
 * the RC/DC transports in `resources` (what UCX opens for inter-node traffic, e.g. rc_mlx5 on
 * "mlx5_0:1"), deduplicated in order; else every port, with the reason. */
JobDevices job_devices(const char *requested, const EnvLookup &env,
                       const std::vector<UcxResource> &resources);

} // namespace twohop::rc

#endif
