/*
 * pmpi_settings: the PMPI library's (libtwohop_pmpi.so) settings agreement and communicator
 * lifecycle, under any MPI. Exits 0 when the library behaves as README.md promises.
 *
 *   agree    no TWOHOP_* settings: twohop serves (its counter grows), on communicators that are
 *            dup'ed, used, freed (the attribute's delete callback releases the state) and on one
 *            left alive through MPI_Finalize
 *   differ   rank 1 sets TWOHOP_PIPELINE_DEPTH=3 before MPI_Init, the others do not: the ranks
 *            agree at MPI_Init to run without twohop; every call is served by the MPI, exactly
 *   invalid  every rank sets TWOHOP_SEGMENT_BYTES=12x (not a size): twohop off, exact results
 *   off      TWOHOP_PRIORITY=-1 on every rank: twohop off, exact results
 * The rank is read from the launcher's environment before MPI_Init (PMI_RANK under MPICH's
 * Hydra, OMPI_COMM_WORLD_RANK under Open MPI). Run it through mpi_tests/run_mpi.sh -c pmpi.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "twohop_pvars.h"

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "pmpi_settings: FAIL: hang (no completion within 60 s)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static int launcher_rank(void) {
    const char *r = getenv("PMI_RANK");
    if (r == NULL) r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? atoi(r) : -1;
}

/* `rounds` allreduces of 100000 ints (SUM) and one of 3 doubles (MAX) on comm; 1 when exact. */
static int exact_calls(MPI_Comm comm, int rounds) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int n = 100000;
    int *in = malloc(sizeof(int) * n), *out = malloc(sizeof(int) * n);
    int ok = in && out;
    for (int r = 0; ok && r < rounds; ++r) {
        for (int i = 0; i < n; ++i) in[i] = rank * 7 + i % 13 + r;
        if (MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS) ok = 0;
        for (int i = 0; ok && i < n; ++i) {
            const int want = 7 * size * (size - 1) / 2 + size * (i % 13 + r);
            if (out[i] != want) {
                fprintf(stderr, "pmpi_settings: rank %d: element %d = %d, want %d\n", rank, i,
                        out[i], want);
                ok = 0;
            }
        }
        double d[3] = {rank, -rank, 0.5 * rank}, m[3];
        if (MPI_Allreduce(d, m, 3, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS ||
            m[0] != size - 1 || m[1] != 0 || m[2] != 0.5 * (size - 1)) {
            ok = 0;
        }
    }
    free(in);
    free(out);
    return ok;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const int lr = launcher_rank();
    if (!strcmp(mode, "differ") && lr == 1) setenv("TWOHOP_PIPELINE_DEPTH", "3", 1);
    if (!strcmp(mode, "invalid")) setenv("TWOHOP_SEGMENT_BYTES", "12x", 1);
    if (!strcmp(mode, "off")) setenv("TWOHOP_PRIORITY", "-1", 1);
    if (strcmp(mode, "agree") && strcmp(mode, "differ") && strcmp(mode, "invalid") &&
        strcmp(mode, "off")) {
        fprintf(stderr, "usage: pmpi_settings agree|differ|invalid|off\n");
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm(60);
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct twohop_pvars pv;
    int ok = 1;
    if (!twohop_pvars_open(&pv) || !pv.pmpi) {
        fprintf(stderr, "pmpi_settings: libtwohop_pmpi.so is not loaded (%s)\n", pv.why);
        ok = 0;
    }
    ok &= exact_calls(MPI_COMM_WORLD, 3);
    for (int k = 0; ok && k < 4; ++k) { /* state created and released per communicator */
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        ok &= exact_calls(dup, 2);
        MPI_Comm_free(&dup);
    }
    MPI_Comm alive; /* left for MPI_Finalize */
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &alive);
    ok &= exact_calls(alive, 1);
    const struct twohop_counts c = twohop_pvars_read(&pv);
    const int served_expected = !strcmp(mode, "agree");
    if (served_expected ? c.served == 0 : c.served != 0) {
        fprintf(stderr, "pmpi_settings: rank %d: mode %s: twohop served %llu calls (expected %s)\n",
                rank, mode, c.served, served_expected ? "> 0" : "0");
        ok = 0;
    }
    if (!served_expected && c.fallback != 0) {
        fprintf(stderr, "pmpi_settings: rank %d: twohop off but counted %llu fallbacks\n", rank,
                c.fallback);
        ok = 0;
    }
    twohop_pvars_close(&pv);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("pmpi_settings %s: %s (rank 0 served %llu)\n", mode, all ? "PASS" : "FAIL", c.served);
    MPI_Finalize();
    return all ? 0 : 1;
}
