/*
 * device_allreduce: MPI_Allreduce on CUDA memory of every kind, for the GPU machine
 * (scripts/gpu_check.sh runs it). Host code only (CUDA runtime API); built when the CUDA
 * toolkit is found.
 *
 * usage: device_allreduce check [--expect-twohop] [--form nonblocking|persistent]
 *          kinds device, managed, pinned host, stream-ordered pool (default and custom): every
 *          kind as send and receive buffer, send and receive of different kinds, ranks with
 *          different kinds, in place, counts 1, 3, 1023 and 300001 (not multiples of 16 bytes),
 *          MPI_INT, MPI_FLOAT, bfloat16 and float16 (include/twohop_half.h) sums and
 *          MPI_DOUBLE max with exact values, a buffer freed and
 *          re-allocated (often at the same address) with new contents between calls; with
 *          --expect-twohop the MPI_T counters must show twohop served every call; with
 *          --expect-gpu (one node, GPUs that reach each other) the GPU path must serve exactly
 *          the calls where every rank passes device memory (any kind but pinned host) as both
 *          buffers. --form: every call as MPI_Iallreduce + MPI_Wait, or as a persistent
 *          allreduce (MPI_Allreduce_init / MPIX_Allreduce_init) started once; the counters of
 *          that form must move (coll_twohop_nonblocking_calls / _persistent_starts); with
 *          --expect-gpu the GPU path must serve those forms' calls alike (the node's GPU path
 *          as a job on one node); --expect-hop1 (several nodes): device-to-device cases of
 *          64 KiB or more run hop 1 and hop 3 on the GPU (coll_twohop_gpu_hop1_calls), in
 *          every form; --expect-posted: those cases GPU-posted too
 *          (coll_twohop_gpu_posted_calls).
 *        device_allreduce cross [--sync] [--warm | --prime]
 *          two duplicates of MPI_COMM_WORLD, MPI_Iallreduce on device buffers started on both
 *          in opposite orders on even and odd ranks, then MPI_Waitall (legal for non-blocking
 *          collectives): GPU work of one communicator that waits for its hop 2 must never hold
 *          up the other's. --sync: cudaDeviceSynchronize between the starts and the wait (a
 *          kernel launched in the starts must end without the application's MPI calls; the
 *          node's vote usually completes only in the wait, so mostly none is). 4 and
 *          1 MiB of floats and 300001 ints, 3 rounds, exact results. --warm: the buffers
 *          allocated once, and a first round started in the same order on every rank.
 *          --prime: that first round on buffers of its own, new buffers in every round after
 *          it (the communicators' own GPU resources exist before the crossed rounds, the
 *          peers' buffers are new in each).
 *        device_allreduce interleave [--warm] [--enqueue]
 *          MPI_Iallreduce on one duplicate of MPI_COMM_WORLD, then MPI_Allreduce on another,
 *          the wait for the first after the blocking call on even ranks and before it on odd
 *          ranks (rr:2 virtual nodes: the two nodes differ): the blocking call must let the
 *          MPI's progress move the call in flight (check_interleave says more). --enqueue:
 *          the second call is twohop_allreduce_enqueue on a stream, followed by a pageable
 *          cudaMemcpy before the wait for the first (the proxy thread, which opens the
 *          stream-ordered call's gates, must not be inside a CUDA call of the first's job).
 *        device_allreduce overlap [--min-overlap P]
 *          MPI_Iallreduce on device buffers overlapped with a CPU busy loop, as osu_iallreduce
 *          measures it (check_overlap says how); 1, 4 and 16 MiB of floats, exact results.
 *        device_allreduce self
 *          single-rank communicators (MPI_COMM_SELF, a split that leaves every rank alone) in
 *          the three forms, device/managed/pool/pinned buffers, in place and not, a vector
 *          datatype with holes: exact results, holes untouched (coll/self copies with a host
 *          memcpy, which crashes on device memory). Also under mpirun -np 1.
 *        device_allreduce bench [--stage] [--pinned] [--min BYTES] [--max BYTES] [--step F]
 *                               [--repeat R] [--form nonblocking|persistent]
 *          MPI_FLOAT sum on device buffers, MIN (default 8 B) .. BYTES (default 256 MiB, xF
 *          steps, default 4; the last step is BYTES): median
 *          over iterations of the slowest rank's time, rank 0's calling-thread CPU time per
 *          call (inside the timed call only: not the barrier before it),
 *          and the HBM bound (all ranks copy n bytes device-to-device at once) measured in the
 *          same run; --stage times device->host copy, MPI_Allreduce on host, host->device copy
 *          instead (the way users stage by hand with a non-CUDA-aware MPI); --pinned adds the
 *          pinned-copy bound: all ranks copy n bytes device-to-pinned-host at once (pinned_us),
 *          the node's PCIe bandwidth that host-staged hop 2 must go through twice; --repeat:
 *          the whole sweep R times in the same run (rows printed each time); --form: each
 *          call in that form (non-blocking: MPI_Iallreduce + MPI_Wait; persistent: init,
 *          start, wait and free per call), the device buffers only.
 * Each rank uses GPU (local rank mod device count). Exit 0 on success.
 * DEVICE_ALLREDUCE_STACKS=S: S seconds after MPI_Init every thread prints its stack (a hang's
 * diagnosis; stderr).
 * DEVICE_ALLREDUCE_SCHED (any value): bench prints every rank's threads' scheduler account of
 * the whole sweep (time on a CPU, time waiting for one, context switches: thread_sched.h).
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dirent.h>
#include <execinfo.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "twohop.h"
#include "twohop_half.h"
#include "twohop_pvars.h"
#include "thread_sched.h"
#if MPI_VERSION < 4 && defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

/* The form of every checked call (--form). */
enum { FORM_BLOCKING, FORM_NONBLOCKING, FORM_PERSISTENT };
static int g_form = FORM_BLOCKING;

