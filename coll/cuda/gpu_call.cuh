/*
 * The GPU side of a GPU-posted call in one kernel (posted_call.h has the protocol): device
 * code only, included by gpu_kernels.cu (one fat binary), which instantiates
 * th_call_<type>_<op> for every (type, op) pair of gpu_kernel_list.h.
 *
 * Memory model: words the host or other processes write (gates, peers' flags, the fault word)
 * are read with ld.acquire.sys; data in host memory or in peers' buffers written after this
 * kernel started is read with ld.cv (no stale cached line), except the peers' inputs of the
 * stream-ordered form, read with plain loads after thread 0's acquire of their `ready` and a
 * block barrier (no line of them was cached before: this kernel reads them only then); what
 * this kernel publishes is
 * fenced system-wide (__threadfence_system) by every block before its arrival, and by the last
 * block again before the word that announces it (PTX ISA, "Memory Consistency Model":
 * cumulative fences order the other blocks' writes, observed through the counter, before it).
 */
#ifndef TWOHOP_GPU_CALL_CUH
#define TWOHOP_GPU_CALL_CUH

#include <cstdint>

#include "posted_call.h"
#include "segment_plan.h"

namespace {

using twohop::PostedCallArgs;

__device__ __forceinline__ unsigned long long ld_acquire_sys(const void *p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys(void *p, unsigned long long v) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Whether the call failed (the ring's fault word: the host gave it up, or a wait timed out). */
__device__ __forceinline__ bool faulted(const PostedCallArgs &a) {
    return ld_acquire_sys(&a.ring->fault) != 0;
}

/* One thread: spins until (int64_t)(*w - v) >= 0. False when the call failed before,
 * meanwhile or by the time the word passed (a failed call's words are set past any value, so
 * the wait alone would pass) or the wait outlasted the timeout (then it sets fault = 1). */
__device__ bool spin_until(const PostedCallArgs &a, const uint64_t *w, uint64_t v) {
    if (faulted(a)) return false;
    const unsigned long long t0 = now_ns();
    for (unsigned n = 0;; ++n) {
        // Passed: the host sets the fault word before it releases a word, so a word read as
        // released (acquire) shows the fault too.
        if (static_cast<long long>(ld_acquire_sys(w) - v) >= 0) return !faulted(a);
        if ((n & 15) == 15) {
            if (ld_acquire_sys(&a.ring->fault) != 0) return false;
            if (a.timeout_ns != 0 && now_ns() - t0 > a.timeout_ns) {
                st_release_sys(&a.ring->fault, 1);
                return false;
            }
        }
        __nanosleep(128);
    }
}

/* The whole block waits for one word (thread 0 spins); the same answer in every thread. */
__device__ bool block_wait(const PostedCallArgs &a, const uint64_t *w, uint64_t v) {
    __shared__ int ok;
    __syncthreads(); // every thread read the previous answer
    if (threadIdx.x == 0) ok = spin_until(a, w, v) ? 1 : 0;
    __syncthreads();
    return ok != 0;
}

/*
 * The block has finished step `event` (0 hop 1, 1 own shards gathered, 2 segment done) of a
 * segment in buffer set `set`, its `use`-th use in this call; `blocks` blocks take the step
 * (its half of the grid). True (in every thread) for the block that arrives last, which then
 * publishes the step. The counter's protocol (tags, no reset between calls): posted_call.h.
 */
__device__ bool arrive(const PostedCallArgs &a, int event, int set, uint64_t use,
                       unsigned blocks) {
    __shared__ int last;
    __syncthreads(); // every thread's writes of the step are done
    if (threadIdx.x == 0) {
        __threadfence_system();
        unsigned long long *ctr = a.counters + event * PostedCallArgs::kMaxSets + set;
        const uint64_t tag = twohop::arrival_tag(a.s0);
        unsigned long long cur = *reinterpret_cast<volatile unsigned long long *>(ctr);
        unsigned long long seen, next;
        do {
            seen = cur;
            next = twohop::arrival_next(seen, tag);
            cur = atomicCAS(ctr, seen, next);
        } while (cur != seen);
        last = twohop::arrival_last(next, use, blocks) ? 1 : 0;
        if (last) __threadfence_system();
    }
    __syncthreads();
    return last != 0;
}

/* Loads each thread keeps in flight in copy_words: the result in host memory is read over
 * PCIe, where one load per thread at a time (the compiler cannot hoist a load above the
 * previous store, which may alias it) leaves the link mostly idle: 2 blocks of 512 threads
 * x 16 B = 16 KiB in flight per round trip. */
constexpr int kCopyUnroll = 4;

/* n bytes as words W (W bytes wide) from the first W-aligned destination byte, the bytes
 * before and after one at a time; loads with ld.cv (host memory written by the proxy, peers'
 * buffers written after the launch), kCopyUnroll at a time before their stores. Source and
 * destination share their offset modulo W and do not overlap. */
template <typename W>
__device__ void copy_words(char *dst, const char *src, unsigned long long n,
                           unsigned long long tid, unsigned long long stride) {
    const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
    unsigned long long head = (sizeof(W) - d % sizeof(W)) % sizeof(W);
    if (head > n) head = n;
    const unsigned long long nvec = (n - head) / sizeof(W);
    const W *sv = reinterpret_cast<const W *>(src + head);
    W *dv = reinterpret_cast<W *>(dst + head);
    unsigned long long j = tid;
    if (nvec + kCopyUnroll * stride < (1ull << 32)) { // 32-bit indices: fewer registers
        unsigned int i = static_cast<unsigned int>(tid);
        const unsigned int st = static_cast<unsigned int>(stride),
                           nv = static_cast<unsigned int>(nvec);
        for (; i + (kCopyUnroll - 1) * st < nv; i += kCopyUnroll * st) {
            W v[kCopyUnroll];
#pragma unroll
            for (int u = 0; u < kCopyUnroll; ++u) v[u] = __ldcv(sv + i + u * st);
#pragma unroll
            for (int u = 0; u < kCopyUnroll; ++u) dv[i + u * st] = v[u];
        }
        j = i;
    }
    for (; j < nvec; j += stride) dv[j] = __ldcv(sv + j);
    const unsigned long long tail0 = head + nvec * sizeof(W), scalars = head + (n - tail0);
    const unsigned char *sb = reinterpret_cast<const unsigned char *>(src);
    unsigned char *db = reinterpret_cast<unsigned char *>(dst);
    for (unsigned long long j = tid; j < scalars; j += stride) {
        const unsigned long long i = j < head ? j : tail0 + (j - head);
        db[i] = __ldcv(sb + i);
    }
}

/* Copies n bytes with the widest words the two addresses' common alignment allows. */
__device__ void copy_span(char *dst, const char *src, unsigned long long n, unsigned long long tid,
                          unsigned long long stride) {
    const uintptr_t x = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
    if (x % 16 == 0) {
        copy_words<uint4>(dst, src, n, tid, stride);
    } else if (x % 8 == 0) {
        copy_words<unsigned long long>(dst, src, n, tid, stride);
    } else if (x % 4 == 0) {
        copy_words<unsigned int>(dst, src, n, tid, stride);
    } else if (x % 2 == 0) {
        copy_words<unsigned short>(dst, src, n, tid, stride);
    } else {
        copy_words<unsigned char>(dst, src, n, tid, stride);
    }
}

/* Hop 1 of segment k: this rank's shards from every local input into the set's result. */
template <typename T, typename Op>
__device__ bool call_start(const PostedCallArgs &a, uint64_t k, unsigned long long tid,
                           unsigned long long stride) {
    const uint64_t s = a.s0 + 1 + k;
    const int set = static_cast<int>(s % static_cast<uint64_t>(a.depth));
    if (!block_wait(a, &a.ring->gate_start, k + 1)) return false;
    const twohop::Range seg = twohop::segment_range(a.count, a.seg_items, k);
    for (int i = 0; i < a.n_mine; ++i) {
        const twohop::Range r =
            twohop::split_even(seg.count, static_cast<uint64_t>(a.shards),
                               static_cast<uint64_t>(a.mine[i]));
        if (r.count == 0) continue;
        const unsigned long long off = (seg.offset + r.offset) * a.item_bytes / sizeof(T);
        char *dst = a.result[set] + r.offset * a.item_bytes;
        const unsigned long long n = r.count * a.elems_per_item;
        int vec = 0;
        unsigned long long head = 0;
        if (a.vec_ok) {
            const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) % 16;
            vec = mis % sizeof(T) == 0 ? 1 : 0;
            for (int l = 0; vec && l < a.local_size; ++l) {
                vec = reinterpret_cast<uintptr_t>(
                          reinterpret_cast<const T *>(a.in[l]) + off) % 16 == mis;
            }
            head = ((16 - mis) % 16) / sizeof(T);
        }
        void *outs[1] = {dst};
        reduce_span<T, Op>(a.in, off, a.local_size, outs, 1, n, vec, head, tid, stride);
    }
    if (arrive(a, 0, set, k / static_cast<uint64_t>(a.depth), gridDim.x / 2) &&
        threadIdx.x == 0 && !faulted(a)) {
        const bool last = k + 1 == a.nseg;
        a.ring->slot[k % twohop::DoorbellRing::kSlots] =
            twohop::PostDesc{s, static_cast<uint32_t>(k), last ? 1u : 0u};
        if ((k + 1) % static_cast<uint64_t>(a.batch) == 0 || last) {
            __threadfence_system();
            st_release_sys(&a.ring->doorbell, k + 1);
        }
    }
    return true;
}

/* Hop 3 of segment k, then `done`. */
__device__ bool call_finish(const PostedCallArgs &a, uint64_t k, unsigned long long tid,
                            unsigned long long stride) {
    const uint64_t s = a.s0 + 1 + k;
    const int set = static_cast<int>(s % static_cast<uint64_t>(a.depth));
    const uint64_t use = k / static_cast<uint64_t>(a.depth);
    const uint64_t ib = a.item_bytes;
    if (!block_wait(a, &a.ring->gate_finish, k + 1)) return false;
    const twohop::Range seg = twohop::segment_range(a.count, a.seg_items, k);
    char *out = a.out[a.me];
    if (!a.gather) {
        copy_span(out + seg.offset * ib, a.result[set], seg.count * ib, tid, stride);
    } else {
        for (int i = 0; i < a.n_mine; ++i) {
            const twohop::Range r =
                twohop::split_even(seg.count, static_cast<uint64_t>(a.shards),
                                   static_cast<uint64_t>(a.mine[i]));
            copy_span(out + (seg.offset + r.offset) * ib, a.result[set] + r.offset * ib,
                      r.count * ib, tid, stride);
        }
        if (arrive(a, 1, set, use, gridDim.x / 2) && threadIdx.x == 0 && !faulted(a)) {
            st_release_sys(a.gathered[a.me], s);
        }
        const int first = a.n_mine > 0 ? a.mine[0] : 0;
        for (int j = 0; j < a.shards; ++j) {
            const int sh = (first + j) % a.shards;
            const int o = a.owner[sh];
            if (o == a.me) continue;
            const twohop::Range r = twohop::split_even(
                seg.count, static_cast<uint64_t>(a.shards), static_cast<uint64_t>(sh));
            if (r.count == 0) continue;
            if (!block_wait(a, a.gathered[o], s)) return false;
            const uint64_t off = (seg.offset + r.offset) * ib;
            copy_span(out + off, a.out[o] + off, r.count * ib, tid, stride);
        }
    }
    if (arrive(a, 2, set, use, gridDim.x / 2) && threadIdx.x == 0 && !faulted(a)) {
        st_release_sys(a.done[a.me], s);
    }
    return true;
}

/* Every thread of every block, once, whichever way it left posted_call: the last block to
 * arrive writes the call's end word (after arrive's system fences: every block's writes, data
 * and flags, are visible first). */
static_assert(PostedCallArgs::kExitCounter % PostedCallArgs::kMaxSets == 0,
              "arrive() addresses the exit counter as event kExitCounter / kMaxSets, set 0");
__device__ void call_exit(const PostedCallArgs &a) {
    if (a.end_word == nullptr) return;
    if (arrive(a, PostedCallArgs::kExitCounter / PostedCallArgs::kMaxSets, 0, 0, gridDim.x) &&
        threadIdx.x == 0) {
        st_release_sys(a.end_word, a.end_value);
    }
}

/*
 * The grid's first half runs hop 1 (start) of every segment in order, the second half hop 3
 * (finish), so neither waits for the other's gate: hop 1 of segment k + 1 runs while hop 3 of
 * an earlier segment waits for its hop-2 result, as the copy engine and the kernels overlap
 * in the CPU-posted pipeline. The gates keep them at most depth segments apart.
 */

template <typename T, typename Op> __device__ void posted_call(const PostedCallArgs &a) {
    const unsigned half = gridDim.x / 2;
    const bool hop1 = blockIdx.x < half;
    const unsigned long long stride = static_cast<unsigned long long>(half) * blockDim.x;
    const unsigned long long tid =
        static_cast<unsigned long long>(blockIdx.x % half) * blockDim.x + threadIdx.x;
    if (hop1) {
        // Stream-ordered: announce that my stream reached the call, then wait until every
        // local rank's did (their inputs are final) before the first hop 1 reads them.
        if (a.ready_seq != 0) {
            // The fence orders the earlier work on this stream (the application's writes of my
            // input) before `ready` for the peers, as the stream write it replaces did; a
            // failed call's released flag is not lowered.
            if (blockIdx.x == 0 && threadIdx.x == 0 && !faulted(a)) {
                __threadfence_system();
                st_release_sys(a.ready[a.me], a.ready_seq);
            }
            for (int l = 0; l < a.local_size; ++l) {
                if (l != a.me && !block_wait(a, a.ready[l], a.ready_seq)) return;
            }
        }
        for (uint64_t k = 0; k < a.nseg; ++k) {
            if (!call_start<T, Op>(a, k, tid, stride)) return;
        }
        return;
    }
    for (uint64_t k = 0; k < a.nseg; ++k) {
        if (!call_finish(a, k, tid, stride)) return;
    }
    if (a.gather && blockIdx.x == half && threadIdx.x == 0) {
        for (int l = 0; l < a.local_size; ++l) {
            if (l != a.me && !spin_until(a, a.done[l], a.s0 + a.nseg)) return;
        }
    }
}

} // namespace

#define TWOHOP_DEFINE_CALL_KERNEL(D, T, OP, F)                                                 \
    extern "C" __global__ void __launch_bounds__(512, 2)                                       \
        th_call_##D##_##OP(const __grid_constant__ twohop::PostedCallArgs a) {                 \
        posted_call<T, F>(a);                                                                  \
        call_exit(a);                                                                          \
    }
TWOHOP_GPU_KERNELS(TWOHOP_DEFINE_CALL_KERNEL)

#endif
