/*
 * staged_forms: non-blocking and persistent allreduces on buffers the host must not touch,
 * completed through every function of the MPI_Wait/MPI_Test family.
 *
 * The buffers are PROT_NONE mappings from each start to its completion: with
 * coll_twohop_test_poisoned_memory=1 (component; TWOHOP_TEST_POISONED_MEMORY=1 for the PMPI
 * library, which run_mpi.sh sets from the same -m option) twohop treats them as a memory kind
 * only its copy functions may touch, as it treats device memory: any other access faults.
 * Scenarios (every rank, MPI_SUM of N ints, exact results checked after each completion):
 *   local_start  rank 0 starts MPI_Iallreduce, then sends rank 1 a message that rank 1
 *                receives *before* starting its own: the start must return without waiting
 *                for the peers (a start that waits for them deadlocks here).
 *   complete_*   K requests outstanding (plus a point-to-point pair in the same arrays),
 *                completed by MPI_Wait, an MPI_Test loop, MPI_Waitall, an MPI_Testall loop,
 *                MPI_Waitany, MPI_Testany, MPI_Waitsome, MPI_Testsome, and
 *                MPI_Request_get_status followed by MPI_Wait.
 *   free_active  MPI_Request_free of an active MPI_Iallreduce is refused (erroneous in MPI) and
 *                the request stays valid.
 *   interleave   two calls in flight whose receive buffers interleave (a vector of every other
 *                int, at offsets 0 and 1 of one mapping; a user op): each call's copy-back must
 *                write its type map only, not the other's results; the datatype is freed while
 *                they are in flight.
 *   errors       (MPI_ERRORS_RETURN) MPI_Waitall over a staged call and a receive that fails
 *                (truncation): the call's result still arrives, through that MPI_Waitall or a
 *                later MPI_Wait, whichever the MPI completes it in.
 *   threads      (MPI_THREAD_MULTIPLE) two threads, each on its own communicator, complete
 *                staged calls at once: a handle the MPI hands out again while the other thread
 *                finishes must not match that thread's entry.
 *   persistent   (MPI_Allreduce_init / MPIX_Allreduce_init) 3 starts with new data, completed
 *                by MPI_Wait and by MPI_Startall + MPI_Waitall, then MPI_Request_free; a
 *                second MPI_Start of an active request is refused (erroneous in MPI) and the
 *                call in flight keeps its input and result.
 *   usage: staged_forms [--no-persistent] [--threads] [--expect-twohop]
 *          --no-persistent: skip the persistent scenario (for the PMPI library under an MPI
 *          whose persistent allreduce it does not wrap, Open MPI's MPIX_ one); --threads: only
 *          the threads scenario, under MPI_THREAD_MULTIPLE (the others run under MPI_Init);
 *          --expect-twohop: twohop's MPI_T counter of non-blocking calls must have counted
 *          every MPI_Iallreduce of local_start and complete_* (the component served them, no
 *          fallback)
 * Exit status 0 and "staged_forms: OK" on rank 0 when every rank passed.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mpi.h>

#include "allreduce_init.h"
#include "twohop_pvars.h"

#define N 3000 /* ints: 12000 bytes, more than the latency path's slot at 2+ ranks */
#define K 3

static int rank, size, failures;

