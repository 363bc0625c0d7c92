/*
 * The node's decision on device buffers, per call (docs/design.md, "GPU path"): each local rank
 * describes its buffers (descriptor, CUDA IPC handles, staging), publishes them, and votes; the
 * node takes its GPU path only when every vote is yes. Also the peers' buffers mapped for a yes
 * (shard_args, activate_hop1) and the count of kernels that may wait for other ranks.
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


namespace twohop_gpu {

/* Kernel name of (t, op): the reduction kernel, or with `call` the GPU-posted call kernel
 * (posted_call.h); nullptr when the GPU path has no kernel for it. */
const char *kernel_name(twohop_dtype t, twohop_op op, bool call) {
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
              bool *stage_in, bool *stage_out, bool enqueue) {
    std::memset(d, 0, sizeof(*d));
    d->msg_bytes = bytes;
    d->item_bytes = red.item_bytes;
    d->enqueue = enqueue ? 1 : 0;
    *device = -1;
    *stage_in = *stage_out = false;
    if (gpu_declines_at_once(in, out, red)) return;
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
                const uint64_t f = c->shm.flags(i).failed.load(std::memory_order_acquire);
                if (f != 0) {
                    return i == c->topo.local_rank ? TWOHOP_ERR_POISONED
                                                   : twohop_comm::told_status(f);
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
               bool *one_device, bool *all, bool unlocked) {
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
    if (!c->seq.give_back(s)) { // s is always the last number taken: the round took it
        c->host.log(0, "internal error: a declined GPU round's sequence number was not the last "
                       "one taken; please report it");
    }
    return TWOHOP_OK;
}

/* This rank's vote of call s: no (the vote word's encoding, (s << 1) | yes). */
void publish_no(twohop_comm *c, uint64_t s) {
    c->shm.flags(c->topo.local_rank).vote.store(s << 1, std::memory_order_release);
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
    publish_no(c, s);
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
                  char *my_in, char *my_out, bool gather_allowed) {
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


} // namespace twohop_gpu

using namespace twohop_gpu;

void gpu_waiting_kernel_begin() {
    if (t_cuda_step) { // inside the proxy's step of a device job: the lock is held
        g_waiting_kernels.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    std::lock_guard<std::mutex> g(g_cuda_step_m);
    g_waiting_kernels.fetch_add(1, std::memory_order_acq_rel);
}
void gpu_waiting_kernel_end() { g_waiting_kernels.fetch_sub(1, std::memory_order_acq_rel); }

bool gpu_declines_at_once(const twohop_userbuf &in, const twohop_userbuf &out,
                          const twohop_reduction &red) {
    return !in.device || !out.device || red.op == TWOHOP_OP_USER ||
           twohop_gpu::kernel_name(red.dtype, red.op) == nullptr;
}

void gpu_decline_first(twohop_comm *c, uint64_t s, uint64_t msg_bytes, uint64_t item_bytes) {
    twohop_gpu::GpuDesc d;
    std::memset(&d, 0, sizeof(d)); // what describe() leaves for such a rank
    d.msg_bytes = msg_bytes;
    d.item_bytes = item_bytes;
    twohop_gpu::publish_desc(c, d, s);
    twohop_gpu::publish_no(c, s);
}
