/*
 * bfloat16 allreduce with any MPI (include/twohop_half.h, header only): the datatype and the
 * SUM op come from the header; where twohop serves the communicator its own kernels reduce
 * them (host or GPU), elsewhere MPI calls the op's host function -- the same arithmetic.
 * Build:  mpicc -I<twohop>/include allreduce_bf16.c -ldl -o allreduce_bf16
 * Run:    mpirun -np 4 --mca coll twohop,tuned,basic,libnbc,self ./allreduce_bf16
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "twohop_half.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    enum { N = 1000 };
    uint16_t grad[N]; /* bfloat16 bit patterns */
    for (int i = 0; i < N; i++) grad[i] = twohop_f32_to_bf16((float)(rank + 1));

    MPI_Datatype bf16 = twohop_type_bfloat16();
    MPI_Op sum = twohop_half_op(MPI_SUM, bf16);
    int rc = MPI_Allreduce(MPI_IN_PLACE, grad, N, bf16, sum, MPI_COMM_WORLD);

    const int expected = size * (size + 1) / 2; /* exact in bfloat16 up to 256 */
    if (rank == 0) {
        printf("rc %d, grad[0] = %g (expected %d)\n", rc, twohop_bf16_to_f32(grad[0]), expected);
    }
    const int ok = rc == MPI_SUCCESS && twohop_bf16_to_f32(grad[N - 1]) == (float)expected;
    MPI_Finalize();
    return ok ? 0 : 1;
}
