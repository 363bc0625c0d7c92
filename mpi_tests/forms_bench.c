/*
 * forms_bench: the time of one allreduce in its three forms, in the same run and on the same
 * buffers: MPI_Allreduce, MPI_Iallreduce + MPI_Wait, and a persistent allreduce's MPI_Start +
 * MPI_Wait (MPI_Allreduce_init, or Open MPI 4.1's MPIX_Allreduce_init, created once per size).
 * MPI_FLOAT sum of host buffers, 8 B .. MAX bytes (x2 steps). Per size and form: the median over
 * `iters` rounds (forms interleaved round by round, a barrier before each call) of the slowest
 * rank's time, and the non-blocking and persistent times over the blocking one.
 *   usage: forms_bench [MAX_BYTES] [ITERS]     (defaults 16 MiB, 200 up to 64 KiB, 40 above)
 * Prints one line per size: bytes blocking_us nonblocking_us persistent_us nb_ratio p_ratio.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "allreduce_init.h"

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The slowest rank's time of one call of form f (0 blocking, 1 non-blocking, 2 persistent). */
static double one(int f, float *in, float *out, int n, MPI_Request *preq) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (f == 0) {
        MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (f == 1) {
        MPI_Request r;
        MPI_Iallreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        MPI_Start(preq);
        MPI_Wait(preq, MPI_STATUS_IGNORE);
    }
    double dt = MPI_Wtime() - t0, worst;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    const size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 16u << 20;
    const int iters_arg = argc > 2 ? atoi(argv[2]) : 0;
    float *in = malloc(max_bytes + 4), *out = malloc(max_bytes + 4);
    for (size_t i = 0; i < max_bytes / 4 + 1; i++) in[i] = (float)(i % 7);
    if (rank == 0) {
        printf("# forms_bench np=%d MPI_FLOAT sum, host buffers; median of the slowest rank's "
               "time (us)\n# bytes blocking nonblocking persistent nonblocking/blocking "
               "persistent/blocking\n", p);
    }
    for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
        const int n = (int)(bytes / 4) > 0 ? (int)(bytes / 4) : 1;
        const int iters = iters_arg > 0 ? iters_arg : bytes <= 65536 ? 200 : 40;
        MPI_Request preq = MPI_REQUEST_NULL;
        int forms = 2;
#ifdef TEST_ALLREDUCE_INIT
        TEST_ALLREDUCE_INIT(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                             &preq);
        forms = 3;
#endif
        double *t[3];
        for (int f = 0; f < 3; f++) t[f] = calloc((size_t)iters, sizeof(double));
        for (int w = 0; w < 5; w++) { /* warm-up: set-up, page faults */
            for (int f = 0; f < forms; f++) (void)one(f, in, out, n, &preq);
        }
        for (int i = 0; i < iters; i++) {
            for (int f = 0; f < forms; f++) t[f][i] = one(f, in, out, n, &preq);
        }
        double med[3] = {0, 0, 0};
        for (int f = 0; f < forms; f++) {
            qsort(t[f], (size_t)iters, sizeof(double), cmp);
            med[f] = t[f][iters / 2] * 1e6;
            free(t[f]);
        }
        if (preq != MPI_REQUEST_NULL) MPI_Request_free(&preq);
        if (rank == 0) {
            printf("%-10zu %10.2f %10.2f %10.2f %8.2f %8.2f\n", bytes, med[0], med[1], med[2],
                   med[1] / med[0], forms == 3 ? med[2] / med[0] : 0.0);
            fflush(stdout);
        }
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
