/*
 * Hop 1 and hop 3 on the GPU for the CPU-posted pipeline on several nodes (GpuHop1: the
 * communicator's stream, its fence, the registered shared-memory segment), and twohop's own
 * device staging buffers (GpuStaging).
 */
#include "gpu_internal.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

using namespace twohop_gpu;

bool gpu_node_capable() { return cuda::kernels_available(); }

void *GpuHop1::own_stream(int dev) {
    if (stream && stream_device != dev) {
        if (!settle()) return nullptr; // still in use: twohop's stream instead
        cuda::stream_destroy(stream_device, stream);
        stream = nullptr;
    }
    if (!stream) {
        stream = cuda::stream_create(dev);
        stream_device = dev;
    }
    return stream;
}

bool GpuHop1::settle() {
    if (stuck) return false;
    // Kernels and copies of the pipeline and the node wait on nothing else; a failed
    // GPU-posted call kernel's waits were released (release_posted): they end.
    if ((pending || job_pending) && !fence.record(stream ? stream_device : device, stream)) {
        stuck = true; // a driver error: whether the work ended is unknown
        return false;
    }
    if (pending || job_pending) {
        const auto start = std::chrono::steady_clock::now();
        while (fence.query() == 0) {
            if (settle_timeout_s > 0 &&
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                        .count() > settle_timeout_s) {
                stuck = true;
                return false;
            }
        }
    }
    if (job_pending) gpu_waiting_kernel_end();
    pending = job_pending = false;
    return true;
}

void gpu_settle(twohop_comm *c) {
    GpuHop1 &h = c->gpu_hop1;
    const bool was = h.stuck;
    if (h.settle() || was) return;
    c->host.log(0, "the communicator's GPU work did not end within coll_twohop_timeout after a "
                   "failed call; its registered memory and device buffers are kept until the "
                   "process ends");
}

void GpuHop1::release_segment() {
    if (!settle()) return; // the GPU may still write it: registered until the process ends
    if (shm_host) cuda::host_unregister(reg_device, shm_host);
    shm_host = shm_dev = nullptr;
    reg_device = -1;
}

GpuHop1::~GpuHop1() {
    release_segment(); // a failed call's work ends before the segment is unmapped
    if (stuck) return; // GPU work that never ended may use all of the below: kept
    cuda::stream_destroy(stream_device, stream);
    for (auto &dc : call_counters) cuda::device_free(dc.first, dc.second);
    if (ring) {
        cuda::host_unregister(ring_device, ring);
        std::free(ring);
    }
}

int gpu_hop1_post(twohop_comm *c, uint64_t off, uint64_t items, char *result,
                  const twohop_reduction &red, void *stream) {
    GpuHop1 &h = c->gpu_hop1;
    twohop_gpu_args a;
    std::memset(&a, 0, sizeof(a));
    const int L = c->topo.local_size();
    for (int l = 0; l < L; ++l) a.in[l] = h.in[l] + off;
    a.out[0] = h.shm_dev + (result - h.shm_host);
    a.nin = L;
    a.nout = 1;
    a.n = items * red.elems_per_item;
    choose_vector(&a, twohop_dtype_size(red.dtype), h.one_device);
    if (!cuda::launch(h.device, kernel_name(red.dtype, red.op), &a, sizeof(a), a.n,
                      stream ? stream : h.own_stream(h.device))) {
        return gpu_error(c, "the hop-1 kernel failed on local rank", c->topo.local_rank);
    }
    if (stream) return TWOHOP_OK; // the caller orders the work on its stream
    h.pending = true;
    h.fenced = false;
    return TWOHOP_OK;
}

int gpu_hop3_post(twohop_comm *c, char *dst, const char *src, uint64_t len) {
    GpuHop1 &h = c->gpu_hop1;
    if (!cuda::copy_async(h.device, dst, src, len, h.own_stream(h.device))) {
        return gpu_error(c, "the hop-3 copy failed on local rank", c->topo.local_rank);
    }
    h.pending = true;
    h.fenced = false;
    return TWOHOP_OK;
}

int gpu_hop1_test(twohop_comm *c) {
    GpuHop1 &h = c->gpu_hop1;
    if (!h.pending) return TWOHOP_OK;
    if (!h.fenced) {
        if (!h.fence.record(h.device, h.own_stream(h.device))) {
            return gpu_error(c, "recording a CUDA event failed on local rank",
                             c->topo.local_rank);
        }
        h.fenced = true;
    }
    const int q = h.fence.query();
    if (q == 0) return TWOHOP_PENDING;
    if (q < 0) return gpu_error(c, "twohop's GPU work failed on local rank", c->topo.local_rank);
    h.pending = h.fenced = false;
    return TWOHOP_OK;
}

GpuStaging::~GpuStaging() {
    if (ptr) cuda::device_free(device, ptr);
    for (auto &r : retired) cuda::device_free(r.first, r.second);
}
