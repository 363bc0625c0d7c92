/*
 * regress_forms: reproducers of defects found with nasty inputs in the non-blocking and
 * persistent forms (each hung before its fix; exact results checked).
 *   idup_blocking  MPI_Comm_idup of a set-up communicator, then a blocking MPI_Allreduce on it
 *                  before MPI_Wait: Open MPI's idup issues its own MPI_Iallreduce calls from
 *                  its progress engine, i.e. inside twohop's blocking call (self-deadlock on
 *                  the engine lock, then calls matched out of order)
 *   idup_fresh     the same on a fresh communicator with an MPI_Iallreduce: whether the idup's
 *                  calls came before or after twohop's set-up differed between ranks
 *   signature      4 MPI_INT MAX as MPI_INT x 4 on rank 0 and contiguous(4, MPI_INT) x 1
 *                  elsewhere (one type signature), non-blocking and persistent: routed by
 *                  count and datatype instead of the signature (needs mpi_param_check=0 on
 *                  Open MPI 4.1)
 *   erroneous      MPI_Request_free and MPI_Cancel of an active MPI_Iallreduce return
 *                  MPI_ERR_REQUEST (as libnbc), and the call still completes
 * A SIGALRM watchdog (60 s) turns a hang into a failure. Exit 0 and "RESULT: PASS" when every
 * scenario passed on every rank.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#if MPI_VERSION < 4 && defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

static int rank, size, bad;
static const char *scenario = "start";

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "regress_forms: WATCHDOG: hang\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(124);
}

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "regress_forms: rank %d: %s: FAIL %s\n", rank, scenario, what);
        bad++;
    }
}

/* n ints, element i = rank + i; the sum over ranks is size*i + size*(size-1)/2. */
static void fill(int *v, int n) {
    for (int i = 0; i < n; i++) v[i] = rank + i;
}
static int summed(const int *v, int n) {
    for (int i = 0; i < n; i++) {
        if (v[i] != size * i + size * (size - 1) / 2) return 0;
    }
    return 1;
}

static void idup(int fresh) {
    scenario = fresh ? "idup_fresh" : "idup_blocking";
    enum { N = 1000 };
    static int in[N], out[N];
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (!fresh) {
        fill(in, N);
        MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, c); /* set-up */
    }
    for (int it = 0; it < 5; it++) {
        MPI_Comm nc;
        MPI_Request q[2];
        MPI_Status sts[2]; /* not MPI_STATUSES_IGNORE: GCC 12 misreads MPICH's definition */
        MPI_Comm_idup(c, &nc, &q[0]);
        fill(in, N);
        memset(out, 0, sizeof out);
        if (fresh) {
            MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, c, &q[1]);
            MPI_Waitall(2, q, sts);
        } else {
            MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, c);
            MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        }
        check(summed(out, N), "result");
        int one = 1, n = 0;
        MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, nc);
        check(n == size, "new communicator");
        MPI_Comm_free(&nc);
        if (fresh) break;
    }
    MPI_Comm_free(&c);
}

static void signature(void) {
    scenario = "signature";
    MPI_Datatype c4;
    MPI_Type_contiguous(4, MPI_INT, &c4);
    MPI_Type_commit(&c4);
    for (int form = 0; form < 2; form++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c); /* fresh: no set-up yet */
        int in[4], out[4] = {0, 0, 0, 0};
        for (int i = 0; i < 4; i++) in[i] = rank * 10 + i;
        const int cnt = rank == 0 ? 4 : 1;
        MPI_Datatype t = rank == 0 ? MPI_INT : c4;
        MPI_Request q = MPI_REQUEST_NULL;
        int rc;
        if (form == 0) {
            rc = MPI_Iallreduce(in, out, cnt, t, MPI_MAX, c, &q);
        } else {
#if MPI_VERSION >= 4
            rc = MPI_Allreduce_init(in, out, cnt, t, MPI_MAX, c, MPI_INFO_NULL, &q);
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
            rc = MPIX_Allreduce_init(in, out, cnt, t, MPI_MAX, c, MPI_INFO_NULL, &q);
#else
            rc = MPI_Iallreduce(in, out, cnt, t, MPI_MAX, c, &q);
#endif
            if (rc == MPI_SUCCESS && form == 1) rc = MPI_Start(&q);
        }
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        check(rc == MPI_SUCCESS, "call");
        for (int i = 0; i < 4; i++) check(out[i] == (size - 1) * 10 + i, "value");
        if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
        /* And a later call on the same communicator still matches. */
        int s = 1, tot = 0;
        MPI_Allreduce(&s, &tot, 1, MPI_INT, MPI_SUM, c);
        check(tot == size, "later call");
        MPI_Comm_free(&c);
    }
    MPI_Type_free(&c4);
}

static void erroneous(void) {
    scenario = "erroneous";
    enum { N = 300000 };
    static int in[N], out[N];
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    fill(in, N);
    MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, c); /* set-up */
    if (rank == 1) usleep(100000); /* rank 0's call stays in flight meanwhile */
    MPI_Request q;
    MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, c, &q);
    if (rank == 0) {
        MPI_Request keep = q;
        check(MPI_Request_free(&keep) != MPI_SUCCESS, "MPI_Request_free of an active request "
              "succeeded");
        check(MPI_Cancel(&q) != MPI_SUCCESS, "MPI_Cancel of an active request succeeded");
    }
    check(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
    check(summed(out, N), "result");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_free(&c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    signal(SIGALRM, watchdog);
    alarm(60);
    idup(0);
    idup(1);
    signature();
    erroneous();
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("regress_forms: np=%d: %d failure(s)\nRESULT: %s\n", size, all,
                          all ? "FAIL" : "PASS");
    MPI_Finalize();
    return all ? 1 : 0;
}