static void check(int ok, const char *what, int i) {
    if (!ok) {
        printf("FAIL rank %d: %s (%d)\n", rank, what, i);
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
}

/* One page-aligned mapping per buffer; poison(): PROT_NONE, open(): readable and writable. */
typedef struct {
    int *p;
    size_t bytes;
} buf;

static buf make(void) {
    buf b;
    b.bytes = ((N * sizeof(int) + 4095) / 4096) * 4096;
    b.p = mmap(NULL, b.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.p == MAP_FAILED) MPI_Abort(MPI_COMM_WORLD, 2);
    return b;
}
static void poison(buf b) { mprotect(b.p, b.bytes, PROT_NONE); }
static void open_buf(buf b) { mprotect(b.p, b.bytes, PROT_READ | PROT_WRITE); }

static void fill(buf s, buf r, int salt) {
    open_buf(s);
    open_buf(r);
    for (int i = 0; i < N; i++) {
        s.p[i] = rank * 7 + i % 11 + salt;
        r.p[i] = -1;
    }
    poison(s);
    poison(r);
}

/* Opens r and checks the sum of fill(.., salt) over the ranks. */
static void verify(buf r, int salt, const char *what) {
    open_buf(r);
    int bad = 0;
    for (int i = 0; i < N && !bad; i++) {
        long want = 0;
        for (int q = 0; q < size; q++) want += q * 7 + i % 11 + salt;
        bad = r.p[i] != want;
    }
    check(!bad, what, salt);
}

static void local_start(buf s, buf r) {
    fill(s, r, 1);
    MPI_Request q;
    int token = 0;
    if (rank == 0) {
        check(MPI_Iallreduce(s.p, r.p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q) == MPI_SUCCESS,
              "local_start: MPI_Iallreduce", 0);
        MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
    } else {
        if (rank == 1) MPI_Recv(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(MPI_Iallreduce(s.p, r.p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q) == MPI_SUCCESS,
              "local_start: MPI_Iallreduce", 0);
    }
    check(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS, "local_start: MPI_Wait", 0);
    verify(r, 1, "local_start: result");
}

enum how { W_WAIT, W_TEST, W_WAITALL, W_TESTALL, W_WAITANY, W_TESTANY, W_WAITSOME, W_TESTSOME,
           W_GETSTATUS, W_COUNT };
static const char *how_name[W_COUNT] = {"MPI_Wait", "MPI_Test", "MPI_Waitall", "MPI_Testall",
                                        "MPI_Waitany", "MPI_Testany", "MPI_Waitsome",
                                        "MPI_Testsome", "MPI_Request_get_status"};

/* K allreduces and one point-to-point exchange with a neighbour in flight, completed by `how`;
 * every result checked after its own completion. */
static void complete(buf s[K], buf r[K], enum how how) {
    MPI_Request q[K + 2];
    int out = rank, in = -1;
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int k = 0; k < K; k++) {
        fill(s[k], r[k], 10 * how + k);
        check(MPI_Iallreduce(s[k].p, r[k].p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[k]) ==
                  MPI_SUCCESS, "MPI_Iallreduce", k);
    }
    MPI_Irecv(&in, 1, MPI_INT, left, 9, MPI_COMM_WORLD, &q[K]);
    MPI_Isend(&out, 1, MPI_INT, right, 9, MPI_COMM_WORLD, &q[K + 1]);
    const int n = K + 2;
    MPI_Status sts[K + 2]; /* arrays, not MPI_STATUSES_IGNORE: GCC 12's stringop-overflow on
                              MPICH's prototypes */
    int done[K + 2] = {0}, left_n = n, flag, idx, cnt, ids[K + 2];
    while (left_n > 0) {
        int rc = MPI_SUCCESS;
        switch (how) {
        case W_WAIT:
        case W_TEST:
        case W_GETSTATUS:
            for (int i = 0; i < n; i++) {
                if (done[i]) continue;
                if (how == W_WAIT) {
                    rc = MPI_Wait(&q[i], MPI_STATUS_IGNORE);
                } else if (how == W_TEST) {
                    for (flag = 0; rc == MPI_SUCCESS && !flag;)
                        rc = MPI_Test(&q[i], &flag, MPI_STATUS_IGNORE);
                } else {
                    for (flag = 0; rc == MPI_SUCCESS && !flag;)
                        rc = MPI_Request_get_status(q[i], &flag, MPI_STATUS_IGNORE);
                    if (i < K && rc == MPI_SUCCESS) verify(r[i], 10 * how + i, "get_status");
                    if (i < K) poison(r[i]);
                    if (rc == MPI_SUCCESS) rc = MPI_Wait(&q[i], MPI_STATUS_IGNORE);
                }
                done[i] = 1;
                left_n--;
                if (i < K) verify(r[i], 10 * how + i, how_name[how]);
            }
            break;
        case W_WAITALL:
        case W_TESTALL:
            if (how == W_WAITALL) {
                rc = MPI_Waitall(n, q, sts);
            } else {
                for (flag = 0; rc == MPI_SUCCESS && !flag;)
                    rc = MPI_Testall(n, q, &flag, sts);
            }
            for (int i = 0; i < n; i++) {
                done[i] = 1;
                if (i < K) verify(r[i], 10 * how + i, how_name[how]);
            }
            left_n = 0;
            break;
        case W_WAITANY:
        case W_TESTANY:
            if (how == W_WAITANY) {
                rc = MPI_Waitany(n, q, &idx, MPI_STATUS_IGNORE);
            } else {
                for (flag = 0; rc == MPI_SUCCESS && !flag;)
                    rc = MPI_Testany(n, q, &idx, &flag, MPI_STATUS_IGNORE);
            }
            if (rc != MPI_SUCCESS || idx == MPI_UNDEFINED || done[idx]) {
                check(0, "any: index", idx);
                left_n = 0;
                break;
            }
            done[idx] = 1;
            left_n--;
            if (idx < K) verify(r[idx], 10 * how + idx, how_name[how]);
            break;
        case W_WAITSOME:
        case W_TESTSOME:
            if (how == W_WAITSOME) {
                rc = MPI_Waitsome(n, q, &cnt, ids, sts);
            } else {
                for (cnt = 0; rc == MPI_SUCCESS && cnt == 0;)
                    rc = MPI_Testsome(n, q, &cnt, ids, sts);
            }
            if (rc != MPI_SUCCESS || cnt == MPI_UNDEFINED) {
                check(0, "some: outcount", cnt);
                left_n = 0;
                break;
            }
            for (int j = 0; j < cnt; j++) {
                done[ids[j]] = 1;
                left_n--;
                if (ids[j] < K) verify(r[ids[j]], 10 * how + ids[j], how_name[how]);
            }
            break;
        default:
            left_n = 0;
        }
        check(rc == MPI_SUCCESS, how_name[how], rc);
        if (rc != MPI_SUCCESS) break;
    }
    check(in == left, "point-to-point value", in);
}

static void free_active(buf s, buf r) {
    fill(s, r, 77);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 1) usleep(50000); /* rank 0's call stays in flight meanwhile */
    MPI_Request q;
    MPI_Iallreduce(s.p, r.p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    if (rank == 0) {
        MPI_Request keep = q;
        check(MPI_Request_free(&keep) != MPI_SUCCESS, "MPI_Request_free of an active request "
              "succeeded", 0);
    }
    check(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS, "free_active: MPI_Wait", 0);
    verify(r, 77, "free_active: result");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Sums the even ints of *len vectors of N ints with stride 2 (MPI_SUM is not defined on
 * derived datatypes). */
static void vec_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    const int *a = in;
    int *b = inout;
    for (int k = 0; k < *len; k++) {
        for (int i = 0; i < N / 2; i++) b[k * (N - 1) + 2 * i] += a[k * (N - 1) + 2 * i];
    }
}

static void interleave(buf s, buf r) {
    MPI_Op op;
    MPI_Op_create(vec_sum, 1, &op);
    for (int order = 0; order < 2; order++) {
        MPI_Datatype every_other; /* N/2 ints, stride 2: extent N-1 ints */
        MPI_Type_vector(N / 2, 1, 2, MPI_INT, &every_other);
        MPI_Type_commit(&every_other);
        open_buf(s);
        open_buf(r);
        for (int i = 0; i < N; i++) {
            s.p[i] = rank * 5 + i;
            r.p[i] = -1;
        }
        poison(s);
        poison(r);
        MPI_Request q[2];
        MPI_Status sts[2];
        MPI_Iallreduce(s.p, r.p, 1, every_other, op, MPI_COMM_WORLD, &q[0]);
        MPI_Iallreduce(s.p + 1, r.p + 1, 1, every_other, op, MPI_COMM_WORLD, &q[1]);
        MPI_Type_free(&every_other); /* allowed with the calls in flight */
        if (order == 0) {
            check(MPI_Waitall(2, q, sts) == MPI_SUCCESS, "interleave: MPI_Waitall", 0);
        } else {
            check(MPI_Wait(&q[1], MPI_STATUS_IGNORE) == MPI_SUCCESS, "interleave: wait", 1);
            check(MPI_Wait(&q[0], MPI_STATUS_IGNORE) == MPI_SUCCESS, "interleave: wait", 0);
        }
        open_buf(r);
        int bad = 0;
        for (int i = 0; i < N - 1; i++) bad += r.p[i] != size * (size - 1) / 2 * 5 + size * i;
        check(!bad, "interleave: results (one call's copy-back overwrote the other's)", bad);
        poison(r);
    }
    MPI_Op_free(&op);
}

static void errors(buf s, buf r) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    fill(s, r, 55);
    int small = 0, big[2] = {1, 2};
    MPI_Request q[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status sts[3];
    MPI_Iallreduce(s.p, r.p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[0]);
    const int peer = rank ^ 1; /* ranks 0-1, 2-3, ...: each receives 1 int, is sent 2 */
    if (peer < size) {
        MPI_Irecv(&small, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &q[1]);
        MPI_Isend(big, 2, MPI_INT, peer, 11, MPI_COMM_WORLD, &q[2]);
        check(MPI_Waitall(3, q, sts) != MPI_SUCCESS, "errors: truncation not reported", 0);
        for (int i = 0; i < 3; i++) { /* what that MPI_Waitall left pending (Open MPI) */
            if (q[i] != MPI_REQUEST_NULL) (void)MPI_Wait(&q[i], MPI_STATUS_IGNORE);
        }
    } else {
        check(MPI_Wait(&q[0], MPI_STATUS_IGNORE) == MPI_SUCCESS, "errors: MPI_Wait", 0);
    }
    verify(r, 55, "errors: result");
    poison(r);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static MPI_Comm thread_comm[2];
static void *thread_body(void *arg) {
    const int t = (int)(long)arg;
    buf s = make(), r = make();
    for (int it = 0; it < 300; it++) {
        fill(s, r, 1000 + 10 * it + t);
        MPI_Request q;
        MPI_Iallreduce(s.p, r.p, N, MPI_INT, MPI_SUM, thread_comm[t], &q);
        if (it % 2) {
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            for (int f = 0; !f;) MPI_Test(&q, &f, MPI_STATUS_IGNORE);
        }
        verify(r, 1000 + 10 * it + t, "threads: result");
    }
    munmap(s.p, s.bytes);
    munmap(r.p, r.bytes);
    return NULL;
}

static void threads(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &thread_comm[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &thread_comm[1]);
    pthread_t th;
    pthread_create(&th, NULL, thread_body, (void *)1L);
    thread_body((void *)0L);
    pthread_join(th, NULL);
    MPI_Comm_free(&thread_comm[0]);
    MPI_Comm_free(&thread_comm[1]);
}

#ifdef TEST_ALLREDUCE_INIT
static void persistent(buf s[K], buf r[K]) {
    MPI_Request p[K];
    MPI_Status sts[K];
    for (int k = 0; k < K; k++) {
        fill(s[k], r[k], 200 + k);
        check(TEST_ALLREDUCE_INIT(s[k].p, r[k].p, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                  MPI_INFO_NULL, &p[k]) == MPI_SUCCESS, "allreduce_init", k);
    }
    for (int it = 0; it < 3; it++) { /* one request, new data per start, MPI_Wait */
        fill(s[0], r[0], 300 + it);
        check(MPI_Start(&p[0]) == MPI_SUCCESS, "MPI_Start", it);
        check(MPI_Wait(&p[0], MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait (persistent)", it);
        verify(r[0], 300 + it, "persistent: MPI_Start + MPI_Wait");
    }
    /* A second start while active: refused, the call in flight intact. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    fill(s[0], r[0], 350);
    if (rank == 1) usleep(50000); /* rank 0's call stays in flight meanwhile */
    check(MPI_Start(&p[0]) == MPI_SUCCESS, "MPI_Start", 3);
    if (rank == 0) {
        check(MPI_Start(&p[0]) != MPI_SUCCESS, "a second MPI_Start of an active request "
              "succeeded", 0);
    }
    check(MPI_Wait(&p[0], MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait (persistent)", 3);
    verify(r[0], 350, "persistent: the call in flight at the second MPI_Start");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    for (int it = 0; it < 2; it++) { /* all of them, MPI_Startall + MPI_Waitall */
        for (int k = 0; k < K; k++) fill(s[k], r[k], 400 + 10 * it + k);
        check(MPI_Startall(K, p) == MPI_SUCCESS, "MPI_Startall", it);
        check(MPI_Waitall(K, p, sts) == MPI_SUCCESS, "MPI_Waitall", it);
        for (int k = 0; k < K; k++) verify(r[k], 400 + 10 * it + k, "persistent: MPI_Startall");
    }
    for (int k = 0; k < K; k++) {
        check(MPI_Request_free(&p[k]) == MPI_SUCCESS && p[k] == MPI_REQUEST_NULL,
              "MPI_Request_free (persistent)", k);
    }
}
#endif

int main(int argc, char **argv) {
    bool thread_mode = false, no_persistent = false, expect_twohop = false;
    for (int i = 1; i < argc; i++) {
        thread_mode = thread_mode || !strcmp(argv[i], "--threads");
        no_persistent = no_persistent || !strcmp(argv[i], "--no-persistent");
        expect_twohop = expect_twohop || !strcmp(argv[i], "--expect-twohop");
    }
    /* MPI_THREAD_MULTIPLE only for the threads scenario: Open MPI 4.1.4's MPI_Waitall under it
     * hung now and then on the errors scenario's truncated receive (its multi-threaded wait
     * path, with or without twohop). */
    int provided = MPI_THREAD_SINGLE;
    if (thread_mode) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) printf("staged_forms: needs 2 or more ranks\n");
        MPI_Finalize();
        return 2;
    }
    if (thread_mode) {
        if (provided == MPI_THREAD_MULTIPLE) {
            threads();
        } else if (rank == 0) {
            printf("staged_forms: threads skipped (MPI_THREAD_MULTIPLE not provided)\n");
        }
        int total = 0;
        MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("staged_forms --threads: %s (%d failures)\n", total ? "FAIL" : "OK", total);
        }
        MPI_Finalize();
        return total ? 1 : 0;
    }
    buf s[K], r[K];
    for (int k = 0; k < K; k++) {
        s[k] = make();
        r[k] = make();
    }
    struct twohop_pvars pv;
    memset(&pv, 0, sizeof(pv));
    if (expect_twohop && !twohop_pvars_open(&pv)) check(0, pv.why, 0);
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    local_start(s[0], r[0]);
    for (int how = 0; how < W_COUNT; how++) complete(s, r, (enum how)how);
    if (expect_twohop) { /* 1 + K per completion function, served by twohop */
        const unsigned long long served = twohop_pvars_read(&pv).nonblocking - c0.nonblocking;
        check(served == 1 + (unsigned long long)K * W_COUNT,
              "twohop's non-blocking counter (a fallback served some calls)", (int)served);
    }
    free_active(s[0], r[0]);
    interleave(s[0], r[0]);
    errors(s[0], r[0]);
#ifdef TEST_ALLREDUCE_INIT
    if (!no_persistent) persistent(s, r);
#endif
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("staged_forms: %s (%d failures)\n", total ? "FAIL" : "OK", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
