/*
 * The two special cases of allreduce_matrix: random floats (order-dependent rounding, checked by
 * tolerance and full bit-equality) and one message larger than 2 GiB (--big).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix_driver.h"

/* ------------------------------------------------------------------ random floats */

/* Deterministic value in [-1, 1) of (rank, i). */
static double rnd(int rank, size_t i) {
    uint64_t x = ((uint64_t)(unsigned)rank << 40) ^ i ^ 0x2545f4914f6cdd1dull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (double)(int64_t)x * 0x1p-63;
}

/*
 * Random float or double SUM (order-dependent rounding): result within a relative tolerance of
 * a double (long double for MPI_DOUBLE) reference, and the full result bit-identical on all
 * ranks (gathered to rank 0, memcmp).
 */
void run_random(struct ctx *cx, int si, bool dbl, int inplace) {
    struct shape *s = &cx->shapes[si];
    int p, rank;
    MPI_Comm_size(s->comm, &p);
    MPI_Comm_rank(s->comm, &rank);
    const char *tname = dbl ? "random(MPI_DOUBLE)" : "random(MPI_FLOAT)";
    snprintf(watchdog_case, sizeof watchdog_case, "shape=%s type=%s op=MPI_SUM inplace=%d", s->name,
             tname, inplace);
    size_t n = RANDOM_COUNT, esz = dbl ? sizeof(double) : sizeof(float);
    unsigned char *in = scratch(cx, 0, n * esz), *res = scratch(cx, 1, n * esz * 2);
    for (size_t i = 0; i < n; i++) {
        if (dbl) {
            ((double *)in)[i] = rnd(rank, i);
        } else {
            ((float *)in)[i] = (float)rnd(rank, i);
        }
    }
    struct record *rec = new_record(cx);
    rec->count = (int64_t)n;
    rec->group = s->group;
    rec->shape = (int16_t)si;
    rec->type = (int16_t)(dbl ? -2 : -1);
    rec->op = O_SUM;
    rec->inplace = (int8_t)inplace;
    bool reaches = p >= 2;
    struct twohop_counts c0 = twohop_pvars_read(&cx->pv);
    for (int call = 0; call < 2; call++) {
        unsigned char *r = res + (size_t)call * n * esz;
        if (inplace) {
            memcpy(r, in, n * esz);
        }
        int rc = MPI_Allreduce(inplace ? MPI_IN_PLACE : in, r, (int)n, dbl ? MPI_DOUBLE : MPI_FLOAT,
                               MPI_SUM, s->comm);
        if (rc != MPI_SUCCESS) {
            rec->fail |= F_MPI;
        }
    }
    struct twohop_counts c2 = twohop_pvars_read(&cx->pv);
    unsigned long long es = reaches ? 2 : 0, ds = c2.served - c0.served;
    unsigned long long df = c2.fallback - c0.fallback;
    s->exp_served += es;
    s->got_served += ds;
    s->got_fb += df;
    if (cx->opt.expect_twohop && (ds != es || df != 0)) {
        rec->fail |= F_PVAR;
    }
    if (memcmp(res, res + n * esz, n * esz) != 0) {
        rec->fail |= F_REPEAT;
    }
    /* Tolerance against a higher-precision reference in rank order. */
    double eps = dbl ? DBL_EPSILON : FLT_EPSILON;
    for (size_t i = 0; i < n; i++) {
        long double ref = 0, mag = 0;
        for (int q = 0; q < p; q++) {
            long double v = dbl ? (long double)rnd(q, i) : (long double)(float)rnd(q, i);
            ref += v;
            mag += fabsl(v);
        }
        long double got = dbl ? ((double *)res)[i] : ((float *)res)[i];
        if (fabsl(got - ref) > (long double)(p + 1) * eps * mag + 1e-30L) {
            char msg[256];
            snprintf(msg, sizeof msg, "element %zu: got %.17Lg want %.17Lg (+- %.3Lg)", i, got, ref,
                     (long double)(p + 1) * eps * mag);
            detail(cx, s, dbl ? -2 : -1, O_SUM, (long long)n, inplace, msg);
            rec->fail |= F_TOL;
            break;
        }
    }
    rec->hash = mt_hash(res, n * esz, 7);
    /* Full bit-equality: gather the whole result to rank 0 of this communicator. */
    unsigned char *all = rank == 0 ? malloc((size_t)p * n * esz) : NULL;
    MPI_Gather(res, (int)(n * esz), MPI_BYTE, all, (int)(n * esz), MPI_BYTE, 0, s->comm);
    int biteq_bad = 0;
    if (rank == 0) {
        for (int q = 1; q < p; q++) {
            biteq_bad |= memcmp(all, all + (size_t)q * n * esz, n * esz) != 0;
        }
        free(all);
    }
    if (biteq_bad) {
        rec->fail |= F_BITEQ;
        detail(cx, s, dbl ? -2 : -1, O_SUM, (long long)n, inplace,
               "full result differs between ranks (gather + memcmp)");
    }
}

