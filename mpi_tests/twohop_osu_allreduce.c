/*
 * twohop_osu_allreduce: MPI_Allreduce latency benchmark with osu_allreduce's flags, timing and
 * output format (OSU Micro-Benchmarks 7.x), plus a bus-bandwidth column.
 *
 * Timing (as osu_allreduce): for every size, `skip` warm-up iterations, then `iterations` timed
 * calls, each timed alone with MPI_Wtime and followed by an MPI_Barrier; every rank's mean
 * latency is reduced to rank 0 with MPI_Reduce MIN, MAX and SUM (avg = SUM / p).
 *
 * Bus bandwidth follows NCCL's convention (nccl-tests doc/PERFORMANCE.md, "AllReduce"):
 *   algbw = bytes / time,  busbw = algbw * 2 (p - 1) / p
 * i.e. the per-rank link traffic of an optimal ring allreduce; reported in GB/s (1e9 B/s) from
 * the average latency.
 */
#define _POSIX_C_SOURCE 200112L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#ifdef TWOHOP_OSU_CUDA
#include <cuda_runtime.h>
#endif

#include "twohop_pvars.h"

#define FIELD_WIDTH 18
#define FLOAT_PRECISION 2
#define LARGE_MESSAGE_SIZE 8192 /* OSU: iterations/skip switch to the "large" defaults above */
#define DEFAULT_MIN 4
#define DEFAULT_MAX (1 << 20)

/* Command line (OSU names). */
struct bench_opts {
    size_t min_size, max_size;
    int iterations, skip;             /* -1: OSU defaults by size */
    int iterations_large, skip_large; /* OSU defaults 100 / 10 */
    bool validate, full, expect_twohop;
    bool cuda; /* -d cuda: buffers in device memory (cudaMalloc), as osu_allreduce -d cuda */
    MPI_Datatype dtype;
    const char *dtype_name;
    size_t dsize;
};

/* Prints osu-style help on rank 0. */
static void print_help(void) {
    printf("Usage: twohop_osu_allreduce [options]\n"
           "  -m, --message-size [MIN:]MAX  message sizes in bytes (default %d:%d)\n"
           "  -i, --iterations ITER         timed iterations per size (default 1000, 100 above "
           "%d bytes)\n"
           "  -x, --warmup WARMUP           warm-up iterations (default 200, 10 above %d bytes)\n"
           "  -T, --type TYPE               mpi_char, mpi_int, mpi_float (default), mpi_double\n"
           "  -c, --validation              check the result of every size (exact small "
           "integers)\n"
           "  -f, --full                    print avg, min, max latency and iterations\n"
           "  -d, --accelerator cuda        buffers in CUDA device memory (builds with the CUDA "
           "toolkit only)\n"
           "      --expect-twohop           fail unless the twohop pvars show it served every "
           "call\n"
           "  -h, --help                    this help\n"
           "BusBW(GB/s) = size / avg latency * 2(p-1)/p (NCCL PERFORMANCE.md convention).\n",
           DEFAULT_MIN, DEFAULT_MAX, LARGE_MESSAGE_SIZE, LARGE_MESSAGE_SIZE);
}

