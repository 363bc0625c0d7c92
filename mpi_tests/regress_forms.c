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
 *                  Open MPI 4.1; not run on Open MPI 5.0, whose libnbc, which serves these
 *                  calls, crashes on them without twohop too)
 *   erroneous      MPI_Request_free and MPI_Cancel of an active MPI_Iallreduce return
 *                  MPI_ERR_REQUEST (as libnbc), and the call still completes; with twohop's
 *                  component serving the forms: a second MPI_Start of an active persistent
 *                  allreduce returns an error and the call still completes (it crashed in the
 *                  next MPI_Waitall), and a failed MPI_Iallreduce (counts that differ) raises
 *                  its error on the communicator's error handler, not MPI_COMM_WORLD's (Open
 *                  MPI 4.1 aborted the job under MPI_ERRORS_RETURN set on the communicator)
 *   local_start    starting a non-blocking or persistent collective is local (MPI-4.1 6.12):
 *                  on a fresh communicator rank 0 starts MPI_Iallreduce (or initialises a
 *                  persistent allreduce and starts it) and only then sends to the others,
 *                  which receive before they start theirs -- the start must not wait for the
 *                  communicator's set-up with the others (it did: a deadlock)
 *   local_queue    three MPI_Iallreduce calls on a fresh communicator before any rank can
 *                  finish its set-up, an MPI_Allreduce with a non-commutative user op (handed
 *                  back at once) between them, then a blocking MPI_Allreduce: all in order
 *   local_unused   a persistent allreduce initialised on a fresh communicator and freed
 *                  without a start, then the communicator freed
 *   local_cross    two fresh communicators, MPI_Iallreduce started on them in one order on
 *                  even ranks and in the other on odd ranks (legal: each communicator sees
 *                  its calls in one order), then MPI_Waitall
 *   start_order    two persistent allreduces A, B created on a fresh communicator, started B
 *                  then A, the set-up ending before A's start on some ranks only (they test
 *                  B for a while first): the calls must run in start order everywhere (A
 *                  and B were paired across ranks: wrong sums)
 *   big_item       the first call on a fresh communicator an MPI_Iallreduce of one 2 MiB
 *                  item (user op): handed back, a correct result (it failed: the set-up
 *                  found the item larger than the shared-memory slot after the start)
 *   freed_in_setup MPI_Iallreduce on a fresh communicator, MPI_Comm_free before MPI_Wait
 *                  (legal: freed once the call completes) while rank 0 holds the set-up back,
 *                  then a new communicator: the set-up's or the request's reference is the
 *                  last. (Its release destroys the module, which OBJ_RELEASE(m->comm) read
 *                  again afterwards: a crash under MALLOC_PERTURB_ seen once in CI inside
 *                  MPI_Comm_dup after `signature`; this scenario has not reproduced it.)
 *   fp_env         (x86; run first) twohop's proxy thread starts while the application runs
 *                  with flush-to-zero and denormals-are-zero, then the application goes back
 *                  to IEEE arithmetic; float sums of subnormals as MPI_Allreduce, as
 *                  MPI_Iallreduce + a sleep + MPI_Wait with rank 0 starting 100 ms late (the
 *                  proxy threads reduce), and as MPI_Iallreduce + an MPI_Test loop must give
 *                  the same bits, subnormals kept (the proxy reduced in the environment it
 *                  started with: some elements flushed)
 * With the MPI_T counters found (twohop loaded), the local_* calls must be served by twohop
 * (coll_twohop_nonblocking_calls / _persistent_starts), not handed back.
 * A SIGALRM watchdog (60 s) turns a hang into a failure. Exit 0 and "RESULT: PASS" when every
 * scenario passed on every rank.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <mpi.h>

#include "allreduce_init.h"
#include "twohop_pvars.h"

static int rank, size, bad;
static const char *scenario = "start";

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "regress_forms: WATCHDOG: hang in scenario ";
    ssize_t w = write(2, msg, sizeof msg - 1);
    w = write(2, scenario, strlen(scenario));
    w = write(2, "\n", 1);
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
    /* Open MPI 5.0's libnbc crashes (SIGSEGV in its progress) on this legal input itself,
     * with twohop excluded too (5.0.7, --mca coll tuned,basic,libnbc,self: the persistent form
     * at 2 ranks, both forms at 4), and twohop hands such calls to it: Open MPI 4.1 only. */
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION >= 5
    if (rank == 0) printf("regress_forms: signature: skipped (Open MPI 5.0's libnbc crashes on it)\n");
    return;
