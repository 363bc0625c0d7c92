/*
 * thread_comms: MPI_THREAD_MULTIPLE with several threads, each repeatedly creating its own
 * communicator, allreducing on it and freeing it. Communicator creation is collective, so every
 * thread dups from its own parent (made in order by the main thread before the threads start):
 * thread t on every rank only ever meets thread t of the other ranks, which is deadlock-free.
 * Each round runs latency-path and multi-segment sizes (SUM and MAX on int, exact checks), so
 * twohop's per-communicator set-up, its shared-memory segments and, over virtual nodes, the
 * process's one UCX worker are driven from all threads at once. The MPI_T counters must show
 * that twohop served every call and fell back on none.
 *
 * Usage: thread_comms [THREADS [ROUNDS [BIG_COUNT]]]   (defaults 4, 6, 70000). Exit 0 on success.
 * Run with a small coll_twohop_segment_bytes (e.g. 65536) so BIG_COUNT ints span segments.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "twohop_pvars.h"

#define MAX_THREADS 16

static int nthreads = 4, rounds = 6, big = 70000;
static MPI_Comm parents[MAX_THREADS];
static long errors[MAX_THREADS];
static long calls[MAX_THREADS];

/* Value rank r contributes at index i in round it of thread t. */
static int value(int r, int i, int it, int t) { return r * 5 + i % 11 + it + 3 * t; }

/* One allreduce on comm; checks every element; returns 0 when exact. */
static int check_one(MPI_Comm comm, MPI_Op op, int n, int it, int t, int *in, int *out) {
    int r, p;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &p);
    for (int i = 0; i < n; ++i) in[i] = value(r, i, it, t);
    for (int i = 0; i < n; ++i) out[i] = -1;
    if (MPI_Allreduce(in, out, n, MPI_INT, op, comm) != MPI_SUCCESS) return 1;
    for (int i = 0; i < n; ++i) {
        const int base = i % 11 + it + 3 * t;
        const int want = op == MPI_SUM ? 5 * p * (p - 1) / 2 + p * base : 5 * (p - 1) + base;
        if (out[i] != want) return 1;
    }
    return 0;
}

/* Thread t: ROUNDS times dup parents[t], allreduce several sizes on the dup, free it. */
static void *worker(void *arg) {
    const int t = *(const int *)arg;
    const int counts[] = {1, 3, 1000, big};
    const int ncounts = (int)(sizeof counts / sizeof counts[0]);
    int *in = malloc((size_t)big * sizeof(int)), *out = malloc((size_t)big * sizeof(int));
    for (int it = 0; it < rounds; ++it) {
        MPI_Comm comm;
        if (MPI_Comm_dup(parents[t], &comm) != MPI_SUCCESS) {
            errors[t]++;
            continue;
        }
        for (int c = 0; c < ncounts; ++c) {
            const MPI_Op op = (c + it) % 2 ? MPI_MAX : MPI_SUM;
            errors[t] += check_one(comm, op, counts[c], it, t, in, out);
            calls[t]++;
        }
        MPI_Comm_free(&comm);
    }
    free(in);
    free(out);
    return NULL;
}

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1) nthreads = atoi(argv[1]);
    if (argc > 2) rounds = atoi(argv[2]);
    if (argc > 3) big = atoi(argv[3]);
    if (nthreads < 1 || nthreads > MAX_THREADS || rounds < 1 || big < 1) {
        if (rank == 0) printf("thread_comms: bad arguments\n");
        MPI_Finalize();
        return 2;
    }
    if (provided != MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("thread_comms: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    struct twohop_pvars pv;
    if (!twohop_pvars_open(&pv)) {
        if (rank == 0) printf("thread_comms: twohop counters missing: %s\n", pv.why);
        MPI_Finalize();
        return 1;
    }
    /* Parents in the same order on every rank (collective calls from one thread). */
    for (int t = 0; t < nthreads; ++t) MPI_Comm_dup(MPI_COMM_WORLD, &parents[t]);

    const struct twohop_counts before = twohop_pvars_read(&pv);
    pthread_t th[MAX_THREADS];
    int ids[MAX_THREADS];
    for (int t = 0; t < nthreads; ++t) {
        ids[t] = t;
        pthread_create(&th[t], NULL, worker, &ids[t]);
    }
    for (int t = 0; t < nthreads; ++t) pthread_join(th[t], NULL);
    const struct twohop_counts after = twohop_pvars_read(&pv);

    long bad = 0, made = 0;
    for (int t = 0; t < nthreads; ++t) {
        bad += errors[t];
        made += calls[t];
    }
    const unsigned long long served = after.served - before.served;
    const unsigned long long fell = after.fallback - before.fallback;
    long not_served = served != (unsigned long long)made || fell != 0;
    long local[2] = {bad, not_served}, global[2];
    MPI_Allreduce(local, global, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const long total = global[0] + global[1];
    if (rank == 0) {
        printf("thread_comms: %d threads x %d rounds (dup, %d allreduces, free): %ld wrong, "
               "%ld ranks where twohop did not serve every call (rank 0: %ld calls, served %llu, "
               "fell back %llu)\n",
               nthreads, rounds, 4, global[0], global[1], made, served, fell);
        printf("RESULT: %s\n", total ? "FAIL" : "PASS");
    }
    twohop_pvars_close(&pv);
    for (int t = 0; t < nthreads; ++t) MPI_Comm_free(&parents[t]);
    MPI_Finalize();
    return total ? 1 : 0;
}
