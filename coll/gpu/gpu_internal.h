/*
 * Private to coll/gpu/: what the files of the node's GPU path share (gpu_node.h is their
 * interface to the rest of the core). The per-call descriptor and vote (vote.cpp), the node
 * kernel (node_path.cpp), the process-wide counters and the count of kernels that may wait for
 * other ranks. Everything here is in namespace twohop_gpu; each file of coll/gpu/ uses it.
 */
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "comm_state.h"
#include "core_counters.h"
#include "cuda_driver.h"
#include "gpu_kernel_list.h"
#include "gpu_node.h"
#include "node_shm.h"
#include "segment_plan.h"
#include "stream_call.h"

namespace twohop_gpu {

using twohop::RankFlags;
namespace cuda = twohop::cuda;

using Clock = std::chrono::steady_clock;

/* Microseconds from a to b (negative when b is earlier): the verbose-3 timings of coll/gpu. */
inline double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

/* What a local rank publishes in its descriptor block for one call. */
struct GpuDesc {
    char pci[32];       // PCI bus id of the buffers' GPU
    struct Buffer {
        unsigned char handle[cuda::kIpcHandleBytes];
        uint64_t off;  // byte offset of the buffer in its allocation
        uint64_t base; // the allocation's address in the publishing process
        uint64_t id;   // its buffer id there (a new id = a new allocation)
        uint64_t size; // the allocation's size in bytes
    } send, recv;
    int64_t pid;
    uint64_t msg_bytes, item_bytes; // the call's size: every local rank must pass the same
    uint8_t can;         // device buffers, kernel, handles: this rank can take the GPU path
    uint8_t in_place;
    uint8_t enqueue;     // called as twohop_allreduce_enqueue (1) or MPI_Allreduce (0)
    uint8_t recv_staged; // `recv` is twohop's staging buffer, not the receive buffer
    uint8_t posted;      // several nodes, non-blocking/persistent: can run the GPU-posted job
};
static_assert(sizeof(GpuDesc) <= twohop::ShmLayout::kDescBytes, "descriptor block");

/* Kernel name of (t, op): the reduction kernel, or with `call` the GPU-posted call kernel
 * (posted_call.h); nullptr when the GPU path has no kernel for it (vote.cpp). */
const char *kernel_name(twohop_dtype t, twohop_op op, bool call = false);

/* Logs what failed (verbose 1, with the driver's last error) and returns
 * TWOHOP_ERR_TRANSPORT. */
int gpu_error(twohop_comm *c, const char *what, int rank);

/* Sets a.vec / a.head: 16-byte vector accesses when every pointer lines up (vote.cpp). */
void choose_vector(twohop_gpu_args *a, size_t elem, bool one_device);

/* My descriptor of a call of `bytes` bytes (vote.cpp: the staging it needs, d->can). */
void describe(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
              const twohop_reduction &red, uint64_t bytes, GpuDesc *d, int *device,
              bool *stage_in, bool *stage_out, bool enqueue = false);

/* The rounds of the node's decision on call s (vote.cpp has the protocol):
 * publish_desc (round 1), vote_publish (round 2, this rank's vote; TWOHOP_PENDING on the proxy
 * thread when a stale mapping must be closed first), vote_round (round 2 to the end: *all =
 * every local rank voted yes), vote_no (no without waiting: publish_no, then decline), decline
 * (the sequence number given back). Those returning int return a twohop_status. */
void publish_desc(twohop_comm *c, const GpuDesc &d, uint64_t s);
int vote_publish(twohop_comm *c, const GpuDesc &d, int device, uint64_t s, GpuDesc *peer,
                 bool *one_device);
int vote_round(twohop_comm *c, const GpuDesc &d, int device, uint64_t s, GpuDesc *peer,
               bool *one_device, bool *all, bool unlocked = false);
void publish_no(twohop_comm *c, uint64_t s);
int vote_no(twohop_comm *c, uint64_t s);
int decline(twohop_comm *c, uint64_t s);

/* Waits for every local rank's `which` >= target without c's engine lock (vote.cpp). */
int wait_all_unlocked(twohop_comm *c, std::atomic<uint64_t> RankFlags::*which,
                      uint64_t target);

/* The kernel arguments of this rank's shard on one node, peers' buffers opened (vote.cpp). */
int shard_args(twohop_comm *c, const GpuDesc *peer, int device, bool one_device,
               char *my_in, char *my_out, uint64_t count, const twohop_reduction &red,
               bool whole, twohop_gpu_args *a);

/* Several nodes, the node voted yes: every local rank's input mapped for hop 1 (and receive
 * buffer for hop 3 gathered on the GPU), c->gpu_hop1 active (vote.cpp). */
int activate_hop1(twohop_comm *c, const GpuDesc *peer, int device, bool one_device,
                  char *my_in, char *my_out, bool gather_allowed = true);

/* One node, the node voted yes: this rank's kernel of call s, waited for (node_path.cpp). */
int node_kernel(twohop_comm *c, const GpuDesc *peer, int device, bool one_device, char *my_in,
                char *my_out, uint64_t count, const twohop_reduction &red, uint64_t s,
                bool stage_in, bool stage_out);

/* Verbose 2: the blocking GPU-posted calls' wake-ups per size class (posted_path.cpp). */
void log_wake_ups(twohop_comm *c);

/* Kernels that may wait for other ranks or for the proxy, and the lock their launches and the
 * proxy's CUDA steps take (vote.cpp has the rule). t_cuda_step: this thread holds the lock
 * for a step. */
extern std::atomic<int> g_waiting_kernels;
extern std::mutex g_cuda_step_m;
extern thread_local bool t_cuda_step;

} // namespace twohop_gpu