/* ------------------------------------------------------------------ --big */

/* Input of the big case: small ints so the SUM fits in int for any sane rank count. */
static inline int big_val(int rank, size_t i) {
    return (int)((i * 2654435761u + (size_t)rank * 40503u) % 201) - 100;
}

/*
 * One message larger than 2 GiB: MPI_Type_contiguous(256, MPI_INT) x count, summed with the
 * commutative user op user_sum (MPI allows predefined ops on predefined datatypes only), first
 * not in place, then in place in the same receive buffer. Memory per rank: 2 x the message.
 */
void run_big(struct ctx *cx) {
    struct shape *s = &cx->shapes[0];
    int p, rank;
    MPI_Comm_size(s->comm, &p);
    MPI_Comm_rank(s->comm, &rank);
    MPI_Datatype dt;
    MPI_Type_contiguous(256, MPI_INT, &dt);
    MPI_Type_commit(&dt);
    size_t elem = 256 * sizeof(int);
    long long count = (long long)(cx->opt.big_gib * 1073741824.0 / (double)elem);
    size_t n = (size_t)count * 256, bytes = (size_t)count * elem;
    int *sendb = malloc(bytes);
    unsigned char *recvb = malloc(bytes + 2 * GUARD);
    if (!sendb || !recvb) {
        fprintf(stderr, "allreduce_matrix: --big: cannot allocate 2 x %zu bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int *r = (int *)(recvb + GUARD);
    for (int inplace = 0; inplace < 2; inplace++) {
        snprintf(watchdog_case, sizeof watchdog_case,
                 "big: type=contig256(MPI_INT) count=%lld (%zu bytes) op=user_sum inplace=%d",
                 count, bytes, inplace);
        struct record *rec = new_record(cx);
        rec->count = count;
        rec->group = s->group;
        rec->type = -3;
        rec->op = O_USER_SUM;
        rec->inplace = (int8_t)inplace;
        memset(recvb, CANARY, GUARD);
        memset(recvb + GUARD + bytes, CANARY, GUARD);
        int *src = inplace ? r : sendb;
        for (size_t i = 0; i < n; i++) {
            src[i] = big_val(rank, i);
        }
        struct twohop_counts c0 = twohop_pvars_read(&cx->pv);
        double t0 = MPI_Wtime();
        int rc = MPI_Allreduce(inplace ? MPI_IN_PLACE : sendb, r, (int)count, dt,
                               mt_op_handle(O_USER_SUM), s->comm);
        double t1 = MPI_Wtime();
        struct twohop_counts c1 = twohop_pvars_read(&cx->pv);
        if (rc != MPI_SUCCESS) {
            rec->fail |= F_MPI;
        }
        if (!all_bytes(recvb, GUARD, CANARY) || !all_bytes(recvb + GUARD + bytes, GUARD, CANARY)) {
            rec->fail |= F_CANARY;
        }
        for (size_t i = 0; i < n && !(rec->fail & F_VALUE); i++) {
            int want = 0;
            for (int q = 0; q < p; q++) {
                want += big_val(q, i);
            }
            if (r[i] != want) {
                char msg[128];
                snprintf(msg, sizeof msg, "int %zu: got %d want %d", i, r[i], want);
                detail(cx, s, -3, O_USER_SUM, count, inplace, msg);
                rec->fail |= F_VALUE;
            }
        }
        if (!inplace) {
            for (size_t i = 0; i < n && !(rec->fail & F_SENDBUF); i++) {
                if (sendb[i] != big_val(rank, i)) {
                    rec->fail |= F_SENDBUF;
                }
            }
        }
        unsigned long long ds = c1.served - c0.served, df = c1.fallback - c0.fallback;
        s->exp_served += p >= 2;
        s->got_served += ds;
        s->got_fb += df;
        if (cx->opt.expect_twohop && (ds != (p >= 2) || df != 0)) {
            rec->fail |= F_PVAR;
        }
        rec->hash = mt_hash(r, bytes, 7);
        if (rank == 0) {
            printf("# big: %zu bytes (count %lld x 1 KiB) inplace=%d: %.2f s%s\n", bytes, count,
                   inplace, t1 - t0, rec->fail ? " FAILED" : "");
        }
        if (inplace == 0) {
            free(sendb);
            sendb = NULL;
        }
    }
    free(recvb);
    MPI_Type_free(&dt);
}
