/*
 * enqueue_allreduce: the stream-ordered allreduce (include/twohop.h) on the GPU machine
 * (scripts/gpu_check.sh runs it). Host code; the producer and checker kernels are in
 * enqueue_kernels.cu.
 *
 * usage: enqueue_allreduce [--expect-enqueued | --expect-enqueued-multinode [--expect-on-device]]
 *        enqueue_allreduce sizes [--max-bytes N] [--idle-probe]
 *          per message size (8 B .. N, default 256 MiB, x4, N last): how long the enqueue call takes to
 *          return (slowest rank, slowest of the calls), the time per call of enqueued calls back
 *          to back (stream synchronised at the end), how long a call issued on an idle
 *          stream takes to return (and the same right after an 8-byte call: return_warm),
 *          and the time per call of blocking MPI_Allreduce on the same
 *          device buffers, in one run; --idle-probe adds the return of a call on an idle
 *          stream 20 ms after a call of its size (return_settled) and after an 8-byte call
 *          and a 256 MiB host-memory write (return_swept): what the previous call left
 *          behind, its threads' tail or the host's caches; return_spun after a call of its
 *          size and 20 ms of the thread spinning (the host busy, the GPU idle); and in each
 *          of the five states the launch of an empty kernel in the call's place
 *          (launch_i/w/set/sw/sp)
 *        enqueue_allreduce overlap [--blocking] [--bytes N] [--calls K] [--compute-ms T]
 *                                  [--blocks-per-sm B]
 *          a "compute" kernel (B blocks of 128 threads per SM, default 1, busy for T ms,
 *          default 20; B = 16 fills every SM's 2048 thread slots) on one stream and K
 *          allreduces of N bytes (default 16 MiB, 8 calls) on another, each alone and then
 *          together: prints both alone, together, and the overlap
 *          (alone_compute + alone_allreduce - together) / min(alone_compute, alone_allreduce).
 *          The allreduces are enqueued (twohop_allreduce_enqueue) or, with --blocking, blocking
 *          MPI_Allreduce calls from the host (GPU-posted mode on several nodes).
 *   ordering     a producer kernel runs ~300 ms on the stream before it writes the input; the
 *                enqueue call must return while it still runs (with --expect-enqueued) and the
 *                consumer kernel enqueued after it must see the exact sum. The call before it,
 *                the first on these buffers (IPC mapping, flag registration), is only timed
 *   outstanding  3 communicators x 8 calls enqueued on 3 streams before any wait (odd counts,
 *                every second one in place), then checked on the streams
 *   unordered    two calls on one communicator, on two streams that reach the GPU in opposite
 *                orders on neighbouring ranks (a 200 ms producer holds one back): both exact.
 *                Each buffer pair is first used once alone (warm rounds, at most 3, agreed by
 *                all ranks), so that the timed round's second call need not close a stale CUDA
 *                IPC mapping of a freed buffer while the first call's kernel waits: such a call
 *                runs on the host by design (coll/gpu/vote.cpp), which --expect-on-device
 *                would otherwise count as a failure
 *   small        8 calls of 1-2047 floats back to back on one stream (in place, 4-byte offsets)
 *   mixed        an enqueued call, then a blocking MPI_Allreduce on the same communicator
 *   host_rank    rank 0 passes host memory: the node takes the blocking path, results exact
 *   forms        rank 0 calls MPI_Allreduce, the others twohop_allreduce_enqueue, all on device
 *                memory, in one call: the node takes the blocking path, results exact
 *   pool         cudaMallocAsync buffers (twohop stages them on the stream)
 *   event        an event recorded after the call: another stream waiting for it, and the host
 *                after cudaEventSynchronize, see the exact result
 *   errors       count -1 and recvbuf MPI_IN_PLACE are errors (MPI_ERRORS_RETURN), not hangs
 *   capture      a call on a stream being captured into a CUDA graph (every rank, then rank 0
 *                alone) fails on every rank without invalidating the capture; the call before it
 *                (in flight on another stream) is exact; an empty call under capture succeeds
 * With --expect-enqueued (one node, every rank on a GPU reaching the others) the MPI_T counter
 * coll_twohop_enqueued_calls must count exactly the calls that stay on the stream. With
 * --expect-enqueued-multinode (several nodes) every call of a rank with device buffers stays on
 * the stream whatever the other ranks pass (the host_rank and forms cases too), and
 * coll_twohop_enqueued_multinode_calls counts the same calls.
 * --expect-on-device: the ordering case's second call (every rank's buffers on the device) ran
 * hop 1 on the GPU, stream-ordered (coll_twohop_gpu_hop1_calls moved).
 * Exit 0 when every case passes on every rank.
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "twohop.h"
#include "twohop_pvars.h"

int enqueue_test_produce(float *buf, long long n, float base, unsigned long long ns,
                         cudaStream_t s);
int enqueue_test_check(const float *buf, long long n, float expect_base, float scale,
                       unsigned long long *errors, cudaStream_t s);
int enqueue_test_compute(unsigned long long ns, int blocks, cudaStream_t s);

static int rank, size, failures;
static bool expect_enq, multinode, expect_on_device;
static struct twohop_pvars pv;

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "rank %d: %s: %s (line %d)\n", rank, #x, cudaGetErrorString(e_),  \
                    __LINE__);                                                                 \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                      \
        }                                                                                      \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
    failures++;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Sum over ranks r of (r + 1 + off) + i % 7: base p(p+1)/2 + p * off, scale p. */
