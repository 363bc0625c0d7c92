/*
 * Device kernels of the node's GPU path: one reduce-and-broadcast kernel per (type, op) pair
 * of gpu_kernel_list.h. Built by nvcc into a fat binary (sm_90 machine code plus PTX for newer
 * GPUs) that the host loads through the CUDA driver at run time (cuda_driver.cpp): no CUDA
 * runtime, and the component never links the driver.
 *
 * Each thread takes elements in a grid-stride loop: it reads element i of every input in rank
 * order, combines them with the op (fixed order: bitwise-identical results everywhere), and
 * writes the value to element i of every output. Reads of an element happen before its writes,
 * so in-place buffers (in[r] == out[r]) are safe. When the host says the pointers share their
 * alignment (args.vec), the body moves 16 bytes per load and store (16 / sizeof(T) elements,
 * each combined exactly as above); the elements before the first 16-byte boundary and after the
 * last one go one at a time.
 */
#include <cstdint>

#include "doorbell_ring.h"
#include "gpu_kernel_list.h"
#include "reduce_ops.h"

namespace {

using namespace twohop;

/* Element i: in[0][off + i] op ... op in[nin - 1][off + i] into out[r][i], r < nout. */
template <typename T, typename Op, typename P>
__device__ __forceinline__ void one(const P *in, unsigned long long off, int nin,
                                    void *const *out, int nout, unsigned long long i) {
    T v = static_cast<const T *>(static_cast<const void *>(in[0]))[off + i];
    for (int l = 1; l < nin; ++l) {
        v = Op::apply(v, static_cast<const T *>(static_cast<const void *>(in[l]))[off + i]);
    }
    for (int r = 0; r < nout; ++r) static_cast<T *>(out[r])[i] = v;
}

template <typename T, int V> struct alignas(16) Pack {
    T e[V];
};

/*
 * n elements in a grid-stride loop (thread `tid` of `stride`): element i combines element
 * off + i of every input (in rank order) and is written to element i of every output. With
 * `vec` (every pointer at off has the same offset modulo 16, `head` elements before the first
 * 16-byte boundary) the body moves 16 bytes per load and store.
 */
template <typename T, typename Op, typename P>
__device__ void reduce_span(const P *in, unsigned long long off, int nin, void *const *out,
                            int nout, unsigned long long n, int vec, unsigned long long head,
                            unsigned long long tid, unsigned long long stride) {
    constexpr int V = (sizeof(T) < 16 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;
    if (V == 1 || !vec) {
        for (unsigned long long i = tid; i < n; i += stride) one<T, Op>(in, off, nin, out, nout, i);
        return;
    }
    if (head > n) head = n;
    const unsigned long long nvec = (n - head) / V;
    using Pk = Pack<T, V>;
    for (unsigned long long j = tid; j < nvec; j += stride) {
        const unsigned long long i = head + j * V;
        Pk v = *reinterpret_cast<const Pk *>(
            static_cast<const T *>(static_cast<const void *>(in[0])) + off + i);
        for (int l = 1; l < nin; ++l) {
            const Pk w = *reinterpret_cast<const Pk *>(
                static_cast<const T *>(static_cast<const void *>(in[l])) + off + i);
#pragma unroll
            for (int k = 0; k < V; ++k) v.e[k] = Op::apply(v.e[k], w.e[k]);
        }
        for (int r = 0; r < nout; ++r) *reinterpret_cast<Pk *>(static_cast<T *>(out[r]) + i) = v;
    }
    // Head and tail, one element at a time.
    const unsigned long long tail0 = head + nvec * V, scalars = head + (n - tail0);
    for (unsigned long long j = tid; j < scalars; j += stride) {
        one<T, Op>(in, off, nin, out, nout, j < head ? j : tail0 + (j - head));
    }
}

template <typename T, typename Op> __device__ void reduce_bcast(const twohop_gpu_args &a) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    reduce_span<T, Op>(a.in, 0, a.nin, a.out, a.nout, a.n, a.vec, a.head, tid, stride);
}

} // namespace

#define TWOHOP_DEFINE_KERNEL(D, T, OP, F)                                                      \
    extern "C" __global__ void th_rb_##D##_##OP(twohop_gpu_args a) {                          \
        reduce_bcast<T, F>(a);                                                                 \
    }
TWOHOP_GPU_KERNELS(TWOHOP_DEFINE_KERNEL)

// One kernel per GPU-posted call (posted_call.h), th_call_<type>_<op>.
#include "gpu_call.cuh"

#include "stage_args.h"

/*
 * A stream-ordered call's host copy in one launch (stage_args.h has the steps): one block;
 * thread 0 publishes `arrived` and waits for the gate, every thread copies.
 */
extern "C" __global__ void th_stage(twohop::StageArgs a) {
    if (blockIdx.x != 0) return;
    const unsigned long long tid = threadIdx.x, stride = blockDim.x;
    copy_span(a.host, a.in, a.bytes, tid, stride);
    __syncthreads(); // every store of the input issued
    if (threadIdx.x == 0) {
        __threadfence_system(); // cumulative: the block's stores reach the host before the word
        st_release_sys(a.arrived, a.token);
        while (static_cast<long long>(ld_acquire_sys(a.gate) - a.token) < 0) __nanosleep(64);
    }
    __syncthreads(); // the gate seen: the result is in the host copy
    copy_span(a.out, a.host, a.bytes, tid, stride);
    __syncthreads(); // every load of the host copy returned (their values were stored)
    if (threadIdx.x == 0) {
        __threadfence_system(); // the result's stores before `released` (and the kernel's end)
        st_release_sys(a.released, a.token);
    }
}

/*
 * GPU-posted operations: after a segment's hop-1 kernel (stream order), one thread writes the
 * segment's descriptor into the proxy's ring in registered host memory and, on a doorbell
 * segment, makes it and every earlier descriptor visible system-wide before bumping the
 * doorbell (doorbell_ring.h). The proxy thread polls the doorbell and posts hop 2 at once.
 */
extern "C" __global__ void th_post(twohop::PostArgs a) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    a.ring->slot[a.index % twohop::DoorbellRing::kSlots] = a.desc;
    if (a.ring_bell) {
        __threadfence_system();
        *reinterpret_cast<volatile unsigned long long *>(&a.ring->doorbell) = a.index + 1;
    }
}