/* Parses argv; returns 0, 1 for help, -1 on error (message printed by rank 0). */
static int parse(int argc, char **argv, struct bench_opts *o, int rank) {
    *o = (struct bench_opts){.min_size = DEFAULT_MIN, .max_size = DEFAULT_MAX, .iterations = -1,
                             .skip = -1, .iterations_large = 100, .skip_large = 10,
                             .dtype = MPI_FLOAT, .dtype_name = "MPI_FLOAT",
                             .dsize = sizeof(float)};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(a, "-m") || !strcmp(a, "--message-size") || !strcmp(a, "-i") ||
                     !strcmp(a, "--iterations") || !strcmp(a, "-x") || !strcmp(a, "--warmup") ||
                     !strcmp(a, "-T") || !strcmp(a, "--type") || !strcmp(a, "-d") ||
                     !strcmp(a, "--accelerator");
        if (takes && !v) {
            if (rank == 0) {
                fprintf(stderr, "twohop_osu_allreduce: %s needs a value\n", a);
            }
            return -1;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--message-size")) {
            const char *colon = strchr(v, ':');
            if (colon) {
                o->min_size = strtoull(v, NULL, 10);
                o->max_size = strtoull(colon + 1, NULL, 10);
            } else {
                o->max_size = strtoull(v, NULL, 10);
            }
            i++;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--accelerator")) {
#ifdef TWOHOP_OSU_CUDA
            if (strcmp(v, "cuda") != 0) {
                if (rank == 0) fprintf(stderr, "twohop_osu_allreduce: -d %s: only cuda\n", v);
                return -1;
            }
            o->cuda = true;
#else
            if (rank == 0) fprintf(stderr, "twohop_osu_allreduce: built without CUDA\n");
            return -1;
#endif
            i++;
        } else if (!strcmp(a, "-i") || !strcmp(a, "--iterations")) {
            o->iterations = o->iterations_large = atoi(v);
            i++;
        } else if (!strcmp(a, "-x") || !strcmp(a, "--warmup")) {
            o->skip = o->skip_large = atoi(v);
            i++;
        } else if (!strcmp(a, "-T") || !strcmp(a, "--type")) {
            static const struct {
                const char *flag, *name;
                MPI_Datatype dt;
                size_t size;
            } types[] = {{"mpi_char", "MPI_CHAR", MPI_CHAR, 1},
                         {"mpi_int", "MPI_INT", MPI_INT, sizeof(int)},
                         {"mpi_float", "MPI_FLOAT", MPI_FLOAT, sizeof(float)},
                         {"mpi_double", "MPI_DOUBLE", MPI_DOUBLE, sizeof(double)}};
            int k = 0, nt = (int)(sizeof types / sizeof types[0]);
            while (k < nt && strcmp(types[k].flag, v) != 0) {
                k++;
            }
            if (k == nt) {
                if (rank == 0) {
                    fprintf(stderr, "twohop_osu_allreduce: unknown type '%s'\n", v);
                }
                return -1;
            }
            o->dtype = types[k].dt;
            o->dtype_name = types[k].name;
            o->dsize = types[k].size;
            i++;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--validation")) {
            o->validate = true;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--full")) {
            o->full = true;
        } else if (!strcmp(a, "--expect-twohop")) {
            o->expect_twohop = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else {
            if (rank == 0) {
                fprintf(stderr, "twohop_osu_allreduce: unknown option '%s'\n", a);
            }
            return -1;
        }
    }
    if (o->min_size < 1 || o->max_size < o->min_size) {
        if (rank == 0) {
            fprintf(stderr, "twohop_osu_allreduce: bad -m range\n");
        }
        return -1;
    }
    return 0;
}

/* Input of element i on `rank`: small integers, exact in every -T type and in the sum. */
static int input_value(int rank, size_t i) {
    return (int)((i + (size_t)rank * 3) % 5);
}

/* Fills n elements of the benchmark datatype. */
static void fill(const struct bench_opts *o, void *buf, size_t n, int rank) {
    for (size_t i = 0; i < n; i++) {
        int v = input_value(rank, i);
        if (o->dtype == MPI_CHAR) {
            ((char *)buf)[i] = (char)v;
        } else if (o->dtype == MPI_INT) {
            ((int *)buf)[i] = v;
        } else if (o->dtype == MPI_FLOAT) {
            ((float *)buf)[i] = (float)v;
        } else {
            ((double *)buf)[i] = v;
        }
    }
}

