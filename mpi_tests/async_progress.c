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
 * Also (Open MPI component) the MPI_T counter coll_twohop_foreign_thread_progress must stay 0:
 * the proxy thread that advanced the calls never called into Open MPI (MPI_THREAD_SINGLE here).
 * Exit status 0 and "RESULT: PASS" on rank 0 when every rank saw what `on`/`off` predicts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

/*
 * MPI_T counter `want` (unsigned long long, no object): a handle allocated by counter_open
 * (Open MPI counts from the handle's allocation), read by counter_read; -1 when absent.
 */
struct counter {
    MPI_T_pvar_session s;
    MPI_T_pvar_handle h;
    int ok;
};

static void counter_open(struct counter *c, const char *want) {
    int num = 0, provided;
    c->ok = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return;
    MPI_T_pvar_get_num(&num);
    for (int i = 0; i < num && !c->ok; i++) {
        char name[256], desc[1024];
        int nl = sizeof name, dl = sizeof desc, verb, cls, bind, ro, cont, atomic, n;
        MPI_Datatype dt;
        MPI_T_enum et;
        if (MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &et, desc, &dl, &bind, &ro, &cont,
                                &atomic) != MPI_SUCCESS || strcmp(name, want) != 0) {
            continue;
        }
        c->ok = MPI_T_pvar_session_create(&c->s) == MPI_SUCCESS &&
                MPI_T_pvar_handle_alloc(c->s, i, NULL, &c->h, &n) == MPI_SUCCESS;
    }
}

static long long counter_read(struct counter *c) {
    unsigned long long x = 0;
    long long v = -1;
    if (c->ok && MPI_T_pvar_read(c->s, c->h, &x) == MPI_SUCCESS) v = (long long)x;
    if (c->ok) {
        MPI_T_pvar_handle_free(c->s, &c->h);
        MPI_T_pvar_session_free(&c->s);
    }
    MPI_T_finalize();
    return v;
}

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
    struct counter foreign_calls;
    counter_open(&foreign_calls, "coll_twohop_foreign_thread_progress");
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
    const long long foreign = counter_read(&foreign_calls);
    if (foreign > 0) {
        fprintf(stderr, "async_progress: rank %d: %lld calls of Open MPI's progress from another "
                "thread under MPI_THREAD_SINGLE\n", rank, foreign);
        bad++;
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
