/*
 * half_allreduce: bfloat16 and binary16 allreduce through include/twohop_half.h.
 *
 * usage: half_allreduce [--expect twohop|none] [--device] [--nonblocking | --persistent |
 *                       --enqueue]
 *        half_allreduce bench [--device] [--max-elems N]
 *          time per MPI_Allreduce (SUM, slowest rank, best of 5 runs) of n elements as float,
 *          bfloat16 and float16, n = 64 Ki .. N (default 64 Mi) elements x4, and the ratios
 *          bf16/float and fp16/float (half the bytes)
 *   exact     both types x SUM, PROD, MAX, MIN x counts (1, 7, 4099, 70001, 1 << 20) x in place
 *             or not: inputs whose every combination is exact (small integers, powers of two),
 *             so the expected result is known whatever the combination order, and checked bit
 *             for bit
 *   special   +Inf, NaN, -0 and subnormals (SUM): Inf + finite = Inf; NaN anywhere gives the
 *             canonical quiet NaN;
 *             -0 on every rank gives -0; one smallest subnormal per rank gives p of them
 *   bits      pseudo-random finite values (rounding happens): every rank's result is the same
 *             bit pattern (compared through MPI_BAND and MPI_BOR of the results), for every
 *             type, op and count
 *   reference every bit pattern of the type (65536) on rank 0 against a partner value on rank 1
 *             (a random pattern, or one near the first: rounding, ties, cancellation), every
 *             other rank the op's identity (-0, 1, -Inf, +Inf): the result must be
 *             twohop_half_math.h's combination of the two, bit for bit, whatever the order
 *             and topology (MAX/MIN without NaN or two zeros, whose result depends on the order
 *             by definition). Checks every conversion and rounding of the device kernels
 *             against the header's host definition.
 *   host op   the ops' host function (MPI_Reduce_local) computes twohop_half_math.h's
 *             combination
 *   derived   bfloat16 inside derived datatypes with the SUM op -- contiguous(4), a vector with
 *             gaps, a negative stride (the op's host function with that type, through twohop's
 *             user-op path or another module): exact sums, gaps untouched
 *   handles   a second file (half_other.c) gets the same datatype and op handles
 * --expect twohop: coll_twohop_allreduce_calls and coll_twohop_half_calls count every allreduce
 * of the cases and coll_twohop_fallback_calls none (twohop's kernels served them, not the ops'
 * host functions through twohop's user-op path); none: no twohop counter moves
 * (another module ran the ops' host functions: the same bits). --device: buffers in CUDA device
 * memory (built with the CUDA runtime only). --nonblocking: every allreduce of the cases as
 * MPI_Iallreduce + MPI_Wait (coll_twohop_nonblocking_calls counts them). --persistent: every
 * allreduce as a persistent allreduce (MPI_Allreduce_init, or MPIX_Allreduce_init of Open MPI
 * 4.1) started twice, once in place (coll_twohop_persistent_starts counts the starts). Exit 0
 * when every check passes on every rank. --enqueue (with --device): every allreduce through
 * twohop_allreduce_enqueue (include/twohop.h) on a stream, then cudaStreamSynchronize; it must
 * stay on the stream (coll_twohop_enqueued_calls on one node, _enqueued_multinode_calls on
 * several).
 */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TWOHOP_HALF_CUDA
#include <cuda_runtime.h>

#include "twohop.h"
#endif

#include "twohop_half.h"
#include "twohop_pvars.h"

#include "allreduce_init.h"

static int rank, size, failures, calls;
static bool device, nonblocking, persistent, enqueue;

/* MPI_Allreduce; MPI_Iallreduce + MPI_Wait with --nonblocking; with --persistent, a persistent
 * allreduce initialised, started twice (the same data: the same result; once in place) and
 * freed. */
