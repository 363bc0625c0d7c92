/*
 * copy_bandwidth: the memory-traffic bound of an allreduce on one node, measured.
 *
 * Every rank must at least read its n-byte input and write its n-byte result, so the node
 * moves at least 2·p·n bytes per allreduce. This program times exactly that traffic: all p
 * ranks memcpy n bytes at the same time (same buffer reuse as the allreduce benchmark), and
 * reports per size the slowest rank's average copy time t_copy (µs) and the node's copy
 * bandwidth B = 2·p·n / t_copy (GB/s). An allreduce cannot beat t_copy, so
 * t_copy / t_allreduce is the achieved fraction of the bound.
 *
 * Usage: copy_bandwidth [-m [MIN:]MAX] [-i ITERS]   (sizes double from MIN to MAX bytes)
 * Output: "# Size  Copy(us)  NodeBW(GB/s)" rows, like osu_allreduce's.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    size_t min = 4, max = 16u << 20;
    int iters = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) {
            char *colon = strchr(argv[i + 1], ':');
            if (colon) {
                min = strtoull(argv[i + 1], NULL, 10);
                max = strtoull(colon + 1, NULL, 10);
            } else {
                max = strtoull(argv[i + 1], NULL, 10);
            }
        } else if (!strcmp(argv[i], "-i")) {
            iters = atoi(argv[i + 1]);
        }
    }
    if (min < 1 || max < min) {
        if (rank == 0) fprintf(stderr, "copy_bandwidth: bad -m range\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *src = malloc(max), *dst = malloc(max);
    if (!src || !dst) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(src, rank + 1, max);
    memset(dst, 0, max);
    if (rank == 0) printf("# Node copy bound: %d ranks copy n bytes each at once\n"
                          "%-10s%18s%18s\n", p, "# Size", "Copy(us)", "NodeBW(GB/s)");
    for (size_t n = min; n <= max; n *= 2) {
        const int it = iters > 0 ? iters : (n > 1048576 ? 50 : 500);
        for (int w = 0; w < 5; ++w) memcpy(dst, src, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int k = 0; k < it; ++k) {
            memcpy(dst, src, n);
            __asm__ volatile("" ::: "memory"); /* keep every copy */
        }
        t = (MPI_Wtime() - t) / it;
        double worst;
        MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%-10zu%18.2f%18.2f\n", n, worst * 1e6, 2.0 * p * (double)n / worst / 1e9);
        }
        if (n > max / 2) break;
    }
    free(src);
    free(dst);
    MPI_Finalize();
    return 0;
}