#endif
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
#ifdef TEST_ALLREDUCE_INIT
            rc = TEST_ALLREDUCE_INIT(in, out, cnt, t, MPI_MAX, c, MPI_INFO_NULL, &q);
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

static void freed_in_setup(void) {
    scenario = "freed_in_setup";
    for (int round = 0; round < 3; round++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c); /* fresh: its set-up starts with the first call */
        int in = rank + 1, out = 0;
        MPI_Request q;
        if (rank == 0) usleep(20000 * (round + 1)); /* the others' set-up waits for rank 0 */
        check(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, c, &q) == MPI_SUCCESS, "start");
        MPI_Comm_free(&c); /* the request and the set-up still hold it */
        check(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
        check(out == size * (size + 1) / 2, "value");
        MPI_Comm d; /* its creation runs progress, where a set-up may end and release c */
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        int one = 1, tot = 0;
        MPI_Allreduce(&one, &tot, 1, MPI_INT, MPI_SUM, d);
        check(tot == size, "later call");
        MPI_Comm_free(&d);
    }
}

static struct twohop_pvars pv;

static int handler_calls[2]; /* [0]: the communicator's handler, [1]: MPI_COMM_WORLD's */
static void on_comm(MPI_Comm *c, int *err, ...) { (void)c, (void)err, handler_calls[0]++; }
static void on_world(MPI_Comm *c, int *err, ...) { (void)c, (void)err, handler_calls[1]++; }

