/*
 * The GPU's half of a GPU-posted call (PostedSchedule: the call kernel or the stream operations
 * per segment) and what it needs: the descriptor ring, the kernels' arrival counters, the
 * device addresses of the node's flags, the release of every wait after a failure.
 */
#include "posted_exec.h"

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


namespace twohop_gpu {


/* Device address of local rank l's flag `which` in the registered segment. */
void *flag_addr(twohop_comm *c, int l, std::atomic<uint64_t> RankFlags::*which) {
    GpuHop1 &h = c->gpu_hop1;
    char *host = reinterpret_cast<char *>(&(c->shm.flags(l).*which));
    return h.shm_dev + (host - h.shm_host);
}

/* Device address of local rank l's `ready` word `word` (RankFlags::ready). */
void *ready_addr(twohop_comm *c, int l, int word) {
    GpuHop1 &h = c->gpu_hop1;
    char *host = reinterpret_cast<char *>(&c->shm.flags(l).ready[word]);
    return h.shm_dev + (host - h.shm_host);
}

/* Sets every local rank's GPU-awaited flags past any sequence number (the comparison is cyclic
 * over 64 bits), so streams waiting for a failed or vanished peer drain. The communicator is
 * unusable afterwards. */
void release_gpu_waits(twohop_comm *c) {
    const uint64_t past = uint64_t(1) << 62;
    for (int l = 0; l < c->topo.local_size(); ++l) {
        RankFlags &f = c->shm.flags(l);
        for (auto &w : f.ready) w.store(past, std::memory_order_release);
        f.reduced.store(past, std::memory_order_release);
        f.done.store(past, std::memory_order_release);
        f.gathered.store(past, std::memory_order_release);
    }
}


/* The descriptor ring of c on `device`, allocated and registered on first use. */
bool ensure_ring(twohop_comm *c, int device) {
    GpuHop1 &h = c->gpu_hop1;
    if (h.ring && h.ring_device == device) return true;
    if (h.ring) {
        cuda::host_unregister(h.ring_device, h.ring);
        std::free(h.ring);
        h.ring = h.ring_dev = nullptr;
    }
    const size_t bytes = (sizeof(twohop::DoorbellRing) + 4095) / 4096 * 4096;
    void *p = std::aligned_alloc(4096, bytes);
    if (!p) return false;
    std::memset(p, 0, bytes);
    void *d = cuda::host_register(device, p, bytes);
    if (!d) {
        std::free(p);
        return false;
    }
    h.ring = static_cast<twohop::DoorbellRing *>(p);
    h.ring_dev = static_cast<twohop::DoorbellRing *>(d);
    h.ring_device = device;
    return true;
}


/* Region `index` of the call kernels' counters on `device`, allocated and zeroed on first
 * use; nullptr on a driver error. */
unsigned long long *call_counters(twohop_comm *c, int device, int index) {
    GpuHop1 &h = c->gpu_hop1;
    auto it = h.call_counters.find(device);
    if (it == h.call_counters.end()) {
        const size_t bytes = kCounterRegions * kCounterWords * sizeof(unsigned long long);
        void *p = cuda::device_alloc(device, bytes);
        if (p == nullptr) return nullptr;
        if (!cuda::zero_device(device, p, bytes)) {
            cuda::device_free(device, p);
            return nullptr;
        }
        it = h.call_counters.emplace(device, static_cast<unsigned long long *>(p)).first;
    }
    return it->second + static_cast<size_t>(index) * kCounterWords;
}

/* Threads per block of the GPU-posted call kernel (its __launch_bounds__, gpu_call.cuh). */

/*
 * Thread blocks per half of this call's GPU-posted kernel (posted_call.h) on `device` for a
 * message of `bytes` (coll_twohop_posted_kernel_blocks from coll_twohop_posted_kernel_wide_bytes,
 * else 1), or 0 when the call runs as stream operations per segment:
 * coll_twohop_posted_kernel_blocks is 0, the node is larger than the kernel's argument holds,
 * the kernel cannot be loaded, or the GPU could not hold every call kernel that may wait at
 * once. That bound: every local rank (they may all share this GPU) with one blocking call and
 * StreamSlots::kMax stream-ordered calls in flight, each kernel's blocks all resident
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor x multiprocessors); fewer blocks when that
 * many do not fit. The two forms write the same flags and descriptors, so this is each rank's
 * own choice. Loads the kernel now (on the calling thread, never lazily at a launch).
 */
int call_kernel_blocks(twohop_comm *c, const twohop_reduction &red, uint64_t bytes,
                       int device) {
    using twohop::PostedCallArgs;
    if (c->posted_kernel_blocks <= 0) return 0;
    if (c->topo.local_size() > PostedCallArgs::kMaxRanks ||
        c->topo.n_shards() > PostedCallArgs::kMaxRanks ||
        c->my_shards.size() > size_t(PostedCallArgs::kMaxRanks) ||
        c->depth > PostedCallArgs::kMaxSets) {
        return 0;
    }
    // The kernel addresses its inputs in elements of the type: whole elements per item.
    if (red.elems_per_item == 0 ||
        red.item_bytes != red.elems_per_item * twohop_dtype_size(red.dtype)) {
        return 0;
    }
    const char *name = kernel_name(red.dtype, red.op, true);
    if (name == nullptr || !cuda::preload(device, name)) return 0;
    const int want = bytes >= c->posted_wide_bytes ? c->posted_kernel_blocks : 1;
    const int kernels = c->topo.local_size() * (static_cast<int>(twohop::StreamSlots::kMax) + 1);
    const int fit = cuda::resident_blocks(device, name, kCallThreads) / (2 * kernels);
    return want < fit ? want : fit;
}


void PostedSchedule::start(uint64_t k) {
    GpuHop1 &h = c->gpu_hop1;
    const uint64_t s = s0 + 1 + k;
    const int set = static_cast<int>(s % depth());
    const uint64_t ib = red.item_bytes;
    const twohop::Range seg = twohop::segment_range(count, seg_items, k);
    // The proxy opens the gate when the buffer set is free (a wait on an open gate passes).
    ok = ok && cuda::wait_flag(h.device, stream, &ring_dev->gate_start, k + 1);
    for (size_t i = 0; ok && i < c->my_shards.size(); ++i) {
        const twohop::Range r = twohop::split_even(seg.count, shards(),
                                                   static_cast<uint64_t>(c->my_shards[i]));
        ok = gpu_hop1_post(c, (seg.offset + r.offset) * ib, r.count,
                           c->shm.result(set) + r.offset * ib, red, stream) == TWOHOP_OK;
    }
    const bool last = k + 1 == nseg;
    const uint64_t batch = this->batch();
    twohop::PostArgs pa{ring_dev, k, {s, static_cast<uint32_t>(k), last ? 1u : 0u},
                        (k + 1) % batch == 0 || last ? 1 : 0, 0};
    ok = ok && cuda::launch(h.device, "th_post", &pa, sizeof(pa), 1, stream);
}

void PostedSchedule::finish(uint64_t k) {
    GpuHop1 &h = c->gpu_hop1;
    const int dev = h.device;
    const int me = c->topo.local_rank;
    const int node = c->topo.my_node;
    const uint64_t s = s0 + 1 + k;
    const int set = static_cast<int>(s % depth());
    const uint64_t ib = red.item_bytes;
    const twohop::Range seg = twohop::segment_range(count, seg_items, k);
    const int first = c->my_shards.front();
    // The proxy opens the gate when every shard's owner published its hop-2 result.
    ok = ok && cuda::wait_flag(dev, stream, &ring_dev->gate_finish, k + 1);
    // Hop 3 gathered on the GPU (GpuHop1::gather): my own shards from host memory, then
    // `gathered`, then every other shard from its owner's receive buffer once the owner's
    // GPU wrote its `gathered` (PipelineJob::finish_hop3_gpu is the CPU-posted form).
    // Without gathering, every shard comes from host memory, where the segment's result is
    // contiguous: one copy.
    if (!h.gather) {
        ok = ok && cuda::copy_async(dev, out + seg.offset * ib, c->shm.result(set),
                                    seg.count * ib, stream);
    }
    for (int pass = 0; ok && h.gather && pass < 2; ++pass) {
        for (uint64_t j = 0; ok && j < shards(); ++j) {
            const int sh = static_cast<int>((first + j) % shards());
            const int owner = c->topo.shard_owner(node, sh);
            const twohop::Range r = twohop::split_even(seg.count, shards(),
                                                       static_cast<uint64_t>(sh));
            const uint64_t off = (seg.offset + r.offset) * ib;
            if (pass == 0 && owner == me) {
                ok = cuda::copy_async(dev, out + off, c->shm.result(set) + r.offset * ib,
                                      r.count * ib, stream);
            } else if (pass == 1 && owner != me) {
                ok = cuda::wait_flag(dev, stream,
                                     flag_addr(c, owner, &RankFlags::gathered), s) &&
                     cuda::copy_async(dev, out + off, h.out[owner] + off, r.count * ib,
                                      stream);
            }
        }
        if (pass == 0) {
            ok = ok && cuda::write_flag(dev, stream,
                                        flag_addr(c, me, &RankFlags::gathered), s);
        }
    }
    ok = ok && cuda::write_flag(dev, stream, flag_addr(c, me, &RankFlags::done), s);
}

void PostedSchedule::call(unsigned long long *counters, int blocks) {
    GpuHop1 &h = c->gpu_hop1;
    const int L = c->topo.local_size();
    const int me = c->topo.local_rank;
    twohop::PostedCallArgs a;
    std::memset(&a, 0, sizeof(a));
    a.ring = ring_dev;
    for (int l = 0; l < L; ++l) {
        a.in[l] = h.in[l];
        a.out[l] = l == me ? out : h.out[l];
        a.gathered[l] = static_cast<uint64_t *>(flag_addr(c, l, &RankFlags::gathered));
        a.done[l] = static_cast<uint64_t *>(flag_addr(c, l, &RankFlags::done));
        a.ready[l] = static_cast<uint64_t *>(ready_addr(c, l, ready_word));
    }
    a.ready_seq = ready_seq;
    a.end_word = end_word;
    a.end_value = end_value;
    for (int set = 0; set < c->depth; ++set) {
        a.result[set] = h.shm_dev + (c->shm.result(set) - h.shm_host);
    }
    a.counters = counters;
    a.s0 = s0;
    a.nseg = nseg;
    a.count = count;
    a.seg_items = seg_items;
    a.item_bytes = red.item_bytes;
    a.elems_per_item = red.elems_per_item;
    // The blocking call's waits are bounded in the kernel too. A stream-ordered call's
    // kernel may wait for its job while the job queues behind calls that wait for the
    // application, like its job: no timeout; a failure ends its waits through the fault
    // word that release_posted sets.
    a.timeout_ns = (stream == nullptr || bounded) && c->timeout_s > 0
                       ? static_cast<uint64_t>(c->timeout_s * 1e9)
                       : 0;
    a.local_size = L;
    a.me = me;
    a.depth = c->depth;
    a.shards = static_cast<int32_t>(shards());
    a.n_mine = static_cast<int32_t>(c->my_shards.size());
    a.gather = h.gather ? 1 : 0;
    a.vec_ok = h.one_device ? 1 : 0;
    a.batch = static_cast<int32_t>(batch());
    for (size_t i = 0; i < c->my_shards.size(); ++i) a.mine[i] = c->my_shards[i];
    for (int sh = 0; sh < a.shards; ++sh) {
        a.owner[sh] = c->topo.shard_owner(c->topo.my_node, sh);
    }
    ok = ok && cuda::launch_grid(h.device, kernel_name(red.dtype, red.op, true), &a,
                                 sizeof(a), 2 * static_cast<unsigned>(blocks), kCallThreads,
                                 stream);
}

bool PostedSchedule::enqueue(const std::function<uint64_t()> &start_limit) {
    const bool all = twohop::pipeline_run(
        &started, &finished, nseg, depth(), [this] { return ok; }, start_limit,
        [this](uint64_t k) { start(k); }, [this](uint64_t k) { finish(k); });
    if (!all && ok) return false; // held back for now
    GpuHop1 &h = c->gpu_hop1;
    for (int l = 0; ok && !tail_enqueued && h.gather && l < c->topo.local_size(); ++l) {
        if (l != c->topo.local_rank) {
            ok = cuda::wait_flag(h.device, stream, flag_addr(c, l, &RankFlags::done),
                                 s0 + nseg);
        }
    }
    tail_enqueued = true;
    return true;
}

/* Every wait of a GPU-posted call's stream released: the local ranks' flags and the call's
 * gates set past any sequence (the communicator is unusable afterwards). Host writes only.
 * First this rank's failure of the call (first sequence number s0 + 1) is published and the
 * ring's fault word set: a node peer that sees a released flag sees the failure too, and the
 * call kernel's next wait ends instead of passing on a released word. */
void release_posted(twohop_comm *c, twohop::DoorbellRing *ring, uint64_t s0) {
    twohop::RankFlags &mine = c->shm.flags(c->topo.local_rank);
    if (mine.failed.load(std::memory_order_acquire) == 0) {
        mine.failed_seq.store(s0 + 1, std::memory_order_relaxed);
        mine.failed.store(static_cast<uint64_t>(TWOHOP_ERR_TRANSPORT), std::memory_order_release);
    }
    uint64_t none = 0; // a GPU timeout (1) stays what it is
    __atomic_compare_exchange_n(&ring->fault, &none, 2, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    release_gpu_waits(c);
    twohop::open_gate(&ring->gate_start, uint64_t(1) << 62);
    twohop::open_gate(&ring->gate_finish, uint64_t(1) << 62);
}

} // namespace twohop_gpu
