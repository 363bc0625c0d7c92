/*
 * thread_multiple: MPI_THREAD_MULTIPLE with two threads, each running allreduces on its own
 * communicator (a dup and a split of MPI_COMM_WORLD) at the same time. Over virtual nodes this
 * drives the shared UCX worker from both threads at once. Checks exact integer results and,
 * through the MPI_T counters, that twohop served every call.
 *
 * Usage: thread_multiple [ITERATIONS [FORM]]   (default 200, blocking). FORM: blocking,
 * nonblocking (MPI_Iallreduce + MPI_Wait) or persistent (each thread's two persistent
 * allreduces, one per size, started in turn and freed at the end): the requests of both threads
 * come from twohop's one request pool, and complete from either thread's MPI progress. The
 * form's own counter must count every call. Exit 0 on success.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allreduce_init.h"
#include "twohop_pvars.h"

#define MAXN 70000

static MPI_Comm comms[2];
static int iterations = 200;
static long errors[2];
enum form { BLOCKING, NONBLOCKING, PERSISTENT };
static enum form form = BLOCKING;

/* One allreduce of n ints on comms[t] in the chosen form (pers: the thread's persistent
 * request of that size). */
static int one_call(int t, const int *in, int *out, int n, MPI_Request *pers) {
    MPI_Request req;
    int rc;
    switch (form) {
    case NONBLOCKING:
        rc = MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comms[t], &req);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(&req, MPI_STATUS_IGNORE);
    case PERSISTENT:
        rc = MPI_Start(pers);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(pers, MPI_STATUS_IGNORE);
    default: return MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, comms[t]);
    }
}

/* One thread: alternate a latency-path and a pipeline-size allreduce on comms[t]. */
static void *worker(void *arg) {
    const int t = *(const int *)arg;
    int r, p;
    MPI_Comm_rank(comms[t], &r);
    MPI_Comm_size(comms[t], &p);
    int *in = malloc(MAXN * sizeof(int)), *out = malloc(MAXN * sizeof(int));
    MPI_Request pers[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; /* 3 and MAXN ints */
    if (form == PERSISTENT) {
        for (int k = 0; k < 2; ++k) {
#ifdef TEST_ALLREDUCE_INIT
            const int rc = TEST_ALLREDUCE_INIT(in, out, k ? MAXN : 3, MPI_INT, MPI_SUM, comms[t],
                                               MPI_INFO_NULL, &pers[k]);
#else
            const int rc = MPI_ERR_OTHER; /* no persistent allreduce in this MPI */
#endif
            if (rc != MPI_SUCCESS) {
                errors[t]++;
                return NULL;
            }
        }
    }
    for (int it = 0; it < iterations; ++it) {
        const int n = (it % 2) ? MAXN : 3;
        for (int i = 0; i < n; ++i) in[i] = r * 3 + i % 7 + t;
        if (one_call(t, in, out, n, &pers[it % 2]) != MPI_SUCCESS) {
            errors[t]++;
            continue;
        }
        for (int i = 0; i < n; ++i) {
            if (out[i] != 3 * p * (p - 1) / 2 + p * (i % 7 + t)) {
                errors[t]++;
                break;
            }
        }
    }
    for (int k = 0; k < 2; ++k) {
        if (pers[k] != MPI_REQUEST_NULL) MPI_Request_free(&pers[k]);
    }
    free(in);
    free(out);
    return NULL;
}

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1) iterations = atoi(argv[1]);
    if (argc > 2) {
        if (strcmp(argv[2], "nonblocking") == 0) form = NONBLOCKING;
        else if (strcmp(argv[2], "persistent") == 0) form = PERSISTENT;
        else if (strcmp(argv[2], "blocking") != 0) {
            if (rank == 0) printf("thread_multiple: unknown form %s\n", argv[2]);
            MPI_Finalize();
            return 1;
        }
    }
    if (provided != MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("thread_multiple: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    struct twohop_pvars pv;
    if (!twohop_pvars_open(&pv)) {
        if (rank == 0) printf("thread_multiple: twohop counters missing: %s\n", pv.why);
        MPI_Finalize();
        return 1;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[0]);
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &comms[1]); /* reversed order */
    const struct twohop_counts before = twohop_pvars_read(&pv);
    pthread_t th[2];
    int ids[2] = {0, 1};
    for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, worker, &ids[i]);
    for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
    const struct twohop_counts after = twohop_pvars_read(&pv);
    long bad = errors[0] + errors[1], total;
    const unsigned long long served = form == NONBLOCKING  ? after.nonblocking - before.nonblocking
                                      : form == PERSISTENT ? after.persistent - before.persistent
                                                           : after.served - before.served;
    long missing = served != 2ull * (unsigned long long)iterations;
    long local[2] = {bad, missing}, global[2];
    MPI_Allreduce(local, global, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    total = global[0] + global[1];
    if (rank == 0) {
        printf("thread_multiple: %d iterations x 2 threads: %ld wrong, %ld ranks where twohop "
               "did not serve every call (rank 0 served %llu)\n",
               iterations, global[0], global[1], served);
        printf("RESULT: %s\n", total ? "FAIL" : "PASS");
    }
    twohop_pvars_close(&pv);
    MPI_Comm_free(&comms[0]);
    MPI_Comm_free(&comms[1]);
    MPI_Finalize();
    return total ? 1 : 0;
}
