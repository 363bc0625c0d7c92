/*
 * robustness: MPI programs for the robustness regression tests (mpi_tests/robustness.sh runs
 * them). Each mode checks exact results and, through the MPI_T counters, who served the calls.
 *
 *   layouts        commutative user op on one type signature (2 doubles per item) with a
 *                  different layout per rank: contiguous, vector (holes), resized with a
 *                  negative lower bound; latency-path and multi-segment sizes, in place and
 *                  not; holes must stay untouched; twohop must serve every call
 *   intrinsic      (run with --mca mpi_param_check 0) MPI_SUM over doubles and MPI_MINLOC over
 *                  MPI_DOUBLE_INT with per-rank datatypes AND counts of the same signature
 *                  (MPI_DOUBLE x 2K, contiguous(2) x K, vector x K); twohop must serve
 *   countmismatch  user op, same signature, different count per rank (contiguous(4) x K vs
 *                  contiguous(2) x 2K, erroneous in MPI): with MPI_ERRORS_RETURN every rank must
 *                  get an error (no hang, no silent result) of one class, MPI_ERR_TRUNCATE, on
 *                  every rank, a second call on that communicator an error at once, and a
 *                  fresh communicator must work afterwards
 *   simple         a few MPI_INT sums with value checks; prints "WRONG" on a wrong value
 *   killsetup      rank 1 kills itself (SIGKILL) before its first allreduce; the others call it
 *   crash          one allreduce (hop 2 over UCX with virtual nodes), then rank 0 dereferences
 *                  a null pointer: the crash report must be Open MPI's alone
 *   manycomms N    N duplicates of MPI_COMM_WORLD alive at once, a 2.4 MB allreduce on each
 *                  (exact results whether twohop served or fell back)
 *   idle_wait      (run with coll_twohop_timeout 2) rank 0 starts MPI_Iallreduce on two
 *                  communicators, tests them for 0.1 s, computes 2.5 s without MPI calls, then
 *                  waits; the other ranks start theirs 2.7 s late: a slow but correct job, which
 *                  must end with the exact sums (the timeout counted rank 0's computing as a
 *                  wait without progress and failed the call)
 *   deferred_fallback (run with an agreed parameter that differs between the ranks, so every
 *                  set-up ends in a fallback) on a fresh communicator, MPI_Iallreduce (its
 *                  set-up starts in the background), then a second call -- a persistent
 *                  allreduce initialised and started, or another MPI_Iallreduce -- made before
 *                  the first call's MPI_Wait on even ranks and after it on odd ranks (which
 *                  start 200 ms late), so before or after each rank saw its set-up end;
 *                  then a blocking MPI_Allreduce and another MPI_Iallreduce. Each call must
 *                  end alike on every rank (an error, or the exact sum), and the last two with
 *                  the sum. (The second call failed on
 *                  even ranks and went to the previous component on odd ones, which then
 *                  waited forever.)
 * Exit status 0 on success; failures are printed as "FAIL ...".
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allreduce_init.h"
#include "twohop_pvars.h"

static int rank, size;
static int failures;
static struct twohop_pvars pv;

#define FAIL(...)                                                                              \
    do {                                                                                       \
        printf("FAIL rank %d: ", rank);                                                        \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
        failures++;                                                                            \
    } while (0)

/* ------------------------------------------------------------ per-rank layouts */

/* A layout of one item = 2 doubles: where they sit and the item's extent. */
struct layout {
    const char *name;
    MPI_Datatype dt;
    long off[2]; /* bytes from the item's start */
    long extent, lb;
};
static struct layout layouts[4]; /* [3]: contiguous(4), countmismatch only */

static void make_layouts(void) {
    MPI_Datatype v;
    layouts[0] = (struct layout){"contiguous(2)", MPI_DATATYPE_NULL, {0, 8}, 16, 0};
    MPI_Type_contiguous(2, MPI_DOUBLE, &layouts[0].dt);
    layouts[1] = (struct layout){"vector(2,1,2)", MPI_DATATYPE_NULL, {0, 16}, 24, 0};
    MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &layouts[1].dt);
    layouts[2] = (struct layout){"resized(vector(2,1,3),lb=-8,extent=40)", MPI_DATATYPE_NULL,
                                 {0, 24}, 40, -8};
    MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &v);
    MPI_Type_create_resized(v, -8, 40, &layouts[2].dt);
    MPI_Type_free(&v);
    for (int i = 0; i < 3; i++) MPI_Type_commit(&layouts[i].dt);
    layouts[3] = (struct layout){"contiguous(4)", MPI_DATATYPE_NULL, {0, 16}, 32, 0};
    MPI_Type_contiguous(4, MPI_DOUBLE, &layouts[3].dt);
    MPI_Type_commit(&layouts[3].dt);
}