/* Checks the SUM over p ranks; returns true when every element is exact. */
static bool validate(const struct bench_opts *o, const void *buf, size_t n, int p) {
    for (size_t i = 0; i < n; i++) {
        long want = 0;
        for (int r = 0; r < p; r++) {
            want += input_value(r, i);
        }
        double got;
        if (o->dtype == MPI_CHAR) {
            got = (double)((const char *)buf)[i];
            want = (long)(char)want;
        } else if (o->dtype == MPI_INT) {
            got = ((const int *)buf)[i];
        } else if (o->dtype == MPI_FLOAT) {
            got = ((const float *)buf)[i];
        } else {
            got = ((const double *)buf)[i];
        }
        if (got != (double)want) {
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    struct bench_opts o;
    int pr = parse(argc, argv, &o, rank);
    if (pr != 0) {
        if (rank == 0) {
            print_help();
        }
        MPI_Finalize();
        return pr > 0 ? 0 : 1;
    }
    struct twohop_pvars pv;
    bool have_pvars = twohop_pvars_open(&pv);
    if (p < 2 && rank == 0) {
        fprintf(stderr, "twohop_osu_allreduce: this test requires at least two processes\n");
    }

    void *sendb = NULL, *recvb = NULL, *hostb = NULL;
    if (posix_memalign(&sendb, 4096, o.max_size) || posix_memalign(&recvb, 4096, o.max_size)) {
        fprintf(stderr, "twohop_osu_allreduce: cannot allocate 2 x %zu bytes\n", o.max_size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(recvb, 0, o.max_size);
    fill(&o, sendb, o.max_size / o.dsize, rank);
#ifdef TWOHOP_OSU_CUDA
    if (o.cuda) { /* device buffers; the host ones hold the input and, later, the result */
        void *ds = NULL, *dr = NULL;
        if (cudaMalloc(&ds, o.max_size) != cudaSuccess ||
            cudaMalloc(&dr, o.max_size) != cudaSuccess ||
            cudaMemcpy(ds, sendb, o.max_size, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemset(dr, 0, o.max_size) != cudaSuccess) {
            fprintf(stderr, "twohop_osu_allreduce: CUDA allocation of 2 x %zu bytes failed\n",
                    o.max_size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(sendb);
        hostb = recvb;
        sendb = ds;
        recvb = dr;
    }
#endif

    if (rank == 0) {
        printf("# OSU MPI Allreduce Latency Test (twohop_osu_allreduce)\n");
        printf("# Datatype: %s.%s\n", o.dtype_name, o.cuda ? " Buffers: CUDA device memory." : "");
        printf("# Processes: %d. BusBW = size / avg latency * 2(p-1)/p (NCCL convention).\n", p);
        printf("%-10s%*s", "# Size", FIELD_WIDTH, "Avg Latency(us)");
        if (o.full) {
            printf("%*s%*s%*s", FIELD_WIDTH, "Min Latency(us)", FIELD_WIDTH, "Max Latency(us)", 12,
                   "Iterations");
        }
        if (o.validate) {
            printf("%*s", 12, "Validation");
        }
        printf("%*s\n", FIELD_WIDTH, "BusBW(GB/s)");
        fflush(stdout);
    }

    bool all_valid = true;
    unsigned long long calls = 0;
    struct twohop_counts c0 = twohop_pvars_read(&pv);
    size_t min = o.min_size < o.dsize ? o.dsize : o.min_size;
    for (size_t size = min; size <= o.max_size; size *= 2) {
        size_t count = size / o.dsize;
        int iters = size > LARGE_MESSAGE_SIZE ? o.iterations_large : o.iterations;
        int skip = size > LARGE_MESSAGE_SIZE ? o.skip_large : o.skip;
        if (iters < 0) {
            iters = 1000;
        }
        if (skip < 0) {
            skip = 200;
        }
        double timer = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            double t_start = MPI_Wtime();
            MPI_Allreduce(sendb, recvb, (int)count, o.dtype, MPI_SUM, MPI_COMM_WORLD);
            double t_stop = MPI_Wtime();
            if (i >= skip) {
                timer += t_stop - t_start;
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        calls += (unsigned long long)(iters + skip);
        int valid = 1, all;
        if (o.validate) {
#ifdef TWOHOP_OSU_CUDA
            if (o.cuda && cudaMemcpy(hostb, recvb, size, cudaMemcpyDeviceToHost) != cudaSuccess) {
                valid = 0;
            }
#endif
            valid = valid && validate(&o, hostb ? hostb : recvb, count, p);
            MPI_Reduce(&valid, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
            all_valid = all_valid && (rank != 0 || all);
        }
        double latency = timer * 1e6 / iters, min_t, max_t, sum_t;
        MPI_Reduce(&latency, &min_t, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&latency, &max_t, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&latency, &sum_t, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double avg = sum_t / p;
            double busbw = avg > 0 ? (double)size / (avg * 1e3) * 2.0 * (p - 1) / p : 0;
            printf("%-10zu%*.*f", size, FIELD_WIDTH, FLOAT_PRECISION, avg);
            if (o.full) {
                printf("%*.*f%*.*f%*d", FIELD_WIDTH, FLOAT_PRECISION, min_t, FIELD_WIDTH,
                       FLOAT_PRECISION, max_t, 12, iters);
            }
            if (o.validate) {
                printf("%*s", 12, all ? "Pass" : "Fail");
            }
            printf("%*.*f\n", FIELD_WIDTH, 3, busbw);
            fflush(stdout);
        }
    }

    struct twohop_counts c1 = twohop_pvars_read(&pv);
    int ok = 1;
    if (rank == 0) {
        if (have_pvars) {
            printf("# twohop: served %llu of %llu MPI_Allreduce calls on rank 0, fell back %llu, "
                   "GPU path %llu, GPU hop 1 %llu, GPU-posted %llu (doorbells %llu)\n",
                   c1.served - c0.served, calls, c1.fallback - c0.fallback, c1.gpu - c0.gpu,
                   c1.gpu_hop1 - c0.gpu_hop1, c1.posted - c0.posted,
                   c1.doorbells - c0.doorbells);
        } else {
            printf("# twohop: not loaded (%s)\n", pv.why);
        }
        if (!all_valid) {
            printf("# validation FAILED\n");
            ok = 0;
        }
        if (o.expect_twohop && (!have_pvars || c1.served - c0.served != calls)) {
            printf("# --expect-twohop: twohop did not serve every call\n");
            ok = 0;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
#ifdef TWOHOP_OSU_CUDA
    if (o.cuda) {
        cudaFree(sendb);
        cudaFree(recvb);
        sendb = recvb = NULL;
        free(hostb);
    }
#endif
    free(sendb);
    free(recvb);
    twohop_pvars_close(&pv);
    MPI_Finalize();
    return ok ? 0 : 1;
}