static float sum_base(float off) { return size * (size + 1) / 2.0f + size * off; }

static unsigned long long *d_errors;

/* Checks buf (n floats) on stream s against the expected sum; adds to failures on mismatch. */
static void check_on(const float *buf, long long n, float off, cudaStream_t s, const char *what) {
    CK(cudaMemsetAsync(d_errors, 0, sizeof(*d_errors), s));
    if (enqueue_test_check(buf, n, sum_base(off), (float)size, d_errors, s) != 0) fail(what);
    unsigned long long bad = 0;
    CK(cudaMemcpyAsync(&bad, d_errors, sizeof(bad), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    if (bad) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %llu wrong elements of %lld", what, bad, n);
        fail(msg);
    }
}

static unsigned long long enqueued(void) { return twohop_pvars_read(&pv).enqueued; }

static unsigned long long enqueued_mn(void) { return twohop_pvars_read(&pv).enq_multinode; }

static void expect_count(unsigned long long before, unsigned long long want, const char *what) {
    unsigned long long got = enqueued() - before;
    if (expect_enq && got != want) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %llu calls stayed on the stream, expected %llu", what, got,
                 want);
        fail(msg);
    }
}

static void case_ordering(void) {
    const long long n = 1 << 20;
    float *in, *out;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&in, n * sizeof(float)));
    CK(cudaMalloc((void **)&out, n * sizeof(float)));
    CK(cudaMemset(out, 0, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    // First call on these buffers, while a producer runs: twohop maps the peers' buffers
    // (CUDA IPC) and registers the node's flags with the driver once, which may wait for the
    // device. Timed and reported, not checked.
    if (enqueue_test_produce(in, n, (float)(rank + 1), 100000000ull, s) != 0) fail("producer");
    double t0 = now_s();
    if (twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("ordering: first enqueue returned an error");
    }
    const double first_ms = (now_s() - t0) * 1e3;
    check_on(out, n, 0, s, "ordering: first result");
    CK(cudaMemset(out, 0, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    MPI_Barrier(MPI_COMM_WORLD);
    const unsigned long long before = enqueued();
    const unsigned long long hop1_before = twohop_pvars_read(&pv).gpu_hop1;
    const unsigned long long spin_ns = 300000000ull;
    if (enqueue_test_produce(in, n, (float)(rank + 1), spin_ns, s) != 0) fail("producer launch");
    t0 = now_s();
    if (twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("ordering: enqueue returned an error");
    }
    const double ret_ms = (now_s() - t0) * 1e3;
    const bool busy = cudaStreamQuery(s) == cudaErrorNotReady;
    check_on(out, n, 0, s, "ordering: result");
    double worst = 0, worst_first = 0;
    MPI_Allreduce(&ret_ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&first_ms, &worst_first, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ordering: enqueue returned after %.2f ms (slowest rank) while the 300 ms producer "
               "ran: %s; first call on new buffers (100 ms producer) %.2f ms\n", worst,
               busy ? "stream still busy" : "stream already idle", worst_first);
    }
    if (expect_enq && (ret_ms > 150 || !busy)) fail("ordering: the enqueue call waited for the GPU");
    expect_count(before, 1, "ordering");
    if (expect_on_device) {
        // The call's host side (the proxy thread) counts it once it has read the stream's end.
        const double t_end = now_s() + 5;
        while (twohop_pvars_read(&pv).gpu_hop1 == hop1_before && now_s() < t_end) {
        }
        if (twohop_pvars_read(&pv).gpu_hop1 == hop1_before) {
            fail("ordering: the call did not run hop 1 on the GPU (coll_twohop_gpu_hop1_calls)");
        }
    }
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(s));
}

static void case_outstanding(void) {
    enum { C = 3, K = 8 };
    MPI_Comm comm[C];
    cudaStream_t s[C];
    float *in[C][K], *out[C][K];
    long long n[K];
    for (int j = 0; j < C; j++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comm[j]);
        CK(cudaStreamCreateWithFlags(&s[j], cudaStreamNonBlocking));
    }
    for (int k = 0; k < K; k++) {
        n[k] = 1000 + 4099LL * k + 3; // odd counts, not multiples of 16 bytes
        for (int j = 0; j < C; j++) {
            CK(cudaMalloc((void **)&in[j][k], n[k] * sizeof(float)));
            CK(cudaMalloc((void **)&out[j][k], n[k] * sizeof(float)));
        }
    }
    CK(cudaDeviceSynchronize());
    // The first call on each communicator sets it up (collective, host side): do it first.
    for (int j = 0; j < C; j++) {
        float x = 1, y;
        MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, comm[j]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const unsigned long long before = enqueued();
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < C; j++) {
            const float off = (float)(10 * j + k);
            const bool in_place = k % 2 == 1;
            float *src = in_place ? out[j][k] : in[j][k];
            if (enqueue_test_produce(src, n[k], rank + 1 + off, 1000000ull, s[j]) != 0) {
                fail("outstanding: producer launch");
            }
            if (twohop_allreduce_enqueue(in_place ? MPI_IN_PLACE : src, out[j][k], (int)n[k],
                                         MPI_FLOAT, MPI_SUM, comm[j], s[j]) != MPI_SUCCESS) {
                fail("outstanding: enqueue returned an error");
            }
        }
    }
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < C; j++) {
            char what[64];
            snprintf(what, sizeof what, "outstanding comm %d call %d", j, k);
            check_on(out[j][k], n[k], (float)(10 * j + k), s[j], what);
        }
    }
    expect_count(before, C * K, "outstanding");
    for (int j = 0; j < C; j++) {
        for (int k = 0; k < K; k++) {
            CK(cudaFree(in[j][k]));
            CK(cudaFree(out[j][k]));
        }
        CK(cudaStreamDestroy(s[j]));
        MPI_Comm_free(&comm[j]);
    }
}

