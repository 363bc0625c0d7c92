#include "gpu_node.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

#include "comm_state.h"
#include "cuda_driver.h"
#include "engine.h"
#include "gpu_kernel_list.h"
#include "posted_call.h"
#include "posted_job.h"
#include "proxy.h"
#include "segment_plan.h"
#include "slots.h"
#include "stream_call.h"

namespace {

using twohop::RankFlags;
namespace cuda = twohop::cuda;

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
 * (posted_call.h); nullptr when the GPU path has no kernel for it. */
const char *kernel_name(twohop_dtype t, twohop_op op, bool call = false) {
#define TWOHOP_NAME_ENTRY(D, T, OP, F)                                                         \
    if (t == D && op == TWOHOP_OP_##OP) return call ? "th_call_" #D "_" #OP : "th_rb_" #D "_" #OP;
    TWOHOP_GPU_KERNELS(TWOHOP_NAME_ENTRY)
#undef TWOHOP_NAME_ENTRY
    return nullptr;
}

/* Describes an exportable device buffer p (its allocation `pi`) for the peers. */
bool export_buffer(char *p, const cuda::PointerInfo &pi, GpuDesc::Buffer *b) {
    if (pi.managed) return false;
    if (!cuda::ipc_export(pi, b->handle)) return false; // e.g. stream-ordered pool memory
    b->off = static_cast<uint64_t>(p - pi.base);
    b->base = reinterpret_cast<uint64_t>(pi.base);
    b->id = pi.buffer_id;
    b->size = pi.size;
    return true;
}

/* Makes st hold at least `bytes` of twohop's own device memory on `device`, exported. */
bool ensure_staging(GpuStaging *st, int device, uint64_t bytes) {
    if (st->ptr && st->device == device && st->bytes >= bytes) return true;
    if (st->ptr) st->retired.emplace_back(st->device, st->ptr);
    st->ptr = nullptr;
    uint64_t want = 1 << 16; // powers of two: few outgrown buffers
    while (want < bytes) want *= 2;
    st->ptr = cuda::device_alloc(device, want);
    if (!st->ptr) return false;
    st->bytes = want;
    st->device = device;
    return true;
}

/*
 * Describes buffer p (allocation pi) for the peers, or, when it cannot be exported, twohop's
 * staging buffer `which` (0 input, 1 output) instead, with *staged set. False on failure.
 */
bool publish(twohop_comm *c, char *p, const cuda::PointerInfo &pi, int which, int device,
             uint64_t bytes, GpuDesc::Buffer *b, bool *staged) {
    if (export_buffer(p, pi, b)) return true;
    if (!ensure_staging(&c->gpu_staging[which], device, bytes)) return false;
    char *st = static_cast<char *>(c->gpu_staging[which].ptr);
    cuda::PointerInfo sti;
    *staged = true;
    return cuda::pointer_info(st, &sti) && export_buffer(st, sti, b);
}

/*
 * The node's shared-memory segment (control block, slots) registered with the driver for
 * `device`, once per communicator and device: hop 1 on several nodes writes into it, the
 * stream-ordered form has the GPU write and wait for flags in it. False when it cannot be
 * (the call then declines the GPU path); a failed registration is not retried.
 */
bool map_control_block(twohop_comm *c, int device) {
    GpuHop1 &h = c->gpu_hop1;
    if (h.reg_device == device) return true;
    // A stream-ordered call of this rank may still wait on and write the flags through the
    // old registration: decline (the caller drains the stream before it goes on) rather than
    // drop the registration under it.
    if (h.enq_pending || h.reg_failed_device == device) return false;
    // Likewise stream-ordered calls on several nodes still in flight (their stream operations
    // and kernels use the segment through the registration).
    if (h.shm_host && c->stream_slots && !c->stream_slots->idle()) return false;
    char *base = c->shm.desc(0) - c->shm.layout().desc_offset(0);
    if (h.shm_host) cuda::host_unregister(h.reg_device, h.shm_host);
    h.shm_host = base;
    h.reg_bytes = c->shm.layout().total_bytes();
    h.shm_dev = static_cast<char *>(cuda::host_register(device, base, h.reg_bytes));
    h.reg_device = h.shm_dev ? device : -1;
    if (!h.shm_dev) {
        h.shm_host = nullptr;
        h.reg_failed_device = device; // not retried on every call
    }
    return h.shm_dev != nullptr;
}

/*
 * My descriptor of a call of `bytes` bytes (items of red.item_bytes), called as
 * twohop_allreduce_enqueue when `enqueue`: fills d, *device and which staging buffers this
 * call uses (stage_in: copy my input there first; stage_out: copy the result from there
 * after). d->can = 0 when
 * anything is missing (host memory, no kernel, buffers on two devices, allocation failure).
 */
void describe(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
              const twohop_reduction &red, uint64_t bytes, GpuDesc *d, int *device,
              bool *stage_in, bool *stage_out, bool enqueue = false) {
    std::memset(d, 0, sizeof(*d));
    d->msg_bytes = bytes;
    d->item_bytes = red.item_bytes;
    d->enqueue = enqueue ? 1 : 0;
    *device = -1;
    *stage_in = *stage_out = false;
    if (!in.device || !out.device || red.op == TWOHOP_OP_USER ||
        kernel_name(red.dtype, red.op) == nullptr) {
        return;
    }
    cuda::PointerInfo si, ri;
    if (!cuda::pointer_info(in.device, &si) || !cuda::pointer_info(out.device, &ri) ||
        si.device != ri.device) {
        return;
    }
    *device = si.device;
    d->in_place = in.device == out.device;
    d->pid = static_cast<int64_t>(getpid());
    if (!publish(c, out.device, ri, 1, *device, bytes, &d->recv, stage_out)) return;
    d->recv_staged = *stage_out ? 1 : 0;
    if (d->in_place) {
        d->send = d->recv;
        *stage_in = *stage_out;
    } else if (!publish(c, in.device, si, 0, *device, bytes, &d->send, stage_in)) {
        return;
    }
    if (!cuda::pci_bus_id(*device, d->pci, sizeof(d->pci))) return;
    // Hop 1 (several nodes) writes into the registered shared-memory segment; stream-ordered
    // calls have the GPU write and wait for the flags there.
    if (enqueue && !cuda::flag_ops_supported(*device)) return;
    if ((c->topo.n_nodes() > 1 || enqueue) && !map_control_block(c, *device)) return;
    d->can = 1;
}

/*
 * Sets a.vec / a.head when every buffer is on this rank's GPU (one_device) and every pointer
 * of `a` has the same offset modulo 16, a multiple of the element size (then 16-byte vector
 * loads and stores line up). Measured on H200s: on one GPU the vector body moves more (p = 8,
 * 256 MiB: 90.0 -> 94.8 % of the HBM bound), over NVLink it moves less (2 GPUs, 1 GiB:
 * 332 -> 288 GB/s busbw), so buffers on other GPUs keep element-wise accesses.
 */
void choose_vector(twohop_gpu_args *a, size_t elem, bool one_device) {
    a->vec = 0;
    a->head = 0;
    if (!one_device) return;
    if (elem == 0 || elem >= 16 || 16 % elem != 0) return;
    const uintptr_t mis = reinterpret_cast<uintptr_t>(a->in[0]) % 16;
    if (mis % elem != 0) return;
    for (int l = 0; l < a->nin; ++l) {
        if (reinterpret_cast<uintptr_t>(a->in[l]) % 16 != mis) return;
    }
    for (int r = 0; r < a->nout; ++r) {
        if (reinterpret_cast<uintptr_t>(a->out[r]) % 16 != mis) return;
    }
    a->vec = 1;
    a->head = ((16 - mis) % 16) / elem;
}

/* Logs what failed (verbose 1, with the driver's last error) and returns the status. */
int gpu_error(twohop_comm *c, const char *what, int rank) {
    char msg[256];
    std::snprintf(msg, sizeof(msg), "GPU path: %s %d failed (%s)", what, rank,
                  cuda::last_error());
    c->host.log(1, msg);
    return TWOHOP_ERR_TRANSPORT;
}

} // namespace

namespace {
std::atomic<unsigned long long> g_gpu_calls{0};
std::atomic<unsigned long long> g_hop1_calls{0};
/*
 * Kernels and stream waits of this process that may wait for other ranks or for the proxy
 * thread (the GPU-posted call kernel or its stream operations: blocking, as a job,
 * stream-ordered; a stream-ordered call's wait on its host copy's gate), counted from before
 * their launch until seen to end. While any is, a vote whose mapping of a peer's buffer would
 * first close a stale CUDA IPC mapping says no (vote_publish: cuIpcCloseMemHandle waits for the
 * process's GPU work, that kernel waits for another rank, which may wait for this call), and
 * the proxy makes no CUDA call; with none, the vote makes the closes itself.
 */
std::atomic<int> g_waiting_kernels{0};
/*
 * Held by the proxy thread across a step of a device job that makes CUDA calls (GpuNodeJob),
 * which it takes only while g_waiting_kernels is 0; a thread that launches such a kernel counts
 * it under the same lock. A CUDA call can block inside the driver behind another thread's
 * synchronous call (a pageable cudaMemcpy, cudaDeviceSynchronize) that waits for a stream whose
 * kernel waits for a gate only the proxy opens: so the proxy makes none once such a kernel may
 * exist, and one it began before is done before the kernel is launched.
 */
std::mutex g_cuda_step_m;
thread_local bool t_cuda_step = false; // this thread holds g_cuda_step_m for a step
} // namespace

void gpu_waiting_kernel_begin() {
    if (t_cuda_step) { // inside the proxy's step of a device job: the lock is held
        g_waiting_kernels.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    std::lock_guard<std::mutex> g(g_cuda_step_m);
    g_waiting_kernels.fetch_add(1, std::memory_order_acq_rel);
}
void gpu_waiting_kernel_end() { g_waiting_kernels.fetch_sub(1, std::memory_order_acq_rel); }

extern "C" const unsigned long long *twohop_gpu_hop1_calls_counter(void) {
    return reinterpret_cast<const unsigned long long *>(&g_hop1_calls);
}

void gpu_hop1_done() { g_hop1_calls.fetch_add(1, std::memory_order_relaxed); }

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

extern "C" const unsigned long long *twohop_gpu_calls_counter(void) {
    static_assert(sizeof(std::atomic<unsigned long long>) == sizeof(unsigned long long), "pvar");
    return reinterpret_cast<const unsigned long long *>(&g_gpu_calls);
}

namespace {

/*
 * Round 2 of the decision, first half: with every local rank's descriptor published
 * (desc_seq = s), copies them into peer[], checks that this rank's GPU reaches every peer's,
 * closes the stale CUDA IPC mappings the peers' buffers would need closed (or votes no), and
 * publishes the vote. *one_device: every buffer is on `device`. TWOHOP_PENDING (nothing
 * published) on the proxy thread when a stale mapping is to be closed: an MPI thread does it.
 */
int vote_publish(twohop_comm *c, const GpuDesc &d, int device, uint64_t s, GpuDesc *peer,
                 bool *one_device) {
    const int L = c->topo.local_size();
    bool ok = d.can != 0;
    *one_device = true;
    // Kernels read every local rank's buffer over the same range: the sizes must agree (every
    // rank compares all descriptors, so all of them see a mismatch).
    for (int l = 0; l < L; ++l) {
        std::memcpy(&peer[l], c->shm.desc(l), sizeof(GpuDesc));
        if (peer[l].msg_bytes != d.msg_bytes || peer[l].item_bytes != d.item_bytes) {
            return TWOHOP_ERR_MISMATCH;
        }
    }
    for (int l = 0; ok && l < L; ++l) {
        if (!peer[l].can) {
            ok = false;
            break;
        }
        // Both forms in one call: the blocking GPU path would read a stream-ordered rank's
        // input before its stream produced it, and never write the flags that stream waits
        // for. Every rank sees the same descriptors, so all vote no: the host path.
        if (peer[l].enqueue != d.enqueue) {
            ok = false;
            if (!c->gpu_decline_logged) {
                c->gpu_decline_logged = true;
                c->host.log(1, "GPU path not taken: local ranks called this allreduce in "
                               "different forms (twohop_allreduce_enqueue and MPI_Allreduce); "
                               "it runs on the host");
            }
            break;
        }
        const int dev = cuda::device_by_pci(peer[l].pci);
        ok = dev >= 0 && cuda::can_access(device, dev);
        *one_device = *one_device && dev == device;
        if (!ok && !c->gpu_decline_logged) {
            c->gpu_decline_logged = true;
            char msg[160];
            std::snprintf(msg, sizeof(msg),
                          "GPU path not taken: the GPU of local rank %d (%s) is not reachable "
                          "from this rank's GPU (no peer access); device buffers go through "
                          "host memory", l, peer[l].pci);
            c->host.log(1, msg);
        }
    }
    // The peers' buffers are mapped after the vote (activate_hop1, shard_args), and a mapping
    // may first have to close a stale one (the mapping of a peer's freed buffer), which waits
    // for this process's GPU work (cuda_driver.h: ipc_open_closes). Such closes are made here,
    // before a yes, under g_cuda_step_m and only while no kernel that waits for other ranks or
    // for the proxy exists (g_waiting_kernels; none is launched meanwhile: launches count
    // theirs under the same lock); otherwise this rank votes no and the node runs the call on
    // the host path. The proxy thread closes nothing: it hands the step back to the MPI
    // threads (TWOHOP_PENDING, nothing published).
    if (ok) {
        cuda::PeerAllocation stale[2 * TWOHOP_GPU_MAX_RANKS];
        int n_stale = 0;
        for (int l = 0; l < L; ++l) {
            if (l == c->topo.local_rank) continue;
            for (const GpuDesc::Buffer *x : {&peer[l].send, &peer[l].recv}) {
                const cuda::PeerAllocation a{peer[l].pid, x->base, x->id, x->size};
                if (cuda::ipc_open_closes(device, a)) stale[n_stale++] = a;
            }
        }
        if (n_stale > 0) {
            if (t_cuda_step) return TWOHOP_PENDING;
            std::lock_guard<std::mutex> g(g_cuda_step_m);
            if (g_waiting_kernels.load(std::memory_order_acquire) > 0) {
                ok = false;
                if (!c->gpu_stale_logged) {
                    c->gpu_stale_logged = true;
                    c->host.log(1, "GPU path not taken for a call: mapping a local rank's new "
                                   "buffer would first close a stale CUDA IPC mapping, which "
                                   "waits for this process's GPU work, while a GPU-posted call "
                                   "kernel waits for other ranks; such calls run on the host");
                }
            } else {
                for (int i = 0; i < n_stale; ++i) cuda::ipc_close_stale(device, stale[i]);
            }
        }
    }
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    mine.vote.store((s << 1) | (ok ? 1 : 0), std::memory_order_release);
    return TWOHOP_OK;
}

/*
 * Waits until every local rank's `which` reaches `target` on a thread that does not hold c's
 * engine lock (the calling thread of a stream-ordered call, while the proxy thread may run the
 * communicator's queued calls): it never touches the transport -- the hop-2 operations belong
 * to the lock's holder -- only the MPI's progress (which advances twohop's queues when they
 * are free), the local ranks' failure flags (this rank's own too: a queued call that failed
 * raised it) and coll_twohop_timeout. Returns a twohop_status.
 */
int wait_all_unlocked(twohop_comm *c, std::atomic<uint64_t> RankFlags::*which,
                      uint64_t target) {
    const auto start = std::chrono::steady_clock::now();
    for (int l = 0; l < c->topo.local_size(); ++l) {
        for (unsigned spins = 1; (c->shm.flags(l).*which).load(std::memory_order_acquire) <
                                 target;
             ++spins) {
            if (spins % 16 != 0) continue;
            for (int i = 0; i < c->topo.local_size(); ++i) {
                if (c->shm.flags(i).failed.load(std::memory_order_acquire) != 0) {
                    return i == c->topo.local_rank ? TWOHOP_ERR_POISONED : TWOHOP_ERR_PEER;
                }
            }
            c->host.progress();
            const auto now = std::chrono::steady_clock::now();
            // A local peer whose process is gone never publishes.
            if (spins % 4096 == 0 && c->local_peer_gone()) return TWOHOP_ERR_PEER;
            if (c->timeout_s > 0 &&
                std::chrono::duration<double>(now - start).count() > c->timeout_s) {
                return TWOHOP_ERR_TIMEOUT;
            }
        }
    }
    return TWOHOP_OK;
}

/* Both halves, waiting for every vote (`unlocked`: wait_all_unlocked). *all: every rank can. */
int vote_round(twohop_comm *c, const GpuDesc &d, int device, uint64_t s, GpuDesc *peer,
               bool *one_device, bool *all, bool unlocked = false) {
    int rc = vote_publish(c, d, device, s, peer, one_device);
    if (rc != TWOHOP_OK) return rc;
    *all = true;
    if (unlocked && (rc = wait_all_unlocked(c, &RankFlags::vote, s << 1)) != TWOHOP_OK) {
        return rc;
    }
    for (int l = 0; l < c->topo.local_size(); ++l) {
        if ((rc = c->wait_for(c->shm.flags(l).vote, s << 1)) != TWOHOP_OK) return rc;
        *all = *all && (c->shm.flags(l).vote.load(std::memory_order_acquire) & 1);
    }
    return TWOHOP_OK;
}

/* Round 1: this rank's descriptor of call s into its shared-memory block, then desc_seq = s. */
void publish_desc(twohop_comm *c, const GpuDesc &d, uint64_t s) {
    std::memcpy(c->shm.desc(c->topo.local_rank), &d, sizeof(d));
    c->shm.flags(c->topo.local_rank).desc_seq.store(s, std::memory_order_release);
}

/*
 * A round that does not end in the node's GPU path gives its sequence number back: the host
 * path that follows runs the call with the same s, so a declined round costs no sequence
 * number (the round uses its own words, desc_seq and vote; the host path arrived, bytes and
 * done). Every local rank declines alike (the decision is the node's), and every node gives it
 * back (a multi-node round never runs the call itself), so sequence numbers stay the same on
 * every rank of the communicator. Measured on the 16-core machine (8 B, host buffers, 8 | 16
 * ranks, one lease): 2.1-2.5 | 3.6-4.1 us when each round consumed a number (the latency
 * path then always landed on the same buffer set, so its set-free wait became a barrier on the
 * previous call), 1.5-1.8 | 2.5-2.9 us without the round at all.
 */
int decline(twohop_comm *c, uint64_t s) {
    c->seq = s - 1;
    return TWOHOP_OK;
}

/*
 * A rank that cannot take the GPU path (host buffers, most often) knows the node's decision
 * without reading anyone's round: the path is the GPU's only when every vote is yes. It
 * publishes its "no" and goes on to the host path at once, so a host-buffer call costs no
 * extra synchronisation of the node. Ranks that voted yes read this vote in vote_round
 * (no rank can finish the host path of call s, and so overwrite its round-s words, before
 * every local rank has entered it, i.e. has read every vote of call s). A size mismatch is then
 * seen by the yes-voters only; they fail the call and this rank sees their failure flags.
 * Such a rank also skips the wait for its peers' `done` of call s - depth: its descriptor
 * was last read in an earlier round, which every peer left before that call could end, and
 * the host path waits for `done` itself before it writes a slot.
 */
int vote_no(twohop_comm *c, uint64_t s) {
    RankFlags &mine = c->shm.flags(c->topo.local_rank);
    mine.vote.store(s << 1, std::memory_order_release);
    return decline(c, s);
}

/*
 * The kernel arguments of this rank's shard on one node (the whole message when `whole`):
 * every input to every output, peers' buffers opened through CUDA IPC. Returns a
 * twohop_status.
 */
int shard_args(twohop_comm *c, const GpuDesc *peer, int device, bool one_device,
               char *my_in, char *my_out, uint64_t count, const twohop_reduction &red,
               bool whole, twohop_gpu_args *a) {
    const int L = c->topo.local_size();
    const int me = c->topo.local_rank;
    std::memset(a, 0, sizeof(*a));
    const uint64_t ib = red.item_bytes;
    const twohop::Range sh = whole ? twohop::Range{0, count}
                                   : twohop::split_even(count, static_cast<uint64_t>(L),
                                                        static_cast<uint64_t>(me));
    for (int l = 0; l < L; ++l) {
        char *sp = my_in, *rp = my_out;
        if (l != me) {
            const GpuDesc::Buffer &ps = peer[l].send, &pr = peer[l].recv;
            const cuda::PeerAllocation sa{peer[l].pid, ps.base, ps.id, ps.size};
            const cuda::PeerAllocation ra{peer[l].pid, pr.base, pr.id, pr.size};
            char *sb = static_cast<char *>(cuda::ipc_open(device, sa, ps.handle));
            char *rb = static_cast<char *>(cuda::ipc_open(device, ra, pr.handle));
            if (!sb || !rb) return gpu_error(c, "opening a CUDA IPC handle of local rank", l);
            sp = sb + ps.off;
            rp = rb + pr.off;
        }
        a->in[l] = sp + sh.offset * ib;
        a->out[l] = rp + sh.offset * ib;
    }
    a->nin = a->nout = L;
    a->n = sh.count * red.elems_per_item;
    choose_vector(a, twohop_dtype_size(red.dtype), one_device);
    return TWOHOP_OK;
}

/*
 * Several nodes, the node voted yes: maps every local rank's input for the pipeline's hop-1
 * kernels (gpu_hop1_post) and marks the call's hop 1 and hop 3 as the GPU's. Hop 3 gathers
 * on the GPU (PipelineJob::finish_hop3_gpu; GPU-posted: gpu_posted_pipeline) when
 * coll_twohop_gpu_hop3_gather is set and no local rank's receive buffer is staged (its peers
 * copy their shards out of it): every local rank reads the same descriptors and parameters,
 * so all decide alike (`gather_allowed` too: the caller derives it from what every local rank
 * agrees on). Then every local rank's receive buffer is mapped too. Returns a twohop_status.
 */
int activate_hop1(twohop_comm *c, const GpuDesc *peer, int device, bool one_device,
                  char *my_in, char *my_out, bool gather_allowed = true) {
    GpuHop1 &h = c->gpu_hop1;
    const int L = c->topo.local_size();
    bool gather = c->gpu_hop3_gather && gather_allowed;
    for (int l = 0; gather && l < L; ++l) gather = peer[l].recv_staged == 0;
    for (int l = 0; l < L; ++l) {
        if (l == c->topo.local_rank) {
            h.in[l] = my_in;
            h.out[l] = my_out;
            continue;
        }
        const GpuDesc::Buffer &ps = peer[l].send;
        const cuda::PeerAllocation sa{peer[l].pid, ps.base, ps.id, ps.size};
        char *sb = static_cast<char *>(cuda::ipc_open(device, sa, ps.handle));
        if (!sb) return gpu_error(c, "opening a CUDA IPC handle of local rank", l);
        h.in[l] = sb + ps.off;
        h.out[l] = nullptr;
        if (!gather) continue;
        const GpuDesc::Buffer &pr = peer[l].recv;
        char *rb = static_cast<char *>(
            cuda::ipc_open(device, cuda::PeerAllocation{peer[l].pid, pr.base, pr.id, pr.size}, pr.handle));
        if (!rb) return gpu_error(c, "opening a CUDA IPC handle of local rank", l);
        h.out[l] = rb + pr.off;
    }
    h.device = device;
    h.one_device = one_device;
    h.gather = gather;
    h.active = true;
    return TWOHOP_OK;
}

} // namespace

namespace {

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

} // namespace

int gpu_node_allreduce(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                       uint64_t count, const twohop_reduction &red, bool *taken) {
    *taken = false;
    const int me = c->topo.local_rank;
    const uint64_t s = ++c->seq;
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
    g_gpu_calls.fetch_add(1, std::memory_order_relaxed);
    if (clocked && c->gpu_clock.calls.size() < 65536) {
        c->gpu_clock.calls.push_back({float(ph[0]), float(ph[1]), float(ph[2]), float(ph[3]),
                                      float(ph[4])});
    }
    return TWOHOP_OK;
}


namespace {

/* Verbose 2, at the communicator's end: per size class, the blocking GPU-posted calls' wake-ups
 * (GpuHop1::wake_log): how long the woken caller spun, how many woke after the end, and the
 * lead each call would have needed to wake exactly at its end (its lead minus its spin), as
 * quantiles (the q-quantile of n sorted values: element floor(q * (n - 1))). */
void log_wake_ups(twohop_comm *c) {
    for (int k = 0; k < 64; ++k) {
        const std::vector<std::array<float, 2>> &w = c->gpu_hop1.wake_log[k];
        if (w.empty()) continue;
        std::vector<float> spin, need;
        spin.reserve(w.size());
        need.reserve(w.size());
        size_t late = 0;
        for (const auto &e : w) {
            spin.push_back(e[1]);
            need.push_back(e[0] - e[1]);
            if (e[1] < 0) ++late;
        }
        std::sort(spin.begin(), spin.end());
        std::sort(need.begin(), need.end());
        auto q = [](const std::vector<float> &v, double p) {
            const double at = p * static_cast<double>(v.size() - 1);
            return static_cast<double>(v[static_cast<size_t>(at)]);
        };
        char msg[400];
        std::snprintf(msg, sizeof(msg),
                      "GPU-posted wake-ups, calls of %llu B and up to twice that: %zu measured, "
                      "%zu woke after the end (%.1f %%); spin p10 %.1f p50 %.1f p90 %.1f us; lead "
                      "needed to wake at the end p50 %.1f p90 %.1f p95 %.1f p99 %.1f max %.1f us",
                      1ull << k, w.size(), late, 100.0 * static_cast<double>(late) /
                      static_cast<double>(w.size()), q(spin, 0.1), q(spin, 0.5), q(spin, 0.9),
                      q(need, 0.5), q(need, 0.9), q(need, 0.95), q(need, 0.99), q(need, 1.0));
        c->host.log(2, msg);
    }
}

} // namespace

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

namespace {
std::atomic<unsigned long long> g_enqueued_calls{0};

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
} // namespace

void gpu_enqueued_count() { g_enqueued_calls.fetch_add(1, std::memory_order_relaxed); }

extern "C" const unsigned long long *twohop_enqueued_calls_counter(void) {
    return reinterpret_cast<const unsigned long long *>(&g_enqueued_calls);
}

namespace {

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

std::atomic<unsigned long long> g_posted_calls{0};
std::atomic<unsigned long long> g_doorbells{0};

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

/* Arrival-counter regions of GPU-posted call kernels (posted_call.h) per device: one per
 * stream slot (GpuStreamSlot::index) and the last for the blocking form. A region serves one
 * call at a time: a slot's next call starts after the previous one's stream released it, and
 * blocking calls run one at a time. */
constexpr int kCounterRegions = static_cast<int>(twohop::StreamSlots::kMax) + 1;
constexpr int kBlockingCounters = kCounterRegions - 1;
constexpr size_t kCounterWords = twohop::PostedCallArgs::kCounters;

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
constexpr unsigned kCallThreads = 512;

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

} // namespace

extern "C" const unsigned long long *twohop_gpu_posted_calls_counter(void) {
    return reinterpret_cast<const unsigned long long *>(&g_posted_calls);
}
extern "C" const unsigned long long *twohop_doorbells_counter(void) {
    return reinterpret_cast<const unsigned long long *>(&g_doorbells);
}

/* GPU-posted calls: segments enqueued ahead of this rank's hop-2 results (at least the
 * pipeline depth). About 3 + shards + owned shards stream operations per segment (hop 3
 * gathered on the GPU: 5 + 2 x shards + owned shards): 16 segments
 * stay far below the stream queue's depth, and keep hop 1 well ahead of hop 2. */
constexpr uint64_t kPostedWindow = 16;

namespace {

/*
 * The GPU's half of a GPU-posted call (the blocking form on the communicator's stream, the
 * stream-ordered form on the application's): the stream operations of segment k, enqueued by
 * the calling thread in the CPU-posted pipeline's order (start(0) .. start(depth - 1),
 * finish(0), start(depth), finish(1), ...; tail() ends the call). `ok` turns false at the
 * first enqueue that fails.
 */
struct PostedSchedule {
    twohop_comm *c;
    void *stream;                   // nullptr: twohop's own
    twohop::DoorbellRing *ring_dev; // the call's ring and gates, where the GPU sees them
    uint64_t s0, count, seg_items, nseg;
    twohop_reduction red;
    char *out;                      // this rank's device receive buffer
    bool ok = true;
    uint64_t ready_seq = 0;         // call(): the kernel's `ready` handshake (posted_call.h)
    int ready_word = 0;             // on RankFlags::ready[ready_word]
    uint64_t *end_word = nullptr;   // call(): the word the kernel's last block writes at its
    uint64_t end_value = 0;         //   end (posted_call.h), device address, and its value
    bool bounded = false;           // call() on `stream`: its waits bounded by the timeout too

    uint64_t depth() const { return static_cast<uint64_t>(c->depth); }
    uint64_t shards() const { return static_cast<uint64_t>(c->topo.n_shards()); }
    /* Descriptors per doorbell: coll_twohop_posted_batch, at most the pipeline depth (segment
     * `depth` waits until segment 0 is done, which needs descriptor 0 announced). */
    uint64_t batch() const {
        const uint64_t b = static_cast<uint64_t>(c->posted_batch);
        return b < depth() ? b : depth();
    }

    void start(uint64_t k) {
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

    void finish(uint64_t k) {
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

    /* The whole call as one kernel instead of start/finish/tail (posted_call.h): `blocks`
     * blocks for hop 1 and as many for hop 3; `counters`: its arrival counters
     * (call_counters). */
    void call(unsigned long long *counters, int blocks) {
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

    /* After start(nseg - 1): the last finishes; with hop 3 gathered, the wait for the peers
     * that still copy from this rank's receive buffer. */
    void tail() {
        GpuHop1 &h = c->gpu_hop1;
        for (uint64_t k = nseg > depth() ? nseg - depth() : 0; ok && k < nseg; ++k) finish(k);
        for (int l = 0; ok && h.gather && l < c->topo.local_size(); ++l) {
            if (l != c->topo.local_rank) {
                ok = cuda::wait_flag(h.device, stream, flag_addr(c, l, &RankFlags::done),
                                     s0 + nseg);
            }
        }
    }
};

/*
 * The host half of a GPU-posted call, for PostedJob (posted_job.h): hop-2 rings over UCX for
 * each segment the doorbell announces, `reduced` when they complete, and the two gates of the
 * call's ring opened from the local ranks' flags: start(k) once every local rank is done with
 * the segment that used its buffer set before (s - depth), finish(k) once every shard's owner
 * on this node published its hop-2 result. Host memory and UCX only: whichever thread steps
 * the job (the proxy thread may run under MPI_THREAD_SINGLE) makes no MPI and no CUDA call;
 * `drained` says when the GPU is done with the call.
 */
class RingBackend : public twohop::PostedBackend {
  public:
    RingBackend(twohop_comm *c, const twohop_reduction &red, uint64_t count, uint64_t seg_items,
                uint64_t s0, uint64_t nseg, twohop::DoorbellRing *ring,
                std::function<int()> drained)
        : c_(c), reducer_(red), count_(count), seg_items_(seg_items), s0_(s0), nseg_(nseg),
          ring_(ring), drained_(std::move(drained)) {
        const int node = c->topo.my_node;
        for (int sh = 0; sh < c->topo.n_shards(); ++sh) {
            const int o = c->topo.shard_owner(node, sh);
            if (std::find(owners_.begin(), owners_.end(), o) == owners_.end()) {
                owners_.push_back(o);
            }
        }
    }
    int progress() override {
        if (__atomic_load_n(&ring_->fault, __ATOMIC_ACQUIRE) == 1) { // the call kernel's wait
            c_->host.log(1, "GPU-posted call: a wait of the call's kernel outlasted "
                            "coll_twohop_timeout");
            return TWOHOP_ERR_TIMEOUT;
        }
        return c_->poll_transport();
    }
    int post(const twohop::PostDesc &d) override {
        const uint64_t shards = static_cast<uint64_t>(c_->topo.n_shards());
        const uint64_t ib = reducer_.item_bytes();
        const int set = static_cast<int>(d.seq % static_cast<uint64_t>(c_->depth));
        const twohop::Range seg = twohop::segment_range(count_, seg_items_, d.segment);
        for (size_t i = 0; i < c_->my_shards.size(); ++i) {
            const int sh = c_->my_shards[i];
            const twohop::Range r = twohop::split_even(seg.count, shards,
                                                       static_cast<uint64_t>(sh));
            if (c_->rails.empty() || r.count == 0) continue;
            const int rc = c_->start_hop2(set, i, c_->shm.result(set) + r.offset * ib, r.count,
                                          &reducer_, c_->rail_tag(d.seq, sh), d.last != 0);
            if (rc != TWOHOP_OK) return rc;
        }
        return TWOHOP_OK;
    }
    bool done(uint64_t segment) override {
        const int set = static_cast<int>((s0_ + 1 + segment) % c_->depth);
        for (size_t i = 0; i < c_->rails.size(); ++i) {
            if (c_->hop2_active(set, i)) return false;
        }
        return true;
    }
    void retire(uint64_t segment) override {
        c_->shm.flags(c_->topo.local_rank)
            .reduced.store(s0_ + 1 + segment, std::memory_order_release);
    }
    void gates() override {
        const uint64_t depth = static_cast<uint64_t>(c_->depth);
        const int L = c_->topo.local_size();
        while (gate_start_ < nseg_) {
            const uint64_t s = s0_ + 1 + gate_start_;
            bool free = true;
            for (int l = 0; free && s > depth && l < L; ++l) {
                free = c_->shm.flags(l).done.load(std::memory_order_acquire) >= s - depth;
            }
            if (!free) break;
            twohop::open_gate(&ring_->gate_start, ++gate_start_);
        }
        while (gate_finish_ < nseg_) {
            const uint64_t s = s0_ + 1 + gate_finish_;
            bool all = true;
            for (size_t i = 0; all && i < owners_.size(); ++i) {
                all = c_->shm.flags(owners_[i]).reduced.load(std::memory_order_acquire) >= s;
            }
            if (!all) break;
            twohop::open_gate(&ring_->gate_finish, ++gate_finish_);
        }
    }
    int drained() override { return drained_(); }
    /* How many of the call's finish gates are open (nseg: only hop 3 and the end remain). */
    uint64_t finish_gates() const { return gate_finish_; }

  private:
    twohop_comm *c_;
    const twohop::Reducer reducer_; // the rings use it until they complete
    uint64_t count_, seg_items_, s0_, nseg_;
    twohop::DoorbellRing *ring_;
    std::function<int()> drained_;
    std::vector<int> owners_;
    uint64_t gate_start_ = 0, gate_finish_ = 0;
};

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

} // namespace

namespace {

/*
 * gpu_node_job's job: gpu_node_allreduce's rounds as steps that never wait (job.h).
 *   start    s = ++seq; describe this rank's buffers; a rank that cannot take the GPU path
 *            publishes its descriptor and its "no" (vote_no) and runs the host path at once
 *            (else the input synchronised: the legacy stream)
 *   free     peers done with call s - depth (they may still read this rank's staging buffer);
 *            then the input staged if needed, the descriptor published
 *   desc     every local rank's descriptor of s published; this rank's vote published
 *   vote     every local rank voted; all yes: the kernel (node_kernel, which waits for this
 *            rank's GPU only) and `reduced`; a no: decline, the host path's job
 *   reduced  every local rank's kernel done; the staged result copied out, `done`
 * Its CUDA calls run on the threads that advance it: device buffers make it a call the proxy
 * thread never advances (engine.cpp, async_safe); with host buffers it never reaches a CUDA
 * call (describe declines before the first).
 */
class GpuNodeJob : public twohop::Job {
  public:
    GpuNodeJob(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
               uint64_t count, const twohop_reduction &red)
        : c_(c), in_(in), out_(out), count_(count), red_(red),
          host_async_(twohop::call_async_safe(c, in, out, red)) {}

    int advance() override {
        const bool proxy = twohop::Proxy::on_proxy_thread();
        if (!proxy) handback_ = false; // a thread inside MPI: every step is allowed
        // The proxy's steps with CUDA calls: none while a kernel that waits for it may exist.
        // Held for the whole pass (the transitions go on in run_states); never taken twice by
        // one thread (t_cuda_step: a job advanced from inside another's step).
        // The proxy never waits for the lock: its holder may be an MPI thread closing a stale
        // mapping, which waits for GPU work that may wait for a gate only the proxy opens.
        if (!proxy || !cuda_state() || t_cuda_step) return run_states(proxy);
        std::unique_lock<std::mutex> cuda_step(g_cuda_step_m, std::try_to_lock);
        if (!cuda_step.owns_lock() || g_waiting_kernels.load(std::memory_order_acquire) > 0) {
            return TWOHOP_PENDING;
        }
        struct Held {
            Held() { t_cuda_step = true; }
            ~Held() { t_cuda_step = false; }
        } held;
        return run_states(proxy);
    }

  private:
    /* The states from the current one on, as far as they go without waiting (`proxy`: on
     * the proxy thread, which stops before the steps it must leave to MPI threads). */
    int run_states(bool proxy) {
        switch (state_) {
        case kStart: {
            ++steps_;
            s_ = ++c_->seq;
            describe(c_, in_, out_, red_, bytes(), &d_, &device_, &stage_in_, &stage_out_);
            // The input: the application's work on the legacy stream, taken when the job
            // starts (in the starting call unless calls are queued before it), not later in
            // MPI progress, where it would also wait for work queued after the start.
            if (d_.can && !cuda::sync_input(device_)) d_.can = 0;
            // The peers' descriptors (4 KB): only a rank that may vote yes reads them, so a
            // call on host buffers never allocates them; without them this rank votes no.
            if (d_.can) peer_.reset(new (std::nothrow) GpuDesc[TWOHOP_GPU_MAX_RANKS]);
            if (!peer_) d_.can = 0;
            if (d_.can && c_->topo.n_nodes() > 1) d_.posted = can_post() ? 1 : 0;
            if (!d_.can) {
                publish_desc(c_, d_, s_);
                (void)vote_no(c_, s_);
                return to_host();
            }
            state_ = kFree;
        }
        // fall through
        case kFree: {
            const uint64_t depth = static_cast<uint64_t>(c_->depth);
            if (s_ > depth) {
                const int rc = twohop::test_all(c_, &RankFlags::done, s_ - depth);
                if (rc != TWOHOP_OK) return rc;
            }
            ++steps_;
            if (stage_in_ && !cuda::copy(send_stage(), in_.device, bytes())) d_.can = 0;
            publish_desc(c_, d_, s_);
            if (!d_.can) {
                (void)vote_no(c_, s_);
                return to_host();
            }
            state_ = kDesc;
        }
        // fall through
        case kDesc: {
            int rc = twohop::test_all(c_, &RankFlags::desc_seq, s_);
            if (rc == TWOHOP_PENDING) {
                // A peer that runs call s on the host path without a descriptor (an
                // erroneous program: another form or call on its side) would never publish
                // one. (`arrived` is written after `desc_seq` by a peer that
                // voted: read first, it orders the read of desc_seq after that write.)
                for (int l = 0; l < c_->topo.local_size(); ++l) {
                    const RankFlags &f = c_->shm.flags(l);
                    if (f.arrived.load(std::memory_order_acquire) >= s_ &&
                        f.desc_seq.load(std::memory_order_acquire) < s_) {
                        return TWOHOP_ERR_MISMATCH;
                    }
                }
            }
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            if ((rc = vote_publish(c_, d_, device_, s_, peer_.get(), &one_device_)) !=
                TWOHOP_OK) {
                if (rc == TWOHOP_PENDING) handback_ = true; // a stale mapping to close first
                return rc;
            }
            state_ = kVote;
        }
        // fall through
        case kVote: {
            int rc = twohop::test_all(c_, &RankFlags::vote, s_ << 1);
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            bool all = true;
            for (int l = 0; l < c_->topo.local_size(); ++l) {
                all = all && (c_->shm.flags(l).vote.load(std::memory_order_acquire) & 1);
            }
            if (!all) {
                (void)decline(c_, s_);
                return to_host();
            }
            if (c_->topo.n_nodes() > 1) {
                bool posted = true; // every local rank can run the GPU-posted job
                for (int l = 0; l < c_->topo.local_size(); ++l) {
                    posted = posted && peer_[l].posted != 0;
                }
                return posted ? to_gpu_posted() : to_gpu_pipeline();
            }
            if ((rc = node_kernel(c_, peer_.get(), device_, one_device_,
                                  stage_in_ ? send_stage() : in_.device,
                                  stage_out_ ? recv_stage() : out_.device, count_, red_, s_,
                                  stage_in_, stage_out_)) != TWOHOP_OK) {
                return rc;
            }
            c_->shm.flags(c_->topo.local_rank).reduced.store(s_, std::memory_order_release);
            state_ = kReduced;
        }
        // fall through
        case kReduced: {
            if (stage_out_ && proxy) return TWOHOP_PENDING; // a synchronous copy: MPI threads
            const int rc = twohop::test_all(c_, &RankFlags::reduced, s_);
            if (rc != TWOHOP_OK) return rc;
            ++steps_;
            if (stage_out_ && !cuda::copy(out_.device, recv_stage(), bytes())) {
                return gpu_error(c_, "copying the result out of twohop's device staging on "
                                     "local rank", c_->topo.local_rank);
            }
            c_->shm.flags(c_->topo.local_rank).done.store(s_, std::memory_order_release);
            g_gpu_calls.fetch_add(1, std::memory_order_relaxed);
            state_ = kEnded;
            return TWOHOP_OK;
        }
        case kHost: {
            const int rc = host_->advance();
            steps_ = host_base_ + host_->steps();
            return rc;
        }
        case kPosted: {
            // Host memory and UCX only (RingBackend): the proxy thread may run this step.
            const uint64_t before = posted_->job.posted() + posted_->job.retired();
            int rc = posted_->job.step(TWOHOP_PENDING);
            steps_ += posted_->job.posted() + posted_->job.retired() - before;
            if (rc == TWOHOP_PENDING) return rc;
            if (rc == twohop::kPostedBadDescriptor) rc = TWOHOP_ERR_TRANSPORT;
            end_posted(rc);
            state_ = kEnded;
            return rc;
        }
        case kGpuPipeline: {
            const int rc = host_->advance();
            steps_ = host_base_ + host_->steps();
            if (rc == TWOHOP_PENDING) return rc;
            if (rc == TWOHOP_OK) gpu_hop1_done();
            end_gpu_pipeline(rc != TWOHOP_OK);
            state_ = kEnded;
            return rc;
        }
        case kEnded:
            break;
        }
        return TWOHOP_OK;
    }

  public:
    ~GpuNodeJob() override {
        // Ended early (a failure elsewhere, the communicator's teardown): the pipeline's GPU
        // work must end before its buffers may be reused; the posted kernel's waits released.
        if (state_ == kGpuPipeline) end_gpu_pipeline(true);
        if (state_ == kPosted) end_posted(TWOHOP_ERR_TRANSPORT);
    }
    /*
     * Which states the proxy thread may advance (job.h): with host buffers those of the host
     * path's job where it may (the starting call's choice, host_async_); with device buffers,
     * given asynchronous progress, the vote (published flags, cached CUDA queries), the
     * node's kernel on the communicator's stream and the waits for it, the GPU pipeline
     * (kernels, copies and events on that stream, hop 2 over UCX) and the GPU-posted job's
     * host side -- not the start (the input's synchronisation with the application's legacy
     * stream), copies through twohop's device staging (synchronous copies, ordered with the
     * legacy stream), the host path's memory-kind copies, nor the closing of a stale CUDA IPC
     * mapping (handback_). So a call moves while the application computes on every local rank.
     */
    bool async_now() const override {
        if (cuda_state() && g_waiting_kernels.load(std::memory_order_acquire) > 0) return false;
        switch (state_) {
        case kStart:
        case kHost: return host_async_;
        case kFree: return c_->async_progress && !stage_in_;
        case kDesc: return c_->async_progress && !handback_;
        case kVote: return c_->async_progress;
        case kReduced: return c_->async_progress && !stage_out_;
        case kGpuPipeline:
        case kPosted: return c_->async_progress;
        case kEnded: break;
        }
        return false;
    }
    /* States whose steps may make CUDA calls (the vote's device queries and mappings, the
     * kernels, the pipeline's launches, copies and events). */
    bool cuda_state() const {
        return state_ == kFree || state_ == kDesc || state_ == kVote || state_ == kReduced ||
               state_ == kGpuPipeline;
    }
    bool async_managed() const override { return true; }

  private:
    enum State { kStart, kFree, kDesc, kVote, kReduced, kHost, kGpuPipeline, kPosted, kEnded };
    /* The host side of the GPU-posted job: the blocking call's (gpu_posted_pipeline). */
    struct Posted {
        RingBackend backend;
        twohop::PostedJob job;
        Posted(twohop_comm *c, const twohop_reduction &red, uint64_t count, uint64_t seg_items,
               uint64_t s0, uint64_t nseg, twohop::DoorbellRing *ring)
            : backend(c, red, count, seg_items, s0, nseg, ring,
                      [ring]() -> int {
                          // The kernel's last block writes `drained`, also after a wait of
                          // it timed out (then `fault` is set).
                          if (__atomic_load_n(&ring->drained, __ATOMIC_ACQUIRE) == 0) return 0;
                          return __atomic_load_n(&ring->fault, __ATOMIC_ACQUIRE) != 0
                                     ? int(TWOHOP_ERR_TIMEOUT)
                                     : 1;
                      }),
              job(ring, &backend, s0, nseg, c->timeout_s, TWOHOP_ERR_TIMEOUT) {}
    };
    /*
     * Whether this rank can run the call as the GPU-posted job (published as `posted`; the
     * node takes it when every local rank can, else the CPU-posted pipeline): GPU-posted mode
     * (coll_twohop_gpu_posted, agreed) with asynchronous progress on this rank (the kernel
     * waits for the hop-2 results the host side posts: without the proxy thread only the
     * application's MPI calls would move them, and a cudaDeviceSynchronize before MPI_Wait
     * would wait forever), the call kernel (no stream-operation form: it enqueues more as
     * results arrive, work for the calling thread), the ring, its counters and the
     * communicator's job stream on this device. CUDA calls: on the starting thread.
     */
    bool can_post() {
        if (!c_->posted_nonblocking || !c_->gpu_posted || !c_->async_progress) return false;
        GpuHop1 &h = c_->gpu_hop1;
        kernel_blocks_ = call_kernel_blocks(c_, red_, bytes(), device_);
        if (kernel_blocks_ <= 0 || !ensure_ring(c_, device_)) return false;
        if ((counters_ = call_counters(c_, device_, kBlockingCounters)) == nullptr) return false;
        return h.own_stream(device_) != nullptr;
    }
    /*
     * Several nodes, every local rank voted yes and can post: the blocking GPU-posted call's
     * GPU side (PostedSchedule::call: one kernel, hop 1 into host memory, descriptors and
     * doorbells, waits on the gates, hop 3 gathered from coll_twohop_gpu_hop3_gather_min_bytes)
     * launched once on the communicator's job stream, then its host side (PostedJob over
     * RingBackend: hop-2 posts, `reduced`, the gates) as steps that read host memory and drive
     * UCX only -- so the proxy thread advances them too (async_now), and the call moves while
     * the application computes. The round's sequence number is given back; the call's
     * segments take the next ones, as in the blocking call.
     */
    int to_gpu_posted() {
        GpuHop1 &h = c_->gpu_hop1;
        int rc = activate_hop1(c_, peer_.get(), device_, one_device_,
                               stage_in_ ? send_stage() : in_.device, out_.device,
                               bytes() >= c_->gather_min_bytes);
        if (rc != TWOHOP_OK) return rc;
        (void)decline(c_, s_);
        const uint64_t seg_items = twohop::segment_items(c_->slot_bytes, red_.item_bytes);
        const uint64_t nseg = twohop::segment_count(count_, seg_items);
        twohop::reset(h.ring);
        s0_ = c_->seq;
        c_->seq += nseg;
        posted_.reset(new (std::nothrow) Posted(c_, red_, count_, seg_items, s0_, nseg, h.ring));
        if (!posted_) {
            release_posted(c_, h.ring, s0_);
            h.active = h.gather = false;
            return TWOHOP_ERR_NO_MEMORY;
        }
        posted_->backend.gates(); // segments whose sets are free need no wait on the GPU
        PostedSchedule sched{c_, h.own_stream(device_), h.ring_dev, s0_, count_, seg_items, nseg, red_,
                             out_.device};
        sched.end_word = &h.ring_dev->drained;
        sched.end_value = 1;
        sched.bounded = true;
        gpu_waiting_kernel_begin(); // ended where job_pending is cleared
        h.job_pending = true;
        sched.call(counters_, kernel_blocks_);
        if (!sched.ok) {
            release_posted(c_, h.ring, s0_);
            gpu_settle(c_);
            h.active = h.gather = false;
            posted_.reset();
            return gpu_error(c_, "launching the GPU-posted call kernel failed on local rank",
                             c_->topo.local_rank);
        }
        host_base_ = steps_;
        state_ = kPosted;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /* The GPU-posted job ended with rc (or is dropped). OK: the kernel wrote `drained`, its
     * last act. Else every wait of the kernel is released (host writes: this may run on the
     * proxy thread, which makes no CUDA call); the kernel's end is awaited where the
     * communicator's GPU work is next settled (GpuHop1::settle: a later CUDA-side step on an
     * MPI thread, or the communicator's end). */
    void end_posted(int rc) {
        GpuHop1 &h = c_->gpu_hop1;
        g_doorbells.fetch_add(posted_->job.doorbells(), std::memory_order_relaxed);
        if (rc == TWOHOP_OK) {
            h.job_pending = false; // the kernel wrote `drained`, its last act
            gpu_waiting_kernel_end();
            gpu_hop1_done();
            g_posted_calls.fetch_add(1, std::memory_order_relaxed);
        } else {
            release_posted(c_, h.ring, s0_);
        }
        h.active = h.gather = false;
    }
    uint64_t bytes() const { return count_ * red_.item_bytes; }
    /* twohop's device staging buffers (gpu_node_allreduce's: the send side is the receive
     * buffer's when in place). */
    char *send_stage() const {
        return static_cast<char *>(c_->gpu_staging[d_.in_place ? 1 : 0].ptr);
    }
    char *recv_stage() const { return static_cast<char *>(c_->gpu_staging[1].ptr); }
    /* The node declined (sequence number given back): the host path's job runs the call
     * (on the proxy thread only where its steps are safe there: host_async_). */
    int to_host() {
        host_ = twohop::make_job(c_, in_, out_, count_, red_);
        host_base_ = steps_;
        state_ = kHost;
        if (!host_async_ && twohop::Proxy::on_proxy_thread()) return TWOHOP_PENDING;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /*
     * Several nodes, every local rank voted yes: the pipeline with hop 1 and hop 3 on the GPU
     * (activate_hop1; PipelineJob polls the communicator's stream, never waits for it), CPU-posted as
     * the blocking call with coll_twohop_gpu_posted 0 -- the GPU-posted form's calling thread
     * enqueues more as results arrive, which a job advanced by MPI progress cannot. Hop 3
     * gathers on the GPU wherever the blocking CPU-posted call does (every local rank reads
     * the same descriptors and parameters). The round's sequence number is given back: the
     * pipeline runs the call from it, as on the ranks of nodes that declined. Only the oldest
     * call of the communicator runs (engine.cpp), so the communicator's per-call GPU state
     * (GpuHop1::active, in[], out[]) is this job's until end_gpu_pipeline.
     */
    int to_gpu_pipeline() {
        const int rc = activate_hop1(c_, peer_.get(), device_, one_device_,
                                     stage_in_ ? send_stage() : in_.device, out_.device, true);
        if (rc != TWOHOP_OK) return rc;
        (void)decline(c_, s_);
        host_ = twohop::make_job(c_, in_, out_, count_, red_);
        host_base_ = steps_;
        state_ = kGpuPipeline;
        return run_states(twohop::Proxy::on_proxy_thread());
    }
    /* The pipeline ended (or the job is dropped): on failure the communicator's stream
     * drained first. */
    void end_gpu_pipeline(bool failed) {
        // Not on the proxy outside a step's lock (the job dropped there by a timeout): the
        // work stays pending for the communicator's next settle.
        if (failed && (!twohop::Proxy::on_proxy_thread() || t_cuda_step)) gpu_settle(c_);
        c_->gpu_hop1.active = false;
        c_->gpu_hop1.gather = false;
    }
    twohop_comm *c_;
    const twohop_userbuf in_, out_;
    const uint64_t count_;
    const twohop_reduction red_;
    State state_ = kStart;
    uint64_t s_ = 0;
    GpuDesc d_{};
    int device_ = -1;
    bool stage_in_ = false, stage_out_ = false, one_device_ = true;
    std::unique_ptr<GpuDesc[]> peer_; // the peers' descriptors, from the vote on
    int kernel_blocks_ = 0;           // can_post: the call kernel's blocks per half
    unsigned long long *counters_ = nullptr; // and its arrival counters
    uint64_t s0_ = 0;                 // GPU-posted: the sequence number before the segments'
    std::unique_ptr<Posted> posted_;
    std::unique_ptr<twohop::Job> host_;
    uint64_t host_base_ = 0;
    const bool host_async_;  // the host path's job on these buffers is safe on the proxy
    bool handback_ = false;  // the proxy stopped before the vote's closes (vote_publish)
};

} // namespace

std::unique_ptr<twohop::Job> gpu_node_job(twohop_comm *c, const twohop_userbuf &in,
                                          const twohop_userbuf &out, uint64_t count,
                                          const twohop_reduction &red) {
    return std::unique_ptr<twohop::Job>(new GpuNodeJob(c, in, out, count, red));
}

int gpu_posted_pipeline(twohop_comm *c, const twohop_userbuf &out, uint64_t count,
                        const twohop_reduction &red) {
    GpuHop1 &h = c->gpu_hop1;
    const int dev = h.device;
    const int me = c->topo.local_rank;
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes);
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const uint64_t depth = static_cast<uint64_t>(c->depth);
    if (!out.device) return gpu_error(c, "GPU-posted mode without a device receive buffer", me);
    if (!ensure_ring(c, dev)) {
        return gpu_error(c, "registering the GPU-posted descriptor ring failed on local rank", me);
    }
    twohop::reset(h.ring);
    const uint64_t s0 = c->seq;
    c->seq += nseg;
    // Its kernel (or stream operations) may wait for other nodes until the call ends: see
    // g_waiting_kernels. Ended below once the GPU side is seen to end.
    gpu_waiting_kernel_begin();

    // 1. The call on the communicator's stream (PostedSchedule). Enqueued by this thread while the proxy
    // runs the job (2.), at most kPostedWindow segments ahead of the hop-2 results: the
    // stream's queue stays short, so no enqueue ever blocks inside the driver behind a wait on
    // a gate that only the proxy opens (with the whole call enqueued first, hundreds of
    // segments filled it).
    void *const st = h.own_stream(dev);
    PostedSchedule sched{c, st, h.ring_dev, s0, count, seg_items, nseg, red, out.device};
    // One kernel for the whole call (posted_call.h) when this rank uses it.
    // (Without its counters, stream operations: this rank's choice.)
    int kernel_blocks = call_kernel_blocks(c, red, count * red.item_bytes, dev);
    unsigned long long *counters =
        kernel_blocks > 0 ? call_counters(c, dev, kBlockingCounters) : nullptr;
    if (counters == nullptr) kernel_blocks = 0;
    const uint64_t window = depth > kPostedWindow ? depth : kPostedWindow;
    uint64_t next_k = 0;                  // next segment to start (this thread only)
    std::atomic<bool> enqueued_all{false}; // the `drained` write after the last operation is enqueued
    std::atomic<bool> enqueue_failed{false};
    auto results = [&]() { // segments whose hop-2 results this rank published (proxy: retire)
        const uint64_t r = c->shm.flags(me).reduced.load(std::memory_order_acquire);
        return r > s0 ? r - s0 : 0;
    };
    auto enqueue_more = [&]() -> bool {
        if (kernel_blocks > 0 && next_k == 0) {
            sched.end_word = &h.ring_dev->drained; // the kernel ends the call: no stream write
            sched.end_value = 1;
            sched.call(counters, kernel_blocks);
            next_k = nseg;
            if (sched.ok) enqueued_all.store(true, std::memory_order_release);
        }
        while (sched.ok && next_k < nseg && next_k < results() + window) {
            if (next_k >= depth) sched.finish(next_k - depth);
            sched.start(next_k);
            ++next_k;
        }
        if (sched.ok && next_k == nseg && kernel_blocks == 0) {
            sched.tail();
            sched.ok = sched.ok && cuda::write_flag(dev, st, &h.ring_dev->drained, 1);
            if (sched.ok) enqueued_all.store(true, std::memory_order_release);
        }
        if (!sched.ok) enqueue_failed.store(true, std::memory_order_release);
        return sched.ok && next_k < nseg;
    };
    h.pending = true;

    // 2. The proxy thread posts hop 2 as the doorbell announces segments; this thread sleeps.
    RingBackend backend(c, red, count, seg_items, s0, nseg, h.ring, [&]() -> int {
        if (enqueue_failed.load(std::memory_order_acquire)) return TWOHOP_ERR_TRANSPORT;
        // `drained` follows the call's last operation: the kernel's last block writes it, or
        // the stream after the last stream operation (no CUDA call here).
        if (!enqueued_all.load(std::memory_order_acquire)) return 0;
        if (__atomic_load_n(&h.ring->drained, __ATOMIC_ACQUIRE) == 0) return 0;
        // `drained` is written also when a wait of the kernel timed out.
        return __atomic_load_n(&h.ring->fault, __ATOMIC_ACQUIRE) != 0 ? int(TWOHOP_ERR_TIMEOUT) : 1;
    });
    backend.gates(); // the segments whose sets are free already need no wait on the GPU
    twohop::PostedJob job(h.ring, &backend, s0, nseg, c->timeout_s, TWOHOP_ERR_TIMEOUT);
    // Verbose 3: when the host saw the first descriptor, the last hop-2 result and the end
    // (microseconds from the start of the enqueue; written by whichever thread steps the job).
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t_start = Clock::now();
    double t_first = -1, t_hop2 = -1;
    const bool timed = c->verbose >= 3;
    const double cpu_start = timed ? twohop::thread_cpu_s() : 0;
    // Proxy::run's `near`: the call's end is close. From the last finish gate (only hop 3 of
    // the last segments remains) plus the tail the previous call of this size class took,
    // less the class's wake lead (coll_twohop_posted_wake_lead_us to start with, adapted by
    // coll_twohop_posted_wake_quantile or _spin_us: wake_lead.h): the caller's wake-up
    // overlaps the end, and it spins for what remains (the tail is kernel work: tens to
    // hundreds of microseconds).
    std::atomic<bool> near{false};
    const int size_class = 63 - __builtin_clzll((count * red.item_bytes) | 1);
    const double predicted_tail = h.tail_us[size_class];
    twohop::WakeLead &wake = h.wake[size_class];
    const double lead = wake.lead_us();
    const double wake_after = c->posted_wake_lead_us < 0 ? 0.0 : predicted_tail - lead;
    Clock::time_point t_gate{}, t_near{}, t_done{}, t_woke{};
    bool gate_seen = false;
    auto step = [&]() {
        if (enqueue_failed.load(std::memory_order_acquire)) return int(TWOHOP_ERR_TRANSPORT);
        const int st = job.step(twohop::Proxy::kPending);
        if (!gate_seen && backend.finish_gates() == nseg) {
            gate_seen = true;
            t_gate = Clock::now();
        }
        if (gate_seen && !near.load(std::memory_order_relaxed) &&
            (wake_after <= 0 ||
             std::chrono::duration<double, std::micro>(Clock::now() - t_gate).count() >=
                 wake_after)) {
            t_near = Clock::now();
            near.store(true, std::memory_order_release);
        }
        if (st != twohop::Proxy::kPending) t_done = Clock::now();
        if (timed) {
            const double t = std::chrono::duration<double, std::micro>(Clock::now() - t_start)
                                 .count();
            if (t_first < 0 && job.posted() > 0) t_first = t;
            if (t_hop2 < 0 && job.retired() == nseg) t_hop2 = t;
        }
        return st;
    };
    // Small calls: the calling thread drives the host side itself (no hand-off to the proxy and
    // back, tens of microseconds each when a thread must wake); large ones sleep meanwhile,
    // until `near` (then the caller spins for the GPU's last hop 3: its wake-up overlaps it).
    // The proxy was woken when the call began (run_call: prewake).
    // Meanwhile the MPI's progress: this rank's other calls in flight (non-blocking calls on
    // device buffers of other communicators, whose steps run on MPI threads; the MPI's own)
    // must move while it waits here, because a peer may wait for them before it joins this
    // call (MPI_Iallreduce(A); MPI_Allreduce(B); MPI_Wait(A) on one rank, MPI_Iallreduce(A);
    // MPI_Wait(A); MPI_Allreduce(B) on another). This communicator is busy: the progress
    // callback skips it. Often while such calls are queued, else every millisecond.
    auto idle = [c]() -> bool {
        c->host.progress();
        return twohop::mpi_thread_work_queued();
    };
    int rc;
    if (count * red.item_bytes >= c->posted_proxy_min_bytes) {
        rc = twohop::Proxy::instance().run(step, enqueue_more,
                                           c->posted_wake_early ? &near : nullptr, &t_woke,
                                           idle);
    } else {
        bool busy = twohop::mpi_thread_work_queued();
        bool more = true;
        for (unsigned spins = 1;; ++spins) {
            if (more) more = enqueue_more();
            if ((rc = step()) != twohop::Proxy::kPending) break;
            if (spins % (busy ? 16u : 1024u) == 0) busy = idle();
        }
    }
    // On failure: every wait of this rank's stream released, the stream drained.
    if (!sched.ok) {
        release_posted(c, h.ring, s0);
        gpu_settle(c);
        if (!h.stuck) gpu_waiting_kernel_end();
        return gpu_error(c, "enqueueing the GPU-posted call failed on local rank", me);
    }
    if (rc == twohop::Proxy::kStopped || rc == twohop::kPostedBadDescriptor) {
        rc = TWOHOP_ERR_TRANSPORT;
    }
    const uint64_t bells = job.doorbells();
    g_doorbells.fetch_add(bells, std::memory_order_relaxed);
    if (rc != TWOHOP_OK) {
        release_posted(c, h.ring, s0);
        gpu_settle(c);
        if (!h.stuck) gpu_waiting_kernel_end();
        return rc;
    }
    h.pending = false;
    gpu_waiting_kernel_end(); // `drained` was seen: the GPU side ended
    g_posted_calls.fetch_add(1, std::memory_order_relaxed);
    // The tail this call took (the proxy's steps ended: this thread reads alone), the next
    // call's prediction; one outlier delays one call's early wake-up at most.
    const double tail = gate_seen && t_done > t_gate
                            ? std::chrono::duration<double, std::micro>(t_done - t_gate).count()
                            : -1.0;
    if (tail >= 0) h.tail_us[size_class] = static_cast<float>(tail);
    // How long the woken caller spun for the end (< 0: how late it woke): the class's next lead.
    // t_woke is set only where the caller slept for `near` (Proxy::run). Not after the class's
    // first call, which had no prediction (woken at the last gate).
    double spin = 0;
    const bool woke = c->posted_wake_lead_us >= 0 && predicted_tail > 0 && gate_seen &&
                      t_woke != Clock::time_point{} && t_done != Clock::time_point{};
    if (woke) {
        spin = std::chrono::duration<double, std::micro>(t_done - t_woke).count();
        // The lead it had: the predicted tail less the time from the last gate to when the
        // caller was signalled -- `near` (the lead, or the whole predicted tail when woken at
        // the gate) or the end, when the tail ran shorter than predicted less the lead. Minus
        // the spin, the lead it needed to wake at the end (wake_lead.h).
        auto after_gate = [&t_gate](Clock::time_point t) {
            return std::chrono::duration<double, std::micro>(t - t_gate).count();
        };
        const double had = twohop::lead_had_us(
            predicted_tail, t_near != Clock::time_point{} ? after_gate(t_near) : -1.0,
            after_gate(t_done));
        if (c->verbose >= 2 && h.wake_log[size_class].size() < GpuHop1::kWakeLogMax) {
            h.wake_log[size_class].push_back({static_cast<float>(had), static_cast<float>(spin)});
        }
        wake.update(static_cast<float>(spin), wake_after > 0, static_cast<float>(had));
    }
    if (timed) {
        const double cpu_end = twohop::thread_cpu_s();
        char spun[96] = "spin not measured";
        if (woke) {
            std::snprintf(spun, sizeof(spun), "spun %.1f us (next lead %.1f us)", spin,
                          static_cast<double>(wake.lead_us()));
        }
        char msg[600];
        std::snprintf(msg, sizeof(msg),
                      "GPU-posted call: %llu B, %llu segments, %llu doorbells seen by the proxy, "
                      "%s; rounds %.1f us (calling thread's CPU %.1f us); from the rounds' end: "
                      "first descriptor %.1f us, hop 2 done %.1f us, end %.1f us (CPU %.1f us); "
                      "tail after the last finish gate predicted %.1f us, taken %.1f us; "
                      "wake lead %.1f us, %s",
                      static_cast<unsigned long long>(count * red.item_bytes),
                      static_cast<unsigned long long>(nseg), static_cast<unsigned long long>(bells),
                      kernel_blocks > 0 ? "one kernel" : "stream operations per segment",
                      std::chrono::duration<double, std::micro>(t_start - h.call_entry).count(),
                      1e6 * (cpu_start - h.call_entry_cpu), t_first, t_hop2,
                      std::chrono::duration<double, std::micro>(Clock::now() - t_start).count(),
                      1e6 * (cpu_end - cpu_start), predicted_tail, tail, lead, spun);
        c->host.log(3, msg);
    }
    return TWOHOP_OK;
}

int gpu_enqueue_drain(twohop_comm *c) {
    GpuHop1 &h = c->gpu_hop1;
    if (!h.enq_pending) return TWOHOP_OK;
    int q = 0;
    int rc = c->poll_until([&h, &q] { return (q = h.enq_fence.query()) != 0; });
    if (rc != TWOHOP_OK) {
        // A peer failed or is gone: its flags will never move; release this rank's stream.
        release_gpu_waits(c);
        while (h.enq_fence.query() == 0) {
        }
        h.enq_pending = false;
        return rc;
    }
    h.enq_pending = false;
    if (q < 0) {
        // The failed call is the enqueued one, not the call draining it: node peers whose
        // streams wait for its flags are in it (their seq is enq_seq) and must see the
        // failure there.
        c->call_first_seq = h.enq_seq;
        return gpu_error(c, "a stream-ordered allreduce failed on local rank",
                         c->topo.local_rank);
    }
    return TWOHOP_OK;
}

int gpu_node_enqueue(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                     uint64_t count, const twohop_reduction &red, void *stream, bool *taken) {
    *taken = false;
    const int L = c->topo.local_size();
    const int me = c->topo.local_rank;
    const uint64_t s = ++c->seq;
    GpuHop1 &h = c->gpu_hop1;

    // Round 1: my descriptor (no wait for my input: the stream orders it).
    GpuDesc d;
    int device = -1;
    bool stage_in = false, stage_out = false;
    const uint64_t bytes = count * red.item_bytes;
    describe(c, in, out, red, bytes, &d, &device, &stage_in, &stage_out, true);
    if (d.can && stream && cuda::stream_device(stream) != device) d.can = 0;
    char *send_stage = static_cast<char *>(c->gpu_staging[d.in_place ? 1 : 0].ptr);
    char *recv_stage = static_cast<char *>(c->gpu_staging[1].ptr);
    publish_desc(c, d, s);
    int rc;
    if (!d.can) { // the host path, blocking: my GPU must not write my flags after the host does
        if ((rc = gpu_enqueue_drain(c)) != TWOHOP_OK) return rc;
        return vote_no(c, s);
    }
    if ((rc = c->wait_all(&RankFlags::desc_seq, s)) != TWOHOP_OK) return rc;
    GpuDesc peer[TWOHOP_GPU_MAX_RANKS];
    bool one_device = true, all = true;
    if ((rc = vote_round(c, d, device, s, peer, &one_device, &all)) != TWOHOP_OK) return rc;
    if (!all) { // the host path, blocking: my GPU must not write my flags after the host does
        if ((rc = gpu_enqueue_drain(c)) != TWOHOP_OK) return rc;
        return decline(c, s);
    }
    twohop_gpu_args a; // every rank its shard (the stream-ordered form has no one-kernel mode)
    rc = shard_args(c, peer, device, one_device, stage_in ? send_stage : in.device,
                    stage_out ? recv_stage : out.device, count, red, false, &a);
    if (rc != TWOHOP_OK) return rc;

    // Everything else on the application's stream.
    void *st = stream ? stream : cuda::legacy_stream();
    bool ok = true;
    for (int l = 0; ok && l < L; ++l) { // the previous call is finished on the whole node
        ok = cuda::wait_flag(device, st, flag_addr(c, l, &RankFlags::done), s - 1);
    }
    if (ok && stage_in) ok = cuda::copy_async(device, send_stage, in.device, bytes, st);
    // Word 0: this form's calls reach `ready` one at a time (the wait for `done` above).
    ok = ok && cuda::write_flag(device, st, ready_addr(c, me, 0), s);
    for (int l = 0; ok && l < L; ++l) {
        if (l != me) ok = cuda::wait_flag(device, st, ready_addr(c, l, 0), s);
    }
    ok = ok && cuda::launch(device, kernel_name(red.dtype, red.op), &a, sizeof(a), a.n, st);
    ok = ok && cuda::write_flag(device, st, flag_addr(c, me, &RankFlags::reduced), s);
    for (int l = 0; ok && l < L; ++l) {
        if (l != me) ok = cuda::wait_flag(device, st, flag_addr(c, l, &RankFlags::reduced), s);
    }
    if (ok && stage_out) ok = cuda::copy_async(device, out.device, recv_stage, bytes, st);
    ok = ok && cuda::write_flag(device, st, flag_addr(c, me, &RankFlags::done), s);
    ok = ok && h.enq_fence.record(device, st);
    h.enq_pending = true; // whatever part was enqueued must drain before the host moves on
    h.enq_device = device;
    h.enq_seq = s;
    if (!ok) return gpu_error(c, "enqueueing a stream-ordered allreduce failed on local rank", me);
    *taken = true;
    g_enqueued_calls.fetch_add(1, std::memory_order_relaxed);
    return TWOHOP_OK;
}

namespace {

/*
 * The host side of a stream-ordered GPU-posted call on several nodes (gpu_stream_posted): the
 * PostedJob of its segments, stepped by whoever drives the communicator's queue. Makes no CUDA
 * call: the GPU's progress is read from host words (the local ranks' flags, the call's
 * `released` word). Until every local rank's stream reached the call (ready >= first
 * sequence) it waits for the application, not for twohop (no timeout: hop 2 may wait for
 * another node's application too, which no timeout can tell from a hang). Destroyed
 * before it finished (a failure, a timeout), it releases every wait of the call's stream.
 */
class StreamPostedJob : public twohop::Job {
  public:
    StreamPostedJob(twohop_comm *c, const twohop_reduction &red, uint64_t count,
                    uint64_t seg_items, uint64_t s0, uint64_t nseg, const GpuStreamSlot &slot,
                    int ready_word)
        : c_(c), s0_(s0), ready_word_(ready_word), slot_(slot),
          backend_(c, red, count, seg_items, s0, nseg, slot.ring,
                   [this]() -> int {
                       const int e = slot_.enqueue_state->load(std::memory_order_acquire);
                       if (e < 0) return TWOHOP_ERR_TRANSPORT;
                       if (e == 0 || !twohop::reached(slot_.released, slot_.token)) return 0;
                       // `released` follows the kernel, also when a wait of it timed out.
                       return __atomic_load_n(&slot_.ring->fault, __ATOMIC_ACQUIRE) != 0
                                  ? int(TWOHOP_ERR_TIMEOUT)
                                  : 1;
                   }),
          job_(slot.ring, &backend_, s0, nseg, 0, TWOHOP_ERR_TIMEOUT), bytes_(count * red.item_bytes),
          timed_(c->verbose >= 3) {
        if (timed_) t_queued_ = Clock::now();
        gpu_waiting_kernel_begin(); // the call's kernel, enqueued after this job is queued
    }
    ~StreamPostedJob() override {
        // Ended, or its waits released here (it then ends without other nodes).
        if (!finished_) release_posted(c_, slot_.ring, s0_);
        gpu_waiting_kernel_end();
        slot_.job_live->store(false, std::memory_order_release);
    }
    int advance() override {
        if (slot_.enqueue_state->load(std::memory_order_acquire) < 0) {
            return TWOHOP_ERR_TRANSPORT;
        }
        if (timed_ && !started_) {
            started_ = true;
            t_[0] = Clock::now();
        }
        if (!arrived_) {
            for (int l = 0; l < c_->topo.local_size(); ++l) {
                if (c_->shm.flags(l).ready[ready_word_].load(std::memory_order_acquire) <
                    s0_ + 1) {
                    backend_.gates(); // segments whose sets are free need no wait later
                    return TWOHOP_PENDING;
                }
            }
            arrived_ = true;
            ++steps_;
            if (timed_) t_[1] = Clock::now();
        }
        const uint64_t before = job_.posted() + job_.retired();
        int rc = job_.step(TWOHOP_PENDING);
        steps_ += job_.posted() + job_.retired() - before;
        if (timed_) {
            if (t_[2] == Clock::time_point{} && job_.posted() > 0) t_[2] = Clock::now();
            if (t_[3] == Clock::time_point{} && job_.retired() == nseg()) t_[3] = Clock::now();
            if (t_[4] == Clock::time_point{} && backend_.finish_gates() == nseg()) {
                t_[4] = Clock::now();
            }
        }
        if (rc == TWOHOP_PENDING) return rc;
        if (rc == twohop::kPostedBadDescriptor) rc = TWOHOP_ERR_TRANSPORT;
        if (rc == TWOHOP_OK) {
            finished_ = true;
            gpu_hop1_done();
            g_doorbells.fetch_add(job_.doorbells(), std::memory_order_relaxed);
            if (timed_) log_times();
        }
        return rc;
    }
    bool waiting_on_application() const override { return !arrived_; }
    uint64_t reserved_first_seq() const override { return s0_ + 1; }

  private:
    using Clock = std::chrono::steady_clock;
    uint64_t nseg() const { return job_.segments(); }
    /* Verbose 3: where the call's host side spent its time (its job, from when it started). */
    void log_times() {
        auto us = [this](Clock::time_point t) {
            return t == Clock::time_point{}
                       ? -1.0
                       : std::chrono::duration<double, std::micro>(t - t_[0]).count();
        };
        char msg[400];
        std::snprintf(msg, sizeof(msg),
                      "stream-ordered call's host side: %llu B, %llu segments; queued %.1f us "
                      "before its job started; from then: every local stream reached it %.1f "
                      "us, first descriptor %.1f us, hop 2 done %.1f us, last finish gate %.1f "
                      "us, stream released %.1f us",
                      static_cast<unsigned long long>(bytes_),
                      static_cast<unsigned long long>(nseg()),
                      std::chrono::duration<double, std::micro>(t_[0] - t_queued_).count(),
                      us(t_[1]), us(t_[2]), us(t_[3]), us(t_[4]), us(Clock::now()));
        c_->host.log(3, msg);
    }
    twohop_comm *c_;
    uint64_t s0_;
    int ready_word_;
    GpuStreamSlot slot_;
    RingBackend backend_;
    twohop::PostedJob job_;
    bool arrived_ = false, finished_ = false;
    uint64_t bytes_;
    bool timed_, started_ = false;
    Clock::time_point t_queued_{}, t_[5]{}; // started, arrived, first, hop 2, last gate
};

} // namespace

int gpu_stream_posted(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                      uint64_t count, const twohop_reduction &red, void *stream,
                      const GpuStreamSlot &slot,
                      const std::function<int(std::unique_ptr<twohop::Job>)> &submit,
                      bool *on_gpu) {
    *on_gpu = false;
    GpuHop1 &h = c->gpu_hop1;
    const int me = c->topo.local_rank;
    const uint64_t bytes = count * red.item_bytes;
    const uint64_t s = ++c->seq;
    const auto t_start = std::chrono::steady_clock::now();

    // Round 1: my descriptor (no wait for my input: the streams order it, step 2).
    GpuDesc d;
    int device = -1;
    bool stage_in = false, stage_out = false;
    describe(c, in, out, red, bytes, &d, &device, &stage_in, &stage_out, true);
    if (stage_in || stage_out) d.can = 0; // staging copies would need the device's order
    if (d.can && stream && cuda::stream_device(stream) != device) d.can = 0;
    // The call's ring holds the segments posted and not yet consumed: at most depth + 1.
    if (uint64_t(c->depth) + 1 >= twohop::DoorbellRing::kSlots) d.can = 0;
    if (d.can && !cuda::preload(device, "th_post")) d.can = 0;
    if (d.can && !cuda::preload(device, kernel_name(red.dtype, red.op))) d.can = 0;
    publish_desc(c, d, s);
    if (!d.can) return vote_no(c, s);
    // An error leaves the failed call's number as the next one (the caller records the
    // failure under c->seq + 1, where the node peers look for it).
    auto failed = [c, s](int rc) {
        c->seq = s - 1;
        return rc;
    };
    int rc;
    // No engine lock here: waits that leave the transport to the queued calls' driver.
    if ((rc = wait_all_unlocked(c, &RankFlags::desc_seq, s)) != TWOHOP_OK) return failed(rc);
    GpuDesc peer[TWOHOP_GPU_MAX_RANKS];
    bool one_device = true, all = true;
    if ((rc = vote_round(c, d, device, s, peer, &one_device, &all, true)) != TWOHOP_OK) {
        return failed(rc);
    }
    if (!all) return decline(c, s);
    // Hop 3 gathered from gather_min_bytes (agreed; the message size is the same on every
    // rank). Below it the node's ranks would wait on each other's copies for little gain.
    const bool gather_pays = bytes >= c->gather_min_bytes;
    if ((rc = activate_hop1(c, peer, device, one_device, in.device, out.device,
                            gather_pays)) != TWOHOP_OK) {
        return failed(rc);
    }
    const auto t_rounds = std::chrono::steady_clock::now();
    h.active = false; // this call's pipeline is the stream's, not a host job's
    (void)decline(c, s);
    // One kernel for the call's GPU side (posted_call.h) when this rank uses it.
    // (Without its counters, stream operations: this rank's choice.)
    int kernel_blocks = call_kernel_blocks(c, red, bytes, device);
    unsigned long long *counters =
        kernel_blocks > 0 ? call_counters(c, device, slot.index) : nullptr;
    if (counters == nullptr) kernel_blocks = 0;
    const auto t_kernel = std::chrono::steady_clock::now();

    // 2. The call's sequence numbers, its ring, its job (queued before the stream may wait on
    // it), then the stream's half.
    const uint64_t seg_items = twohop::segment_items(c->slot_bytes, red.item_bytes);
    const uint64_t nseg = twohop::segment_count(count, seg_items);
    const uint64_t s0 = c->seq;
    c->seq += nseg;
    // The call's `ready` word: the node's calls of this form in turn (every local rank counts
    // the calls its node agreed to run here, so the word is the same on all of them).
    const int ready_word =
        static_cast<int>(c->stream_ready_calls++ % twohop::RankFlags::kReadyWords);
    twohop::reset(slot.ring);
    slot.enqueue_state->store(0, std::memory_order_relaxed);
    slot.job_live->store(true, std::memory_order_release);
    std::unique_ptr<twohop::Job> job(
        new StreamPostedJob(c, red, count, seg_items, s0, nseg, slot, ready_word));
    if ((rc = submit(std::move(job))) != TWOHOP_OK) return failed(rc); // dropped: waits released
    // From here the stream waits on the slot's words: it stays in use until `released`.
    *slot.slot_token = slot.token;
    const auto t_queued = std::chrono::steady_clock::now();

    void *st = stream ? stream : cuda::legacy_stream();
    PostedSchedule sched{c, st, slot.ring_dev, s0, count, seg_items, nseg, red, out.device};
    if (kernel_blocks > 0) {
        // The kernel writes my `ready` and waits for the local ranks' (no stream operations).
        sched.ready_seq = s0 + 1;
        sched.ready_word = ready_word;
        sched.end_word = slot.released_dev; // the kernel writes `released`: one launch in all
        sched.end_value = slot.token;
        sched.call(counters, kernel_blocks);
    } else {
        sched.ok = cuda::write_flag(device, st, ready_addr(c, me, ready_word), s0 + 1);
        for (int l = 0; sched.ok && l < c->topo.local_size(); ++l) {
            if (l != me) {
                sched.ok = cuda::wait_flag(device, st, ready_addr(c, l, ready_word), s0 + 1);
            }
        }
        const uint64_t depth = static_cast<uint64_t>(c->depth);
        for (uint64_t k = 0; sched.ok && k < nseg; ++k) {
            if (k >= depth) sched.finish(k - depth);
            sched.start(k);
        }
        sched.tail();
        sched.ok = sched.ok && cuda::write_flag(device, st, slot.released_dev, slot.token);
    }
    const bool gathered = h.gather;
    h.gather = false;
    if (!sched.ok) {
        slot.enqueue_state->store(-1, std::memory_order_release);
        return failed(
            gpu_error(c, "enqueueing a stream-ordered allreduce failed on local rank", me));
    }
    slot.enqueue_state->store(1, std::memory_order_release);
    *on_gpu = true;
    if (c->verbose >= 3) {
        const auto t_end = std::chrono::steady_clock::now();
        char msg[400];
        std::snprintf(msg, sizeof(msg),
                      "stream-ordered call on the device buffers: %llu B, %llu segments "
                      "GPU-posted on the application's stream (%s)%s; before the rounds %.1f "
                      "us, rounds %.1f us, enqueue %.1f us (kernel chosen %.1f, job queued "
                      "%.1f, stream work %.1f)",
                      static_cast<unsigned long long>(bytes),
                      static_cast<unsigned long long>(nseg),
                      kernel_blocks > 0 ? "one kernel" : "stream operations per segment",
                      gathered ? ", hop 3 gathered on the GPU" : "",
                      std::chrono::duration<double, std::micro>(t_start - slot.entry).count(),
                      std::chrono::duration<double, std::micro>(t_rounds - t_start).count(),
                      std::chrono::duration<double, std::micro>(t_end - t_rounds).count(),
                      std::chrono::duration<double, std::micro>(t_kernel - t_rounds).count(),
                      std::chrono::duration<double, std::micro>(t_queued - t_kernel).count(),
                      std::chrono::duration<double, std::micro>(t_end - t_queued).count());
        c->host.log(3, msg);
    }
    return TWOHOP_OK;
}
