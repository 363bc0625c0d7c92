/*
 * iallreduce_multi: many non-blocking and persistent allreduces in flight at once.
 *
 * Communicators: MPI_COMM_WORLD, a duplicate, the reversed order, (np >= 4) the halves of
 * an even/odd split, and three more duplicates (more than the 4 idle communicators the engine
 * keeps registered: they leave the registry and come back). Each is first used by one
 * blocking call (twohop's set-up is blocking and collective; see docs/design.md). Then, on
 * every rank, checked exactly (integer sums):
 *   outstanding  K = 4 MPI_Iallreduce per communicator in flight on all communicators at once,
 *                sizes mixing the latency path and several pipeline segments; even ranks start
 *                them communicator by communicator, odd ranks in the reverse communicator order
 *                (legal for non-blocking collectives, a deadlock for a blocking engine);
 *                completed with MPI_Waitall (world), an MPI_Waitany loop (dup), an MPI_Test
 *                loop (reversed), MPI_Wait newest first (halves)
 *   interleaved  a blocking MPI_Allreduce on a communicator with iallreduces queued before it
 *                (it completes after them), and one on another communicator meanwhile
 *   persistent   one persistent allreduce per communicator (MPI_Allreduce_init, or Open MPI
 *                4.1's MPIX_Allreduce_init), started 6 times with new data each time, with
 *                MPI_Startall over all communicators and MPI_Waitall; freed at the end
 *   inplace      MPI_IN_PLACE in both forms
 *   pvars        (--expect twohop) coll_twohop_nonblocking_calls and _persistent_starts moved by
 *                exactly the calls made
 * Exit status 0 and "RESULT: PASS" on rank 0 when every check passed on every rank.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "matrix_driver.h"
#include "twohop_pvars.h"

#define K 4
#define MAXC 8

static const int counts[K] = {3, 1000, 70000, 300001}; /* ints: latency path .. 5 segments */
static int failures;

static void check(bool ok, const char *what, int ci, int k) {
    if (!ok) {
        int r;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        fprintf(stderr, "iallreduce_multi: rank %d: FAIL %s (comm %d, request %d)\n", r, what,
                ci, k);
        failures++;
    }
}

/* Input of rank `r` for call `tag`, element i: small integers, exact in int sums. */
static int value(int r, int tag, long i) { return (int)((r * 31 + tag * 7 + i) % 1000); }

/* Expected sum over the communicator's ranks (world ranks listed in wr[]). */
static bool verify(const int *out, long n, const int *wr, int p, int tag) {
    for (long i = 0; i < n; i++) {
        long want = 0;
        for (int q = 0; q < p; q++) want += value(wr[q], tag, i);
        if (out[i] != (int)want) return false;
    }
    return true;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    int wrank, wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    bool expect = argc > 2 && !strcmp(argv[1], "--expect") && !strcmp(argv[2], "twohop");
    struct twohop_pvars pv;
    bool have_pv = twohop_pvars_open(&pv);
    if (expect && !have_pv) {
        if (wrank == 0) fprintf(stderr, "iallreduce_multi: %s\n", pv.why);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    MPI_Comm comms[MAXC];
    int nc = 0;
    comms[nc++] = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[nc++]);
    MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - wrank, &comms[nc++]);
    if (wsize >= 4) MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &comms[nc++]);
    /* More communicators than the engine keeps registered while idle (4): they leave its
     * registry between rounds and come back with their next call. */
    for (int d = 0; d < 3; d++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[nc++]);
    int p[MAXC], *wr[MAXC];
    for (int c = 0; c < nc; c++) {
        MPI_Comm_size(comms[c], &p[c]);
        wr[c] = malloc(sizeof(int) * (size_t)p[c]);
        MPI_Allgather(&wrank, 1, MPI_INT, wr[c], 1, MPI_INT, comms[c]);
        int one = 1, sum = 0; /* set-up by a blocking call */
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comms[c]);
        check(sum == p[c], "warm-up sum", c, 0);
    }
    struct twohop_counts c0 = twohop_pvars_read(&pv);
    unsigned long long nb_calls = 0, starts = 0;
    /* Statuses (not MPI_STATUSES_IGNORE: GCC 12 misreads MPICH's definition of it). */
    MPI_Status sts[MAXC > K ? MAXC : K];

    int *in[MAXC][K], *out[MAXC][K];
    for (int c = 0; c < nc; c++) {
        for (int k = 0; k < K; k++) {
            in[c][k] = malloc(sizeof(int) * (size_t)counts[k]);
            out[c][k] = malloc(sizeof(int) * (size_t)counts[k]);
        }
    }
    /* ---- outstanding: K per communicator, communicator order by rank parity ---- */
    for (int round = 0; round < 2; round++) {
        MPI_Request req[MAXC][K];
        for (int j = 0; j < nc; j++) {
            int c = wrank % 2 == 0 ? j : nc - 1 - j;
            for (int k = 0; k < K; k++) {
                int tag = round * 100 + c * 10 + k;
                bool inplace = (k + round) % 2 == 1;
                for (long i = 0; i < counts[k]; i++) {
                    (inplace ? out : in)[c][k][i] = value(wrank, tag, i);
                }
                MPI_Iallreduce(inplace ? MPI_IN_PLACE : in[c][k], out[c][k], counts[k], MPI_INT,
                               MPI_SUM, comms[c], &req[c][k]);
                nb_calls++;
            }
        }
        for (int c = 0; c < nc; c++) {
            if (c == 0) {
                MPI_Waitall(K, req[c], sts);
            } else if (c == 1) {
                for (int left = K; left > 0; left--) {
                    int idx;
                    MPI_Waitany(K, req[c], &idx, MPI_STATUS_IGNORE);
                    check(idx != MPI_UNDEFINED, "waitany index", c, idx);
                }
            } else if (c == 2) {
                int flag = 0;
                while (!flag) MPI_Testall(K, req[c], &flag, sts);
            } else {
                for (int k = K - 1; k >= 0; k--) MPI_Wait(&req[c][k], MPI_STATUS_IGNORE);
            }
            for (int k = 0; k < K; k++) {
                check(req[c][k] == MPI_REQUEST_NULL, "request released", c, k);
                check(verify(out[c][k], counts[k], wr[c], p[c], round * 100 + c * 10 + k),
                      "outstanding result", c, k);
            }
        }
    }
    /* ---- interleaved: blocking calls behind queued ones, on the same and another comm ---- */
    {
        MPI_Request req[2];
        for (int k = 0; k < 2; k++) {
            for (long i = 0; i < counts[k + 2]; i++) in[0][k + 2][i] = value(wrank, 300 + k, i);
            MPI_Iallreduce(in[0][k + 2], out[0][k + 2], counts[k + 2], MPI_INT, MPI_SUM,
                           comms[0], &req[k]);
            nb_calls++;
        }
        for (long i = 0; i < counts[1]; i++) in[1][1][i] = value(wrank, 310, i);
        MPI_Allreduce(in[1][1], out[1][1], counts[1], MPI_INT, MPI_SUM, comms[1]);
        check(verify(out[1][1], counts[1], wr[1], p[1], 310), "blocking on another comm", 1, 1);
        for (long i = 0; i < counts[1]; i++) in[0][1][i] = value(wrank, 320, i);
        MPI_Allreduce(in[0][1], out[0][1], counts[1], MPI_INT, MPI_SUM, comms[0]);
        check(verify(out[0][1], counts[1], wr[0], p[0], 320), "blocking behind queued", 0, 1);
        MPI_Waitall(2, req, sts);
        for (int k = 0; k < 2; k++) {
            check(verify(out[0][k + 2], counts[k + 2], wr[0], p[0], 300 + k),
                  "queued before blocking", 0, k + 2);
        }
    }
    /* ---- persistent: new data per start, Startall across communicators ---- */