/* Two calls on one communicator, each on its own stream, that reach the GPU in opposite
 * orders on neighbouring local ranks: a 200 ms producer holds back the first call's stream on
 * half of the ranks and the second call's on the others. Each call must wait for its own
 * inputs on every rank (a call that read another call's handshake would sum a peer's stale
 * input) and both results must be exact. */
static void case_unordered(void) {
    const long long n = 1 << 20;
    float *in[2], *out[2];
    cudaStream_t s[2];
    for (int j = 0; j < 2; j++) {
        CK(cudaStreamCreateWithFlags(&s[j], cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&in[j], n * sizeof(float)));
        CK(cudaMalloc((void **)&out[j], n * sizeof(float)));
        CK(cudaMemset(in[j], 0, n * sizeof(float)));
        CK(cudaMemset(out[j], 0, n * sizeof(float)));
    }
    CK(cudaDeviceSynchronize());
    // Warm rounds: each call alone, its stream drained before the next, until every rank saw
    // both run hop 1 on the GPU (the peers' buffers mapped) or 3 rounds passed. The count of
    // rounds is agreed (MPI_MIN of every rank's outcome), so every rank makes the same calls.
    for (int round = 0; round < 3; round++) {
        int warm = 1;
        for (int j = 0; j < 2; j++) {
            const unsigned long long h0 = twohop_pvars_read(&pv).gpu_hop1;
            if (enqueue_test_produce(in[j], n, (float)(rank + 1 + j), 0, s[j]) != 0 ||
                twohop_allreduce_enqueue(in[j], out[j], (int)n, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD, s[j]) != MPI_SUCCESS) {
                fail("unordered: warm call");
            }
            check_on(out[j], n, (float)j, s[j], "unordered: warm call");
            const double t_end = now_s() + 5;
            while (expect_on_device && twohop_pvars_read(&pv).gpu_hop1 == h0 && now_s() < t_end) {
            }
            if (twohop_pvars_read(&pv).gpu_hop1 == h0) warm = 0;
        }
        int all = 0;
        MPI_Allreduce(&warm, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (all || !expect_on_device) break;
    }
    for (int j = 0; j < 2; j++) CK(cudaMemset(out[j], 0, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    // Neighbours differ whether ranks are dealt to nodes in blocks or round robin.
    const int late = ((rank / 2) + rank) % 2;
    const unsigned long long hop1_before = twohop_pvars_read(&pv).gpu_hop1;
    const unsigned long long before = enqueued();
    MPI_Barrier(MPI_COMM_WORLD);
    for (int j = 0; j < 2; j++) {
        const unsigned long long ns = j == late ? 200000000ull : 1000000ull;
        if (enqueue_test_produce(in[j], n, (float)(rank + 1 + j), ns, s[j]) != 0) {
            fail("unordered: producer launch");
        }
        if (twohop_allreduce_enqueue(in[j], out[j], (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                     s[j]) != MPI_SUCCESS) {
            fail("unordered: enqueue returned an error");
        }
    }
    check_on(out[0], n, 0, s[0], "unordered: first call");
    check_on(out[1], n, 1, s[1], "unordered: second call");
    expect_count(before, 2, "unordered");
    if (expect_on_device) {
        const double t_end = now_s() + 5;
        while (twohop_pvars_read(&pv).gpu_hop1 < hop1_before + 2 && now_s() < t_end) {
        }
        if (twohop_pvars_read(&pv).gpu_hop1 < hop1_before + 2) {
            fail("unordered: the calls did not both run hop 1 on the GPU");
        }
    }
    for (int j = 0; j < 2; j++) {
        CK(cudaFree(in[j]));
        CK(cudaFree(out[j]));
        CK(cudaStreamDestroy(s[j]));
    }
}

/* Small calls (4 B - 8 KiB: the latency path, through a host copy on several nodes, by the
 * th_stage kernel up to coll_twohop_enqueue_stage_kernel_max_bytes), back to back on one stream,
 * every second one in place, every third one at a 4-byte offset (word copies narrower than 16
 * bytes): each result exact. */
static void case_small(void) {
    static const long long counts[] = {1, 3, 17, 255, 1023, 2047, 2, 1000};
    enum { K = sizeof(counts) / sizeof(counts[0]) };
    float *in[K], *out[K];
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int k = 0; k < K; k++) {
        CK(cudaMalloc((void **)&in[k], (counts[k] + 1) * sizeof(float)));
        CK(cudaMalloc((void **)&out[k], (counts[k] + 1) * sizeof(float)));
    }
    CK(cudaDeviceSynchronize());
    const unsigned long long before = enqueued();
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < K; k++) {
        const int shift = k % 3 == 2 ? 1 : 0;
        const bool in_place = k % 2 == 1;
        float *dst = out[k] + shift, *src = in_place ? dst : in[k] + shift;
        if (enqueue_test_produce(src, counts[k], rank + 1 + (float)k, 0, s) != 0) {
            fail("small: producer launch");
        }
        if (twohop_allreduce_enqueue(in_place ? MPI_IN_PLACE : src, dst, (int)counts[k],
                                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) != MPI_SUCCESS) {
            fail("small: enqueue returned an error");
        }
    }
    for (int k = 0; k < K; k++) {
        char what[64];
        snprintf(what, sizeof what, "small: %lld floats", counts[k]);
        check_on(out[k] + (k % 3 == 2 ? 1 : 0), counts[k], (float)k, s, what);
    }
    expect_count(before, K, "small");
    for (int k = 0; k < K; k++) {
        CK(cudaFree(in[k]));
        CK(cudaFree(out[k]));
    }
    CK(cudaStreamDestroy(s));
}

static void case_mixed(void) {
    const long long n = 300001;
    float *a, *b, *c, *d;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&a, n * sizeof(float)));
    CK(cudaMalloc((void **)&b, n * sizeof(float)));
    CK(cudaMalloc((void **)&c, n * sizeof(float)));
    CK(cudaMalloc((void **)&d, n * sizeof(float)));
    if (enqueue_test_produce(c, n, (float)(rank + 1 + 5), 0, s) != 0) fail("mixed: producer");
    CK(cudaStreamSynchronize(s));
    const unsigned long long before = enqueued();
    if (enqueue_test_produce(a, n, (float)(rank + 1), 100000000ull, s) != 0) fail("mixed: producer");
    if (twohop_allreduce_enqueue(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("mixed: enqueue returned an error");
    }
    // Blocking call right after, on the same communicator, other buffers.
    if (MPI_Allreduce(c, d, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fail("mixed: MPI_Allreduce returned an error");
    }
    check_on(b, n, 0, s, "mixed: enqueued result");
    check_on(d, n, 5, s, "mixed: blocking result");
    expect_count(before, 1, "mixed");
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

static void case_host_rank(void) {
    const long long n = 4099;
    float *in, *out;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const bool host = rank == 0;
    if (host) {
        in = malloc(n * sizeof(float));
        out = malloc(n * sizeof(float));
        for (long long i = 0; i < n; i++) in[i] = (float)(rank + 1) + (float)(i % 7);
    } else {
        CK(cudaMalloc((void **)&in, n * sizeof(float)));
        CK(cudaMalloc((void **)&out, n * sizeof(float)));
        if (enqueue_test_produce(in, n, (float)(rank + 1), 50000000ull, s) != 0) fail("host_rank");
    }
    const unsigned long long before = enqueued();
    if (twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("host_rank: enqueue returned an error");
    }
    if (host) {
        for (long long i = 0; i < n; i++) {
            if (out[i] != sum_base(0) + size * (float)(i % 7)) {
                fail("host_rank: host result");
                break;
            }
        }
        free(in);
        free(out);
    } else {
        check_on(out, n, 0, s, "host_rank: device result");
        CK(cudaFree(in));
        CK(cudaFree(out));
    }
    expect_count(before, multinode && !host ? 1 : 0, "host_rank");
    CK(cudaStreamDestroy(s));
}

static void case_forms(void) {
    const long long n = 65537;
    float *in, *out;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&in, n * sizeof(float)));
    CK(cudaMalloc((void **)&out, n * sizeof(float)));
    // The producer delays the input by ~50 ms: a GPU path taken across the two forms would
    // read the stream-ordered ranks' inputs before they exist.
    if (enqueue_test_produce(in, n, (float)(rank + 1), 50000000ull, s) != 0) fail("forms");
    const unsigned long long before = enqueued();
    int rc;
    if (rank == 0) {
        CK(cudaStreamSynchronize(s));
        rc = MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
        rc = twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s);
    }
    if (rc != MPI_SUCCESS) fail("forms: the call returned an error");
    check_on(out, n, 0, s, "forms: result");
    expect_count(before, multinode && rank != 0 ? 1 : 0, "forms");
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(s));
}