static const struct layout *layout_of(MPI_Datatype dt) {
    for (int i = 0; i < 4; i++) {
        if (layouts[i].dt == dt) return &layouts[i];
    }
    return NULL;
}

/* User op: sum of the two doubles of each item, in whatever layout the datatype says. */
static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const struct layout *l = layout_of(*dt);
    if (!l) {
        printf("FAIL rank %d: user op called with an unknown datatype\n", rank);
        abort();
    }
    for (int i = 0; i < *len; i++) {
        for (int k = 0; k < 2; k++) {
            const long o = i * l->extent + l->off[k];
            *(double *)((char *)inout + o) += *(const double *)((const char *)in + o);
        }
    }
}

/* Buffer for `count` items of l: returns the MPI buffer pointer; *mem is what to free. */
static char *alloc_items(const struct layout *l, long count, char **mem) {
    const long bytes = count * l->extent + 64;
    *mem = malloc(bytes);
    memset(*mem, 0x5A, bytes); /* holes keep this byte */
    return *mem - l->lb;       /* item 0 starts at buf + lb */
}

static double value(int r, long j) { return (double)((r + 1) * 1000 + (j % 977)); }

static void check_counts(const char *what, struct twohop_counts a, unsigned long long served,
                         unsigned long long fallback) {
    struct twohop_counts b = twohop_pvars_read(&pv);
    if (b.served - a.served != served || b.fallback - a.fallback != fallback) {
        FAIL("%s: twohop served %llu (want %llu), fell back %llu (want %llu)", what,
             b.served - a.served, served, b.fallback - a.fallback, fallback);
    }
}

static int mode_layouts(void) {
    MPI_Op op;
    MPI_Op_create(pair_sum, 1, &op);
    const struct layout *l = &layouts[rank % 3];
    const long counts[] = {1, 3, 1000, 70001};
    for (int c = 0; c < 4; c++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            const long n = counts[c];
            char *smem, *rmem;
            char *sbuf = alloc_items(l, n, &smem), *rbuf = alloc_items(l, n, &rmem);
            char *in = inplace ? rbuf : sbuf;
            for (long i = 0; i < n; i++) {
                for (int k = 0; k < 2; k++) {
                    *(double *)(in + i * l->extent + l->off[k]) = value(rank, 2 * i + k);
                }
            }
            struct twohop_counts before = twohop_pvars_read(&pv);
            int rc = MPI_Allreduce(inplace ? MPI_IN_PLACE : sbuf, rbuf, (int)n, l->dt, op,
                                   MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) FAIL("layouts %s count %ld: MPI error %d", l->name, n, rc);
            long bad = 0;
            for (long i = 0; i < n; i++) {
                for (int k = 0; k < 2; k++) {
                    double want = 0;
                    for (int r = 0; r < size; r++) want += value(r, 2 * i + k);
                    if (*(double *)(rbuf + i * l->extent + l->off[k]) != want) bad++;
                }
                /* holes between and around the two doubles */
                for (long o = l->lb; o < l->lb + l->extent; o++) { /* from the item's start */
                    if ((o >= l->off[0] && o < l->off[0] + 8) ||
                        (o >= l->off[1] && o < l->off[1] + 8)) {
                        continue;
                    }
                    if ((unsigned char)rbuf[i * l->extent + o] != 0x5A) bad++;
                }
            }
            if (bad) {
                FAIL("layouts %s count %ld inplace %d: %ld wrong bytes/values", l->name, n,
                     inplace, bad);
            }
            check_counts("layouts", before, 1, 0);
            free(smem);
            free(rmem);
        }
    }
    MPI_Op_free(&op);
    return 0;
}