#ifdef MATRIX_ALLREDUCE_INIT
    {
        MPI_Request preq[MAXC];
        const int k = 2; /* 70000 ints: pipeline */
        for (int c = 0; c < nc; c++) {
            bool inplace = c % 2 == 1;
            MATRIX_ALLREDUCE_INIT(inplace ? MPI_IN_PLACE : in[c][k], out[c][k], counts[k],
                                  MPI_INT, MPI_SUM, comms[c], MPI_INFO_NULL, &preq[c]);
        }
        for (int it = 0; it < 6; it++) {
            for (int c = 0; c < nc; c++) {
                bool inplace = c % 2 == 1;
                for (long i = 0; i < counts[k]; i++) {
                    (inplace ? out : in)[c][k][i] = value(wrank, 500 + it * 10 + c, i);
                }
            }
            if (it % 2 == 0) {
                MPI_Startall(nc, preq);
                MPI_Waitall(nc, preq, sts);
            } else {
                for (int c = 0; c < nc; c++) MPI_Start(&preq[c]);
                for (int c = nc - 1; c >= 0; c--) MPI_Wait(&preq[c], MPI_STATUS_IGNORE);
            }
            starts += (unsigned long long)nc;
            for (int c = 0; c < nc; c++) {
                check(preq[c] != MPI_REQUEST_NULL, "persistent request kept", c, it);
                check(verify(out[c][k], counts[k], wr[c], p[c], 500 + it * 10 + c),
                      "persistent result", c, it);
            }
        }
        for (int c = 0; c < nc; c++) MPI_Request_free(&preq[c]);
    }
#endif
    struct twohop_counts c1 = twohop_pvars_read(&pv);
    if (expect) {
        check(c1.nonblocking - c0.nonblocking == nb_calls, "pvar nonblocking_calls", -1, -1);
        check(c1.persistent - c0.persistent == starts, "pvar persistent_starts", -1, -1);
        check(c1.fallback == c0.fallback, "pvar fallback_calls unchanged", -1, -1);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0) {
        printf("iallreduce_multi: np=%d comms=%d nonblocking=%llu persistent starts=%llu "
               "(per rank): %d failure(s)\nRESULT: %s\n", wsize, nc, nb_calls, starts, all,
               all ? "FAIL" : "PASS");
    }
    for (int c = 0; c < nc; c++) {
        for (int k = 0; k < K; k++) {
            free(in[c][k]);
            free(out[c][k]);
        }
        free(wr[c]);
        if (c > 0) MPI_Comm_free(&comms[c]);
    }
    if (have_pv) twohop_pvars_close(&pv);
    MPI_Finalize();
    return all ? 1 : 0;
}
