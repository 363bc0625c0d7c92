/*
 * The Linux scheduler's account of this process's threads, for benchmarks that must tell a slow
 * call from a thread that waited for a core: per thread, from /proc/self/task/<tid>/schedstat
 * (time on a CPU and time runnable but waiting on a run queue, nanoseconds, and the number of
 * time slices) and .../status (voluntary and involuntary context switches), with its name from
 * .../comm (twohop's proxy thread is "twohop-proxy"; the main thread prints as "main"). Needs a kernel with schedstats
 * (CONFIG_SCHED_INFO; without it the file is absent and the thread reads as zeros).
 *
 *   struct thread_sched before[64], after[64];
 *   int nb = thread_sched_snapshot(before, 64);
 *   ... work ...
 *   int na = thread_sched_snapshot(after, 64);
 *   thread_sched_print(stdout, rank, before, nb, after, na);
 *
 * thread_sched_print writes one line per thread that ran or waited at least 0.1 ms in between:
 * "# sched rank R tid T NAME run_ms X wait_ms Y slices S involuntary I voluntary V"
 * (times in milliseconds; counts are differences; a thread absent from `before` counts from
 * zero).
 */
#ifndef TWOHOP_TESTS_THREAD_SCHED_H
#define TWOHOP_TESTS_THREAD_SCHED_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct thread_sched {
    int tid;
    char name[32];
    double run_ms, wait_ms; /* on a CPU; runnable, waiting on a run queue */
    long slices, nvcsw, nivcsw;
};

/* Reads the first line of /proc/self/task/<tid>/<file> into buf (empty when unreadable). */
static void thread_sched_read(int tid, const char *file, char *buf, size_t len) {
    char path[96];
    snprintf(path, sizeof(path), "/proc/self/task/%d/%s", tid, file);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* This process's threads now, at most `max` of them. Returns how many were stored. */
static int thread_sched_snapshot(struct thread_sched *out, int max) {
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        struct thread_sched *t = &out[n];
        memset(t, 0, sizeof(*t));
        t->tid = atoi(e->d_name);
        thread_sched_read(t->tid, "comm", t->name, sizeof(t->name));
        for (char *c = t->name; *c; c++) {
            if (*c == ' ') *c = '_'; /* one field in the printed line */
        }
        char line[256];
        thread_sched_read(t->tid, "schedstat", line, sizeof(line));
        unsigned long long run = 0, wait = 0, slices = 0;
        if (sscanf(line, "%llu %llu %llu", &run, &wait, &slices) == 3) {
            t->run_ms = run / 1e6;
            t->wait_ms = wait / 1e6;
            t->slices = (long)slices;
        }
        char path[96];
        snprintf(path, sizeof(path), "/proc/self/task/%d/status", t->tid);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            while (fgets(line, sizeof(line), f) != NULL) {
                long v;
                if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) t->nvcsw = v;
                if (sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1) t->nivcsw = v;
            }
            fclose(f);
        }
        ++n;
    }
    closedir(d);
    return n;
}

/* The differences between two snapshots, one line per thread that ran or waited 0.1 ms. */
static void thread_sched_print(FILE *out, int rank, const struct thread_sched *before, int nb,
                               const struct thread_sched *after, int na) {
    for (int i = 0; i < na; i++) {
        const struct thread_sched *a = &after[i];
        struct thread_sched zero;
        memset(&zero, 0, sizeof(zero));
        const struct thread_sched *b = &zero;
        for (int j = 0; j < nb; j++) {
            if (before[j].tid == a->tid) b = &before[j];
        }
        const double run = a->run_ms - b->run_ms, wait = a->wait_ms - b->wait_ms;
        if (run < 0.1 && wait < 0.1) continue;
        fprintf(out,
                "# sched rank %d tid %d %s run_ms %.1f wait_ms %.1f slices %ld involuntary %ld "
                "voluntary %ld\n",
                rank, a->tid, a->tid == (int)getpid() ? "main" : a->name[0] ? a->name : "?",
                run, wait, a->slices - b->slices,
                a->nivcsw - b->nivcsw, a->nvcsw - b->nvcsw);
    }
    fflush(out);
}

#endif
