/*
 * async_progress: proves that twohop's proxy thread advances non-blocking allreduces while the
 * application makes no MPI call (coll_twohop_async_progress).
 *
 * Each rank starts MPI_Iallreduce (MPI_SUM of `count` ints, several pipeline segments), then
 * sleeps without calling MPI (usleep: the cores are free) and looks at its receive buffer
 * directly, before MPI_Wait: with asynchronous progress the whole result is already there;
 * without it (coll_twohop_async_progress 0) a multi-segment call cannot have finished, since
 * nothing advanced it. MPI_Wait then completes the call and the result is checked exactly.
 *   usage: async_progress on|off [count] [sleep_ms]
 * Exit status 0 and "RESULT: PASS" on rank 0 when every rank saw what `on`/`off` predicts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    const int on = argc > 1 && !strcmp(argv[1], "on");
    const int count = argc > 2 ? atoi(argv[2]) : 1 << 20;
    const int sleep_ms = argc > 3 ? atoi(argv[3]) : 500;
    int *in = malloc(sizeof(int) * (size_t)count);
    volatile int *out = malloc(sizeof(int) * (size_t)count);
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* set-up */
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < count; i++) {
            in[i] = (rank + 1) * (i % 97 + round);
            out[i] = -1;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Request req;
        MPI_Iallreduce(in, (int *)out, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        usleep((useconds_t)sleep_ms * 1000);
        /* The receive buffer before MPI_Wait: complete only if something advanced the call. */
        const int tri = p * (p + 1) / 2;
        int ready = 1;
        for (int i = 0; i < count && ready; i++) ready = out[i] == tri * (i % 97 + round);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        for (int i = 0; i < count; i++) bad += out[i] != tri * (i % 97 + round);
        if (ready != on) {
            fprintf(stderr, "async_progress: rank %d round %d: result %s before MPI_Wait with "
                    "asynchronous progress %s\n", rank, round, ready ? "complete" : "incomplete",
                    on ? "on" : "off");
            bad++;
        }
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("async_progress: np=%d count=%d progress %s: %d failure(s)\nRESULT: %s\n", p,
               count, on ? "on" : "off", all, all ? "FAIL" : "PASS");
    }
    free(in);
    free((void *)out);
    MPI_Finalize();
    return all ? 1 : 0;
}
