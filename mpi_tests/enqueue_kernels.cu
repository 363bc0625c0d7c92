/*
 * Device code of the stream-ordering test (enqueue_allreduce.c): a producer that runs for a set
 * time before it writes the allreduce input, and a consumer that checks the result, both on
 * the application's stream. Host-callable launchers with C linkage.
 */
#include <cuda_runtime.h>

/* Spins for `ns` nanoseconds (global timer), then buf[i] = base + i % 7 for i < n. */
__global__ void produce(float *buf, long long n, float base, unsigned long long ns) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && ns > 0) {
        unsigned long long t0;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        unsigned long long t = t0;
        while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    }
    __syncthreads(); // launched with one block: every write waits for the spin
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        buf[i] = base + (float)(i % 7);
    }
}

/* errors[0] += number of i < n with buf[i] != expect_base + scale * (i % 7). */
__global__ void check(const float *buf, long long n, float expect_base, float scale,
                      unsigned long long *errors) {
    unsigned long long bad = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (buf[i] != expect_base + scale * (float)(i % 7)) ++bad;
    }
    if (bad) atomicAdd(errors, bad);
}

extern "C" int enqueue_test_produce(float *buf, long long n, float base, unsigned long long ns,
                                    cudaStream_t s) {
    // One block: the spin of block 0 delays every write of the input.
    produce<<<1, 256, 0, s>>>(buf, n, base, ns);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int enqueue_test_check(const float *buf, long long n, float expect_base, float scale,
                                  unsigned long long *errors, cudaStream_t s) {
    check<<<64, 256, 0, s>>>(buf, n, expect_base, scale, errors);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* "Compute": every block spins for `ns` nanoseconds (occupies the SMs it runs on). */
__global__ void compute(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" int enqueue_test_compute(unsigned long long ns, int blocks, cudaStream_t s) {
    compute<<<blocks, 128, 0, s>>>(ns);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