static int reduce_call(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op) {
    MPI_Request r;
    int rc;
#ifdef TEST_ALLREDUCE_INIT
    if (persistent) {
        rc = TEST_ALLREDUCE_INIT(in, out, n, t, op, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        const int starts = in == MPI_IN_PLACE ? 1 : 2; /* in place: the input is gone */
        for (int k = 0; k < starts && rc == MPI_SUCCESS; k++) {
            rc = MPI_Start(&r);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        return rc;
    }
#endif
#ifdef TWOHOP_HALF_CUDA
    if (enqueue) { /* stream-ordered (include/twohop.h), then the host waits for the stream */
        static cudaStream_t stream;
        if (!stream && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
            return MPI_ERR_OTHER;
        }
        rc = twohop_allreduce_enqueue(in, out, n, t, op, MPI_COMM_WORLD, stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess && rc == MPI_SUCCESS) rc = MPI_ERR_OTHER;
        return rc;
    }
#endif
    if (!nonblocking) return MPI_Allreduce(in, out, n, t, op, MPI_COMM_WORLD);
    rc = MPI_Iallreduce(in, out, n, t, op, MPI_COMM_WORLD, &r);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    return rc;
}

static void fail(const char *what) {
    if (failures < 20) fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
    failures++;
}

static uint16_t from_f(int kind, float f) {
    return kind == TWOHOP_HALF_BF16 ? twohop_f32_to_bf16(f) : twohop_f32_to_f16(f);
}

/* One allreduce of n elements of `in` (host arrays; copied to the device with --device). */
static int allreduce(const uint16_t *in, uint16_t *out, int n, MPI_Datatype t, MPI_Op op,
                     bool in_place) {
    ++calls;
    if (!in_place) memset(out, 0xa5, (size_t)n * 2);
    else memcpy(out, in, (size_t)n * 2);
#ifdef TWOHOP_HALF_CUDA
    if (device) {
        void *din = NULL, *dout = NULL;
        if (cudaMalloc(&din, (size_t)n * 2) != cudaSuccess ||
            cudaMalloc(&dout, (size_t)n * 2) != cudaSuccess) {
            fail("cudaMalloc");
            return MPI_ERR_OTHER;
        }
        cudaMemcpy(din, in, (size_t)n * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(dout, out, (size_t)n * 2, cudaMemcpyHostToDevice);
        /* A copy from pageable memory may return before its DMA ends; the stream of --enqueue
         * is not ordered after the legacy stream: the inputs must be in place first. */
        cudaDeviceSynchronize();
        const int rc = reduce_call(in_place ? MPI_IN_PLACE : din, dout, n, t, op);
        cudaMemcpy(out, dout, (size_t)n * 2, cudaMemcpyDeviceToHost);
        cudaFree(din);
        cudaFree(dout);
        return rc;
    }
#endif
    return reduce_call(in_place ? MPI_IN_PLACE : in, out, n, t, op);
}

/* Exact inputs: element i of rank r, for op h; the expected result. */
static float exact_in(int h, int r, int i) {
    switch (h) {
    case TWOHOP_HALF_SUM: return (float)((r + 1) + (i % 5)) - 2.0f; /* sums <= a few hundred */
    case TWOHOP_HALF_PROD: return ((i + r) % 7 == 0) ? 2.0f : ((i + 2 * r) % 11 == 0 ? -1.0f : 1.0f);
    case TWOHOP_HALF_MAX:
    default: return (float)(((r * 7 + i) % 13) - 6);
    }
}
static float exact_out(int h, int i) {
    float acc = exact_in(h, 0, i);
    for (int r = 1; r < size; ++r) {
        const float x = exact_in(h, r, i);
        if (h == TWOHOP_HALF_SUM) acc += x;
        else if (h == TWOHOP_HALF_PROD) acc *= x;
        else if (h == TWOHOP_HALF_MAX) acc = x > acc ? x : acc;
        else acc = x < acc ? x : acc;
    }
    return acc;
}

static void case_exact(void) {
    const int counts[] = {1, 7, 4099, 70001, 1 << 20};
    const MPI_Op bases[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    for (int kind = 1; kind <= 2; ++kind) {
        MPI_Datatype t = kind == 1 ? twohop_type_bfloat16() : twohop_type_float16();
        for (int h = 0; h < 4; ++h) {
            MPI_Op op = twohop_half_op(bases[h], t);
            if (op == MPI_OP_NULL) {
                fail("twohop_half_op returned MPI_OP_NULL");
                continue;
            }
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
                const int n = counts[c];
                uint16_t *in = malloc((size_t)n * 2), *out = malloc((size_t)n * 2);
                for (int i = 0; i < n; ++i) in[i] = from_f(kind, exact_in(h, rank, i));
                for (int ip = 0; ip < 2; ++ip) {
                    if (allreduce(in, out, n, t, op, ip) != MPI_SUCCESS) fail("exact: MPI error");
                    for (int i = 0; i < n; ++i) {
                        const uint16_t want = from_f(kind, exact_out(h, i));
                        if (out[i] != want) {
                            char msg[160];
                            snprintf(msg, sizeof msg, "exact: %s op %d n %d in_place %d: [%d] = "
                                     "0x%04x, expected 0x%04x", kind == 1 ? "bf16" : "fp16", h,
                                     n, ip, i, out[i], want);
                            fail(msg);
                            break;
                        }
                    }
                }
                free(in);
                free(out);
            }
        }
    }
}

static void case_special(void) {
    for (int kind = 1; kind <= 2; ++kind) {
        MPI_Datatype t = kind == 1 ? twohop_type_bfloat16() : twohop_type_float16();
        MPI_Op sum = twohop_half_op(MPI_SUM, t);
        const uint16_t pinf = kind == 1 ? 0x7f80 : 0x7c00, qnan = kind == 1 ? 0x7fc0 : 0x7e00;
        const uint16_t expmask = pinf, nzero = 0x8000, one = kind == 1 ? 0x3f80 : 0x3c00;
        enum { N = 4 };
        uint16_t in[N], out[N];
        in[0] = rank == 0 ? pinf : one;        /* Inf + finite */
        in[1] = rank == size - 1 ? qnan : one; /* NaN anywhere */
        in[2] = nzero;                         /* -0 everywhere */
        in[3] = 0x0001;                        /* smallest subnormal */
        if (allreduce(in, out, N, t, sum, false) != MPI_SUCCESS) fail("special: MPI error");
        if (out[0] != pinf) fail("special: Inf + finite is not +Inf");
        if (out[1] != qnan) fail("special: a NaN input did not give the canonical quiet NaN");
        (void)expmask;
        if (out[2] != nzero) fail("special: -0 on every rank did not give -0");
        if (out[3] != (uint16_t)size) fail("special: subnormals were not kept");
    }
}

/* Every bit pattern against a partner (see the header comment). */
static void case_reference(void) {
    enum { N = 2 * 65536 };
    const MPI_Op bases[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *in = malloc(N * 2), *out = malloc(N * 2);
    for (int kind = 1; kind <= 2; ++kind) {
        MPI_Datatype t = kind == 1 ? twohop_type_bfloat16() : twohop_type_float16();
        uint16_t (*combine)(int, uint16_t, uint16_t) =
            kind == 1 ? twohop_bf16_combine : twohop_f16_combine;
        const uint16_t expmask = kind == 1 ? 0x7f80 : 0x7c00, near = kind == 1 ? 0x03ff : 0x0fff;
        const uint16_t ident[4] = {0x8000, kind == 1 ? 0x3f80 : 0x3c00, 0x8000 | expmask, expmask};
        for (int h = 0; h < 4; ++h) {
            MPI_Op op = twohop_half_op(bases[h], t);
            uint32_t x = 12345u + (uint32_t)(kind * 4 + h); /* the same on every rank */
            for (int i = 0; i < N; ++i) {
                x = x * 1664525u + 1013904223u;
                a[i] = (uint16_t)i;
                /* first half: a random pattern; second: near a[i] (low fraction and exponent
                 * bits flipped, sign at random: rounding, ties, cancellation) */
                b[i] = i < 65536 ? (uint16_t)(x >> 16)
                                 : (uint16_t)(a[i] ^ ((x >> 16) & near) ^ ((x & 1) << 15));
                if (h >= 2) { /* order-dependent by definition: no NaN, no two zeros */
                    const int nan_a = (a[i] & expmask) == expmask && (a[i] & ~(expmask | 0x8000));
                    const int nan_b = (b[i] & expmask) == expmask && (b[i] & ~(expmask | 0x8000));
                    if (nan_a) a[i] = (uint16_t)(a[i] & 0x8000);
                    if (nan_b) b[i] = (uint16_t)(b[i] & 0x8000) ^ 0x0001;
                    if (!(a[i] & 0x7fff) && !(b[i] & 0x7fff)) b[i] = a[i];
                }
            }
            for (int i = 0; i < N; ++i) in[i] = rank == 0 ? a[i] : rank == 1 ? b[i] : ident[h];
            if (allreduce(in, out, N, t, op, false) != MPI_SUCCESS) fail("reference: MPI error");
            for (int i = 0; i < N; ++i) {
                const uint16_t want = size == 1 ? a[i] : combine(h, a[i], b[i]);
                if (out[i] != want) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "reference: %s op %d: 0x%04x op 0x%04x = 0x%04x, "
                             "expected 0x%04x", kind == 1 ? "bf16" : "fp16", h, a[i], b[i],
                             out[i], want);
                    fail(msg);
                    break;
                }
            }
        }
    }
    free(a);
    free(b);
    free(in);
    free(out);
}

static void case_bits(void) {
    const int counts[] = {3, 5000, 300001};
    const MPI_Op bases[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    for (int kind = 1; kind <= 2; ++kind) {
        MPI_Datatype t = kind == 1 ? twohop_type_bfloat16() : twohop_type_float16();
        for (int h = 0; h < 4; ++h) {
            MPI_Op op = twohop_half_op(bases[h], t);
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
                const int n = counts[c];
                uint16_t *in = malloc((size_t)n * 2), *out = malloc((size_t)n * 2);
                uint16_t *band = malloc((size_t)n * 2), *bor = malloc((size_t)n * 2);
                uint32_t x = 2654435761u * (uint32_t)(rank + 1) + (uint32_t)(h * 7 + c);
                for (int i = 0; i < n; ++i) {
                    x = x * 1664525u + 1013904223u;
                    /* finite values in [0.5, 2) with random fraction bits, random sign */
                    const float f = (1.0f + (float)(x >> 9) / 8388608.0f) * ((x & 1) ? -0.75f : 0.75f);
                    in[i] = from_f(kind, f);
                }
                if (allreduce(in, out, n, t, op, false) != MPI_SUCCESS) fail("bits: MPI error");
                MPI_Allreduce(out, band, n, MPI_UNSIGNED_SHORT, MPI_BAND, MPI_COMM_WORLD);
                MPI_Allreduce(out, bor, n, MPI_UNSIGNED_SHORT, MPI_BOR, MPI_COMM_WORLD);
                if (memcmp(band, out, (size_t)n * 2) || memcmp(bor, out, (size_t)n * 2)) {
                    char msg[120];
                    snprintf(msg, sizeof msg, "bits: %s op %d n %d: results differ between ranks",
                             kind == 1 ? "bf16" : "fp16", h, n);
                    fail(msg);
                }
                free(in);
                free(out);
                free(band);
                free(bor);
            }
        }
    }
}

/* bfloat16 inside derived datatypes with the SUM op: twohop's user-op path (or another
 * module) calls the op's host function with that type; exact sums, gap bytes untouched. */
static void derived_one(MPI_Datatype dt, int items, const char *name) {
    MPI_Aint lb, extent, tlb, textent;
    MPI_Type_get_extent(dt, &lb, &extent);
    MPI_Type_get_true_extent(dt, &tlb, &textent);
    const size_t span = (size_t)(textent + (MPI_Aint)(items - 1) * extent);
    const MPI_Aint off = 64 - tlb; /* the buffer argument; the data lies at buffer + true lb */
    char *mark = calloc(span + 128, 1), *pk;
    int psz, pos = 0;
    MPI_Pack_size(items, dt, MPI_COMM_SELF, &psz);
    pk = malloc((size_t)psz);
    memset(pk, 1, (size_t)psz);
    MPI_Unpack(pk, psz, &pos, mark + off, items, dt, MPI_COMM_SELF); /* covered bytes = 1 */
    uint16_t *in = malloc(span + 128), *out = malloc(span + 128);
    for (size_t i = 0; i < (span + 128) / 2; ++i) {
        in[i] = mark[2 * i] ? twohop_f32_to_bf16((float)(rank + 1)) : 0x7777;
        out[i] = 0x7777;
    }
    if (MPI_Allreduce((char *)in + off, (char *)out + off, items, dt,
                      twohop_half_op(MPI_SUM, twohop_type_bfloat16()), MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
        fail("derived: MPI error");
    }
    const float want = (float)(size * (size + 1) / 2);
    long wrong = 0, gaps = 0;
    for (size_t i = 0; i < (span + 128) / 2; ++i) {
        if (mark[2 * i]) wrong += twohop_bf16_to_f32(out[i]) != want;
        else gaps += out[i] != 0x7777;
    }
    if (wrong || gaps) {
        char msg[200];
        snprintf(msg, sizeof msg, "derived: %s: %ld covered elements wrong, %ld gap elements "
                 "overwritten", name, wrong, gaps);
        fail(msg);
    }
    free(mark);
    free(pk);
    free(in);
    free(out);
}

static void case_derived(void) {
    MPI_Datatype bf = twohop_type_bfloat16(), t[3];
    MPI_Type_contiguous(4, bf, &t[0]);
    MPI_Type_vector(2, 1, 2, bf, &t[1]);
    MPI_Type_create_hvector(2, 1, -2, bf, &t[2]);
    const char *names[3] = {"contiguous(4, bf16)", "vector(2, 1, 2, bf16)",
                            "hvector(2, 1, -2, bf16)"};
    for (int k = 0; k < 3; ++k) {
        MPI_Type_commit(&t[k]);
        derived_one(t[k], 1001, names[k]);
        MPI_Type_free(&t[k]);
    }
}

MPI_Datatype half_other_bf16(void);
MPI_Op half_other_bf16_sum(void);

static void case_handles(void) {
    if (half_other_bf16() != twohop_type_bfloat16() ||
        half_other_bf16_sum() != twohop_half_op(MPI_SUM, twohop_type_bfloat16())) {
        fail("handles: another file got other datatype or op handles");
    }
}

static void case_host_op(void) {
    const MPI_Op bases[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    for (int kind = 1; kind <= 2; ++kind) {
        MPI_Datatype t = kind == 1 ? twohop_type_bfloat16() : twohop_type_float16();
        for (int h = 0; h < 4; ++h) {
            enum { N = 4096 };
            uint16_t a[N], b[N];
            uint32_t x = 99u + (uint32_t)h;
            for (int i = 0; i < N; ++i) {
                x = x * 1664525u + 1013904223u;
                a[i] = (uint16_t)(x >> 16);
                b[i] = (uint16_t)x;
            }
            uint16_t want[N];
            for (int i = 0; i < N; ++i) {
                want[i] = kind == 1 ? twohop_bf16_combine(h, a[i], b[i])
                                    : twohop_f16_combine(h, a[i], b[i]);
            }
            MPI_Reduce_local(a, b, N, t, twohop_half_op(bases[h], t));
            if (memcmp(b, want, sizeof want)) fail("host op: MPI_Reduce_local differs");
        }
    }
}

static void *buffer(size_t bytes) {
    void *p = NULL;
#ifdef TWOHOP_HALF_CUDA
    if (device) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
        cudaMemset(p, 0, bytes);
        cudaDeviceSynchronize();
        return p;
    }
#endif
    p = calloc(1, bytes);
    return p;
}
static void release(void *p) {
#ifdef TWOHOP_HALF_CUDA
    if (device) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

static double time_calls(void *in, void *out, long n, MPI_Datatype t, MPI_Op op, int k) {
    double best = 1e30;
    MPI_Allreduce(in, out, (int)n, t, op, MPI_COMM_WORLD); /* warm-up */
    for (int rep = 0; rep < 5; ++rep) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < k; ++i) MPI_Allreduce(in, out, (int)n, t, op, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / k, worst;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (worst < best) best = worst;
    }
    return best;
}

static int bench(long max_elems) {
    MPI_Datatype bf = twohop_type_bfloat16(), f16 = twohop_type_float16();
    MPI_Op sbf = twohop_half_op(MPI_SUM, bf), sf16 = twohop_half_op(MPI_SUM, f16);
    void *in = buffer((size_t)max_elems * 4), *out = buffer((size_t)max_elems * 4);
    if (!in || !out) {
        fprintf(stderr, "half_allreduce bench: allocation failed\n");
        return 1;
    }
    if (rank == 0) {
        printf("# %d ranks, %s buffers; us per MPI_Allreduce(SUM), best of 5\n", size,
               device ? "device" : "host");
        printf("%-12s %12s %12s %12s %8s %8s\n", "elements", "float", "bfloat16", "float16",
               "bf16/f", "f16/f");
    }
    for (long n = 65536; n <= max_elems; n *= 4) {
        const int k = n <= (1 << 20) ? 20 : n <= (16 << 20) ? 5 : 2;
        const double tf = time_calls(in, out, n, MPI_FLOAT, MPI_SUM, k);
        const double tb = time_calls(in, out, n, bf, sbf, k);
        const double th = time_calls(in, out, n, f16, sf16, k);
        if (rank == 0) {
            printf("%-12ld %12.1f %12.1f %12.1f %8.2f %8.2f\n", n, tf * 1e6, tb * 1e6, th * 1e6,
                   tb / tf, th / tf);
            fflush(stdout);
        }
    }
    release(in);
    release(out);
    return 0;
}

int main(int argc, char **argv) {
    const char *expect = "any";
    bool do_bench = argc > 1 && !strcmp(argv[1], "bench");
    long max_elems = 64L << 20;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
        else if (!strcmp(argv[i], "--device")) device = true;
        else if (!strcmp(argv[i], "--nonblocking")) nonblocking = true;
        else if (!strcmp(argv[i], "--enqueue")) enqueue = device = true;
        else if (!strcmp(argv[i], "--persistent")) {
#ifdef TEST_ALLREDUCE_INIT
            persistent = true;
#else
            fprintf(stderr, "half_allreduce: this MPI has no persistent allreduce\n");
            return 2;
#endif
        }
        else if (!strcmp(argv[i], "--max-elems") && i + 1 < argc) max_elems = atol(argv[++i]);
    }
#ifndef TWOHOP_HALF_CUDA
    if (device || enqueue) {
        fprintf(stderr, "half_allreduce: built without the CUDA runtime (--device, --enqueue)\n");
        return 2;
    }
#endif
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (do_bench) {
        const int rc = bench(max_elems);
        MPI_Finalize();
        return rc;
    }
    struct twohop_pvars pv;
    twohop_pvars_open(&pv);
    const struct twohop_counts c0 = twohop_pvars_read(&pv);
    case_exact();
    case_special();
    case_bits();
    case_reference();
    case_host_op();
    const struct twohop_counts c1 = twohop_pvars_read(&pv);
    case_derived(); /* after the count: served through the user-op path, not the half kernels */
    case_handles();
    const unsigned long long served = c1.served - c0.served, fb = c1.fallback - c0.fallback;
    const unsigned long long half = c1.half - c0.half;
    const unsigned long long forms = nonblocking  ? c1.nonblocking - c0.nonblocking
                                     : persistent ? c1.persistent - c0.persistent
                                     : enqueue    ? (c1.enqueued - c0.enqueued) +
                                                     (c1.enq_multinode - c0.enq_multinode)
                                                  : served;
    if (!strcmp(expect, "twohop") &&
        (!pv.found || forms < (unsigned long long)calls || half < (unsigned long long)calls || fb)) {
        char msg[400];
        snprintf(msg, sizeof msg, "twohop served %llu of %d half-precision allreduces, %llu with "
                 "its half-precision kernels, %llu fallbacks (%s)", forms, calls, half, fb,
                 pv.found ? "counters read" : pv.why);
        fail(msg);
    }
    if (!strcmp(expect, "none") && pv.found && served) fail("twohop served calls: expected none");
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("half_allreduce: %d ranks, %d allreduces per rank%s, %s\n", size, calls,
               device ? " on device buffers" : "", total ? "FAIL" : "OK");
    }
    twohop_pvars_close(&pv);
    MPI_Finalize();
    return total ? 1 : 0;
}
