/*
 * The node's GPU path on one node, as a blocking call (gpu_node_allreduce): the vote, then one
 * reduce-and-broadcast kernel per shard (or one for the node) over CUDA IPC. Its engine job is
 * node_job.cpp.
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

#include "proxy.h"

namespace twohop_gpu {


/*
 * The node GPU path's kernel for call s, every local rank having voted yes: this rank's shard
 * of the message from every local input into every local output (peers' buffers opened
 * through CUDA IPC), or -- when every buffer is on one GPU (one_device, the same on every rank:
 * each compares all descriptors) and the call is at most gpu_one_kernel_bytes -- the whole
 * message in one kernel on local rank 0, the others launching nothing: one launch and one
 * synchronisation per call instead of one per rank, which under MPS cost more than the
 * reduction itself below a few MiB (above 64 MiB one kernel per rank was a few % faster).
 * Waits for this rank's kernel only (never for a peer). Returns a twohop_status.
 */
int node_kernel(twohop_comm *c, const GpuDesc *peer, int device, bool one_device, char *my_in,
                char *my_out, uint64_t count, const twohop_reduction &red, uint64_t s,
                bool stage_in, bool stage_out) {
    const int me = c->topo.local_rank;
    const uint64_t bytes = count * red.item_bytes;
    const bool one_kernel = one_device && bytes <= c->gpu_one_kernel_bytes;
    if (one_kernel && me != 0) return TWOHOP_OK;
    twohop_gpu_args a;
    int rc = shard_args(c, peer, device, one_device, my_in, my_out, count, red, one_kernel, &a);
    if (rc != TWOHOP_OK) return rc;
    if (c->verbose >= 3) {
        char msg[320];
        std::snprintf(msg, sizeof(msg),
                      "GPU path: seq %llu, %llu elements%s, staged in %d out %d, vector %d, "
                      "in[0] %p out[0] %p in[1] %p out[1] %p%s",
                      static_cast<unsigned long long>(s), static_cast<unsigned long long>(a.n),
                      one_kernel ? " (the node's one kernel)" : "", stage_in, stage_out, a.vec,
                      a.in[0], a.out[0], a.in[1], a.out[1],
                      twohop::Proxy::on_proxy_thread() ? ", on the proxy thread" : "");
        c->host.log(3, msg);
    }
    if (!cuda::launch_and_wait(device, kernel_name(red.dtype, red.op), &a, sizeof(a), a.n,
                               c->gpu_hop1.own_stream(device))) {
        return gpu_error(c, "the reduction kernel failed on local rank", me);
    }
    return TWOHOP_OK;
}


} // namespace twohop_gpu

using namespace twohop_gpu;

int gpu_node_allreduce(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                       uint64_t count, const twohop_reduction &red, bool *taken) {
    *taken = false;
    const int me = c->topo.local_rank;
    const uint64_t s = c->seq.take();
    RankFlags &mine = c->shm.flags(me);
    // Phase clock (verbose >= 2): tick(k) adds the time since the previous tick to phase k.
    const bool clocked = c->verbose >= 2;
    double ph[5] = {0, 0, 0, 0, 0};
    auto t = clocked ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    auto tick = [&](int k) {
        if (!clocked) return;
        const auto now = std::chrono::steady_clock::now();
        ph[k] += std::chrono::duration<double, std::micro>(now - t).count();
        t = now;
    };

    // Round 1: my descriptor. My input must be complete before peers' kernels read it.
    GpuDesc d;
    int device = -1;
    bool stage_in = false, stage_out = false;
    const uint64_t bytes = count * red.item_bytes;
    describe(c, in, out, red, bytes, &d, &device, &stage_in, &stage_out);
    if (!d.can) { // no wait for the node: see vote_no
        publish_desc(c, d, s);
        return vote_no(c, s);
    }
    // Peers' kernels of earlier calls may still read my staging buffers.
    int rc = s > uint64_t(c->depth) ? c->wait_all(&RankFlags::done, s - c->depth) : TWOHOP_OK;
    if (rc != TWOHOP_OK) return rc;
    char *send_stage = static_cast<char *>(c->gpu_staging[d.in_place ? 1 : 0].ptr);
    char *recv_stage = static_cast<char *>(c->gpu_staging[1].ptr);
    if (!cuda::sync_input(device)) d.can = 0;
    if (d.can && stage_in && !cuda::copy(send_stage, in.device, bytes)) d.can = 0;
    tick(0);
    publish_desc(c, d, s);
    if (!d.can) return vote_no(c, s);
    if ((rc = c->wait_all(&RankFlags::desc_seq, s)) != TWOHOP_OK) return rc;
    tick(1);

    // Round 2: can I reach every peer's GPU, and can every peer?
    GpuDesc peer[TWOHOP_GPU_MAX_RANKS];
    bool one_device = true, all = true;
    if ((rc = vote_round(c, d, device, s, peer, &one_device, &all)) != TWOHOP_OK) return rc;
    if (!all) return decline(c, s); // everyone takes the host path
    tick(2);

    if (c->topo.n_nodes() > 1) { // hop 1 and hop 3 only: the pipeline enqueues them per segment (gpu_hop1_post, gpu_hop3_post)
        // GPU-posted calls gather hop 3 from gather_min_bytes (agreed, like gpu_posted and the
        // message size: every local rank decides alike).
        const bool gather_pays = !c->gpu_posted || bytes >= c->gather_min_bytes;
        if ((rc = activate_hop1(c, peer, device, one_device, stage_in ? send_stage : in.device,
                                out.device, gather_pays)) != TWOHOP_OK) {
            return rc;
        }
        return decline(c, s); // the pipeline runs the call, from this seq on
    }

    // The GPU path (node_kernel).
    rc = node_kernel(c, peer, device, one_device, stage_in ? send_stage : in.device,
                     stage_out ? recv_stage : out.device, count, red, s, stage_in, stage_out);
    if (rc != TWOHOP_OK) return rc;
    tick(3);
    mine.reduced.store(s, std::memory_order_release);
    if ((rc = c->wait_all(&RankFlags::reduced, s)) != TWOHOP_OK) return rc;
    tick(4);
    if (stage_out && !cuda::copy(out.device, recv_stage, bytes)) {
        return gpu_error(c, "copying the result out of twohop's device staging on local rank", me);
    }
    mine.done.store(s, std::memory_order_release);
    *taken = true;
    twohop::count(TWOHOP_COUNTER_GPU_PATH_CALLS);
    if (clocked && c->gpu_clock.calls.size() < 65536) {
        c->gpu_clock.calls.push_back({float(ph[0]), float(ph[1]), float(ph[2]), float(ph[3]),
                                      float(ph[4])});
    }
    return TWOHOP_OK;
}

void gpu_node_log_phases(twohop_comm *c) {
    log_wake_ups(c);
    std::vector<std::array<float, 5>> &v = c->gpu_clock.calls;
    if (v.empty()) return;
    float med[5];
    for (int k = 0; k < 5; ++k) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end(),
                         [k](const std::array<float, 5> &a, const std::array<float, 5> &b) {
                             return a[k] < b[k];
                         });
        med[k] = v[v.size() / 2][k];
    }
    char msg[320];
    std::snprintf(msg, sizeof(msg),
                  "GPU path: %zu calls, median us per call on the calling thread: input sync "
                  "%.2f, descriptor round %.2f, vote round %.2f, kernel %.2f, completion round "
                  "%.2f", v.size(), med[0], med[1], med[2], med[3], med[4]);
    c->host.log(2, msg);
}