static int mode_intrinsic(void) {
    /* SUM over doubles: the signature is 2K doubles on every rank. */
    const long K = 50001;
    MPI_Datatype dt = MPI_DOUBLE;
    long count = 2 * K;
    const struct layout *l = NULL;
    if (rank % 3 != 0) {
        l = &layouts[rank % 3 == 1 ? 0 : 1];
        dt = l->dt;
        count = K;
    }
    char *mem;
    struct layout flat = {"MPI_DOUBLE", MPI_DOUBLE, {0, 8}, 16, 0};
    const struct layout *ll = l ? l : &flat;
    char *buf = alloc_items(ll, K, &mem);
    for (long i = 0; i < K; i++) {
        for (int k = 0; k < 2; k++) *(double *)(buf + i * ll->extent + ll->off[k]) = value(rank, 2 * i + k);
    }
    struct twohop_counts before = twohop_pvars_read(&pv);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) FAIL("intrinsic sum: MPI error %d", rc);
    long bad = 0;
    for (long i = 0; i < K; i++) {
        for (int k = 0; k < 2; k++) {
            double want = 0;
            for (int r = 0; r < size; r++) want += value(r, 2 * i + k);
            if (*(double *)(buf + i * ll->extent + ll->off[k]) != want) bad++;
        }
    }
    if (bad) FAIL("intrinsic sum with datatype %s: %ld wrong values", ll->name, bad);
    check_counts("intrinsic sum", before, 1, 0);
    free(mem);

    /* MINLOC over MPI_DOUBLE_INT (an element type with padding): K pairs per rank. */
    struct di {
        double v;
        int i;
    };
    MPI_Datatype pair2;
    MPI_Type_contiguous(2, MPI_DOUBLE_INT, &pair2);
    MPI_Type_commit(&pair2);
    const long P = 4001; /* pairs; odd so contiguous(2) cannot hold them: use 2 x 2000 + ... */
    const long n2 = (P / 2) * 2;
    struct di *x = malloc(n2 * sizeof(*x));
    for (long i = 0; i < n2; i++) {
        x[i].v = (double)((i * 7 + rank * 13) % 29);
        x[i].i = rank;
    }
    before = twohop_pvars_read(&pv);
    rc = rank % 2 ? MPI_Allreduce(MPI_IN_PLACE, x, (int)(n2 / 2), pair2, MPI_MINLOC, MPI_COMM_WORLD)
                  : MPI_Allreduce(MPI_IN_PLACE, x, (int)n2, MPI_DOUBLE_INT, MPI_MINLOC,
                                  MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) FAIL("intrinsic minloc: MPI error %d", rc);
    bad = 0;
    for (long i = 0; i < n2; i++) {
        double best = 1e300;
        int who = -1;
        for (int r = 0; r < size; r++) {
            double v = (double)((i * 7 + r * 13) % 29);
            if (v < best) {
                best = v;
                who = r;
            }
        }
        if (x[i].v != best || x[i].i != who) bad++;
    }
    if (bad) FAIL("intrinsic minloc (%s): %ld wrong pairs", rank % 2 ? "contiguous(2,MPI_DOUBLE_INT)" : "MPI_DOUBLE_INT", bad);
    check_counts("intrinsic minloc", before, 1, 0);
    free(x);
    MPI_Type_free(&pair2);
    return 0;
}

static int mode_countmismatch(void) {
    MPI_Op op;
    MPI_Op_create(pair_sum, 1, &op);
    MPI_Datatype c4 = layouts[3].dt;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    const long K = 3;
    double buf[4 * 3] = {0};
    int rc = rank == 0 ? MPI_Allreduce(MPI_IN_PLACE, buf, (int)K, c4, op, comm)
                       : MPI_Allreduce(MPI_IN_PLACE, buf, (int)(2 * K), layouts[0].dt, op, comm);
    if (rc == MPI_SUCCESS) FAIL("countmismatch: the erroneous call succeeded");
    /* One error class on every rank: the ranks that found the mismatch and those told of it
     * by a peer (its failure word, or a hop-2 abort message) alike. */
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    int *classes = malloc(size * sizeof(int));
    MPI_Allgather(&cls, 1, MPI_INT, classes, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < size; r++) {
        if (classes[r] != MPI_ERR_TRUNCATE) {
            FAIL("countmismatch: rank %d got error class %d, not MPI_ERR_TRUNCATE (%d)", r,
                 classes[r], MPI_ERR_TRUNCATE);
        }
    }
    free(classes);
    rc = MPI_Allreduce(MPI_IN_PLACE, buf, 2, layouts[0].dt, op, comm);
    if (rc == MPI_SUCCESS) FAIL("countmismatch: the communicator still served after a failure");
    MPI_Comm_free(&comm);
    /* A fresh communicator works. */
    MPI_Comm fresh;
    MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
    int v = rank + 1, sum = 0;
    rc = MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, fresh);
    if (rc != MPI_SUCCESS || sum != size * (size + 1) / 2) {
        FAIL("countmismatch: fresh communicator: rc %d sum %d", rc, sum);
    }
    MPI_Comm_free(&fresh);
    MPI_Op_free(&op);
    return 0;
}