/* One allreduce in the form g_form; returns the MPI error code. */
static int allreduce_form(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op,
                          MPI_Comm comm) {
    MPI_Request req;
    int rc;
    if (g_form == FORM_NONBLOCKING) {
        rc = MPI_Iallreduce(s, r, n, t, op, comm, &req);
    } else if (g_form == FORM_PERSISTENT) {
#if MPI_VERSION >= 4
        rc = MPI_Allreduce_init(s, r, n, t, op, comm, MPI_INFO_NULL, &req);
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
        rc = MPIX_Allreduce_init(s, r, n, t, op, comm, MPI_INFO_NULL, &req);
#else
        return MPI_ERR_OTHER;
#endif
        if (rc == MPI_SUCCESS) rc = MPI_Start(&req);
    } else {
        return MPI_Allreduce(s, r, n, t, op, comm);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (g_form == FORM_PERSISTENT && req != MPI_REQUEST_NULL) MPI_Request_free(&req);
    return rc;
}

static int rank, size, failures;
static bool expect_gpu; /* --expect-gpu: device-to-device cases on one node take the GPU path */
static bool expect_hop1; /* --expect-hop1: the same on several nodes from 64 KiB: GPU hop 1 */
static bool expect_posted; /* --expect-posted: and GPU-posted (coll_twohop_gpu_posted_calls) */
static int g_shift;     /* elements the buffers start after their allocation (alignment cases) */
static struct twohop_pvars pv;
static cudaMemPool_t custom_pool;

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(e_));   \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                      \
        }                                                                                      \
    } while (0)

enum kind { K_DEVICE, K_MANAGED, K_PINNED, K_POOL, K_CUSTOM_POOL, K_COUNT };
static const char *kind_name[K_COUNT] = {"device", "managed", "pinned", "pool", "custom-pool"};

static void *alloc_kind(enum kind k, size_t n) {
    void *p = NULL;
    n = n ? n : 1;
    switch (k) {
    case K_DEVICE: CK(cudaMalloc(&p, n)); break;
    case K_MANAGED: CK(cudaMallocManaged(&p, n, cudaMemAttachGlobal)); break;
    case K_PINNED: CK(cudaMallocHost(&p, n)); break;
    case K_POOL: CK(cudaMallocAsync(&p, n, 0)); CK(cudaStreamSynchronize(0)); break;
    case K_CUSTOM_POOL:
        CK(cudaMallocFromPoolAsync(&p, n, custom_pool, 0));
        CK(cudaStreamSynchronize(0));
        break;
    default: break;
    }
    return p;
}

static void free_kind(enum kind k, void *p) {
    switch (k) {
    case K_PINNED: CK(cudaFreeHost(p)); break;
    case K_POOL:
    case K_CUSTOM_POOL: CK(cudaFreeAsync(p, 0)); CK(cudaStreamSynchronize(0)); break;
    default: CK(cudaFree(p)); break;
    }
}

/* Value of element i on rank r, exact in float and double; for the half-precision types small
 * integers whose sums over 16 ranks stay exact in bfloat16 (at most 256). */
static MPI_Datatype t_bf16, t_f16;
static bool is_half(MPI_Datatype t) { return t == t_bf16 || t == t_f16; }
static int val_t(MPI_Datatype t, int r, long i, int salt) {
    if (is_half(t)) return (r % 4) + (int)(i % 5) + salt % 3 - 3;
    return (r + 1) * 3 + (int)(i % 13) + salt;
}
static const char *type_name(MPI_Datatype t) {
    return t == MPI_INT ? "int" : t == MPI_FLOAT ? "float" : t == MPI_DOUBLE ? "double"
         : t == t_bf16  ? "bfloat16" : "float16";
}

