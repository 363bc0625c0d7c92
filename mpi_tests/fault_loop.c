/*
 * fault_loop: MPI_Allreduce in a loop for the multi-host fault scenarios (tests/multihost/).
 * Every iteration allreduces MPI_INT SUM with a count cycling through 1, 1000 and 70000
 * (latency path and pipeline), checks every element exactly, and carries rank 0's stop flag
 * in one extra element, so all ranks leave the loop together after --seconds.
 *
 * usage: fault_loop [--seconds S] [--expect-twohop] [--errors-return] [--die-rank R]
 *                   [--die-after I] [--timeout S]
 *   --seconds S       loop for S seconds of rank 0 (default 10)
 *   --expect-twohop   fail unless the twohop MPI_T counters show it served every call
 *   --errors-return   set MPI_ERRORS_RETURN on MPI_COMM_WORLD; a failed call is reported as
 *                     "ERROR-RETURNED rank R ..." and ends this rank with exit status 3
 *   --die-rank R      rank R raises SIGKILL on itself at iteration --die-after (default 20)
 *   --timeout S       watchdog: a rank still running after S s prints "WATCHDOG" and exits 124
 * Prints "# rank R pid P host H" at start (the scenarios use it to kill a rank from outside)
 * and "# looping" on rank 0 once the first allreduce is done.
 * Pass: exit 0 when every result was exact (and twohop served all calls, if asked).
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "twohop_pvars.h"

#define MAXN 70000

static int rank;
static volatile long iteration;

static void on_alarm(int sig) {
    (void)sig;
    char msg[128];
    int n = snprintf(msg, sizeof msg, "WATCHDOG rank %d: still in iteration %ld\n", rank,
                     iteration);
    if (write(STDOUT_FILENO, msg, (size_t)n) < 0) _exit(125);
    _exit(124);
}

int main(int argc, char **argv) {
    double seconds = 10;
    int expect_twohop = 0, errors_return = 0, die_rank = -1, die_after = 20, timeout_s = 120;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--expect-twohop")) expect_twohop = 1;
        else if (!strcmp(a, "--errors-return")) errors_return = 1;
        else if (!strcmp(a, "--seconds") && v) seconds = atof(argv[++i]);
        else if (!strcmp(a, "--die-rank") && v) die_rank = atoi(argv[++i]);
        else if (!strcmp(a, "--die-after") && v) die_after = atoi(argv[++i]);
        else if (!strcmp(a, "--timeout") && v) timeout_s = atoi(argv[++i]);
        else {
            fprintf(stderr, "fault_loop: unknown option %s (see the header of fault_loop.c)\n", a);
            return 2;
        }
    }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)timeout_s);
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char host[MPI_MAX_PROCESSOR_NAME];
    int hl;
    MPI_Get_processor_name(host, &hl);
    printf("# rank %d pid %d host %s\n", rank, (int)getpid(), host);
    fflush(stdout);
    if (errors_return) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    struct twohop_pvars pv;
    const int have_pvars = twohop_pvars_open(&pv);
    if (expect_twohop && !have_pvars) {
        printf("FAIL rank %d: --expect-twohop but %s\n", rank, pv.why);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct twohop_counts c0 = twohop_pvars_read(&pv);

    int *in = malloc((MAXN + 1) * sizeof(int)), *out = malloc((MAXN + 1) * sizeof(int));
    static const int counts[3] = {1, 1000, MAXN};
    long bad = 0;
    const double t0 = MPI_Wtime();
    for (iteration = 0;; ++iteration) {
        const int n = counts[iteration % 3];
        const int it = (int)(iteration % 1000);
        for (int j = 0; j < n; ++j) in[j] = rank * 7 + j % 13 + it;
        in[n] = rank == 0 && MPI_Wtime() - t0 >= seconds;
        if (rank == die_rank && iteration == die_after) {
            printf("# rank %d raises SIGKILL at iteration %ld\n", rank, iteration);
            fflush(stdout);
            raise(SIGKILL);
        }
        const double tc = MPI_Wtime();
        int rc = MPI_Allreduce(in, out, n + 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            int cls, len;
            char s[MPI_MAX_ERROR_STRING];
            MPI_Error_class(rc, &cls);
            MPI_Error_string(rc, s, &len);
            printf("ERROR-RETURNED rank %d iteration %ld: class %d (%s) after %.2f s in the call\n",
                   rank, iteration, cls, s, MPI_Wtime() - tc);
            fflush(stdout);
            _exit(3); /* MPI_Finalize would need the dead peer */
        }
        for (int j = 0; j < n; ++j) {
            if (out[j] != 7 * size * (size - 1) / 2 + size * (j % 13 + it)) {
                if (bad++ < 5)
                    printf("FAIL rank %d iteration %ld: element %d is %d, expected %d\n", rank,
                           iteration, j, out[j], 7 * size * (size - 1) / 2 + size * (j % 13 + it));
                break;
            }
        }
        if (iteration == 0 && rank == 0) {
            printf("# looping\n");
            fflush(stdout);
        }
        if (out[n]) break;
    }
    const long calls = iteration + 1;
    struct twohop_counts c1 = twohop_pvars_read(&pv);
    long served = (long)(c1.served - c0.served), fb = (long)(c1.fallback - c0.fallback);
    if (expect_twohop && (served != calls || fb != 0)) {
        printf("FAIL rank %d: twohop served %ld of %ld calls, fell back %ld\n", rank, served,
               calls, fb);
        bad++;
    }
    long total_bad = 0;
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("fault_loop: np=%d %ld calls in %.1f s, twohop served %ld on rank 0, %ld failures: "
               "%s\n",
               size, calls, MPI_Wtime() - t0, served, total_bad, total_bad ? "FAIL" : "PASS");
    twohop_pvars_close(&pv);
    free(in);
    free(out);
    MPI_Finalize();
    return total_bad ? 1 : 0;
}