static int mode_simple(void) {
    for (int n = 1; n <= 4096; n *= 8) {
        int *in = malloc(n * sizeof(int)), *out = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) in[i] = rank + i;
        MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++) {
            if (out[i] != size * (size - 1) / 2 + size * i) {
                printf("WRONG rank %d: count %d element %d: %d\n", rank, n, i, out[i]);
                failures++;
                break;
            }
        }
        free(in);
        free(out);
    }
    return 0;
}

static int mode_killsetup(void) {
    if (rank == 1) raise(SIGKILL);
    return mode_simple();
}

static int mode_crash(void) {
    mode_simple();
    if (rank == 0) {
        volatile int *null = NULL;
        *null = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}

static int mode_manycomms(int n) {
    MPI_Comm *comms = malloc(n * sizeof(MPI_Comm));
    const long count = 300000;
    double *in = malloc(count * sizeof(double)), *out = malloc(count * sizeof(double));
    for (long i = 0; i < count; i++) in[i] = value(rank, i);
    struct twohop_counts before = twohop_pvars_read(&pv);
    for (int c = 0; c < n; c++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
        MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, comms[c]);
        for (long i = 0; i < count; i++) {
            double want = 0;
            for (int r = 0; r < size; r++) want += value(r, i);
            if (out[i] != want) {
                FAIL("manycomms: communicator %d element %ld", c, i);
                break;
            }
        }
    }
    struct twohop_counts after = twohop_pvars_read(&pv);
    if (after.served + after.fallback - before.served - before.fallback != (unsigned long long)n) {
        FAIL("manycomms: %llu calls counted, want %d",
             after.served + after.fallback - before.served - before.fallback, n);
    }
    if (rank == 0) {
        printf("manycomms: %d communicators: twohop served %llu, fell back %llu\n", n,
               after.served - before.served, after.fallback - before.fallback);
    }
    for (int c = 0; c < n; c++) MPI_Comm_free(&comms[c]);
    free(comms);
    free(in);
    free(out);
    return 0;
}

/* 0: success with the exact sum of rank + i, 1: an MPI error, 2: a wrong sum. */
static int outcome(int rc, const int *out, int n) {
    if (rc != MPI_SUCCESS) return 1;
    for (int i = 0; i < n; i++) {
        if (out[i] != size * (size - 1) / 2 + size * i) return 2;
    }
    return 0;
}

/* The calls' outcomes must be one per call on every rank, never a wrong sum; `want_ok`: the
 * calls from that index on must succeed. */
static void same_everywhere(const char *what, const int *got, int calls, int want_ok) {
    int *all = malloc((size_t)size * calls * sizeof(int));
    MPI_Allgather(got, calls, MPI_INT, all, calls, MPI_INT, MPI_COMM_WORLD);
    for (int k = 0; k < calls; k++) {
        for (int r = 0; r < size; r++) {
            const int o = all[r * calls + k];
            if (o == 2) FAIL("%s: call %d: wrong sum on rank %d", what, k + 1, r);
            if (o != all[k]) {
                FAIL("%s: call %d: rank %d %s, rank 0 %s", what, k + 1, r,
                     o ? "failed" : "succeeded", all[k] ? "failed" : "succeeded");
            }
            if (k >= want_ok && o != 0) FAIL("%s: call %d failed on rank %d", what, k + 1, r);
        }
    }
    if (rank == 0) {
        printf("deferred_fallback %s:", what);
        for (int k = 0; k < calls; k++) printf(" call %d %s", k + 1, all[k] ? "error" : "sum");
        printf("\n");
    }
    free(all);
}

static double now_s(void) { return MPI_Wtime(); }

