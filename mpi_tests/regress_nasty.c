/*
 * regress_nasty: reproducers of four allreduce defects (all fixed; kept as regression tests) (each mode exits 0 when twohop behaves
 * as README.md promises, 1 otherwise; an alarm turns a hang into a failure).
 *
 *   segcount   commutative user op, rank 1 passes count = one full segment (262144 ints at the
 *              default coll_twohop_segment_bytes), every other rank one int more (erroneous in
 *              MPI). README: the call returns an error. Run over several nodes:
 *                run_mpi.sh -n 2 -v block:2 -- regress_nasty segcount
 *   timeout    rank 1 sleeps 4 s before an allreduce (then again before an MPI_Iallreduce on
 *              another communicator, waited for with MPI_Wait); with coll_twohop_timeout=1
 *              the waiting rank must get an error after about 1 s (it does on one node):
 *                run_mpi.sh -n 2 -v block:2 -m coll_twohop_timeout=1 -- regress_nasty timeout
 *   laterfail  on a fresh duplicate per round: a correct pipeline-size allreduce (user op,
 *              500000 ints), then an erroneous one (the last rank passes one int more). Nodes
 *              that reach the erroneous call first fail it and tell the others; the correct
 *              call must still succeed, exactly, on every rank (the failure belongs to the
 *              later call). 8 rounds:
 *                run_mpi.sh -n 4 -v block:2 -- regress_nasty laterfail
 *   zerostruct MPI_SUM over 3 doubles; rank 1 passes struct{3 x MPI_DOUBLE, 0 x MPI_INT}, whose
 *              type signature is that of 3 x MPI_DOUBLE. Exact result expected:
 *                run_mpi.sh -n 2 -m mpi_param_check=0 -- regress_nasty zerostruct
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "regress_nasty: FAIL: hang (no completion within 30 s)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void isum(void *in, void *io, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)io)[i] += ((int *)in)[i];
}

static int segcount(void) {
    const int n = rank == 1 ? 262144 : 262145;
    int *s = malloc(sizeof(int) * n), *r = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) s[i] = 1;
    MPI_Op op;
    MPI_Op_create(isum, 1, &op);
    int rc = MPI_Allreduce(s, r, n, MPI_INT, op, MPI_COMM_WORLD);
    printf("rank %d count %d: %s\n", rank, n, rc == MPI_SUCCESS ? "FAIL: success" : "error (ok)");
    free(s);
    free(r);
    return rc != MPI_SUCCESS;
}

static int timeout_mode(void) {
    int one = 1, sum = 0;
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* set-up done */
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
    if (rank == 1) sleep(4);
    double t = MPI_Wtime();
    int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    int ok = rank == 1 || (rc != MPI_SUCCESS && t < 3.0);
    printf("rank %d: rc %d after %.2f s%s\n", rank, rc, t,
           ok ? "" : ": FAIL: expected an error after about coll_twohop_timeout = 1 s");
    /* The same in MPI_Wait of an MPI_Iallreduce (the time inside MPI_Wait counts). */
    if (rank == 1) sleep(4);
    MPI_Request q;
    t = MPI_Wtime();
    rc = MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c, &q);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    t = MPI_Wtime() - t;
    const int nb_ok = rank == 1 || (rc != MPI_SUCCESS && t < 3.0);
    printf("rank %d: MPI_Iallreduce + MPI_Wait: rc %d after %.2f s%s\n", rank, rc, t,
           nb_ok ? "" : ": FAIL: expected an error after about coll_twohop_timeout = 1 s");
    MPI_Comm_free(&c);
    return ok && nb_ok;
}

static int zerostruct(void) {
    double s[3] = {1.0 + rank, 2.0, 4.0 * rank}, r[3] = {0, 0, 0};
    MPI_Datatype t = MPI_DOUBLE;
    int count = 3;
    if (rank == 1) {
        int bl[2] = {3, 0};
        MPI_Aint d[2] = {0, 24};
        MPI_Datatype ty[2] = {MPI_DOUBLE, MPI_INT};
        MPI_Type_create_struct(2, bl, d, ty, &t);
        MPI_Type_commit(&t);
        count = 1;
    }
    int rc = MPI_Allreduce(s, r, count, t, MPI_SUM, MPI_COMM_WORLD);
    double e[3] = {0, 0, 0};
    for (int k = 0; k < size; k++) e[0] += 1.0 + k, e[1] += 2.0, e[2] += 4.0 * k;
    const int ok = rc == MPI_SUCCESS && !memcmp(r, e, sizeof e);
    printf("rank %d: rc %d %s\n", rank, rc, ok ? "ok" : "FAIL: wrong result or error");
    return ok;
}

static int laterfail(void) {
    MPI_Op op;
    MPI_Op_create(isum, 1, &op);
    const int n = 500000;
    int *s = malloc(sizeof(int) * (n + 1)), *r = malloc(sizeof(int) * (n + 1));
    int ok = 1;
    for (int round = 0; round < 8; round++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        for (int i = 0; i < n; i++) s[i] = rank + i % 5;
        int rc = MPI_Allreduce(s, r, n, MPI_INT, op, c);
        for (int i = 0; i < n && rc == MPI_SUCCESS; i++) {
            if (r[i] != size * (size - 1) / 2 + size * (i % 5)) rc = -1;
        }
        if (rc != MPI_SUCCESS) {
            printf("rank %d round %d: FAIL: the correct call returned %d\n", rank, round, rc);
            ok = 0;
        }
        // The erroneous call: its error is expected (on every rank), not checked here.
        (void)MPI_Allreduce(s, r, rank == size - 1 ? 11 : 10, MPI_INT, op, c);
        MPI_Comm_free(&c);
    }
    free(s);
    free(r);
    MPI_Op_free(&op);
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    signal(SIGALRM, on_alarm);
    alarm(30);
    const char *mode = argc > 1 ? argv[1] : "";
    int ok;
    if (!strcmp(mode, "segcount")) ok = segcount();
    else if (!strcmp(mode, "timeout")) ok = timeout_mode();
    else if (!strcmp(mode, "zerostruct")) ok = zerostruct();
    else if (!strcmp(mode, "laterfail")) ok = laterfail();
    else {
        fprintf(stderr, "usage: regress_nasty segcount|timeout|laterfail|zerostruct\n");
        ok = 0;
    }
    fflush(stdout);
    int all_ok = 0;
    MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD); /* not allreduce */
    if (rank == 0) printf("regress_nasty %s: %s\n", mode, all_ok ? "PASS" : "FAIL");
    alarm(0);
    MPI_Finalize();
    return rank == 0 ? !all_ok : 0;
}
