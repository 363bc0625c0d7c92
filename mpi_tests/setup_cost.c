/*
 * setup_cost: what the first allreduce on a new communicator costs more than a later one (the
 * collective component's set-up: for twohop the set-up exchange, shared memory, endpoints).
 *
 * usage: setup_cost [-r REPEATS] [-n COUNT]
 *   REPEATS times (default 20): MPI_Comm_dup(MPI_COMM_WORLD), first MPI_Allreduce of COUNT
 *   floats (default 2, 8 B), a second one, MPI_Comm_free. Prints the median over repeats of
 *   the slowest rank's first-call time, second-call time, their difference, and dup + free.
 *        setup_cost --check
 *   Communicators created and freed in turns (duplicates of MPI_COMM_WORLD, which may take over
 *   a freed one's shared memory, splits into halves and odd/even ranks, which may not), each
 *   used for exact allreduces of a latency-path and a pipeline size, some freed while others
 *   live: every result must be exact, and the MPI_T counters must show twohop served every
 *   call (none fell back). Exit 0 on success.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twohop_pvars.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof(double), cmp);
    return v[n / 2];
}

/* Exact allreduces on c: n ints, element i of rank r = r * 7 + i % 11 + salt. 0 when right. */
static int use(MPI_Comm c, int n, int salt) {
    int r, p, bad = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &p);
    int *in = malloc(n * sizeof(int)), *out = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) in[i] = r * 7 + i % 11 + salt;
    if (MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, c) != MPI_SUCCESS) bad = 1;
    for (int i = 0; i < n && !bad; i++) {
        if (out[i] != 7 * p * (p - 1) / 2 + p * (i % 11 + salt)) bad = 1;
    }
    free(in);
    free(out);
    return bad;
}

static int check(void) {
    int rank, bad = 0, calls = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct twohop_pvars pv;
    if (!twohop_pvars_open(&pv)) {
        if (rank == 0) printf("setup_cost --check: twohop not loaded (%s)\n", pv.why);
        return 1;
    }
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    const int sizes[3] = {3, 1000, 700001}; // latency path, medium, several pipeline segments
    MPI_Comm keep = MPI_COMM_NULL;
    for (int round = 0; round < 12; round++) {
        MPI_Comm c;
        if (round % 4 == 3) {
            MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &c); // other members: no reuse
        } else if (round % 4 == 2) {
            MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &c); // same processes, reversed order
        } else {
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
        }
        int csize;
        MPI_Comm_size(c, &csize); // single-rank communicators are coll/self's, not twohop's
        for (int k = 0; k < 3; k++, calls += csize > 1) {
            bad |= use(c, sizes[(k + round) % 3], round * 3 + k);
        }
        if (round == 5) { // one stays alive across later set-ups
            keep = c;
            continue;
        }
        if (keep != MPI_COMM_NULL && round > 5) {
            bad |= use(keep, sizes[round % 3], round);
            calls++;
        }
        MPI_Comm_free(&c);
    }
    if (keep != MPI_COMM_NULL) {
        bad |= use(keep, 700001, 99);
        calls++;
        MPI_Comm_free(&keep);
    }
    const struct twohop_counts c1 = twohop_pvars_read(&pv);
    if (c1.served - c0.served != (unsigned long long)calls || c1.fallback != c0.fallback) {
        printf("rank %d: twohop served %llu of %d calls, fell back %llu\n", rank,
               c1.served - c0.served, calls, c1.fallback - c0.fallback);
        bad = 1;
    }
    twohop_pvars_close(&pv);
    int total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("setup_cost --check: %s\n", total ? "FAIL" : "OK");
    return total ? 1 : 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, reps = 20, count = 2;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && !strcmp(argv[1], "--check")) {
        const int rc = check();
        MPI_Finalize();
        return rc;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-n")) count = atoi(argv[i + 1]);
    }
    if (reps < 1) reps = 1;
    float *in = calloc((size_t)count, sizeof(float)), *out = calloc((size_t)count, sizeof(float));
    double *first = malloc(reps * sizeof(double)), *second = malloc(reps * sizeof(double));
    double *rest = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        double t1 = MPI_Wtime();
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, c);
        double t2 = MPI_Wtime();
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, c);
        double t3 = MPI_Wtime();
        MPI_Comm_free(&c);
        double t4 = MPI_Wtime();
        double mine[3] = {t2 - t1, t3 - t2, (t1 - t0) + (t4 - t3)}, worst[3];
        MPI_Allreduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        first[r] = worst[0];
        second[r] = worst[1];
        rest[r] = worst[2];
    }
    double d[1024];
    int n = reps < 1024 ? reps : 1024;
    for (int r = 0; r < n; r++) d[r] = first[r] - second[r];
    const double f = median(first, reps), s = median(second, reps), x = median(d, n),
                 o = median(rest, reps);
    if (rank == 0) {
        printf("setup_cost: %d ranks, %d B: first allreduce %.1f us, second %.1f us, first - second "
               "%.1f us (median of %d), dup + free %.1f us\n",
               size, count * 4, f * 1e6, s * 1e6, x * 1e6, reps, o * 1e6);
    }
    free(in);
    free(out);
    free(first);
    free(second);
    free(rest);
    MPI_Finalize();
    return 0;
}