/* The erroneous cases twohop's component itself serves (see the header), on c (set up). */
static void erroneous_component(MPI_Comm c, int *in, int *out, int n) {
#ifdef TEST_ALLREDUCE_INIT
    MPI_Request p;
    check(TEST_ALLREDUCE_INIT(in, out, n, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &p) ==
              MPI_SUCCESS, "init");
    if (rank == 1) usleep(100000); /* rank 0's call stays in flight meanwhile */
    check(MPI_Start(&p) == MPI_SUCCESS, "start");
    if (rank == 0) {
        check(MPI_Start(&p) != MPI_SUCCESS, "a second MPI_Start of an active persistent "
              "request succeeded");
    }
    check(MPI_Wait(&p, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
    check(summed(out, n), "result");
    MPI_Request_free(&p);
#endif
    MPI_Errhandler eh[2];
    MPI_Comm_create_errhandler(on_comm, &eh[0]);
    MPI_Comm_create_errhandler(on_world, &eh[1]);
    MPI_Comm_set_errhandler(c, eh[0]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh[1]);
    MPI_Request q;
    const int rc = MPI_Iallreduce(in, out, rank == size - 1 ? n - 1 : n, MPI_INT, MPI_SUM, c, &q);
    const int wrc = rc == MPI_SUCCESS ? MPI_Wait(&q, MPI_STATUS_IGNORE) : rc;
    check(wrc != MPI_SUCCESS, "an MPI_Iallreduce with counts that differ succeeded");
    check(handler_calls[0] == 1 && handler_calls[1] == 0,
          "the failed MPI_Iallreduce's error was not raised (once) on its communicator's "
          "handler only");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh[0]);
    MPI_Errhandler_free(&eh[1]);
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
    if (pv.found && !pv.pmpi) { /* libnbc and the PMPI library's MPI hang on these */
        erroneous_component(c, in, out, N);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_free(&c);
}

/* Rank 0 tells every other rank it has started (after its start returned). */
static void token_after_start(void) {
    int tok = 7;
    if (rank == 0) {
        for (int p = 1; p < size; p++) MPI_Send(&tok, 1, MPI_INT, p, 99, MPI_COMM_WORLD);
    }
}
static void token_before_start(void) {
    int tok = 0;
    if (rank != 0) MPI_Recv(&tok, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void local_start(int persistent) {
    scenario = persistent ? "local_start(persistent)" : "local_start(non-blocking)";
    enum { N = 1000 };
    static int in[N], out[N];
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    fill(in, N);
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    MPI_Request r = MPI_REQUEST_NULL;
    token_before_start();
    if (!persistent) {
        check(MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, comm, &r) == MPI_SUCCESS, "start");
        token_after_start();
        check(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
        check(summed(out, N), "result");
    } else {
#ifdef TEST_ALLREDUCE_INIT
        check(TEST_ALLREDUCE_INIT(in, out, N, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &r) ==
                  MPI_SUCCESS, "init");
        token_after_start();
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < N; i++) in[i] = rank + i + k;
            memset(out, 0, sizeof out);
            check(MPI_Start(&r) == MPI_SUCCESS, "start");
            check(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
            int ok = 1;
            for (int i = 0; i < N; i++) ok &= out[i] == size * (i + k) + size * (size - 1) / 2;
            check(ok, "result");
        }
        MPI_Request_free(&r);
#else
        token_after_start();
#endif
    }
    const struct twohop_counts c1 = twohop_pvars_read(&pv);
    if (pv.found && !pv.pmpi) { /* the component (the PMPI library hands these calls on) */
        check(c1.fallback == c0.fallback, "handed back instead of served by twohop");
#ifdef TEST_ALLREDUCE_INIT
        const unsigned long long want = 3;
#else
        const unsigned long long want = 0;
#endif
        check(persistent ? c1.persistent - c0.persistent == want
                         : c1.nonblocking - c0.nonblocking == 1,
              "twohop's counter of the form did not count the calls");
    }
    MPI_Comm_free(&comm);
}

/* Non-commutative user op: inout = in (the lower rank's value wins), on ints. */
static void first_wins(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    memcpy(inout, in, (size_t)*len * sizeof(int));
}

static void local_queue(void) {
    scenario = "local_queue";
    enum { N = 5000, K = 3 };
    static int in[K][N], out[K][N], last[N];
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Op first;
    MPI_Op_create(first_wins, 0, &first);
    MPI_Request r[K];
    token_before_start();
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) in[k][i] = rank + i + k;
        check(MPI_Iallreduce(in[k], out[k], N, MPI_INT, MPI_SUM, comm, &r[k]) == MPI_SUCCESS,
              "start");
        if (k == 0) token_after_start();
        if (k == 1) { /* handed back at once: its traffic meets the others' pending set-up */
            int v = rank + 10, w = -1;
            check(MPI_Allreduce(&v, &w, 1, MPI_INT, first, comm) == MPI_SUCCESS, "user op");
            check(w == 10, "user op result");
        }
    }
    fill(in[0], N);
    check(MPI_Allreduce(in[0], last, N, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS, "blocking");
    check(summed(last, N), "blocking result");
    MPI_Status st[K]; /* not MPI_STATUSES_IGNORE: GCC 12 misreads MPICH's prototype */
    check(MPI_Waitall(K, r, st) == MPI_SUCCESS, "waitall");
    for (int k = 0; k < K; k++) {
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= out[k][i] == size * (i + k) + size * (size - 1) / 2;
        check(ok, "queued result");
    }
    MPI_Op_free(&first);
    MPI_Comm_free(&comm);
}

static void local_unused(void) {
    scenario = "local_unused";
#ifdef TEST_ALLREDUCE_INIT
    int in = rank, out = 0;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Request r;
    check(TEST_ALLREDUCE_INIT(&in, &out, 1, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &r) ==
              MPI_SUCCESS, "init");
    check(MPI_Request_free(&r) == MPI_SUCCESS, "free");
    MPI_Comm_free(&comm);
#endif
}

static void local_cross(void) {
    scenario = "local_cross";
    enum { N = 2000 };
    static int in[2][N], out[2][N];
    MPI_Comm comm[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[1]);
    MPI_Request r[2];
    for (int k = 0; k < 2; k++) {
        const int c = rank % 2 ? 1 - k : k;
        fill(in[c], N);
        check(MPI_Iallreduce(in[c], out[c], N, MPI_INT, MPI_SUM, comm[c], &r[c]) == MPI_SUCCESS,
              "start");
    }
    MPI_Status st[2]; /* not MPI_STATUSES_IGNORE: GCC 12 misreads MPICH's prototype */
    check(MPI_Waitall(2, r, st) == MPI_SUCCESS, "waitall");
    check(summed(out[0], N) && summed(out[1], N), "result");
    MPI_Comm_free(&comm[0]);
    MPI_Comm_free(&comm[1]);
}

static void start_order(void) {
    scenario = "start_order";
#ifdef TEST_ALLREDUCE_INIT
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    int sa = 1, sb = 1000, ra = -1, rb = -1;
    MPI_Request a, b;
    check(TEST_ALLREDUCE_INIT(&sa, &ra, 1, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &a) ==
              MPI_SUCCESS, "init a");
    check(TEST_ALLREDUCE_INIT(&sb, &rb, 1, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &b) ==
              MPI_SUCCESS, "init b");
    check(MPI_Start(&b) == MPI_SUCCESS, "start b");
    if (rank != 0) { /* progress here: these ranks' set-up ends before A starts */
        int done = 0;
        const double t0 = MPI_Wtime();
        while (!done && MPI_Wtime() - t0 < 0.5) MPI_Test(&b, &done, MPI_STATUS_IGNORE);
    }
    check(MPI_Start(&a) == MPI_SUCCESS, "start a");
    check(MPI_Wait(&a, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait a");
    check(MPI_Wait(&b, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait b");
    check(ra == size && rb == 1000 * size, "results (calls paired out of start order?)");
    MPI_Request_free(&a);
    MPI_Request_free(&b);
    MPI_Comm_free(&comm);
#endif
}

/* User op: element-wise int sum over a contiguous datatype of ints. */
static void int_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int size_bytes;
    MPI_Type_size(*dt, &size_bytes);
    const long n = (long)*len * size_bytes / (long)sizeof(int);
    for (long i = 0; i < n; i++) ((int *)inout)[i] += ((const int *)in)[i];
}

static void big_item(void) {
    scenario = "big_item";
    enum { N = 1 << 19 }; /* ints: one 2 MiB item */
    static int in[N], out[N];
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Datatype big;
    MPI_Type_contiguous(N, MPI_INT, &big);
    MPI_Type_commit(&big);
    MPI_Op op;
    MPI_Op_create(int_sum, 1, &op);
    fill(in, N);
    MPI_Request r;
    check(MPI_Iallreduce(in, out, 1, big, op, comm, &r) == MPI_SUCCESS, "start");
    check(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
    check(summed(out, N), "result");
    MPI_Op_free(&op);
    MPI_Type_free(&big);
    MPI_Comm_free(&comm);
}

#if defined(__SSE__)
static void fp_env(void) {
    scenario = "fp_env";
    enum { N = 4096 }; /* 16 KiB of floats: the pipeline path, shards reduced by their owners */
    static float in[N], out[3][N];
    MPI_Request r;
    /* twohop's proxy thread starts (first non-blocking call of the process) while the
     * application runs with flush-to-zero and denormals-are-zero; then the application goes
     * back to IEEE arithmetic */
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040); /* FTZ | DAZ */
    for (int i = 0; i < N; i++) in[i] = 1.0f;
    check(MPI_Iallreduce(in, out[0], N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r) == MPI_SUCCESS,
          "warm-up start");
    check(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "warm-up wait");
    _mm_setcsr(saved);
    for (int i = 0; i < N; i++) in[i] = 1.401298464e-45f * (float)(1 + i % 3); /* subnormals */
    MPI_Allreduce(in, out[0], N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    /* Rank 0 starts 100 ms late: the others' shards can be reduced only then, while their
     * application threads sleep, i.e. by their proxy threads. */
    if (rank == 0) usleep(100000);
    check(MPI_Iallreduce(in, out[1], N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r) == MPI_SUCCESS,
          "start");
    usleep(rank == 0 ? 200000 : 300000);
    check(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
    check(MPI_Iallreduce(in, out[2], N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r) == MPI_SUCCESS,
          "start");
    for (int done = 0; !done;) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    check(memcmp(out[0], out[1], sizeof(out[0])) == 0,
          "MPI_Iallreduce reduced while the application slept differs from MPI_Allreduce");
    check(memcmp(out[0], out[2], sizeof(out[0])) == 0,
          "MPI_Iallreduce with an MPI_Test loop differs from MPI_Allreduce");
    check(out[0][0] == 1.401298464e-45f * (float)size, "subnormal sums were not kept");
}
#endif

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    signal(SIGALRM, watchdog);
    alarm(60);
    twohop_pvars_open(&pv);
#if defined(__SSE__)
    fp_env(); /* first: its first non-blocking call starts twohop's proxy thread */
#endif
    idup(0);
    idup(1);
    signature();
    freed_in_setup();
    erroneous();
    local_start(0);
    local_start(1);
    local_queue();
    local_unused();
    local_cross();
    start_order();
    big_item();
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("regress_forms: np=%d: %d failure(s)\nRESULT: %s\n", size, all,
                          all ? "FAIL" : "PASS");
    twohop_pvars_close(&pv);
    MPI_Finalize();
    return all ? 1 : 0;
}