/* One allreduce of `n` elements of type t (MPI_INT/MPI_FLOAT sum, MPI_DOUBLE max). */
static void one_case(enum kind ks, enum kind kr, MPI_Datatype t, long n, bool inplace, int salt,
                     bool uniform) {
    const size_t es = t == MPI_DOUBLE ? 8 : is_half(t) ? 2 : 4;
    const size_t bytes = (size_t)n * es;
    char *h = malloc(bytes + 1), *back = malloc(bytes + 1);
    for (long i = 0; i < n; i++) {
        int v = val_t(t, rank, i, salt);
        if (t == MPI_INT) ((int *)h)[i] = v;
        else if (t == MPI_FLOAT) ((float *)h)[i] = (float)v;
        else if (t == t_bf16) ((uint16_t *)h)[i] = twohop_f32_to_bf16((float)v);
        else if (t == t_f16) ((uint16_t *)h)[i] = twohop_f32_to_f16((float)v);
        else ((double *)h)[i] = (double)v;
    }
    void *rbase = alloc_kind(kr, bytes + 64), *sbase = inplace ? NULL : alloc_kind(ks, bytes + 64);
    void *r = (char *)rbase + g_shift * es, *s = inplace ? NULL : (char *)sbase + g_shift * es;
    CK(cudaMemcpy(inplace ? r : s, h, bytes, cudaMemcpyDefault));
    if (!inplace) CK(cudaMemset(r, 0x7F, bytes));
    /* The GPU path serves the call exactly when every rank's buffers are device memory of any
     * kind (cudaMalloc, managed, pools; not pinned host): agreed here, on host ints. */
    int dev_here = kr != K_PINNED && (inplace || ks != K_PINNED), dev_all = 0;
    MPI_Allreduce(&dev_here, &dev_all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    (void)uniform;
    if (getenv("DEVICE_CHECK_TRACE")) {
        fprintf(stderr, "rank %d case: send %s recv %s n=%ld inplace=%d\n", rank,
                inplace ? "-" : kind_name[ks], kind_name[kr], n, inplace);
    }
    struct twohop_counts c0 = twohop_pvars_read(&pv);
    MPI_Op op = t == MPI_DOUBLE ? MPI_MAX : is_half(t) ? twohop_half_op(MPI_SUM, t) : MPI_SUM;
    int rc = allreduce_form(inplace ? MPI_IN_PLACE : s, r, (int)n, t, op, MPI_COMM_WORLD);
    struct twohop_counts c1 = twohop_pvars_read(&pv);
    CK(cudaMemcpy(back, r, bytes, cudaMemcpyDefault));
    long bad = 0;
    for (long i = 0; i < n && rc == MPI_SUCCESS; i++) {
        long want = 0;
        for (int q = 0; q < size; q++) {
            int v = val_t(t, q, i, salt);
            want = t == MPI_DOUBLE ? (v > want ? v : want) : want + v;
        }
        double got = t == MPI_INT      ? ((int *)back)[i]
                     : t == MPI_FLOAT  ? ((float *)back)[i]
                     : t == t_bf16     ? twohop_bf16_to_f32(((uint16_t *)back)[i])
                     : t == t_f16      ? twohop_f16_to_f32(((uint16_t *)back)[i])
                                       : ((double *)back)[i];
        if (got != (double)want) bad++;
    }
    if (rc != MPI_SUCCESS || bad) {
        printf("FAIL rank %d: send %s recv %s %s n=%ld inplace=%d: rc %d, %ld wrong\n", rank,
               inplace ? "-" : kind_name[ks], kind_name[kr],
               type_name(t), n, inplace, rc, bad);
        failures++;
    }
    const unsigned long long served = g_form == FORM_NONBLOCKING ? c1.nonblocking - c0.nonblocking
                                      : g_form == FORM_PERSISTENT ? c1.persistent - c0.persistent
                                                                  : c1.served - c0.served;
    if (pv.found && served != 1) {
        printf("FAIL rank %d: twohop did not serve (served +%llu, fallback +%llu)\n", rank,
               served, c1.fallback - c0.fallback);
        failures++;
    }
    /* Every form takes the GPU path at every size. */
    const bool want_gpu = expect_gpu && dev_all;
    if (expect_gpu && (c1.gpu - c0.gpu) != (want_gpu ? 1u : 0u)) {
        printf("FAIL rank %d: send %s recv %s n=%ld: GPU path %s\n", rank,
               inplace ? "-" : kind_name[ks], kind_name[kr], n,
               want_gpu ? "not taken" : "taken unexpectedly");
        failures++;
    }
    /* Several nodes: the pipeline's hop 1 and hop 3 on the GPU where every rank passes device
     * memory (from 64 KiB: smaller calls may take the latency path, on the host). Where some
     * rank does not, a node whose ranks all do may still take it (the vote is the node's, and
     * virtual nodes are not visible here): not checked. */
    if (expect_hop1 && dev_all && bytes >= 65536 && c1.gpu_hop1 - c0.gpu_hop1 != 1u) {
        printf("FAIL rank %d: send %s recv %s n=%ld: GPU hop 1 not taken\n", rank,
               inplace ? "-" : kind_name[ks], kind_name[kr], n);
        failures++;
    }
    if (expect_posted && dev_all && bytes >= 65536 && c1.posted - c0.posted != 1u) {
        printf("FAIL rank %d: send %s recv %s n=%ld: not GPU-posted\n", rank,
               inplace ? "-" : kind_name[ks], kind_name[kr], n);
        failures++;
    }
    if (!inplace) free_kind(ks, sbase);
    free_kind(kr, rbase);
    free(h);
    free(back);
}

static int check(bool expect_twohop) {
    if (expect_twohop && !pv.found) {
        printf("FAIL rank %d: twohop counters missing: %s\n", rank, pv.why);
        return 1;
    }
    const long counts[] = {1, 3, 1023, 300001};
    const MPI_Datatype types[] = {MPI_INT, MPI_FLOAT, MPI_DOUBLE, t_bf16, t_f16};
    int cases = 0;
    for (int k = 0; k < K_COUNT; k++) { /* every kind, same on every rank, in place and not */
        for (int c = 0; c < 4; c++) {
            for (int t = 0; t < 5; t++) {
                one_case(k, k, types[t], counts[c], false, c + t, true);
                one_case(k, k, types[t], counts[c], true, c + t + 1, true);
                cases += 2;
            }
        }
    }
    for (int j = 0; j < K_COUNT; j++) { /* send and receive kinds differ, and differ by rank */
        one_case((rank + j) % K_COUNT, (rank + j + 1) % K_COUNT, MPI_INT, 300001, false, j, false);
        one_case((rank + j) % K_COUNT, (rank + j + 2) % K_COUNT, MPI_FLOAT, 1023, false, j, false);
        cases += 2;
    }
    /* Buffers at different offsets from 16-byte boundaries on different ranks (the kernels'
     * vector loads must fall back), and at the same odd offset everywhere (vector body with a
     * scalar head). */
    for (int it = 0; it < 2; it++) {
        g_shift = it == 0 ? rank % 3 : 1;
        one_case(K_DEVICE, K_DEVICE, MPI_INT, 100003, false, 300 + it, true);
        one_case(K_DEVICE, K_DEVICE, MPI_FLOAT, 4097, true, 310 + it, true);
        cases += 2;
    }
    g_shift = 0;
    /* Freed and re-allocated between calls: new contents at (often) the same address. */
    for (int it = 0; it < 4; it++) {
        one_case(K_DEVICE, K_DEVICE, MPI_INT, 4099, false, 100 + it, true);
        one_case(K_POOL, K_POOL, MPI_INT, 4099, true, 200 + it, true);
        cases += 2;
    }
    /* Reduce + broadcast (not MPI_Allreduce): the count must arrive even after a failed call
     * made twohop refuse further allreduces on MPI_COMM_WORLD. */
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(&total, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("device_allreduce check%s: %d cases x %d ranks, %s\n",
                          g_form == FORM_NONBLOCKING ? " (MPI_Iallreduce)"
                          : g_form == FORM_PERSISTENT ? " (persistent)" : "",
                          cases, size, total ? "FAIL" : "OK");
    return total ? 1 : 0;
}

/* A commutative user op (int sum): Open MPI 4.1 rejects predefined ops on derived types. */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

/* Two communicators' non-blocking calls started in opposite orders (usage: mode cross). */
static int check_cross(bool sync, bool warm, bool prime) {
    MPI_Comm comm[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[1]);
    const long counts[] = {1l << 20, 1l << 18, 300001};
    const MPI_Datatype types[] = {MPI_FLOAT, MPI_FLOAT, MPI_INT};
    int bad_total = 0;
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    /* --warm: the buffers allocated once and a first round in the same order on every rank
     * (so each communicator has mapped its peers' buffers before the crossed rounds). */
    void *wsb[2] = {NULL, NULL}, *wrb[2] = {NULL, NULL};
    MPI_Status wst[2]; /* not MPI_STATUSES_IGNORE: MPICH's prototype makes GCC see size 0 */
    if (warm || prime) {
        MPI_Request req[2];
        for (int k = 0; k < 2; k++) {
            CK(cudaMalloc(&wsb[k], 4u << 20));
            CK(cudaMalloc(&wrb[k], 4u << 20));
            CK(cudaMemset(wsb[k], 0, 4u << 20));
        }
        for (int k = 0; k < 2; k++) {
            MPI_Iallreduce(wsb[k], wrb[k], 1 << 20, MPI_FLOAT, MPI_SUM, comm[k], &req[k]);
        }
        MPI_Waitall(2, req, wst);
    }
    for (int c = 0; c < 3; c++) {
        for (int round = 0; round < 3; round++) {
            const long n = counts[c];
            const size_t es = types[c] == MPI_INT ? sizeof(int) : sizeof(float);
            void *sb[2], *rb[2];
            char *h = malloc(n * es);
            MPI_Request req[2];
            for (int k = 0; k < 2; k++) {
                for (long i = 0; i < n; i++) {
                    const int v = val_t(types[c], rank, i, round + 7 * k);
                    if (types[c] == MPI_INT) ((int *)h)[i] = v;
                    else ((float *)h)[i] = (float)v;
                }
                if (warm) {
                    sb[k] = wsb[k];
                    rb[k] = wrb[k];
                } else {
                    CK(cudaMalloc(&sb[k], n * es));
                    CK(cudaMalloc(&rb[k], n * es));
                }
                CK(cudaMemcpy(sb[k], h, n * es, cudaMemcpyHostToDevice));
                CK(cudaMemset(rb[k], 0x7F, n * es));
            }
            for (int j = 0; j < 2; j++) {
                const int k = rank % 2 == 0 ? j : 1 - j;
                if (MPI_Iallreduce(sb[k], rb[k], (int)n, types[c], MPI_SUM, comm[k], &req[k]) !=
                    MPI_SUCCESS) {
                    printf("FAIL rank %d: cross: MPI_Iallreduce failed\n", rank);
                    MPI_Abort(MPI_COMM_WORLD, 4);
                }
            }
            if (sync) CK(cudaDeviceSynchronize());
            const int rc = MPI_Waitall(2, req, wst);
            long bad = 0;
            for (int k = 0; k < 2; k++) {
                CK(cudaMemcpy(h, rb[k], n * es, cudaMemcpyDeviceToHost));
                for (long i = 0; i < n; i++) {
                    long want = 0;
                    for (int q = 0; q < size; q++) want += val_t(types[c], q, i, round + 7 * k);
                    const double got = types[c] == MPI_INT ? ((int *)h)[i] : ((float *)h)[i];
                    if (got != (double)want) bad++;
                }
                if (!warm) {
                    CK(cudaFree(sb[k]));
                    CK(cudaFree(rb[k]));
                }
            }
            if (rc != MPI_SUCCESS || bad) {
                printf("FAIL rank %d: cross n=%ld round %d: rc %d, %ld wrong\n", rank, n, round,
                       rc, bad);
                bad_total++;
            }
            free(h);
        }
    }
    /* 18 calls, every one served by twohop's non-blocking form (and GPU-posted, asked for). */
    const struct twohop_counts c1 = twohop_pvars_read(&pv);
    const unsigned long long calls = warm || prime ? 20 : 18;
    for (int k = 0; (warm || prime) && k < 2; k++) {
        CK(cudaFree(wsb[k]));
        CK(cudaFree(wrb[k]));
    }
    /* Every call is of 1 MiB or more on device buffers: served non-blocking, with hop 1 on the
     * GPU (when the run has several nodes, --expect-hop1), GPU-posted with --expect-posted. */
    if (!pv.found || c1.nonblocking - c0.nonblocking != calls ||
        (expect_hop1 && c1.gpu_hop1 - c0.gpu_hop1 != calls) ||
        (expect_posted && c1.posted - c0.posted != calls)) {
        printf("FAIL rank %d: cross: twohop served %llu of %llu calls non-blocking, %llu with "
               "hop 1 on the GPU, %llu GPU-posted%s\n", rank, c1.nonblocking - c0.nonblocking,
               calls, c1.gpu_hop1 - c0.gpu_hop1, c1.posted - c0.posted,
               pv.found ? "" : " (counters missing)");
        bad_total++;
    }
    MPI_Comm_free(&comm[0]);
    MPI_Comm_free(&comm[1]);
    int all = 0;
    MPI_Allreduce(&bad_total, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("device_allreduce cross%s%s%s: %s (%d failures; rank 0: %llu of %llu calls "
               "with GPU hop 1, %llu GPU-posted)\n", sync ? " --sync" : "",
               warm ? " --warm" : "", prime ? " --prime" : "", all ? "FAIL" : "ok", all,
               c1.gpu_hop1 - c0.gpu_hop1, calls, c1.posted - c0.posted);
    }
    return all != 0;
}

/* Fills n items of type t on the device (values of rank r, salt) and the receive buffer with
 * 0x7F bytes. */
static void fill_dev(void *sb, void *rb, long n, MPI_Datatype t, int r, int salt, char *h) {
    const size_t es = t == MPI_INT ? sizeof(int) : sizeof(float);
    for (long i = 0; i < n; i++) {
        const int v = val_t(t, r, i, salt);
        if (t == MPI_INT) ((int *)h)[i] = v;
        else ((float *)h)[i] = (float)v;
    }
    CK(cudaMemcpy(sb, h, n * es, cudaMemcpyHostToDevice));
    CK(cudaMemset(rb, 0x7F, n * es));
}

/* Items of rb that differ from the sum over ranks of fill_dev's values (salt). */
static long wrong_dev(const void *rb, long n, MPI_Datatype t, int salt, char *h) {
    const size_t es = t == MPI_INT ? sizeof(int) : sizeof(float);
    CK(cudaMemcpy(h, rb, n * es, cudaMemcpyDeviceToHost));
    long bad = 0;
    for (long i = 0; i < n; i++) {
        long want = 0;
        for (int q = 0; q < size; q++) want += val_t(t, q, i, salt);
        const double got = t == MPI_INT ? ((int *)h)[i] : ((float *)h)[i];
        if (got != (double)want) bad++;
    }
    return bad;
}

/*
 * A blocking call on one communicator while a non-blocking call on another is in flight
 * (usage: mode interleave): every rank starts MPI_Iallreduce on A; even ranks then call
 * MPI_Allreduce on B and wait for A after it, odd ranks wait for A first (legal: MPI's progress
 * rule). Under rr:2 virtual nodes the nodes differ: the blocking call (GPU-posted by default)
 * waits for the other node, which waits for A, which moves on the even ranks only while they
 * are inside the blocking call. New buffers each round (--warm: allocated once, a first round
 * in the same order everywhere). Sizes: the blocking call handed to the proxy thread (4 and
 * 2 MiB) and driven by the calling thread (64 KiB). Exact results; the counters: every A
 * served non-blocking, and with --expect-hop1 / --expect-posted every call with GPU hop 1 and
 * every B GPU-posted.
 */
static cudaStream_t enq_stream; /* interleave --enqueue: a blocking stream */

static int check_interleave(bool warm, bool enq) {
    MPI_Comm comm[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[1]);
    if (enq) CK(cudaStreamCreate(&enq_stream));
    const long na[] = {1l << 20, 1l << 18, 300001};
    const long nb[] = {1l << 20, 1l << 14, 1l << 19};
    const MPI_Datatype ta[] = {MPI_FLOAT, MPI_FLOAT, MPI_INT};
    const size_t cap = 4u << 20;
    void *wb[4] = {NULL, NULL, NULL, NULL};
    char *h = malloc(cap);
    int bad_total = 0;
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    if (warm) {
        for (int k = 0; k < 4; k++) {
            CK(cudaMalloc(&wb[k], cap));
            CK(cudaMemset(wb[k], 0, cap));
        }
        MPI_Request req;
        MPI_Iallreduce(wb[0], wb[1], 1 << 20, MPI_FLOAT, MPI_SUM, comm[0], &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        MPI_Allreduce(wb[2], wb[3], 1 << 20, MPI_FLOAT, MPI_SUM, comm[1]);
    }
    for (int c = 0; c < 3; c++) {
        for (int round = 0; round < 3; round++) {
            void *b[4];
            const size_t ea = ta[c] == MPI_INT ? sizeof(int) : sizeof(float);
            for (int k = 0; k < 4; k++) {
                if (warm) b[k] = wb[k];
                else CK(cudaMalloc(&b[k], (k < 2 ? na[c] * ea : nb[c] * sizeof(float))));
            }
            fill_dev(b[0], b[1], na[c], ta[c], rank, round, h);
            fill_dev(b[2], b[3], nb[c], MPI_FLOAT, rank, round + 7, h);
            MPI_Request req;
            int rc = MPI_Iallreduce(b[0], b[1], (int)na[c], ta[c], MPI_SUM, comm[0], &req);
            int rb_rc, wa_rc;
            if (enq) {
                /* B stream-ordered on a blocking stream, then a pageable copy, which waits for
                 * that stream's call kernel (legacy-stream semantics): the proxy must open its
                 * gates meanwhile, so it must not sit in a CUDA call of A's job. */
                rb_rc = twohop_allreduce_enqueue(b[2], b[3], (int)nb[c], MPI_FLOAT, MPI_SUM,
                                                 comm[1], enq_stream);
                CK(cudaMemcpy(b[2], h, 4096, cudaMemcpyHostToDevice));
                wa_rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
                CK(cudaStreamSynchronize(enq_stream));
                /* (h still holds B's input, so the copy rewrites the same values) */
            } else if (rank % 2 == 0) {
                rb_rc = MPI_Allreduce(b[2], b[3], (int)nb[c], MPI_FLOAT, MPI_SUM, comm[1]);
                wa_rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
            } else {
                wa_rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
                rb_rc = MPI_Allreduce(b[2], b[3], (int)nb[c], MPI_FLOAT, MPI_SUM, comm[1]);
            }
            const long bad = wrong_dev(b[1], na[c], ta[c], round, h) +
                             wrong_dev(b[3], nb[c], MPI_FLOAT, round + 7, h);
            for (int k = 0; !warm && k < 4; k++) CK(cudaFree(b[k]));
            if (rc != MPI_SUCCESS || rb_rc != MPI_SUCCESS || wa_rc != MPI_SUCCESS || bad) {
                printf("FAIL rank %d: interleave A=%ld B=%ld round %d: rc %d/%d/%d, %ld wrong\n",
                       rank, na[c], nb[c], round, rc, rb_rc, wa_rc, bad);
                bad_total++;
            }
        }
    }
    const struct twohop_counts c1 = twohop_pvars_read(&pv);
    const unsigned long long calls = 9 + (warm ? 1 : 0);
    if (enq && (!pv.found || c1.enq_multinode - c0.enq_multinode != 9)) {
        printf("FAIL rank %d: interleave --enqueue: %llu of 9 stream-ordered calls on the "
               "device buffers of several nodes\n", rank, c1.enq_multinode - c0.enq_multinode);
        bad_total++;
    }
    if (!pv.found || c1.nonblocking - c0.nonblocking != calls ||
        (expect_hop1 && c1.gpu_hop1 - c0.gpu_hop1 != 2 * calls) ||
        (expect_posted && c1.posted - c0.posted != calls)) {
        printf("FAIL rank %d: interleave: twohop served %llu of %llu A calls non-blocking, "
               "%llu of %llu calls with hop 1 on the GPU, %llu B calls GPU-posted%s\n", rank,
               c1.nonblocking - c0.nonblocking, calls, c1.gpu_hop1 - c0.gpu_hop1, 2 * calls,
               c1.posted - c0.posted, pv.found ? "" : " (counters missing)");
        bad_total++;
    }
    for (int k = 0; warm && k < 4; k++) CK(cudaFree(wb[k]));
    free(h);
    if (enq) CK(cudaStreamDestroy(enq_stream));
    MPI_Comm_free(&comm[0]);
    MPI_Comm_free(&comm[1]);
    int all = 0;
    MPI_Allreduce(&bad_total, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("device_allreduce interleave%s%s: %s (%d failures)\n", warm ? " --warm" : "",
               enq ? " --enqueue" : "", all ? "FAIL" : "ok", all);
    }
    return all != 0;
}

/* DEVICE_ALLREDUCE_STACKS=S (diagnosing a hang): S seconds after MPI_Init every thread of
 * the process prints its stack (backtrace_symbols_fd to stderr: "object(+offset)" frames for
 * addr2line), one thread at a time. */
static void stack_handler(int sig) {
    (void)sig;
    void *frames[64];
    const int n = backtrace(frames, 64);
    char head[80];
    const int len = snprintf(head, sizeof(head), "== stack of rank %d thread %ld\n", rank,
                             (long)syscall(SYS_gettid));
    if (write(2, head, (size_t)len) < 0) return;
    backtrace_symbols_fd(frames, n, 2);
}

static void *stack_watchdog(void *arg) {
    sleep((unsigned)(long)arg);
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) return NULL;
    const long me = (long)syscall(SYS_gettid);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const long tid = atol(e->d_name);
        if (tid <= 0 || tid == me) continue;
        syscall(SYS_tgkill, (long)getpid(), tid, SIGUSR2);
        usleep(300000);
    }
    closedir(d);
    return NULL;
}

static void stacks_after(void) {
    const char *s = getenv("DEVICE_ALLREDUCE_STACKS");
    if (s == NULL || atol(s) <= 0) return;
    void *warm[4];
    (void)backtrace(warm, 4); /* loads the unwinder now, not in the handler */
    signal(SIGUSR2, stack_handler);
    pthread_t t;
    if (pthread_create(&t, NULL, stack_watchdog, (void *)atol(s)) == 0) pthread_detach(t);
}

static int cmp_double(const void *a, const void *b);

/*
 * Overlap of MPI_Iallreduce on device buffers with computation (usage: mode overlap), as OSU's
 * osu_iallreduce measures it: per size, `pure` = the median over 7 calls of MPI_Iallreduce +
 * MPI_Wait (the slowest rank's), then 7 calls of MPI_Iallreduce, a CPU busy loop of 2 x pure
 * without MPI calls, MPI_Wait: overlap = 100 x (1 - wait / pure), clamped at 0 (the median
 * of the slowest rank's wait). Floats, 1, 4 and 16 MiB, exact results. --min-overlap P: fail
 * when a size of 4 MiB or more overlaps less than P %.
 */
static int check_overlap(double min_overlap) {
    const long counts[] = {1l << 18, 1l << 20, 1l << 22};
    int bad = 0;
    if (rank == 0) printf("# overlap, %d ranks: bytes pure_us wait_us overlap_%%\n", size);
    for (int c = 0; c < 3; c++) {
        const long n = counts[c];
        void *sb, *rb;
        char *h = malloc(n * sizeof(float));
        CK(cudaMalloc(&sb, n * sizeof(float)));
        CK(cudaMalloc(&rb, n * sizeof(float)));
        double pure[7], wait[7];
        for (int pass = 0; pass < 2; pass++) {
            for (int it = 0; it < 7; it++) {
                fill_dev(sb, rb, n, MPI_FLOAT, rank, it, h);
                CK(cudaDeviceSynchronize());
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Request req;
                const double t0 = MPI_Wtime();
                MPI_Iallreduce(sb, rb, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
                double tw = t0;
                if (pass == 1) {
                    double spin_end = t0 + 2.0 * pure[3];
                    while (MPI_Wtime() < spin_end) {
                    }
                    tw = MPI_Wtime();
                }
                MPI_Wait(&req, MPI_STATUS_IGNORE);
                double dt = MPI_Wtime() - tw, worst;
                MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                (pass == 0 ? pure : wait)[it] = worst;
                if (wrong_dev(rb, n, MPI_FLOAT, it, h) != 0) {
                    printf("FAIL rank %d: overlap n=%ld call %d: wrong result\n", rank, n, it);
                    bad++;
                }
            }
            if (pass == 0) {
                qsort(pure, 7, sizeof(double), cmp_double);
                /* every rank spins for the same time: rank 0's median */
                MPI_Bcast(&pure[3], 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            }
        }
        qsort(wait, 7, sizeof(double), cmp_double);
        double ov = 100.0 * (1.0 - wait[3] / pure[3]);
        if (ov < 0) ov = 0;
        if (rank == 0) {
            printf("%10ld %9.1f %9.1f %6.1f\n", n * (long)sizeof(float), 1e6 * pure[3],
                   1e6 * wait[3], ov);
        }
        if (min_overlap > 0 && n * sizeof(float) >= (4u << 20) && ov < min_overlap) bad++;
        CK(cudaFree(sb));
        CK(cudaFree(rb));
        free(h);
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("device_allreduce overlap: %s (%d failures, at least %.0f %% asked from 4 MiB)\n",
               all ? "FAIL" : "ok", all, min_overlap);
    }
    return all != 0;
}

/* Single-rank communicators in every form and memory kind (usage: mode self). */
static int check_self(void) {
    MPI_Op usum;
    MPI_Op_create(user_sum, 1, &usum);
    MPI_Comm alone;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone);
    const MPI_Comm comms[2] = {MPI_COMM_SELF, alone};
    MPI_Datatype vec; /* 2 ints of every 3: holes the copy must not touch */
    MPI_Type_vector(1000, 2, 3, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    const size_t span = 3000 * sizeof(int);
    int cases = 0, bad = 0;
    int *h = malloc(span), *back = malloc(span);
    for (int c = 0; c < 2; c++) {
        for (int f = 0; f < 3; f++) {
            g_form = f;
            for (int k = 0; k < K_COUNT; k++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    for (int dt = 0; dt < 2; dt++) { /* contiguous 6000 ints, or the vector */
                        int *r = alloc_kind(k, span), *sb = inplace ? NULL : alloc_kind(k, span);
                        for (int i = 0; i < 3000; i++) h[i] = i * 7 + rank;
                        CK(cudaMemcpy(inplace ? r : sb, h, span, cudaMemcpyDefault));
                        if (!inplace) CK(cudaMemset(r, 0x55, span));
                        const int rc = allreduce_form(inplace ? MPI_IN_PLACE : sb, r,
                                                      dt ? 1 : 3000, dt ? vec : MPI_INT,
                                                      dt ? usum : MPI_SUM, comms[c]);
                        CK(cudaMemcpy(back, r, span, cudaMemcpyDefault));
                        int wrong = rc != MPI_SUCCESS;
                        for (int i = 0; i < 3000 && !wrong; i++) {
                            const bool hole = dt && i % 3 == 2;
                            const int want = hole && !inplace ? 0x55555555 : i * 7 + rank;
                            wrong = back[i] != want;
                        }
                        if (wrong) {
                            printf("FAIL rank %d: single-rank %s, form %d, kind %s, inplace %d, "
                                   "%s: rc %d\n", rank, c ? "split" : "MPI_COMM_SELF", f,
                                   kind_name[k], inplace, dt ? "vector" : "contiguous", rc);
                            bad++;
                        }
                        cases++;
                        if (sb) free_kind(k, sb);
                        free_kind(k, r);
                    }
                }
            }
        }
    }
    g_form = FORM_BLOCKING;
    free(h);
    free(back);
    MPI_Type_free(&vec);
    MPI_Op_free(&usum);
    MPI_Comm_free(&alone);
    int total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("device_allreduce self: %d cases x %d ranks, %s\n", cases, size,
                          total ? "FAIL" : "OK");
    MPI_Bcast(&total, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return total ? 1 : 0;
}

/* CPU time of the calling thread in seconds (ns resolution, unlike getrusage's ticks). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int g_repeat = 1; /* bench --repeat: the size sweep this many times */
static size_t g_min_bytes = 8, g_step = 4; /* bench --min, --step */

static int bench(bool stage, bool pinned, size_t max_bytes) {
    float *d_in, *d_out, *h_in = NULL, *h_out = NULL;
    CK(cudaMalloc((void **)&d_in, max_bytes));
    CK(cudaMalloc((void **)&d_out, max_bytes));
    CK(cudaMemset(d_in, 0, max_bytes));
    if (stage || pinned) {
        CK(cudaMallocHost((void **)&h_in, max_bytes));
        CK(cudaMallocHost((void **)&h_out, max_bytes));
    }
    /* DEVICE_ALLREDUCE_SCHED set: every rank prints its threads' scheduler account of the
     * sweep (thread_sched.h), to tell slow calls from threads that waited for a core. */
    const bool sched = getenv("DEVICE_ALLREDUCE_SCHED") != NULL;
    struct thread_sched sched0[64];
    const int nsched0 = sched ? thread_sched_snapshot(sched0, 64) : 0;
    if (rank == 0) {
        printf("# device_allreduce bench: %d ranks, MPI_FLOAT sum, %s\n", size,
               stage ? "staged by hand (D2H, MPI_Allreduce on host, H2D)" : "device buffers");
        printf("%12s %12s %10s %12s %12s %9s%s\n", "bytes", "median_us", "busbw_GBs", "bound_us",
               "of_bound_%", "cpu_us", pinned ? "    pinned_us pinned_GBs" : "");
    }
    for (int rep = 0; rep < g_repeat; rep++)
    for (size_t n = g_min_bytes; n <= max_bytes;
         n = n * g_step > max_bytes && n < max_bytes ? max_bytes : n * g_step) {
        const int iters = n <= (1 << 20) ? 50 : n <= (16 << 20) ? 20 : 8;
        double *t = malloc(iters * sizeof(double));
        const int count = (int)(n / 4);
        /* Warm-up: more at the first size (the GPU's clocks, lazily loaded modules and the
         * driver's first IPC mappings; the first row was slower than the second before). */
        for (int w = 0; w < (n == g_min_bytes ? 50 : 3); w++) {
            allreduce_form(stage ? (void *)h_in : d_in, stage ? (void *)h_out : d_out, count,
                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        /* The calling thread's CPU time inside the timed calls only (not the barrier, whose
         * spin is the other ranks' lateness, nor the timing allreduce). */
        double cpu_sum = 0;
        for (int i = 0; i < iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double cpu0 = thread_cpu_s();
            double t0 = MPI_Wtime();
            if (stage) {
                CK(cudaMemcpy(h_in, d_in, n, cudaMemcpyDeviceToHost));
                MPI_Allreduce(h_in, h_out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                CK(cudaMemcpy(d_out, h_out, n, cudaMemcpyHostToDevice));
            } else {
                allreduce_form(d_in, d_out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
            double dt = MPI_Wtime() - t0, worst;
            cpu_sum += thread_cpu_s() - cpu0;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            t[i] = worst;
        }
        double cpu = cpu_sum / iters;
        qsort(t, iters, sizeof(double), cmp_double);
        const double med = t[iters / 2];
        /* HBM bound: every rank copies n bytes device-to-device at once. */
        double b[5];
        for (int i = 0; i < 5; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            CK(cudaMemcpy(d_out, d_in, n, cudaMemcpyDeviceToDevice));
            CK(cudaDeviceSynchronize());
            double dt = MPI_Wtime() - t0, worst;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            b[i] = worst;
        }
        qsort(b, 5, sizeof(double), cmp_double);
        /* HBM bound of the allreduce: its 2 p n bytes (every rank reads its input and writes its
         * output) at the rate of all p ranks copying n bytes at once, i.e. that copy's time. */
        const double bound = b[2];
        const double busbw = n / med * 2.0 * (size - 1) / size / 1e9;
        /* Pinned-copy bound: every rank copies n bytes device -> pinned host at once. */
        double pin = 0;
        if (pinned) {
            for (int i = 0; i < 5; i++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                CK(cudaMemcpy(h_in, d_in, n, cudaMemcpyDeviceToHost));
                double dt = MPI_Wtime() - t0, worst;
                MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                b[i] = worst;
            }
            qsort(b, 5, sizeof(double), cmp_double);
            pin = b[2];
        }
        if (rank == 0) {
            printf("%12zu %12.1f %10.2f %12.1f %12.1f %9.1f", n, med * 1e6, busbw, bound * 1e6,
                   100.0 * bound / med, cpu * 1e6);
            if (pinned) printf(" %12.1f %10.2f", pin * 1e6, (double)n * size / pin / 1e9);
            printf("\n");
        }
        free(t);
    }
    if (sched) {
        struct thread_sched sched1[64];
        const int nsched1 = thread_sched_snapshot(sched1, 64);
        for (int r = 0; r < size; r++) { /* rank by rank, so the lines stay together */
            if (r == rank) thread_sched_print(stdout, rank, sched0, nsched0, sched1, nsched1);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    CK(cudaFree(d_in));
    CK(cudaFree(d_out));
    if (stage || pinned) {
        CK(cudaFreeHost(h_in));
        CK(cudaFreeHost(h_out));
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    CK(cudaSetDevice(lr ? atoi(lr) % ndev : 0));
    MPI_Init(&argc, &argv);
    stacks_after();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* report the case, not abort */
    int dev;
    CK(cudaGetDevice(&dev));
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    CK(cudaMemPoolCreate(&custom_pool, &props));
    twohop_pvars_open(&pv);
    t_bf16 = twohop_type_bfloat16();
    t_f16 = twohop_type_float16();
    const char *mode = argc > 1 ? argv[1] : "check";
    bool expect = false, stage = false, pinned = false, sync = false, warm = false;
    bool prime = false;
    double min_overlap = 0;
    bool enq = false;
    size_t max_bytes = 256u << 20;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--expect-twohop")) expect = true;
        else if (!strcmp(argv[i], "--expect-gpu")) expect_gpu = true;
        else if (!strcmp(argv[i], "--expect-hop1")) expect_hop1 = true;
        else if (!strcmp(argv[i], "--expect-posted")) expect_posted = true;
        else if (!strcmp(argv[i], "--stage")) stage = true;
        else if (!strcmp(argv[i], "--sync")) sync = true;
        else if (!strcmp(argv[i], "--warm")) warm = true;
        else if (!strcmp(argv[i], "--prime")) prime = true;
        else if (!strcmp(argv[i], "--enqueue")) enq = true;
        else if (!strcmp(argv[i], "--min-overlap") && i + 1 < argc) min_overlap = atof(argv[++i]);
        else if (!strcmp(argv[i], "--pinned")) pinned = true;
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) g_min_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--step") && i + 1 < argc) g_step = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) g_repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--form") && i + 1 < argc) {
            ++i;
            g_form = !strcmp(argv[i], "nonblocking") ? FORM_NONBLOCKING
                     : !strcmp(argv[i], "persistent") ? FORM_PERSISTENT : FORM_BLOCKING;
        }
    }
    if (g_min_bytes < 4 || g_step < 2) {
        if (rank == 0) fprintf(stderr, "device_allreduce: --min must be at least 4, --step at least 2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rc = !strcmp(mode, "bench") ? bench(stage, pinned, max_bytes)
             : !strcmp(mode, "self") ? check_self()
             : !strcmp(mode, "cross") ? check_cross(sync, warm, prime)
             : !strcmp(mode, "interleave") ? check_interleave(warm, enq)
             : !strcmp(mode, "overlap") ? check_overlap(min_overlap) : check(expect);
    twohop_pvars_close(&pv);
    CK(cudaMemPoolDestroy(custom_pool));
    MPI_Finalize();
    return rc;
}
