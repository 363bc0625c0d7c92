/*
 * Stream-ordered allreduce with twohop (include/twohop.h): a kernel produces the input on a
 * stream, the allreduce is enqueued behind it, and the host never waits for the GPU until it
 * wants the result. Build (Open MPI + CUDA):
 *   mpicc -I<twohop>/include -I/usr/local/cuda/include allreduce_enqueue.c \
 *         -L/usr/local/cuda/lib64 -lcudart -ldl -o allreduce_enqueue
 * Run with twohop selected, e.g.  mpirun -np 4 --mca coll twohop,tuned,basic,libnbc,self ...
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "twohop.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int n = 1 << 20;
    float *grad;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMalloc((void **)&grad, n * sizeof(float));

    /* ... kernels that compute grad on `stream` ... (here: every element = rank) */
    float *host = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) host[i] = (float)rank;
    cudaMemcpyAsync(grad, host, n * sizeof(float), cudaMemcpyHostToDevice, stream);

    /* Returns at once where twohop can keep it on the stream; in place, like MPI_Allreduce. */
    int rc = twohop_allreduce_enqueue(MPI_IN_PLACE, grad, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                      stream);

    /* ... kernels that read grad on `stream` ... */
    cudaMemcpyAsync(host, grad, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        printf("rc %d, grad[0] = %g (expected %g)\n", rc, host[0], size * (size - 1) / 2.0);
    }
    free(host);
    cudaFree(grad);
    cudaStreamDestroy(stream);
    MPI_Finalize();
    return rc == MPI_SUCCESS ? 0 : 1;
}