static int mode_idle_wait(void) {
    enum { N = 1000 };
    static int in[N], out[2][N];
    for (int i = 0; i < N; i++) in[i] = rank + i;
    MPI_Comm c[2] = {MPI_COMM_WORLD, MPI_COMM_NULL};
    MPI_Comm_dup(MPI_COMM_WORLD, &c[1]);
    for (int k = 0; k < 2; k++) {
        MPI_Comm_set_errhandler(c[k], MPI_ERRORS_RETURN);
        MPI_Allreduce(in, out[k], N, MPI_INT, MPI_SUM, c[k]); /* set-up */
    }
    MPI_Request q[2];
    int rc[2] = {MPI_SUCCESS, MPI_SUCCESS};
    if (rank != 0) usleep(2700000); /* late: computing */
    for (int k = 0; k < 2; k++) {
        rc[k] = MPI_Iallreduce(in, out[k], N, MPI_INT, MPI_SUM, c[k], &q[k]);
    }
    if (rank == 0) {
        int flag;
        for (const double t0 = now_s(); now_s() - t0 < 0.1;) {
            for (int k = 0; k < 2; k++) {
                if (q[k] != MPI_REQUEST_NULL) MPI_Test(&q[k], &flag, MPI_STATUS_IGNORE);
            }
        }
        usleep(2500000); /* computing, no MPI call */
    }
    for (int k = 0; k < 2; k++) {
        if (rc[k] == MPI_SUCCESS) rc[k] = MPI_Wait(&q[k], MPI_STATUS_IGNORE);
        if (outcome(rc[k], out[k], N) != 0) {
            FAIL("idle_wait: communicator %d: %s", k, rc[k] ? "an error" : "a wrong sum");
        }
    }
    MPI_Comm_free(&c[1]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    return 0;
}

static int mode_deferred_fallback(void) {
    enum { N = 1000 };
    static int in[N], out[4][N];
    for (int i = 0; i < N; i++) in[i] = rank + i;
    for (int persistent = 0; persistent < 2; persistent++) {
#ifndef TEST_ALLREDUCE_INIT
        if (persistent) break;
#endif
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        int got[4];
        MPI_Request first, second = MPI_REQUEST_NULL;
        /* Odd ranks late: the even ranks' set-up cannot end before their second call. */
        if (rank % 2) usleep(200000);
        int rc1 = MPI_Iallreduce(in, out[0], N, MPI_INT, MPI_SUM, c, &first);
        int rc2 = MPI_SUCCESS;
        for (int pass = 0; pass < 2; pass++) {
            if (pass == rank % 2) { /* even ranks: before the first call's wait; odd: after */
#ifdef TEST_ALLREDUCE_INIT
                if (persistent) {
                    rc2 = TEST_ALLREDUCE_INIT(in, out[1], N, MPI_INT, MPI_SUM, c, MPI_INFO_NULL,
                                              &second);
                    if (rc2 == MPI_SUCCESS) rc2 = MPI_Start(&second);
                }
#endif
                if (!persistent) rc2 = MPI_Iallreduce(in, out[1], N, MPI_INT, MPI_SUM, c, &second);
            } else if (rc1 == MPI_SUCCESS) {
                rc1 = MPI_Wait(&first, MPI_STATUS_IGNORE);
            }
        }
        if (rc2 == MPI_SUCCESS) rc2 = MPI_Wait(&second, MPI_STATUS_IGNORE);
        if (persistent && second != MPI_REQUEST_NULL) MPI_Request_free(&second);
        got[0] = outcome(rc1, out[0], N);
        got[1] = outcome(rc2, out[1], N);
        got[2] = outcome(MPI_Allreduce(in, out[2], N, MPI_INT, MPI_SUM, c), out[2], N);
        MPI_Request last;
        int rc4 = MPI_Iallreduce(in, out[3], N, MPI_INT, MPI_SUM, c, &last);
        if (rc4 == MPI_SUCCESS) rc4 = MPI_Wait(&last, MPI_STATUS_IGNORE);
        got[3] = outcome(rc4, out[3], N);
        same_everywhere(persistent ? "persistent" : "non-blocking", got, 4, 2);
        MPI_Comm_free(&c);
    }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "simple";
    make_layouts();
    twohop_pvars_open(&pv);
    if (!strcmp(mode, "layouts")) {
        mode_layouts();
    } else if (!strcmp(mode, "intrinsic")) {
        mode_intrinsic();
    } else if (!strcmp(mode, "countmismatch")) {
        mode_countmismatch();
    } else if (!strcmp(mode, "simple")) {
        mode_simple();
    } else if (!strcmp(mode, "killsetup")) {
        mode_killsetup();
    } else if (!strcmp(mode, "crash")) {
        mode_crash();
    } else if (!strcmp(mode, "idle_wait")) {
        mode_idle_wait();
    } else if (!strcmp(mode, "deferred_fallback")) {
        mode_deferred_fallback();
    } else if (!strcmp(mode, "manycomms")) {
        mode_manycomms(argc > 2 ? atoi(argv[2]) : 12);
    } else {
        FAIL("unknown mode %s", mode);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("robustness %s: %s (%d failures)\n", mode, total ? "FAIL" : "OK", total);
    twohop_pvars_close(&pv);
    for (int i = 0; i < 4; i++) MPI_Type_free(&layouts[i].dt);
    MPI_Finalize();
    return total ? 1 : 0;
}
