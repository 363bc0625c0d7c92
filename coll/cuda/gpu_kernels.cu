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

template <typename T, typename Op>
__device__ __forceinline__ void one(const twohop_gpu_args &a, unsigned long long i) {
    T v = static_cast<const T *>(a.in[0])[i];
    for (int l = 1; l < a.nin; ++l) v = Op::apply(v, static_cast<const T *>(a.in[l])[i]);
    for (int r = 0; r < a.nout; ++r) static_cast<T *>(a.out[r])[i] = v;
}

template <typename T, int V> struct alignas(16) Pack {
    T e[V];
};

template <typename T, typename Op> __device__ void reduce_bcast(const twohop_gpu_args &a) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    constexpr int V = (sizeof(T) < 16 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;
    if (V == 1 || !a.vec) {
        for (unsigned long long i = tid; i < a.n; i += stride) one<T, Op>(a, i);
        return;
    }
    const unsigned long long head = a.head < a.n ? a.head : a.n;
    const unsigned long long nvec = (a.n - head) / V;
    using P = Pack<T, V>;
    for (unsigned long long j = tid; j < nvec; j += stride) {
        const unsigned long long i = head + j * V;
        P v = *reinterpret_cast<const P *>(static_cast<const T *>(a.in[0]) + i);
        for (int l = 1; l < a.nin; ++l) {
            const P w = *reinterpret_cast<const P *>(static_cast<const T *>(a.in[l]) + i);
#pragma unroll
            for (int k = 0; k < V; ++k) v.e[k] = Op::apply(v.e[k], w.e[k]);
        }
        for (int r = 0; r < a.nout; ++r) *reinterpret_cast<P *>(static_cast<T *>(a.out[r]) + i) = v;
    }
    // Head and tail, one element at a time.
    const unsigned long long tail0 = head + nvec * V, scalars = head + (a.n - tail0);
    for (unsigned long long j = tid; j < scalars; j += stride) {
        one<T, Op>(a, j < head ? j : tail0 + (j - head));
    }
}

} // namespace

#define TWOHOP_DEFINE_KERNEL(D, T, OP, F)                                                      \
    extern "C" __global__ void th_rb_##D##_##OP(twohop_gpu_args a) {                          \
        reduce_bcast<T, F>(a);                                                                 \
    }
TWOHOP_GPU_KERNELS(TWOHOP_DEFINE_KERNEL)

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