static void case_pool(void) {
    const long long n = 1 << 18;
    float *in, *out;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMallocAsync((void **)&in, n * sizeof(float), s));
    CK(cudaMallocAsync((void **)&out, n * sizeof(float), s));
    if (enqueue_test_produce(in, n, (float)(rank + 1), 50000000ull, s) != 0) fail("pool: producer");
    const unsigned long long before = enqueued();
    if (twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("pool: enqueue returned an error");
    }
    check_on(out, n, 0, s, "pool: result");
    expect_count(before, 1, "pool");
    CK(cudaFreeAsync(in, s));
    CK(cudaFreeAsync(out, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

static void case_errors(void) {
    float *buf;
    CK(cudaMalloc((void **)&buf, 64));
    cudaStream_t s = NULL;
    if (twohop_allreduce_enqueue(buf, buf + 8, -1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) ==
        MPI_SUCCESS) {
        fail("errors: count -1 accepted");
    }
    if (twohop_allreduce_enqueue(buf, MPI_IN_PLACE, 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) ==
        MPI_SUCCESS) {
        fail("errors: recvbuf MPI_IN_PLACE accepted");
    }
    CK(cudaFree(buf));
}

static void case_event(void) {
    const long long n = (1 << 20) + 3;
    float *in, *out, *host;
    cudaStream_t s, s2;
    cudaEvent_t ev;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaMalloc((void **)&in, n * sizeof(float)));
    CK(cudaMalloc((void **)&out, n * sizeof(float)));
    CK(cudaMemset(out, 0, n * sizeof(float)));
    CK(cudaMallocHost((void **)&host, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    if (enqueue_test_produce(in, n, (float)(rank + 1), 50000000ull, s) != 0) fail("event: producer");
    if (twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
        MPI_SUCCESS) {
        fail("event: enqueue returned an error");
    }
    CK(cudaEventRecord(ev, s));
    CK(cudaStreamWaitEvent(s2, ev, 0)); // a consumer on another stream
    check_on(out, n, 0, s2, "event: consumer on another stream");
    CK(cudaEventSynchronize(ev));       // the host after the event
    CK(cudaMemcpy(host, out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (long long i = 0; i < n; i++) {
        if (host[i] != sum_base(0) + size * (float)(i % 7)) {
            fail("event: host read after cudaEventSynchronize");
            break;
        }
    }
    CK(cudaFreeHost(host));
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(s2));
}

/* The size table (usage above). */
/* What precedes a timed call on the idle stream (idle_return). */
enum idle_kind {
    IDLE_AFTER_SAME, /* right after a call of its size (return_idle) */
    IDLE_AFTER_SMALL, /* right after an 8-byte call (return_warm) */
    IDLE_SETTLED,    /* a call of its size, then 20 ms asleep (return_settled, --idle-probe) */
    IDLE_SWEPT,      /* an 8-byte call, then 256 MiB of host memory written (return_swept) */
    IDLE_SPUN        /* a call of its size, then 20 ms of the thread spinning (return_spun) */
};

/* Host memory that IDLE_SWEPT writes before the call: the host's caches hold none of what the
 * call's own code and data need afterwards. */
static char *sweep_buf;
static const size_t sweep_bytes = (size_t)256 << 20;

/* The return time of a call of n floats issued on the idle stream s, the ranks entering
 * together, after what `kind` says: median of 9 of the slowest rank, s. floor: the launch of
 * an empty kernel of 4 blocks (the call kernel's grid at its defaults) in the call's place,
 * after the same (the call of its size run first, untimed): what any stream-ordered work pays
 * the driver in that state. */
static double idle_return(float *in, float *out, int n, cudaStream_t s, enum idle_kind kind,
                          bool floor) {
    double t[9];
    for (int k = 0; k < 9; k++) {
        if (floor && (kind == IDLE_AFTER_SAME || kind == IDLE_SETTLED || kind == IDLE_SPUN) &&
            twohop_allreduce_enqueue(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
                MPI_SUCCESS) {
            fail("sizes: enqueue returned an error");
        }
        CK(cudaStreamSynchronize(s));
        if (kind == IDLE_SETTLED) usleep(20000);
        if (kind == IDLE_SPUN) { // the host busy, the GPU and the driver idle
            const double t0 = now_s();
            while (now_s() - t0 < 0.02) {
            }
        }
        if (kind == IDLE_AFTER_SMALL || kind == IDLE_SWEPT) {
            if (twohop_allreduce_enqueue(in, out, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
                MPI_SUCCESS) {
                fail("sizes: enqueue returned an error");
            }
            CK(cudaStreamSynchronize(s));
        }
        if (kind == IDLE_SWEPT) { // the thread stays busy: its core does not sleep meanwhile
            if (sweep_buf == NULL && (sweep_buf = malloc(sweep_bytes)) == NULL) {
                fail("sizes: no memory for the cache sweep");
            }
            memset(sweep_buf, k + 1, sweep_bytes);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        const double c0 = now_s();
        if (floor) {
            if (enqueue_test_compute(0, 4, s) != 0) fail("sizes: empty kernel launch failed");
        } else if (twohop_allreduce_enqueue(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
                   MPI_SUCCESS) {
            fail("sizes: enqueue returned an error");
        }
        double r = now_s() - c0;
        MPI_Allreduce(&r, &t[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    CK(cudaStreamSynchronize(s));
    for (int i = 1; i < 9; i++) { // insertion sort
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    }
    return t[4];
}

static int sizes(int argc, char **argv) {
    long long max_bytes = 256LL << 20;
    bool probe = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = atoll(argv[++i]);
        if (!strcmp(argv[i], "--idle-probe")) probe = true;
    }
    float *in, *out;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&in, max_bytes));
    CK(cudaMalloc((void **)&out, max_bytes));
    CK(cudaMemset(in, 0, max_bytes));
    CK(cudaDeviceSynchronize());
    if (rank == 0) {
        printf("# %d ranks; us: enqueue call return (median of rank 0's calls; max over calls and "
               "ranks: includes waits for a free host copy beyond 4 calls in flight), return "
               "of a call issued on an idle stream (median of 9, slowest rank), the same "
               "right after an 8-byte call (return_warm), enqueued per "
               "call (back to back), blocking MPI_Allreduce per call; ratio "
               "enqueued/blocking\n", size);
        if (probe) {
            printf("# --idle-probe: return_settled: after a call of its size and 20 ms asleep; "
                   "return_swept: after an 8-byte call and 256 MiB of host memory written "
                   "(median of 9, slowest rank, us); return_spun: after a call of its size "
                   "and 20 ms of the thread spinning; launch_i/w/set/sw/sp: an empty kernel's "
                   "launch in the call's place after the same as return_idle, _warm, _settled, "
                   "_swept, _spun\n");
        }
        printf("%-12s %10s %12s %12s %12s %12s %12s %8s", "bytes", "return_p50", "return_max",
               "return_idle", "return_warm", "enqueued", "blocking", "ratio");
        if (probe) {
            printf(" %14s %12s %11s   %s", "return_settled", "return_swept", "return_spun",
                   "launch_i/w/set/sw/sp");
        }
        printf("\n");
    }
    for (long long bytes = 8; bytes <= max_bytes;
         bytes = bytes * 4 > max_bytes && bytes < max_bytes ? max_bytes : bytes * 4) {
        const int n = (int)(bytes / 4 > 0 ? bytes / 4 : 1);
        const int calls = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
        // warm-up: as many calls as are timed (every host copy sized, IPC mappings made)
        for (int k = 0; k < calls; k++) {
            if (twohop_allreduce_enqueue(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
                MPI_SUCCESS) {
                fail("sizes: enqueue returned an error");
            }
        }
        CK(cudaStreamSynchronize(s));
        MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double ret_max = 0, t_enq = 1e30, t_blk = 1e30, rets[150];
        int nret = 0;
        for (int rep = 0; rep < 3; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_s();
            for (int k = 0; k < calls; k++) {
                const double c0 = now_s();
                if (twohop_allreduce_enqueue(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, s) !=
                    MPI_SUCCESS) {
                    fail("sizes: enqueue returned an error");
                }
                const double r = now_s() - c0;
                if (r > ret_max) ret_max = r;
                if (nret < 150) rets[nret++] = r;
            }
            CK(cudaStreamSynchronize(s));
            double dt = now_s() - t0, worst;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (worst < t_enq) t_enq = worst;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = now_s();
            for (int k = 0; k < calls; k++) {
                if (MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
                    fail("sizes: MPI_Allreduce returned an error");
                }
            }
            dt = now_s() - t0;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (worst < t_blk) t_blk = worst;
        }
        // The return of a call that finds its stream idle and no call in flight (the ranks
        // enter together): what the call itself costs the calling thread, without the wait
        // for a free host copy that back-to-back calls reach once 4 are in flight; then the
        // same right after an 8-byte call (whatever the previous call of this size left
        // behind on the host -- its proxy job, the caches its hop 2 swept -- is gone: what
        // remains grows with the size only if the call's own work does).
        const double idle = idle_return(in, out, n, s, IDLE_AFTER_SAME, false);
        const double warm = idle_return(in, out, n, s, IDLE_AFTER_SMALL, false);
        double settled = 0, swept = 0, spun = 0, fl[5] = {0, 0, 0, 0, 0};
        if (probe) {
            settled = idle_return(in, out, n, s, IDLE_SETTLED, false);
            swept = idle_return(in, out, n, s, IDLE_SWEPT, false);
            spun = idle_return(in, out, n, s, IDLE_SPUN, false);
            for (int kd = 0; kd < 5; kd++) fl[kd] = idle_return(in, out, n, s, kd, true);
        }
        double ret_all = 0;
        MPI_Allreduce(&ret_max, &ret_all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (int i = 1; i < nret; i++) { // insertion sort
            for (int j = i; j > 0 && rets[j] < rets[j - 1]; j--) {
                const double x = rets[j];
                rets[j] = rets[j - 1];
                rets[j - 1] = x;
            }
        }
        if (rank == 0) {
            printf("%-12lld %10.1f %12.1f %12.1f %12.1f %12.1f %12.1f %8.2f", bytes,
                   rets[nret / 2] * 1e6, ret_all * 1e6, idle * 1e6, warm * 1e6,
                   t_enq / calls * 1e6, t_blk / calls * 1e6, t_enq / t_blk);
            if (probe) {
                printf(" %14.1f %12.1f %11.1f   %5.1f %5.1f %5.1f %5.1f %5.1f", settled * 1e6,
                       swept * 1e6, spun * 1e6, fl[0] * 1e6, fl[1] * 1e6, fl[2] * 1e6,
                       fl[3] * 1e6, fl[4] * 1e6);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    free(sweep_buf);
    sweep_buf = NULL;
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(s));
    return 0;
}

/* Median of 5 runs of fn (slowest rank's time, seconds). */
static double timed(void (*fn)(void *), void *arg) {
    double t[5];
    for (int i = 0; i < 5; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        fn(arg);
        double dt = MPI_Wtime() - t0, worst;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[i] = worst;
    }
    for (int i = 1; i < 5; i++) { // insertion sort
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    }
    return t[2];
}

struct overlap_args {
    bool blocking, do_compute, do_allreduce;
    int calls, blocks;
    long long n;
    unsigned long long compute_ns;
    float *in, *out;
    cudaStream_t sc, sa;
};

static void overlap_run(void *p) {
    struct overlap_args *a = p;
    if (a->do_compute && enqueue_test_compute(a->compute_ns, a->blocks, a->sc) != 0) {
        fail("compute launch");
    }
    for (int k = 0; a->do_allreduce && k < a->calls; k++) {
        int rc = a->blocking
                     ? MPI_Allreduce(a->in, a->out, (int)a->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
                     : twohop_allreduce_enqueue(a->in, a->out, (int)a->n, MPI_FLOAT, MPI_SUM,
                                                MPI_COMM_WORLD, a->sa);
        if (rc != MPI_SUCCESS) fail("overlap: allreduce returned an error");
    }
    CK(cudaStreamSynchronize(a->sa));
    CK(cudaStreamSynchronize(a->sc));
}

static int overlap(int argc, char **argv) {
    struct overlap_args a = {0};
    a.calls = 8;
    a.n = (16 << 20) / 4;
    double compute_ms = 20;
    int per_sm = 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--blocking")) a.blocking = true;
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) a.n = atoll(argv[++i]) / 4;
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc) a.calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compute-ms") && i + 1 < argc) compute_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--blocks-per-sm") && i + 1 < argc) per_sm = atoi(argv[++i]);
    }
    a.compute_ns = (unsigned long long)(compute_ms * 1e6);
    int dev, sms;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    a.blocks = sms * (per_sm > 0 ? per_sm : 1);
    CK(cudaMalloc((void **)&a.in, a.n * sizeof(float)));
    CK(cudaMalloc((void **)&a.out, a.n * sizeof(float)));
    CK(cudaMemset(a.in, 0, a.n * sizeof(float)));
    CK(cudaStreamCreateWithFlags(&a.sc, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&a.sa, cudaStreamNonBlocking));
    CK(cudaDeviceSynchronize());
    a.do_allreduce = true; // warm-up: set-up, IPC mappings
    overlap_run(&a);
    a.do_compute = true, a.do_allreduce = false;
    const double tc = timed(overlap_run, &a);
    a.do_compute = false, a.do_allreduce = true;
    const double ta = timed(overlap_run, &a);
    a.do_compute = true;
    const double tb = timed(overlap_run, &a);
    const double shorter = tc < ta ? tc : ta;
    if (rank == 0) {
        printf("overlap: %d ranks, %s, %d x %lld B allreduces; compute alone %.2f ms (%d blocks), "
               "allreduces alone %.2f ms, together %.2f ms, sum %.2f ms: overlap %.0f%% of the "
               "shorter\n", size, a.blocking ? "blocking MPI_Allreduce" : "enqueued", a.calls,
               a.n * 4, tc * 1e3, a.blocks, ta * 1e3, tb * 1e3, (tc + ta) * 1e3,
               100.0 * (tc + ta - tb) / shorter);
    }
    CK(cudaFree(a.in));
    CK(cudaFree(a.out));
    CK(cudaStreamDestroy(a.sc));
    CK(cudaStreamDestroy(a.sa));
    return 0;
}

/* Ends the capture begun on s; fails when twohop invalidated it (a wait or a synchronous copy
 * on the capturing stream would have). */
static void end_capture(cudaStream_t s, const char *what) {
    cudaGraph_t g = NULL;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: the capture was invalidated (%s)", what,
                 cudaGetErrorString(e));
        fail(msg);
        (void)cudaGetLastError();
    }
    if (g) CK(cudaGraphDestroy(g));
}

/* A call on a stream being captured into a CUDA graph is refused with an error on every rank,
 * not captured (a replay would skip its host half) and not waited for (that would invalidate
 * the capture): first with every rank capturing (relaxed mode), then with rank 0 alone
 * capturing (global mode), where the other ranks learn it from their call or, for a call that
 * stayed on the stream, from the next call on the communicator. Each round on a communicator
 * of its own, which the refusal poisons; MPI_COMM_WORLD stays usable (checked after). */
static void case_capture(void) {
    const long long n = 65537;
    float *in, *out, *out0;
    cudaStream_t s, s0;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&in, n * sizeof(float)));
    CK(cudaMalloc((void **)&out, n * sizeof(float)));
    CK(cudaMalloc((void **)&out0, n * sizeof(float)));
    if (enqueue_test_produce(in, n, (float)(rank + 1), 0, s) != 0) fail("capture: producer");
    CK(cudaStreamSynchronize(s));
    for (int round = 0; round < 2; round++) {
        MPI_Comm comm;
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        float x = 1, y;
        MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, comm); // set-up, outside the capture
        const bool capturing = round == 0 || rank == 0;
        const char *what = round == 0 ? "capture (every rank)" : "capture (rank 0 alone)";
        // A call before it, still in flight on another stream (a 50 ms producer): the refusal
        // lets it complete first, exactly.
        CK(cudaMemset(out0, 0, n * sizeof(float)));
        CK(cudaDeviceSynchronize());
        if (enqueue_test_produce(out0, n, (float)(rank + 1 + 3), 50000000ull, s0) != 0) {
            fail("capture: producer launch");
        }
        if (twohop_allreduce_enqueue(MPI_IN_PLACE, out0, (int)n, MPI_FLOAT, MPI_SUM, comm, s0) !=
            MPI_SUCCESS) {
            fail("capture: the call before the refused one returned an error");
        }
        if (capturing) {
            CK(cudaStreamBeginCapture(s, round == 0 ? cudaStreamCaptureModeRelaxed
                                                    : cudaStreamCaptureModeGlobal));
            // An empty call reads nothing: served (no-op) under capture, capture intact.
            if (twohop_allreduce_enqueue(in, out, 0, MPI_FLOAT, MPI_SUM, comm, s) != MPI_SUCCESS) {
                fail("capture: an empty call on the capturing stream returned an error");
            }
        }
        bool error = twohop_allreduce_enqueue(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm, s) !=
                     MPI_SUCCESS;
        if (capturing) {
            if (!error) {
                char msg[160];
                snprintf(msg, sizeof msg, "%s: the capturing rank's call returned MPI_SUCCESS",
                         what);
                fail(msg);
            }
            end_capture(s, what);
        }
        CK(cudaStreamSynchronize(s));
        check_on(out0, n, 3, s0, round == 0 ? "capture (every rank): the call before"
                                            : "capture (rank 0 alone): the call before");
        // Every rank must see the failure: from the call, else from the next one.
        if (MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS) error = true;
        int all = 0, me = error ? 1 : 0;
        MPI_Allreduce(&me, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all && rank == 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: a rank saw no error from the refused call", what);
            fail(msg);
        }
        MPI_Comm_free(&comm);
    }
    // The communicators the refusals poisoned are gone; MPI_COMM_WORLD is intact.
    CK(cudaMemset(out, 0, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    if (MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fail("capture: MPI_COMM_WORLD failed after the refusals");
    }
    check_on(out, n, 0, s, "capture: MPI_COMM_WORLD after the refusals");
    if (rank == 0) printf("capture: refused on every rank in both rounds: %s\n",
                          failures ? "see the failures above" : "OK");
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaFree(out0));
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(s0));
}

int main(int argc, char **argv) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    CK(cudaSetDevice(lr ? atoi(lr) % ndev : 0));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect-enqueued")) expect_enq = true;
        if (!strcmp(argv[i], "--expect-enqueued-multinode")) expect_enq = multinode = true;
        if (!strcmp(argv[i], "--expect-on-device")) expect_on_device = true;
    }
    twohop_pvars_open(&pv);
    if (expect_enq && !pv.has_enq) fail("coll_twohop_enqueued_calls not found");
    CK(cudaMalloc((void **)&d_errors, sizeof(*d_errors)));
    { // set up MPI_COMM_WORLD's twohop state before the timed case
        float x = 1, y;
        MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (argc > 1 && !strcmp(argv[1], "sizes")) {
        sizes(argc, argv);
        if (rank == 0) {
            printf("# rank 0: %llu calls stayed on the stream, %llu calls ran hop 1 on the GPU\n",
                   enqueued(), twohop_pvars_read(&pv).gpu_hop1);
        }
        CK(cudaFree(d_errors));
        twohop_pvars_close(&pv);
        MPI_Finalize();
        return failures ? 1 : 0;
    }
    if (argc > 1 && !strcmp(argv[1], "overlap")) {
        overlap(argc, argv);
        CK(cudaFree(d_errors));
        twohop_pvars_close(&pv);
        MPI_Finalize();
        return failures ? 1 : 0;
    }
    case_ordering();
    case_outstanding();
    case_unordered();
    case_small();
    case_mixed();
    case_host_rank();
    case_forms();
    case_pool();
    case_event();
    case_errors();
    case_capture();
    if (multinode && pv.has_enq_mn && enqueued_mn() != enqueued()) {
        char msg[160];
        snprintf(msg, sizeof msg, "coll_twohop_enqueued_multinode_calls %llu != "
                 "coll_twohop_enqueued_calls %llu on several nodes", enqueued_mn(), enqueued());
        fail(msg);
    }
    if (multinode && !pv.has_enq_mn) fail("coll_twohop_enqueued_multinode_calls not found");
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(&total, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("enqueue_allreduce: %d ranks, %s (%llu calls stayed on the stream on rank 0, "
               "%llu calls ran hop 1 on the GPU)\n",
               size, total ? "FAIL" : "OK", enqueued(), twohop_pvars_read(&pv).gpu_hop1);
    }
    CK(cudaFree(d_errors));
    twohop_pvars_close(&pv);
    MPI_Finalize();
    return total ? 1 : 0;
}
