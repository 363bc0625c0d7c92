/*
 * Device kernels of the node's GPU path: one reduce-and-broadcast kernel per (type, op) pair
 * of gpu_kernel_list.h. Built by nvcc into a fat binary (sm_90 machine code plus PTX for newer
 * GPUs) that the host loads through the CUDA driver at run time (cuda_driver.cpp): no CUDA
 * runtime, and the component never links the driver.
 *
 * Each thread takes elements in a grid-stride loop: it reads element i of every input in rank
 * order, combines them with the op (fixed order: bitwise-identical results everywhere), and
 * writes the value to element i of every output. Reads of an element happen before its writes,
 * so in-place buffers (in[r] == out[r]) are safe.
 */
#include <cstdint>

#include "gpu_kernel_list.h"
#include "reduce_ops.h"

namespace {

using namespace twohop;

template <typename T, typename Op> __device__ void reduce_bcast(const twohop_gpu_args &a) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < a.n; i += stride) {
        T v = static_cast<const T *>(a.in[0])[i];
        for (int l = 1; l < a.nin; ++l) v = Op::apply(v, static_cast<const T *>(a.in[l])[i]);
        for (int r = 0; r < a.nout; ++r) static_cast<T *>(a.out[r])[i] = v;
    }
}

} // namespace

#define TWOHOP_DEFINE_KERNEL(D, T, OP, F)                                                      \
    extern "C" __global__ void th_rb_##D##_##OP(twohop_gpu_args a) {                          \
        reduce_bcast<T, F>(a);                                                                 \
    }
TWOHOP_GPU_KERNELS(TWOHOP_DEFINE_KERNEL)
