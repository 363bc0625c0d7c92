/*
 * nccl_allreduce: NCCL's ncclAllReduce on the same GPUs, as the anchor of the multi-GPU
 * benchmark (scripts/gpu_check.sh runs it beside twohop in the same call). MPI only bootstraps
 * (ncclGetUniqueId is broadcast from rank 0); one rank per GPU (local rank mod device count).
 *
 * usage: nccl_allreduce [--max BYTES]    (default 1 GiB)
 * Float sum on device buffers from 8 B to BYTES (x4 steps, BYTES always included): each
 * iteration is one ncclAllReduce followed by cudaStreamSynchronize, timed with MPI_Wtime; the
 * slowest rank's time per iteration, median over iterations. busbw = bytes / time * 2(p-1)/p
 * (nccl-tests doc/PERFORMANCE.md). Output columns as device_allreduce bench.
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CK(c, ok)                                                                              \
    do {                                                                                       \
        if (!(ok)) {                                                                           \
            fprintf(stderr, "nccl_allreduce: %s failed\n", #c);                                \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                      \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    cudaSetDevice(lr && ndev ? atoi(lr) % ndev : 0);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t max_bytes = (size_t)1 << 30;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 0);
    }
    ncclUniqueId id;
    if (rank == 0) CK(ncclGetUniqueId, ncclGetUniqueId(&id) == ncclSuccess);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    CK(ncclCommInitRank, ncclCommInitRank(&comm, size, id, rank) == ncclSuccess);
    cudaStream_t st;
    CK(cudaStreamCreate, cudaStreamCreate(&st) == cudaSuccess);
    float *in, *out;
    CK(cudaMalloc, cudaMalloc((void **)&in, max_bytes) == cudaSuccess);
    CK(cudaMalloc, cudaMalloc((void **)&out, max_bytes) == cudaSuccess);
    cudaMemset(in, 0, max_bytes);
    if (rank == 0) {
        printf("# nccl_allreduce: %d ranks, float sum, NCCL %d\n", size, NCCL_VERSION_CODE);
        printf("%12s %12s %10s\n", "bytes", "median_us", "busbw_GBs");
    }
    for (size_t n = 8; n <= max_bytes; n = n * 4 > max_bytes && n < max_bytes ? max_bytes : n * 4) {
        const int iters = n <= (1 << 20) ? 50 : n <= (64 << 20) ? 20 : 8;
        double *t = malloc(iters * sizeof(double));
        for (int i = 0; i < 3 + iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            CK(ncclAllReduce, ncclAllReduce(in, out, n / 4, ncclFloat, ncclSum, comm, st) ==
                                  ncclSuccess);
            CK(cudaStreamSynchronize, cudaStreamSynchronize(st) == cudaSuccess);
            double dt = MPI_Wtime() - t0, worst;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (i >= 3) t[i - 3] = worst;
        }
        qsort(t, iters, sizeof(double), cmp_double);
        const double med = t[iters / 2];
        if (rank == 0) {
            printf("%12zu %12.1f %10.2f\n", n, med * 1e6, n / med * 2.0 * (size - 1) / size / 1e9);
        }
        free(t);
    }
    ncclCommDestroy(comm);
    cudaFree(in);
    cudaFree(out);
    MPI_Finalize();
    return 0;
}
