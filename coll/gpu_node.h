/*
 * The node's GPU path for one allreduce on a single-node communicator whose buffers are all
 * CUDA device memory: every local rank reduces its shard of the message straight from the
 * other ranks' device buffers (CUDA IPC) and writes the result into every rank's receive
 * buffer, in one kernel (reads p·n, writes p·n bytes of HBM in all: the copy bound).
 *
 * Whether a call takes it is decided per call by the node's ranks together, never by one rank:
 *   round 1  each rank publishes a descriptor (can I: device buffers in the canonical layout,
 *            a GPU kernel for the (type, op), IPC handles, my GPU's PCI id) and arrived = s
 *   round 2  each rank checks it can reach every peer's GPU and publishes its vote
 *   decision GPU path iff every vote is yes; otherwise every rank takes the host path.
 * Only communicators whose ranks all agreed at set-up that they have the driver and the
 * kernels, on one node, run the rounds (identical on every rank).
 */
#ifndef TWOHOP_GPU_NODE_H
#define TWOHOP_GPU_NODE_H

#include <cstdint>
#include <utility>
#include <vector>

#include "reducer.h"
#include "twohop_core.h"

struct twohop_comm;

/*
 * A device buffer twohop owns for a rank whose own buffer cannot be shared through CUDA IPC
 * (stream-ordered pool or managed memory): the input is copied in before the call and the
 * result out after it, both device-to-device. Grown on demand, freed with the communicator.
 */
struct GpuStaging {
    void *ptr = nullptr;
    uint64_t bytes = 0;
    int device = -1;
    // Outgrown buffers stay allocated until the communicator is freed: peers may still hold
    // them mapped through CUDA IPC, and freeing exported memory before every importer closed
    // it is undefined (CUDA driver API, cuIpcOpenMemHandle).
    std::vector<std::pair<int, void *>> retired;
    ~GpuStaging();
};

/*
 * Runs the decision rounds and, when every local rank can, the GPU path. *taken tells whether
 * the call was done here (else the caller runs the host path). Returns a twohop_status.
 */
int gpu_node_allreduce(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                       uint64_t count, const twohop_reduction &red, bool *taken);

/* True when this process can take part in the GPU path at all (driver and kernels loaded). */
bool gpu_node_capable();

#endif
